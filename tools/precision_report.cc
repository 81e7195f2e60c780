// `ampc inspect --precision`: one line per node with its operand dtypes, its compute, accumulate
// and output dtype and the reason autocast gave; then a summary of what the precision costs and
// saves: nodes per compute dtype, the casts and the bytes they move per run, state bytes, and
// the memory the runtime's planner gives each arena. For a training model the same for the
// training step. The same facts render as text, JSON (docs/inspect-json.md) or Graphviz dot.
#include "tools/precision_report.h"

#include <map>
#include <string_view>
#include <unordered_set>

#include "compiler/compile.h"
#include "compiler/fused_body.h"
#include "compiler/onnx_io.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"
#include "runtime/plan.h"

namespace ampc {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string grouped(int64_t n) {
  const std::string digits = str_cat(n < 0 ? -n : n);
  std::string out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::vector<std::string> dtypes_of(const std::vector<Value*>& values) {
  std::vector<std::string> names;
  for (const Value* v : values) names.push_back(v ? std::string(dtype_name(v->dtype())) : "_");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  return names.empty() ? "-" : str_join(names, ",");
}

// The key of nodes_by_compute for the nodes with no decision at all (a file compiled without
// --precision); "-" is for decided nodes with no floating-point data.
constexpr std::string_view kUndecided = "undecided";

struct NodeFacts {
  std::string name;         // as in the file: "" when it has none
  std::string output_name;  // a nameless node's first output, which identifies it
  std::string op;
  std::vector<std::string> inputs;
  std::string compute;  // "-" when none
  bool decided = false;
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
  // Casts inside ampc.FusedElementwise bodies: they round in registers and move no memory.
  int fused_casts = 0;
  std::map<std::string, int> fused_casts_to;
  bool training = false;
  int64_t state_bytes = 0;  // training: every piece of state; else weight_bytes()
  // Training: the state split by role, and the gradients the optimizer receives.
  int64_t parameter_bytes = 0;
  int64_t optimizer_state_bytes = 0;  // moments and the step counter
  int64_t other_state_bytes = 0;      // running statistics, loss scale, accumulation
  int64_t gradient_bytes = 0;
  std::optional<std::array<int64_t, runtime::kNumArenas>> arenas;
  std::string plan_error;
  // The same figures for the model compiled at O0 (every node f32), when the compile recorded
  // them (kBaselineKey).
  std::optional<int64_t> o0_state_bytes;
  std::optional<int64_t> o0_planned_bytes;

  int64_t planned_bytes() const {
    int64_t total = 0;
    for (int64_t bytes : arenas.value_or(std::array<int64_t, runtime::kNumArenas>{})) {
      total += bytes;
    }
    return total;
  }
};

// The initializer `value` is, or is a Cast of (a low-precision parameter read up to f32).
const Value* through_cast(const Value* value) {
  const Node* producer = value->producer();
  if (producer != nullptr && producer->domain().empty() && producer->op_type() == "Cast") {
    return producer->operand(0);
  }
  return value;
}

// The gradient an update node's gradient operand was made from, as it is stored: back through
// what the optimizer pass adds (the fused unscale, a scaling by a scalar for clipping or the
// accumulation mean) to the value autodiff or the accumulate pass produced, and before a Cast
// up from f16/bf16 (the fused unscale reads that gradient before its cast).
const Value* gradient_source(const Value* value) {
  for (;;) {
    const Node* p = value->producer();
    if (p == nullptr) return value;
    if (p->domain() == kAmpcDomain && p->op_type() == "UnscaleGradients") {
      for (int i = 1; i < p->num_outputs(); ++i) {
        if (p->output(i) == value) value = p->operand(i);
      }
      if (value->producer() == p) return value;
      continue;
    }
    // The optimizer pass's clipping and accumulation-mean Muls (named <grad>/clip, /mean).
    const bool by_scalar = p->domain().empty() && p->op_type() == "Mul" &&
                           (p->name().ends_with("/clip") || p->name().ends_with("/mean"));
    if (by_scalar) {
      value = p->operand(0);
      continue;
    }
    const bool cast_up =
        p->domain().empty() && p->op_type() == "Cast" && value->dtype() == DType::kF32 &&
        (p->operand(0)->dtype() == DType::kF16 || p->operand(0)->dtype() == DType::kBF16);
    return cast_up ? p->operand(0) : value;
  }
}

std::unordered_set<std::string_view> names_of_state(const Graph& graph) {
  std::unordered_set<std::string_view> names;
  for (const Graph::StateUpdate& update : graph.state_updates()) names.insert(update.state);
  return names;
}

// Splits a training step's state into parameters, optimizer state and the rest, by what the
// update nodes (ampc.SGD / ampc.Adam) read, and adds up the gradients they are given, as stored.
void split_state(const Graph& graph, const std::unordered_set<std::string_view>& state_names,
                 GraphFacts& facts) {
  std::map<std::string, int64_t> state;  // name -> bytes
  for (const Value* init : graph.initializers()) {
    if (state_names.contains(init->name())) state[init->name()] = init->type().byte_size();
  }
  for (const auto& node : graph.nodes()) {
    if (node->domain() != kAmpcDomain || (node->op_type() != "SGD" && node->op_type() != "Adam")) {
      continue;
    }
    facts.gradient_bytes += gradient_source(node->operand(1))->type().byte_size();
    for (int i = 0; i < node->num_operands(); ++i) {
      if (i == 1 || node->operand(i) == nullptr) continue;  // the gradient
      const auto it = state.find(through_cast(node->operand(i))->name());
      if (it == state.end()) continue;
      (i == 0 ? facts.parameter_bytes : facts.optimizer_state_bytes) += it->second;
      state.erase(it);
    }
  }
  for (const auto& [name, bytes] : state) facts.other_state_bytes += bytes;
}

// f32 over bf16 over f16: what "widest" means for the dtypes a node computes in.
int width_rank(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 4;
    case DType::kF32:
      return 3;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 1;
    default:
      return 0;
  }
}

absl::StatusOr<FusedBody> body_of(const Node& node) {
  const AttrValue* attr = node.find_attr("body");
  const std::string* text = attr != nullptr ? std::get_if<std::string>(attr) : nullptr;
  if (text == nullptr) return absl::InvalidArgumentError("no body");
  return FusedBody::parse(*text, node.num_operands());
}

// What an ampc.FusedElementwise node computes in: the widest dtype any instruction of its body
// computes in, each counted as the node it replaced is (a Cast in the dtype it casts to, any
// other instruction in the widest floating-point dtype among its operands and result); so a
// body that mixes f32 with f16 reports f32. None (nullopt) when nothing in it is floating point.
// The fused node's own decision names its last member's dtype, which hides the rest of the body.
std::optional<DType> fused_compute(const Node& node) {
  const absl::StatusOr<FusedBody> body = body_of(node);
  if (!body.ok()) return std::nullopt;
  std::vector<DType> slot_dtypes;
  for (const Value* operand : node.operands()) {
    slot_dtypes.push_back(operand != nullptr ? operand->dtype() : DType::kBool);
  }
  std::optional<DType> widest;
  auto widen = [&](DType dtype) {
    if (width_rank(dtype) > 0 && (!widest || width_rank(dtype) > width_rank(*widest))) {
      widest = dtype;
    }
  };
  for (const FusedInstr& instr : body->instrs) {
    widen(instr.dtype);
    if (instr.op != FusedOp::kCast) {
      for (int arg : instr.args) widen(slot_dtypes[arg]);
    }
    slot_dtypes.push_back(instr.dtype);
  }
  return widest;
}

// The Casts inside a fused node's body, by the dtype each casts to.
std::map<std::string, int> fused_casts(const Node& node) {
  std::map<std::string, int> to;
  const absl::StatusOr<FusedBody> body = body_of(node);
  if (!body.ok()) return to;
  for (const FusedInstr& instr : body->instrs) {
    if (instr.op == FusedOp::kCast) to[std::string(dtype_name(instr.dtype))]++;
  }
  return to;
}

bool is_fused(const Node& node) {
  return node.domain() == kAmpcDomain && node.op_type() == "FusedElementwise";
}

NodeFacts node_facts(const Node& node) {
  std::vector<Value*> outputs;
  for (int i = 0; i < node.num_outputs(); ++i) {
    outputs.push_back(node.has_output(i) ? node.output(i) : nullptr);
  }
  const PrecisionDecision& d = node.precision();
  NodeFacts n;
  n.name = node.name();
  if (n.name.empty()) {
    for (const Value* output : outputs) {
      if (output == nullptr) continue;
      n.output_name = output->name();
      break;
    }
  }
  n.op = node.def() != nullptr ? node.def()->qualified_name() : node.op_type();
  n.inputs = dtypes_of(node.operands());
  n.decided = !d.empty();
  std::optional<DType> compute = d.compute;
  if (n.decided && is_fused(node)) compute = fused_compute(node);
  n.compute = compute ? std::string(dtype_name(*compute)) : "-";
  n.accumulate = d.accumulate ? std::string(dtype_name(*d.accumulate)) : "-";
  n.outputs = dtypes_of(outputs);
  n.reason = d.reason;
  n.cast = node.domain().empty() && node.op_type() == "Cast";
  return n;
}

// The weights of an eval graph: the bytes of its floating-point initializers that are not
// program constants (Value::is_constant; in the file, the doc_string "ampc: constant"). Integer
// tensors (shapes, axes, split sizes, indices) are never weights, whether the exporter or ampc
// wrote them.
int64_t weight_bytes(const Graph& graph) {
  int64_t bytes = 0;
  for (const Value* init : graph.initializers()) {
    if (is_float(init->dtype()) && !init->is_constant()) bytes += init->type().byte_size();
  }
  return bytes;
}

GraphFacts gather(const Graph& graph, std::string kind) {
  GraphFacts facts;
  facts.name = graph.name();
  facts.kind = std::move(kind);
  for (const auto& node : graph.nodes()) {
    NodeFacts n = node_facts(*node);
    facts.by_compute[n.decided ? n.compute : std::string(kUndecided)]++;
    if (n.cast) {
      ++facts.casts;
      facts.casts_to[std::string(dtype_name(node->output(0)->dtype()))]++;
      facts.cast_bytes +=
          node->operand(0)->type().byte_size() + node->output(0)->type().byte_size();
    }
    if (is_fused(*node)) {
      for (const auto& [to, count] : fused_casts(*node)) {
        facts.fused_casts += count;
        facts.fused_casts_to[to] += count;
      }
    }
    facts.nodes.push_back(std::move(n));
  }
  facts.training = !graph.state_updates().empty();
  const std::unordered_set<std::string_view> state_names = names_of_state(graph);
  if (facts.training) {
    split_state(graph, state_names, facts);
    for (const Value* init : graph.initializers()) {
      if (!init->is_constant() && state_names.contains(init->name())) {
        facts.state_bytes += init->type().byte_size();
      }
    }
  } else {
    facts.state_bytes = weight_bytes(graph);
  }
  absl::StatusOr<std::array<int64_t, runtime::kNumArenas>> arenas =
      planned_arenas(graph, runtime::Device::kCpu);
  if (arenas.ok()) {
    facts.arenas = *arenas;
  } else {
    facts.plan_error = std::string(arenas.status().message());
  }
  return facts;
}

std::string_view json_kind(const GraphFacts& f) {
  return f.kind == "graph" ? "eval" : "training_step";
}

std::vector<GraphFacts> gather_all(const Graph& graph) {
  std::vector<GraphFacts> all = {gather(graph, "graph")};
  if (const Graph* step = graph.training_step()) all.push_back(gather(*step, "training step"));
  const auto baseline = graph.metadata().find(kMetadataPrecisionBaseline);
  if (baseline == graph.metadata().end()) return all;
  const ordered_json json = ordered_json::parse(baseline->second, nullptr, false);
  if (!json.is_object()) return all;  // not ours to trust; say nothing about O0
  for (GraphFacts& f : all) {
    const auto it = json.find(json_kind(f));
    if (it == json.end() || !it->is_object()) continue;
    if (it->contains("state_bytes") && (*it)["state_bytes"].is_number_integer()) {
      f.o0_state_bytes = (*it)["state_bytes"].get<int64_t>();
    }
    if (it->contains("planned_bytes") && (*it)["planned_bytes"].is_number_integer()) {
      f.o0_planned_bytes = (*it)["planned_bytes"].get<int64_t>();
    }
  }
  return all;
}

// "-37.5%": the change from `before` to `after`.
std::string change(int64_t before, int64_t after) {
  if (before <= 0) return "n/a";
  return fmt::format("{:+.1f}%",
                     100.0 * static_cast<double>(after - before) / static_cast<double>(before));
}

// How text and dot name a node: its name, or for a nameless one "(no name: %<first output>)",
// which no op type can be mistaken for.
std::string shown_name(const NodeFacts& n) {
  if (!n.name.empty()) return n.name;
  return n.output_name.empty() ? "(no name)" : str_cat("(no name: %", n.output_name, ")");
}

std::string text(const GraphFacts& f) {
  std::string out = str_cat("precision of ", f.kind, " '", f.name, "'\n");
  const std::string row = "  {:<40} {:<22} {:<16} {:<5} {:<4} {:<10} {}\n";
  out += fmt::format(fmt::runtime(row), "node", "op", "inputs", "comp", "acc", "output", "reason");
  for (const NodeFacts& n : f.nodes) {
    out += fmt::format(fmt::runtime(row), shown_name(n), n.op, joined(n.inputs), n.compute,
                       n.accumulate, joined(n.outputs),
                       n.reason.empty() ? "(no decision: compiled without --precision)" : n.reason);
  }
  std::vector<std::string> compute;
  for (const auto& [dtype, n] : f.by_compute) compute.push_back(str_cat(dtype, " ", n));
  std::vector<std::string> targets;
  for (const auto& [dtype, n] : f.casts_to) targets.push_back(str_cat(n, " to ", dtype));
  out += str_cat("\nsummary of '", f.name, "'\n");
  out += str_cat("  nodes by compute dtype: ", str_join(compute, ", "), "\n");
  std::vector<std::string> fused_targets;
  for (const auto& [dtype, n] : f.fused_casts_to)
    fused_targets.push_back(str_cat(n, " to ", dtype));
  out += str_cat("  casts: ", f.casts,
                 targets.empty() ? "" : str_cat(" (", str_join(targets, ", "), ")"),
                 ", reading and writing ", grouped(f.cast_bytes), " bytes per run");
  if (f.fused_casts > 0) {
    out += str_cat("; and ", f.fused_casts, " inside fused nodes (", str_join(fused_targets, ", "),
                   "), which move no memory of their own");
  }
  out += "\n";
  if (f.training) {
    out += str_cat("  training state: ", grouped(f.state_bytes), " bytes (parameters ",
                   grouped(f.parameter_bytes), ", optimizer moments and step ",
                   grouped(f.optimizer_state_bytes), ", other ", grouped(f.other_state_bytes),
                   "); gradients ", grouped(f.gradient_bytes), " bytes per step\n");
  } else {
    out += str_cat("  weights: ", grouped(f.state_bytes), " bytes\n");
  }
  if (f.arenas) {
    out += str_cat("  planned memory: ", grouped(f.planned_bytes()), " bytes (",
                   grouped((*f.arenas)[0]), " of initializers, ", grouped((*f.arenas)[1]),
                   " of activations, ", grouped((*f.arenas)[2]), " of workspace)\n");
  } else {
    out += str_cat("  planned memory: not available (", f.plan_error, ")\n");
  }
  if (f.o0_planned_bytes && f.o0_state_bytes) {
    const std::string planned_change =
        f.arenas ? str_cat(" (this compile ", change(*f.o0_planned_bytes, f.planned_bytes()), ")")
                 : "";
    out += str_cat("  at O0 (every node f32): planned memory ", grouped(*f.o0_planned_bytes),
                   " bytes", planned_change, ", ", f.training ? "training state " : "weights ",
                   grouped(*f.o0_state_bytes), " bytes (", change(*f.o0_state_bytes, f.state_bytes),
                   ")\n");
  }
  return out;
}

ordered_json json(const GraphFacts& f) {
  ordered_json g;
  g["name"] = f.name;
  g["kind"] = json_kind(f);
  g["nodes"] = ordered_json::array();
  for (const NodeFacts& n : f.nodes) {
    ordered_json node = {{"name", n.name}};
    if (n.name.empty()) node["output_name"] = n.output_name;
    node.update(ordered_json{
        {"op", n.op},
        {"inputs", n.inputs},
        {"compute", n.compute == "-" ? ordered_json() : ordered_json(n.compute)},
        {"accumulate", n.accumulate == "-" ? ordered_json() : ordered_json(n.accumulate)},
        {"outputs", n.outputs},
        {"reason", n.reason}});
    g["nodes"].push_back(std::move(node));
  }
  ordered_json summary;
  summary["nodes_by_compute"] = f.by_compute;
  summary["casts"] = {{"count", f.casts},
                      {"to", f.casts_to},
                      {"bytes_per_run", f.cast_bytes},
                      {"fused", {{"count", f.fused_casts}, {"to", f.fused_casts_to}}}};
  summary[f.training ? "state_bytes" : "weight_bytes"] = f.state_bytes;
  if (f.training) {
    summary["state"] = {{"parameters", f.parameter_bytes},
                        {"optimizer", f.optimizer_state_bytes},
                        {"other", f.other_state_bytes}};
    summary["gradient_bytes"] = f.gradient_bytes;
  }
  if (f.arenas) {
    summary["planned_memory"] = {{"initializers", (*f.arenas)[0]},
                                 {"activations", (*f.arenas)[1]},
                                 {"workspace", (*f.arenas)[2]},
                                 {"total", f.planned_bytes()}};
  } else {
    summary["planned_memory"] = nullptr;
  }
  if (f.o0_planned_bytes && f.o0_state_bytes) {
    summary["o0"] = {{"planned_bytes", *f.o0_planned_bytes},
                     {f.training ? "state_bytes" : "weight_bytes", *f.o0_state_bytes}};
  } else {
    summary["o0"] = nullptr;
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
std::string dot(const Graph& graph, const GraphFacts& facts, const std::string& cluster) {
  static const std::map<std::string, std::string> colours = {
      {"f16", "#9ecae1"}, {"bf16", "#a1d99b"}, {"f32", "#fdd0a2"}, {"f64", "#fcbba1"}};
  std::string out = str_cat("  subgraph ", dot_quoted("cluster_" + cluster),
                            " {\n    label=", dot_quoted(cluster), ";\n");
  std::map<const Node*, std::string> ids;
  int next = 0;
  for (const auto& node : graph.nodes()) {
    const NodeFacts& n = facts.nodes[next];  // gather keeps the graph's order
    const std::string id = str_cat(cluster == "eval" ? "e" : "s", next++);
    ids[node.get()] = id;
    const auto colour = colours.find(n.compute);
    const std::string label = str_cat(shown_name(n), "\n", node->op_type(), " ", n.compute);
    out += str_cat("    ", id, " [label=", dot_quoted(label),
                   ", shape=", n.cast ? "diamond" : "box", ", style=filled, fillcolor=",
                   dot_quoted(colour != colours.end() ? colour->second : "#eeeeee"),
                   ", tooltip=", dot_quoted(n.reason), "];\n");
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

absl::StatusOr<std::unique_ptr<Graph>> as_written(const Graph& compiled) {
  AMPC_ASSIGN_OR_RETURN(const std::string bytes, export_onnx_bytes(compiled));
  return import_onnx_bytes(bytes, str_cat("the compiled '", compiled.name(), "'"));
}

absl::StatusOr<std::array<int64_t, runtime::kNumArenas>> planned_arenas(const Graph& graph,
                                                                        runtime::Device device) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Plan> plan, runtime::Plan::build(graph, device));
  std::array<int64_t, runtime::kNumArenas> arenas{};
  for (int a = 0; a < runtime::kNumArenas; ++a) {
    arenas[a] = plan->arena_bytes(static_cast<runtime::ArenaKind>(a));
  }
  return arenas;
}

std::optional<std::string> precision_baseline(const Graph& o0) {
  const absl::StatusOr<std::unique_ptr<Graph>> written = as_written(o0);
  if (!written.ok()) return std::nullopt;
  ordered_json json = ordered_json::object();
  for (const GraphFacts& f : gather_all(**written)) {
    if (!f.arenas) continue;
    json[std::string(json_kind(f))] = {{"state_bytes", f.state_bytes},
                                       {"planned_bytes", f.planned_bytes()}};
  }
  return json.dump();
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
  const std::vector<GraphFacts> facts = gather_all(graph);
  out += dot(graph, facts[0], "eval");
  if (const Graph* step = graph.training_step()) out += dot(*step, facts[1], "training step");
  return out + "}\n";
}

}  // namespace ampc
