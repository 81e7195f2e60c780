// Loss-scaling ops (domain ampc), used by the loss-scale and optimizer passes for fp16 training:
//
// ScaleLoss(loss, scale) = loss * scale. Differentiating the scaled loss seeds the backward pass
//   with `scale` instead of 1 (d scaled / d loss = scale, exactly), so small gradients survive
//   fp16. `scale` is state, not a parameter: it gets no gradient (and so autodiff never trains
//   it).
// LossScaleUpdate(scale, growth_tracker, found_inf) -> (scale, growth_tracker): the dynamic scale
//   update of PyTorch's GradScaler (torch._amp_update_scale_): on an overflow the scale is
//   multiplied by backoff_factor and the tracker reset; otherwise the tracker counts clean steps,
//   and at growth_interval the scale is multiplied by growth_factor (unless that would be inf)
//   and the tracker reset. min_scale (ampc's, 0: none) bounds the backoff from below.
//   With hysteresis h > 1 (Megatron-LM's DynamicGradScaler) and the optional state
//   hysteresis_left, an overflow only backs off once hysteresis_left, decremented per overflow,
//   reaches 0; growth resets it to h. h = 1 without that state is GradScaler exactly.
// UnscaleGradients(inverse_scale, g1, ..., gn) -> (found_inf, u1, ..., un): one pass over every
//   gradient, of any float dtype, writing ui = f32(gi) * inverse_scale (rounded once in f32) and
//   found_inf = whether any ui is inf or NaN: the fused unscale and check of GradScaler.unscale_
//   (torch._amp_foreach_non_finite_check_and_unscale_), low precision in, f32 out. It checks the
//   unscaled values, which also catches a finite gradient that overflows when the scale is
//   below 1 (PyTorch checks the scaled ones and would step with the inf). With an f64
//   inverse_scale (for tests against f64 references) gradients and results are f64.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status expect_one_element(const InferenceContext& ctx, int i, std::string_view name) {
  if (ctx.input_type(i).num_elements() != 1) {
    return absl::InvalidArgumentError(
        str_cat(name, " must hold one element, got ", type_to_string(ctx.input_type(i))));
  }
  return absl::OkStatus();
}

absl::Status infer_scale_loss(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 0, "loss"));
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 1, "scale"));
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

// d(loss * scale)/d loss = scale.
absl::StatusOr<Grads> scale_loss_grad(GradBuilder& b) {
  Value* grad = b.op("Mul", {b.grad_of_output(0), b.input(1)});
  return Grads{b.op("Reshape", {grad, b.int64s(b.input(0)->shape())}), nullptr};
}

OpDef scale_loss() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "ScaleLoss";
  def.summary = "loss * scale: the loss autodiff differentiates under loss scaling";
  def.inputs = {input("loss", {DType::kF32, DType::kF64}),
                input("scale", {DType::kF32, DType::kF64})};
  def.outputs = {input("scaled")};
  def.infer = infer_scale_loss;
  def.gradient = scale_loss_grad;
  def.no_gradient_inputs = {1};
  def.autocast.category = AutocastCategory::kDeny;
  const TensorType scalar{DType::kF32, {}};
  const TensorType one{DType::kF32, {1}};
  def.samples = {{"scalar loss", {scalar, scalar}, {}, {}, {scalar}},
                 {"one-element loss", {one, scalar}, {}, {}, {one}}};
  return def;
}

absl::Status infer_loss_scale_update(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 0, "scale"));
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 1, "growth_tracker"));
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 2, "found_inf"));
  if (ctx.has_input(3)) AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 3, "hysteresis_left"));
  if (ctx.has_input(3) != ctx.has_output(2)) {
    return absl::InvalidArgumentError("hysteresis_left is an input exactly when it is an output");
  }
  if (ctx.int_attr("hysteresis") < 1) {
    return absl::InvalidArgumentError(
        str_cat("hysteresis must be >= 1, got ", ctx.int_attr("hysteresis")));
  }
  if (ctx.int_attr("growth_interval") < 1) {
    return absl::InvalidArgumentError(
        str_cat("growth_interval must be >= 1, got ", ctx.int_attr("growth_interval")));
  }
  ctx.set_output(0, ctx.input_type(0));
  ctx.set_output(1, ctx.input_type(1));
  if (ctx.has_input(3)) ctx.set_output(2, ctx.input_type(3));
  return absl::OkStatus();
}

OpDef loss_scale_update() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "LossScaleUpdate";
  def.summary = "GradScaler's dynamic loss-scale update (torch._amp_update_scale_)";
  def.inputs = {input("scale", {DType::kF32}), input("growth_tracker", {DType::kI64}),
                input("found_inf", {DType::kBool}),
                optional_input("hysteresis_left", {DType::kI64})};
  def.outputs = {input("scale_out"), input("growth_tracker_out"),
                 optional_input("hysteresis_left_out")};
  def.attrs = {attr("growth_factor", 2.0f), attr("backoff_factor", 0.5f),
               attr("growth_interval", int64_t{2000}), attr("min_scale", 0.0f),
               attr("hysteresis", int64_t{1})};
  def.infer = infer_loss_scale_update;
  def.no_gradient_inputs = {0, 1, 2, 3};
  def.no_gradient_outputs = {0, 1, 2};
  def.autocast.category = AutocastCategory::kDeny;
  const std::vector<TensorType> inputs = {TensorType{DType::kF32, {}}, TensorType{DType::kI64, {}},
                                          TensorType{DType::kBool, {}}};
  const std::vector<TensorType> outputs = {TensorType{DType::kF32, {}},
                                           TensorType{DType::kI64, {}}};
  def.samples = {{"GradScaler's defaults", inputs, {}, {}, outputs},
                 {"short interval, gentle backoff",
                  inputs,
                  {},
                  {{"growth_interval", int64_t{3}}, {"backoff_factor", 0.25f}},
                  outputs}};
  return def;
}

absl::Status infer_unscale_gradients(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_one_element(ctx, 0, "inverse_scale"));
  if (ctx.num_outputs() != ctx.num_inputs()) {
    return absl::InvalidArgumentError(
        str_cat("found_inf and one output per gradient: ", ctx.num_inputs(), " outputs, not ",
                ctx.num_outputs()));
  }
  // f32 out; f64 (the tests' reference dtype) throughout when inverse_scale is f64.
  const DType out = ctx.input_type(0).dtype;
  ctx.set_output(0, TensorType{DType::kBool, {}});
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const DType in = ctx.input_type(i).dtype;
    if ((out == DType::kF64) != (in == DType::kF64)) {
      return absl::InvalidArgumentError(str_cat(
          "gradient ", i, " is ", dtype_name(in), "; with an ", dtype_name(out),
          " inverse_scale the gradients are ", out == DType::kF64 ? "f64" : "f16, bf16 or f32"));
    }
    ctx.set_output(i, TensorType{out, ctx.input_type(i).shape});
  }
  return absl::OkStatus();
}

// d u_i / d g_i = inverse_scale, elementwise; the gradient goes back in g_i's dtype.
absl::StatusOr<Grads> unscale_gradients_grad(GradBuilder& b) {
  Grads grads(b.node().num_operands(), nullptr);
  for (int i = 1; i < b.node().num_operands(); ++i) {
    if (!b.needs_grad(i)) continue;
    Value* grad = b.op("Mul", {b.grad_of_output_or_zeros(i), b.input(0)});
    const DType dtype = b.input(i)->dtype();
    grads[i] = dtype == grad->dtype() ? grad : b.op("Cast", {grad}, {{"to", dtype}});
  }
  return grads;
}

OpDef unscale_gradients() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "UnscaleGradients";
  def.summary =
      "every gradient times inverse_scale, in f32, and whether any result is inf or NaN (the "
      "fused unscale and check of GradScaler.unscale_)";
  def.inputs = {input("inverse_scale", {DType::kF32, DType::kF64}),
                variadic_input("gradients", {DType::kF16, DType::kBF16, DType::kF32, DType::kF64})};
  def.outputs = {input("found_inf"), variadic_input("unscaled")};
  def.infer = infer_unscale_gradients;
  def.gradient = unscale_gradients_grad;
  def.no_gradient_inputs = {0};
  def.no_gradient_outputs = {0};
  def.autocast.category = AutocastCategory::kDeny;
  const TensorType scalar{DType::kF32, {}};
  def.samples = {
      {"one f32 gradient",
       {scalar, TensorType{DType::kF32, {3}}},
       {},
       {},
       {TensorType{DType::kBool, {}}, TensorType{DType::kF32, {3}}}},
      {"f16 and bf16 gradients in, f32 out",
       {scalar, TensorType{DType::kF16, {2, 2}}, TensorType{DType::kBF16, {5}}},
       {},
       {},
       {TensorType{DType::kBool, {}}, TensorType{DType::kF32, {2, 2}},
        TensorType{DType::kF32, {5}}}},
  };
  return def;
}

void register_loss_scale_ops(OpRegistry& registry) {
  registry.add(scale_loss());
  registry.add(loss_scale_update());
  registry.add(unscale_gradients());
}

const OpRegistration kLossScaleOps(&register_loss_scale_ops);

}  // namespace
}  // namespace ampc::ops
