// The launchers of the CUDA kernels of ampc.Attention and ampc.AttentionGrad
// (attention_kernels.cu); plain data, as runtime/cuda/kernels.h. runtime/cuda/attention.cc
// computes the parameters at load.
//
// The work is split as the CPU kernels split it (runtime/cpu/attention.cc): one block per query
// row holds the row's S scores in shared memory (never the T x S matrix); the backward
// recomputes the probabilities from the saved LSE (numeric::lse_holds_log_sum), once per query
// row (dQ, and d_i = dY_i . Y_i into the workspace) and once per key (dKt, dV), so every output
// element is summed by one thread in a fixed order. Elements are read into f32, dots and sums
// accumulate in f32 and each result is rounded once; the block's maximum and sum are reduced as a
// tree, an order the CPU's sequential one differs from within the contract's reduction tolerance.
#pragma once

#include <cstdint>

#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {

// Keys (forward, dQ) or queries (dKt, dV) one block holds in shared memory: 47 KiB of f32 (the
// block's reductions take some of the 48 KiB a launch gets without opting in), two values per
// query for the backward's key pass.
inline constexpr int64_t kMaxAttentionKeys = 12032;
inline constexpr int64_t kMaxAttentionQueries = kMaxAttentionKeys / 2;

struct AttentionParams {
  // Q [batch.., T, D], Kt [batch.., D, S], V [batch.., S, Dv]; `batch` the batch dims' product.
  int64_t batch = 1, t = 0, s = 0, d = 0, dv = 0;
  float scale = 1;
  // A query row with no key (every score -inf) gives Y = 0 and no gradient, not NaN.
  bool safe = false;
  // The mask, when `has_mask`: bool (masks out where it differs from `keep`) or a float bias
  // (added), read at mask_batch_offset(b) + i * mask_row_stride + j * mask_col_stride, where
  // the offset of batch b sums its index along batch dim k times mask_batch_strides[k].
  bool has_mask = false;
  bool keep = true;
  Elem mask_type = Elem::kBool;
  int batch_rank = 0;
  int64_t batch_dims[kMaxRank] = {};
  int64_t mask_batch_strides[kMaxRank] = {};
  int64_t mask_row_stride = 0, mask_col_stride = 0;
};

// Y and LSE (f32, may be null) of ampc.Attention.
cudaError_t launch_attention(Elem type, const void* q, const void* kt, const void* v,
                             const void* mask, void* y, float* lse, const AttentionParams& params,
                             cudaStream_t stream);

// dQ, dKt and dV of ampc.AttentionGrad; `workspace` holds attention_grad_workspace_floats.
cudaError_t launch_attention_grad(Elem type, const void* dy, const void* q, const void* kt,
                                  const void* v, const void* y, const float* lse, const void* mask,
                                  void* dq, void* dkt, void* dv, float* workspace,
                                  const AttentionParams& params, cudaStream_t stream);
// The GEMM path (runtime/cuda/attention.cc): the scores of a chunk of batch entries as one f32
// matrix per entry, S = scale Q Kt and the products with it on cuBLASLt, the row-wise steps
// below between them. `rows` query rows of S ([rows, S], row-major, f32) from batch entry
// `first` on (mask offsets count from there). Elements are f32 throughout, each sum in f32.

// S's rows become probabilities in place (masked, exp(s - max) / sum); lse[r] (may be null)
// gets max + log(sum), as launch_attention computes them.
cudaError_t launch_attention_probs(float* scores, const void* mask, float* lse, int64_t first,
                                   int64_t rows, const AttentionParams& params,
                                   cudaStream_t stream);

// The backward's probabilities in place over S, from the forward's LSE of those rows (the max
// and log-sum recomputed where numeric::lse_holds_log_sum says it does not hold them), and
// delta[r] = dY_r . Y_r (dY and Y of `type`, [rows, Dv]).
cudaError_t launch_attention_grad_probs(Elem type, float* scores, const void* mask,
                                        const float* lse, const void* dy, const void* y,
                                        float* delta, int64_t first, int64_t rows,
                                        const AttentionParams& params, cudaStream_t stream);

// dS = P (dP - delta_row) in place over dP ([rows, s]), 0 where P is 0.
cudaError_t launch_attention_grad_scores(const float* probs, float* dprobs, const float* delta,
                                         int64_t rows, int64_t s, cudaStream_t stream);

// The cuDNN path (runtime/cuda/attention.cc): the mask as an additive bias of `type` (f16 or
// bf16) [bias_b, bias_h, T, S], its rows `pitch` elements apart (the S elements of each
// written, the rest untouched), for Q's batch dims read as [b, heads] (heads the last one): 0
// where a bool mask keeps a key and -inf where it does not, or the float mask rounded to `type`.
// bias_b is 1 or b, bias_h 1 or heads, as the mask varies along them.
cudaError_t launch_attention_bias(Elem type, const void* mask, void* bias, int64_t bias_b,
                                  int64_t bias_h, int64_t heads, int64_t pitch,
                                  const AttentionParams& params, cudaStream_t stream);

// Per query row: d_i = dY_i . Y_i and the max and log-sum the probabilities are recomputed with.
inline int64_t attention_grad_workspace_floats(const AttentionParams& params) {
  return 3 * params.batch * params.t;
}

}  // namespace ampc::runtime::cuda
