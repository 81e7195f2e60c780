#include "runtime/interpreter.h"

#include <algorithm>
#include <unordered_map>

#include "compiler/strings.h"

namespace ampc::runtime {

absl::StatusOr<std::vector<Tensor>> interpret_graph(const Graph& graph,
                                                    const std::vector<Tensor>& inputs,
                                                    Device device) {
  AMPC_ASSIGN_OR_RETURN(std::shared_ptr<Backend> backend, create_backend(device));
  return interpret_graph(graph, inputs, *backend);
}

absl::StatusOr<std::vector<Tensor>> interpret_graph(const Graph& graph,
                                                    const std::vector<Tensor>& inputs,
                                                    Backend& backend) {
  if (inputs.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(str_cat("graph '", graph.name(), "' has ",
                                              graph.inputs().size(), " inputs, ", inputs.size(),
                                              " given"));
  }
  std::unordered_map<const Value*, DeviceMemory> values;
  auto upload = [&](const Value* value, const Tensor& tensor) -> absl::Status {
    AMPC_ASSIGN_OR_RETURN(values[value], backend.allocate(tensor.type().byte_size(),
                                                          str_cat("value %", value->name())));
    const std::span<const uint8_t> bytes = tensor.bytes();
    return backend.copy_to_device(values[value].data(), bytes.data(),
                                  static_cast<int64_t>(bytes.size()));
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* input = graph.inputs()[i];
    if (inputs[i].type() != input->type()) {
      return absl::InvalidArgumentError(str_cat("input '", input->name(), "' is ",
                                                type_to_string(input->type()), ", given ",
                                                type_to_string(inputs[i].type())));
    }
    AMPC_RETURN_IF_ERROR(upload(input, inputs[i]));
  }
  for (const Value* init : graph.initializers()) {
    AMPC_RETURN_IF_ERROR(upload(init, *init->initializer()));
  }

  AMPC_RETURN_IF_ERROR(backend.make_current());
  AMPC_RETURN_IF_ERROR(backend.set_random_stream(0));
  std::vector<const Node*> order;
  // Kernel states and workspaces stay alive until the backend has finished with them.
  std::vector<std::unique_ptr<KernelState>> states;
  std::vector<DeviceMemory> workspaces;
  for (const auto& node : graph.nodes()) {
    AMPC_ASSIGN_OR_RETURN(const KernelDef* kernel,
                          KernelRegistry::global().resolve(*node, backend.device()));
    KernelContext ctx{.node = *node, .inputs = {}, .outputs = {}, .workspace = {}};
    ctx.exec = &backend.context();
    ctx.step = static_cast<int>(order.size());
    for (const Value* operand : node->operands()) {
      if (operand == nullptr) {
        ctx.inputs.emplace_back();
        continue;
      }
      ctx.inputs.push_back(TensorArg{&operand->type(), values.at(operand).data()});
    }
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) {
        ctx.outputs.emplace_back();
        continue;
      }
      const Value* output = node->output(i);
      AMPC_ASSIGN_OR_RETURN(values[output], backend.allocate(output->type().byte_size(),
                                                             str_cat("value %", output->name())));
      ctx.outputs.push_back(TensorArg{&output->type(), values[output].data()});
    }
    int64_t workspace_bytes = kernel->workspace_bytes ? kernel->workspace_bytes(*node) : 0;
    if (kernel->init != nullptr) {
      absl::StatusOr<std::unique_ptr<KernelState>> state = kernel->init(ctx);
      if (!state.ok()) {
        return absl::Status(state.status().code(),
                            str_cat(node->describe(), ": ", state.status().message()));
      }
      ctx.state = state->get();
      if (ctx.state != nullptr)
        workspace_bytes = std::max(workspace_bytes, ctx.state->workspace_bytes);
      states.push_back(*std::move(state));
    }
    if (workspace_bytes > 0) {
      AMPC_ASSIGN_OR_RETURN(DeviceMemory workspace,
                            backend.allocate(workspace_bytes, "kernel workspace"));
      ctx.workspace = std::span<std::byte>(workspace.data(), workspace_bytes);
      workspaces.push_back(std::move(workspace));
    }
    order.push_back(node.get());
    absl::Status status = kernel->fn(ctx);
    if (!status.ok()) {
      (void)backend.synchronize();
      return absl::Status(status.code(), str_cat(node->describe(), ": ", status.message()));
    }
  }
  AMPC_ASSIGN_OR_RETURN(const DeviceError error, backend.synchronize());
  if (error.code != kNoDeviceError) {
    const std::string where = error.step >= 0 && error.step < static_cast<int>(order.size())
                                  ? order[error.step]->describe()
                                  : std::string("a kernel");
    return absl::InvalidArgumentError(str_cat(where, ": ", describe_device_error(error)));
  }
  std::vector<Tensor> outputs;
  for (const Value* output : graph.outputs()) {
    Tensor tensor(output->type());
    const std::span<uint8_t> bytes = tensor.mutable_bytes();
    AMPC_RETURN_IF_ERROR(backend.copy_to_host(bytes.data(), values.at(output).data(),
                                              static_cast<int64_t>(bytes.size())));
    outputs.push_back(std::move(tensor));
  }
  return outputs;
}

}  // namespace ampc::runtime
