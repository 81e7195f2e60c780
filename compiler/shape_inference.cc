#include "compiler/shape_inference.h"

#include <utility>

#include "compiler/strings.h"

namespace ampc {
namespace {

absl::Status with_node(const Node& node, const absl::Status& status) {
  return absl::Status(status.code(), str_cat(node.describe(), ": ", status.message()));
}

absl::Status check_arity(const Node& node) {
  const OpDef& def = *node.def();
  if (node.num_operands() < def.min_inputs() || node.num_operands() > def.max_inputs()) {
    return absl::InvalidArgumentError(str_cat(
        "has ", node.num_operands(), " inputs; ", def.qualified_name(), " takes ", def.min_inputs(),
        def.max_inputs() == INT_MAX            ? " or more"
        : def.max_inputs() == def.min_inputs() ? ""
                                               : str_cat(" to ", def.max_inputs())));
  }
  for (int i = 0; i < def.min_inputs(); ++i) {
    const OperandSpec& spec = def.inputs[std::min<size_t>(i, def.inputs.size() - 1)];
    if (spec.arity != OperandSpec::Arity::kOptional && !node.has_operand(i)) {
      return absl::InvalidArgumentError(
          str_cat("required input ", i, " ('", spec.name, "') is missing"));
    }
  }
  if (node.num_outputs() < def.min_outputs() || node.num_outputs() > def.max_outputs()) {
    return absl::InvalidArgumentError(str_cat("has ", node.num_outputs(), " outputs; ",
                                              def.qualified_name(), " has ", def.min_outputs(),
                                              " to ", def.max_outputs()));
  }
  for (int i = 0; i < node.num_operands(); ++i) {
    if (!node.has_operand(i)) continue;
    const OperandSpec& spec = def.inputs[std::min<size_t>(i, def.inputs.size() - 1)];
    if (spec.dtypes.empty()) continue;
    const DType dtype = node.operand(i)->dtype();
    if (std::find(spec.dtypes.begin(), spec.dtypes.end(), dtype) == spec.dtypes.end()) {
      return absl::InvalidArgumentError(
          str_cat("input ", i, " ('", spec.name, "') has element type ", dtype_name(dtype),
                  ", which ", def.qualified_name(), " does not accept"));
    }
  }
  return absl::OkStatus();
}

// Int attributes within the values their op defines (AttrSpec::int_range).
absl::Status check_attribute_ranges(const Node& node) {
  for (const AttrSpec& spec : node.def()->attrs) {
    if (!spec.int_range) continue;
    const AttrValue* value = node.find_attr(spec.name);
    const int64_t* number = value != nullptr ? std::get_if<int64_t>(value) : nullptr;
    if (number == nullptr) continue;
    const auto [low, high] = *spec.int_range;
    if (*number < low || *number > high) {
      return absl::InvalidArgumentError(str_cat("attribute ", spec.name, " = ", *number,
                                                " is not one of the values ",
                                                node.def()->qualified_name(), " defines (", low,
                                                high == low + 1 ? " or " : " to ", high, ")"));
    }
  }
  return absl::OkStatus();
}

// `value`'s data when it is an initializer or folded already (never folding anything), else
// null.
const Tensor* value_at_hand(const Value* value,
                            const std::unordered_map<const Value*, Tensor>& folded) {
  if (const Tensor* data = value->initializer()) return data;
  auto it = folded.find(value);
  return it == folded.end() ? nullptr : &it->second;
}

// Records `node`'s folded outputs.
void keep_folded(const Node& node, std::vector<Tensor> outputs,
                 std::unordered_map<const Value*, Tensor>& folded) {
  for (int i = 0; i < node.num_outputs() && i < static_cast<int>(outputs.size()); ++i) {
    if (node.has_output(i)) folded[node.output(i)] = std::move(outputs[i]);
  }
}

}  // namespace

absl::StatusOr<std::optional<std::vector<Tensor>>> try_fold(
    const Node& node, const std::vector<const Tensor*>& input_values,
    const std::vector<std::optional<TensorType>>& output_types) {
  const OpDef* def = node.def();
  if (def == nullptr || !def->fold) return std::optional<std::vector<Tensor>>();
  FoldContext ctx{node, {}, {}, output_types};
  for (int i = 0; i < node.num_operands(); ++i) {
    ctx.input_types.push_back(node.has_operand(i) ? &node.operand(i)->type() : nullptr);
    const Tensor* value = i < static_cast<int>(input_values.size()) ? input_values[i] : nullptr;
    if (node.has_operand(i) && def->fold_needs_values && (value == nullptr || !value->has_data())) {
      return std::optional<std::vector<Tensor>>();
    }
    ctx.inputs.push_back(value);
  }
  for (const std::optional<TensorType>& type : output_types) {
    if (type && type->byte_size() > kMaxFoldedBytes) return std::optional<std::vector<Tensor>>();
  }
  absl::StatusOr<std::vector<Tensor>> folded = def->fold(ctx);
  if (!folded.ok()) return with_node(node, folded.status());
  return std::optional(*std::move(folded));
}

absl::StatusOr<std::vector<std::optional<TensorType>>> TypePropagator::visit(const Node& node) {
  if (node.def() == nullptr) {
    return absl::UnimplementedError(str_cat(node.describe(), ": op is not supported at opset ",
                                            node.graph()->opset(node.domain())));
  }
  if (absl::Status arity = check_arity(node); !arity.ok()) return with_node(node, arity);
  if (absl::Status ranges = check_attribute_ranges(node); !ranges.ok()) {
    return with_node(node, ranges);
  }
  std::vector<const TensorType*> types;
  for (Value* operand : node.operands()) types.push_back(operand ? &operand->type() : nullptr);
  InferenceContext ctx(node, types, [this, &node](int i) { return known_value(node.operand(i)); });
  absl::Status status = node.def()->infer(ctx);
  if (!fold_error_.ok()) return std::exchange(fold_error_, absl::OkStatus());
  if (!status.ok()) return with_node(node, status);
  int64_t output_bytes = 0;
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (!node.has_output(i)) continue;
    if (!ctx.output_types()[i]) {
      return absl::InternalError(
          str_cat(node.describe(), ": inference gave no type for output ", i));
    }
    // Shapes computed from values (Range, Expand, ConstantOfShape, Tile) can be absurd; nothing
    // downstream (folding, planning) may multiply them unchecked.
    absl::StatusOr<int64_t> bytes = checked_byte_size(*ctx.output_types()[i]);
    if (!bytes.ok()) {
      return with_node(
          node, absl::InvalidArgumentError(str_cat("output ", i, " ", bytes.status().message())));
    }
    output_bytes += *bytes;
  }
  if (!node.def()->fold || output_bytes > kMaxFoldedBytes) return ctx.output_types();
  // Fold now when the operands' values are at hand and the result is small; leave it pending
  // when an operand's value is itself pending or the result is large; skip it when an operand's
  // value cannot be known.
  std::vector<const Tensor*> values;
  bool ready = true;
  for (Value* operand : node.operands()) {
    const Tensor* value = nullptr;
    if (operand != nullptr && node.def()->fold_needs_values) {
      value = value_at_hand(operand, folded_);
      if (value == nullptr) {
        const bool pending =
            operand->producer() != nullptr && pending_.contains(operand->producer());
        if (!pending) return ctx.output_types();
        ready = false;
      }
    }
    values.push_back(value);
  }
  if (!ready || output_bytes > kEagerFoldBytes) {
    pending_[&node] = ctx.output_types();
    return ctx.output_types();
  }
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<Tensor>> folded,
                        try_fold(node, values, ctx.output_types()));
  if (folded) keep_folded(node, *std::move(folded), folded_);
  return ctx.output_types();
}

const Tensor* TypePropagator::known_value(const Value* value) const {
  if (value == nullptr) return nullptr;
  if (const Tensor* at_hand = value_at_hand(value, folded_)) return at_hand;
  if (value->producer() == nullptr || !pending_.contains(value->producer())) return nullptr;
  fold_pending(value->producer());
  return value_at_hand(value, folded_);
}

void TypePropagator::fold_pending(const Node* root) const {
  // Depth first, operands before the node that reads them, without recursion (a chain of
  // pending nodes may be as long as the graph).
  std::vector<std::pair<const Node*, bool>> stack = {{root, false}};
  while (!stack.empty()) {
    const auto [node, operands_done] = stack.back();
    stack.pop_back();
    auto entry = pending_.find(node);
    if (entry == pending_.end()) continue;  // folded already, through another path
    if (!operands_done) {
      stack.push_back({node, true});
      for (const Value* operand : node->operands()) {
        if (operand != nullptr && operand->producer() != nullptr &&
            pending_.contains(operand->producer())) {
          stack.push_back({operand->producer(), false});
        }
      }
      continue;
    }
    const std::vector<std::optional<TensorType>> output_types = std::move(entry->second);
    pending_.erase(entry);
    std::vector<const Tensor*> values;
    for (const Value* operand : node->operands()) {
      const Tensor* value = nullptr;
      if (operand != nullptr && node->def()->fold_needs_values) {
        value = value_at_hand(operand, folded_);
      }
      values.push_back(value);
    }
    absl::StatusOr<std::optional<std::vector<Tensor>>> folded =
        try_fold(*node, values, output_types);
    if (!folded.ok()) {
      if (fold_error_.ok()) fold_error_ = folded.status();
      continue;
    }
    if (*folded) keep_folded(*node, **std::move(folded), folded_);
  }
}

absl::StatusOr<bool> infer_graph_types(Graph& graph) {
  TypePropagator propagator;
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<TensorType>> types, propagator.visit(*node));
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i) || node->output(i)->type() == *types[i]) continue;
      node->output(i)->set_type(*types[i]);
      changed = true;
    }
  }
  return changed;
}

}  // namespace ampc
