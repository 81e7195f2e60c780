// CUDA kernel of LayerNormalization: registration and the row layout and parameter broadcast,
// read at load as runtime/cpu/normalization.cc reads them. Scale and B have X's element type (the
// OpDef requires it); Mean and InvStdDev are stored in their own type (stash_type, f32 or bf16),
// rounded once from f32.
#include <algorithm>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/layout.h"
#include "runtime/cuda/reduce_kernels.h"

namespace ampc::runtime::cuda {
namespace {

struct LayerNormState : KernelState {
  LayerNormParams params;
  Elem stats_type = Elem::kF32;
};

// The period of `operand` along X's flat index when it is X's trailing dims after leading 1s
// (it repeats every num_elements(operand) elements, as the CPU's BroadcastIndex finds), else 0.
int64_t broadcast_period(const Shape& x, const Shape& operand) {
  size_t first = 0;
  while (first < operand.size() && operand[first] == 1) ++first;
  const size_t trailing = operand.size() - first;
  if (trailing > x.size()) return 0;
  if (!std::equal(operand.begin() + first, operand.end(), x.end() - trailing, x.end())) return 0;
  return num_elements(operand);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_layer_norm(const KernelContext& ctx) {
  const Shape& x = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t requested = ctx.node.int_attr("axis");
  const int64_t axis = requested < 0 ? requested + rank : requested;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(
        str_cat("axis ", requested, " is out of range for rank ", rank));
  }
  auto state = std::make_unique<LayerNormState>();
  LayerNormParams& p = state->params;
  p.rows = 1;
  p.n = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? p.rows : p.n) *= x[d];
  p.epsilon = ctx.node.float_attr("epsilon");

  const bool has_bias = ctx.has_input(2);
  const Shape& scale = ctx.input(1).shape();
  const Shape& bias = has_bias ? ctx.input(2).shape() : scale;
  p.scale_period = broadcast_period(x, scale);
  p.bias_period = has_bias ? broadcast_period(x, bias) : 1;
  if (p.scale_period == 0 || p.bias_period == 0) {
    AMPC_ASSIGN_OR_RETURN(p.layout, broadcast_layout<3>(x, {&x, &scale, &bias}));
  }

  for (int k = 1; k <= 2; ++k) {
    if (!ctx.has_output(k)) continue;
    const DType stats = ctx.output(k).dtype();
    if (stats != DType::kF32 && stats != DType::kF16 && stats != DType::kBF16) {
      return absl::UnimplementedError(str_cat("no cuda LayerNormalization kernel stores ",
                                              k == 1 ? "Mean" : "InvStdDev", " as ",
                                              dtype_name(stats), " (f32, f16 or bf16)"));
    }
    state->stats_type = *elem_of(stats);
  }
  if (ctx.has_output(1) && ctx.has_output(2) && ctx.output(1).dtype() != ctx.output(2).dtype()) {
    return absl::UnimplementedError(
        str_cat("the cuda LayerNormalization kernel stores Mean and InvStdDev in one type, got ",
                dtype_name(ctx.output(1).dtype()), " and ", dtype_name(ctx.output(2).dtype())));
  }
  return state;
}

absl::Status layer_norm(const KernelContext& ctx) {
  const auto& state = static_cast<const LayerNormState&>(*ctx.state);
  return cuda_status(
      launch_layer_norm(*elem_of(ctx.input(0).dtype()), ctx.input(0).data, ctx.input(1).data,
                        ctx.has_input(2) ? ctx.input(2).data : nullptr, ctx.output(0).data,
                        state.stats_type, ctx.has_output(1) ? ctx.output(1).data : nullptr,
                        ctx.has_output(2) ? ctx.output(2).data : nullptr, state.params,
                        stream_of(ctx)),
      "launching the LayerNormalization kernel");
}

void register_cuda_normalization_kernels(KernelRegistry& r) {
  KernelDef def = cuda_kernel_def("LayerNormalization", kCudaFloatTypes, &layer_norm, 0);
  def.init = &init_layer_norm;
  r.add(std::move(def));
}

static KernelRegistration kCudaNormalizationKernels(&register_cuda_normalization_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
