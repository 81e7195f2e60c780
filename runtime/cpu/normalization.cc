// CPU kernels for LayerNormalization and BatchNormalization.
//
// Kernels are keyed on X. Every other operand is read in its own element type (BatchNormalization's
// scale, bias and statistics are pinned to f32 when X is f16 or bf16) and everything is computed
// in X's compute type: f32 for f16, bf16 and f32, f64 for f64.
//
// LayerNormalization normalizes each row of the dims from `axis` on (n elements):
//   mean     = (x_0 + ... + x_{n-1}) / n                      sequential sum
//   var      = ((x_0 - mean)^2 + ... + (x_{n-1} - mean)^2) / n  sequential sum
//   inv_std  = 1 / sqrt(var + epsilon)
//   y_j      = (x_j - mean) * inv_std * scale_j + bias_j      left to right, rounded once
// Mean and InvStdDev are stored in their stash type (f32 or bf16), rounded once from the compute
// type (from f64 through f32 for an f64 X with a bf16 stash). Scale and B broadcast to X.
//
// BatchNormalization, per channel c of X [N, C, D1, ...] (1-D X is [N] with one channel):
//   inference (and opsets 9-13): mean, var = input_mean, input_var
//   training_mode=1:             mean = sum of x / count, var = sum of (x - mean)^2 / count over
//                                (n, d) in row-major order: the biased (population) variance
//                                (batch_statistics.h)
//   ampc.SyncBatchNormalization: the same over the batches of every rank of the execution
//                                context's group together
//   y = (x - mean) / sqrt(var + epsilon) * scale + B
//   running_mean = input_mean * momentum + mean * (1 - momentum)
//   running_var  = input_var * momentum + var * (1 - momentum)
// ONNX BatchNormalization-15 puts the same population variance into running_var (PyTorch uses
// the unbiased one there); we follow ONNX. Running statistics take input_mean's element type.
//
// Rows (LayerNormalization) and channels (BatchNormalization statistics) are spread over threads,
// each computed by one, so the bits do not depend on the thread count. Each output element is
// written after its own X element is read, so Y may share X's buffer.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/batch_statistics.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

float float_attr_or(const Node& node, std::string_view name, float fallback) {
  const AttrValue* value = node.find_attr(name);
  if (value == nullptr) return fallback;
  if (const int64_t* integer = std::get_if<int64_t>(value)) return static_cast<float>(*integer);
  return std::get<float>(*value);
}

// ---- LayerNormalization --------------------------------------------------------------------

// Maps a flat index of X to the flat index of an operand that broadcasts to X.
class BroadcastIndex {
 public:
  BroadcastIndex(const Shape& x, const Shape& operand) : x_(x), strides_(x.size(), 0) {
    const size_t offset = x.size() - operand.size();
    int64_t stride = 1;
    for (size_t d = operand.size(); d-- > 0;) {
      if (operand[d] != 1) strides_[offset + d] = stride;
      stride *= operand[d];
    }
    // Common case: the operand (without leading 1s) is X's trailing dims, so it repeats.
    size_t first = 0;
    while (first < operand.size() && operand[first] == 1) ++first;
    suffix_ = std::equal(operand.begin() + first, operand.end(), x.end() - (operand.size() - first),
                         x.end());
    operand_size_ = stride;
  }

  int64_t operator()(int64_t flat) const {
    if (suffix_) return flat % operand_size_;
    int64_t offset = 0;
    for (size_t d = x_.size(); d-- > 0;) {
      offset += (flat % x_[d]) * strides_[d];
      flat /= x_[d];
    }
    return offset;
  }

 private:
  Shape x_;
  std::vector<int64_t> strides_;
  bool suffix_ = false;
  int64_t operand_size_ = 1;
};

template <typename T>
absl::Status layer_norm(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Shape& shape = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = ctx.node.int_attr("axis");
  if (axis < 0) axis += rank;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? rows : n) *= shape[d];
  const C epsilon = static_cast<C>(ctx.node.float_attr("epsilon"));

  std::span<const T> x = ctx.input(0).in<T>();
  std::span<const T> scale = ctx.input(1).in<T>();
  const BroadcastIndex scale_index(shape, ctx.input(1).shape());
  const bool has_bias = ctx.has_input(2);
  std::span<const T> bias = has_bias ? ctx.input(2).in<T>() : std::span<const T>();
  const BroadcastIndex bias_index(shape, has_bias ? ctx.input(2).shape() : Shape{});
  std::span<T> y = ctx.output(0).out<T>();

  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t row = begin; row < end; ++row) {
                   const int64_t first = row * n;
                   C sum = 0;
                   for (int64_t j = 0; j < n; ++j) sum += load(x[first + j]);
                   const C mean = sum / static_cast<C>(n);
                   C square_sum = 0;
                   for (int64_t j = 0; j < n; ++j) {
                     const C centered = load(x[first + j]) - mean;
                     square_sum += centered * centered;
                   }
                   const C var = square_sum / static_cast<C>(n);
                   const C inv_std = C(1) / std::sqrt(var + epsilon);
                   for (int64_t j = 0; j < n; ++j) {
                     const int64_t i = first + j;
                     C value = (load(x[i]) - mean) * inv_std * load(scale[scale_index(i)]);
                     if (has_bias) value += load(bias[bias_index(i)]);
                     y[i] = store<T>(value);
                   }
                   if (ctx.has_output(1)) write_as<C>(ctx.output(1), row, mean);
                   if (ctx.has_output(2)) write_as<C>(ctx.output(2), row, inv_std);
                 }
               });
  return absl::OkStatus();
}

// ---- BatchNormalization --------------------------------------------------------------------

// `sync`: ampc.SyncBatchNormalization, statistics over the ranks of the execution context's group.
template <typename T, bool sync>
absl::Status batch_norm(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Node& node = ctx.node;
  const BatchShape shape(ctx.input(0).shape());
  const int64_t batch = shape.batch, channels = shape.channels, spatial = shape.spatial;
  // Every opset has training_mode: the importer records opsets 9-13's training form in it.
  const bool training = sync || int_attr_or(node, "training_mode", 0) != 0;
  const C epsilon = static_cast<C>(float_attr_or(node, "epsilon", 1e-5f));
  const C momentum = static_cast<C>(float_attr_or(node, "momentum", 0.9f));

  std::span<const T> x = ctx.input(0).in<T>();
  std::span<T> y = ctx.output(0).out<T>();
  const std::vector<C> scale = read_all_as<C>(ctx.input(1));
  const std::vector<C> bias = read_all_as<C>(ctx.input(2));
  const std::vector<C> input_mean = read_all_as<C>(ctx.input(3));
  const std::vector<C> input_var = read_all_as<C>(ctx.input(4));

  std::vector<C> mean = input_mean, var = input_var;
  if (training) {
    comm::Communicator* group = sync && ctx.exec != nullptr ? ctx.exec->communicator : nullptr;
    AMPC_RETURN_IF_ERROR(batch_statistics<T>(x, shape, group, mean, var).status());
  }

  std::vector<C> std_dev(channels);
  for (int64_t c = 0; c < channels; ++c) std_dev[c] = std::sqrt(var[c] + epsilon);
  parallel_for(batch * channels, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, spatial)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t block = begin; block < end; ++block) {
                   const int64_t c = block % channels;
                   // Locals no store can alias, so the loop vectorizes (the same operations).
                   const C m = mean[c], d = std_dev[c], g = scale[c], b = bias[c];
                   const T* in = x.data() + block * spatial;
                   T* out = y.data() + block * spatial;
#pragma omp simd
                   for (int64_t i = 0; i < spatial; ++i) {
                     out[i] = store<T>((load(in[i]) - m) / d * g + b);
                   }
                 }
               });

  if (training) {
    const C keep = momentum, take = C(1) - momentum;
    for (int64_t c = 0; c < channels; ++c) {
      if (ctx.has_output(1)) write_as<C>(ctx.output(1), c, input_mean[c] * keep + mean[c] * take);
      if (ctx.has_output(2)) write_as<C>(ctx.output(2), c, input_var[c] * keep + var[c] * take);
    }
  }
  return absl::OkStatus();
}

void register_normalization_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("LayerNormalization", {.in_place_operand = 0}),
      []<typename T>() { return &layer_norm<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("BatchNormalization", {.in_place_operand = 0}),
      []<typename T>() { return &batch_norm<T, false>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("SyncBatchNormalization", {.in_place_operand = 0}),
      []<typename T>() { return &batch_norm<T, true>; });
}

static KernelRegistration kNormalizationKernels(&register_normalization_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
