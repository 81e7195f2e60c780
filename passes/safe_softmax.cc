// safe-softmax: the gradient of PyTorch's "safe softmax" as exported, without NaN.
//
// PyTorch's scaled_dot_product_attention gives a query row that keeps no key zeros instead of
// the NaN a softmax over a row of -inf is, and the exporters write it so:
//   p = Softmax(x); y = Where(IsNaN(p), 0, p)
// The forward is finite, but autodiff's Softmax gradient on such a row is p (dy - sum(dy p)) with
// p NaN: NaN, though Where gives it dy = 0, and every weight the scores come from turns NaN
// (PyTorch's own backward of the fused op is 0 there). On the training step this pass makes the
// rows that are all -inf explicit, so that the Softmax never sees them:
//   full = Equal(ReduceMax(x, axis, keepdims), -inf)
//   p    = Softmax(Where(full, 0, x));  y = Where(Or(IsNaN(p), full), 0, p)
// y is the same as before for every x (a row of -inf is 0 both ways; a NaN or +inf in a row still
// makes its softmax NaN, which IsNaN still zeroes), and a full row's gradient is 0, as PyTorch's.
// The eval graph keeps the exported form.
//
// Numerics: bit-identical forward; a row that is not all -inf is computed as before.
#include <cmath>
#include <limits>
#include <unordered_map>

#include "compiler/strings.h"
#include "passes/mask_data.h"
#include "passes/passes.h"

namespace ampc {
namespace {

bool is_op(const Node* node, std::string_view op) {
  return node != nullptr && node->domain() == kOnnxDomain && node->op_type() == op;
}

// The Softmax whose NaNs `where` zeroes: Where(IsNaN(p), 0, p) with p = Softmax(x); else null.
Node* guarded_softmax(const Node& where) {
  if (!is_op(&where, "Where") || constant_scalar(where.operand(1)) != 0.0) return nullptr;
  const Node* is_nan = where.operand(0)->producer();
  Value* p = where.operand(2);
  if (!is_op(is_nan, "IsNaN") || is_nan->operand(0) != p) return nullptr;
  Node* softmax = p->producer();
  return is_op(softmax, "Softmax") ? softmax : nullptr;
}

Value* scalar_constant(Graph& graph, std::string_view name, DType dtype, double value) {
  Value* init = graph.add_initializer(graph.unique_value_name(name),
                                      Tensor::from_doubles(dtype, {}, {value}));
  init->set_constant(true);
  return init;
}

Value* output_named(Node* node, Graph& graph, std::string_view name) {
  Value* out = node->output(0);
  out->set_name(graph.unique_value_name(name));
  return out;
}

class SafeSoftmaxPass final : public Pass {
 public:
  std::string_view name() const override { return "safe-softmax"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    // Each rewritten Softmax's rows of -inf, for every guard that reads it.
    std::unordered_map<const Node*, Value*> full_rows;
    for (Node* where : graph.node_list()) {
      Node* softmax = guarded_softmax(*where);
      if (softmax == nullptr) continue;
      auto [it, first] = full_rows.emplace(softmax, nullptr);
      if (first) it->second = keep_full_rows_out(graph, *softmax);
      Value* nan = where->operand(0);
      Node* either =
          graph.create_node(kOnnxDomain, "Or", {nan, it->second}, {nan->type()}, {}, where);
      either->set_name(str_cat(softmax->name(), "/safe_softmax/zeroed"));
      where->set_operand(0, output_named(either, graph, str_cat(nan->name(), ".or_fully_masked")));
    }
    if (!full_rows.empty()) {
      describe_undecided_nodes(graph, "safe softmax: rows of -inf kept out of the Softmax");
    }
    return !full_rows.empty();
  }

 private:
  // Makes `softmax` read Where(full, 0, x) and returns full, whether each row is all -inf.
  static Value* keep_full_rows_out(Graph& graph, Node& softmax) {
    Value* x = softmax.operand(0);
    const TensorType& type = x->type();
    const int64_t rank = static_cast<int64_t>(type.shape.size());
    int64_t axis = softmax.int_attr("axis");
    if (axis < 0) axis += rank;
    Shape row_shape = type.shape;
    row_shape[axis] = 1;
    const std::string prefix = str_cat(softmax.name(), "/safe_softmax");

    Node* top = graph.create_node(
        kOnnxDomain, "ReduceMax", {x}, {TensorType{type.dtype, row_shape}},
        {{"axes", std::vector<int64_t>{axis}}, {"keepdims", int64_t{1}}}, &softmax);
    top->set_name(str_cat(prefix, "/row_max"));
    Value* ninf = scalar_constant(graph, str_cat(x->name(), ".ninf"), type.dtype,
                                  -std::numeric_limits<double>::infinity());
    Node* full = graph.create_node(kOnnxDomain, "Equal",
                                   {output_named(top, graph, str_cat(x->name(), ".row_max")), ninf},
                                   {TensorType{DType::kBool, row_shape}}, {}, &softmax);
    full->set_name(str_cat(prefix, "/full"));
    Value* full_rows = output_named(full, graph, str_cat(x->name(), ".fully_masked"));
    Value* zero = scalar_constant(graph, str_cat(x->name(), ".zero"), type.dtype, 0.0);
    Node* rows =
        graph.create_node(kOnnxDomain, "Where", {full_rows, zero, x}, {type}, {}, &softmax);
    rows->set_name(str_cat(prefix, "/rows"));
    softmax.set_operand(0, output_named(rows, graph, str_cat(x->name(), ".safe")));
    return full_rows;
  }
};

}  // namespace

std::unique_ptr<Pass> make_safe_softmax_pass() { return std::make_unique<SafeSoftmaxPass>(); }

}  // namespace ampc
