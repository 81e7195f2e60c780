// Shape and dtype inference over a whole graph, with compile-time value propagation.
//
// Nodes are visited in order. Each node's OpDef infers its output types from the operand types
// and from the operand values known at compile time: initializers, and the outputs of foldable
// nodes (shape arithmetic such as Shape -> Gather -> Concat -> Reshape) whose inputs are all
// known. The known values are kept on the side; the graph is not changed.
//
// Small results (shape arithmetic) are folded as their node is visited. Larger ones (a
// transposed weight, a causal mask) are folded only when an inference or known_value asks for
// them: most never are, and folding every one would make each visit of a graph cost as much as
// touching all its weights.
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "compiler/op_def.h"

namespace ampc {

// Folding stops at values larger than this, so that propagation stays cheap.
inline constexpr int64_t kMaxFoldedBytes = int64_t{1} << 20;
// Results up to this size (shape arithmetic) are folded at once; larger ones when asked for.
inline constexpr int64_t kEagerFoldBytes = 256;

class TypePropagator {
 public:
  // Infers the output types of `node` from its operands (which must have been visited or be
  // graph inputs/initializers), then records its output values when the node can be folded.
  // Errors name the node.
  absl::StatusOr<std::vector<std::optional<TensorType>>> visit(const Node& node);

  // The value of `value` when known at compile time, else null. May fold the nodes it depends
  // on (whose results were left for when they are asked for); a failure to fold one is
  // returned by the next visit.
  const Tensor* known_value(const Value* value) const;

 private:
  // Folds `node` and the pending nodes it reads, operands first.
  void fold_pending(const Node* node) const;

  // Memoized: known_value is logically const.
  mutable std::unordered_map<const Value*, Tensor> folded_;
  // Visited nodes that fold once their operands' values are known, with their output types.
  mutable std::unordered_map<const Node*, std::vector<std::optional<TensorType>>> pending_;
  mutable absl::Status fold_error_;
};

// Evaluates `node`'s fold with the given input values and types. Null when the node has no fold,
// an input value is missing, or an output would exceed kMaxFoldedBytes.
absl::StatusOr<std::optional<std::vector<Tensor>>> try_fold(
    const Node& node, const std::vector<const Tensor*>& input_values,
    const std::vector<std::optional<TensorType>>& output_types);

// Re-infers every node in order and writes the inferred types onto the node outputs. Returns
// whether any type changed.
absl::StatusOr<bool> infer_graph_types(Graph& graph);

}  // namespace ampc
