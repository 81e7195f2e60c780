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

namespace {

// Whether the ONNX node `proto` is a normalization and its FX node `fx` the aten norm it was made
// from.
bool made_from_aten_norm(const std::string& fx, const onnx::NodeProto& proto) {
  static constexpr std::string_view kNorms[] = {"BatchNormalization", "GroupNormalization",
                                                "InstanceNormalization", "LayerNormalization",
                                                "RMSNormalization"};
  if (std::find(std::begin(kNorms), std::end(kNorms), proto.op_type()) == std::end(kNorms)) {
    return false;
  }
  return torch_fx_op(fx).ends_with("_norm");
}

// Whether every element of `tensor` is the same number: what the exporter makes of a None weight
// (ones) or bias (zeros).
bool is_uniform(const Tensor& tensor) {
  for (int64_t i = 1; i < tensor.num_elements(); ++i) {
    if (tensor.element_as_double(i) != tensor.element_as_double(0)) return false;
  }
  return true;
}

}  // namespace

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
  if (inputs.empty()) return renames;
  if (parameters.empty()) {
    // A norm called without a weight or bias (layer_norm(x, shape, None, None)) is given a
    // constant of ones or zeros by the exporter, which its optimizer may have merged into an
    // equal parameter: the node reads a copy of it that does not train.
    if (!made_from_aten_norm(*fx, proto)) return renames;
    for (int input : inputs) {
      const Value* value = sink.tensor(proto.input(input));
      if (is_uniform(*value->initializer())) renames.emplace_back(input, "");
    }
    return renames;
  }
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
