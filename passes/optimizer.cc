// optimizer: turns the gradients autodiff produced into one training step.
//
// Rewrites: every graph output `<p>.grad` of an initializer `p` (autodiff's) is consumed by an
//   update node (ampc.SGD or ampc.Adam), and the output is replaced by the updated parameter
//   `<p>.next`; the optimizer's state becomes initializers (`<p>.momentum_buffer` when SGD has
//   momentum, `<p>.exp_avg`, `<p>.exp_avg_sq`, all zeros; `optimizer.step`, 0) whose updates are
//   graph outputs too, and the graph records each (state, update) pair
//   (Graph::state_updates). The learning rate becomes
//   the graph input `lr` (f32[]), so schedules live in the runtime. The global gradient norm (the
//   norm of the per-tensor norms, as torch.nn.utils.clip_grad_norm_ computes it) is always an
//   output, `grad_norm`; with clip_grad_norm > 0 every gradient is first multiplied by
//   min(1, max_norm / (norm + 1e-6)).
// With loss scaling (options.loss_scale; the loss-scale pass added `loss_scale` and autodiff
//   differentiated the scaled loss): one ampc.UnscaleGradients node reads every gradient (in
//   its own dtype) and writes it times 1/scale in f32 (the reciprocal in double, as GradScaler),
//   with `found_inf` (a bool output): whether any unscaled value is inf or NaN (with clipping,
//   or whether the global norm is). On an overflow every optimizer state update keeps the old
//   value (parameters and moments: the update ops' `skip` input, so that the runtime can update
//   them in place; the step counter: a Where), the scale backs off and the
//   skipped-step count (`loss_scale.skipped_steps`) grows; otherwise the dynamic scale's growth
//   tracker (`loss_scale.growth_tracker`) counts the clean step (ampc.LossScaleUpdate). The
//   decision stays in the graph: no value goes to the host in the middle of a step.
// With gradient accumulation (the accumulate pass ran: the constant `accumulate.steps` = K and
//   the output `accumulate.window_end`): the gradients are the window's sums of the loss's
//   shares (loss / K, accumulate-share), so their mean already, and every optimizer and
//   loss-scale state update keeps the
//   old value until the window ends, so the scale is the same for all K micro-steps and an
//   overflow in any of them skips the update once (the update ops' `skip` is then "overflow or
//   not the window's end").
// Without master weights (O3: insert-casts stored the parameters low), a parameter and its
//   moments are stored in its low dtype, read up to f32 for the update and rounded back.
// Assumes: autodiff ran; parameters are f32 (master weights), or f16/bf16 without them.
// Numerics: the update ops follow PyTorch's single-tensor SGD, Adam and AdamW, operation by
//   operation (ops/optimizer.cc); nothing else is rounded.
#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

constexpr std::string_view kNoMasterWeights =
    "optimizer: no master weights (O3): a low-precision parameter, updated in f32";

Value* zeros_like(Graph& graph, const Value* value, std::string_view suffix) {
  return graph.add_initializer(graph.unique_value_name(str_cat(value->name(), suffix)),
                               Tensor(value->type()));
}

class OptimizerPass final : public Pass {
 public:
  explicit OptimizerPass(OptimizerOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "optimizer"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    std::unordered_map<std::string_view, std::vector<Value*>> initializers_named;
    for (Value* init : graph.initializers()) initializers_named[init->name()].push_back(init);
    std::vector<std::pair<Value*, int>> updates;  // parameter, index of its gradient output
    for (int i = 0; i < static_cast<int>(graph.outputs().size()); ++i) {
      const std::string& name = graph.outputs()[i]->name();
      if (!name.ends_with(kGradSuffix)) continue;
      auto named = initializers_named.find(
          std::string_view(name).substr(0, name.size() - kGradSuffix.size()));
      if (named == initializers_named.end()) continue;
      for (Value* init : named->second) updates.emplace_back(init, i);
    }
    if (updates.empty()) {
      return absl::FailedPreconditionError(
          "nothing to train: no parameter gradients (outputs named <parameter>.grad); autodiff "
          "found no float initializer the loss depends on (check --trainable and --freeze)");
    }
    for (const auto& [parameter, index] : updates) {
      const DType dtype = parameter->dtype();
      if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
        return absl::UnimplementedError(
            str_cat("parameter '", parameter->name(), "' is ", dtype_name(dtype),
                    "; the optimizer updates f32 parameters (or f16/bf16 ones, without master "
                    "weights)"));
      }
    }
    warn_about_low_precision_moments(updates, context);
    Value* lr = graph.add_input("lr", TensorType{DType::kF32, {}});
    Value* step = graph.add_initializer("optimizer.step", Tensor(TensorType{DType::kF32, {}}));

    std::vector<Value*> grads;
    for (const auto& [parameter, index] : updates) grads.push_back(graph.outputs()[index]);
    std::vector<std::pair<Value*, Value*>> state_updates;  // state, its update
    // Accumulation: the optimizer's updates hold until the window's last micro-step.
    Value* window_end = nullptr;
    AMPC_RETURN_IF_ERROR(find_accumulation(graph, window_end));
    // Loss scaling: one fused pass unscales every gradient into f32 and says whether any is
    // inf or NaN (an overflow: the whole update is skipped). Without it, gradients of
    // low-precision parameters (no master weights) are read up to f32 like the others.
    Value* scale = nullptr;
    Value* found_inf = nullptr;
    if (options_.loss_scale) {
      AMPC_ASSIGN_OR_RETURN(scale, find_loss_scale(graph));
      found_inf = unscale(graph, scale, grads);
    } else {
      for (Value*& grad : grads) {
        if (grad->dtype() != DType::kF32) {
          grad = convert(graph, grad, DType::kF32, kNoMasterWeights);
        }
      }
    }
    Value* norm = add_node(graph, "GlobalNorm", grads, {TensorType{DType::kF32, {}}}, {})[0];
    norm->set_name(graph.unique_value_name("grad_norm"));
    if (options_.clip_grad_norm > 0) {
      // Clipping after unscaling: a non-finite norm (a sum of squares past f32's range, though
      // every gradient is finite) is an overflow too.
      if (found_inf != nullptr) {
        found_inf = where(graph, found_inf, found_inf, non_finite(graph, norm),
                          "loss_scale/found_inf/or_norm");
      }
      Value* coefficient = add_node(graph, "ClipCoefficient", {norm}, {TensorType{DType::kF32, {}}},
                                    {{"max_norm", options_.clip_grad_norm}})[0];
      for (Value*& grad : grads) {
        Node* scaled = graph.create_node(kOnnxDomain, "Mul", {grad, coefficient}, {grad->type()});
        scaled->set_name(str_cat(grad->name(), "/clip"));
        scaled->output(0)->set_name(graph.unique_value_name(grad->name() + ".clipped"));
        grad = scaled->output(0);
      }
    }

    // On an overflow, and before the window's end, every piece of optimizer state keeps its
    // value: the update ops take `skip` and leave parameters and moments as they are (so they
    // can update them in place); the step counter is held by a Where.
    Value* hold = window_end == nullptr ? nullptr : logical_not(graph, window_end);
    Value* skip = found_inf;
    if (hold != nullptr) {
      skip = found_inf == nullptr ? hold : where(graph, window_end, found_inf, hold);
    }
    std::vector<Value*> update_operands_tail = {lr, step};
    if (skip != nullptr) update_operands_tail.push_back(skip);
    auto operands = [&](std::vector<Value*> head) {
      head.insert(head.end(), update_operands_tail.begin(), update_operands_tail.end());
      return head;
    };
    std::set<Value*> held_by_the_update;

    for (size_t k = 0; k < updates.size(); ++k) {
      Value* parameter = updates[k].first;
      std::vector<Value*> state = {parameter};
      const bool sgd = options_.kind == OptimizerOptions::Kind::kSgd;
      if (sgd) {
        // Without momentum SGD keeps no buffer (PyTorch's momentum_buffer stays None).
        if (options_.momentum != 0) {
          state.push_back(zeros_like(graph, parameter, ".momentum_buffer"));
        }
      } else {
        state.push_back(zeros_like(graph, parameter, ".exp_avg"));
        state.push_back(zeros_like(graph, parameter, ".exp_avg_sq"));
      }
      // Without master weights the parameter and its moments are stored low and updated in f32:
      // read up, computed, rounded back once (PyTorch's update of an fp16 parameter).
      const DType stored = parameter->dtype();
      std::vector<Value*> wide = state;
      if (stored != DType::kF32) {
        for (Value*& v : wide) v = convert(graph, v, DType::kF32, kNoMasterWeights);
      }
      const TensorType type = wide[0]->type();
      std::vector<Value*> outputs;
      if (sgd) {
        Value* buffer = wide.size() > 1 ? wide[1] : nullptr;
        outputs = add_node(graph, "SGD", operands({wide[0], grads[k], buffer}),
                           std::vector<TensorType>(wide.size(), type),
                           {{"momentum", options_.momentum},
                            {"dampening", options_.dampening},
                            {"nesterov", int64_t{options_.nesterov}},
                            {"weight_decay", options_.weight_decay}});
      } else {
        const bool decoupled = options_.kind == OptimizerOptions::Kind::kAdamW;
        outputs = add_node(graph, "Adam", operands({wide[0], grads[k], wide[1], wide[2]}),
                           {type, type, type},
                           {{"beta1", options_.beta1},
                            {"beta2", options_.beta2},
                            {"epsilon", options_.epsilon},
                            {"weight_decay", options_.weight_decay},
                            {"decoupled_weight_decay", int64_t{decoupled}}});
      }
      if (stored != DType::kF32) {
        outputs[0]->producer()->mutable_precision() = {DType::kF32, std::nullopt,
                                                       std::string(kNoMasterWeights)};
        for (size_t s = 0; s < outputs.size(); ++s) {
          outputs[s]->set_name(graph.unique_value_name(str_cat(state[s]->name(), ".updated")));
          outputs[s] = convert(graph, outputs[s], stored, kNoMasterWeights);
        }
      }
      for (size_t s = 0; s < state.size(); ++s) {
        state_updates.emplace_back(state[s], outputs[s]);
        held_by_the_update.insert(outputs[s]);
      }
    }
    Value* one = graph.add_initializer(graph.unique_value_name("optimizer.one"),
                                       Tensor::from_f32({}, {1.0f}));
    one->set_constant(true);
    Node* next_step = graph.create_node(kOnnxDomain, "Add", {step, one}, {step->type()});
    state_updates.emplace_back(step, next_step->output(0));
    if (skip != nullptr) {
      for (auto& [state, update] : state_updates) {
        if (held_by_the_update.contains(update)) continue;
        update = where(graph, skip, state, update, str_cat(state->name(), "/skip_update"));
        if (state->dtype() != DType::kF32) {
          update->producer()->mutable_precision() = {state->dtype(), std::nullopt,
                                                     std::string(kNoMasterWeights)};
        }
      }
    }
    if (found_inf != nullptr) add_loss_scale_updates(graph, scale, found_inf, hold, state_updates);

    // The gradient outputs go; the norm and every state update become outputs.
    // (Rebuilt rather than erased one by one, which would move the rest of the list each time.)
    std::vector<bool> is_gradient(graph.outputs().size(), false);
    for (const auto& [parameter, index] : updates) is_gradient[index] = true;
    std::vector<Value*> kept;
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      if (!is_gradient[i]) kept.push_back(graph.outputs()[i]);
    }
    while (!graph.outputs().empty())
      graph.erase_output(static_cast<int>(graph.outputs().size()) - 1);
    for (Value* output : kept) graph.add_output(output);
    graph.add_output(norm);
    if (found_inf != nullptr) {
      found_inf->set_name(graph.unique_value_name("found_inf"));
      graph.add_output(found_inf);
    }
    for (const auto& [state, update] : state_updates) {
      update->set_name(graph.unique_value_name(state->name() + ".next"));
      graph.add_output(update);
      graph.add_state_update(state->name(), update->name());
    }
    const bool master_weights = std::all_of(updates.begin(), updates.end(), [](const auto& u) {
      return u.first->dtype() == DType::kF32;
    });
    describe_undecided_nodes(graph, master_weights ? "optimizer: fp32 master weights and state"
                                                   : "optimizer: fp32 arithmetic");
    return true;
  }

 private:
  static absl::StatusOr<Value*> find_loss_scale(Graph& graph) {
    for (Value* init : graph.initializers()) {
      if (init->name() == kLossScaleName) return init;
    }
    return absl::FailedPreconditionError(
        "loss scaling: the graph has no loss_scale initializer; run the loss-scale pass first");
  }

  // ampc.UnscaleGradients over every gradient: grad * factor in f32, where factor is 1 / scale
  // (the reciprocal taken in double and rounded to f32, as GradScaler's
  // `scale.double().reciprocal().float()`). Returns found_inf.
  static Value* unscale(Graph& graph, Value* scale, std::vector<Value*>& grads) {
    auto node = [&](std::string_view op, const std::vector<Value*>& operands, DType dtype,
                    Attributes attrs = {}) {
      Node* n =
          graph.create_node(kOnnxDomain, op, operands, {TensorType{dtype, {}}}, std::move(attrs));
      n->set_name(str_cat("loss_scale/", op));
      return n->output(0);
    };
    Value* wide = node("Cast", {scale}, DType::kF64, {{"to", DType::kF64}});
    Value* inverse = node("Reciprocal", {wide}, DType::kF64);
    Value* factor = node("Cast", {inverse}, DType::kF32, {{"to", DType::kF32}});
    describe_nodes(graph, {wide->producer(), inverse->producer(), factor->producer()},
                   "loss scaling: 1 / scale taken in f64 and rounded to f32, as GradScaler's "
                   "scale.double().reciprocal().float()");
    factor->set_name(graph.unique_value_name("loss_scale.inverse"));
    std::vector<Value*> operands = {factor};
    std::vector<TensorType> types = {TensorType{DType::kBool, {}}};
    for (Value* grad : grads) {
      // A gradient that arrives as a Cast up from f16/bf16 (the gradient of a master weight's
      // cast down) is read before the Cast, which dce then removes: no f32 copy.
      const Node* producer = grad->producer();
      const bool cast_up = producer != nullptr && producer->domain().empty() &&
                           producer->op_type() == "Cast" && grad->dtype() == DType::kF32 &&
                           (producer->operand(0)->dtype() == DType::kF16 ||
                            producer->operand(0)->dtype() == DType::kBF16);
      operands.push_back(cast_up ? producer->operand(0) : grad);
      types.push_back(TensorType{DType::kF32, grad->shape()});
    }
    std::vector<Value*> outputs = add_node(graph, "UnscaleGradients", operands, types, {});
    outputs[0]->producer()->set_name("loss_scale/UnscaleGradients");
    outputs[0]->producer()->mutable_precision() = {
        DType::kF32, std::nullopt,
        "loss scaling: fused unscale and inf/NaN check (gradients in their dtype, f32 out)"};
    for (size_t k = 0; k < grads.size(); ++k) {
      outputs[k + 1]->set_name(graph.unique_value_name(str_cat(grads[k]->name(), ".unscaled")));
      grads[k] = outputs[k + 1];
    }
    return outputs[0];
  }

  // The window's end, when the accumulate pass ran (checked with its count K); else null.
  static absl::Status find_accumulation(const Graph& graph, Value*& window_end) {
    const Value* k = nullptr;
    for (const Value* init : graph.initializers()) {
      if (init->name() == kAccumulationStepsName) k = init;
    }
    if (k == nullptr) return absl::OkStatus();
    for (Value* output : graph.outputs()) {
      if (output->name() == kWindowEndName) window_end = output;
    }
    const Tensor* data = k->initializer();
    if (window_end == nullptr || data->dtype() != DType::kI64 || data->num_elements() != 1 ||
        data->element_as_i64(0) < 1) {
      return absl::FailedPreconditionError(str_cat("gradient accumulation needs an i64 count ",
                                                   kAccumulationStepsName, " >= 1 and the output ",
                                                   kWindowEndName, "; run the accumulate pass"));
    }
    return absl::OkStatus();
  }

  // Adam's moments of a low-precision parameter are stored low too: in f16 the second moment
  // starts at (1 - beta2) g^2, which rounds to 0 for |g| below about 5e-3 (the update then
  // divides by epsilon); in bf16 it cannot decay (0.999 v rounds back to v).
  void warn_about_low_precision_moments(const std::vector<std::pair<Value*, int>>& updates,
                                        const PassContext& context) const {
    if (options_.kind == OptimizerOptions::Kind::kSgd) return;
    for (const auto& [parameter, index] : updates) {
      const DType dtype = parameter->dtype();
      if (dtype == DType::kF32) continue;
      context.warn(
          str_cat("parameters such as '", parameter->name(), "' are ", dtype_name(dtype),
                  " without master weights (O3), and so are Adam's moments: ",
                  dtype == DType::kF16
                      ? "the second moment rounds to 0 for gradients below about 5e-3"
                      : "the second moment cannot decay (0.999 v rounds back to v in bf16)",
                  ", and training may diverge; O3 is a speed baseline (use O1 or O2, or SGD)"));
      return;
    }
  }

  // `value` cast to `to`, the Cast's decision saying why.
  static Value* convert(Graph& graph, Value* value, DType to, std::string_view reason) {
    Node* n = graph.create_node(kOnnxDomain, "Cast", {value}, {TensorType{to, value->shape()}},
                                {{"to", to}});
    n->set_name(str_cat(value->name(), "/to_", dtype_name(to)));
    n->mutable_precision() = {to, std::nullopt, std::string(reason)};
    n->output(0)->set_name(graph.unique_value_name(str_cat(value->name(), ".", dtype_name(to))));
    return n->output(0);
  }

  static Value* logical_not(Graph& graph, Value* x) {
    Node* n = graph.create_node(kOnnxDomain, "Not", {x}, {x->type()});
    n->set_name(str_cat(x->name(), "/Not"));
    return n->output(0);
  }

  // condition ? x : y, as a node named `name` (or after x).
  static Value* where(Graph& graph, Value* condition, Value* x, Value* y,
                      std::string_view name = {}) {
    Node* n = graph.create_node(kOnnxDomain, "Where", {condition, x, y}, {y->type()});
    n->set_name(name.empty() ? str_cat(x->name(), "/Where") : std::string(name));
    return n->output(0);
  }

  // Whether the f32 scalar `x` is inf or NaN, as a bool: x - x is 0 for finite x and NaN
  // otherwise, and only NaN differs from itself.
  static Value* non_finite(Graph& graph, Value* x) {
    const TensorType scalar_bool{DType::kBool, {}};
    Node* diff = graph.create_node(kOnnxDomain, "Sub", {x, x}, {x->type()});
    Node* same =
        graph.create_node(kOnnxDomain, "Equal", {diff->output(0), diff->output(0)}, {scalar_bool});
    Node* found = graph.create_node(kOnnxDomain, "Not", {same->output(0)}, {scalar_bool});
    for (Node* n : {diff, same, found}) n->set_name(str_cat("loss_scale/found_inf/", n->op_type()));
    return found->output(0);
  }

  // The dynamic scale's update (ampc.LossScaleUpdate) and the skipped-step count; with `hold`
  // (accumulation, before the window's end) they keep their values.
  void add_loss_scale_updates(Graph& graph, Value* scale, Value* found_inf, Value* hold,
                              std::vector<std::pair<Value*, Value*>>& state_updates) const {
    const size_t first = state_updates.size();
    add_loss_scale_updates(graph, scale, found_inf, state_updates);
    if (hold == nullptr) return;
    for (size_t k = first; k < state_updates.size(); ++k) {
      auto& [state, update] = state_updates[k];
      update = where(graph, hold, state, update, str_cat(state->name(), "/hold"));
    }
  }

  void add_loss_scale_updates(Graph& graph, Value* scale, Value* found_inf,
                              std::vector<std::pair<Value*, Value*>>& state_updates) const {
    const TensorType count{DType::kI64, {}};
    Value* skipped = graph.add_initializer("loss_scale.skipped_steps", Tensor(count));
    Node* as_count =
        graph.create_node(kOnnxDomain, "Cast", {found_inf}, {count}, {{"to", DType::kI64}});
    as_count->set_name("loss_scale/skipped/Cast");
    Node* counted = graph.create_node(kOnnxDomain, "Add", {skipped, as_count->output(0)}, {count});
    counted->set_name("loss_scale/skipped/Add");
    state_updates.emplace_back(skipped, counted->output(0));
    if (options_.loss_scale->mode != LossScaleOptions::Mode::kDynamic) return;
    Value* tracker = graph.add_initializer("loss_scale.growth_tracker", Tensor(count));
    const LossScaleOptions& o = *options_.loss_scale;
    std::vector<Value*> inputs = {scale, tracker, found_inf};
    std::vector<TensorType> types = {scale->type(), count};
    Value* left = nullptr;
    if (o.hysteresis > 1) {
      left =
          graph.add_initializer("loss_scale.hysteresis_left", Tensor::from_i64({}, {o.hysteresis}));
      inputs.push_back(left);
      types.push_back(count);
    }
    std::vector<Value*> next = add_node(graph, "LossScaleUpdate", inputs, types,
                                        {{"growth_factor", o.growth_factor},
                                         {"backoff_factor", o.backoff_factor},
                                         {"growth_interval", o.growth_interval},
                                         {"min_scale", o.min_scale},
                                         {"hysteresis", o.hysteresis}});
    state_updates.emplace_back(scale, next[0]);
    state_updates.emplace_back(tracker, next[1]);
    if (left != nullptr) state_updates.emplace_back(left, next[2]);
  }

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
