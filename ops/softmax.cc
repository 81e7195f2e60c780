// Softmax and LogSoftmax along one axis (default the last). Shape-preserving, float only; and
// their gradients, the internal ops ampc.SoftmaxGrad and ampc.LogSoftmaxGrad, whose own gradients
// (second order) are composed of standard ops.
//
// Before opset 13 both ops coerce the input to 2-D at `axis` (default 1) and normalize over all
// the trailing dims together. That definition is registered for the last axis only, where it is
// opset 13's: the importer writes any other axis as Flatten, the op and Reshape
// (compiler/onnx_legacy_ops.cc), so passes, gradients and kernels see one function.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status infer_softmax(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (in.shape.empty()) {
    return absl::InvalidArgumentError("input must have rank >= 1, got a scalar");
  }
  AMPC_RETURN_IF_ERROR(
      normalize_axis(ctx.int_attr("axis"), static_cast<int64_t>(in.shape.size())).status());
  ctx.set_output(0, in);
  return absl::OkStatus();
}

// Opsets 1-12 over the last axis only: the axis of the 2-D coercion must be the last dim.
absl::Status infer_coerced_softmax(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(infer_softmax(ctx));
  const int64_t rank = static_cast<int64_t>(ctx.input_type(0).shape.size());
  AMPC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.int_attr("axis"), rank));
  if (axis != rank - 1) {
    return absl::InvalidArgumentError(
        str_cat("axis ", ctx.int_attr("axis"), " is not the last of rank ", rank,
                "; before opset 13 ampc takes the op over the last axis, and its ONNX import "
                "writes another axis as Flatten, the op and Reshape"));
  }
  return absl::OkStatus();
}

// (dY, Y) -> dX: both of Y's type, which is dX's.
absl::Status infer_softmax_grad(InferenceContext& ctx) {
  if (ctx.input_type(0) != ctx.input_type(1)) {
    return absl::InvalidArgumentError(str_cat("dY ", type_to_string(ctx.input_type(0)), " and Y ",
                                              type_to_string(ctx.input_type(1)),
                                              " must have the same type"));
  }
  return infer_softmax(ctx);
}

// d/dx softmax: dx = y * (dy - sum(dy * y, axis)). Reads the output, so x need not stay alive.
absl::StatusOr<Grads> softmax_grad(GradBuilder& b) {
  return Grads{b.ampc_op("SoftmaxGrad", {b.grad_of_output(0), b.output(0)},
                         {{"axis", b.node().int_attr("axis")}})};
}

// d/dx log_softmax: dx = dy - exp(y) * sum(dy, axis).
absl::StatusOr<Grads> log_softmax_grad(GradBuilder& b) {
  return Grads{b.ampc_op("LogSoftmaxGrad", {b.grad_of_output(0), b.output(0)},
                         {{"axis", b.node().int_attr("axis")}})};
}

// The sum of `value` along the node's axis, kept as a dim of size 1.
Value* sum_along_axis(GradBuilder& b, Value* value) {
  const int64_t rank = static_cast<int64_t>(value->shape().size());
  const int64_t axis = b.node().int_attr("axis");
  return b.op(
      "ReduceSum", {value},
      {{"axes", std::vector<int64_t>{axis < 0 ? axis + rank : axis}}, {"keepdims", int64_t{1}}});
}

// Second order, dx = y * (dy - s) with s = sum(dy * y), t = sum(g * y) for the gradient g of dx:
// d/d dy = y * (g - t) (SoftmaxGrad again), d/dy = g * (dy - s) - t * dy.
absl::StatusOr<Grads> softmax_grad_grad(GradBuilder& b) {
  Value* g = b.grad_of_output(0);
  Value* dy = b.input(0);
  Value* y = b.input(1);
  Grads grads(2, nullptr);
  if (b.needs_grad(0)) grads[0] = b.ampc_op("SoftmaxGrad", {g, y}, b.node().attrs());
  if (b.needs_grad(1)) {
    Value* s = sum_along_axis(b, b.op("Mul", {dy, y}));
    Value* t = sum_along_axis(b, b.op("Mul", {g, y}));
    grads[1] = b.op("Sub", {b.op("Mul", {g, b.op("Sub", {dy, s})}), b.op("Mul", {t, dy})});
  }
  return grads;
}

// Second order, dx = dy - exp(y) * s with s = sum(dy): d/d dy = g - sum(g * exp(y)),
// d/dy = -g * exp(y) * s.
absl::StatusOr<Grads> log_softmax_grad_grad(GradBuilder& b) {
  Value* g = b.grad_of_output(0);
  Value* exp_y = b.op("Exp", {b.input(1)});
  Grads grads(2, nullptr);
  if (b.needs_grad(0)) grads[0] = b.op("Sub", {g, sum_along_axis(b, b.op("Mul", {g, exp_y}))});
  if (b.needs_grad(1)) {
    Value* s = sum_along_axis(b, b.input(0));
    grads[1] = b.op("Neg", {b.op("Mul", {b.op("Mul", {g, exp_y}), s})});
  }
  return grads;
}

OpDef softmax(std::string name, std::string summary, GradFn gradient) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 13;
  def.summary = std::move(summary);
  def.inputs = {input("input", kFloatTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{-1})};
  def.infer = infer_softmax;
  // exp overflows fp16 easily and the normalizing sum loses precision: fp32.
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = std::move(gradient);
  const TensorType x3 = typed(DType::kF32, {2, 3, 4});
  def.samples = {
      {"last axis", {typed(DType::kF32, {2, 5})}, {}, {}, {typed(DType::kF32, {2, 5})}},
      {"axis 1 of 3-D", {x3}, {}, {{"axis", int64_t{1}}}, {x3}},
      {"axis 0 of 3-D", {x3}, {}, {{"axis", int64_t{0}}}, {x3}},
      {"axis -1 of 3-D", {x3}, {}, {{"axis", int64_t{-1}}}, {x3}},
      {"f64 vector", {typed(DType::kF64, {7})}, {}, {}, {typed(DType::kF64, {7})}},
  };
  return def;
}

OpDef softmax_grad_def(std::string name, std::string summary, GradFn gradient) {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = std::move(name);
  def.summary = std::move(summary);
  def.inputs = {input("dY", kFloatTypes), input("Y", kFloatTypes)};
  def.outputs = {input("dX")};
  def.attrs = {attr("axis", int64_t{-1})};
  def.infer = infer_softmax_grad;
  def.gradient = std::move(gradient);
  const TensorType f32 = typed(DType::kF32, {2, 3, 4});
  const TensorType bf16 = typed(DType::kBF16, {3, 5});
  const TensorType f16 = typed(DType::kF16, {4, 2});
  def.samples = {
      {"f32 axis 1", {f32, f32}, {}, {{"axis", int64_t{1}}}, {f32}},
      {"bf16 last axis", {bf16, bf16}, {}, {}, {bf16}},
      {"f16 axis 0", {f16, f16}, {}, {{"axis", int64_t{0}}}, {f16}},
  };
  return def;
}

// The opset 1-12 definition over its last axis (the 2-D coercion at the last dim).
OpDef coerced_softmax(OpDef def) {
  def.since_opset = 1;
  def.until_opset = 12;
  def.attrs = {attr("axis", int64_t{1})};
  def.infer = infer_coerced_softmax;
  const TensorType x3 = typed(DType::kF32, {2, 3, 4});
  def.samples = {
      {"default axis 1 of 2-D", {typed(DType::kF32, {2, 5})}, {}, {}, {typed(DType::kF32, {2, 5})}},
      {"axis 2 of 3-D", {x3}, {}, {{"axis", int64_t{2}}}, {x3}},
      {"axis -1 of 3-D", {x3}, {}, {{"axis", int64_t{-1}}}, {x3}},
  };
  return def;
}

void register_softmax_ops(OpRegistry& registry) {
  for (auto [name, summary, gradient] :
       {std::tuple{"Softmax", "exp(x) / sum(exp(x)) along axis", &softmax_grad},
        std::tuple{"LogSoftmax", "x - log(sum(exp(x))) along axis", &log_softmax_grad}}) {
    registry.add(softmax(name, summary, gradient));
    registry.add(coerced_softmax(softmax(name, summary, gradient)));
  }
  registry.add(
      softmax_grad_def("SoftmaxGrad", "y * (dy - sum(dy * y)) along axis", softmax_grad_grad));
  registry.add(softmax_grad_def("LogSoftmaxGrad", "dy - exp(y) * sum(dy) along axis",
                                log_softmax_grad_grad));
}

const OpRegistration kSoftmaxOps(&register_softmax_ops);

}  // namespace
}  // namespace ampc::ops
