// Optimizer update ops (domain ampc): SGD, Adam (AdamW with decoupled_weight_decay=1),
// GlobalNorm and ClipCoefficient, with PyTorch's definitions (torch.optim.SGD and Adam/AdamW,
// single-tensor form; torch.nn.utils.clip_grad_norm_). runtime/cpu/optimizer.cc states the exact
// order of floating-point operations each kernel follows.
//
// The update ops read the parameter, its gradient and its state, and return the new parameter
// and state in the state's types: master weights and moments are f32 (f64 too, for tests that
// compare with f64 references). `lr` and `step` are one-element f32 (or f64) tensors; `step`
// counts the updates completed before this one (0 on the first). Scalar hyperparameters are
// float attributes, read by the kernels as the decimal they spell (0.9f as Python's 0.9). The
// optional last input `skip` (one bool) leaves the parameter and state as they are when true: a
// step the loss scaler skips, or a micro-step before the end of an accumulation window. The
// decision stays on the device, and the kernels may write their outputs over the parameter and
// state (runtime/plan.h): an update in place.
//
// The optimizer pass inserts these ops after autodiff, so nothing differentiates through SGD or
// Adam (every input is in no_gradient_inputs). GlobalNorm and ClipCoefficient are ordinary
// functions of their inputs and get gradient rules, which keeps them usable anywhere.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

const std::vector<DType> kStateTypes = {DType::kF32, DType::kF64};

// Inputs 1 .. 1 + num_states (grad and the states) must have param's type; `lr` and `step` one
// element each, and `skip`, when given, one bool. Outputs take the types of param and of the
// states, that is param's; a state that is omitted (an optional one) has its output omitted.
absl::Status infer_update(InferenceContext& ctx, const std::vector<OperandSpec>& inputs,
                          int num_states) {
  const TensorType& param = ctx.input_type(0);
  const int lr = 2 + num_states;
  for (int i = 1; i < lr; ++i) {
    if (!ctx.has_input(i)) continue;  // a state the update does without (SGD's buffer)
    const TensorType& type = ctx.input_type(i);
    if (type != param) {
      return absl::InvalidArgumentError(str_cat(inputs[i].name, " ", type_to_string(type),
                                                " must have the type of param, ",
                                                type_to_string(param)));
    }
  }
  for (int i : {lr, lr + 1, lr + 2}) {
    if (i == lr + 2 && !ctx.has_input(i)) continue;
    if (ctx.input_type(i).num_elements() != 1) {
      return absl::InvalidArgumentError(str_cat(inputs[i].name, " must hold one element, got ",
                                                type_to_string(ctx.input_type(i))));
    }
  }
  for (int i = 1; i <= num_states; ++i) {  // a state given is updated, and only one given
    if (ctx.has_input(1 + i) != ctx.has_output(i)) {
      return absl::InvalidArgumentError(str_cat("the state ", inputs[1 + i].name,
                                                " and its update ", inputs[1 + i].name,
                                                "_out are given together or not at all"));
    }
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) ctx.set_output(i, param);
  }
  return absl::OkStatus();
}

OpDef update_op(std::string name, std::string summary, std::vector<std::string> states) {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = std::move(name);
  def.summary = std::move(summary);
  def.inputs = {input("param", kStateTypes), input("grad", kStateTypes)};
  def.outputs = {input("param_out")};
  for (const std::string& state : states) {
    def.inputs.push_back(input(state, kStateTypes));
    def.outputs.push_back(input(state + "_out"));
  }
  def.inputs.push_back(input("lr", kStateTypes));
  def.inputs.push_back(input("step", kStateTypes));
  def.inputs.push_back(optional_input("skip", {DType::kBool}));
  def.infer = [inputs = def.inputs, num_states = static_cast<int>(states.size())](
                  InferenceContext& ctx) { return infer_update(ctx, inputs, num_states); };
  def.autocast.category = AutocastCategory::kDeny;  // master weights and state stay fp32
  for (int i = 0; i < static_cast<int>(def.inputs.size()); ++i) def.no_gradient_inputs.push_back(i);
  return def;
}

// A sample of an update op over `shape` with `num_states` states (and a `skip` input).
OpSample update_sample(std::string name, Shape shape, int num_states, Attributes attrs,
                       bool with_skip = false) {
  const TensorType tensor{DType::kF32, std::move(shape)};
  const TensorType scalar{DType::kF32, {}};
  OpSample sample{std::move(name), {tensor, tensor}, {}, std::move(attrs), {tensor}};
  for (int i = 0; i < num_states; ++i) {
    sample.inputs.push_back(tensor);
    sample.outputs.push_back(tensor);
  }
  sample.inputs.push_back(scalar);
  sample.inputs.push_back(scalar);
  if (with_skip) sample.inputs.push_back(TensorType{DType::kBool, {}});
  return sample;
}

// Without momentum SGD keeps no state but the parameter (PyTorch's momentum_buffer is None): the
// buffer and its output are optional, and required when momentum is not 0.
OpDef sgd() {
  OpDef def = update_op("SGD", "torch.optim.SGD: momentum, dampening, Nesterov, weight decay",
                        {"momentum_buffer"});
  def.inputs[2] = optional_input("momentum_buffer", kStateTypes);
  def.outputs[1] = optional_input("momentum_buffer_out");
  def.attrs = {attr("momentum", 0.0f), attr("dampening", 0.0f), flag_attr("nesterov", 0),
               attr("weight_decay", 0.0f), flag_attr("maximize", 0)};
  def.infer = [inputs = def.inputs](InferenceContext& ctx) {
    if (!ctx.has_input(2) && ctx.float_attr("momentum") != 0) {
      return absl::InvalidArgumentError(
          str_cat("momentum ", ctx.float_attr("momentum"), " needs the input momentum_buffer"));
    }
    return infer_update(ctx, inputs, 1);
  };
  def.samples = {
      update_sample("plain", {5}, 1, {}),
      update_sample("nesterov with weight decay", {2, 3}, 1,
                    {{"momentum", 0.9f}, {"nesterov", int64_t{1}}, {"weight_decay", 0.01f}}),
      update_sample("dampened, maximizing", {4}, 1,
                    {{"momentum", 0.5f}, {"dampening", 0.1f}, {"maximize", int64_t{1}}}),
      update_sample("with skip", {4}, 1, {{"momentum", 0.9f}}, /*with_skip=*/true),
  };
  return def;
}

OpDef adam() {
  OpDef def = update_op("Adam",
                        "torch.optim.Adam (L2 weight decay) or, with decoupled_weight_decay=1, "
                        "torch.optim.AdamW",
                        {"exp_avg", "exp_avg_sq"});
  def.attrs = {attr("beta1", 0.9f),
               attr("beta2", 0.999f),
               attr("epsilon", 1e-8f),
               attr("weight_decay", 0.0f),
               flag_attr("decoupled_weight_decay", 0),
               flag_attr("maximize", 0)};
  def.samples = {
      update_sample("adam", {6}, 2, {}),
      update_sample("adamw", {2, 3}, 2,
                    {{"weight_decay", 0.01f}, {"decoupled_weight_decay", int64_t{1}}}),
      update_sample("L2 decay, maximizing", {3}, 2,
                    {{"weight_decay", 0.1f}, {"maximize", int64_t{1}}, {"beta1", 0.8f}}),
      update_sample("with skip", {5}, 2, {}, /*with_skip=*/true),
  };
  return def;
}

// ---- Gradient clipping ----------------------------------------------------------------------

absl::Status infer_global_norm(InferenceContext& ctx) {
  for (int i = 1; i < ctx.num_inputs(); ++i) AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, {}});
  return absl::OkStatus();
}

// d/dg_i sqrt(sum_j |g_j|^2) = g_i / norm: each input times dy / y (NaN at a zero norm).
absl::StatusOr<Grads> global_norm_grad(GradBuilder& b) {
  Value* scale = b.op("Div", {b.grad_of_output(0), b.output(0)});
  Grads grads(b.node().num_operands(), nullptr);
  for (int i = 0; i < b.node().num_operands(); ++i) {
    if (b.needs_grad(i)) grads[i] = b.op("Mul", {b.input(i), scale});
  }
  return grads;
}

OpDef global_norm() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "GlobalNorm";
  def.summary = "the L2 norm of all elements of all inputs, as clip_grad_norm_ computes it";
  def.inputs = {variadic_input("inputs", kStateTypes)};
  def.outputs = {input("norm")};
  def.infer = infer_global_norm;
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = global_norm_grad;
  const TensorType norm{DType::kF32, {}};
  def.samples = {
      {"one tensor", {TensorType{DType::kF32, {5}}}, {}, {}, {norm}},
      {"three tensors",
       {TensorType{DType::kF32, {2, 3}}, TensorType{DType::kF32, {9}}, TensorType{DType::kF32, {}}},
       {},
       {},
       {norm}},
  };
  return def;
}

absl::Status infer_clip_coefficient(InferenceContext& ctx) {
  const TensorType& norm = ctx.input_type(0);
  if (norm.num_elements() != 1) {
    return absl::InvalidArgumentError(
        str_cat("total_norm must hold one element, got ", type_to_string(norm)));
  }
  ctx.set_output(0, TensorType{norm.dtype, {}});
  return absl::OkStatus();
}

// y = min(c / (n + 1e-6), 1): dy/dn = -y / (n + 1e-6) where y < 1, else 0.
absl::StatusOr<Grads> clip_coefficient_grad(GradBuilder& b) {
  const DType dtype = b.input(0)->dtype();
  Value* shifted = b.op("Add", {b.input(0), b.scalar(1e-6, dtype)});
  Value* slope = b.op("Neg", {b.op("Div", {b.output(0), shifted})});
  Value* unclamped =
      b.op("Cast", {b.op("Less", {b.output(0), b.scalar(1, dtype)})}, {{"to", dtype}});
  Value* grad = b.op("Mul", {b.op("Mul", {b.grad_of_output(0), slope}), unclamped});
  return Grads{b.op("Reshape", {grad, b.int64s(b.input(0)->shape())})};
}

OpDef clip_coefficient() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "ClipCoefficient";
  def.summary = "min(max_norm / (total_norm + 1e-6), 1), as clip_grad_norm_ scales gradients";
  def.inputs = {input("total_norm", kStateTypes)};
  def.outputs = {input("coefficient")};
  def.attrs = {required_attr("max_norm", AttrKind::kFloat)};
  def.infer = infer_clip_coefficient;
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = clip_coefficient_grad;
  const TensorType scalar{DType::kF32, {}};
  // Norms are drawn from |n| in [0.2, 1] by the gradient check: 0.1 never clamps and 5 always
  // clamps a positive norm, so neither sample sits on the kink.
  def.samples = {
      {"scales down", {scalar}, {}, {{"max_norm", 0.1f}}, {scalar}},
      {"clamps to one", {TensorType{DType::kF32, {1}}}, {}, {{"max_norm", 5.0f}}, {scalar}},
  };
  return def;
}

void register_optimizer_ops(OpRegistry& registry) {
  registry.add(sgd());
  registry.add(adam());
  registry.add(global_norm());
  registry.add(clip_coefficient());
}

const OpRegistration kOptimizerOps(&register_optimizer_ops);

}  // namespace
}  // namespace ampc::ops
