// The CUDA kernels of ampc.Attention and ampc.AttentionGrad; see attention_kernels.h for the
// split of the work and the numerics. One block of kAttentionThreads per row (query or key), in
// a grid-stride loop; the row's scores (or the key pass's probabilities and dS) live in dynamic
// shared memory.
#include <limits>

#include "runtime/cuda/attention_kernels.h"
#include "runtime/cuda/elementwise.cuh"
#include "runtime/cuda/reduce.cuh"
#include "runtime/numeric.h"

namespace ampc::runtime::cuda {
namespace {

inline constexpr int kAttentionThreads = 256;

// The offset of batch b's mask (before the row and column strides).
__device__ int64_t mask_batch_offset(const AttentionParams& p, int64_t b) {
  int64_t offset = 0;
  for (int k = p.batch_rank - 1; k >= 0; --k) {
    offset += (b % p.batch_dims[k]) * p.mask_batch_strides[k];
    b /= p.batch_dims[k];
  }
  return offset;
}

// The score after the mask at `at`: -inf where a bool mask differs from `keep`, else plus the
// float bias.
__device__ float masked(const AttentionParams& p, const void* mask, int64_t at, float score) {
  switch (p.mask_type) {
    case Elem::kBool:
      return ((static_cast<const uint8_t*>(mask)[at] != 0) != p.keep)
                 ? -std::numeric_limits<float>::infinity()
                 : score;
    case Elem::kF32:
      return score + static_cast<const float*>(mask)[at];
    case Elem::kF16:
      return score + static_cast<float>(static_cast<const Float16*>(mask)[at]);
    case Elem::kBF16:
      return score + static_cast<float>(static_cast<const BFloat16*>(mask)[at]);
    default:
      return score;
  }
}

// The scaled, masked score of query row `row` (batch b, index i) and key j.
template <typename T>
__device__ float score_of(const AttentionParams& p, const T* q, const T* kt, const void* mask,
                          int64_t row, int64_t b, int64_t i, int64_t j, int64_t mask_base) {
  const T* q_row = q + row * p.d;
  const T* kt_b = kt + b * p.d * p.s;
  float dot = 0;
  for (int64_t x = 0; x < p.d; ++x) dot += load(q_row[x]) * load(kt_b[x * p.s + j]);
  float score = p.scale * dot;
  if (p.has_mask) {
    score = masked(p, mask, mask_base + i * p.mask_row_stride + j * p.mask_col_stride, score);
  }
  return score;
}

struct MaxOf {
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_kernel(const T* q, const T* kt, const T* v, const void* mask, T* y, float* lse,
                     AttentionParams p) {
  extern __shared__ float scores[];
  const BlockTeam team;
  for (int64_t row = blockIdx.x; row < p.batch * p.t; row += gridDim.x) {
    const int64_t b = row / p.t;
    const int64_t i = row % p.t;
    const int64_t mask_base = p.has_mask ? mask_batch_offset(p, b) : 0;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
      scores[j] = score_of(p, q, kt, mask, row, b, i, j, mask_base);
      max = MaxOf{}(max, scores[j]);
    }
    max = team.reduce(max, MaxOf{});
    float sum = 0;
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
      scores[j] = numeric::exp(scores[j] - max);
      sum += scores[j];
    }
    sum = team.reduce(sum, Plus{});                           // its barriers also publish `scores`
    const bool empty = p.safe && numeric::is_empty_row(max);  // the same for the whole block
    const T* v_b = v + b * p.s * p.dv;
    for (int64_t x = threadIdx.x; x < p.dv; x += blockDim.x) {
      float acc = 0;
      for (int64_t j = 0; j < p.s && !empty; ++j) acc += scores[j] * load(v_b[j * p.dv + x]);
      y[row * p.dv + x] = store<T>(empty ? 0.0f : acc / sum);
    }
    if (empty) sum = 1;  // LSE = -inf
    if (lse != nullptr && threadIdx.x == 0) lse[row] = max + numeric::log(sum);
    __syncthreads();  // `scores` is the next row's
  }
}

// The backward's per-row values in the workspace: d_i = dY_i . Y_i, and the max and log-sum
// P is recomputed with (numeric::lse_holds_log_sum), each batch * T floats.
struct GradRows {
  float* delta;
  float* max;
  float* log_sum;
};

// Per query row: d_i, the row's max and log-sum into `rows`, dS over the keys, dQ_i = scale
// sum_j dS_ij K_j.
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_grad_rows_kernel(const T* dy, const T* q, const T* kt, const T* v, const T* y,
                               const float* lse, const void* mask, T* dq, GradRows rows,
                               AttentionParams p) {
  extern __shared__ float ds[];
  const BlockTeam team;
  for (int64_t row = blockIdx.x; row < p.batch * p.t; row += gridDim.x) {
    const int64_t b = row / p.t;
    const int64_t i = row % p.t;
    const int64_t mask_base = p.has_mask ? mask_batch_offset(p, b) : 0;
    float max = lse[row], log_sum = 0;
    if (!numeric::lse_holds_log_sum(max)) {  // the same for the whole block
      max = -std::numeric_limits<float>::infinity();
      for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
        ds[j] = score_of(p, q, kt, mask, row, b, i, j, mask_base);
        max = MaxOf{}(max, ds[j]);
      }
      max = team.reduce(max, MaxOf{});
      float sum = 0;
      for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) sum += numeric::exp(ds[j] - max);
      log_sum = numeric::log(team.reduce(sum, Plus{}));
      __syncthreads();  // `ds` is rewritten below
    }
    const T* dy_row = dy + row * p.dv;
    float d = 0;
    for (int64_t x = threadIdx.x; x < p.dv; x += blockDim.x) {
      d += load(dy_row[x]) * load(y[row * p.dv + x]);
    }
    d = team.reduce(d, Plus{});
    const T* v_b = v + b * p.s * p.dv;
    const bool empty = p.safe && numeric::is_empty_row(max);  // no probability, no gradient
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
      const float prob =
          empty ? 0.0f
                : numeric::exp((score_of(p, q, kt, mask, row, b, i, j, mask_base) - max) - log_sum);
      float dp = 0;
      if (prob != 0) {
        for (int64_t x = 0; x < p.dv; ++x) dp += load(dy_row[x]) * load(v_b[j * p.dv + x]);
      }
      ds[j] = prob == 0 ? 0.0f : prob * (dp - d);
    }
    __syncthreads();
    const T* kt_b = kt + b * p.d * p.s;
    for (int64_t x = threadIdx.x; x < p.d; x += blockDim.x) {
      float acc = 0;
      for (int64_t j = 0; j < p.s; ++j) acc += ds[j] * load(kt_b[x * p.s + j]);
      dq[row * p.d + x] = store<T>(p.scale * acc);
    }
    if (threadIdx.x == 0) {
      rows.delta[row] = d;
      rows.max[row] = max;
      rows.log_sum[row] = log_sum;
    }
    __syncthreads();
  }
}

// Per key: dKt_:j = scale sum_i dS_ij Q_i and dV_j = sum_i P_ij dY_i.
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_grad_keys_kernel(const T* dy, const T* q, const T* kt, const T* v, GradRows rows,
                               const void* mask, T* dkt, T* dv, AttentionParams p) {
  extern __shared__ float shared[];
  float* probs = shared;
  float* ds = shared + p.t;
  for (int64_t key = blockIdx.x; key < p.batch * p.s; key += gridDim.x) {
    const int64_t b = key / p.s;
    const int64_t j = key % p.s;
    const int64_t mask_base = p.has_mask ? mask_batch_offset(p, b) : 0;
    const T* v_row = v + key * p.dv;
    for (int64_t i = threadIdx.x; i < p.t; i += blockDim.x) {
      const int64_t row = b * p.t + i;
      const float prob =
          p.safe && numeric::is_empty_row(rows.max[row])
              ? 0.0f
              : numeric::exp((score_of(p, q, kt, mask, row, b, i, j, mask_base) - rows.max[row]) -
                             rows.log_sum[row]);
      float dp = 0;
      if (prob != 0) {
        for (int64_t x = 0; x < p.dv; ++x) dp += load(dy[row * p.dv + x]) * load(v_row[x]);
      }
      probs[i] = prob;
      ds[i] = prob == 0 ? 0.0f : prob * (dp - rows.delta[row]);
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < p.dv; x += blockDim.x) {
      float acc = 0;
      for (int64_t i = 0; i < p.t; ++i) acc += probs[i] * load(dy[(b * p.t + i) * p.dv + x]);
      dv[key * p.dv + x] = store<T>(acc);
    }
    for (int64_t x = threadIdx.x; x < p.d; x += blockDim.x) {
      float acc = 0;
      for (int64_t i = 0; i < p.t; ++i) acc += ds[i] * load(q[(b * p.t + i) * p.d + x]);
      dkt[(b * p.d + x) * p.s + j] = store<T>(p.scale * acc);
    }
    __syncthreads();
  }
}

// ---- The GEMM path (attention_gemm_* in attention_kernels.h) --------------------------------

// Row `r` of S (from batch entry `first` on) masked in place, over the elements this thread
// takes; their maximum.
__device__ float masked_row(const AttentionParams& p, const void* mask, float* row, int64_t first,
                            int64_t r) {
  const int64_t i = r % p.t;
  const int64_t mask_base = p.has_mask ? mask_batch_offset(p, first + r / p.t) : 0;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
    float score = row[j];
    if (p.has_mask) {
      score = masked(p, mask, mask_base + i * p.mask_row_stride + j * p.mask_col_stride, score);
    }
    row[j] = score;
    max = MaxOf{}(max, score);
  }
  return max;
}

// Rows of S (f32, [rows, s], the scaled scores of `rows` query rows from batch entry `first`
// on) become probabilities in place: masked, less the row's max, exponentiated, divided by the
// row's sum; `lse` (may be null) gets max + log(sum), as attention_kernel computes them.
__global__ void __launch_bounds__(kAttentionThreads)
    attention_probs_kernel(float* scores, const void* mask, float* lse, int64_t first, int64_t rows,
                           AttentionParams p) {
  const BlockTeam team;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = scores + r * p.s;
    float max = masked_row(p, mask, row, first, r);
    max = team.reduce(max, MaxOf{});
    float sum = 0;
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
      const float e = numeric::exp(row[j] - max);
      row[j] = e;
      sum += e;
    }
    sum = team.reduce(sum, Plus{});
    const bool empty = p.safe && numeric::is_empty_row(max);  // the same for the whole block
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) row[j] = empty ? 0.0f : row[j] / sum;
    if (lse != nullptr && threadIdx.x == 0) lse[r] = max + numeric::log(empty ? 1.0f : sum);
  }
}

// The backward's probabilities, in place over S as attention_probs_kernel leaves them, from the
// saved LSE (recomputing the max and log-sum where numeric::lse_holds_log_sum says it does not
// hold them), and delta[r] = dY_r . Y_r.
template <typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_grad_probs_kernel(float* scores, const void* mask, const float* lse, const T* dy,
                                const T* y, float* delta, int64_t first, int64_t rows,
                                AttentionParams p) {
  const BlockTeam team;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = scores + r * p.s;
    float max = masked_row(p, mask, row, first, r);
    float log_sum = 0;
    if (numeric::lse_holds_log_sum(lse[r])) {  // the same for the whole block
      max = lse[r];
    } else {
      max = team.reduce(max, MaxOf{});
      float sum = 0;
      for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) sum += numeric::exp(row[j] - max);
      log_sum = numeric::log(team.reduce(sum, Plus{}));
    }
    const bool empty = p.safe && numeric::is_empty_row(max);  // no probability, no gradient
    for (int64_t j = threadIdx.x; j < p.s; j += blockDim.x) {
      row[j] = empty ? 0.0f : numeric::exp((row[j] - max) - log_sum);
    }
    float d = 0;
    for (int64_t x = threadIdx.x; x < p.dv; x += blockDim.x) {
      d += load(dy[r * p.dv + x]) * load(y[r * p.dv + x]);
    }
    d = team.reduce(d, Plus{});
    if (threadIdx.x == 0) delta[r] = d;
  }
}

// dS = P (dP - delta_row), in place over dP; 0 where P is (a masked key: no gradient, even
// from an inf in dP).
__global__ void attention_grad_scores_kernel(const float* probs, float* dprobs, const float* delta,
                                             int64_t n, int64_t s) {
  for (int64_t k = global_thread(); k < n; k += grid_threads()) {
    const float prob = probs[k];
    dprobs[k] = prob == 0 ? 0.0f : prob * (dprobs[k] - delta[k / s]);
  }
}

// The mask as cuDNN's additive bias [bias_b, bias_h, T, S] of T, its rows `pitch` elements
// apart: entry (bb, hh) is batch entry bb * heads + hh (each 0 along an extent of 1, which the
// mask does not vary over).
template <typename T>
__global__ void attention_bias_kernel(const void* mask, T* bias, int64_t n, int64_t bias_h,
                                      int64_t heads, int64_t pitch, AttentionParams p) {
  for (int64_t k = global_thread(); k < n; k += grid_threads()) {
    const int64_t j = k % p.s;
    const int64_t row = k / p.s;  // entry * T + i
    const int64_t i = row % p.t;
    const int64_t entry = row / p.t;
    const int64_t b = (entry / bias_h) * heads + entry % bias_h;
    bias[row * pitch + j] = store<T>(masked(
        p, mask, mask_batch_offset(p, b) + i * p.mask_row_stride + j * p.mask_col_stride, 0.0f));
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 * 8 ? 65535 * 8 : rows));
}

size_t floats(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }

}  // namespace

cudaError_t launch_attention(Elem type, const void* q, const void* kt, const void* v,
                             const void* mask, void* y, float* lse, const AttentionParams& params,
                             cudaStream_t stream) {
  if (params.batch * params.t == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attention_kernel<T>
        <<<row_blocks(params.batch * params.t), kAttentionThreads, floats(params.s), stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(kt), static_cast<const T*>(v), mask,
            static_cast<T*>(y), lse, params);
    return cudaGetLastError();
  });
}

cudaError_t launch_attention_grad(Elem type, const void* dy, const void* q, const void* kt,
                                  const void* v, const void* y, const float* lse, const void* mask,
                                  void* dq, void* dkt, void* dv, float* workspace,
                                  const AttentionParams& params, cudaStream_t stream) {
  if (params.batch * params.t == 0 || params.batch * params.s == 0) return cudaGetLastError();
  const int64_t n = params.batch * params.t;
  const GradRows per_row{workspace, workspace + n, workspace + 2 * n};
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy_t = static_cast<const T*>(dy);
    const T* q_t = static_cast<const T*>(q);
    const T* kt_t = static_cast<const T*>(kt);
    const T* v_t = static_cast<const T*>(v);
    attention_grad_rows_kernel<T>
        <<<row_blocks(params.batch * params.t), kAttentionThreads, floats(params.s), stream>>>(
            dy_t, q_t, kt_t, v_t, static_cast<const T*>(y), lse, mask, static_cast<T*>(dq), per_row,
            params);
    const cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) return launched;
    attention_grad_keys_kernel<T>
        <<<row_blocks(params.batch * params.s), kAttentionThreads, floats(2 * params.t), stream>>>(
            dy_t, q_t, kt_t, v_t, per_row, mask, static_cast<T*>(dkt), static_cast<T*>(dv), params);
    return cudaGetLastError();
  });
}

cudaError_t launch_attention_probs(float* scores, const void* mask, float* lse, int64_t first,
                                   int64_t rows, const AttentionParams& params,
                                   cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  attention_probs_kernel<<<row_blocks(rows), kAttentionThreads, 0, stream>>>(scores, mask, lse,
                                                                             first, rows, params);
  return cudaGetLastError();
}

cudaError_t launch_attention_grad_probs(Elem type, float* scores, const void* mask,
                                        const float* lse, const void* dy, const void* y,
                                        float* delta, int64_t first, int64_t rows,
                                        const AttentionParams& params, cudaStream_t stream) {
  if (rows == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attention_grad_probs_kernel<T><<<row_blocks(rows), kAttentionThreads, 0, stream>>>(
        scores, mask, lse, static_cast<const T*>(dy), static_cast<const T*>(y), delta, first, rows,
        params);
    return cudaGetLastError();
  });
}

cudaError_t launch_attention_grad_scores(const float* probs, float* dprobs, const float* delta,
                                         int64_t rows, int64_t s, cudaStream_t stream) {
  if (rows * s == 0) return cudaGetLastError();
  attention_grad_scores_kernel<<<blocks_for(rows * s), kThreads, 0, stream>>>(probs, dprobs, delta,
                                                                              rows * s, s);
  return cudaGetLastError();
}

cudaError_t launch_attention_bias(Elem type, const void* mask, void* bias, int64_t bias_b,
                                  int64_t bias_h, int64_t heads, int64_t pitch,
                                  const AttentionParams& params, cudaStream_t stream) {
  const int64_t n = bias_b * bias_h * params.t * params.s;
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    attention_bias_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(mask, static_cast<T*>(bias), n,
                                                                     bias_h, heads, pitch, params);
    return cudaGetLastError();
  });
}

}  // namespace ampc::runtime::cuda
