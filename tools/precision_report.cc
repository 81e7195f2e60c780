// `ampc inspect --precision`: one line per node with its operand dtypes, its compute, accumulate
// and output dtype and the reason autocast gave; then a summary of what the precision costs and
// saves: nodes per compute dtype, the casts and the bytes they move per run, parameter bytes,
// and the memory the runtime's planner gives each arena. For a training model the same for the
// training step, with gradient and optimizer-state bytes.
#include "tools/precision_report.h"

#include <map>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "runtime/plan.h"

namespace ampc {
namespace {

std::string grouped(int64_t n) {
  std::string digits = str_cat(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return n < 0 ? "-" + digits : digits;
}

std::string dtypes_of(const std::vector<Value*>& values) {
  std::vector<std::string> names;
  for (const Value* v : values) names.push_back(v ? std::string(dtype_name(v->dtype())) : "_");
  return names.empty() ? "-" : str_join(names, ",");
}

std::string node_line(const Node& node) {
  std::vector<Value*> outputs;
  for (int i = 0; i < node.num_outputs(); ++i) {
    outputs.push_back(node.has_output(i) ? node.output(i) : nullptr);
  }
  const PrecisionDecision& d = node.precision();
  const std::string label = node.name().empty() ? node.op_type() : node.name();
  return fmt::format("  {:<40} {:<22} {:<16} {:<5} {:<4} {:<10} {}\n", label,
                     node.def() != nullptr ? node.def()->qualified_name() : node.op_type(),
                     dtypes_of(node.operands()), d.compute ? dtype_name(*d.compute) : "-",
                     d.accumulate ? dtype_name(*d.accumulate) : "-", dtypes_of(outputs),
                     d.reason.empty() ? "(no decision: compiled without --precision)" : d.reason);
}

std::string graph_report(const Graph& graph, std::string_view what) {
  std::string out = str_cat(what, " '", graph.name(), "'\n");
  out += fmt::format("  {:<40} {:<22} {:<16} {:<5} {:<4} {:<10} {}\n", "node", "op", "inputs",
                     "comp", "acc", "output", "reason");
  std::map<std::string, int> by_compute;
  int casts = 0;
  std::map<std::string, int> casts_to;
  int64_t cast_bytes = 0;
  for (const auto& node : graph.nodes()) {
    out += node_line(*node);
    const PrecisionDecision& d = node->precision();
    by_compute[d.compute ? std::string(dtype_name(*d.compute)) : "-"]++;
    if (node->domain().empty() && node->op_type() == "Cast") {
      ++casts;
      casts_to[std::string(dtype_name(node->output(0)->dtype()))]++;
      cast_bytes += node->operand(0)->type().byte_size() + node->output(0)->type().byte_size();
    }
  }
  std::vector<std::string> compute;
  for (const auto& [dtype, n] : by_compute) compute.push_back(str_cat(dtype, " ", n));
  std::vector<std::string> targets;
  for (const auto& [dtype, n] : casts_to) targets.push_back(str_cat(n, " to ", dtype));
  out += str_cat("\nsummary of '", graph.name(), "'\n");
  out += str_cat("  nodes by compute dtype: ", str_join(compute, ", "), "\n");
  out += str_cat("  casts: ", casts,
                 targets.empty() ? "" : str_cat(" (", str_join(targets, ", "), ")"),
                 ", reading and writing ", grouped(cast_bytes), " bytes per run\n");
  int64_t parameter_bytes = 0;
  int64_t state_bytes = 0;
  std::map<std::string, bool> is_state;
  for (const Graph::StateUpdate& update : graph.state_updates()) is_state[update.state] = true;
  for (const Value* init : graph.initializers()) {
    if (init->is_constant()) continue;
    const int64_t bytes = init->type().byte_size();
    (is_state.contains(init->name()) && graph.state_updates().size() > 0 ? state_bytes
                                                                         : parameter_bytes) +=
        bytes;
  }
  if (graph.state_updates().empty()) {
    out += str_cat("  weights: ", grouped(parameter_bytes), " bytes\n");
  } else {
    out += str_cat("  training state (parameters, moments, counters, statistics): ",
                   grouped(state_bytes), " bytes\n");
  }
  absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
      runtime::Plan::build(graph, runtime::Device::kCpu);
  if (plan.ok()) {
    out += str_cat(
        "  planned memory: ", grouped((*plan)->arena_bytes(runtime::ArenaKind::kParameters)),
        " bytes of initializers, ", grouped((*plan)->arena_bytes(runtime::ArenaKind::kActivations)),
        " bytes of activations, ", grouped((*plan)->arena_bytes(runtime::ArenaKind::kWorkspace)),
        " bytes of workspace\n");
  } else {
    out += str_cat("  planned memory: not available (", plan.status().message(), ")\n");
  }
  return out;
}

}  // namespace

std::string precision_report(const Graph& graph) {
  std::string out = graph_report(graph, "precision of graph");
  if (const Graph* step = graph.training_step()) {
    out += "\n" + graph_report(*step, "precision of training step");
  }
  return out;
}

}  // namespace ampc
