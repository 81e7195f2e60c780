#include "compiler/onnx_buffer_updates.h"

#include <algorithm>

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

// PyTorch updates a buffer under torch.no_grad() (an update with a gradient history would keep
// the previous step's graph alive), so what the forward reads of the new value has no gradient;
// no exporter records the block. Makes every reader of `value` read it through an Identity with
// `stop_gradient`, placed before the first of them.
absl::Status read_without_gradient(Value* value, ImportSink& sink, Graph& out) {
  const std::string read = sink.fresh_name(str_cat(value->name(), "/no_grad"));
  AMPC_ASSIGN_OR_RETURN(
      std::vector<Value*> stopped,
      sink.emit("Identity", {value}, {{"stop_gradient", AttrValue(int64_t{1})}}, {read}, read));
  Node* stop = stopped[0]->producer();
  const std::vector<Use> uses = value->uses();
  for (const Use& use : uses) {
    if (use.user != stop) use.user->set_operand(use.operand, stopped[0]);
  }
  for (Node* node : out.node_list()) {
    if (node == stop) break;
    if (std::find(node->operands().begin(), node->operands().end(), stopped[0]) !=
        node->operands().end()) {
      out.move_node(stop, node);
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status import_buffer_updates(const onnx::GraphProto& graph, ImportSink& sink, Graph& out) {
  std::vector<std::string> updates, stale;
  for (const auto& [value_name, buffer_name] : torch_buffer_mutations(graph)) {
    Value* value = sink.tensor(value_name);
    const bool computed = value != nullptr && value->kind() == Value::Kind::kNodeOutput;
    if (computed) AMPC_RETURN_IF_ERROR(read_without_gradient(value, sink, out));
    const Value* buffer = sink.tensor(buffer_name);
    if (buffer == nullptr || buffer->kind() != Value::Kind::kInitializer || buffer->is_constant() ||
        buffer->uses().empty() || batch_norm_statistic(*buffer)) {
      continue;  // nothing reads it, or the batchnorm-state pass updates it
    }
    if (!computed || value->type() != buffer->type()) {
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
