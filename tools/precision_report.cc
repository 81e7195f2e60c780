// `ampc inspect --precision`: one line per node with its operand dtypes, its compute, accumulate
// and output dtype and the reason autocast gave; then a summary of what the precision costs and
// saves: nodes per compute dtype, the casts and the bytes they move per run, state bytes, and
// the memory the runtime's planner gives each arena. For a training model the same for the
// training step. The same facts render as text, JSON (docs/inspect-json.md) or Graphviz dot.
#include "tools/precision_report.h"

#include <map>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"
#include "runtime/plan.h"

namespace ampc {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string grouped(int64_t n) {
  std::string digits = str_cat(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return n < 0 ? "-" + digits : digits;
}

std::vector<std::string> dtypes_of(const std::vector<Value*>& values) {
  std::vector<std::string> names;
  for (const Value* v : values) names.push_back(v ? std::string(dtype_name(v->dtype())) : "_");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  return names.empty() ? "-" : str_join(names, ",");
}

struct NodeFacts {
  std::string name;
  std::string op;
  std::vector<std::string> inputs;
  std::string compute;  // "-" when none
  std::string accumulate;
  std::vector<std::string> outputs;
  std::string reason;
  bool cast = false;
};

struct GraphFacts {
  std::string name;
  std::string kind;  // "graph" or "training step"
  std::vector<NodeFacts> nodes;
  std::map<std::string, int> by_compute;
  int casts = 0;
  std::map<std::string, int> casts_to;
  int64_t cast_bytes = 0;
  bool training = false;
  int64_t state_bytes = 0;  // training: every piece of state; else the weights
  std::optional<std::array<int64_t, runtime::kNumArenas>> arenas;
  std::string plan_error;
};

GraphFacts gather(const Graph& graph, std::string kind) {
  GraphFacts facts;
  facts.name = graph.name();
  facts.kind = std::move(kind);
  for (const auto& node : graph.nodes()) {
    std::vector<Value*> outputs;
    for (int i = 0; i < node->num_outputs(); ++i) {
      outputs.push_back(node->has_output(i) ? node->output(i) : nullptr);
    }
    const PrecisionDecision& d = node->precision();
    NodeFacts n;
    n.name = node->name().empty() ? node->op_type() : node->name();
    n.op = node->def() != nullptr ? node->def()->qualified_name() : node->op_type();
    n.inputs = dtypes_of(node->operands());
    n.compute = d.compute ? std::string(dtype_name(*d.compute)) : "-";
    n.accumulate = d.accumulate ? std::string(dtype_name(*d.accumulate)) : "-";
    n.outputs = dtypes_of(outputs);
    n.reason = d.reason;
    n.cast = node->domain().empty() && node->op_type() == "Cast";
    facts.by_compute[n.compute]++;
    if (n.cast) {
      ++facts.casts;
      facts.casts_to[std::string(dtype_name(node->output(0)->dtype()))]++;
      facts.cast_bytes +=
          node->operand(0)->type().byte_size() + node->output(0)->type().byte_size();
    }
    facts.nodes.push_back(std::move(n));
  }
  facts.training = !graph.state_updates().empty();
  for (const Value* init : graph.initializers()) {
    if (init->is_constant()) continue;
    bool state = !facts.training;
    for (const Graph::StateUpdate& update : graph.state_updates()) {
      state |= update.state == init->name();
    }
    if (state) facts.state_bytes += init->type().byte_size();
  }
  absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
      runtime::Plan::build(graph, runtime::Device::kCpu);
  if (plan.ok()) {
    std::array<int64_t, runtime::kNumArenas> arenas{};
    for (int a = 0; a < runtime::kNumArenas; ++a) {
      arenas[a] = (*plan)->arena_bytes(static_cast<runtime::ArenaKind>(a));
    }
    facts.arenas = arenas;
  } else {
    facts.plan_error = std::string(plan.status().message());
  }
  return facts;
}

std::vector<GraphFacts> gather_all(const Graph& graph) {
  std::vector<GraphFacts> all = {gather(graph, "graph")};
  if (const Graph* step = graph.training_step()) all.push_back(gather(*step, "training step"));
  return all;
}

std::string text(const GraphFacts& f) {
  std::string out = str_cat("precision of ", f.kind, " '", f.name, "'\n");
  const std::string row = "  {:<40} {:<22} {:<16} {:<5} {:<4} {:<10} {}\n";
  out += fmt::format(fmt::runtime(row), "node", "op", "inputs", "comp", "acc", "output", "reason");
  for (const NodeFacts& n : f.nodes) {
    out += fmt::format(fmt::runtime(row), n.name, n.op, joined(n.inputs), n.compute, n.accumulate,
                       joined(n.outputs),
                       n.reason.empty() ? "(no decision: compiled without --precision)" : n.reason);
  }
  std::vector<std::string> compute;
  for (const auto& [dtype, n] : f.by_compute) compute.push_back(str_cat(dtype, " ", n));
  std::vector<std::string> targets;
  for (const auto& [dtype, n] : f.casts_to) targets.push_back(str_cat(n, " to ", dtype));
  out += str_cat("\nsummary of '", f.name, "'\n");
  out += str_cat("  nodes by compute dtype: ", str_join(compute, ", "), "\n");
  out += str_cat("  casts: ", f.casts,
                 targets.empty() ? "" : str_cat(" (", str_join(targets, ", "), ")"),
                 ", reading and writing ", grouped(f.cast_bytes), " bytes per run\n");
  out += f.training ? str_cat("  training state (parameters, moments, counters, statistics): ",
                              grouped(f.state_bytes), " bytes\n")
                    : str_cat("  weights: ", grouped(f.state_bytes), " bytes\n");
  if (f.arenas) {
    out += str_cat("  planned memory: ", grouped((*f.arenas)[0]), " bytes of initializers, ",
                   grouped((*f.arenas)[1]), " bytes of activations, ", grouped((*f.arenas)[2]),
                   " bytes of workspace\n");
  } else {
    out += str_cat("  planned memory: not available (", f.plan_error, ")\n");
  }
  return out;
}

ordered_json json(const GraphFacts& f) {
  ordered_json g;
  g["name"] = f.name;
  g["kind"] = f.kind == "graph" ? "eval" : "training_step";
  g["nodes"] = ordered_json::array();
  for (const NodeFacts& n : f.nodes) {
    g["nodes"].push_back(
        {{"name", n.name},
         {"op", n.op},
         {"inputs", n.inputs},
         {"compute", n.compute == "-" ? ordered_json() : ordered_json(n.compute)},
         {"accumulate", n.accumulate == "-" ? ordered_json() : ordered_json(n.accumulate)},
         {"outputs", n.outputs},
         {"reason", n.reason}});
  }
  ordered_json summary;
  summary["nodes_by_compute"] = f.by_compute;
  summary["casts"] = {{"count", f.casts}, {"to", f.casts_to}, {"bytes_per_run", f.cast_bytes}};
  summary[f.training ? "state_bytes" : "weight_bytes"] = f.state_bytes;
  if (f.arenas) {
    summary["planned_memory"] = {{"initializers", (*f.arenas)[0]},
                                 {"activations", (*f.arenas)[1]},
                                 {"workspace", (*f.arenas)[2]}};
  } else {
    summary["planned_memory"] = nullptr;
  }
  g["summary"] = summary;
  return g;
}

// A dot string: quotes and backslashes escaped, newlines as dot's \n.
std::string dot_quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Nodes coloured by compute dtype; casts drawn as diamonds; edges labelled with the dtype that
// flows.
std::string dot(const Graph& graph, const std::string& cluster) {
  static const std::map<std::string, std::string> colours = {
      {"f16", "#9ecae1"}, {"bf16", "#a1d99b"}, {"f32", "#fdd0a2"}, {"f64", "#fcbba1"}};
  std::string out = str_cat("  subgraph ", dot_quoted("cluster_" + cluster),
                            " {\n    label=", dot_quoted(cluster), ";\n");
  std::map<const Node*, std::string> ids;
  int next = 0;
  for (const auto& node : graph.nodes()) {
    const std::string id = str_cat(cluster == "eval" ? "e" : "s", next++);
    ids[node.get()] = id;
    const PrecisionDecision& d = node->precision();
    const std::string compute = d.compute ? std::string(dtype_name(*d.compute)) : "-";
    const auto colour = colours.find(compute);
    const bool cast = node->domain().empty() && node->op_type() == "Cast";
    const std::string label = str_cat(node->name().empty() ? node->op_type() : node->name(), "\n",
                                      node->op_type(), " ", compute);
    out += str_cat("    ", id, " [label=", dot_quoted(label), ", shape=", cast ? "diamond" : "box",
                   ", style=filled, fillcolor=",
                   dot_quoted(colour != colours.end() ? colour->second : "#eeeeee"),
                   ", tooltip=", dot_quoted(d.reason), "];\n");
  }
  for (const auto& node : graph.nodes()) {
    for (const Value* operand : node->operands()) {
      if (operand == nullptr || operand->producer() == nullptr) continue;
      out += str_cat("    ", ids.at(operand->producer()), " -> ", ids.at(node.get()),
                     " [label=", dot_quoted(dtype_name(operand->dtype())), "];\n");
    }
  }
  return out + "  }\n";
}

}  // namespace

std::string precision_report(const Graph& graph) {
  std::string out;
  for (const GraphFacts& facts : gather_all(graph)) {
    if (!out.empty()) out += "\n";
    out += text(facts);
  }
  return out;
}

std::string precision_report_json(const Graph& graph) {
  ordered_json root;
  root["schema"] = "ampc.precision/1";
  root["graphs"] = ordered_json::array();
  for (const GraphFacts& facts : gather_all(graph)) root["graphs"].push_back(json(facts));
  return root.dump(2) + "\n";
}

std::string precision_report_dot(const Graph& graph) {
  std::string out = str_cat("digraph ", dot_quoted(graph.name()), " {\n  rankdir=TB;\n");
  out += dot(graph, "eval");
  if (const Graph* step = graph.training_step()) out += dot(*step, "training step");
  return out + "}\n";
}

}  // namespace ampc
