// Classification losses: SoftmaxCrossEntropyLoss (with its optional log_prob output) and
// NegativeLogLikelihoodLoss.
//
// Both take class scores [N, C] or [N, C, d1, ..., dk], integer labels [N] or [N, d1, ..., dk],
// optional per-class weights [C], an optional ignore_index, and a reduction: "none" gives the
// per-sample loss [N, d1, ..., dk], "sum" and "mean" a scalar. The semantics are unchanged from
// opset 12 on (later versions only widen the element types).
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

// Checks the scores / labels / weights layout shared by both losses and returns the per-sample
// loss shape [N, d1, ..., dk].
absl::StatusOr<Shape> check_class_layout(const InferenceContext& ctx, std::string_view scores,
                                         std::string_view labels, std::string_view weights) {
  const Shape& score_shape = ctx.input_type(0).shape;
  if (score_shape.size() < 2) {
    return absl::InvalidArgumentError(str_cat("input 0 ('", scores, "') must be [N, C, ...], got ",
                                              shape_to_string(score_shape)));
  }
  Shape sample_shape = score_shape;
  sample_shape.erase(sample_shape.begin() + 1);
  const Shape& label_shape = ctx.input_type(1).shape;
  if (label_shape != sample_shape) {
    return absl::InvalidArgumentError(str_cat("input 1 ('", labels, "') has shape ",
                                              shape_to_string(label_shape), "; ", scores,
                                              " of shape ", shape_to_string(score_shape), " needs ",
                                              labels, " of shape ", shape_to_string(sample_shape)));
  }
  if (ctx.has_input(2)) {
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 2));
    const Shape& weight_shape = ctx.input_type(2).shape;
    if (weight_shape != Shape{score_shape[1]}) {
      return absl::InvalidArgumentError(str_cat("input 2 ('", weights, "') has shape ",
                                                shape_to_string(weight_shape),
                                                "; it must be [C] = [", score_shape[1], "]"));
    }
  }
  const std::string& reduction = ctx.string_attr("reduction");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return absl::InvalidArgumentError(
        str_cat("reduction '", reduction, "' is not one of 'none', 'sum', 'mean'"));
  }
  return reduction == "none" ? sample_shape : Shape{};
}

absl::Status infer_softmax_cross_entropy(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Shape loss_shape, check_class_layout(ctx, "scores", "labels", "weights"));
  const DType dtype = ctx.input_type(0).dtype;
  ctx.set_output(0, TensorType{dtype, std::move(loss_shape)});
  if (ctx.has_output(1)) ctx.set_output(1, ctx.input_type(0));
  return absl::OkStatus();
}

absl::Status infer_negative_log_likelihood(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Shape loss_shape, check_class_layout(ctx, "input", "target", "weight"));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, std::move(loss_shape)});
  return absl::OkStatus();
}

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
TensorType i64(Shape shape) { return {DType::kI64, std::move(shape)}; }

OpDef loss(std::string name, std::string summary, std::vector<OperandSpec> inputs) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 12;
  def.summary = std::move(summary);
  def.inputs = std::move(inputs);
  def.attrs = {optional_attr("ignore_index", AttrKind::kInt),
               attr("reduction", std::string("mean"))};
  // A loss sums many terms and feeds the whole backward pass: it stays fp32.
  def.autocast.category = AutocastCategory::kDeny;
  return def;
}

void register_loss_ops(OpRegistry& registry) {
  OpDef sce = loss("SoftmaxCrossEntropyLoss", "-log(softmax(scores))[label], reduced",
                   {input("scores", kFloatTypes), input("labels", kIndexTypes),
                    optional_input("weights", kFloatTypes)});
  sce.outputs = {input("output"), optional_input("log_prob")};
  sce.infer = infer_softmax_cross_entropy;
  sce.samples = {
      {"mean over a batch", {f32({3, 5}), i64({3})}, {}, {}, {f32({})}},
      {"none, k-dimensional, with log_prob",
       {f32({2, 4, 3}), i64({2, 3})},
       {},
       {{"reduction", std::string("none")}},
       {f32({2, 3}), f32({2, 4, 3})}},
      {"sum with weights and ignore_index",
       {f32({4, 3}), TensorType{DType::kI32, {4}}, f32({3})},
       {},
       {{"reduction", std::string("sum")}, {"ignore_index", int64_t{-100}}},
       {f32({})}},
  };
  registry.add(std::move(sce));

  OpDef nll = loss("NegativeLogLikelihoodLoss", "-input[target], weighted, reduced",
                   {input("input", kFloatTypes), input("target", kIndexTypes),
                    optional_input("weight", kFloatTypes)});
  nll.outputs = {input("loss")};
  nll.infer = infer_negative_log_likelihood;
  nll.samples = {
      {"mean over a batch", {f32({3, 5}), i64({3})}, {}, {}, {f32({})}},
      {"none, k-dimensional",
       {f32({2, 3, 2}), i64({2, 2})},
       {},
       {{"reduction", std::string("none")}},
       {f32({2, 2})}},
      {"sum with weight",
       {f32({2, 3, 2}), i64({2, 2}), f32({3})},
       {},
       {{"reduction", std::string("sum")}},
       {f32({})}},
  };
  registry.add(std::move(nll));
}

const OpRegistration kRegistration(&register_loss_ops);

}  // namespace
}  // namespace ampc::ops
