// The launchers of the reduction-shaped CUDA kernels: ReduceSum/Mean/Max, GlobalAveragePool,
// ArgMax/ArgMin and CumSum (reduce_kernels.cu); Softmax, LogSoftmax, LayerNormalization and the
// classification losses (softmax_loss_kernels.cu). Plain data, as runtime/cuda/kernels.h: the
// host code (reduce.cc, normalization.cc, softmax_loss.cc) computes every layout at load.
//
// Numerics: elements are read into f32 (f16, bf16, f32) or i64 (integer sums), accumulated by a
// team of threads (a warp, a block, or the threads of a block's column) in a fixed order for a
// given launch shape, so results are deterministic; the order differs from the CPU kernels'
// sequential one, which the contract's reduction tolerance covers. Indices, NaN rules and integer
// results are exact.
#pragma once

#include <cstdint>

#include "ampc/host_device.h"
#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {

// ---- Reductions over a set of axes (reduce_kernels.cu) -------------------------------------

enum class ReduceOp : uint8_t { kSum, kMean, kMax };

// Where the reduced elements of each output element live, as the CPU's ReduceLayout: the input's
// dims with size-1 dims dropped and neighbours of the same kind (kept or reduced) merged. Output
// element o (row-major over kept_sizes) reads the input at
//   sum_d kept_index_d * kept_strides[d] + sum_d reduced_index_d * reduced_strides[d]
// for the `count` reduced multi-indices r (row-major over reduced_sizes, r = 0 .. count - 1).
struct ReduceLayout {
  int64_t outputs = 0;
  int64_t count = 1;  // reduced elements per output: ReduceMean's divisor
  int kept_rank = 0;
  int reduced_rank = 0;
  int64_t kept_sizes[kMaxRank] = {};
  int64_t kept_strides[kMaxRank] = {};
  int64_t reduced_sizes[kMaxRank] = {};
  int64_t reduced_strides[kMaxRank] = {};
};

// y[o] = op over the reduced elements of o (f32, f16, bf16, i64, i32). Empty reductions give 0
// (sum), NaN (float mean; 0 for integers) or the lowest value (max); ReduceMax propagates NaN.
cudaError_t launch_reduce(ReduceOp op, Elem type, const void* x, void* y,
                          const ReduceLayout& layout, cudaStream_t stream);

// indices[o] = the reduced index r of the largest (max) or smallest element of o: the first
// among equals, or the last with `select_last`; a NaN is the extreme and the first NaN wins.
cudaError_t launch_arg_reduce(bool max, bool select_last, Elem type, const void* x,
                              int64_t* indices, const ReduceLayout& layout, cudaStream_t stream);

// The lines along one axis: `outer` blocks of `length * inner` elements; line l = o * inner + i
// holds the elements o * length * inner + i + k * inner, k = 0 .. length - 1.
struct AxisLines {
  int64_t outer = 1, length = 1, inner = 1;
};

// Running sums along each line (from its end with `reverse`; without the element itself with
// `exclusive`), accumulated in f32 (floats) or i64 (integers) and rounded once per element.
// x and y must not share a buffer.
cudaError_t launch_cumsum(Elem type, const void* x, void* y, const AxisLines& lines, bool exclusive,
                          bool reverse, cudaStream_t stream);

// ---- Softmax, normalization, losses (softmax_loss_kernels.cu) ------------------------------

// Along each line: Softmax y = exp(x - m) / s, LogSoftmax (log_softmax) y = (x - m) - log(s), m the
// line's maximum (NaN skipped), s the sum of exp(x - m). y may be x's buffer.
cudaError_t launch_softmax(bool log_softmax, Elem type, const void* x, void* y,
                           const AxisLines& lines, cudaStream_t stream);

// LayerNormalization over `rows` contiguous rows of `n` elements. Scale and B (B may be null)
// have X's element type and broadcast to X: element i of X reads scale[i % scale_period] (B
// likewise) when the period is not 0, which it is not when the operand is X's trailing dims;
// otherwise the offsets of `layout` (operands X, Scale, B).
struct LayerNormParams {
  int64_t rows = 0, n = 0;
  float epsilon = 0;
  int64_t scale_period = 0, bias_period = 0;
  Layout<3> layout;
};

// Y, and when not null Mean and InvStdDev (one per row, of `stats_type`: f32, f16 or bf16).
// y may be x's buffer.
cudaError_t launch_layer_norm(Elem type, const void* x, const void* scale, const void* bias,
                              void* y, Elem stats_type, void* mean, void* inv_std_dev,
                              const LayerNormParams& params, cudaStream_t stream);

enum class LossReduction : uint8_t { kNone, kSum, kMean };

// The [N, C, D] view of class scores [N, C, d1, ..., dk]: sample s = n * spatial + d; labels
// (i64 or i32) are [N, d1, ..., dk] in sample order; weights (may be null) [C].
struct ClassLoss {
  int64_t batch = 0, classes = 1, spatial = 1;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;
  LossReduction reduction = LossReduction::kMean;

  AMPC_HD int64_t samples() const { return batch * spatial; }
};

// Scratch the loss launchers need: a loss and a weight per sample for sum and mean.
inline int64_t loss_workspace_bytes(const ClassLoss& loss) {
  return loss.reduction == LossReduction::kNone ? 0 : 2 * loss.samples() * 4;
}

// SoftmaxCrossEntropyLoss: `loss` (per sample, or one element reduced), and log_prob (C along
// axis 1, exactly LogSoftmax's formula) unless null. A label outside [0, C) that is not the
// ignore_index is recorded in `sink` (kLabelOutOfRange at its flat index).
cudaError_t launch_softmax_cross_entropy(Elem type, Elem label_type, const void* scores,
                                         const void* labels, const void* weights, void* loss,
                                         void* log_prob, void* workspace, const ClassLoss& shape,
                                         ErrorSink sink, cudaStream_t stream);

// NegativeLogLikelihoodLoss: -input[n, label, d] * weight[label] per sample, reduced.
cudaError_t launch_negative_log_likelihood(Elem type, Elem label_type, const void* input,
                                           const void* labels, const void* weights, void* loss,
                                           void* workspace, const ClassLoss& shape, ErrorSink sink,
                                           cudaStream_t stream);

}  // namespace ampc::runtime::cuda
