#include "compiler/grad_builder.h"

#include "compiler/strings.h"

namespace ampc {

GradBuilder::GradBuilder(Graph& graph, const Node& forward, std::vector<Value*> output_grads,
                         std::vector<bool> needs_grad)
    : graph_(graph),
      forward_(forward),
      output_grads_(std::move(output_grads)),
      needs_grad_(std::move(needs_grad)) {}

Value* GradBuilder::grad_of_output(int i) const {
  return i < static_cast<int>(output_grads_.size()) ? output_grads_[i] : nullptr;
}

Value* GradBuilder::grad_of_output_or_zeros(int i) {
  if (Value* grad = grad_of_output(i)) return grad;
  Tensor zeros(output(i)->type());
  return constant(std::move(zeros));
}

bool GradBuilder::needs_grad(int i) const {
  return i < static_cast<int>(needs_grad_.size()) && needs_grad_[i];
}

std::string GradBuilder::value_name(std::string_view op_type) const {
  const std::string& base = forward_.has_output(0) ? forward_.output(0)->name() : forward_.name();
  return graph_.unique_value_name(str_cat(base, ".bwd_", op_type));
}

std::vector<Value*> GradBuilder::op_n(std::string_view domain, std::string_view op_type,
                                      const std::vector<Value*>& operands, int num_outputs,
                                      Attributes attrs) {
  if (domain == kAmpcDomain && !graph_.opset_imports().contains(kAmpcDomain)) {
    graph_.set_opset(std::string(kAmpcDomain), 1);
  }
  // Placeholder types until inference has run on the node.
  const std::vector<std::optional<TensorType>> placeholder(num_outputs, TensorType{});
  Node* node = graph_.create_node(domain, op_type, operands, placeholder, std::move(attrs));
  node->set_name(
      str_cat(forward_.name().empty() ? value_name(op_type) : forward_.name(), "/grad/", op_type));
  std::vector<Value*> outputs;
  for (int i = 0; i < num_outputs; ++i) {
    node->output(i)->set_name(value_name(op_type));
    outputs.push_back(node->output(i));
  }
  absl::StatusOr<std::vector<std::optional<TensorType>>> types = types_.visit(*node);
  if (!types.ok()) {
    if (status_.ok()) status_ = types.status();
    return outputs;
  }
  for (int i = 0; i < num_outputs; ++i) node->output(i)->set_type(*(*types)[i]);
  return outputs;
}

Value* GradBuilder::op(std::string_view op_type, const std::vector<Value*>& operands,
                       Attributes attrs) {
  return op_n(kOnnxDomain, op_type, operands, 1, std::move(attrs))[0];
}

Value* GradBuilder::ampc_op(std::string_view op_type, const std::vector<Value*>& operands,
                            Attributes attrs) {
  return op_n(kAmpcDomain, op_type, operands, 1, std::move(attrs))[0];
}

Value* GradBuilder::constant(Tensor value) {
  Value* init =
      graph_.add_initializer(graph_.unique_value_name(value_name("const")), std::move(value));
  init->set_constant(true);
  return init;
}

Value* GradBuilder::scalar(double value, DType dtype) {
  return constant(Tensor::from_doubles(dtype, {}, {value}));
}

Value* GradBuilder::int64s(const std::vector<int64_t>& values) {
  return constant(Tensor::from_i64({static_cast<int64_t>(values.size())}, values));
}

Value* GradBuilder::reduce_to_shape(Value* grad, const Shape& shape) {
  const Shape& from = grad->shape();
  if (from == shape) return grad;
  AMPC_CHECK(from.size() >= shape.size());
  const size_t offset = from.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < offset || (shape[i - offset] == 1 && from[i] != 1)) {
      axes.push_back(static_cast<int64_t>(i));
    }
  }
  Value* reduced = grad;
  if (!axes.empty()) {
    reduced = op("ReduceSum", {grad}, {{"axes", axes}, {"keepdims", int64_t{0}}});
  }
  if (reduced->shape() != shape) reduced = op("Reshape", {reduced, int64s(shape)});
  return reduced;
}

}  // namespace ampc
