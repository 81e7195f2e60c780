// The launchers of the CUDA gradient kernels (gradient_kernels.cu): activation, Dropout,
// Softmax/LogSoftmax, classification-loss and LayerNormalization gradients. Plain data, as
// runtime/cuda/kernels.h: the host code (gradients.cc) computes every layout at load.
//
// Numerics: the per-element formulas are runtime/gradient_math.h's, which the CPU kernels run
// too, so element-wise gradients are bit-exact against the CPU (transcendentals within the
// contract's ulps). Row and column sums are taken in f32 by a team of threads in a fixed order
// for a launch shape (deterministic; no float atomics), within the contract's tolerance for
// reductions; LayerNormalization's dScale and dB sum each column sequentially in row order, as
// the CPU does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/kernels.h"
#include "runtime/cuda/reduce_kernels.h"

namespace ampc::runtime::cuda {

enum class ActivationGrad : uint8_t { kRelu, kLeakyRelu, kGeluErf, kGeluTanh };

// dx[i] = op(dy[i], saved[i]) over n elements (saved: ReluGrad's forward output, the others'
// forward input); `alpha` is LeakyRelu's. dx may be dy's buffer.
cudaError_t launch_activation_grad(ActivationGrad op, Elem type, const void* dy, const void* saved,
                                   void* dx, int64_t n, float alpha, cudaStream_t stream);

// DropoutGrad: in training, dx = dy * (mask ? 1/(1-ratio) : 0) with the factor computed as the
// Dropout kernel computes it; otherwise (training null or false, or ratio 0) dx = dy. ratio and
// training are read on the device as DropoutArgs says (seed and random_stream unused); a ratio
// outside [0, 1) in training is recorded in `sink`. dx may be dy's buffer.
cudaError_t launch_dropout_grad(Elem type, const void* dy, const bool* mask, void* dx, int64_t n,
                                const DropoutArgs& args, ErrorSink sink, cudaStream_t stream);

// SoftmaxGrad (dx = y * (dy - sum(dy * y))) or LogSoftmaxGrad (dx = dy - exp(y) * sum(dy)) along
// each line. dx may be dy's buffer.
cudaError_t launch_softmax_grad(bool log_softmax, Elem type, const void* dy, const void* y,
                                void* dx, const AxisLines& lines, cudaStream_t stream);

// Scratch of the loss gradients: the reduction's factor, dLoss / W for mean.
inline constexpr int64_t kLossGradWorkspaceBytes = 16;

// SoftmaxCrossEntropyLossGrad: dx [N, C, D] from dLoss (one element, or one per sample for
// reduction none), the log-probabilities (or the scores, with from_scores: recomputed as the
// forward kernel does), labels and optional weights [C]. Ignored samples get 0; a label out of
// range is recorded in `sink` and its sample gets 0. dx may be input's buffer.
cudaError_t launch_softmax_cross_entropy_grad(Elem type, Elem label_type, const void* dloss,
                                              const void* input, const void* labels,
                                              const void* weights, void* dx, void* workspace,
                                              const ClassLoss& shape, bool from_scores,
                                              ErrorSink sink, cudaStream_t stream);

// NegativeLogLikelihoodLossGrad: dx [N, C, D] is 0 but for -factor * weight at each kept
// sample's label.
cudaError_t launch_negative_log_likelihood_grad(Elem type, Elem label_type, const void* dloss,
                                                const void* labels, const void* weights, void* dx,
                                                void* workspace, const ClassLoss& shape,
                                                ErrorSink sink, cudaStream_t stream);

// LayerNormalizationGrad over `rows` contiguous rows of `n` elements. Column j of a row reads
// Scale at the offset `scale_columns` gives j (Scale broadcast to the normalized dims).
struct LayerNormGradParams {
  int64_t rows = 0, n = 0;
  float epsilon = 0;
  Layout<1> scale_columns;
};

// dScale and dBias sum a column over every row: the rows split into this many parts (parts of
// at least 32 rows), each part's sums in the workspace, then the parts summed in order; so the
// columns' sums run in parallel over the rows too, and each sum's order is fixed by the shape.
inline int64_t layer_norm_grad_row_parts(int64_t rows) {
  const int64_t parts = rows / 32;
  return parts < 1 ? 1 : (parts > 256 ? 256 : parts);
}

// Scratch: the mean and inverse standard deviation of every row, and each row part's column sums
// of dScale and dBias, in f32.
inline int64_t layer_norm_grad_workspace_bytes(int64_t rows, int64_t n) {
  return (2 * rows + 2 * layer_norm_grad_row_parts(rows) * n) * 4;
}

// dx, dscale and (when not null) dbias, all of X's type; the row statistics are read from
// mean and inv_std_dev (of `stats_type`) when mean is not null, else recomputed as the forward
// kernel computes them. dx may be dy's buffer.
cudaError_t launch_layer_norm_grad(Elem type, const void* dy, const void* x, const void* scale,
                                   Elem stats_type, const void* mean, const void* inv_std_dev,
                                   void* dx, void* dscale, void* dbias, void* workspace,
                                   const LayerNormGradParams& params, cudaStream_t stream);

// BatchNormalizationGrad over X [N, C, D...] (C = 1 for 1-D X): per channel, from dY, X and
// scale, mean and var [C] of `stats_type` (X's type, or f32 beside f16/bf16 X): in training the
// batch statistics recomputed as the forward computes them (the given mean and var otherwise);
// dscale = sum(dy * xhat) and dbias = sum(dy) (`stats_type`), and dx (X's type) =
// scale * inv_std * (dy - [training] (dbias / m + xhat * dscale / m)), m = N * D. One block per
// channel takes its sums. dx may be dy's buffer.
struct BatchNormGradParams {
  int64_t batch = 0, channels = 1, spatial = 1;
  float epsilon = 0;
  bool training = false;
};
// Scratch: mean, inv_std, dscale and dbias per channel, in f32.
inline int64_t batch_norm_grad_workspace_bytes(int64_t channels) { return 4 * channels * 4; }
cudaError_t launch_batch_norm_grad(Elem type, Elem stats_type, const void* dy, const void* x,
                                   const void* scale, const void* mean, const void* var, void* dx,
                                   void* dscale, void* dbias, void* workspace,
                                   const BatchNormGradParams& params, cudaStream_t stream);

// PadGrad: dx (X's shape `in`) from dy (the padded shape `out`), each dX element the sum of the
// dY elements the Pad read from it (pads `begin` per dim; mode constant, reflect or edge as
// runtime/cpu/pad.cc's source_index), added from 0 in dY's row-major order in f32 and rounded
// once: the CPU's bits.
enum class PadMode : uint8_t { kConstant, kReflect, kEdge, kWrap };
struct PadGradParams {
  int rank = 0;
  PadMode mode = PadMode::kConstant;
  int64_t in[kMaxRank] = {};
  int64_t out[kMaxRank] = {};
  int64_t begin[kMaxRank] = {};
};
cudaError_t launch_pad_grad(Elem type, const void* dy, void* dx, const PadGradParams& params,
                            cudaStream_t stream);

// GatherGrad: dx [outer, dim, inner] = the sum over j with indices[j] == r (negative ones
// wrapped) of dy [outer, j, inner], added from 0 in j order and rounded once, as the CPU adds it
// (so bit for bit): the indices are sorted stably with their positions (a radix sort), and one
// thread per output element adds its run of equal indices in order. An index outside
// [-dim, dim) is recorded in `sink` and adds nothing; nor does one that picks row `skip` (the
// padding_idx; -1: none). Indices are i64 or i32.
struct GatherGradShape {
  int64_t outer = 1, dim = 0, inner = 1, count = 0;
  int64_t skip = -1;
};
// Scratch: sort keys and positions, and the sort's own (asks the CUDA library, so it needs a
// device).
int64_t gather_grad_workspace_bytes(const GatherGradShape& shape);
cudaError_t launch_gather_grad(Elem type, Elem index_type, const void* dy, const void* indices,
                               void* dx, void* workspace, int64_t workspace_bytes,
                               const GatherGradShape& shape, ErrorSink sink, cudaStream_t stream);

}  // namespace ampc::runtime::cuda
