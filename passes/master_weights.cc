// master-weights; passes/master_weights.h says what it does.
#include "passes/master_weights.h"

#include <string>
#include <utility>
#include <vector>

#include "compiler/strings.h"

namespace ampc {
namespace {

// The dtype `node` casts to when it is a Cast to f16 or bf16 whose output is not a graph output.
std::optional<DType> narrowing_cast(const Node& node) {
  if (node.domain() != kOnnxDomain || node.op_type() != "Cast" || node.num_outputs() != 1 ||
      !node.has_output(0) || node.output(0)->is_graph_output()) {
    return std::nullopt;
  }
  const DType to = node.output(0)->dtype();
  if (to != DType::kF16 && to != DType::kBF16) return std::nullopt;
  return to;
}

// Whether `node` moves the elements of its operand `operand` without changing them (so it may
// run in any dtype), into one output that is not a graph output.
bool moves_data(const Node& node, int operand) {
  if (node.domain() != kOnnxDomain || operand != 0 || node.num_outputs() != 1 ||
      !node.has_output(0) || node.output(0)->is_graph_output()) {
    return false;
  }
  const std::string& op = node.op_type();
  return op == "Transpose" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
         op == "Flatten" || op == "Identity" || op == "Gather" || op == "Slice";
}

// Whether every reader of `value` but `except` is a narrowing Cast, directly or through data
// movement, all to one dtype (`dtype` receives it).
bool read_only_narrowed(const Value& value, const Node* except, std::optional<DType>& dtype) {
  if (value.is_graph_output()) return false;
  for (const Use& use : value.uses()) {
    if (use.user == except) continue;
    if (const std::optional<DType> to = narrowing_cast(*use.user); to.has_value()) {
      if (dtype.has_value() && *dtype != *to) return false;
      dtype = to;
      continue;
    }
    if (!moves_data(*use.user, use.operand) ||
        !read_only_narrowed(*use.user->output(0), nullptr, dtype)) {
      return false;
    }
  }
  return true;
}

// Whether `name` may name the copy of `parameter` in its graph: free, or the output of one of
// its Casts (which the copy replaces).
bool name_free_for(const Value& parameter, const std::string& name) {
  if (parameter.graph()->unique_value_name(name) == name) return true;
  for (const Use& use : parameter.uses()) {
    if (narrowing_cast(*use.user).has_value() && use.user->output(0)->name() == name) return true;
  }
  return false;
}

// Every narrowing Cast reading `value` (f32), directly or through data movement, reads `low`
// (`value` in the Casts' dtype) instead: the Casts go, and the data movement runs on `low`.
void read_low(Graph& graph, Value& value, Value* low) {
  const std::vector<Use> uses = value.uses();
  for (const Use& use : uses) {
    Node* node = use.user;
    if (narrowing_cast(*node).has_value()) {
      node->output(0)->replace_all_uses_with(low);
      graph.erase_node(node);
    } else if (moves_data(*node, use.operand)) {
      std::vector<Value*> operands;
      for (int i = 0; i < node->num_operands(); ++i) {
        operands.push_back(i == 0 ? low : node->operand(i));
      }
      Value* moved = node->output(0);
      Node* low_node =
          graph.create_node(node->domain(), node->op_type(), operands,
                            {TensorType{low->dtype(), moved->shape()}}, node->attrs(), node);
      low_node->set_name(node->name());
      low_node->output(0)->set_name(
          graph.unique_value_name(str_cat(moved->name(), ".", dtype_name(low->dtype()))));
      read_low(graph, *moved, low_node->output(0));
      graph.erase_node(node);
    }
  }
}

}  // namespace

std::optional<LowPrecisionCopy> low_precision_copy(const Value& parameter, const Node& update,
                                                   const Graph* eval, const Value* in_eval) {
  if (parameter.dtype() != DType::kF32 || parameter.kind() != Value::Kind::kInitializer) {
    return std::nullopt;
  }
  for (const Use& use : parameter.uses()) {
    if (use.user == &update && use.operand != 0) return std::nullopt;
  }
  std::optional<DType> dtype;
  if (!read_only_narrowed(parameter, &update, dtype) || !dtype.has_value()) return std::nullopt;
  LowPrecisionCopy copy{parameter.name(), str_cat(parameter.name(), ".", dtype_name(*dtype)),
                        *dtype};
  if (!name_free_for(parameter, copy.copy)) return std::nullopt;
  if (eval == nullptr || in_eval == nullptr) return copy;
  std::optional<DType> eval_dtype = dtype;
  if (in_eval->type() != parameter.type() || !read_only_narrowed(*in_eval, nullptr, eval_dtype) ||
      eval_dtype != dtype || !name_free_for(*in_eval, copy.copy)) {
    return std::nullopt;
  }
  return copy;
}

Value* read_through_copy(Graph& graph, Value& parameter, const LowPrecisionCopy& copy,
                         const Tensor& whole) {
  Value* value = graph.add_initializer(graph.unique_value_name(str_cat(copy.copy, ".copy")),
                                       narrowed(whole, copy.dtype));
  read_low(graph, parameter, value);
  value->set_name(copy.copy);
  value->set_declared(parameter.declared());  // what the exporter declared it stays
  return value;
}

absl::Status restore_master_weights(Graph& eval, const LowPrecisionCopy& copy, Tensor whole) {
  Value* value = nullptr;
  for (Value* init : eval.initializers()) {
    if (init->name() == copy.copy) value = init;
  }
  if (value == nullptr || eval.unique_value_name(copy.parameter) != copy.parameter) {
    return absl::InternalError(str_cat("the eval graph does not read '", copy.parameter,
                                       "' through its copy '", copy.copy, "'"));
  }
  Node* first_reader = nullptr;
  for (const auto& node : eval.nodes()) {
    for (int i = 0; i < node->num_operands() && first_reader == nullptr; ++i) {
      if (node->operand(i) == value) first_reader = node.get();
    }
    if (first_reader != nullptr) break;
  }
  const Shape shape = whole.shape();
  Value* parameter = eval.add_initializer(copy.parameter, std::move(whole));
  parameter->set_declared(value->declared());
  Node* cast = eval.create_node(kOnnxDomain, "Cast", {parameter}, {TensorType{copy.dtype, shape}},
                                {{"to", copy.dtype}}, first_reader);
  cast->set_name(str_cat(copy.parameter, "/to_", dtype_name(copy.dtype)));
  value->replace_all_uses_with(cast->output(0));
  eval.erase_graph_value(value);
  cast->output(0)->set_name(copy.copy);
  return absl::OkStatus();
}

Tensor narrowed(const Tensor& value, DType dtype) {
  Tensor out(TensorType{dtype, value.shape()});
  for (int64_t i = 0; i < value.num_elements(); ++i) out.set_element(i, value.element_as_double(i));
  return out;
}

}  // namespace ampc
