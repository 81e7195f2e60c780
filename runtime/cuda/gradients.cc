// CUDA kernels of the ampc-domain gradient ops of the backward pass: ReluGrad, LeakyReluGrad,
// GeluGrad, DropoutGrad, SoftmaxGrad, LogSoftmaxGrad, SoftmaxCrossEntropyLossGrad,
// NegativeLogLikelihoodLossGrad, LayerNormalizationGrad, BatchNormalizationGrad, PadGrad and
// GatherGrad.
// Registration and the layouts, read at load from the shapes and attributes exactly as the CPU
// kernels read them (runtime/cpu/activation_grad.cc, shape_grad.cc, softmax_loss_grad.cc,
// normalization_grad.cc). The kernels: gradient_kernels.cu. A label out of range is a data error
// recorded on the device.
#include <limits>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "runtime/cuda/class_loss.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/gradient_kernels.h"
#include "runtime/cuda/layout.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Activations, Dropout ------------------------------------------------------------------

template <ActivationGrad kOp>
absl::Status activation_grad(const KernelContext& ctx) {
  const float alpha = kOp == ActivationGrad::kLeakyRelu ? ctx.node.float_attr("alpha") : 0.0f;
  return launched(launch_activation_grad(kOp, elem(ctx.input(0)), ctx.input(0).data,
                                         ctx.input(1).data, ctx.output(0).data,
                                         ctx.output(0).num_elements(), alpha, stream_of(ctx)),
                  ctx);
}

absl::Status gelu_grad(const KernelContext& ctx) {
  const std::string& approximate = ctx.node.string_attr("approximate");
  if (approximate == "none") return activation_grad<ActivationGrad::kGeluErf>(ctx);
  if (approximate == "tanh") return activation_grad<ActivationGrad::kGeluTanh>(ctx);
  return absl::InvalidArgumentError(
      str_cat("GeluGrad approximate=\"", approximate, "\": expected \"none\" or \"tanh\""));
}

// Operands: dY, mask, ratio (optional, else the `ratio` attribute), training_mode (optional,
// absent means false), read on the device as the Dropout kernel reads them.
absl::Status dropout_grad(const KernelContext& ctx) {
  DropoutArgs args;
  args.default_ratio = ctx.node.float_attr("ratio");
  if (ctx.has_input(2)) {
    args.ratio = ctx.input(2).data;
    args.ratio_type = elem(ctx.input(2));
  }
  if (ctx.has_input(3)) args.training = static_cast<const bool*>(ctx.input(3).data);
  return launched(launch_dropout_grad(elem(ctx.input(0)), ctx.input(0).data,
                                      static_cast<const bool*>(ctx.input(1).data),
                                      ctx.output(0).data, ctx.output(0).num_elements(), args,
                                      ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

// ---- SoftmaxGrad, LogSoftmaxGrad -----------------------------------------------------------

struct LinesState : KernelState {
  AxisLines lines;
};

// One axis (`axis`, negative from the end), as the CPU kernel reads it.
absl::StatusOr<std::unique_ptr<KernelState>> init_softmax_grad(const KernelContext& ctx) {
  const Shape& shape = ctx.input(1).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t requested = ctx.node.int_attr("axis");
  const int64_t axis = requested < 0 ? requested + rank : requested;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        str_cat("axis ", requested, " is out of range for rank ", rank));
  }
  auto state = std::make_unique<LinesState>();
  for (int64_t d = 0; d < axis; ++d) state->lines.outer *= shape[d];
  state->lines.length = shape[axis];
  for (int64_t d = axis + 1; d < rank; ++d) state->lines.inner *= shape[d];
  return state;
}

template <bool kLog>
absl::Status softmax_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const LinesState&>(*ctx.state);
  return launched(
      launch_softmax_grad(kLog, elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data,
                          ctx.output(0).data, state.lines, stream_of(ctx)),
      ctx);
}

// ---- Loss gradients ------------------------------------------------------------------------

struct LossGradState : KernelState {
  ClassLoss shape;
};

// The loss's [N, C, D] view from the gradient's shape (the scores'), with labels at operand
// `labels`.
absl::StatusOr<std::unique_ptr<KernelState>> init_loss_grad(const KernelContext& ctx, int labels) {
  auto state = std::make_unique<LossGradState>();
  AMPC_ASSIGN_OR_RETURN(state->shape, class_loss(ctx, ctx.output(0).shape(), labels));
  state->workspace_bytes = kLossGradWorkspaceBytes;
  return state;
}

absl::Status softmax_cross_entropy_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const LossGradState&>(*ctx.state);
  const AttrValue* from_scores = ctx.node.find_attr("from_scores");
  return launched(launch_softmax_cross_entropy_grad(
                      elem(ctx.input(1)), elem(ctx.input(2)), ctx.input(0).data, ctx.input(1).data,
                      ctx.input(2).data, ctx.has_input(3) ? ctx.input(3).data : nullptr,
                      ctx.output(0).data, ctx.workspace.data(), state.shape,
                      from_scores != nullptr && std::get<int64_t>(*from_scores) != 0,
                      ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

absl::Status negative_log_likelihood_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const LossGradState&>(*ctx.state);
  return launched(
      launch_negative_log_likelihood_grad(
          elem(ctx.output(0)), elem(ctx.input(1)), ctx.input(0).data, ctx.input(1).data,
          ctx.has_input(2) ? ctx.input(2).data : nullptr, ctx.output(0).data, ctx.workspace.data(),
          state.shape, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

// ---- LayerNormalizationGrad ----------------------------------------------------------------

struct LayerNormGradState : KernelState {
  LayerNormGradParams params;
};

// Operands: dY, X, Scale, and optionally the forward's Mean and InvStdDev.
absl::StatusOr<std::unique_ptr<KernelState>> init_layer_norm_grad(const KernelContext& ctx) {
  const Shape& x = ctx.input(1).shape();
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t requested = ctx.node.int_attr("axis");
  const int64_t axis = requested < 0 ? requested + rank : requested;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        str_cat("axis ", requested, " is out of range for rank ", rank));
  }
  auto state = std::make_unique<LayerNormGradState>();
  LayerNormGradParams& p = state->params;
  p.rows = 1;
  p.n = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? p.rows : p.n) *= x[d];
  p.epsilon = ctx.node.float_attr("epsilon");
  // Scale broadcast to the normalized dims, as one offset per column.
  const Shape normalized(x.begin() + axis, x.end());
  const Shape& scale = ctx.input(2).shape();
  if (scale.size() > normalized.size()) {
    return absl::InvalidArgumentError(str_cat("Scale ", shape_to_string(scale),
                                              " has more dims than the normalized ",
                                              shape_to_string(normalized)));
  }
  AMPC_ASSIGN_OR_RETURN(p.scale_columns, broadcast_layout<1>(normalized, {&scale}));
  if (ctx.has_input(3) != ctx.has_input(4)) {
    return absl::InvalidArgumentError("Mean and InvStdDev are given together or not at all");
  }
  for (int k = 3; k <= 4 && ctx.has_input(k); ++k) {
    const DType stats = ctx.input(k).dtype();
    if (stats != DType::kF32 && stats != DType::kF16 && stats != DType::kBF16) {
      return absl::UnimplementedError(str_cat("no cuda LayerNormalizationGrad kernel reads ",
                                              dtype_name(stats), " statistics"));
    }
  }
  state->workspace_bytes = layer_norm_grad_workspace_bytes(p.rows, p.n);
  return state;
}

absl::Status layer_norm_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const LayerNormGradState&>(*ctx.state);
  const bool saved = ctx.has_input(3);
  return launched(launch_layer_norm_grad(
                      elem(ctx.input(1)), ctx.input(0).data, ctx.input(1).data, ctx.input(2).data,
                      saved ? elem(ctx.input(3)) : Elem::kF32, saved ? ctx.input(3).data : nullptr,
                      saved ? ctx.input(4).data : nullptr, ctx.output(0).data, ctx.output(1).data,
                      ctx.has_output(2) ? ctx.output(2).data : nullptr, ctx.workspace.data(),
                      state.params, stream_of(ctx)),
                  ctx);
}

// ---- PadGrad -------------------------------------------------------------------------------

struct PadGradState : KernelState {
  PadGradParams params;
};

// Operands: dY, X (for its shape), pads [begin..., end...] (an initializer, read at load).
absl::StatusOr<std::unique_ptr<KernelState>> init_pad_grad(const KernelContext& ctx) {
  const Shape& x = ctx.input(1).shape();
  const Shape& dy = ctx.input(0).shape();
  const int rank = static_cast<int>(x.size());
  if (rank > kMaxRank) {
    return absl::UnimplementedError(
        str_cat("the cuda PadGrad kernel handles rank ", kMaxRank, " or less, got rank ", rank));
  }
  AMPC_ASSIGN_OR_RETURN(const Tensor* pads, constant_operand(ctx, 2, "pads"));
  if (pads->num_elements() != 2 * rank) {
    return absl::InvalidArgumentError(str_cat("pads has ", pads->num_elements(),
                                              " elements; X of rank ", rank, " needs ", 2 * rank));
  }
  auto state = std::make_unique<PadGradState>();
  PadGradParams& p = state->params;
  p.rank = rank;
  const std::string& mode = ctx.node.string_attr("mode");
  if (mode == "reflect") {
    p.mode = PadMode::kReflect;
  } else if (mode == "edge") {
    p.mode = PadMode::kEdge;
  } else if (mode == "wrap") {
    p.mode = PadMode::kWrap;
  } else if (mode != "constant") {
    return absl::InvalidArgumentError(
        str_cat("mode \"", mode, "\" is not supported (constant, reflect, edge, wrap)"));
  }
  for (int d = 0; d < rank; ++d) {
    p.in[d] = x[d];
    p.out[d] = dy[d];
    p.begin[d] = pads->element_as_i64(d);
  }
  return state;
}

absl::Status pad_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const PadGradState&>(*ctx.state);
  return launched(launch_pad_grad(elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                                  state.params, stream_of(ctx)),
                  ctx);
}

// ---- BatchNormalizationGrad ----------------------------------------------------------------

struct BatchNormGradState : KernelState {
  BatchNormGradParams params;
};

// Operands: dY, X, scale, mean, var (scale, mean and var [C], of one float type).
absl::StatusOr<std::unique_ptr<KernelState>> init_batch_norm_grad(const KernelContext& ctx) {
  const Shape& x = ctx.input(1).shape();
  if (x.empty()) return absl::InvalidArgumentError("X must have at least one dim");
  auto state = std::make_unique<BatchNormGradState>();
  BatchNormGradParams& p = state->params;
  p.batch = x[0];
  p.channels = x.size() >= 2 ? x[1] : 1;
  for (size_t d = 2; d < x.size(); ++d) p.spatial *= x[d];
  const AttrValue* training = ctx.node.find_attr("training_mode");
  p.training = training != nullptr && std::get<int64_t>(*training) != 0;
  if (const AttrValue* all_ranks = ctx.node.find_attr("all_ranks");
      all_ranks != nullptr && std::get<int64_t>(*all_ranks) != 0) {
    return absl::UnimplementedError(
        "batch statistics over every rank (all_ranks=1, data-parallel SyncBatchNormalization) "
        "are CPU-only so far; train with --local-batch-norm on CUDA");
  }
  p.epsilon = ctx.node.float_attr("epsilon");
  for (int k = 3; k <= 4; ++k) {
    if (ctx.input(k).dtype() != ctx.input(2).dtype()) {
      return absl::InvalidArgumentError("scale, mean and var must have one element type");
    }
  }
  state->workspace_bytes = batch_norm_grad_workspace_bytes(p.channels);
  return state;
}

absl::Status batch_norm_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const BatchNormGradState&>(*ctx.state);
  return launched(launch_batch_norm_grad(elem(ctx.input(1)), elem(ctx.input(2)), ctx.input(0).data,
                                         ctx.input(1).data, ctx.input(2).data, ctx.input(3).data,
                                         ctx.input(4).data, ctx.output(0).data, ctx.output(1).data,
                                         ctx.output(2).data, ctx.workspace.data(), state.params,
                                         stream_of(ctx)),
                  ctx);
}

// ---- GatherGrad ----------------------------------------------------------------------------

struct GatherGradState : KernelState {
  GatherGradShape shape;
};

// Operands: dY, indices; the output has the gathered data's shape, `axis` the gathered axis.
absl::StatusOr<std::unique_ptr<KernelState>> init_gather_grad(const KernelContext& ctx) {
  const Shape& data = ctx.output(0).shape();
  const int64_t rank = static_cast<int64_t>(data.size());
  const int64_t requested = ctx.node.int_attr("axis");
  const int64_t axis = requested < 0 ? requested + rank : requested;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        str_cat("axis ", requested, " is out of range for rank ", rank));
  }
  const DType index_type = ctx.input(1).dtype();
  if (index_type != DType::kI64 && index_type != DType::kI32) {
    return absl::InvalidArgumentError(
        str_cat("indices must be i64 or i32, got ", dtype_name(index_type)));
  }
  auto state = std::make_unique<GatherGradState>();
  GatherGradShape& shape = state->shape;
  for (int64_t d = 0; d < axis; ++d) shape.outer *= data[d];
  shape.dim = data[axis];
  for (int64_t d = axis + 1; d < rank; ++d) shape.inner *= data[d];
  shape.count = ctx.input(1).num_elements();
  if (const AttrValue* padding = ctx.node.find_attr("padding_idx")) {
    shape.skip = std::get<int64_t>(*padding);
  }
  if (shape.count > std::numeric_limits<int32_t>::max()) {
    return absl::UnimplementedError(
        str_cat(shape.count, " indices: the cuda GatherGrad kernel takes at most 2^31 - 1"));
  }
  state->workspace_bytes = gather_grad_workspace_bytes(shape);
  return state;
}

absl::Status gather_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const GatherGradState&>(*ctx.state);
  return launched(launch_gather_grad(elem(ctx.output(0)), elem(ctx.input(1)), ctx.input(0).data,
                                     ctx.input(1).data, ctx.output(0).data, ctx.workspace.data(),
                                     static_cast<int64_t>(ctx.workspace.size()), state.shape,
                                     ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

// ---- Registration --------------------------------------------------------------------------

void add(KernelRegistry& r, std::string op, KernelFn fn, KernelInitFn init = nullptr,
         int in_place_operand = -1) {
  r.add(cuda_ampc_kernel_def(std::move(op), kCudaFloatTypes, fn, init, in_place_operand));
}

void register_cuda_gradient_kernels(KernelRegistry& r) {
  // In place where the CPU kernels may be: dX over dY (over log_prob for the cross entropy).
  add(r, "ReluGrad", &activation_grad<ActivationGrad::kRelu>, nullptr, 0);
  add(r, "LeakyReluGrad", &activation_grad<ActivationGrad::kLeakyRelu>, nullptr, 0);
  add(r, "GeluGrad", &gelu_grad, nullptr, 0);
  add(r, "DropoutGrad", &dropout_grad, nullptr, 0);
  add(r, "SoftmaxGrad", &softmax_grad<false>, &init_softmax_grad, 0);
  add(r, "LogSoftmaxGrad", &softmax_grad<true>, &init_softmax_grad, 0);
  add(
      r, "SoftmaxCrossEntropyLossGrad", &softmax_cross_entropy_grad,
      [](const KernelContext& ctx) { return init_loss_grad(ctx, 2); }, 1);
  add(r, "NegativeLogLikelihoodLossGrad", &negative_log_likelihood_grad,
      [](const KernelContext& ctx) { return init_loss_grad(ctx, 1); });
  add(r, "LayerNormalizationGrad", &layer_norm_grad, &init_layer_norm_grad, 0);
  add(r, "GatherGrad", &gather_grad, &init_gather_grad);
  add(r, "PadGrad", &pad_grad, &init_pad_grad);
  add(r, "BatchNormalizationGrad", &batch_norm_grad, &init_batch_norm_grad, 0);
}

static KernelRegistration kCudaGradientKernels(&register_cuda_gradient_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
