#include "compiler/flops.h"

namespace ampc {
namespace {

int64_t elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

int64_t product_from(const Shape& shape, size_t first) {
  int64_t n = 1;
  for (size_t i = first; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

int64_t matrix_flops(const Node& node) {
  const std::string& op = node.op_type();
  const bool onnx = node.domain().empty();
  const bool ampc = node.domain() == kAmpcDomain;
  if (!(onnx || ampc) || node.num_operands() < 2 || !node.has_operand(0) || !node.has_operand(1) ||
      !node.has_output(0)) {
    return 0;
  }
  const Shape& a = node.operand(0)->shape();
  const Shape& b = node.operand(1)->shape();
  const int64_t out = elements(node.output(0)->shape());
  if (out < 0 || elements(a) < 0 || elements(b) < 0) return 0;
  if (onnx && op == "MatMul") {
    // Each output element is a dot product over A's last dimension (a 1-D A is one row).
    return a.empty() ? 0 : 2 * out * a.back();
  }
  if (onnx && op == "Gemm") {
    if (a.size() != 2) return 0;
    const int64_t k = node.int_attr("transA") != 0 ? a[0] : a[1];
    return 2 * out * k;
  }
  if (onnx && op == "Conv") {
    // Y [N, M, out...] from W [M, C / group, k...]: each output element sums C / group * k taps.
    return b.size() < 2 ? 0 : 2 * out * product_from(b, 1);
  }
  if (onnx && op == "ConvTranspose") {
    // X [N, C, in...] scattered through W [C, M / group, k...]: each input element feeds
    // M / group * k outputs.
    return b.size() < 2 ? 0 : 2 * elements(a) * product_from(b, 1);
  }
  if (ampc && op == "ConvGradData") {
    // dX from dY [N, M, out...] and W [M, C / group, k...]: the forward convolution's products.
    return b.size() < 2 ? 0 : 2 * elements(a) * product_from(b, 1);
  }
  if (ampc && op == "ConvGradFilter") {
    // dW [M, C / group, k...] from X and dY [N, M, out...]: each dW element sums N * out terms.
    return b.size() < 2 ? 0 : 2 * out * b[0] * product_from(b, 2);
  }
  if (ampc && op == "Attention" && node.num_operands() >= 3 && !a.empty() && !b.empty()) {
    // The two products of the pattern it fused: Q Kt (T x S dots over D) and P V (over S).
    return 2 * elements(a) * b.back() + 2 * out * b.back();
  }
  if (ampc && op == "AttentionGrad" && node.num_operands() >= 3 && !a.empty()) {
    // The four products of the unfused backward (dP, dV, dQ, dKt), not the recomputed scores.
    const Shape& kt = node.operand(2)->shape();
    const int64_t s = kt.empty() ? 0 : kt.back();
    return 4 * elements(a) * s + 4 * elements(node.operand(1)->shape()) * s;
  }
  return 0;
}

int64_t matrix_flops(const Graph& graph) {
  int64_t total = 0;
  for (const auto& node : graph.nodes()) total += matrix_flops(*node);
  return total;
}

}  // namespace ampc
