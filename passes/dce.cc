// dce: removes what nothing reads.
//
// Rewrites: a node whose outputs are all dead (no node reads them and none is a graph output) is
//   erased; nodes are walked in reverse, so a whole dead chain goes in one run. Initializers that
//   nothing reads and that are not graph outputs are erased afterwards. Graph inputs are never
//   removed: they are the model's interface.
// Assumes: ops have no side effects beyond their outputs (true of ONNX ops and of ampc's, whose
//   state updates are graph outputs).
// Numerics: none; no value that is read changes.
#include <vector>

#include "passes/passes.h"

namespace ampc {
namespace {

bool all_outputs_dead(const Node& node) {
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i) && !node.output(i)->is_dead()) return false;
  }
  return true;
}

class DcePass final : public Pass {
 public:
  std::string_view name() const override { return "dce"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    bool changed = false;
    std::vector<Node*> nodes = graph.node_list();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      if (!all_outputs_dead(**it)) continue;
      graph.erase_node(*it);
      changed = true;
    }
    // Copy: erase_graph_value edits the list. Last to first, which keeps each erase short.
    const std::vector<Value*> initializers = graph.initializers();
    for (auto it = initializers.rbegin(); it != initializers.rend(); ++it) {
      if (!(*it)->is_dead()) continue;
      graph.erase_graph_value(*it);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace ampc
