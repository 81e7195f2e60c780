// CUDA kernels of Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss:
// registration and the row layouts, read at load from the shapes and attributes exactly as
// runtime/cpu/softmax.cc and runtime/cpu/loss.cc read them (before opset 13, Softmax and
// LogSoftmax normalize the trailing dims from `axis` taken together).
//
// A label out of range is a data error: the kernels record it on the device (kLabelOutOfRange,
// at the label's flat index) instead of returning the CPU's Status.
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "runtime/cuda/class_loss.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/reduce_kernels.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Softmax, LogSoftmax -------------------------------------------------------------------

struct SoftmaxState : KernelState {
  AxisLines lines;
};

// The CPU's row_layout: one axis from opset 13, the input coerced to 2-D at `axis` before.
absl::StatusOr<std::unique_ptr<KernelState>> init_softmax(const KernelContext& ctx) {
  const Node& node = ctx.node;
  const Shape& shape = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t since_opset =
      node.def() != nullptr ? node.def()->since_opset : node.graph()->opset(node.domain());
  const bool coerce_to_2d = since_opset < 13;
  const AttrValue* axis_attr = node.find_attr("axis");
  const int64_t requested =
      axis_attr != nullptr ? std::get<int64_t>(*axis_attr) : (coerce_to_2d ? 1 : -1);
  const int64_t axis = requested < 0 ? requested + rank : requested;
  if (axis < 0 || axis > rank || (!coerce_to_2d && axis == rank)) {
    return absl::InvalidArgumentError(
        str_cat("axis ", requested, " is out of range for rank ", rank));
  }
  auto state = std::make_unique<SoftmaxState>();
  AxisLines& lines = state->lines;
  for (int64_t d = 0; d < axis; ++d) lines.outer *= shape[d];
  if (coerce_to_2d) {
    for (int64_t d = axis; d < rank; ++d) lines.length *= shape[d];
  } else {
    lines.length = shape[axis];
    for (int64_t d = axis + 1; d < rank; ++d) lines.inner *= shape[d];
  }
  return state;
}

template <bool kLog>
absl::Status softmax(const KernelContext& ctx) {
  const auto& state = static_cast<const SoftmaxState&>(*ctx.state);
  return launched(launch_softmax(kLog, elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                                 state.lines, stream_of(ctx)),
                  ctx);
}

// ---- SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss ------------------------------------

struct LossState : KernelState {
  ClassLoss shape;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_loss(const KernelContext& ctx) {
  auto state = std::make_unique<LossState>();
  AMPC_ASSIGN_OR_RETURN(state->shape, class_loss(ctx, ctx.input(0).shape(), 1));
  state->workspace_bytes = loss_workspace_bytes(state->shape);
  return state;
}

void* workspace_of(const KernelContext& ctx) {
  return ctx.workspace.empty() ? nullptr : ctx.workspace.data();
}

absl::Status softmax_cross_entropy(const KernelContext& ctx) {
  const auto& state = static_cast<const LossState&>(*ctx.state);
  return launched(launch_softmax_cross_entropy(
                      elem(ctx.input(0)), elem(ctx.input(1)), ctx.input(0).data, ctx.input(1).data,
                      ctx.has_input(2) ? ctx.input(2).data : nullptr, ctx.output(0).data,
                      ctx.has_output(1) ? ctx.output(1).data : nullptr, workspace_of(ctx),
                      state.shape, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

absl::Status negative_log_likelihood(const KernelContext& ctx) {
  const auto& state = static_cast<const LossState&>(*ctx.state);
  return launched(
      launch_negative_log_likelihood(
          elem(ctx.input(0)), elem(ctx.input(1)), ctx.input(0).data, ctx.input(1).data,
          ctx.has_input(2) ? ctx.input(2).data : nullptr, ctx.output(0).data, workspace_of(ctx),
          state.shape, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

// ---- Registration --------------------------------------------------------------------------

void add(KernelRegistry& r, std::string op, KernelFn fn, KernelInitFn init,
         int in_place_operand = -1) {
  KernelDef def = cuda_kernel_def(std::move(op), kCudaFloatTypes, fn, in_place_operand);
  def.init = init;
  r.add(std::move(def));
}

void register_cuda_softmax_loss_kernels(KernelRegistry& r) {
  add(r, "Softmax", &softmax<false>, &init_softmax, 0);
  add(r, "LogSoftmax", &softmax<true>, &init_softmax, 0);
  add(r, "SoftmaxCrossEntropyLoss", &softmax_cross_entropy, &init_loss);
  add(r, "NegativeLogLikelihoodLoss", &negative_log_likelihood, &init_loss);
}

static KernelRegistration kCudaSoftmaxLossKernels(&register_cuda_softmax_loss_kernels);

}  // namespace

absl::StatusOr<ClassLoss> class_loss(const KernelContext& ctx, const Shape& scores, int labels) {
  if (scores.size() < 2) {
    return absl::InvalidArgumentError(
        str_cat("scores ", shape_to_string(scores), " must be [N, C, ...]"));
  }
  const DType label_type = ctx.input(labels).dtype();
  if (label_type != DType::kI64 && label_type != DType::kI32) {
    return absl::InvalidArgumentError(
        str_cat("labels must be i64 or i32, got ", dtype_name(label_type)));
  }
  ClassLoss shape;
  shape.batch = scores[0];
  shape.classes = scores[1];
  for (size_t d = 2; d < scores.size(); ++d) shape.spatial *= scores[d];
  if (const AttrValue* ignored = ctx.node.find_attr("ignore_index")) {
    shape.has_ignore_index = true;
    shape.ignore_index = std::get<int64_t>(*ignored);
  }
  const std::string& reduction = ctx.node.string_attr("reduction");
  if (reduction == "none") {
    shape.reduction = LossReduction::kNone;
  } else if (reduction == "sum") {
    shape.reduction = LossReduction::kSum;
  } else if (reduction == "mean") {
    shape.reduction = LossReduction::kMean;
  } else {
    return absl::InvalidArgumentError(
        str_cat("reduction '", reduction, "' is not one of 'none', 'sum', 'mean'"));
  }
  return shape;
}

}  // namespace ampc::runtime::cuda
