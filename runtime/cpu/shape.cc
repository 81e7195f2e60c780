// CPU kernels for the shape and view ops: Reshape, Flatten, Squeeze, Unsqueeze, Identity, Shape,
// Expand and Dropout.
//
// Views hold the input's elements in the same order, so they are one byte copy (none when the
// planner gave output 0 the input's buffer). Expand moves elements as unsigned words of the
// element size, so one kernel per size serves every dtype; no value is converted. Dropout is the
// one op here that computes: in training it scales kept elements by 1/(1-ratio) in the compute
// type (f32 for f16/bf16) and rounds once. Its mask is a hash of (seed, random stream, element
// index) (runtime/random_math.h, shared with CUDA): the same on any thread count, on every run
// and on every device, and not PyTorch's (nor numpy's) random stream. A node without a `seed`
// attribute draws from seed 0 (the training-step pass gives each Dropout of a step its own).
//
// Output shapes were inferred at load; the kernels read them instead of re-reading `shape` or
// `axes` inputs.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/numeric.h"
#include "runtime/random_math.h"

namespace ampc::runtime::cpu {
namespace {

// Copies `bytes` bytes in parallel chunks; nothing when the buffers are the same (in place).
void copy_bytes(void* to, const void* from, int64_t bytes) {
  if (to == from || bytes == 0) return;
  parallel_for(bytes, kGrainBytes, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<std::byte*>(to) + begin, static_cast<const std::byte*>(from) + begin,
                end - begin);
  });
}

// ---- Views ------------------------------------------------------------------------------------

// Reshape, Flatten, Squeeze, Unsqueeze, Identity: same bytes, new shape.
absl::Status view_kernel(const KernelContext& ctx) {
  copy_bytes(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size());
  return absl::OkStatus();
}

// ---- Shape ------------------------------------------------------------------------------------

// Dims [start, end) of the input's shape, as inference reads them (ops::shape_range).
absl::Status shape_kernel(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const auto [start, end] = ops::shape_range(ctx.node, static_cast<int64_t>(shape.size()));
  std::span<int64_t> out = ctx.output(0).out<int64_t>();
  AMPC_CHECK(static_cast<int64_t>(out.size()) == end - start);
  std::copy(shape.begin() + start, shape.begin() + start + out.size(), out.begin());
  return absl::OkStatus();
}

// ---- Expand -----------------------------------------------------------------------------------

// Broadcasts the input to the inferred output shape: input dims of size 1 (and missing leading
// dims) are read with stride 0.
template <typename Word>
absl::Status expand_kernel(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const size_t lead = out_shape.size() - in_shape.size();
  std::vector<int64_t> strides(out_shape.size(), 0);
  int64_t stride = 1;
  for (int d = static_cast<int>(in_shape.size()) - 1; d >= 0; --d) {
    if (in_shape[d] != 1) strides[lead + d] = stride;
    stride *= in_shape[d];
  }
  strided_copy(ctx.input(0).in<Word>().data(), 0, strides, out_shape,
               ctx.output(0).out<Word>().data());
  return absl::OkStatus();
}

// ---- Dropout ----------------------------------------------------------------------------------

// Inference (no training_mode, or false, or ratio 0): the identity, mask all true. Training:
// element i is kept when dropout_keeps(seed, i), and output = x * (kept ? 1/(1-ratio) : 0) in
// the compute type, rounded once (so, as in ONNX's reference and PyTorch, a dropped inf is NaN).
template <typename T>
absl::Status dropout_kernel(const KernelContext& ctx) {
  const double ratio =
      ctx.has_input(1) ? read_as<double>(ctx.input(1), 0) : ctx.node.float_attr("ratio");
  const bool training = ctx.has_input(2) && ctx.input(2).in<uint8_t>()[0] != 0;
  const int64_t n = ctx.input(0).num_elements();
  bool* mask = ctx.has_output(1) ? ctx.output(1).out<bool>().data() : nullptr;
  if (!training || ratio == 0) {
    copy_bytes(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size());
    if (mask != nullptr) std::fill_n(mask, n, true);
    return absl::OkStatus();
  }
  if (!(ratio > 0 && ratio < 1)) {
    return absl::InvalidArgumentError(str_cat("ratio ", ratio, " is not in [0, 1)"));
  }
  const uint64_t key = numeric::random_key(
      static_cast<uint64_t>(ops::random_seed(ctx.node).value_or(0)), ctx.random_stream);
  const compute_t<T> scale = static_cast<compute_t<T>>(1.0 / (1.0 - ratio));
  const T* in = ctx.input(0).in<T>().data();
  T* out = ctx.output(0).out<T>().data();
  parallel_for(n, kGrainElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const bool keep = numeric::dropout_keeps(key, i, ratio);
      out[i] = store<T>(load(in[i]) * (keep ? scale : compute_t<T>(0)));
      if (mask != nullptr) mask[i] = keep;
    }
  });
  return absl::OkStatus();
}

void register_shape_kernels(KernelRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    add_kernel_for_all_dtypes(r, kernel_def(op, {.in_place_operand = 0}), &view_kernel);
  }
  add_kernel_for_all_dtypes(r, kernel_def("Shape"), &shape_kernel);
  add_kernels_by_element_size(r, kernel_def("Expand"),
                              []<typename Word>() { return &expand_kernel<Word>; });
  // Dropout's OpDef admits float data only.
  add_kernels<float, double, Float16, BFloat16>(r, kernel_def("Dropout", {.in_place_operand = 0}),
                                                []<typename T>() { return &dropout_kernel<T>; });
}

static KernelRegistration kShapeKernels(&register_shape_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
