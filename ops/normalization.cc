// Normalization: BatchNormalization (inference and training mode) and LayerNormalization.
//
// Their statistics are what low precision would hurt: BatchNormalization follows its input but
// keeps scale, bias and the running mean and variance in fp32; LayerNormalization runs in fp32
// (deny list). Both compute their statistics in fp32 whatever the data's dtype.
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
  const int64_t training_mode = ctx.int_attr("training_mode");
  if (training_mode != 0 && training_mode != 1) {
    return absl::InvalidArgumentError(str_cat("training_mode must be 0 or 1, got ", training_mode));
  }
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

// Opsets 9-13: the same op in inference mode. Their training form (outputs mean, var,
// saved_mean, saved_var) computes other statistics, so it is refused rather than misread.
absl::Status infer_batch_norm_v9(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(check_batch_norm_inputs(ctx).status());
  for (int i = 1; i < ctx.num_outputs(); ++i) {
    if (ctx.has_output(i)) {
      return absl::InvalidArgumentError(
          "the training-mode outputs (mean, var, saved_mean, saved_var) of BatchNormalization "
          "before opset 14 are not supported; export the model with opset 14 or later");
    }
  }
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
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

// ---- Registration --------------------------------------------------------------------------

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }
TensorType f16(Shape shape) { return TensorType{DType::kF16, std::move(shape)}; }

OpDef batch_norm_base() {
  OpDef def;
  def.name = "BatchNormalization";
  def.inputs = {input("X", kFloatTypes), input("scale", kFloatTypes), input("B", kFloatTypes),
                input("input_mean", kFloatTypes), input("input_var", kFloatTypes)};
  // Follows X; the per-channel parameters and statistics stay fp32.
  def.autocast.category = AutocastCategory::kFollow;
  def.autocast.fp32_operands = {1, 2, 3, 4};
  return def;
}

OpDef batch_norm_def() {
  OpDef def = batch_norm_base();
  // 15 lets scale/B and mean/var differ in type from X; we accept that from 14 on.
  def.since_opset = 14;
  def.summary = "per-channel normalization; batch statistics and running updates in training";
  def.outputs = {input("Y"), optional_input("running_mean"), optional_input("running_var")};
  def.attrs = {attr("epsilon", 1e-5f), attr("momentum", 0.9f), attr("training_mode", int64_t{0})};
  def.infer = infer_batch_norm;
  def.samples = {
      {"inference",
       {f32({2, 3, 4, 5}), f32({3}), f32({3}), f32({3}), f32({3})},
       {},
       {},
       {f32({2, 3, 4, 5})}},
      {"training with running stats",
       {f32({2, 3, 4, 5}), f32({3}), f32({3}), f32({3}), f32({3})},
       {},
       Attributes{{"training_mode", int64_t{1}}, {"epsilon", 0.01f}},
       {f32({2, 3, 4, 5}), f32({3}), f32({3})}},
      {"f16 data, f32 statistics",
       {f16({8, 4}), f32({4}), f32({4}), f32({4}), f32({4})},
       {},
       Attributes{{"training_mode", int64_t{1}}},
       {f16({8, 4}), f32({4}), f32({4})}},
  };
  return def;
}

OpDef batch_norm_v9_def() {
  OpDef def = batch_norm_base();
  def.since_opset = 9;  // 9 dropped `spatial`; before it the op had other modes
  def.until_opset = 13;
  def.summary = "per-channel normalization with given statistics (inference mode)";
  def.outputs = {input("Y"), optional_input("mean"), optional_input("var"),
                 optional_input("saved_mean"), optional_input("saved_var")};
  def.attrs = {attr("epsilon", 1e-5f), attr("momentum", 0.9f)};
  def.infer = infer_batch_norm_v9;
  def.samples = {
      {"2-D image",
       {f32({2, 3, 4, 5}), f32({3}), f32({3}), f32({3}), f32({3})},
       {},
       {},
       {f32({2, 3, 4, 5})}},
      {"1-D input, one channel",
       {f16({6}), f16({1}), f16({1}), f16({1}), f16({1})},
       {},
       Attributes{{"epsilon", 0.001f}},
       {f16({6})}},
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
  };
  return def;
}

void register_normalization_ops(OpRegistry& registry) {
  registry.add(batch_norm_v9_def());
  registry.add(batch_norm_def());
  registry.add(layer_norm_def());
}

const OpRegistration kRegistration(&register_normalization_ops);

}  // namespace
}  // namespace ampc::ops
