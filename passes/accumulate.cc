// accumulate: gradient accumulation over K runs of the training step (K micro-batches).
//
// Rewrites: every gradient output `<p>.grad` (autodiff's) becomes the running sum of the window:
//   `<p>.grad` = Add(`<p>.grad_sum`, the run's gradient), with `<p>.grad_sum` an f32 state
//   initializer (zeros; a low-precision gradient is cast up first) that the run writes back, or
//   clears when the window ends. The state `accumulate.micro_step` (i64, 0) counts the runs of
//   the window against the constant `accumulate.steps` = K; the bool output
//   `accumulate.window_end` is true on the K-th run, which resets the counter.
//   The gradients are of the loss's share, loss / K (the accumulate-share pass, before
//   loss-scale and autodiff: PyTorch's recipe `scaler.scale(loss / K).backward()`), so the sums
//   are the window's mean gradient: K micro-batches of a mean-reduced loss step like one batch K
//   times as large. The optimizer pass finds the counter and window end by name and holds every
//   optimizer and loss-scale state update until the window ends. With loss scaling the sums are
//   of scaled gradients, unscaled once, as PyTorch's GradScaler does with gradients accumulated
//   in .grad (each micro-step's gradients at scale S / K, so they overflow where PyTorch's do);
//   an overflow in any micro-step leaves a non-finite value in a sum and the update is skipped
//   once.
//
// accumulate-share (before loss-scale and autodiff, with K > 1): adds the output
//   `<loss>.share` = Div(loss, K), which loss scaling scales and autodiff differentiates; the
//   loss output itself, which ampc train logs, is unchanged.
// Assumes: autodiff ran; runs on the training step, before the optimizer pass.
// Numerics: each sum is rounded to f32 once per run, in micro-batch order.
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

class AccumulatePass final : public Pass {
 public:
  explicit AccumulatePass(int64_t steps) : steps_(steps) {}
  std::string_view name() const override { return "accumulate"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    if (steps_ < 1 || steps_ > kMaxAccumulationSteps) {
      return absl::InvalidArgumentError(
          str_cat("accumulate: K = ", steps_, " must be in [1, ", kMaxAccumulationSteps, "]"));
    }
    if (steps_ == 1) return false;
    for (const Value* init : graph.initializers()) {
      if (init->name() == kAccumulationStepsName) {
        return absl::FailedPreconditionError("the graph accumulates gradients already");
      }
    }
    std::vector<int> grads;
    for (int i = 0; i < static_cast<int>(graph.outputs().size()); ++i) {
      const Value* output = graph.outputs()[i];
      if (output->name().ends_with(kGradSuffix) && is_float(output->dtype())) grads.push_back(i);
    }
    if (grads.empty()) {
      return absl::FailedPreconditionError(
          "accumulate: no gradient outputs (<parameter>.grad); run autodiff first");
    }

    const TensorType count{DType::kI64, {}};
    Value* micro_step = graph.add_initializer(std::string(kMicroStepState), Tensor(count));
    Value* steps = constant(graph, kAccumulationStepsName, Tensor::from_i64({}, {steps_}));
    Value* next = node(graph, "Add",
                       {micro_step, constant(graph, "accumulate.one", Tensor::from_i64({}, {1}))},
                       "accumulate/next_micro_step");
    next->set_name(graph.unique_value_name("accumulate.next_micro_step"));
    Value* window_end =
        graph.create_node(kOnnxDomain, "Equal", {next, steps}, {TensorType{DType::kBool, {}}})
            ->output(0);
    window_end->producer()->set_name("accumulate/window_end");
    window_end->set_name(graph.unique_value_name(kWindowEndName));
    add_update(graph, micro_step,
               where(graph, window_end, constant(graph, "accumulate.zero", Tensor(count)), next,
                     "accumulate/micro_step"));

    Value* zero = constant(graph, "accumulate.zero_f32", Tensor::from_f32({}, {0.0f}));
    for (int index : grads) {
      Value* grad = graph.outputs()[index];
      const std::string name = grad->name();
      const std::string parameter = name.substr(0, name.size() - kGradSuffix.size());
      grad->set_name(graph.unique_value_name(str_cat(name, ".micro")));
      if (grad->dtype() != DType::kF32) {
        Node* cast =
            graph.create_node(kOnnxDomain, "Cast", {grad},
                              {TensorType{DType::kF32, grad->type().shape}}, {{"to", DType::kF32}});
        cast->set_name(str_cat(parameter, "/accumulate_in_f32"));
        grad = cast->output(0);
      }
      Value* sum = graph.add_initializer(graph.unique_value_name(str_cat(name, kSumSuffix)),
                                         Tensor(grad->type()));
      Value* added = node(graph, "Add", {sum, grad}, str_cat(parameter, "/accumulate"));
      add_update(graph, sum, where(graph, window_end, zero, added, str_cat(parameter, "/reset")));
      added->set_name(name);
      graph.set_output(index, added);
    }
    graph.add_output(window_end);
    describe_undecided_nodes(graph, "gradient accumulation (fp32)");
    return true;
  }

 private:
  static Value* constant(Graph& graph, std::string_view name, Tensor value) {
    Value* init = graph.add_initializer(graph.unique_value_name(name), std::move(value));
    init->set_constant(true);
    return init;
  }

  static Value* node(Graph& graph, std::string_view op, const std::vector<Value*>& operands,
                     std::string name) {
    Node* n = graph.create_node(kOnnxDomain, op, operands, {operands[0]->type()});
    n->set_name(std::move(name));
    return n->output(0);
  }

  static Value* where(Graph& graph, Value* condition, Value* x, Value* y, std::string name) {
    Node* n = graph.create_node(kOnnxDomain, "Where", {condition, x, y}, {y->type()});
    n->set_name(std::move(name));
    return n->output(0);
  }

  // `update` becomes the output `<state>.next` that replaces `state` after each run.
  static void add_update(Graph& graph, Value* state, Value* update) {
    update->set_name(graph.unique_value_name(str_cat(state->name(), ".next")));
    graph.add_output(update);
    graph.add_state_update(state->name(), update->name());
  }

  int64_t steps_;
};

class AccumulateSharePass final : public Pass {
 public:
  AccumulateSharePass(int64_t steps, std::string loss) : steps_(steps), loss_(std::move(loss)) {}
  std::string_view name() const override { return "accumulate-share"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    Value* loss = nullptr;
    for (Value* output : graph.outputs()) {
      if (output->name() == loss_) loss = output;
    }
    if (loss == nullptr || loss->type().num_elements() != 1 || !is_float(loss->dtype())) {
      return absl::InvalidArgumentError(
          str_cat("gradient accumulation needs a float scalar loss output '", loss_, "'"));
    }
    Value* k = graph.add_initializer(
        graph.unique_value_name(str_cat(loss_, ".accumulate_steps")),
        Tensor::from_doubles(loss->dtype(), {}, {static_cast<double>(steps_)}));
    k->set_constant(true);
    Node* share = graph.create_node(kOnnxDomain, "Div", {loss, k}, {loss->type()});
    share->set_name("accumulate/share");
    share->output(0)->set_name(graph.unique_value_name(str_cat(loss_, kShareSuffix)));
    graph.add_output(share->output(0));
    describe_undecided_nodes(graph, "gradient accumulation: the loss's share of the window");
    return true;
  }

 private:
  int64_t steps_;
  std::string loss_;
};

}  // namespace

std::unique_ptr<Pass> make_accumulate_pass(int64_t steps) {
  return std::make_unique<AccumulatePass>(steps);
}

std::unique_ptr<Pass> make_accumulate_share_pass(int64_t steps, std::string loss) {
  return std::make_unique<AccumulateSharePass>(steps, std::move(loss));
}

}  // namespace ampc
