// CUDA kernels of ampc.Attention and ampc.AttentionGrad (ops/attention.cc): the parameters,
// read at load from the shapes and attributes as runtime/cpu/attention.cc reads them. The
// kernels: attention_kernels.cu.
#include "compiler/strings.h"
#include "runtime/cuda/attention_kernels.h"
#include "runtime/cuda/cuda_util.h"

namespace ampc::runtime::cuda {
namespace {

struct AttentionState : KernelState {
  AttentionParams params;
};

// Q, Kt and V are operands `first` .. `first + 2`; the mask is operand `mask`.
absl::StatusOr<std::unique_ptr<KernelState>> init_params(const KernelContext& ctx, int first,
                                                         int mask) {
  const Shape& q = ctx.input(first).shape();
  const Shape& v = ctx.input(first + 2).shape();
  const size_t rank = q.size();
  if (rank < 2 || rank - 2 > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat(
        "Q ", shape_to_string(q), ": the CUDA kernel takes at most ", kMaxRank, " batch dims"));
  }
  auto state = std::make_unique<AttentionState>();
  AttentionParams& p = state->params;
  p.batch_rank = static_cast<int>(rank - 2);
  for (size_t k = 0; k + 2 < rank; ++k) {
    p.batch_dims[k] = q[k];
    p.batch *= q[k];
  }
  p.t = q[rank - 2];
  p.d = q[rank - 1];
  p.s = v[rank - 2];
  p.dv = v[rank - 1];
  p.scale = ctx.node.float_attr("scale");
  p.safe = ctx.node.int_attr("safe") != 0;
  if (p.s > kMaxAttentionKeys || p.t > kMaxAttentionQueries) {
    return absl::UnimplementedError(str_cat("attention over ", p.t, " queries and ", p.s,
                                            " keys: the CUDA kernels hold at most ",
                                            kMaxAttentionKeys, " keys and ", kMaxAttentionQueries,
                                            " queries per row in shared memory"));
  }
  if (ctx.has_input(mask)) {
    const TensorArg& m = ctx.input(mask);
    if (m.dtype() != DType::kBool && m.dtype() != DType::kF32 && m.dtype() != DType::kF16 &&
        m.dtype() != DType::kBF16) {
      return absl::UnimplementedError(str_cat("a ", dtype_name(m.dtype()),
                                              " mask: the CUDA kernels read bool or f32/f16/bf16"));
    }
    p.has_mask = true;
    p.mask_type = elem(m);
    p.keep = ctx.node.int_attr("mask_keep") != 0;
    // The mask's strides over [batch.., T, S], 0 along the dims it broadcasts.
    const Shape& shape = m.shape();
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      const int64_t extent = shape[shape.size() - 1 - k];
      if (extent != 1) strides[rank - 1 - k] = stride;
      stride *= extent;
    }
    for (size_t k = 0; k + 2 < rank; ++k) p.mask_batch_strides[k] = strides[k];
    p.mask_row_stride = strides[rank - 2];
    p.mask_col_stride = strides[rank - 1];
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_attention(const KernelContext& ctx) {
  return init_params(ctx, 0, 3);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_attention_grad(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<KernelState> state, init_params(ctx, 1, 6));
  const AttentionParams& p = static_cast<const AttentionState&>(*state).params;
  state->workspace_bytes = attention_grad_workspace_floats(p) * static_cast<int64_t>(sizeof(float));
  return state;
}

const void* mask_of(const KernelContext& ctx, int index) {
  return ctx.has_input(index) ? ctx.input(index).data : nullptr;
}

absl::Status attention(const KernelContext& ctx) {
  const auto& state = static_cast<const AttentionState&>(*ctx.state);
  float* lse = ctx.has_output(1) ? static_cast<float*>(ctx.output(1).data) : nullptr;
  return launched(
      launch_attention(elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data, ctx.input(2).data,
                       mask_of(ctx, 3), ctx.output(0).data, lse, state.params, stream_of(ctx)),
      ctx);
}

absl::Status attention_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const AttentionState&>(*ctx.state);
  return launched(
      launch_attention_grad(
          elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data, ctx.input(2).data,
          ctx.input(3).data, ctx.input(4).data, static_cast<const float*>(ctx.input(5).data),
          mask_of(ctx, 6), ctx.output(0).data, ctx.output(1).data, ctx.output(2).data,
          reinterpret_cast<float*>(ctx.workspace.data()), state.params, stream_of(ctx)),
      ctx);
}

void register_cuda_attention_kernels(KernelRegistry& r) {
  r.add(cuda_ampc_kernel_def("Attention", kCudaFloatTypes, &attention, &init_attention));
  r.add(cuda_ampc_kernel_def("AttentionGrad", kCudaFloatTypes, &attention_grad,
                             &init_attention_grad));
}

static KernelRegistration kRegistration(&register_cuda_attention_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
