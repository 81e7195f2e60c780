// Classification losses: SoftmaxCrossEntropyLoss (with its optional log_prob output) and
// NegativeLogLikelihoodLoss, and their gradients, the internal ops
// ampc.SoftmaxCrossEntropyLossGrad and ampc.NegativeLogLikelihoodLossGrad.
//
// Both take class scores [N, C] or [N, C, d1, ..., dk], integer labels [N] or [N, d1, ..., dk],
// optional per-class weights [C], an optional ignore_index, and a reduction: "none" gives the
// per-sample loss [N, d1, ..., dk], "sum" and "mean" a scalar. The semantics are unchanged from
// opset 12 on (later versions only widen the element types). Labels and weights get no gradient.
// The gradient ops have second-order rules too (composed of the losses and standard ops).
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

// Checks the scores / labels / weights layout (inputs `first`, `first` + 1, `first` + 2) shared
// by the losses and their gradients, and returns the per-sample loss shape [N, d1, ..., dk].
absl::StatusOr<Shape> check_class_layout(const InferenceContext& ctx, int first,
                                         std::string_view scores, std::string_view labels,
                                         std::string_view weights) {
  const Shape& score_shape = ctx.input_type(first).shape;
  if (score_shape.size() < 2) {
    return absl::InvalidArgumentError(str_cat("input ", first, " ('", scores,
                                              "') must be [N, C, ...], got ",
                                              shape_to_string(score_shape)));
  }
  Shape sample_shape = score_shape;
  sample_shape.erase(sample_shape.begin() + 1);
  const Shape& label_shape = ctx.input_type(first + 1).shape;
  if (label_shape != sample_shape) {
    return absl::InvalidArgumentError(str_cat("input ", first + 1, " ('", labels, "') has shape ",
                                              shape_to_string(label_shape), "; ", scores,
                                              " of shape ", shape_to_string(score_shape), " needs ",
                                              labels, " of shape ", shape_to_string(sample_shape)));
  }
  if (ctx.has_input(first + 2)) {
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, first, first + 2));
    const Shape& weight_shape = ctx.input_type(first + 2).shape;
    if (weight_shape != Shape{score_shape[1]}) {
      return absl::InvalidArgumentError(str_cat("input ", first + 2, " ('", weights,
                                                "') has shape ", shape_to_string(weight_shape),
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
  AMPC_ASSIGN_OR_RETURN(Shape loss_shape,
                        check_class_layout(ctx, 0, "scores", "labels", "weights"));
  const DType dtype = ctx.input_type(0).dtype;
  ctx.set_output(0, TensorType{dtype, std::move(loss_shape)});
  if (ctx.has_output(1)) ctx.set_output(1, ctx.input_type(0));
  return absl::OkStatus();
}

absl::Status infer_negative_log_likelihood(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Shape loss_shape, check_class_layout(ctx, 0, "input", "target", "weight"));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, std::move(loss_shape)});
  return absl::OkStatus();
}

// dLoss must be typed like the forward loss output: `loss_shape`, the scores' dtype.
absl::Status check_loss_grad(const InferenceContext& ctx, const TensorType& expected) {
  if (ctx.input_type(0) != expected) {
    return absl::InvalidArgumentError(str_cat("dLoss is ", type_to_string(ctx.input_type(0)),
                                              "; the loss it is the gradient of is ",
                                              type_to_string(expected)));
  }
  return absl::OkStatus();
}

// (dLoss, log_prob or scores, labels, [weights]) -> dScores, typed like input 1.
absl::Status infer_softmax_cross_entropy_grad(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Shape loss_shape,
                        check_class_layout(ctx, 1, "log_prob", "labels", "weights"));
  AMPC_RETURN_IF_ERROR(check_loss_grad(ctx, {ctx.input_type(1).dtype, std::move(loss_shape)}));
  ctx.set_output(0, ctx.input_type(1));
  return absl::OkStatus();
}

// (dLoss, target, [weight]) -> dInput [N, classes, d1, ..., dk], dLoss's dtype.
absl::Status infer_negative_log_likelihood_grad(InferenceContext& ctx) {
  const int64_t classes = ctx.int_attr("classes");
  const Shape& target = ctx.input_type(1).shape;
  if (classes < 1 || target.empty()) {
    return absl::InvalidArgumentError(str_cat("classes (", classes,
                                              ") must be positive and target ",
                                              shape_to_string(target), " [N, d1, ...]"));
  }
  const DType dtype = ctx.input_type(0).dtype;
  Shape input_shape = target;
  input_shape.insert(input_shape.begin() + 1, classes);
  if (ctx.has_input(2)) {
    const TensorType& weight = ctx.input_type(2);
    if (weight != TensorType{dtype, {classes}}) {
      return absl::InvalidArgumentError(str_cat("weight ", type_to_string(weight), " must be ",
                                                dtype_name(dtype), "[", classes, "]"));
    }
  }
  const std::string& reduction = ctx.string_attr("reduction");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return absl::InvalidArgumentError(
        str_cat("reduction '", reduction, "' is not one of 'none', 'sum', 'mean'"));
  }
  AMPC_RETURN_IF_ERROR(check_loss_grad(ctx, {dtype, reduction == "none" ? target : Shape{}}));
  ctx.set_output(0, TensorType{dtype, std::move(input_shape)});
  return absl::OkStatus();
}

// The forward loss's reduction and ignore_index, for its gradient node.
Attributes loss_attrs(const Node& node) {
  Attributes attrs = {{"reduction", node.string_attr("reduction")}};
  if (const AttrValue* ignored = node.find_attr("ignore_index")) attrs["ignore_index"] = *ignored;
  return attrs;
}

// d loss_s / d x_c = w_t * (softmax(x)_c - [c == t]) for sample s of label t, scaled by the
// reduction (1 / sum of weights for mean); ignored samples get 0. Gradient flowing into log_prob
// adds LogSoftmaxGrad along C. Reads log_prob when the node outputs it in f32 or f64, else the
// scores.
absl::StatusOr<Grads> softmax_cross_entropy_grad(GradBuilder& b) {
  const Node& node = b.node();
  Value* scores_grad = nullptr;
  if (Value* loss_grad = b.grad_of_output(0)) {
    // f16/bf16 log-probabilities were rounded: recompute them from the scores instead.
    const DType dtype = b.input(0)->dtype();
    const bool reads_log_prob = node.has_output(1) && dtype != DType::kF16 && dtype != DType::kBF16;
    std::vector<Value*> operands = {loss_grad, reads_log_prob ? b.output(1) : b.input(0),
                                    b.input(1)};
    if (b.has_input(2)) operands.push_back(b.input(2));
    Attributes attrs = loss_attrs(node);
    attrs["from_scores"] = int64_t{reads_log_prob ? 0 : 1};
    scores_grad = b.ampc_op("SoftmaxCrossEntropyLossGrad", operands, std::move(attrs));
  }
  if (Value* log_prob_grad = b.grad_of_output(1)) {
    Value* through_log_prob =
        b.ampc_op("LogSoftmaxGrad", {log_prob_grad, b.output(1)}, {{"axis", int64_t{1}}});
    scores_grad = scores_grad ? b.op("Add", {scores_grad, through_log_prob}) : through_log_prob;
  }
  return Grads{scores_grad};
}

// d loss_s / d input[n, c, d] = -w_t * [c == t] for sample s = (n, d) of label t, scaled by the
// reduction; ignored samples get 0.
absl::StatusOr<Grads> negative_log_likelihood_grad(GradBuilder& b) {
  std::vector<Value*> operands = {b.grad_of_output(0), b.input(1)};
  if (b.has_input(2)) operands.push_back(b.input(2));
  Attributes attrs = loss_attrs(b.node());
  attrs["classes"] = b.input(0)->shape()[1];
  return Grads{b.ampc_op("NegativeLogLikelihoodLossGrad", operands, std::move(attrs))};
}

// The forward loss node's reduction and ignore_index (those of a gradient node, which shares
// them), with labels `labels` and optional weights `weights`, applied to `input` as
// NegativeLogLikelihoodLoss: reduce(-input[label] * w[label]).
Value* nll_of(GradBuilder& b, Value* input, Value* labels, Value* weights) {
  Attributes attrs = loss_attrs(b.node());
  std::vector<Value*> operands = {input, labels};
  if (weights != nullptr) operands.push_back(weights);
  return b.op("NegativeLogLikelihoodLoss", operands, std::move(attrs));
}

// Second order of NegativeLogLikelihoodLossGrad, which is linear in dLoss: for the gradient g of
// its output, d/d dLoss = NegativeLogLikelihoodLoss(g) with the same labels, weights and modes.
absl::StatusOr<Grads> negative_log_likelihood_grad_grad(GradBuilder& b) {
  return Grads{nll_of(b, b.grad_of_output(0), b.input(1), b.has_input(2) ? b.input(2) : nullptr)};
}

// Second order of SoftmaxCrossEntropyLossGrad, dx_c = f * (p_c - [c == t]) per sample with
// f = dLoss (scaled by the reduction) * w_t and p = exp(log_prob) or softmax(scores). For the
// gradient g of dx: d/d dLoss = NegativeLogLikelihoodLoss(g - sum_c(g * p)) (the sample sums
// sum_c g_c (p_c - [c == t]) * w_t, reduced); d/dp = g * f, taken back through exp (times p) or
// through softmax (SoftmaxGrad). f comes from NegativeLogLikelihoodLossGrad(dLoss) = -f at t.
absl::StatusOr<Grads> softmax_cross_entropy_grad_grad(GradBuilder& b) {
  Value* g = b.grad_of_output(0);
  Value* labels = b.input(2);
  Value* weights = b.has_input(3) ? b.input(3) : nullptr;
  const bool from_scores = b.node().int_attr("from_scores") != 0;
  Value* p = from_scores ? b.op("Softmax", {b.input(1)}, {{"axis", int64_t{1}}})
                         : b.op("Exp", {b.input(1)});
  const Attributes class_sum = {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}};
  Grads grads(4, nullptr);
  if (b.needs_grad(0)) {
    Value* centered = b.op("Sub", {g, b.op("ReduceSum", {b.op("Mul", {g, p})}, class_sum)});
    grads[0] = nll_of(b, centered, labels, weights);
  }
  if (b.needs_grad(1)) {
    std::vector<Value*> operands = {b.input(0), labels};
    if (weights != nullptr) operands.push_back(weights);
    Attributes attrs = loss_attrs(b.node());
    attrs["classes"] = b.input(1)->shape()[1];
    Value* target_grad = b.ampc_op("NegativeLogLikelihoodLossGrad", operands, std::move(attrs));
    Value* factor = b.op("Neg", {b.op("ReduceSum", {target_grad}, class_sum)});
    Value* p_grad = b.op("Mul", {g, factor});
    grads[1] = from_scores ? b.ampc_op("SoftmaxGrad", {p_grad, p}, {{"axis", int64_t{1}}})
                           : b.op("Mul", {p_grad, p});
  }
  return grads;
}

// Positive per-class weights, a constant input (weights get no gradient).
Tensor class_weights(int64_t classes, DType dtype = DType::kF32) {
  std::vector<double> values;
  for (int64_t c = 0; c < classes; ++c) values.push_back(0.5 + 0.25 * static_cast<double>(c));
  return Tensor::from_doubles(dtype, {classes}, values);
}

OpDef loss(std::string domain, std::string name, std::string summary,
           std::vector<OperandSpec> inputs) {
  OpDef def;
  def.domain = std::move(domain);
  def.name = std::move(name);
  def.since_opset = def.domain.empty() ? 12 : 1;
  def.summary = std::move(summary);
  def.inputs = std::move(inputs);
  def.attrs = {optional_attr("ignore_index", AttrKind::kInt),
               attr("reduction", std::string("mean"))};
  // A loss sums many terms and feeds the whole backward pass: it stays fp32. (Gradient ops take
  // their precision from the forward node.)
  if (def.domain.empty()) def.autocast.category = AutocastCategory::kDeny;
  def.no_gradient_inputs = {def.domain.empty() ? 2 : 3};
  return def;
}

void register_loss_ops(OpRegistry& registry) {
  const Attributes none = {{"reduction", std::string("none")}};
  OpDef sce = loss("", "SoftmaxCrossEntropyLoss", "-log(softmax(scores))[label], reduced",
                   {input("scores", kFloatTypes), input("labels", kIndexTypes),
                    optional_input("weights", kFloatTypes)});
  sce.outputs = {input("output"), optional_input("log_prob")};
  sce.infer = infer_softmax_cross_entropy;
  sce.gradient = softmax_cross_entropy_grad;
  // The gradient check draws labels 0 and 1: ignoring one of them ignores about half the samples.
  sce.samples = {
      {"mean over a batch", {f32({3, 5}), i64({3})}, {}, {}, {f32({})}},
      {"none, k-dimensional, with log_prob",
       {f32({2, 4, 3}), i64({2, 3})},
       {},
       none,
       {f32({2, 3}), f32({2, 4, 3})}},
      {"sum with weights and ignore_index",
       {f32({4, 3}), TensorType{DType::kI32, {4}}, f32({3})},
       {{2, class_weights(3)}},
       {{"reduction", std::string("sum")}, {"ignore_index", int64_t{1}}},
       {f32({})}},
      {"mean, 3-D, weights and ignore_index",
       {f32({3, 4, 4}), i64({3, 4}), f32({4})},
       {{2, class_weights(4)}},
       {{"ignore_index", int64_t{0}}},
       {f32({})}},
      {"mean, ignore_index, with log_prob",
       {f32({4, 3, 3}), i64({4, 3})},
       {},
       {{"ignore_index", int64_t{1}}},
       {f32({}), f32({4, 3, 3})}},
      {"none, weights and ignore_index",
       {f32({5, 3}), i64({5}), f32({3})},
       {{2, class_weights(3)}},
       {{"reduction", std::string("none")}, {"ignore_index", int64_t{0}}},
       {f32({5})}},
  };
  registry.add(std::move(sce));

  OpDef nll = loss("", "NegativeLogLikelihoodLoss", "-input[target], weighted, reduced",
                   {input("input", kFloatTypes), input("target", kIndexTypes),
                    optional_input("weight", kFloatTypes)});
  nll.outputs = {input("loss")};
  nll.infer = infer_negative_log_likelihood;
  nll.gradient = negative_log_likelihood_grad;
  nll.samples = {
      {"mean over a batch", {f32({3, 5}), i64({3})}, {}, {}, {f32({})}},
      {"none, k-dimensional", {f32({2, 3, 2}), i64({2, 2})}, {}, none, {f32({2, 2})}},
      {"sum with weight",
       {f32({2, 3, 2}), i64({2, 2}), f32({3})},
       {{2, class_weights(3)}},
       {{"reduction", std::string("sum")}},
       {f32({})}},
      {"mean, 3-D, weight and ignore_index",
       {f32({3, 3, 4}), i64({3, 4}), f32({3})},
       {{2, class_weights(3)}},
       {{"ignore_index", int64_t{1}}},
       {f32({})}},
  };
  registry.add(std::move(nll));

  const TensorType bf16_scores{DType::kBF16, {2, 4, 3}};
  OpDef sce_grad =
      loss(std::string(kAmpcDomain), "SoftmaxCrossEntropyLossGrad",
           "dLoss * w[label] * (softmax(scores) - onehot(label)), reduced as the forward",
           {input("dLoss", kFloatTypes), input("log_prob", kFloatTypes),
            input("labels", kIndexTypes), optional_input("weights", kFloatTypes)});
  sce_grad.outputs = {input("dScores")};
  // from_scores=1: input 1 holds the raw scores (the forward had no log_prob output).
  sce_grad.attrs.push_back(flag_attr("from_scores", 0));
  sce_grad.infer = infer_softmax_cross_entropy_grad;
  sce_grad.gradient = softmax_cross_entropy_grad_grad;
  sce_grad.samples = {
      {"f32 mean", {f32({}), f32({3, 5}), i64({3})}, {}, {}, {f32({3, 5})}},
      {"bf16 none, 3-D, from scores, weights",
       {TensorType{DType::kBF16, {2, 3}}, bf16_scores, i64({2, 3}), TensorType{DType::kBF16, {4}}},
       {{3, class_weights(4, DType::kBF16)}},
       {{"reduction", std::string("none")}, {"from_scores", int64_t{1}}},
       {bf16_scores}},
      {"f16 sum, ignore_index",
       {TensorType{DType::kF16, {}}, TensorType{DType::kF16, {4, 3}}, TensorType{DType::kI32, {4}}},
       {},
       {{"reduction", std::string("sum")}, {"ignore_index", int64_t{1}}},
       {TensorType{DType::kF16, {4, 3}}}},
      {"f32 mean, from scores, weights and ignore_index",
       {f32({}), f32({12, 3}), i64({12}), f32({3})},
       {{3, class_weights(3)}},
       {{"ignore_index", int64_t{0}}, {"from_scores", int64_t{1}}},
       {f32({12, 3})}},
  };
  registry.add(std::move(sce_grad));

  OpDef nll_grad = loss(std::string(kAmpcDomain), "NegativeLogLikelihoodLossGrad",
                        "-dLoss * w[target] at the target class, zero elsewhere, reduced",
                        {input("dLoss", kFloatTypes), input("target", kIndexTypes),
                         optional_input("weight", kFloatTypes)});
  nll_grad.outputs = {input("dInput")};
  nll_grad.no_gradient_inputs = {2};
  nll_grad.attrs.push_back(required_attr("classes", AttrKind::kInt));
  nll_grad.infer = infer_negative_log_likelihood_grad;
  nll_grad.gradient = negative_log_likelihood_grad_grad;
  nll_grad.samples = {
      {"f32 mean", {f32({}), i64({3})}, {}, {{"classes", int64_t{5}}}, {f32({3, 5})}},
      {"f16 none, 3-D, weight",
       {TensorType{DType::kF16, {2, 2}}, i64({2, 2}), TensorType{DType::kF16, {3}}},
       {{2, class_weights(3, DType::kF16)}},
       {{"reduction", std::string("none")}, {"classes", int64_t{3}}},
       {TensorType{DType::kF16, {2, 3, 2}}}},
      {"bf16 sum, ignore_index",
       {TensorType{DType::kBF16, {}}, TensorType{DType::kI32, {4}}},
       {},
       {{"reduction", std::string("sum")}, {"ignore_index", int64_t{0}}, {"classes", int64_t{2}}},
       {TensorType{DType::kBF16, {4, 2}}}},
      {"f32 mean, weight and ignore_index",
       {f32({}), i64({12}), f32({3})},
       {{2, class_weights(3)}},
       {{"ignore_index", int64_t{1}}, {"classes", int64_t{3}}},
       {f32({12, 3})}},
  };
  registry.add(std::move(nll_grad));
}

const OpRegistration kLossOps(&register_loss_ops);

}  // namespace
}  // namespace ampc::ops
