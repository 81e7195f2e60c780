#include "compiler/report.h"

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "nlohmann/json.hpp"

namespace ampc {
namespace {

using nlohmann::ordered_json;

void count_value(GraphSummary& summary, const Value& value) {
  GraphSummary::DTypeCount& count = summary.per_dtype[std::string(dtype_name(value.dtype()))];
  ++count.values;
  if (value.initializer()) {
    count.initializer_elements += value.type().num_elements();
    count.initializer_bytes += value.type().byte_size();
  }
}

std::string op_label(const Node& node) {
  return node.domain().empty() ? node.op_type() : str_cat(node.domain(), ".", node.op_type());
}

// Thousands separators make parameter counts readable: 1,234,567.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return n < 0 ? "-" + digits : digits;
}

ordered_json type_json(const TensorType& type) {
  return {{"dtype", dtype_name(type.dtype)}, {"shape", type.shape}};
}

// The line naming the initializers the file declares PyTorch does not train (buffers, frozen
// parameters), which autodiff leaves untrained unless --trainable names them; "" when none.
std::string declared_untrained_line(const Graph& graph) {
  std::vector<std::string> buffers;
  std::vector<std::string> frozen;
  for (const Value* init : graph.initializers()) {
    if (init->is_buffer()) buffers.push_back(init->name());
    if (init->is_frozen_parameter()) frozen.push_back(init->name());
  }
  std::vector<std::string> parts;
  if (!buffers.empty()) parts.push_back(str_cat("buffers ", str_join(buffers, ", ")));
  if (!frozen.empty()) parts.push_back(str_cat("frozen parameters ", str_join(frozen, ", ")));
  if (parts.empty()) return "";
  return str_cat("  declared, not trained by default: ", str_join(parts, "; "), "\n");
}

ordered_json value_json(const Value* value) {
  ordered_json json = type_json(value->type());
  json["name"] = value->name();
  return json;
}

ordered_json attr_json(const AttrValue& value) {
  return std::visit(
      [](const auto& v) -> ordered_json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          return {{"tensor", type_json(v.type())}};
        } else if constexpr (std::is_same_v<T, DType>) {
          return dtype_name(v);
        } else {
          return v;
        }
      },
      value);
}

ordered_json precision_json(const PrecisionDecision& decision) {
  ordered_json json;
  json["compute"] = decision.compute ? ordered_json(dtype_name(*decision.compute)) : nullptr;
  json["accumulate"] =
      decision.accumulate ? ordered_json(dtype_name(*decision.accumulate)) : nullptr;
  json["reason"] = decision.reason;
  return json;
}

}  // namespace

GraphSummary summarize_graph(const Graph& graph) {
  GraphSummary summary;
  for (const Value* input : graph.inputs()) count_value(summary, *input);
  for (const Value* init : graph.initializers()) {
    count_value(summary, *init);
    ++summary.initializer_count;
    summary.parameter_elements += init->type().num_elements();
    summary.parameter_bytes += init->type().byte_size();
  }
  for (const auto& node : graph.nodes()) {
    ++summary.node_count;
    ++summary.nodes_per_op[op_label(*node)];
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (node->has_output(i)) count_value(summary, *node->output(i));
    }
  }
  return summary;
}

namespace {

// The summary block of one graph ("summary of graph 'g'" or "summary of training step 'g'").
std::string summary_text(const Graph& graph, std::string_view what) {
  std::string out;
  const GraphSummary summary = summarize_graph(graph);
  out += str_cat("\nsummary of ", what, " '", graph.name(), "'\n");
  out += str_cat("  nodes: ", summary.node_count, "\n");
  for (const auto& [op, count] : summary.nodes_per_op) {
    out += fmt::format("    {:<28} {:>6}\n", op, count);
  }
  out += str_cat("  parameters: ", grouped(summary.parameter_elements), " elements, ",
                 grouped(summary.parameter_bytes), " bytes, in ", summary.initializer_count,
                 " initializers\n");
  out += declared_untrained_line(graph);
  out += "  by dtype:                       values   param elements      param bytes\n";
  for (const auto& [dtype, count] : summary.per_dtype) {
    out += fmt::format("    {:<28} {:>6} {:>16} {:>16}\n", dtype, count.values,
                       grouped(count.initializer_elements), grouped(count.initializer_bytes));
  }
  if (!graph.state_updates().empty()) {
    // Elements per initializer name (summed over every initializer of the name), then per update.
    std::unordered_map<std::string_view, int64_t> by_name;
    for (const Value* init : graph.initializers()) {
      by_name[init->name()] += init->type().num_elements();
    }
    int64_t elements = 0;
    for (const Graph::StateUpdate& update : graph.state_updates()) {
      if (auto it = by_name.find(update.state); it != by_name.end()) elements += it->second;
    }
    out += str_cat("  state: ", graph.state_updates().size(), " tensors, ", grouped(elements),
                   " elements, updated after every step\n");
  }
  return out;
}

}  // namespace

std::string inspect_text(const Graph& graph) {
  std::string out = print_graph(graph, PrintOptions{.max_constant_elements = 16});
  out += summary_text(graph, "graph");
  if (auto from = graph.metadata().find("ampc.converted_from_opset");
      from != graph.metadata().end()) {
    out += str_cat("  converted: the file's opset ", from->second, " to ", graph.opset(""),
                   " by ONNX's version converter, for ops ampc has only in newer forms\n");
  }
  if (const Graph* step = graph.training_step()) {
    out += summary_text(*step, "training step");
    std::vector<std::string> recipe;
    for (const auto& [key, value] : graph.metadata()) {
      if (key.starts_with("ampc.training.")) recipe.push_back(str_cat(key.substr(14), " ", value));
    }
    if (!recipe.empty()) out += str_cat("  recipe: ", str_join(recipe, ", "), "\n");
  }
  return out;
}

std::string inspect_json(const Graph& graph) {
  ordered_json json;
  json["schema"] = kInspectSchema;
  json["graph"] = {{"name", graph.name()}, {"opsets", ordered_json::object()}};
  for (const auto& [domain, version] : graph.opset_imports()) {
    json["graph"]["opsets"][domain.empty() ? "ai.onnx" : domain] = version;
  }
  json["inputs"] = ordered_json::array();
  for (const Value* v : graph.inputs()) json["inputs"].push_back(value_json(v));
  json["outputs"] = ordered_json::array();
  for (const Value* v : graph.outputs()) json["outputs"].push_back(value_json(v));
  json["initializers"] = ordered_json::array();
  for (const Value* v : graph.initializers()) {
    ordered_json init = value_json(v);
    init["elements"] = v->type().num_elements();
    init["bytes"] = v->type().byte_size();
    init["constant"] = v->is_constant();
    const std::string_view declared = Value::declared_name(v->declared());
    init["declared"] = declared.empty() ? ordered_json(nullptr) : ordered_json(declared);
    json["initializers"].push_back(init);
  }
  json["nodes"] = ordered_json::array();
  for (const auto& node : graph.nodes()) {
    ordered_json n;
    n["name"] = node->name();
    n["op"] = node->op_type();
    n["domain"] = node->domain();
    n["inputs"] = ordered_json::array();
    for (const Value* operand : node->operands()) {
      n["inputs"].push_back(operand ? ordered_json(operand->name()) : ordered_json(nullptr));
    }
    n["outputs"] = ordered_json::array();
    for (int i = 0; i < node->num_outputs(); ++i) {
      n["outputs"].push_back(node->has_output(i) ? value_json(node->output(i))
                                                 : ordered_json(nullptr));
    }
    n["attributes"] = ordered_json::object();
    for (const auto& [name, value] : node->attrs()) n["attributes"][name] = attr_json(value);
    n["precision"] = precision_json(node->precision());
    json["nodes"].push_back(n);
  }
  const GraphSummary summary = summarize_graph(graph);
  ordered_json s;
  s["node_count"] = summary.node_count;
  s["nodes_per_op"] = summary.nodes_per_op;
  s["initializer_count"] = summary.initializer_count;
  s["parameter_elements"] = summary.parameter_elements;
  s["parameter_bytes"] = summary.parameter_bytes;
  s["per_dtype"] = ordered_json::object();
  for (const auto& [dtype, count] : summary.per_dtype) {
    s["per_dtype"][dtype] = {{"values", count.values},
                             {"initializer_elements", count.initializer_elements},
                             {"initializer_bytes", count.initializer_bytes}};
  }
  json["summary"] = s;
  return json.dump(2) + "\n";
}

}  // namespace ampc
