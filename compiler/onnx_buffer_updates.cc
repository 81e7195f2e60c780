#include "compiler/onnx_buffer_updates.h"

#include "compiler/onnx_metadata.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

// Whether a BatchNormalization reads `buffer` as its running mean or variance.
bool batch_norm_statistic(const Value& buffer) {
  for (const Use& use : buffer.uses()) {
    if (use.user->op_type() == "BatchNormalization" && use.operand >= 3) return true;
  }
  return false;
}

// The metadata value `key` as lines, or none.
std::vector<std::string> metadata_lines(const Graph& graph, std::string_view key) {
  std::vector<std::string> lines;
  auto it = graph.metadata().find(key);
  if (it == graph.metadata().end()) return lines;
  for (size_t begin = 0; begin < it->second.size();) {
    const size_t end = std::min(it->second.find('\n', begin), it->second.size());
    lines.push_back(it->second.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

}  // namespace

absl::Status import_buffer_updates(const onnx::GraphProto& graph, ImportSink& sink, Graph& out) {
  std::vector<std::string> updates, stale;
  for (const auto& [value_name, buffer_name] : torch_buffer_mutations(graph)) {
    const Value* buffer = sink.tensor(buffer_name);
    if (buffer == nullptr || buffer->kind() != Value::Kind::kInitializer || buffer->is_constant() ||
        buffer->uses().empty() || batch_norm_statistic(*buffer)) {
      continue;
    }
    Value* value = sink.tensor(value_name);
    if (value == nullptr || value->type() != buffer->type() ||
        value->kind() != Value::Kind::kNodeOutput) {
      stale.push_back(buffer_name);
      continue;
    }
    const std::string output = sink.fresh_name(str_cat(buffer_name, ".next"));
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> next,
                          sink.emit("Identity", {value}, {}, {output}, output));
    out.add_output(next[0]);
    updates.push_back(str_cat(buffer_name, "\t", output));
  }
  if (!updates.empty()) out.set_metadata(kBufferUpdatesKey, str_join(updates, "\n"));
  if (!stale.empty()) out.set_metadata(kStaleBuffersKey, str_join(stale, ", "));
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::string>> buffer_updates(const Graph& graph) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const std::string& line : metadata_lines(graph, kBufferUpdatesKey)) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) pairs.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return pairs;
}

bool is_buffer_update_output(const Graph& graph, const Value* output) {
  for (const auto& [buffer, name] : buffer_updates(graph)) {
    if (output->name() == name) return true;
  }
  return false;
}

}  // namespace ampc::onnx_io
