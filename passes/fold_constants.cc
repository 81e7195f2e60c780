// fold-constants: replaces nodes whose results are known at compile time by initializers.
//
// Rewrites: a node whose op has a fold (OpDef::fold) and whose operands are all initializers
//   (any operands for ops with fold_needs_values = false, such as Shape, which folds from its
//   input's static type) is erased, and each of its live outputs is replaced by an initializer
//   holding the folded value, named like that output (so a graph output keeps its name; an
//   initializer may be a graph output). Constant nodes become initializers the same way. Nodes
//   are visited in order, so a whole chain (PyTorch's Shape -> Gather -> Unsqueeze -> Concat ->
//   Reshape shape) folds in one run. Nodes upstream that become dead, and the initializers the
//   folded nodes read, are left to dce.
// Assumes: the graph verifies (output types are the inferred ones; the folds produce them).
//   Float initializers that this run did not create may be trainable parameters: a node reading
//   one is not folded, since a folded copy (Transpose(W), Gather(pos_emb, arange)) would detach
//   the parameter from its uses and break weight tying. A training step's state (any dtype: the
//   i64 micro-step counter of gradient accumulation too) changes every run and is never folded.
//   Outputs over kMaxFoldedBytes are not folded (Constant nodes excepted: their data is already
//   in the graph).
// Numerics: the op folds are exact for integer types and round once to the output type for
//   float types, as the op would at run time. No value-changing cast is removed here.
#include <unordered_set>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

bool has_live_output(const Node& node) {
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i) && !node.output(i)->is_dead()) return true;
  }
  return false;
}

bool is_constant_op(const Node& node) {
  return node.domain() == kOnnxDomain && node.op_type() == "Constant";
}

class FoldConstantsPass final : public Pass {
 public:
  std::string_view name() const override { return "fold-constants"; }
  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override;

 private:
  // The operand values `node`'s fold reads, or nullopt when it cannot be folded now.
  std::optional<std::vector<const Tensor*>> fold_inputs(const Node& node) const;
  absl::StatusOr<std::optional<std::vector<Tensor>>> fold(const Node& node) const;
  absl::Status replace_by_initializers(Graph& graph, Node& node, std::vector<Tensor> folded);

  // Initializers made by this run: known constants, not parameters.
  std::unordered_set<const Value*> folded_here_;
  // Names of the initializers the graph's state updates overwrite after each run.
  std::unordered_set<std::string> state_;
};

std::optional<std::vector<const Tensor*>> FoldConstantsPass::fold_inputs(const Node& node) const {
  std::vector<const Tensor*> values;
  for (const Value* operand : node.operands()) {
    const Tensor* data = operand ? operand->initializer() : nullptr;
    if (operand != nullptr && node.def()->fold_needs_values) {
      if (data == nullptr || !data->has_data()) return std::nullopt;
      if (is_float(operand->dtype()) && !folded_here_.contains(operand)) return std::nullopt;
      if (state_.contains(operand->name())) return std::nullopt;
    }
    values.push_back(data);
  }
  return values;
}

absl::StatusOr<std::optional<std::vector<Tensor>>> FoldConstantsPass::fold(const Node& node) const {
  using Folded = std::optional<std::vector<Tensor>>;
  const OpDef* def = node.def();
  if (def == nullptr || !def->fold || !has_live_output(node)) return Folded();
  std::optional<std::vector<const Tensor*>> inputs = fold_inputs(node);
  if (!inputs) return Folded();
  std::vector<std::optional<TensorType>> output_types;
  for (int i = 0; i < node.num_outputs(); ++i) {
    output_types.push_back(node.has_output(i) ? std::optional(node.output(i)->type())
                                              : std::nullopt);
  }
  if (!is_constant_op(node)) return try_fold(node, *inputs, output_types);
  // A Constant's data is already in the graph, so the size limit does not apply to it.
  absl::StatusOr<std::vector<Tensor>> folded = def->fold(FoldContext{node, {}, {}, output_types});
  if (!folded.ok()) {
    return absl::Status(folded.status().code(),
                        str_cat(node.describe(), ": ", folded.status().message()));
  }
  return Folded(*std::move(folded));
}

absl::Status FoldConstantsPass::replace_by_initializers(Graph& graph, Node& node,
                                                        std::vector<Tensor> folded) {
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (!node.has_output(i)) continue;
    if (folded[i].type() != node.output(i)->type()) {
      return absl::InternalError(str_cat(node.describe(), ": its fold gave ",
                                         type_to_string(folded[i].type()), " for output ", i,
                                         " of type ", type_to_string(node.output(i)->type())));
    }
  }
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (!node.has_output(i) || node.output(i)->is_dead()) continue;
    Value* output = node.output(i);
    // The node is erased below, so its output's name is free for the initializer.
    std::string name = output->name().empty() ? graph.unique_value_name("folded") : output->name();
    Value* initializer = graph.add_initializer(std::move(name), std::move(folded[i]));
    initializer->set_constant(true);
    folded_here_.insert(initializer);
    output->replace_all_uses_with(initializer);
  }
  graph.erase_node(&node);
  return absl::OkStatus();
}

absl::StatusOr<bool> FoldConstantsPass::run(Graph& graph, const PassContext& /*context*/) {
  folded_here_.clear();
  state_.clear();
  for (const Graph::StateUpdate& update : graph.state_updates()) state_.insert(update.state);
  bool changed = false;
  for (Node* node : graph.node_list()) {
    AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<Tensor>> folded, fold(*node));
    // A fold may give no values when it has nothing to compute from (a Constant whose data the
    // text IR elided).
    if (!folded || folded->size() < static_cast<size_t>(node->num_outputs())) continue;
    AMPC_RETURN_IF_ERROR(replace_by_initializers(graph, *node, *std::move(folded)));
    changed = true;
  }
  folded_here_.clear();
  return changed;
}

}  // namespace

std::unique_ptr<Pass> make_fold_constants_pass() { return std::make_unique<FoldConstantsPass>(); }

}  // namespace ampc
