#include "compiler/onnx_optimizer_folds.h"

#include <algorithm>
#include <optional>

#include "compiler/onnx_metadata.h"

namespace ampc::onnx_io {

std::vector<std::string> OptimizerFolds::parameters_read(const std::string& fx) const {
  std::vector<std::string> names;
  // A substring test first: most nodes read no parameter, and need no regular expression.
  if (fx.find("%p_") == std::string::npos && fx.find("%b_") == std::string::npos) return names;
  for (const std::string& arg : torch_tensor_args(fx)) {
    if (auto it = name_of_fx_name_.find(arg); it != name_of_fx_name_.end()) {
      names.push_back(it->second);
    }
  }
  return names;
}

void OptimizerFolds::read_graph(const onnx::GraphProto& graph) {
  name_of_fx_name_ = torch_names_by_fx_name(graph);
  if (name_of_fx_name_.empty()) return;
  for (const onnx::NodeProto& node : graph.node()) {
    const std::optional<std::string> fx = torch_fx_node(node);
    if (!fx) continue;
    for (const std::string& parameter : parameters_read(*fx)) {
      if (std::find(node.input().begin(), node.input().end(), parameter) != node.input().end()) {
        read_as_itself_.insert(parameter);
      }
    }
  }
}

std::vector<std::pair<int, std::string>> OptimizerFolds::read(const onnx::NodeProto& proto,
                                                              ImportSink& sink) {
  std::vector<std::pair<int, std::string>> renames;
  if (name_of_fx_name_.empty()) return renames;
  const std::optional<std::string> fx = torch_fx_node(proto);
  if (!fx) return renames;
  if (torch_training_batch_norm(proto)) {
    if (proto.op_type() == "BatchNormalization") {
      batch_norms_kept_.insert(*fx);
    } else {
      batch_norms_elsewhere_.emplace(*fx, proto.name());
    }
  }
  const std::vector<std::string> parameters = parameters_read(*fx);
  std::vector<int> inputs;  // the declared initializers some node reads as themselves
  for (int i = 0; i < proto.input_size(); ++i) {
    const Value* value = proto.input(i).empty() ? nullptr : sink.tensor(proto.input(i));
    if (value != nullptr && value->initializer() != nullptr &&
        value->declared() != Value::Declared::kUnknown && read_as_itself_.contains(value->name())) {
      inputs.push_back(i);
    }
  }
  if (parameters.empty() || inputs.empty()) return renames;
  const auto last_part = [](const std::string& name) { return name.substr(name.rfind('.') + 1); };
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::string& read = proto.input(inputs[k]);
    std::string parameter;
    if (parameters.size() == inputs.size()) {
      parameter = parameters[k];
    } else {
      for (const std::string& candidate : parameters) {
        if (last_part(candidate) != last_part(read)) continue;
        if (!parameter.empty()) return {};  // ambiguous
        parameter = candidate;
      }
    }
    if (parameter.empty() || parameter == read) continue;
    // A parameter the file holds is read by another node on purpose; one copied is not.
    if (sink.tensor(parameter) != nullptr && !copied_.contains(parameter)) continue;
    copied_.insert(parameter);
    renames.emplace_back(inputs[k], parameter);
  }
  return renames;
}

std::vector<std::string> OptimizerFolds::folded_batch_norms() const {
  std::vector<std::string> nodes;
  for (const auto& [fx, node] : batch_norms_elsewhere_) {
    if (!batch_norms_kept_.contains(fx)) nodes.push_back(node);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace ampc::onnx_io
