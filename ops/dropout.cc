// Dropout and its gradient, DropoutGrad (ampc domain).
//
// In training, Dropout zeroes each element with probability `ratio` and scales the rest by
// 1/(1-ratio); otherwise (no training_mode, training_mode false, or ratio 0) it is the identity
// and its mask all true. Its gradient is the same product applied to dY: dX = dY * mask/(1-ratio).
// Where the forward node writes its mask, DropoutGrad reads it. Where it does not, the rule
// recomputes the product as a Dropout of dY with the forward node's seed, ratio and training_mode:
// the runtime draws the mask from (seed, element index) and ratio alone, never from the data, so
// the second node drops exactly the elements the first dropped (runtime/cpu/shape.cc). That
// keeps a mask-less graph from holding a bool tensor per dropout between forward and backward.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status expect_scalar(const InferenceContext& ctx, int i, std::string_view name) {
  if (ctx.has_input(i) && ctx.input_type(i).num_elements() != 1) {
    return absl::InvalidArgumentError(str_cat("input ", i, " ('", name,
                                              "') must be a scalar, got shape ",
                                              shape_to_string(ctx.input_type(i).shape)));
  }
  return absl::OkStatus();
}

// The ratio of a Dropout or DropoutGrad node: its ratio input when that is known (an error
// unless it is in [0, 1)), else its attribute; nullopt when the input is not known.
absl::StatusOr<std::optional<double>> known_ratio(const InferenceContext& ctx, int ratio_input) {
  std::optional<double> ratio = ctx.float_attr("ratio");
  if (ctx.has_input(ratio_input)) {
    const Tensor* value = ctx.input_value(ratio_input);
    ratio = value != nullptr && value->has_data() ? std::optional(value->element_as_double(0))
                                                  : std::nullopt;
  }
  if (ratio && !(*ratio >= 0 && *ratio < 1)) {
    return absl::InvalidArgumentError(str_cat("ratio ", *ratio, " is not in [0, 1)"));
  }
  return ratio;
}

// ---- Dropout ----------------------------------------------------------------------------------

absl::Status infer_dropout(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_scalar(ctx, 1, "ratio"));
  AMPC_RETURN_IF_ERROR(expect_scalar(ctx, 2, "training_mode"));
  AMPC_RETURN_IF_ERROR(known_ratio(ctx, 1).status());
  const TensorType& data = ctx.input_type(0);
  ctx.set_output(0, data);
  ctx.set_output(1, TensorType{DType::kBool, data.shape});
  return absl::OkStatus();
}

// The initializer data of `value`, or null when it is not a constant the rule can read.
const Tensor* constant_data(const Value* value) {
  const Tensor* data = value != nullptr ? value->initializer() : nullptr;
  return data != nullptr && data->has_data() ? data : nullptr;
}

// Whether the node is the identity whatever its data: no training_mode, or a constant false
// one, or a constant ratio of 0 (its input, or the attribute where the input is omitted).
bool dropout_is_identity(const Node& node) {
  if (!node.has_operand(2)) return true;
  if (const Tensor* training = constant_data(node.operand(2))) {
    if (training->element_as_i64(0) == 0) return true;
  }
  if (node.has_operand(1)) {
    const Tensor* ratio = constant_data(node.operand(1));
    return ratio != nullptr && ratio->element_as_double(0) == 0;
  }
  return node.float_attr("ratio") == 0;
}

// d/dx dropout(x) = dy * mask / (1 - ratio) in training, dy otherwise: DropoutGrad on the
// forward node's mask, or (no mask output) a Dropout of dy that draws the same mask again.
absl::StatusOr<Grads> dropout_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  if (dropout_is_identity(b.node())) return Grads{dy};
  Value* ratio = b.has_input(1) ? b.input(1) : nullptr;
  Attributes attrs = b.node().attrs();  // seed and ratio, as the forward node has them
  if (b.node().has_output(1)) {
    attrs.erase("seed");
    return Grads{b.ampc_op("DropoutGrad", {dy, b.output(1), ratio, b.input(2)}, std::move(attrs))};
  }
  return Grads{b.op("Dropout", {dy, ratio, b.input(2)}, std::move(attrs))};
}

OpDef dropout_op() {
  OpDef def;
  def.name = "Dropout";
  // 12 moves ratio to an input and adds training_mode; without training_mode (or with it false)
  // the op is the identity and the mask all true. Before 12 a file marks training by the mask
  // output, which the importer records as a training_mode operand (compiler/onnx_legacy_ops.cc)
  // and export writes back; before 10 the mask was of the data's type, and is not computed.
  def.since_opset = 7;
  def.summary = "zeroes elements with probability ratio in training, scaling the rest";
  def.inputs = {input("data", kFloatTypes), optional_input("ratio", kFloatTypes),
                optional_input("training_mode", {DType::kBool})};
  def.outputs = {input("output"), optional_input("mask")};
  def.attrs = {attr("ratio", 0.5f), optional_attr("seed", AttrKind::kInt)};
  def.attrs_as_inputs = {{"ratio", 1, 12}};
  def.infer = infer_dropout;
  def.autocast.category = AutocastCategory::kClear;
  def.gradient = dropout_grad;
  def.no_gradient_inputs = {1};  // the ratio
  def.identity = dropout_is_identity;
  const Tensor ratio_half = Tensor::from_f32({}, {0.5f});
  const Tensor training = Tensor::from_doubles(DType::kBool, {}, {1});
  def.samples = {
      {"output only", {{DType::kF32, {4, 8}}}, {}, {}, {{DType::kF32, {4, 8}}}},
      {"training with mask",
       {{DType::kF16, {2, 3}}, {DType::kF32, {}}, {DType::kBool, {}}},
       {{1, Tensor::from_f32({}, {0.1f})}},
       {},
       {{DType::kF16, {2, 3}}, {DType::kBool, {2, 3}}}},
      {"training, mask output",
       {{DType::kF32, {4, 6}}, {DType::kF32, {}}, {DType::kBool, {}}},
       {{1, ratio_half}, {2, training}},
       {{"seed", int64_t{7}}},
       {{DType::kF32, {4, 6}}, {DType::kBool, {4, 6}}}},
      {"training, no mask output",
       {{DType::kF32, {4, 6}}, {DType::kF32, {}}, {DType::kBool, {}}},
       {{1, ratio_half}, {2, training}},
       {},
       {{DType::kF32, {4, 6}}}},
  };
  return def;
}

// ---- DropoutGrad ------------------------------------------------------------------------------

absl::Status infer_dropout_grad(InferenceContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  if (ctx.input_type(1).shape != dy.shape) {
    return absl::InvalidArgumentError(
        str_cat("the mask has shape ", shape_to_string(ctx.input_type(1).shape), ", the gradient ",
                shape_to_string(dy.shape), "; they must agree"));
  }
  AMPC_RETURN_IF_ERROR(expect_scalar(ctx, 2, "ratio"));
  AMPC_RETURN_IF_ERROR(expect_scalar(ctx, 3, "training_mode"));
  AMPC_RETURN_IF_ERROR(known_ratio(ctx, 2).status());
  ctx.set_output(0, dy);
  return absl::OkStatus();
}

OpDef dropout_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "DropoutGrad";
  def.since_opset = 1;
  def.summary = "dX = dY * mask / (1 - ratio) in training, dY otherwise (Dropout's gradient)";
  def.inputs = {input("dY", kFloatTypes), input("mask", {DType::kBool}),
                optional_input("ratio", kFloatTypes),
                optional_input("training_mode", {DType::kBool})};
  def.outputs = {input("dX")};
  def.attrs = {attr("ratio", 0.5f)};
  def.infer = infer_dropout_grad;
  def.autocast.category = AutocastCategory::kClear;
  // Linear in dY: d/d(dY) dropout_grad(dY) = dropout_grad(g) with the same mask.
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    return Grads{b.ampc_op("DropoutGrad",
                           {b.grad_of_output(0), b.input(1), b.has_input(2) ? b.input(2) : nullptr,
                            b.has_input(3) ? b.input(3) : nullptr},
                           b.node().attrs())};
  };
  def.no_gradient_inputs = {2};  // the ratio
  const TensorType f32_scalar{DType::kF32, {}};
  const TensorType bool_scalar{DType::kBool, {}};
  const Tensor training = Tensor::from_doubles(DType::kBool, {}, {1});
  def.samples = {
      {"f32 training",
       {{DType::kF32, {3, 5}}, {DType::kBool, {3, 5}}, f32_scalar, bool_scalar},
       {{2, Tensor::from_f32({}, {0.25f})}, {3, training}},
       {},
       {{DType::kF32, {3, 5}}}},
      {"f16 without training_mode is the identity",
       {{DType::kF16, {2, 4}}, {DType::kBool, {2, 4}}},
       {},
       {{"ratio", 0.75f}},
       {{DType::kF16, {2, 4}}}},
      {"bf16 training_mode input",
       {{DType::kBF16, {6}}, {DType::kBool, {6}}, f32_scalar, bool_scalar},
       {{2, Tensor::from_f32({}, {0.5f})}},
       {},
       {{DType::kBF16, {6}}}},
  };
  return def;
}

void register_dropout_ops(OpRegistry& registry) {
  registry.add(dropout_op());
  registry.add(dropout_grad_op());
}

const OpRegistration kDropoutOps(&register_dropout_ops);

}  // namespace
}  // namespace ampc::ops
