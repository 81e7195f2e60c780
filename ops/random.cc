// The random ops: RandomUniform and RandomNormal (a shape from an attribute), their Like forms
// (the input's shape, and its dtype unless `dtype` says otherwise), and Bernoulli (1 with the
// input's probability per element). PyTorch exports torch.rand_like, torch.randn_like and
// torch.bernoulli (stochastic depth, noise in a VAE or a diffusion model) as these.
//
// The runtime draws from (seed, run's random stream, element index) as it does for Dropout
// (runtime/random_math.h): each step draws anew, two runs of the same steps draw the same, and
// the training-step pass gives each random node of a step a seed of its own. Nothing
// differentiates through a draw: the Like forms' and Bernoulli's inputs get no gradient (as in
// PyTorch, where bernoulli's gradient with respect to p is zero). The ops compute in fp32 under
// mixed precision (their draws are fp32's, as PyTorch draws for an fp32 model).
#include <algorithm>
#include <cmath>

#include "ops/op_util.h"

namespace ampc::ops {
namespace {

const std::vector<DType> kDrawTypes = kFloatTypes;

absl::Status expect_draw_type(DType dtype, std::string_view what) {
  if (std::find(kDrawTypes.begin(), kDrawTypes.end(), dtype) == kDrawTypes.end()) {
    return absl::InvalidArgumentError(
        str_cat(what, " is ", dtype_name(dtype), "; the op draws f32, f16, bf16 or f64"));
  }
  return absl::OkStatus();
}

// The distribution's attributes: finite, and low <= high.
absl::Status check_distribution(const InferenceContext& ctx) {
  const bool uniform = ctx.node().op_type().starts_with("RandomUniform");
  const char* first = uniform ? "low" : "mean";
  const char* second = uniform ? "high" : "scale";
  const float a = ctx.float_attr(first);
  const float b = ctx.float_attr(second);
  if (!std::isfinite(a) || !std::isfinite(b)) {
    return absl::InvalidArgumentError(
        str_cat("attributes '", first, "' (", a, ") and '", second, "' (", b, ") must be finite"));
  }
  if (uniform && !(a <= b)) {
    return absl::InvalidArgumentError(
        str_cat("attribute 'low' (", a, ") is greater than attribute 'high' (", b, ")"));
  }
  return absl::OkStatus();
}

// RandomUniform, RandomNormal: the `shape` attribute, of `dtype` (default f32).
absl::Status infer_random(InferenceContext& ctx) {
  const std::vector<int64_t>& shape = ctx.ints_attr("shape");
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          str_cat("attribute 'shape' ", shape_to_string(shape), " has a negative dim"));
    }
  }
  const DType dtype = ctx.dtype_attr("dtype");
  AMPC_RETURN_IF_ERROR(expect_draw_type(dtype, "attribute 'dtype'"));
  AMPC_RETURN_IF_ERROR(check_distribution(ctx));
  ctx.set_output(0, TensorType{dtype, shape});
  return absl::OkStatus();
}

// RandomUniformLike, RandomNormalLike, Bernoulli: the input's shape, of `dtype` when given, else
// of the input's dtype. The draws are float (Bernoulli's may be stored in any numeric type).
absl::Status infer_random_like(InferenceContext& ctx, bool any_numeric) {
  const TensorType& in = ctx.input_type(0);
  const bool given = ctx.has_attr("dtype");
  const DType dtype = given ? ctx.dtype_attr("dtype") : in.dtype;
  if (!any_numeric) {
    AMPC_RETURN_IF_ERROR(expect_draw_type(
        dtype, given ? "attribute 'dtype'" : "the input (whose dtype the output takes)"));
    AMPC_RETURN_IF_ERROR(check_distribution(ctx));
  } else if (!is_arithmetic_float(dtype) && !is_integer(dtype) && dtype != DType::kBool) {
    return absl::InvalidArgumentError(str_cat("attribute 'dtype' is ", dtype_name(dtype),
                                              "; Bernoulli stores 0 and 1 in a "
                                              "float, integer or bool type"));
  }
  ctx.set_output(0, TensorType{dtype, in.shape});
  return absl::OkStatus();
}

OpDef random_op(std::string name, std::string summary, std::vector<AttrSpec> distribution) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 1;
  def.summary = std::move(summary);
  def.outputs = {input("output", kDrawTypes)};
  def.attrs = std::move(distribution);
  def.attrs.push_back(attr("dtype", DType::kF32));
  def.attrs.push_back(optional_attr("seed", AttrKind::kFloat));
  def.attrs.push_back(required_attr("shape", AttrKind::kInts));
  def.infer = infer_random;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"default f32", {}, {}, {{"shape", std::vector<int64_t>{2, 3}}}, {{DType::kF32, {2, 3}}}},
      {"f16, seeded",
       {},
       {},
       {{"shape", std::vector<int64_t>{4}}, {"dtype", DType::kF16}, {"seed", 3.0f}},
       {{DType::kF16, {4}}}},
  };
  return def;
}

OpDef random_like_op(std::string name, std::string summary, std::vector<AttrSpec> distribution) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 1;
  def.summary = std::move(summary);
  def.inputs = {input("input")};
  def.outputs = {input("output", kDrawTypes)};
  def.attrs = std::move(distribution);
  def.attrs.push_back(optional_attr("dtype", AttrKind::kDType));
  def.attrs.push_back(optional_attr("seed", AttrKind::kFloat));
  def.infer = [](InferenceContext& ctx) { return infer_random_like(ctx, false); };
  def.autocast.category = AutocastCategory::kDeny;
  def.no_gradient_inputs = {0};
  def.samples = {
      {"the input's type", {{DType::kF32, {2, 5}}}, {}, {}, {{DType::kF32, {2, 5}}}},
      {"i64 input, f16 draws",
       {{DType::kI64, {3}}},
       {},
       {{"dtype", DType::kF16}},
       {{DType::kF16, {3}}}},
  };
  return def;
}

OpDef bernoulli_op() {
  OpDef def;
  def.name = "Bernoulli";
  def.since_opset = 15;
  def.summary = "1 with the input's probability per element, else 0";
  def.inputs = {input("input", kFloatTypes)};
  def.outputs = {input("output")};
  def.attrs = {optional_attr("dtype", AttrKind::kDType), optional_attr("seed", AttrKind::kFloat)};
  def.infer = [](InferenceContext& ctx) { return infer_random_like(ctx, true); };
  def.autocast.category = AutocastCategory::kDeny;
  def.no_gradient_inputs = {0};
  def.samples = {
      {"the input's type", {{DType::kF32, {2, 5}}}, {}, {}, {{DType::kF32, {2, 5}}}},
      {"f16 probabilities, bool draws",
       {{DType::kF16, {3}}},
       {},
       {{"dtype", DType::kBool}},
       {{DType::kBool, {3}}}},
  };
  return def;
}

void register_random_ops(OpRegistry& registry) {
  const std::vector<AttrSpec> uniform = {attr("high", 1.0f), attr("low", 0.0f)};
  const std::vector<AttrSpec> normal = {attr("mean", 0.0f), attr("scale", 1.0f)};
  registry.add(
      random_op("RandomUniform", "uniform draws in [low, high) of a given shape", uniform));
  registry.add(random_op("RandomNormal", "normal draws of a given shape", normal));
  registry.add(random_like_op("RandomUniformLike",
                              "uniform draws in [low, high) of the input's shape", uniform));
  registry.add(random_like_op("RandomNormalLike", "normal draws of the input's shape", normal));
  registry.add(bernoulli_op());
}

const OpRegistration kRandomOps(&register_random_ops);

}  // namespace
}  // namespace ampc::ops
