// Activations: Relu, LeakyRelu, PRelu, Sigmoid, Tanh, Erf, Gelu, Softplus, Softsign, HardSigmoid,
// HardSwish, Elu, Selu, Celu, Mish, the trigonometric Sin and Cos (rotary position embeddings),
// Tan, Asin, Acos, Atan and the hyperbolic Sinh, Cosh, Asinh, Acosh, Atanh. Shape-preserving,
// float only (PRelu's slope broadcasts to X).
//
// Their gradients, and the ampc-domain ops ReluGrad, LeakyReluGrad and GeluGrad that the
// gradients of Relu, LeakyRelu and Gelu are made of (one fused element-wise pass each; the others
// compose standard ops). Conventions at the kinks are PyTorch's: Relu passes no gradient where
// y <= 0, LeakyRelu passes alpha * dy where x <= 0, PRelu passes slope * dy to X and x * dy to
// the slope only where x <= 0, HardSigmoid passes alpha * dy only strictly inside its linear
// part, HardSwish passes 0 up to -3, dy * (x/3 + 1/2) strictly between -3 and 3 and dy from 3
// (PyTorch 2.15, measured at -3 and 3: 0 and dy), and Elu, Selu and
// Celu take their exponential side at x = 0.
#include <cmath>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

OpDef activation(std::string name, int since_opset, AutocastCategory category,
                 std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = since_opset;
  def.summary = std::move(summary);
  def.inputs = {input("X", kFloatTypes)};
  def.outputs = {input("Y")};
  def.infer = infer_same_as_input;
  def.autocast.category = category;
  def.samples = {
      {"vector", {TensorType{DType::kF32, {5}}}, {}, {}, {TensorType{DType::kF32, {5}}}},
      {"bf16 matrix",
       {TensorType{DType::kBF16, {2, 3}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 3}}}},
  };
  return def;
}

// PRelu: Y has X's type; the slope, of X's element type, broadcasts to X unidirectionally.
absl::Status infer_prelu(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& x = ctx.input_type(0).shape;
  const Shape& slope = ctx.input_type(1).shape;
  if (!broadcasts_to(slope, x)) {
    return absl::InvalidArgumentError(str_cat("slope of shape ", shape_to_string(slope),
                                              " does not broadcast to X of shape ",
                                              shape_to_string(x)));
  }
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

// ---- Gradient rules -----------------------------------------------------------------------

// d/dx relu(x) = dy where y > 0. Reads the forward output, so x need not be kept alive.
absl::StatusOr<Grads> relu_grad(GradBuilder& b) {
  return Grads{b.ampc_op("ReluGrad", {b.grad_of_output(0), b.output(0)})};
}

// d/dx leaky_relu(x) = dy where x > 0, alpha * dy elsewhere.
absl::StatusOr<Grads> leaky_relu_grad(GradBuilder& b) {
  return Grads{b.ampc_op("LeakyReluGrad", {b.grad_of_output(0), b.input(0)},
                         {{"alpha", b.node().float_attr("alpha")}})};
}

// d/dx sigmoid(x) = dy * y * (1 - y).
absl::StatusOr<Grads> sigmoid_grad(GradBuilder& b) {
  Value* y = b.output(0);
  Value* one_minus_y = b.op("Sub", {b.scalar(1, y->dtype()), y});
  return Grads{b.op("Mul", {b.grad_of_output(0), b.op("Mul", {y, one_minus_y})})};
}

// d/dx tanh(x) = dy * (1 - y^2).
absl::StatusOr<Grads> tanh_grad(GradBuilder& b) {
  Value* y = b.output(0);
  Value* slope = b.op("Sub", {b.scalar(1, y->dtype()), b.op("Mul", {y, y})});
  return Grads{b.op("Mul", {b.grad_of_output(0), slope})};
}

// d/dx erf(x) = dy * 2/sqrt(pi) * exp(-x^2).
absl::StatusOr<Grads> erf_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* gauss = b.op("Exp", {b.op("Neg", {b.op("Mul", {x, x})})});
  Value* slope = b.op("Mul", {b.scalar(M_2_SQRTPI, x->dtype()), gauss});
  return Grads{b.op("Mul", {b.grad_of_output(0), slope})};
}

// d/dx softplus(x) = dy * sigmoid(x).
absl::StatusOr<Grads> softplus_grad(GradBuilder& b) {
  return Grads{b.op("Mul", {b.grad_of_output(0), b.op("Sigmoid", {b.input(0)})})};
}

// d/dx hard_sigmoid(x) = alpha * dy where 0 < alpha * x + beta < 1, else 0.
absl::StatusOr<Grads> hard_sigmoid_grad(GradBuilder& b) {
  Value* x = b.input(0);
  const DType dtype = x->dtype();
  Value* alpha = b.scalar(b.node().float_attr("alpha"), dtype);
  Value* t = b.op("Add", {b.op("Mul", {x, alpha}), b.scalar(b.node().float_attr("beta"), dtype)});
  Value* zero = b.scalar(0, dtype);
  Value* inside =
      b.op("Where", {b.op("Greater", {t, zero}), b.op("Mul", {b.grad_of_output(0), alpha}), zero});
  return Grads{b.op("Where", {b.op("Less", {t, b.scalar(1, dtype)}), inside, zero})};
}

// d/dx hard_swish(x) = 0 for x <= -3, dy for x >= 3, dy * (x/3 + 1/2) between (PyTorch's
// hardswish_backward, measured at -3 and 3).
absl::StatusOr<Grads> hard_swish_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* dy = b.grad_of_output(0);
  const DType dtype = x->dtype();
  Value* slope = b.op("Add", {b.op("Div", {x, b.scalar(3, dtype)}), b.scalar(0.5, dtype)});
  Value* upper = b.op(
      "Where", {b.op("GreaterOrEqual", {x, b.scalar(3, dtype)}), dy, b.op("Mul", {dy, slope})});
  return Grads{
      b.op("Where", {b.op("LessOrEqual", {x, b.scalar(-3, dtype)}), b.scalar(0, dtype), upper})};
}

// d/dx prelu(x, s) = dy where x > 0, s * dy elsewhere; d/ds = x * dy where x <= 0, else 0
// (PyTorch's _prelu_kernel_backward). The slope's gradient is X-shaped: the walker sums it over
// the dims the slope was broadcast along.
absl::StatusOr<Grads> prelu_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* dy = b.grad_of_output(0);
  Value* zero = b.scalar(0, x->dtype());
  Value* positive = b.op("Greater", {x, zero});
  Grads grads(2, nullptr);
  if (b.needs_grad(0)) grads[0] = b.op("Where", {positive, dy, b.op("Mul", {dy, b.input(1)})});
  if (b.needs_grad(1)) grads[1] = b.op("Mul", {dy, b.op("Where", {positive, zero, x})});
  return grads;
}

// The gradient of scale * (x > 0 ? x : alpha * (exp(input_scale * x) - 1)), which is Elu
// (scale = input_scale = 1), Selu (scale = gamma) and Celu (input_scale = 1 / alpha): dy * scale
// where x > 0, else dy * input_scale * (y + alpha * scale), from the output as PyTorch's
// elu_backward does. y > 0 exactly where x > 0 when scale > 0 and alpha * input_scale >= 0; the
// rule then reads y alone, else x for the branch.
Value* elu_family_grad(GradBuilder& b, double alpha, double scale, double input_scale) {
  Value* y = b.output(0);
  Value* dy = b.grad_of_output(0);
  const DType dtype = y->dtype();
  Value* positive = scale == 1 ? dy : b.op("Mul", {dy, b.scalar(scale, dtype)});
  Value* slope = b.op("Add", {y, b.scalar(alpha * scale, dtype)});
  if (input_scale != 1) slope = b.op("Mul", {slope, b.scalar(input_scale, dtype)});
  Value* negative = b.op("Mul", {dy, slope});
  Value* branch_on = scale > 0 && alpha * input_scale >= 0 ? y : b.input(0);
  Value* x_positive = b.op("Greater", {branch_on, b.scalar(0, dtype)});
  return b.op("Where", {x_positive, positive, negative});
}

absl::StatusOr<Grads> elu_grad(GradBuilder& b) {
  return Grads{elu_family_grad(b, b.node().float_attr("alpha"), 1, 1)};
}
absl::StatusOr<Grads> selu_grad(GradBuilder& b) {
  return Grads{elu_family_grad(b, b.node().float_attr("alpha"), b.node().float_attr("gamma"), 1)};
}
absl::StatusOr<Grads> celu_grad(GradBuilder& b) {
  const double alpha = b.node().float_attr("alpha");  // not 0: inference rejects it
  return Grads{elu_family_grad(b, alpha, 1, 1 / alpha)};
}

// d/dx mish(x) = dy * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)) (PyTorch's
// mish_backward).
absl::StatusOr<Grads> mish_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* t = b.op("Tanh", {b.op("Softplus", {x})});
  Value* sech2 = b.op("Sub", {b.scalar(1, x->dtype()), b.op("Mul", {t, t})});
  Value* slope = b.op("Add", {t, b.op("Mul", {b.op("Mul", {x, b.op("Sigmoid", {x})}), sech2})});
  return Grads{b.op("Mul", {b.grad_of_output(0), slope})};
}

// d/dx softsign(x) = dy / (1 + |x|)^2.
absl::StatusOr<Grads> softsign_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* denominator = b.op("Add", {b.scalar(1, x->dtype()), b.op("Abs", {x})});
  return Grads{b.op("Div", {b.grad_of_output(0), b.op("Mul", {denominator, denominator})})};
}

// d/dx sin(x) = dy * cos(x); d/dx cos(x) = -dy * sin(x).
absl::StatusOr<Grads> sin_grad(GradBuilder& b) {
  return Grads{b.op("Mul", {b.grad_of_output(0), b.op("Cos", {b.input(0)})})};
}
absl::StatusOr<Grads> cos_grad(GradBuilder& b) {
  return Grads{b.op("Neg", {b.op("Mul", {b.grad_of_output(0), b.op("Sin", {b.input(0)})})})};
}

// The derivatives of the other trigonometric and hyperbolic functions, from x (Tan's from y):
//   tan: dy * (1 + y^2)          asin: dy / sqrt(1 - x^2)      acos: -dy / sqrt(1 - x^2)
//   atan: dy / (1 + x^2)         sinh: dy * cosh(x)            cosh: dy * sinh(x)
//   asinh: dy / sqrt(x^2 + 1)    acosh: dy / sqrt(x^2 - 1)     atanh: dy / (1 - x^2)
Value* one_plus(GradBuilder& b, Value* v) { return b.op("Add", {b.scalar(1, v->dtype()), v}); }
Value* one_minus(GradBuilder& b, Value* v) { return b.op("Sub", {b.scalar(1, v->dtype()), v}); }
absl::StatusOr<Grads> tan_grad(GradBuilder& b) {
  Value* y = b.output(0);
  return Grads{b.op("Mul", {b.grad_of_output(0), one_plus(b, b.op("Mul", {y, y}))})};
}
absl::StatusOr<Grads> asin_grad(GradBuilder& b) {
  Value* x = b.input(0);
  return Grads{
      b.op("Div", {b.grad_of_output(0), b.op("Sqrt", {one_minus(b, b.op("Mul", {x, x}))})})};
}
absl::StatusOr<Grads> acos_grad(GradBuilder& b) {
  AMPC_ASSIGN_OR_RETURN(Grads grads, asin_grad(b));
  return Grads{b.op("Neg", {grads[0]})};
}
absl::StatusOr<Grads> atan_grad(GradBuilder& b) {
  Value* x = b.input(0);
  return Grads{b.op("Div", {b.grad_of_output(0), one_plus(b, b.op("Mul", {x, x}))})};
}
absl::StatusOr<Grads> sinh_grad(GradBuilder& b) {
  return Grads{b.op("Mul", {b.grad_of_output(0), b.op("Cosh", {b.input(0)})})};
}
absl::StatusOr<Grads> cosh_grad(GradBuilder& b) {
  return Grads{b.op("Mul", {b.grad_of_output(0), b.op("Sinh", {b.input(0)})})};
}
absl::StatusOr<Grads> asinh_grad(GradBuilder& b) {
  Value* x = b.input(0);
  return Grads{
      b.op("Div", {b.grad_of_output(0), b.op("Sqrt", {one_plus(b, b.op("Mul", {x, x}))})})};
}
absl::StatusOr<Grads> acosh_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* square = b.op("Mul", {x, x});
  return Grads{b.op("Div", {b.grad_of_output(0),
                            b.op("Sqrt", {b.op("Sub", {square, b.scalar(1, x->dtype())})})})};
}
absl::StatusOr<Grads> atanh_grad(GradBuilder& b) {
  Value* x = b.input(0);
  return Grads{b.op("Div", {b.grad_of_output(0), one_minus(b, b.op("Mul", {x, x}))})};
}

// d/dx gelu(x) = dy * (Phi(x) + x * phi(x)), or the derivative of the tanh approximation.
absl::StatusOr<Grads> gelu_grad(GradBuilder& b) {
  const std::string& approximate = b.node().string_attr("approximate");
  if (approximate != "none" && approximate != "tanh") {
    return absl::UnimplementedError(
        str_cat("approximate=\"", approximate, "\": only \"none\" and \"tanh\" are supported"));
  }
  return Grads{
      b.ampc_op("GeluGrad", {b.grad_of_output(0), b.input(0)}, {{"approximate", approximate}})};
}

// ---- Internal gradient ops ----------------------------------------------------------------

// dX = f(dY, S) element by element, where S is the forward input or output the op reads: both
// of one float type and one shape.
absl::Status infer_activation_grad(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  if (ctx.input_type(0).shape != ctx.input_type(1).shape) {
    return absl::InvalidArgumentError(
        str_cat("dY and the forward value it pairs with must have one shape, got ",
                shape_to_string(ctx.input_type(0).shape), " and ",
                shape_to_string(ctx.input_type(1).shape)));
  }
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

// `category` is the forward op's: the gradient is as exact as the activation itself.
OpDef activation_grad(std::string name, std::string saved, AutocastCategory category,
                      std::string summary) {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = std::move(name);
  def.summary = std::move(summary);
  def.inputs = {input("dY", kFloatTypes), input(std::move(saved), kFloatTypes)};
  def.outputs = {input("dX")};
  def.infer = infer_activation_grad;
  def.autocast.category = category;
  const auto both = [](DType dtype, Shape shape) {
    const TensorType type{dtype, std::move(shape)};
    return std::vector<TensorType>{type, type};
  };
  def.samples = {
      {"f32 vector", both(DType::kF32, {5}), {}, {}, {TensorType{DType::kF32, {5}}}},
      {"bf16 matrix", both(DType::kBF16, {2, 3}), {}, {}, {TensorType{DType::kBF16, {2, 3}}}},
      {"f16 matrix", both(DType::kF16, {3, 2}), {}, {}, {TensorType{DType::kF16, {3, 2}}}},
  };
  return def;
}

void register_activation_grad_ops(OpRegistry& registry) {
  registry.add(activation_grad("ReluGrad", "Y", AutocastCategory::kClear,
                               "0 where Y <= 0, else dY (Y: Relu's output)"));

  OpDef leaky = activation_grad("LeakyReluGrad", "X", AutocastCategory::kFollow,
                                "dY where X > 0, else alpha * dY");
  leaky.attrs = {attr("alpha", 0.01f)};
  leaky.samples.push_back(
      {"alpha", leaky.samples[0].inputs, {}, {{"alpha", 0.2f}}, leaky.samples[0].outputs});
  registry.add(std::move(leaky));

  OpDef gelu = activation_grad("GeluGrad", "X", AutocastCategory::kFollow,
                               "dY * Gelu'(X), exact or tanh-approximated");
  gelu.attrs = {attr("approximate", std::string("none"))};
  gelu.infer = [](InferenceContext& ctx) -> absl::Status {
    const std::string& approximate = ctx.string_attr("approximate");
    if (approximate != "none" && approximate != "tanh") {
      return absl::InvalidArgumentError(
          str_cat("approximate=\"", approximate, "\": expected \"none\" or \"tanh\""));
    }
    return infer_activation_grad(ctx);
  };
  gelu.samples.push_back({"tanh approximation",
                          gelu.samples[0].inputs,
                          {},
                          {{"approximate", std::string("tanh")}},
                          gelu.samples[0].outputs});
  registry.add(std::move(gelu));
}

// ---- Registration -------------------------------------------------------------------------

void register_activation_ops(OpRegistry& registry) {
  // Relu is exact in every dtype, so it passes any precision through.
  OpDef relu = activation("Relu", 6, AutocastCategory::kClear, "max(x, 0)");
  relu.gradient = relu_grad;
  registry.add(std::move(relu));

  OpDef leaky = activation("LeakyRelu", 6, AutocastCategory::kFollow, "x < 0 ? alpha * x : x");
  leaky.attrs = {attr("alpha", 0.01f)};
  leaky.gradient = leaky_relu_grad;
  leaky.samples.push_back({"alpha 0.3",
                           {TensorType{DType::kF32, {2, 4}}},
                           {},
                           {{"alpha", 0.3f}},
                           {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(leaky));

  // Opset 7 made the slope broadcast unidirectionally; 9 and 16 only added element types.
  OpDef prelu = activation("PRelu", 7, AutocastCategory::kFollow, "x < 0 ? slope * x : x");
  prelu.inputs = {input("X", kFloatTypes), input("slope", kFloatTypes)};
  prelu.infer = infer_prelu;
  prelu.gradient = prelu_grad;
  const TensorType f32_2x3x4{DType::kF32, {2, 3, 4}};
  prelu.samples = {
      {"per-channel slope", {f32_2x3x4, TensorType{DType::kF32, {3, 1}}}, {}, {}, {f32_2x3x4}},
      {"slope of X's shape", {f32_2x3x4, f32_2x3x4}, {}, {}, {f32_2x3x4}},
      {"scalar slope", {f32_2x3x4, TensorType{DType::kF32, {}}}, {}, {}, {f32_2x3x4}},
      {"bf16 trailing slope",
       {TensorType{DType::kBF16, {2, 3}}, TensorType{DType::kBF16, {3}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 3}}}},
  };
  registry.add(std::move(prelu));

  OpDef sigmoid = activation("Sigmoid", 6, AutocastCategory::kFollow, "1 / (1 + exp(-x))");
  sigmoid.gradient = sigmoid_grad;
  registry.add(std::move(sigmoid));

  OpDef tanh = activation("Tanh", 6, AutocastCategory::kFollow, "tanh(x)");
  tanh.gradient = tanh_grad;
  registry.add(std::move(tanh));

  OpDef erf = activation("Erf", 9, AutocastCategory::kFollow, "the error function");
  erf.gradient = erf_grad;
  registry.add(std::move(erf));

  OpDef gelu = activation("Gelu", 20, AutocastCategory::kFollow,
                          "x * Phi(x), exactly (erf) or with the tanh approximation");
  gelu.attrs = {attr("approximate", std::string("none"))};
  gelu.gradient = gelu_grad;
  gelu.samples.push_back({"tanh approximation",
                          {TensorType{DType::kF32, {2, 4}}},
                          {},
                          {{"approximate", std::string("tanh")}},
                          {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(gelu));

  // PyTorch's autocast runs softplus in fp32 (its exp overflows fp16); bf16 follows.
  OpDef softplus = activation("Softplus", 1, AutocastCategory::kDeny, "ln(exp(x) + 1)");
  softplus.gradient = softplus_grad;
  registry.add(std::move(softplus));

  // x / (1 + |x|): single IEEE operations, fine in low precision.
  OpDef softsign = activation("Softsign", 1, AutocastCategory::kFollow, "x / (1 + |x|)");
  softsign.gradient = softsign_grad;
  registry.add(std::move(softsign));

  OpDef hard_sigmoid =
      activation("HardSigmoid", 6, AutocastCategory::kFollow, "max(0, min(1, alpha * x + beta))");
  hard_sigmoid.attrs = {attr("alpha", 0.2f), attr("beta", 0.5f)};
  hard_sigmoid.gradient = hard_sigmoid_grad;
  hard_sigmoid.samples.push_back({"PyTorch's alpha 1/6",
                                  {TensorType{DType::kF32, {2, 4}}},
                                  {},
                                  {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}},
                                  {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(hard_sigmoid));

  OpDef hard_swish =
      activation("HardSwish", 14, AutocastCategory::kFollow, "x * max(0, min(1, x/6 + 1/2))");
  hard_swish.gradient = hard_swish_grad;
  registry.add(std::move(hard_swish));

  // The exponential ones are bounded below and grow like x above: like Gelu, they follow (not in
  // PyTorch's fp32 autocast list, unlike Softplus).
  OpDef elu = activation("Elu", 6, AutocastCategory::kFollow, "x > 0 ? x : alpha * (exp(x) - 1)");
  elu.attrs = {attr("alpha", 1.0f)};
  elu.gradient = elu_grad;
  elu.samples.push_back({"alpha 0.5",
                         {TensorType{DType::kF32, {2, 4}}},
                         {},
                         {{"alpha", 0.5f}},
                         {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(elu));

  OpDef selu = activation("Selu", 6, AutocastCategory::kFollow,
                          "gamma * (x > 0 ? x : alpha * (exp(x) - 1))");
  selu.attrs = {attr("alpha", 1.67326319217681884765625f),
                attr("gamma", 1.05070102214813232421875f)};
  selu.gradient = selu_grad;
  selu.samples.push_back({"alpha 2, gamma 3",
                          {TensorType{DType::kF32, {2, 4}}},
                          {},
                          {{"alpha", 2.0f}, {"gamma", 3.0f}},
                          {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(selu));

  OpDef celu = activation("Celu", 12, AutocastCategory::kFollow,
                          "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))");
  celu.attrs = {attr("alpha", 1.0f)};
  celu.infer = [](InferenceContext& ctx) -> absl::Status {
    if (ctx.float_attr("alpha") == 0) {
      return absl::InvalidArgumentError("alpha must not be 0 (Celu divides by it)");
    }
    return infer_same_as_input(ctx);
  };
  celu.gradient = celu_grad;
  celu.samples.push_back({"alpha 2",
                          {TensorType{DType::kF32, {2, 4}}},
                          {},
                          {{"alpha", 2.0f}},
                          {TensorType{DType::kF32, {2, 4}}}});
  registry.add(std::move(celu));

  OpDef mish = activation("Mish", 18, AutocastCategory::kFollow, "x * tanh(softplus(x))");
  mish.gradient = mish_grad;
  registry.add(std::move(mish));

  OpDef sin = activation("Sin", 7, AutocastCategory::kFollow, "sin(x)");
  sin.gradient = sin_grad;
  registry.add(std::move(sin));

  OpDef cos = activation("Cos", 7, AutocastCategory::kFollow, "cos(x)");
  cos.gradient = cos_grad;
  registry.add(std::move(cos));

  // PyTorch's autocast runs tan, asin, acos, sinh and cosh in fp32 (their results lose most of
  // fp16's precision near the poles and overflow early); the others follow their input.
  struct Math {
    const char* name;
    int since_opset;
    AutocastCategory category;
    const char* summary;
    absl::StatusOr<Grads> (*gradient)(GradBuilder&);
  };
  for (const Math& m : {Math{"Tan", 7, AutocastCategory::kDeny, "tan(x)", &tan_grad},
                        Math{"Asin", 7, AutocastCategory::kDeny, "asin(x)", &asin_grad},
                        Math{"Acos", 7, AutocastCategory::kDeny, "acos(x)", &acos_grad},
                        Math{"Atan", 7, AutocastCategory::kFollow, "atan(x)", &atan_grad},
                        Math{"Sinh", 9, AutocastCategory::kDeny, "sinh(x)", &sinh_grad},
                        Math{"Cosh", 9, AutocastCategory::kDeny, "cosh(x)", &cosh_grad},
                        Math{"Asinh", 9, AutocastCategory::kFollow, "asinh(x)", &asinh_grad},
                        Math{"Acosh", 9, AutocastCategory::kFollow, "acosh(x)", &acosh_grad},
                        Math{"Atanh", 9, AutocastCategory::kFollow, "atanh(x)", &atanh_grad}}) {
    OpDef def = activation(m.name, m.since_opset, m.category, m.summary);
    def.gradient = m.gradient;
    registry.add(std::move(def));
  }

  register_activation_grad_ops(registry);
}

const OpRegistration kActivationOps(&register_activation_ops);

}  // namespace
}  // namespace ampc::ops
