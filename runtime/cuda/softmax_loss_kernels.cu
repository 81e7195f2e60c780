// The row-normalizing kernels: Softmax and LogSoftmax, LayerNormalization, and the
// classification losses (SoftmaxCrossEntropyLoss is LogSoftmax along C with the label's entry
// picked; NegativeLogLikelihoodLoss picks the label's entry directly).
//
// Each row (line) is owned by one team (reduce.cuh): the team finds the maximum, then the sum of
// exp(x - max) (or the mean and the centred square sum), in f32, then every thread writes its
// own elements, each rounded once. A row is read completely before it is written, so outputs may
// share their input's buffer.
//
// The losses are deterministic: per-sample losses and weights go to the workspace, and one block
// adds them in a fixed order (no float atomics), dividing once for "mean".
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "runtime/cuda/reduce.cuh"
#include "runtime/numeric.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Softmax and LogSoftmax (and the log-probabilities of the cross entropy) ----------------

struct RowStats {
  float max, sum;
};

// The row's maximum (NaN skipped, as std::max does) and the sum of exp(x - max), on every thread
// of the team; `valid` is false for a thread past the last row.
template <typename Team, typename T>
__device__ RowStats row_stats(const Team& team, const T* row, int64_t length, int64_t stride,
                              bool valid) {
  float max = -std::numeric_limits<float>::infinity();
  if (valid) {
    for (int64_t k = team.rank(); k < length; k += team.size()) {
      max = MaxSkipNan{}(max, load(row[k * stride]));
    }
  }
  max = team.reduce(max, MaxSkipNan{});
  float sum = 0;
  if (valid) {
    for (int64_t k = team.rank(); k < length; k += team.size()) {
      sum += numeric::exp(load(row[k * stride]) - max);
    }
  }
  return {max, team.reduce(sum, Plus{})};
}

template <typename Team, typename T, bool kLog>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_kernel(const T* x, T* y, AxisLines lines) {
  const Team team;
  const int64_t count = lines.outer * lines.inner;
  for (int64_t base = team.first(); base < count; base += team.stride()) {
    const int64_t line = base + team.offset();
    const bool valid = line < count;
    const int64_t first = valid ? line_first(lines, line) : 0;
    const RowStats stats = row_stats(team, x + first, lines.length, lines.inner, valid);
    if (!valid) continue;
    const float log_sum = kLog ? numeric::log(stats.sum) : 0.0f;
    for (int64_t k = team.rank(); k < lines.length; k += team.size()) {
      const int64_t i = first + k * lines.inner;
      const float shifted = load(x[i]) - stats.max;
      y[i] = store<T>(kLog ? shifted - log_sum : numeric::exp(shifted) / stats.sum);
    }
  }
}

// ---- Rows held in registers ------------------------------------------------------------------
//
// The common case, contiguous rows of at most kMaxPacksPerLane * 32 16-byte packs (2048 f16 or
// bf16, 1024 f32) whose length is a whole number of packs: one warp per row reads the row once,
// in 16-byte packs, keeps it in registers (kPacks per lane) and writes each result once, so the
// row crosses memory twice (in and out) instead of three or four times, in wide accesses. The
// arithmetic is the teams' (the same operations per element; only the order of the f32 sums
// differs, within the contract's tolerance for reductions).

inline constexpr int kMaxPacksPerLane = 8;

template <typename T>
inline constexpr int kRowPack = 16 / sizeof(T);

// Packs per lane for rows of `packs` packs: the fewest of 1, 2, 4 or 8 that hold the row; 0 when
// none does.
inline int packs_per_lane(int64_t packs) {
  for (int per_lane = 1; per_lane <= kMaxPacksPerLane; per_lane *= 2) {
    if (packs <= per_lane * kWarp) return per_lane;
  }
  return 0;
}

// Whether rows of `length` contiguous elements at x and y (and the other operands, null allowed)
// can be held in registers.
template <typename T>
bool rows_fit_registers(int64_t length, std::initializer_list<const void*> pointers) {
  if (length % kRowPack<T> != 0 || packs_per_lane(length / kRowPack<T>) == 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && !aligned16(p)) return false;
  }
  return true;
}

// Lane `lane`'s packs of a row of `packs` packs into `v` (as f32); pack p of the lane is the
// row's pack p * 32 + lane.
template <int kPacks, typename T>
__device__ __forceinline__ void load_row(const T* row, int packs, int lane,
                                         float (&v)[kPacks][kRowPack<T>]) {
  using P = Pack<T, kRowPack<T>>;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int k = p * kWarp + lane;
    if (k < packs) {
      const P pack = reinterpret_cast<const P*>(row)[k];
#pragma unroll
      for (int j = 0; j < kRowPack<T>; ++j) v[p][j] = load(pack.v[j]);
    }
  }
}

template <int kPacks, typename T, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int packs) {
  constexpr int V = kRowPack<T>;
  using P = Pack<T, V>;
  const int lane = threadIdx.x % kWarp;
  for (int64_t row = global_thread() / kWarp; row < rows; row += grid_threads() / kWarp) {
    const int64_t first = row * packs * V;
    float v[kPacks][V];
    load_row<kPacks>(x + first, packs, lane, v);
    float max = -std::numeric_limits<float>::infinity();
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (p * kWarp + lane >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) max = MaxSkipNan{}(max, v[p][j]);
    }
    max = warp_all_reduce(max, MaxSkipNan{});
    float sum = 0;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (p * kWarp + lane >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        v[p][j] -= max;  // the shifted value, exactly as the teams compute it
        if constexpr (kLog) {
          sum += numeric::exp(v[p][j]);
        } else {
          v[p][j] = numeric::exp(v[p][j]);  // kept: Softmax divides it by the sum
          sum += v[p][j];
        }
      }
    }
    sum = warp_all_reduce(sum, Plus{});
    const float log_sum = kLog ? numeric::log(sum) : 0.0f;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int k = p * kWarp + lane;
      if (k >= packs) continue;
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        out.v[j] = store<T>(kLog ? v[p][j] - log_sum : v[p][j] / sum);
      }
      reinterpret_cast<P*>(y + first)[k] = out;
    }
  }
}

// Calls launch(Int<kPacks>) with the kPacks for rows of `packs` packs (packs_per_lane).
template <int N>
struct Int {
  static constexpr int value = N;
};
template <typename Launch>
void with_packs_per_lane(int64_t packs, Launch&& launch) {
  switch (packs_per_lane(packs)) {
    case 1:
      return launch(Int<1>{});
    case 2:
      return launch(Int<2>{});
    case 4:
      return launch(Int<4>{});
    default:
      return launch(Int<kMaxPacksPerLane>{});
  }
}

// A warp or block per contiguous line (held in registers where it fits); column teams for
// strided lines.
template <typename T, bool kLog>
void launch_softmax_teams(const T* x, T* y, const AxisLines& lines, cudaStream_t stream) {
  const int64_t count = lines.outer * lines.inner;
  if (lines.inner == 1 && rows_fit_registers<T>(lines.length, {x, y})) {
    const int packs = static_cast<int>(lines.length / kRowPack<T>);
    with_packs_per_lane(packs, [&](auto per_lane) {
      softmax_rows_kernel<decltype(per_lane)::value, T, kLog>
          <<<warp_team_blocks(count), kThreads, 0, stream>>>(x, y, count, packs);
    });
  } else if (lines.inner > 1) {
    softmax_kernel<ColumnTeam, T, kLog>
        <<<column_team_blocks(count), column_team_threads(count, lines.length), 0, stream>>>(x, y,
                                                                                             lines);
  } else if (block_team_for(count, lines.length)) {
    softmax_kernel<BlockTeam, T, kLog>
        <<<grid_for(count), kBlockTeamThreads, 0, stream>>>(x, y, lines);
  } else {
    softmax_kernel<WarpTeam, T, kLog>
        <<<warp_team_blocks(count), kThreads, 0, stream>>>(x, y, lines);
  }
}

// ---- LayerNormalization --------------------------------------------------------------------

// Where element i of X (column j of its row) reads a broadcast operand: i % period, or the
// layout's offsets for operand k when the period is 0.
__device__ __forceinline__ int64_t param_offset(const LayerNormParams& p, int64_t period, int k,
                                                int64_t i, int64_t j) {
  if (period == p.n) return j;
  if (period != 0) return i % period;
  int64_t offsets[3];
  layout_offsets(p.layout, i, offsets);
  return offsets[k];
}

template <typename S>
__device__ __forceinline__ void store_stat(void* stats, int64_t row, float value) {
  if (stats != nullptr) static_cast<S*>(stats)[row] = store<S>(value);
}

// mean = sum / n; var = sum((x - mean)^2) / n; inv_std = 1 / sqrt(var + epsilon);
// y = (x - mean) * inv_std * scale + bias, left to right as the CPU kernel.
template <typename Team, typename T, typename S>
__global__ void layer_norm_kernel(const T* x, const T* scale, const T* bias, T* y, void* mean_out,
                                  void* inv_std_out, LayerNormParams p) {
  const Team team;
  const float n = static_cast<float>(p.n);
  for (int64_t row = team.first(); row < p.rows; row += team.stride()) {
    const T* in = x + row * p.n;
    float sum = 0;
    for (int64_t j = team.rank(); j < p.n; j += team.size()) sum += load(in[j]);
    const float mean = team.reduce(sum, Plus{}) / n;
    float square_sum = 0;
    for (int64_t j = team.rank(); j < p.n; j += team.size()) {
      const float centered = load(in[j]) - mean;
      square_sum += centered * centered;
    }
    const float var = team.reduce(square_sum, Plus{}) / n;
    const float inv_std = 1.0f / numeric::sqrt(var + p.epsilon);
    for (int64_t j = team.rank(); j < p.n; j += team.size()) {
      const int64_t i = row * p.n + j;
      float value =
          (load(in[j]) - mean) * inv_std * load(scale[param_offset(p, p.scale_period, 1, i, j)]);
      if (bias != nullptr) value += load(bias[param_offset(p, p.bias_period, 2, i, j)]);
      y[i] = store<T>(value);
    }
    if (team.rank() == 0) {
      store_stat<S>(mean_out, row, mean);
      store_stat<S>(inv_std_out, row, inv_std);
    }
  }
}

// The team kernel's arithmetic on a row held in registers, for scale and bias of one row's
// length (the usual [n] parameters).
template <int kPacks, typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    layer_norm_rows_kernel(const T* x, const T* scale, const T* bias, T* y, void* mean_out,
                           void* inv_std_out, LayerNormParams p) {
  constexpr int V = kRowPack<T>;
  using P = Pack<T, V>;
  const int lane = threadIdx.x % kWarp;
  const int packs = static_cast<int>(p.n / V);
  const float n = static_cast<float>(p.n);
  for (int64_t row = global_thread() / kWarp; row < p.rows; row += grid_threads() / kWarp) {
    float v[kPacks][V];
    load_row<kPacks>(x + row * p.n, packs, lane, v);
    float sum = 0;
#pragma unroll
    for (int q = 0; q < kPacks; ++q) {
      if (q * kWarp + lane >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) sum += v[q][j];
    }
    const float mean = warp_all_reduce(sum, Plus{}) / n;
    float square_sum = 0;
#pragma unroll
    for (int q = 0; q < kPacks; ++q) {
      if (q * kWarp + lane >= packs) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        v[q][j] -= mean;
        square_sum += v[q][j] * v[q][j];
      }
    }
    const float var = warp_all_reduce(square_sum, Plus{}) / n;
    const float inv_std = 1.0f / numeric::sqrt(var + p.epsilon);
#pragma unroll
    for (int q = 0; q < kPacks; ++q) {
      const int k = q * kWarp + lane;
      if (k >= packs) continue;
      const P scale_pack = reinterpret_cast<const P*>(scale)[k];
      P bias_pack{};
      if (bias != nullptr) bias_pack = reinterpret_cast<const P*>(bias)[k];
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        float value = v[q][j] * inv_std * load(scale_pack.v[j]);
        if (bias != nullptr) value += load(bias_pack.v[j]);
        out.v[j] = store<T>(value);
      }
      reinterpret_cast<P*>(y + row * p.n)[k] = out;
    }
    if (lane == 0) {
      store_stat<S>(mean_out, row, mean);
      store_stat<S>(inv_std_out, row, inv_std);
    }
  }
}

template <typename T, typename S>
void launch_layer_norm_teams(const T* x, const T* scale, const T* bias, T* y, void* mean,
                             void* inv_std, const LayerNormParams& p, cudaStream_t stream) {
  const bool row_parameters = p.scale_period == p.n && (bias == nullptr || p.bias_period == p.n);
  if (row_parameters && rows_fit_registers<T>(p.n, {x, y, scale, bias})) {
    with_packs_per_lane(p.n / kRowPack<T>, [&](auto per_lane) {
      layer_norm_rows_kernel<decltype(per_lane)::value, T, S>
          <<<warp_team_blocks(p.rows), kThreads, 0, stream>>>(x, scale, bias, y, mean, inv_std, p);
    });
  } else if (block_team_for(p.rows, p.n)) {
    layer_norm_kernel<BlockTeam, T, S>
        <<<grid_for(p.rows), kBlockTeamThreads, 0, stream>>>(x, scale, bias, y, mean, inv_std, p);
  } else {
    layer_norm_kernel<WarpTeam, T, S>
        <<<warp_team_blocks(p.rows), kThreads, 0, stream>>>(x, scale, bias, y, mean, inv_std, p);
  }
}

// ---- Losses --------------------------------------------------------------------------------

// Where a sample's loss goes: output element s ("none"), or the workspace for the reduction.
template <typename T>
struct LossSink {
  T* out;       // "none"
  float* loss;  // sum and mean: per-sample loss and weight
  float* weight;
  ClassLoss shape;
  ErrorSink errors;

  // The weight of a sample of `label`, 0 for an ignored label and for one out of range (which
  // is recorded as sample s's error); `ok` says whether the label picks a class.
  template <typename L>
  __device__ float weight_of(L label, int64_t s, const T* weights, bool& ok) const {
    const int64_t value = static_cast<int64_t>(label);
    ok = false;
    if (shape.has_ignore_index && value == shape.ignore_index) return 0.0f;
    if (value < 0 || value >= shape.classes) {
      record_device_error(errors.error, kLabelOutOfRange, errors.step, s, value, shape.classes);
      return 0.0f;
    }
    ok = true;
    return weights != nullptr ? load(weights[value]) : 1.0f;
  }

  __device__ void put(int64_t s, float sample_loss, float sample_weight) const {
    if (shape.reduction == LossReduction::kNone) {
      out[s] = store<T>(sample_loss);
    } else {
      loss[s] = sample_loss;
      weight[s] = sample_weight;
    }
  }
};

template <typename Team, typename T, typename L>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_cross_entropy_kernel(const T* scores, const L* labels, const T* weights, T* log_prob,
                                 LossSink<T> sink) {
  const Team team;
  const ClassLoss& shape = sink.shape;
  const AxisLines lines{shape.batch, shape.classes, shape.spatial};
  const int64_t samples = shape.samples();
  for (int64_t base = team.first(); base < samples; base += team.stride()) {
    const int64_t s = base + team.offset();
    const bool valid = s < samples;
    const int64_t first = valid ? line_first(lines, s) : 0;
    const T* row = scores + first;
    const RowStats stats = row_stats(team, row, shape.classes, shape.spatial, valid);
    if (!valid) continue;
    const float log_sum = numeric::log(stats.sum);
    if (log_prob != nullptr) {
      for (int64_t c = team.rank(); c < shape.classes; c += team.size()) {
        log_prob[first + c * shape.spatial] =
            store<T>((load(row[c * shape.spatial]) - stats.max) - log_sum);
      }
    }
    if (team.rank() != 0) continue;
    bool ok = false;
    const float w = sink.weight_of(labels[s], s, weights, ok);
    float loss = 0.0f;
    if (ok) {
      const int64_t label = static_cast<int64_t>(labels[s]);
      const float label_log_prob = (load(row[label * shape.spatial]) - stats.max) - log_sum;
      loss = -label_log_prob * w;
    }
    sink.put(s, loss, w);
  }
}

template <typename T, typename L>
__global__ void negative_log_likelihood_kernel(const T* input, const L* labels, const T* weights,
                                               LossSink<T> sink) {
  const ClassLoss& shape = sink.shape;
  for (int64_t s = global_thread(); s < shape.samples(); s += grid_threads()) {
    bool ok = false;
    const float w = sink.weight_of(labels[s], s, weights, ok);
    float loss = 0.0f;
    if (ok) {
      const int64_t at = (s / shape.spatial) * shape.classes * shape.spatial +
                         static_cast<int64_t>(labels[s]) * shape.spatial + s % shape.spatial;
      loss = -load(input[at]) * w;
    }
    sink.put(s, loss, w);
  }
}

// out[0] = the sum of the losses, divided for "mean" by the sum of the weights (weighted) or by
// the number of samples of weight 1 (the kept samples), counted exactly as the CPU does. One
// block; each thread adds a strided share in order, then the block in a fixed order.
template <typename T>
__global__ void reduce_losses_kernel(const float* loss, const float* weight, int64_t samples,
                                     bool mean, bool weighted, T* out) {
  const BlockTeam team;
  float loss_sum = 0, weight_sum = 0;
  int64_t kept = 0;
  for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) {
    loss_sum += loss[s];
    weight_sum += weight[s];
    kept += weight[s] == 1.0f ? 1 : 0;
  }
  loss_sum = team.reduce(loss_sum, Plus{});
  if (mean) {
    if (weighted) {
      loss_sum /= team.reduce(weight_sum, Plus{});
    } else {
      loss_sum /= static_cast<float>(team.reduce(kept, Plus{}));
    }
  }
  if (threadIdx.x == 0) out[0] = store<T>(loss_sum);
}

template <typename T>
cudaError_t finish_losses(const LossSink<T>& sink, bool weighted, cudaStream_t stream) {
  if (sink.shape.reduction == LossReduction::kNone) return cudaGetLastError();
  reduce_losses_kernel<T><<<1, kBlockTeamThreads, 0, stream>>>(
      sink.loss, sink.weight, sink.shape.samples(), sink.shape.reduction == LossReduction::kMean,
      weighted, sink.out);
  return cudaGetLastError();
}

template <typename T>
LossSink<T> loss_sink(void* out, void* workspace, const ClassLoss& shape, ErrorSink errors) {
  float* loss = static_cast<float*>(workspace);
  return {static_cast<T*>(out), loss, loss == nullptr ? nullptr : loss + shape.samples(), shape,
          errors};
}

}  // namespace

cudaError_t launch_softmax(bool log_softmax, Elem type, const void* x, void* y,
                           const AxisLines& lines, cudaStream_t stream) {
  if (lines.outer * lines.inner == 0 || lines.length == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (log_softmax) {
      launch_softmax_teams<T, true>(in, out, lines, stream);
    } else {
      launch_softmax_teams<T, false>(in, out, lines, stream);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_layer_norm(Elem type, const void* x, const void* scale, const void* bias,
                              void* y, Elem stats_type, void* mean, void* inv_std_dev,
                              const LayerNormParams& params, cudaStream_t stream) {
  if (params.rows == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_float_elem(stats_type, [&](auto stats_tag) {
      using S = typename decltype(stats_tag)::type;
      launch_layer_norm_teams<T, S>(static_cast<const T*>(x), static_cast<const T*>(scale),
                                    static_cast<const T*>(bias), static_cast<T*>(y), mean,
                                    inv_std_dev, params, stream);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_softmax_cross_entropy(Elem type, Elem label_type, const void* scores,
                                         const void* labels, const void* weights, void* loss,
                                         void* log_prob, void* workspace, const ClassLoss& shape,
                                         ErrorSink sink, cudaStream_t stream) {
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_index_elem(label_type, [&](auto label_tag) {
      using L = typename decltype(label_tag)::type;
      const LossSink<T> losses = loss_sink<T>(loss, workspace, shape, sink);
      const int64_t samples = shape.samples();
      if (samples > 0) {
        const T* in = static_cast<const T*>(scores);
        const L* label = static_cast<const L*>(labels);
        const T* weight = static_cast<const T*>(weights);
        T* log_prob_out = static_cast<T*>(log_prob);
        if (shape.spatial > 1) {
          softmax_cross_entropy_kernel<ColumnTeam, T, L>
              <<<column_team_blocks(samples), column_team_threads(samples, shape.classes), 0,
                 stream>>>(in, label, weight, log_prob_out, losses);
        } else if (block_team_for(samples, shape.classes)) {
          softmax_cross_entropy_kernel<BlockTeam, T, L>
              <<<grid_for(samples), kBlockTeamThreads, 0, stream>>>(in, label, weight, log_prob_out,
                                                                    losses);
        } else {
          softmax_cross_entropy_kernel<WarpTeam, T, L>
              <<<warp_team_blocks(samples), kThreads, 0, stream>>>(in, label, weight, log_prob_out,
                                                                   losses);
        }
        const cudaError_t launched = cudaGetLastError();
        if (launched != cudaSuccess) return launched;
      }
      return finish_losses(losses, weights != nullptr, stream);
    });
  });
}

cudaError_t launch_negative_log_likelihood(Elem type, Elem label_type, const void* input,
                                           const void* labels, const void* weights, void* loss,
                                           void* workspace, const ClassLoss& shape, ErrorSink sink,
                                           cudaStream_t stream) {
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_index_elem(label_type, [&](auto label_tag) {
      using L = typename decltype(label_tag)::type;
      const LossSink<T> losses = loss_sink<T>(loss, workspace, shape, sink);
      const int64_t samples = shape.samples();
      if (samples > 0) {
        negative_log_likelihood_kernel<<<blocks_for(samples), kThreads, 0, stream>>>(
            static_cast<const T*>(input), static_cast<const L*>(labels),
            static_cast<const T*>(weights), losses);
        const cudaError_t launched = cudaGetLastError();
        if (launched != cudaSuccess) return launched;
      }
      return finish_losses(losses, weights != nullptr, stream);
    });
  });
}

}  // namespace ampc::runtime::cuda
