#include "runtime/interpreter.h"

#include <unordered_map>

#include "compiler/strings.h"

namespace ampc::runtime {

absl::StatusOr<std::vector<Tensor>> interpret_graph(const Graph& graph,
                                                    const std::vector<Tensor>& inputs,
                                                    Device device) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(str_cat("graph '", graph.name(), "' has ",
                                              graph.inputs().size(), " inputs, ", inputs.size(),
                                              " given"));
  }
  std::unordered_map<const Value*, Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* input = graph.inputs()[i];
    if (inputs[i].type() != input->type()) {
      return absl::InvalidArgumentError(str_cat("input '", input->name(), "' is ",
                                                type_to_string(input->type()), ", given ",
                                                type_to_string(inputs[i].type())));
    }
    values[input] = inputs[i];
  }
  for (const Value* init : graph.initializers()) values[init] = *init->initializer();

  std::vector<std::byte> workspace;
  for (const auto& node : graph.nodes()) {
    AMPC_ASSIGN_OR_RETURN(const KernelDef* kernel, KernelRegistry::global().resolve(*node, device));
    KernelContext ctx{.node = *node, .inputs = {}, .outputs = {}, .workspace = {}};
    for (const Value* operand : node->operands()) {
      if (operand == nullptr) {
        ctx.inputs.emplace_back();
        continue;
      }
      Tensor& tensor = values.at(operand);
      ctx.inputs.push_back(TensorArg{&tensor.type(), tensor.mutable_bytes().data()});
    }
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) {
        ctx.outputs.emplace_back();
        continue;
      }
      Tensor& tensor = values[node->output(i)] = Tensor(node->output(i)->type());
      ctx.outputs.push_back(TensorArg{&tensor.type(), tensor.mutable_bytes().data()});
    }
    if (kernel->workspace_bytes != nullptr) {
      workspace.assign(kernel->workspace_bytes(*node), std::byte{0});
      ctx.workspace = workspace;
    }
    absl::Status status = kernel->fn(ctx);
    if (!status.ok()) {
      return absl::Status(status.code(), str_cat(node->describe(), ": ", status.message()));
    }
  }
  std::vector<Tensor> outputs;
  for (const Value* output : graph.outputs()) outputs.push_back(values.at(output));
  return outputs;
}

}  // namespace ampc::runtime
