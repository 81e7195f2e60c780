// infer-shapes: writes every node's inferred output types onto its outputs.
//
// Rewrites: output types only (dtype and static shape), from each OpDef's inference, in node
//   order, with compile-time values propagated through foldable nodes (infer_graph_types).
// Assumes: every op is registered for the graph's opset and every dim is static (import fixes
//   symbolic dims from --shape); an op that cannot infer fails with a message naming the node.
// Numerics: none; values are not changed.
#include "compiler/shape_inference.h"
#include "passes/passes.h"

namespace ampc {
namespace {

class InferShapesPass final : public Pass {
 public:
  std::string_view name() const override { return "infer-shapes"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    return infer_graph_types(graph);
  }
};

}  // namespace

std::unique_ptr<Pass> make_infer_shapes_pass() { return std::make_unique<InferShapesPass>(); }

}  // namespace ampc
