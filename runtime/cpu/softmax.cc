// CPU kernels for Softmax and LogSoftmax.
//
// From opset 13 both normalize along one axis (default -1). Before 13 they coerce the input to
// 2-D at `axis` (default 1) and normalize each row of the trailing dims taken together; the kernel
// picks the form from the node's OpDef, or from the graph's opset when the node has none.
//
// Numerics, per row of n elements (f32 for f16, bf16 and f32 inputs; f64 for f64):
//   m   = max of the row (NaN elements are skipped here and propagate through the sum)
//   e_i = exp(x_i - m)
//   s   = e_0 + e_1 + ... + e_{n-1}, sequentially
//   Softmax:    y_i = e_i / s
//   LogSoftmax: y_i = (x_i - m) - log(s)
// and each y_i is rounded once on store. Rows are spread over threads, each row computed by one.
// A row is read completely before it is written, so the output may share the input's buffer.
// Subtracting the maximum keeps exp from overflowing (Softmax of [1000, 0] is exactly [1, 0]);
// a row of -inf only (a fully masked row) gives NaN, as it does in ONNX's reference and PyTorch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "compiler/op_def.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/vector_math.h"

namespace ampc::runtime::cpu {
namespace {

// The rows the kernel normalizes: `outer` blocks of `length * inner` elements; row (o, i) holds
// the elements o * length * inner + i + k * inner for k in [0, length).
struct RowLayout {
  int64_t outer = 1, length = 1, inner = 1;
};

RowLayout row_layout(const Node& node, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t since_opset =
      node.def() != nullptr ? node.def()->since_opset : node.graph()->opset(node.domain());
  const bool coerce_to_2d = since_opset < 13;
  int64_t axis = int_attr_or(node, "axis", coerce_to_2d ? 1 : -1);
  if (axis < 0) axis += rank;
  AMPC_CHECK(axis >= 0 && axis <= rank);  // inference validated it
  RowLayout layout;
  for (int64_t d = 0; d < axis; ++d) layout.outer *= shape[d];
  if (coerce_to_2d) {
    for (int64_t d = axis; d < rank; ++d) layout.length *= shape[d];
  } else {
    AMPC_CHECK(axis < rank);
    layout.length = shape[axis];
    for (int64_t d = axis + 1; d < rank; ++d) layout.inner *= shape[d];
  }
  return layout;
}

// Normalizes the row whose element k is at first + k * stride; `scratch` holds 2 n values.
template <typename T, bool kLog>
void softmax_row(std::span<const T> in, std::span<T> out, int64_t first, int64_t n, int64_t stride,
                 std::vector<compute_t<T>>& scratch) {
  using C = compute_t<T>;
  C max = -std::numeric_limits<C>::infinity();
  for (int64_t k = 0; k < n; ++k) max = std::max(max, load(in[first + k * stride]));
  C* shifted = scratch.data();
  C* e = scratch.data() + n;
  for (int64_t k = 0; k < n; ++k) shifted[k] = load(in[first + k * stride]) - max;
  exp_array(shifted, e, n);
  C sum = 0;
  for (int64_t k = 0; k < n; ++k) sum += e[k];
  if constexpr (kLog) {
    const C log_sum = std::log(sum);
    for (int64_t k = 0; k < n; ++k) out[first + k * stride] = store<T>(shifted[k] - log_sum);
  } else {
    for (int64_t k = 0; k < n; ++k) out[first + k * stride] = store<T>(e[k] / sum);
  }
}

template <typename T, bool kLog>
absl::Status softmax(const KernelContext& ctx) {
  const RowLayout layout = row_layout(ctx.node, ctx.input(0).shape());
  std::span<const T> in = ctx.input(0).in<T>();
  std::span<T> out = ctx.output(0).out<T>();
  const int64_t n = layout.length, stride = layout.inner;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  parallel_for(layout.outer * layout.inner, grain, [&](int64_t begin, int64_t end) {
    std::vector<compute_t<T>> scratch(2 * n);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t first = (row / stride) * n * stride + row % stride;
      softmax_row<T, kLog>(in, out, first, n, stride, scratch);
    }
  });
  return absl::OkStatus();
}

void register_softmax_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(r, kernel_def("Softmax", {.in_place_operand = 0}),
                                                []<typename T>() { return &softmax<T, false>; });
  add_kernels<float, double, Float16, BFloat16>(r,
                                                kernel_def("LogSoftmax", {.in_place_operand = 0}),
                                                []<typename T>() { return &softmax<T, true>; });
}

static KernelRegistration kSoftmaxKernels(&register_softmax_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
