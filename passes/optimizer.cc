// optimizer: turns the gradients autodiff produced into one training step.
//
// Rewrites: every graph output `<p>.grad` of an initializer `p` (autodiff's) is consumed by an
//   update node (ampc.SGD or ampc.Adam), and the output is replaced by the updated parameter
//   `<p>.next`; the optimizer's state becomes initializers (`<p>.momentum_buffer`, `<p>.exp_avg`,
//   `<p>.exp_avg_sq`, all zeros; `optimizer.step`, 0) whose updates are graph outputs too, and
//   the graph records each (state, update) pair (Graph::state_updates). The learning rate becomes
//   the graph input `lr` (f32[]), so schedules live in the runtime. The global gradient norm (the
//   norm of the per-tensor norms, as torch.nn.utils.clip_grad_norm_ computes it) is always an
//   output, `grad_norm`; with clip_grad_norm > 0 every gradient is first multiplied by
//   min(1, max_norm / (norm + 1e-6)).
// Assumes: autodiff ran; gradients and parameters are f32 (master weights are f32 by design).
// Numerics: the update ops follow PyTorch's single-tensor SGD, Adam and AdamW, operation by
//   operation (ops/optimizer.cc); nothing else is rounded.
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

constexpr std::string_view kGradSuffix = ".grad";

Value* zeros_like(Graph& graph, const Value* value, std::string_view suffix) {
  return graph.add_initializer(graph.unique_value_name(str_cat(value->name(), suffix)),
                               Tensor(value->type()));
}

class OptimizerPass final : public Pass {
 public:
  explicit OptimizerPass(OptimizerOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "optimizer"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    std::vector<std::pair<Value*, int>> updates;  // parameter, index of its gradient output
    for (int i = 0; i < static_cast<int>(graph.outputs().size()); ++i) {
      const std::string& name = graph.outputs()[i]->name();
      if (!name.ends_with(kGradSuffix)) continue;
      const std::string parameter = name.substr(0, name.size() - kGradSuffix.size());
      for (Value* init : graph.initializers()) {
        if (init->name() == parameter) updates.emplace_back(init, i);
      }
    }
    if (updates.empty()) {
      return absl::FailedPreconditionError(
          "nothing to train: no parameter gradients (outputs named <parameter>.grad); autodiff "
          "found no float initializer the loss depends on (check --trainable and --freeze)");
    }
    for (const auto& [parameter, index] : updates) {
      if (parameter->dtype() != DType::kF32) {
        return absl::UnimplementedError(str_cat("parameter '", parameter->name(), "' is ",
                                                dtype_name(parameter->dtype()),
                                                "; the optimizer updates f32 parameters"));
      }
    }
    Value* lr = graph.add_input("lr", TensorType{DType::kF32, {}});
    Value* step = graph.add_initializer("optimizer.step", Tensor(TensorType{DType::kF32, {}}));

    std::vector<Value*> grads;
    for (const auto& [parameter, index] : updates) grads.push_back(graph.outputs()[index]);
    Value* norm = add_node(graph, "GlobalNorm", grads, {TensorType{DType::kF32, {}}}, {})[0];
    norm->set_name(graph.unique_value_name("grad_norm"));
    if (options_.clip_grad_norm > 0) {
      Value* coefficient = add_node(graph, "ClipCoefficient", {norm}, {TensorType{DType::kF32, {}}},
                                    {{"max_norm", options_.clip_grad_norm}})[0];
      for (Value*& grad : grads) {
        Node* scaled = graph.create_node(kOnnxDomain, "Mul", {grad, coefficient}, {grad->type()});
        scaled->output(0)->set_name(graph.unique_value_name(grad->name() + ".clipped"));
        grad = scaled->output(0);
      }
    }

    std::vector<std::pair<Value*, Value*>> state_updates;  // state, its update
    for (size_t k = 0; k < updates.size(); ++k) {
      Value* parameter = updates[k].first;
      std::vector<Value*> state = {parameter};
      std::vector<Value*> outputs;
      if (options_.kind == OptimizerOptions::Kind::kSgd) {
        state.push_back(zeros_like(graph, parameter, ".momentum_buffer"));
        outputs = add_node(graph, "SGD", {parameter, grads[k], state[1], lr, step},
                           {parameter->type(), parameter->type()},
                           {{"momentum", options_.momentum},
                            {"dampening", options_.dampening},
                            {"nesterov", int64_t{options_.nesterov}},
                            {"weight_decay", options_.weight_decay}});
      } else {
        state.push_back(zeros_like(graph, parameter, ".exp_avg"));
        state.push_back(zeros_like(graph, parameter, ".exp_avg_sq"));
        const bool decoupled = options_.kind == OptimizerOptions::Kind::kAdamW;
        outputs = add_node(graph, "Adam", {parameter, grads[k], state[1], state[2], lr, step},
                           {parameter->type(), parameter->type(), parameter->type()},
                           {{"beta1", options_.beta1},
                            {"beta2", options_.beta2},
                            {"epsilon", options_.epsilon},
                            {"weight_decay", options_.weight_decay},
                            {"decoupled_weight_decay", int64_t{decoupled}}});
      }
      for (size_t s = 0; s < state.size(); ++s) state_updates.emplace_back(state[s], outputs[s]);
    }
    Value* one = graph.add_initializer(graph.unique_value_name("optimizer.one"),
                                       Tensor::from_f32({}, {1.0f}));
    one->set_constant(true);
    Node* next_step = graph.create_node(kOnnxDomain, "Add", {step, one}, {step->type()});
    state_updates.emplace_back(step, next_step->output(0));

    // The gradient outputs go; the norm and every state update become outputs.
    for (auto it = updates.rbegin(); it != updates.rend(); ++it) graph.erase_output(it->second);
    graph.add_output(norm);
    for (const auto& [state, update] : state_updates) {
      update->set_name(graph.unique_value_name(state->name() + ".next"));
      graph.add_output(update);
      graph.add_state_update(state->name(), update->name());
    }
    return true;
  }

 private:
  static std::vector<Value*> add_node(Graph& graph, std::string_view op,
                                      const std::vector<Value*>& operands,
                                      const std::vector<TensorType>& types, Attributes attrs) {
    if (!graph.opset_imports().contains(kAmpcDomain)) graph.set_opset(std::string(kAmpcDomain), 1);
    std::vector<std::optional<TensorType>> output_types(types.begin(), types.end());
    Node* node = graph.create_node(kAmpcDomain, op, operands, output_types, std::move(attrs));
    node->set_name(str_cat("optimizer/", op));
    std::vector<Value*> outputs;
    for (int i = 0; i < node->num_outputs(); ++i) outputs.push_back(node->output(i));
    return outputs;
  }

  OptimizerOptions options_;
};

}  // namespace

std::unique_ptr<Pass> make_optimizer_pass(OptimizerOptions options) {
  return std::make_unique<OptimizerPass>(std::move(options));
}

}  // namespace ampc
