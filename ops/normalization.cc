// Normalization: BatchNormalization (inference and training mode) and LayerNormalization.
//
// Their statistics are what low precision would hurt: BatchNormalization follows its input but
// keeps scale, bias and the running mean and variance in fp32; LayerNormalization runs in fp32
// (deny list). Both compute their statistics in fp32 whatever the data's dtype.
//
// ampc.SyncBatchNormalization, which data-parallel training puts in place of training-mode
// BatchNormalization (passes/data_parallel.h), is the same op with the statistics taken over the
// batches of every rank of the group together (PyTorch's SyncBatchNorm); in a group of one it is
// training-mode BatchNormalization.
//
// Their gradients are the internal ops ampc.BatchNormalizationGrad and
// ampc.LayerNormalizationGrad, which give dX, dScale and dB in one pass over the statistics.
// Running statistics, input_mean/input_var and LayerNormalization's Mean/InvStdDev outputs take
// no part in differentiation.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

// ---- BatchNormalization --------------------------------------------------------------------

// Inputs 1..4 (scale, B, input_mean, input_var) must each be [C], C = X's dim 1 (1 for 1-D X).
absl::StatusOr<int64_t> check_batch_norm_inputs(const InferenceContext& ctx) {
  const Shape& x = ctx.input_type(0).shape;
  if (x.empty()) {
    return absl::InvalidArgumentError("X must be N x C x D1 ... Dn or N, not a scalar");
  }
  const int64_t channels = x.size() >= 2 ? x[1] : 1;
  static constexpr const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i <= 4; ++i) {
    const Shape& shape = ctx.input_type(i).shape;
    if (shape != Shape{channels}) {
      return absl::InvalidArgumentError(
          str_cat(kNames[i], " ", shape_to_string(shape), " must be [", channels,
                  "], one value per channel of X ", shape_to_string(x)));
    }
  }
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, 2));  // scale and B share T1
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, 4));  // input_mean and input_var share T2
  return channels;
}

// Opset 14+: outputs Y, and in training mode the optional running_mean and running_var.
absl::Status infer_batch_norm(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(int64_t channels, check_batch_norm_inputs(ctx));
  const int64_t training_mode = ctx.int_attr("training_mode");  // 0 or 1 (AttrSpec::int_range)
  if (training_mode == 0 && (ctx.has_output(1) || ctx.has_output(2))) {
    return absl::InvalidArgumentError(
        "running_mean and running_var are outputs of training mode only (training_mode=0)");
  }
  ctx.set_output(0, ctx.input_type(0));
  const TensorType stats{ctx.input_type(3).dtype, {channels}};
  ctx.set_output(1, stats);
  ctx.set_output(2, stats);
  return absl::OkStatus();
}

// ampc.SyncBatchNormalization: training mode's Y, running_mean and running_var.
absl::Status infer_sync_batch_norm(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(int64_t channels, check_batch_norm_inputs(ctx));
  ctx.set_output(0, ctx.input_type(0));
  const TensorType stats{ctx.input_type(3).dtype, {channels}};
  ctx.set_output(1, stats);
  ctx.set_output(2, stats);
  return absl::OkStatus();
}

// Opsets 9-13: the file format marks training mode by outputs past Y (mean and var, the updated
// running statistics, as running_mean and running_var from 14; saved_mean and saved_var). The
// importer records it as `training_mode` (compiler/onnx_legacy_ops.cc) and export writes it back
// as the outputs, so the node means what opset 14's does; saved_mean and saved_var, which
// runtimes fill differently, are not computed.
absl::Status infer_batch_norm_v9(InferenceContext& ctx) {
  for (int i = 3; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) {
      return absl::UnimplementedError(
          "saved_mean and saved_var (outputs 3 and 4) are not computed by ampc");
    }
  }
  return infer_batch_norm(ctx);
}

// ---- LayerNormalization --------------------------------------------------------------------

// Y like X; Mean and InvStdDev (stash_type) keep X's dims before `axis` and are 1 from it on.
absl::Status infer_layer_norm(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return absl::InvalidArgumentError("X must have rank >= 1, not be a scalar");
  AMPC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.int_attr("axis"), rank));
  static constexpr const char* kNames[] = {"X", "Scale", "B"};
  for (int i = 1; i <= 2; ++i) {
    if (!ctx.has_input(i)) continue;
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
    const Shape& shape = ctx.input_type(i).shape;
    if (!broadcasts_to(shape, x.shape)) {
      return absl::InvalidArgumentError(str_cat(kNames[i], " ", shape_to_string(shape),
                                                " does not broadcast to X ",
                                                shape_to_string(x.shape)));
    }
  }
  const DType stash = ctx.dtype_attr("stash_type");
  if (stash != DType::kF32 && stash != DType::kBF16) {
    return absl::InvalidArgumentError(
        str_cat("stash_type must be f32 or bf16, got ", dtype_name(stash)));
  }
  Shape stats_shape(x.shape.begin(), x.shape.begin() + axis);
  stats_shape.resize(rank, 1);
  ctx.set_output(0, x);
  ctx.set_output(1, TensorType{stash, stats_shape});
  ctx.set_output(2, TensorType{stash, stats_shape});
  return absl::OkStatus();
}

// ---- Gradients -----------------------------------------------------------------------------

// BatchNormalizationGrad(dY, X, scale, mean, var) -> dX like X, dScale and dB like scale.
absl::Status infer_batch_norm_grad(InferenceContext& ctx) {
  if (ctx.input_type(0) != ctx.input_type(1)) {
    return absl::InvalidArgumentError(str_cat("dY ", type_to_string(ctx.input_type(0)),
                                              " must have X's type ",
                                              type_to_string(ctx.input_type(1))));
  }
  const Shape& x = ctx.input_type(1).shape;
  if (x.empty()) return absl::InvalidArgumentError("X must be N x C x D1 ... Dn or N");
  const int64_t channels = x.size() >= 2 ? x[1] : 1;
  static constexpr const char* kNames[] = {"dY", "X", "scale", "mean", "var"};
  for (int i = 2; i <= 4; ++i) {
    if (ctx.input_type(i).shape != Shape{channels}) {
      return absl::InvalidArgumentError(str_cat(
          kNames[i], " ", shape_to_string(ctx.input_type(i).shape), " must be [", channels, "]"));
    }
  }
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 3, 4));
  ctx.set_output(0, ctx.input_type(1));
  ctx.set_output(1, ctx.input_type(2));
  ctx.set_output(2, ctx.input_type(2));
  return absl::OkStatus();
}

// LayerNormalizationGrad(dY, X, Scale, [Mean, InvStdDev]) -> dX like X, and dScale (and dB when
// asked for) shaped like the normalized dims X[axis:]. Scale broadcasts to the normalized dims.
absl::Status infer_layer_norm_grad(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(1);
  if (ctx.input_type(0) != x) {
    return absl::InvalidArgumentError(str_cat("dY ", type_to_string(ctx.input_type(0)),
                                              " must have X's type ", type_to_string(x)));
  }
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return absl::InvalidArgumentError("X must have rank >= 1, not be a scalar");
  AMPC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.int_attr("axis"), rank));
  const Shape normalized(x.shape.begin() + axis, x.shape.end());
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, 2));
  if (!broadcasts_to(ctx.input_type(2).shape, normalized)) {
    return absl::InvalidArgumentError(str_cat("Scale ", shape_to_string(ctx.input_type(2).shape),
                                              " does not broadcast to the normalized dims ",
                                              shape_to_string(normalized)));
  }
  if (ctx.has_input(3) != ctx.has_input(4)) {
    return absl::InvalidArgumentError("Mean and InvStdDev must be given together or not at all");
  }
  if (ctx.has_input(3)) {
    Shape stats_shape(x.shape.begin(), x.shape.begin() + axis);
    stats_shape.resize(rank, 1);
    for (int i = 3; i <= 4; ++i) {
      if (ctx.input_type(i).shape != stats_shape) {
        return absl::InvalidArgumentError(str_cat(i == 3 ? "Mean " : "InvStdDev ",
                                                  shape_to_string(ctx.input_type(i).shape),
                                                  " must be ", shape_to_string(stats_shape)));
      }
    }
  }
  ctx.set_output(0, x);
  ctx.set_output(1, TensorType{x.dtype, normalized});
  if (ctx.has_output(2)) ctx.set_output(2, TensorType{x.dtype, normalized});
  return absl::OkStatus();
}

// Training mode, per channel over the count m elements of (n, d), xhat = (x - mean) * inv_std:
//   dx = scale * inv_std * (dy - sum(dy) / m - xhat * sum(dy * xhat) / m)
// (the batch statistics depend on x); inference mode: dx = scale * inv_std * dy. In both,
// dscale = sum(dy * xhat), dB = sum(dy).
absl::StatusOr<Grads> batch_norm_grad(GradBuilder& b) {
  const AttrValue* training = b.node().find_attr("training_mode");
  const std::vector<Value*> grads =
      b.op_n(kAmpcDomain, "BatchNormalizationGrad",
             {b.grad_of_output(0), b.input(0), b.input(1), b.input(3), b.input(4)}, 3,
             {{"epsilon", b.node().float_attr("epsilon")},
              {"training_mode", training != nullptr ? *training : AttrValue(int64_t{0})}});
  return Grads{grads[0], grads[1], grads[2], nullptr, nullptr};
}

// As batch_norm_grad in training mode, with the statistics and dX's sums over every rank.
absl::StatusOr<Grads> sync_batch_norm_grad(GradBuilder& b) {
  const std::vector<Value*> grads =
      b.op_n(kAmpcDomain, "BatchNormalizationGrad",
             {b.grad_of_output(0), b.input(0), b.input(1), b.input(3), b.input(4)}, 3,
             {{"epsilon", b.node().float_attr("epsilon")},
              {"training_mode", int64_t{1}},
              {"all_ranks", int64_t{1}}});
  return Grads{grads[0], grads[1], grads[2], nullptr, nullptr};
}

// `grad`, shaped like the normalized dims, summed to the shape of `operand` (Scale or B), which
// may have more leading 1s than there are normalized dims.
Value* to_operand_shape(GradBuilder& b, Value* grad, const Shape& operand) {
  size_t first = 0;
  while (first < operand.size() && operand[first] == 1) ++first;
  Value* reduced = b.reduce_to_shape(grad, Shape(operand.begin() + first, operand.end()));
  if (reduced->shape() != operand) reduced = b.op("Reshape", {reduced, b.int64s(operand)});
  return reduced;
}

// Per row of n normalized elements, xhat = (x - mean) * inv_std, g = dy * scale:
//   dx = inv_std * (g - sum(g) / n - xhat * sum(g * xhat) / n)
//   dscale = sum over rows of dy * xhat, dB = sum over rows of dy.
// Reads the forward's Mean and InvStdDev when they hold exactly what the forward computed with
// (stashed in X's compute type), else recomputes them from X.
absl::StatusOr<Grads> layer_norm_grad(GradBuilder& b) {
  const Node& node = b.node();
  const Shape& x = b.input(0)->shape();
  const int64_t rank = static_cast<int64_t>(x.size());
  AMPC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(node.int_attr("axis"), rank));
  const int normalized_rank = static_cast<int>(rank - axis);
  const bool has_bias = b.has_input(2);
  for (int i = 1; i <= (has_bias ? 2 : 1); ++i) {
    const Shape& shape = b.input(i)->shape();
    const auto first = std::find_if(shape.begin(), shape.end(), [](int64_t d) { return d != 1; });
    if (shape.end() - first > normalized_rank) {
      return absl::UnimplementedError(
          str_cat("gradient of ", i == 1 ? "Scale " : "B ", shape_to_string(shape),
                  ", which varies along dims before axis ", axis, " of X ", shape_to_string(x),
                  "; only parameters over the normalized dims are supported"));
    }
  }
  std::vector<Value*> operands = {b.grad_of_output(0), b.input(0), b.input(1)};
  const DType compute = b.input(0)->dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  if (node.has_output(1) && node.has_output(2) && node.output(1)->dtype() == compute) {
    operands.push_back(b.output(1));
    operands.push_back(b.output(2));
  }
  const std::vector<Value*> grads =
      b.op_n(kAmpcDomain, "LayerNormalizationGrad", operands, has_bias ? 3 : 2,
             {{"axis", axis}, {"epsilon", node.float_attr("epsilon")}});
  Grads result = {grads[0], to_operand_shape(b, grads[1], b.input(1)->shape())};
  if (has_bias) result.push_back(to_operand_shape(b, grads[2], b.input(2)->shape()));
  return result;
}

// ---- Registration --------------------------------------------------------------------------

// An OpSample of BatchNormalization on X of `x`, parameters and statistics of `param` [C], with
// constant input_mean and input_var (they get no gradient; the variance must be positive).
OpSample batch_norm_sample(std::string name, TensorType x, DType param, Attributes attrs,
                           int outputs) {
  const int64_t channels = x.shape.size() >= 2 ? x.shape[1] : 1;
  std::vector<double> mean, var;
  for (int64_t c = 0; c < channels; ++c) {
    mean.push_back(0.25 * static_cast<double>(c) - 0.1);
    var.push_back(0.5 + 0.5 * static_cast<double>(c));
  }
  const TensorType stats{param, {channels}};
  OpSample sample{std::move(name),
                  {x, stats, stats, stats, stats},
                  {{3, Tensor::from_doubles(param, {channels}, mean)},
                   {4, Tensor::from_doubles(param, {channels}, var)}},
                  std::move(attrs),
                  {x}};
  for (int i = 1; i < outputs; ++i) sample.outputs.push_back(stats);
  return sample;
}

OpDef batch_norm_base() {
  OpDef def;
  def.name = "BatchNormalization";
  def.inputs = {input("X", kFloatTypes), input("scale", kFloatTypes), input("B", kFloatTypes),
                input("input_mean", kFloatTypes), input("input_var", kFloatTypes)};
  // Follows X; the per-channel parameters and statistics stay fp32.
  def.autocast.category = AutocastCategory::kFollow;
  def.autocast.fp32_operands = {1, 2, 3, 4};
  def.gradient = batch_norm_grad;
  def.no_gradient_inputs = {3, 4};
  return def;
}

OpDef batch_norm_def() {
  OpDef def = batch_norm_base();
  // 15 lets scale/B and mean/var differ in type from X; we accept that from 14 on.
  def.since_opset = 14;
  def.summary = "per-channel normalization; batch statistics and running updates in training";
  def.outputs = {input("Y"), optional_input("running_mean"), optional_input("running_var")};
  def.attrs = {attr("epsilon", 1e-5f), attr("momentum", 0.9f), flag_attr("training_mode", 0)};
  def.infer = infer_batch_norm;
  def.no_gradient_outputs = {1, 2};
  const Attributes training = {{"training_mode", int64_t{1}}};
  def.samples = {
      batch_norm_sample("inference", f32({2, 3, 4, 5}), DType::kF32, {}, 1),
      batch_norm_sample("training with running stats", f32({2, 3, 4, 5}), DType::kF32,
                        {{"training_mode", int64_t{1}}, {"epsilon", 0.01f}}, 3),
      batch_norm_sample("training [N, C, H, W], Y only", f32({3, 2, 2, 3}), DType::kF32, training,
                        1),
      batch_norm_sample("training [N, C]", f32({6, 3}), DType::kF32, training, 3),
      batch_norm_sample("f16 data, f32 statistics", f16({8, 4}), DType::kF32, training, 3),
      batch_norm_sample("inference [N, C]", f32({5, 4}), DType::kF32, {{"epsilon", 0.1f}}, 1),
  };
  return def;
}

OpDef batch_norm_v9_def() {
  OpDef def = batch_norm_base();
  def.since_opset = 9;  // 9 dropped `spatial`; before it the op had other modes
  def.until_opset = 13;
  def.summary = "per-channel normalization; training mode when it has the mean and var outputs";
  def.outputs = {input("Y"), optional_input("mean"), optional_input("var"),
                 optional_input("saved_mean"), optional_input("saved_var")};
  // training_mode is not an ONNX attribute at these opsets: see infer_batch_norm_v9.
  def.attrs = {attr("epsilon", 1e-5f), attr("momentum", 0.9f), flag_attr("training_mode", 0)};
  def.infer = infer_batch_norm_v9;
  def.no_gradient_outputs = {1, 2, 3, 4};
  def.samples = {
      batch_norm_sample("2-D image", f32({2, 3, 4, 5}), DType::kF32, {}, 1),
      batch_norm_sample("1-D input, one channel", f16({6}), DType::kF16, {{"epsilon", 0.001f}}, 1),
      batch_norm_sample("training, mean and var outputs", f32({3, 2, 2, 3}), DType::kF32,
                        {{"training_mode", int64_t{1}}, {"momentum", 0.8f}}, 3),
  };
  return def;
}

OpDef sync_batch_norm_def() {
  OpDef def = batch_norm_base();
  def.domain = std::string(kAmpcDomain);
  def.name = "SyncBatchNormalization";
  def.summary =
      "training-mode BatchNormalization with the batch statistics of every rank's batch together";
  def.outputs = {input("Y"), optional_input("running_mean"), optional_input("running_var")};
  def.attrs = {attr("epsilon", 1e-5f), attr("momentum", 0.9f)};
  def.infer = infer_sync_batch_norm;
  def.gradient = sync_batch_norm_grad;
  def.no_gradient_outputs = {1, 2};
  def.samples = {
      batch_norm_sample("[N, C, H, W]", f32({2, 3, 4, 5}), DType::kF32, {{"epsilon", 0.01f}}, 3),
      batch_norm_sample("f16 data, f32 statistics", f16({8, 4}), DType::kF32, {}, 3),
  };
  return def;
}

OpDef batch_norm_grad_def() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "BatchNormalizationGrad";
  def.summary = "dX, dScale, dB of BatchNormalization (through the batch statistics in training)";
  def.inputs = {input("dY", kFloatTypes), input("X", kFloatTypes), input("scale", kFloatTypes),
                input("mean", kFloatTypes), input("var", kFloatTypes)};
  def.outputs = {input("dX"), input("dScale"), input("dB")};
  // all_ranks (with training_mode): the batch statistics and the sums in dX are over every
  // rank's batch (ampc.SyncBatchNormalization's); dScale and dB stay this rank's sums.
  def.attrs = {attr("epsilon", 1e-5f), flag_attr("training_mode", 0), flag_attr("all_ranks", 0)};
  def.infer = infer_batch_norm_grad;
  const TensorType x = f32({2, 3, 2, 2}), c = f32({3});
  const TensorType h = f16({6, 2}), bf = TensorType{DType::kBF16, {4, 2, 3}};
  const TensorType c2 = f32({2});
  def.samples = {
      {"f32 training", {x, x, c, c, c}, {}, {{"training_mode", int64_t{1}}}, {x, c, c}},
      {"f16 data, f32 parameters, training",
       {h, h, c2, c2, c2},
       {},
       {{"training_mode", int64_t{1}}},
       {h, c2, c2}},
      {"bf16 data, inference", {bf, bf, c2, c2, c2}, {}, {}, {bf, c2, c2}},
  };
  return def;
}

OpDef layer_norm_def() {
  OpDef def;
  def.name = "LayerNormalization";
  def.since_opset = 17;
  def.summary = "normalizes over dims axis.. with mean and variance, then scales and shifts";
  def.inputs = {input("X", kFloatTypes), input("Scale", kFloatTypes),
                optional_input("B", kFloatTypes)};
  def.outputs = {input("Y"), optional_input("Mean"), optional_input("InvStdDev")};
  def.attrs = {attr("axis", int64_t{-1}), attr("epsilon", 1e-5f), attr("stash_type", DType::kF32)};
  def.infer = infer_layer_norm;
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = layer_norm_grad;
  def.no_gradient_outputs = {1, 2};
  def.samples = {
      {"last axis",
       {f32({2, 3, 4, 5}), f32({5}), f32({5})},
       {},
       {},
       {f32({2, 3, 4, 5}), f32({2, 3, 4, 1}), f32({2, 3, 4, 1})}},
      {"axis 1 without bias",
       {f32({2, 3, 5}), f32({3, 5})},
       {},
       Attributes{{"axis", int64_t{1}}, {"epsilon", 0.1f}},
       {f32({2, 3, 5}), f32({2, 1, 1}), f32({2, 1, 1})}},
      {"f16 data, f32 statistics, axis -2",
       {f16({4, 6, 8}), f16({6, 8}), f16({6, 8})},
       {},
       Attributes{{"axis", int64_t{-2}}},
       {f16({4, 6, 8}), f32({4, 1, 1}), f32({4, 1, 1})}},
      {"axis -1 without bias, Y only", {f32({3, 6}), f32({6})}, {}, {}, {f32({3, 6})}},
      {"axis -2, parameters broadcast within the normalized dims",
       {f32({2, 3, 4}), f32({1, 4}), f32({1, 3, 1})},
       {},
       Attributes{{"axis", int64_t{-2}}, {"epsilon", 0.01f}},
       {f32({2, 3, 4})}},
  };
  return def;
}

OpDef layer_norm_grad_def() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "LayerNormalizationGrad";
  def.summary = "dX, dScale and (optionally) dB of LayerNormalization";
  def.inputs = {input("dY", kFloatTypes), input("X", kFloatTypes), input("Scale", kFloatTypes),
                optional_input("Mean", {DType::kF32, DType::kF64}),
                optional_input("InvStdDev", {DType::kF32, DType::kF64})};
  def.outputs = {input("dX"), input("dScale"), optional_input("dB")};
  def.attrs = {attr("axis", int64_t{-1}), attr("epsilon", 1e-5f)};
  def.infer = infer_layer_norm_grad;
  const TensorType x = f32({2, 3, 4}), h = f16({3, 8});
  const TensorType bf = TensorType{DType::kBF16, {2, 2, 3}};
  def.samples = {
      {"f32 last axis", {x, x, f32({4})}, {}, {}, {x, f32({4}), f32({4})}},
      {"f16 with saved statistics, no bias",
       {h, h, f16({8}), f32({3, 1}), f32({3, 1})},
       {},
       {},
       {h, f16({8})}},
      {"bf16 axis 1",
       {bf, bf, TensorType{DType::kBF16, {3}}},
       {},
       {{"axis", int64_t{1}}},
       {bf, TensorType{DType::kBF16, {2, 3}}, TensorType{DType::kBF16, {2, 3}}}},
  };
  return def;
}

void register_normalization_ops(OpRegistry& registry) {
  registry.add(batch_norm_v9_def());
  registry.add(batch_norm_def());
  registry.add(layer_norm_def());
  registry.add(sync_batch_norm_def());
  registry.add(batch_norm_grad_def());
  registry.add(layer_norm_grad_def());
}

const OpRegistration kNormalizationOps(&register_normalization_ops);

}  // namespace
}  // namespace ampc::ops
