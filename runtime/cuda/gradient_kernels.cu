// The gradient kernels of the training step's backward pass (gradient_kernels.h): element-wise
// ones grid-stride, row-shaped ones on the teams of reduce.cuh (one team per row, sums in f32 in a
// fixed order), column sums one thread per column in row order. Every per-element formula is
// runtime/gradient_math.h's. Where dX may share dY's buffer, every element of a row is read (and
// the team's sums taken) before any element of it is written.
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "runtime/cuda/gradient_kernels.h"
#include "runtime/cuda/reduce.cuh"
#include "runtime/gradient_math.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Element-wise --------------------------------------------------------------------------

template <typename T, typename Fn>
__global__ void activation_grad_kernel(const T* dy, const T* saved, T* dx, int64_t n, Fn fn) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    dx[i] = store<T>(fn(load(dy[i]), load(saved[i])));
  }
}

template <typename Fn>
cudaError_t activation_grad(Elem type, const void* dy, const void* saved, void* dx, int64_t n,
                            Fn fn, cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    activation_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(saved), static_cast<T*>(dx), n, fn);
    return cudaGetLastError();
  });
}

template <typename T>
__global__ void dropout_grad_kernel(const T* dy, const bool* mask, T* dx, int64_t n,
                                    DropoutArgs args, ErrorSink sink) {
  const double ratio = read_ratio(args);
  const bool training = args.training != nullptr && *args.training;
  if (!training || ratio == 0) {
    for (int64_t i = global_thread(); i < n; i += grid_threads()) dx[i] = dy[i];
    return;
  }
  if (!(ratio > 0 && ratio < 1)) {
    if (global_thread() == 0) {
      record_device_error(sink.error, kInvalidDropoutRatio, sink.step, 0, 0, 0);
    }
    return;
  }
  // The forward kernel's factor, rounded to f32 the same way.
  const float scale = static_cast<float>(1.0 / (1.0 - ratio));
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    dx[i] = store<T>(load(dy[i]) * (mask[i] ? scale : 0.0f));
  }
}

// ---- Rows: Softmax and LogSoftmax ----------------------------------------------------------

template <typename Team, typename T, bool kLog>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_grad_kernel(const T* dy, const T* y, T* dx, AxisLines lines) {
  const Team team;
  const int64_t count = lines.outer * lines.inner;
  for (int64_t base = team.first(); base < count; base += team.stride()) {
    const int64_t line = base + team.offset();
    const bool valid = line < count;
    const int64_t first = valid ? line_first(lines, line) : 0;
    float sum = 0;
    if (valid) {
      for (int64_t k = team.rank(); k < lines.length; k += team.size()) {
        const int64_t i = first + k * lines.inner;
        sum += kLog ? load(dy[i]) : load(dy[i]) * load(y[i]);
      }
    }
    sum = team.reduce(sum, Plus{});
    if (!valid) continue;
    for (int64_t k = team.rank(); k < lines.length; k += team.size()) {
      const int64_t i = first + k * lines.inner;
      dx[i] = store<T>(kLog ? numeric::log_softmax_grad(load(dy[i]), load(y[i]), sum)
                            : numeric::softmax_grad(load(dy[i]), load(y[i]), sum));
    }
  }
}

// Calls launch(team tag, grid, block) with the team for `count` lines of `length` elements:
// column teams for strided lines, else a block or a warp per line.
template <typename Launch>
void with_team(int64_t count, int64_t length, bool strided, Launch&& launch) {
  if (strided) {
    launch(Tag<ColumnTeam>{}, dim3(column_team_blocks(count)), column_team_threads(count, length));
  } else if (block_team_for(count, length)) {
    launch(Tag<BlockTeam>{}, dim3(grid_for(count)), dim3(kBlockTeamThreads));
  } else {
    launch(Tag<WarpTeam>{}, dim3(warp_team_blocks(count)), dim3(kThreads));
  }
}

// ---- Classification losses -----------------------------------------------------------------

// Whether sample s's label picks a class: not the ignore_index and in range (one out of range is
// recorded as the sample's error).
template <typename L>
__device__ bool label_kept(L label, int64_t s, const ClassLoss& shape, ErrorSink sink,
                           bool record) {
  const int64_t value = static_cast<int64_t>(label);
  if (shape.has_ignore_index && value == shape.ignore_index) return false;
  if (value < 0 || value >= shape.classes) {
    if (record)
      record_device_error(sink.error, kLabelOutOfRange, sink.step, s, value, shape.classes);
    return false;
  }
  return true;
}

// factor[0] = dLoss (sum), or dLoss over the kept samples' weight sum (their count without
// weights) for mean. One block, each thread a strided share in order, then the block.
template <typename T, typename L>
__global__ void loss_grad_factor_kernel(const T* dloss, const L* labels, const T* weights,
                                        ClassLoss shape, float* factor) {
  const BlockTeam team;
  float weight_sum = 0;
  int64_t kept = 0;
  for (int64_t s = threadIdx.x; s < shape.samples(); s += blockDim.x) {
    if (!label_kept(labels[s], s, shape, ErrorSink{}, false)) continue;
    weight_sum += weights != nullptr ? load(weights[static_cast<int64_t>(labels[s])]) : 1.0f;
    ++kept;
  }
  weight_sum = team.reduce(weight_sum, Plus{});
  kept = team.reduce(kept, Plus{});
  if (threadIdx.x != 0) return;
  float g = load(dloss[0]);
  if (shape.reduction == LossReduction::kMean) {
    g /= weights != nullptr ? weight_sum : static_cast<float>(kept);
  }
  factor[0] = g;
}

// Sample s's factor: its dLoss (none) or the reduction's, times its class weight.
template <typename T, typename L>
__device__ float sample_factor(const T* dloss, const float* factor, const T* weights, L label,
                               int64_t s, const ClassLoss& shape) {
  const float g = shape.reduction == LossReduction::kNone ? load(dloss[s]) : factor[0];
  return g * (weights != nullptr ? load(weights[static_cast<int64_t>(label)]) : 1.0f);
}

template <typename Team, typename T, typename L>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_cross_entropy_grad_kernel(const T* dloss, const T* input, const L* labels,
                                      const T* weights, T* dx, const float* factor, ClassLoss shape,
                                      bool from_scores, ErrorSink sink) {
  const Team team;
  const AxisLines lines{shape.batch, shape.classes, shape.spatial};
  const int64_t samples = shape.samples();
  for (int64_t base = team.first(); base < samples; base += team.stride()) {
    const int64_t s = base + team.offset();
    const bool valid = s < samples;
    const int64_t first = valid ? line_first(lines, s) : 0;
    const T* row = input + first;
    // log_prob_c = (x_c - max) - log(sum of exp(x - max)) from the scores, as the forward does.
    float max = 0, log_sum = 0;
    if (from_scores) {
      max = -std::numeric_limits<float>::infinity();
      if (valid) {
        for (int64_t c = team.rank(); c < shape.classes; c += team.size()) {
          max = MaxSkipNan{}(max, load(row[c * shape.spatial]));
        }
      }
      max = team.reduce(max, MaxSkipNan{});
      float sum = 0;
      if (valid) {
        for (int64_t c = team.rank(); c < shape.classes; c += team.size()) {
          sum += numeric::exp(load(row[c * shape.spatial]) - max);
        }
      }
      log_sum = numeric::log(team.reduce(sum, Plus{}));
    }
    if (!valid) continue;
    const L label = labels[s];
    const bool kept = label_kept(label, s, shape, sink, team.rank() == 0);
    const float f = kept ? sample_factor(dloss, factor, weights, label, s, shape) : 0.0f;
    for (int64_t c = team.rank(); c < shape.classes; c += team.size()) {
      const int64_t i = first + c * shape.spatial;
      if (!kept) {
        dx[i] = store<T>(0.0f);
        continue;
      }
      const float log_prob = from_scores ? (load(input[i]) - max) - log_sum : load(input[i]);
      dx[i] = store<T>(numeric::cross_entropy_grad(f, log_prob, c == static_cast<int64_t>(label)));
    }
  }
}

template <typename T, typename L>
__global__ void negative_log_likelihood_grad_kernel(const T* dloss, const L* labels,
                                                    const T* weights, T* dx, const float* factor,
                                                    ClassLoss shape, ErrorSink sink) {
  for (int64_t s = global_thread(); s < shape.samples(); s += grid_threads()) {
    const L label = labels[s];
    if (!label_kept(label, s, shape, sink, true)) continue;
    const int64_t at = (s / shape.spatial) * shape.classes * shape.spatial +
                       static_cast<int64_t>(label) * shape.spatial + s % shape.spatial;
    dx[at] = store<T>(-sample_factor(dloss, factor, weights, label, s, shape));
  }
}

// ---- LayerNormalization --------------------------------------------------------------------

// The statistics of each row into stats[row] (mean) and stats[rows + row] (inv_std): read from
// the forward's outputs, or recomputed as the forward kernel computes them.
template <typename Team, typename T, typename S>
__global__ void __launch_bounds__(kMaxTeamThreads)
    layer_norm_stats_kernel(const T* x, const S* mean_in, const S* inv_std_in, float* stats,
                            LayerNormGradParams p) {
  const Team team;
  for (int64_t base = team.first(); base < p.rows; base += team.stride()) {
    const int64_t row = base + team.offset();
    const bool valid = row < p.rows;
    if (mean_in != nullptr) {  // uniform over the grid: no team reduction below
      if (valid && team.rank() == 0) {
        stats[row] = load(mean_in[row]);
        stats[p.rows + row] = load(inv_std_in[row]);
      }
      continue;
    }
    const T* in = x + (valid ? row : 0) * p.n;
    float sum = 0;
    if (valid) {
      for (int64_t j = team.rank(); j < p.n; j += team.size()) sum += load(in[j]);
    }
    const float mean = team.reduce(sum, Plus{}) / static_cast<float>(p.n);
    float square_sum = 0;
    if (valid) {
      for (int64_t j = team.rank(); j < p.n; j += team.size()) {
        const float centered = load(in[j]) - mean;
        square_sum += centered * centered;
      }
    }
    square_sum = team.reduce(square_sum, Plus{});
    if (valid && team.rank() == 0) {
      stats[row] = mean;
      stats[p.rows + row] = 1.0f / numeric::sqrt(square_sum / static_cast<float>(p.n) + p.epsilon);
    }
  }
}

// Column j's sums of dScale and dBias over row part `blockIdx.y` (layer_norm_grad_row_parts),
// into parts[part * n + j] and parts[(parts + part) * n + j]: the threads of a warp read
// consecutive columns of a row.
template <typename T>
__global__ void layer_norm_column_parts_kernel(const T* dy, const T* x, const float* stats,
                                               float* parts, LayerNormGradParams p) {
  const int64_t j = global_thread();
  if (j >= p.n) return;
  const int64_t count = gridDim.y;
  const int64_t part = blockIdx.y;
  const int64_t per_part = (p.rows + count - 1) / count;
  const int64_t end = per_part * (part + 1) < p.rows ? per_part * (part + 1) : p.rows;
  float scale_sum = 0, bias_sum = 0;
  for (int64_t row = per_part * part; row < end; ++row) {
    const int64_t i = row * p.n + j;
    const float grad = load(dy[i]);
    scale_sum += grad * ((load(x[i]) - stats[row]) * stats[p.rows + row]);
    bias_sum += grad;
  }
  parts[part * p.n + j] = scale_sum;
  parts[(count + part) * p.n + j] = bias_sum;
}

// dScale and dBias: each column's part sums added in part order.
template <typename T>
__global__ void layer_norm_columns_kernel(const float* parts, int64_t count, T* dscale, T* dbias,
                                          LayerNormGradParams p) {
  for (int64_t j = global_thread(); j < p.n; j += grid_threads()) {
    float scale_sum = 0, bias_sum = 0;
    for (int64_t part = 0; part < count; ++part) {
      scale_sum += parts[part * p.n + j];
      bias_sum += parts[(count + part) * p.n + j];
    }
    dscale[j] = store<T>(scale_sum);
    if (dbias != nullptr) dbias[j] = store<T>(bias_sum);
  }
}

__device__ __forceinline__ int64_t scale_offset(const LayerNormGradParams& p, int64_t j) {
  int64_t offsets[1];
  layout_offsets(p.scale_columns, j, offsets);
  return offsets[0];
}

template <typename Team, typename T>
__global__ void __launch_bounds__(kMaxTeamThreads)
    layer_norm_dx_kernel(const T* dy, const T* x, const T* scale, const float* stats, T* dx,
                         LayerNormGradParams p) {
  const Team team;
  for (int64_t base = team.first(); base < p.rows; base += team.stride()) {
    const int64_t row = base + team.offset();
    const bool valid = row < p.rows;
    const int64_t first = (valid ? row : 0) * p.n;
    const float mean = valid ? stats[row] : 0.0f;
    const float inv_std = valid ? stats[p.rows + row] : 0.0f;
    float grad_sum = 0, grad_xhat_sum = 0;
    if (valid) {
      for (int64_t j = team.rank(); j < p.n; j += team.size()) {
        const float grad = load(dy[first + j]) * load(scale[scale_offset(p, j)]);
        grad_sum += grad;
        grad_xhat_sum += grad * ((load(x[first + j]) - mean) * inv_std);
      }
    }
    const float grad_mean = team.reduce(grad_sum, Plus{}) / static_cast<float>(p.n);
    const float grad_xhat_mean = team.reduce(grad_xhat_sum, Plus{}) / static_cast<float>(p.n);
    if (!valid) continue;
    for (int64_t j = team.rank(); j < p.n; j += team.size()) {
      const int64_t i = first + j;
      const float xhat = (load(x[i]) - mean) * inv_std;
      const float grad = load(dy[i]) * load(scale[scale_offset(p, j)]);
      dx[i] = store<T>(numeric::layer_norm_grad(grad, xhat, inv_std, grad_mean, grad_xhat_mean));
    }
  }
}

// ---- BatchNormalizationGrad ----------------------------------------------------------------

// One block per channel: its statistics (batch ones in training), then the sums of dy * xhat
// and dy, into the workspace (mean, inv_std, dscale, dbias, each [C]) and dscale, dbias.
template <typename T, typename S>
__global__ void __launch_bounds__(kMaxTeamThreads)
    batch_norm_channel_kernel(const T* dy, const T* x, const S* mean_in, const S* var_in,
                              float* stats, S* dscale, S* dbias, BatchNormGradParams p) {
  const BlockTeam team;
  const int64_t m = p.batch * p.spatial;
  const float count = static_cast<float>(m);
  for (int64_t c = team.first(); c < p.channels; c += team.stride()) {
    auto at = [&](int64_t k) {
      return ((k / p.spatial) * p.channels + c) * p.spatial + k % p.spatial;
    };
    float mean = 0, var = 0;
    if (p.training) {
      float sum = 0;
      for (int64_t k = team.rank(); k < m; k += team.size()) sum += load(x[at(k)]);
      mean = team.reduce(sum, Plus{}) / count;
      float square_sum = 0;
      for (int64_t k = team.rank(); k < m; k += team.size()) {
        const float centered = load(x[at(k)]) - mean;
        square_sum += centered * centered;
      }
      var = team.reduce(square_sum, Plus{}) / count;
    } else {
      mean = load(mean_in[c]);
      var = load(var_in[c]);
    }
    const float inv_std = 1.0f / numeric::sqrt(var + p.epsilon);
    float scale_sum = 0, bias_sum = 0;
    for (int64_t k = team.rank(); k < m; k += team.size()) {
      const float grad = load(dy[at(k)]);
      scale_sum += grad * ((load(x[at(k)]) - mean) * inv_std);
      bias_sum += grad;
    }
    scale_sum = team.reduce(scale_sum, Plus{});
    bias_sum = team.reduce(bias_sum, Plus{});
    if (team.rank() == 0) {
      stats[c] = mean;
      stats[p.channels + c] = inv_std;
      stats[2 * p.channels + c] = scale_sum;
      stats[3 * p.channels + c] = bias_sum;
      dscale[c] = store<S>(scale_sum);
      dbias[c] = store<S>(bias_sum);
    }
  }
}

template <typename T, typename S>
__global__ void batch_norm_dx_kernel(const T* dy, const T* x, const S* scale, const float* stats,
                                     T* dx, BatchNormGradParams p) {
  const int64_t n = p.batch * p.channels * p.spatial;
  const float count = static_cast<float>(p.batch * p.spatial);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = (i / p.spatial) % p.channels;
    const float mean = stats[c], inv_std = stats[p.channels + c];
    float grad = load(dy[i]);
    if (p.training) {
      const float scale_mean = stats[2 * p.channels + c] / count;
      const float bias_mean = stats[3 * p.channels + c] / count;
      grad -= bias_mean + (load(x[i]) - mean) * inv_std * scale_mean;
    }
    dx[i] = store<T>(load(scale[c]) * inv_std * grad);
  }
}

// ---- PadGrad -------------------------------------------------------------------------------

// The output indices o (ascending ranges [lo, hi]) of a padded dim that Pad read input index i
// from: o = i + begin, and for reflect the two mirror images, for edge the clamped runs, for
// wrap the images one axis length either side (pads <= n).
struct OutputRanges {
  int count = 0;
  int64_t lo[3], hi[3];
  __device__ void add(int64_t a, int64_t b, int64_t out) {
    if (a < 0) a = 0;
    if (b > out - 1) b = out - 1;
    if (a <= b) {
      lo[count] = a;
      hi[count] = b;
      ++count;
    }
  }
};

__device__ OutputRanges ranges_reading(int64_t i, int64_t n, int64_t begin, int64_t out,
                                       PadMode mode) {
  OutputRanges r;
  const int64_t main = i + begin;
  switch (mode) {
    case PadMode::kConstant:
      r.add(main, main, out);
      break;
    case PadMode::kReflect:
      // t = o - begin < 0 reads -t; t >= n reads 2 (n - 1) - t (pads < n: one reflection).
      if (i >= 1) r.add(begin - i, begin - i, out);
      r.add(main, main, out);
      if (i <= n - 2) r.add(begin + 2 * (n - 1) - i, begin + 2 * (n - 1) - i, out);
      break;
    case PadMode::kEdge: {
      const int64_t first = i == 0 ? 0 : main;
      const int64_t last = i == n - 1 ? out - 1 : main;
      r.add(first, last, out);
      break;
    }
    case PadMode::kWrap:
      r.add(main - n, main - n, out);
      r.add(main, main, out);
      r.add(main + n, main + n, out);
      break;
  }
  return r;
}

template <typename T>
__global__ void pad_grad_kernel(const T* dy, T* dx, PadGradParams p, int64_t n) {
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    OutputRanges ranges[kMaxRank];
    int64_t stride[kMaxRank];
    bool none = false;
    int64_t rest = e;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t i = rest % p.in[d];
      rest /= p.in[d];
      ranges[d] = ranges_reading(i, p.in[d], p.begin[d], p.out[d], p.mode);
      none |= ranges[d].count == 0;
      stride[d] = d == p.rank - 1 ? 1 : stride[d + 1] * p.out[d + 1];
    }
    float acc = 0;
    if (!none) {
      // The dY indices in row-major order: an odometer over each dim's ranges.
      int which[kMaxRank];
      int64_t o[kMaxRank];
      for (int d = 0; d < p.rank; ++d) {
        which[d] = 0;
        o[d] = ranges[d].lo[0];
      }
      for (;;) {
        int64_t offset = 0;
        for (int d = 0; d < p.rank; ++d) offset += o[d] * stride[d];
        acc += load(dy[offset]);
        int d = p.rank - 1;
        for (; d >= 0; --d) {
          if (o[d] < ranges[d].hi[which[d]]) {
            ++o[d];
            break;
          }
          if (which[d] + 1 < ranges[d].count) {
            o[d] = ranges[d].lo[++which[d]];
            break;
          }
          which[d] = 0;
          o[d] = ranges[d].lo[0];
        }
        if (d < 0) break;
      }
    }
    dx[e] = store<T>(acc);
  }
}

// ---- GatherGrad ----------------------------------------------------------------------------

// The bits a sort key of [0, dim] needs (dim itself marks an index out of range).
int key_bits(int64_t dim) {
  int bits = 1;
  while (bits < 62 && (int64_t{1} << bits) <= dim) ++bits;
  return bits;
}

struct GatherGradScratch {
  int64_t* keys_in;
  int64_t* keys;
  int32_t* positions_in;
  int32_t* positions;
  void* sort;
  size_t sort_bytes;
};

GatherGradScratch gather_grad_scratch(void* workspace, const GatherGradShape& shape,
                                      size_t sort_bytes) {
  auto* keys_in = static_cast<int64_t*>(workspace);
  auto* positions_in = reinterpret_cast<int32_t*>(keys_in + 2 * shape.count);
  // The sort's scratch 256-byte aligned after the positions.
  const auto end = reinterpret_cast<uintptr_t>(positions_in + 2 * shape.count);
  void* sort = reinterpret_cast<void*>((end + 255) / 256 * 256);
  return {keys_in,   keys_in + shape.count, positions_in, positions_in + shape.count, sort,
          sort_bytes};
}

template <typename I>
__global__ void gather_keys_kernel(const I* indices, GatherGradShape shape, int64_t* keys,
                                   int32_t* positions, ErrorSink sink) {
  for (int64_t j = global_thread(); j < shape.count; j += grid_threads()) {
    int64_t r = static_cast<int64_t>(indices[j]);
    const int64_t value = r;
    if (r < 0) r += shape.dim;
    if (r < 0 || r >= shape.dim) {
      record_device_error(sink.error, kIndexOutOfRange, sink.step, j, value, shape.dim);
      r = shape.dim;  // sorted last, added nowhere
    }
    if (r == shape.skip) r = shape.dim;
    keys[j] = r;
    positions[j] = static_cast<int32_t>(j);
  }
}

// Thread (o, j, c): when sorted position j starts a run of equal keys, it adds dy[o, p, c] for
// the run's positions p (in j order, as the stable sort left them) into dx[o, key, c].
template <typename T>
__global__ void gather_grad_runs_kernel(const T* dy, const int64_t* keys, const int32_t* positions,
                                        T* dx, GatherGradShape shape) {
  const int64_t total = shape.outer * shape.count * shape.inner;
  for (int64_t t = global_thread(); t < total; t += grid_threads()) {
    const int64_t c = t % shape.inner;
    const int64_t j = (t / shape.inner) % shape.count;
    const int64_t o = t / (shape.inner * shape.count);
    const int64_t key = keys[j];
    if (key >= shape.dim || (j > 0 && keys[j - 1] == key)) continue;
    float sum = 0;
    for (int64_t k = j; k < shape.count && keys[k] == key; ++k) {
      sum += load(dy[(o * shape.count + positions[k]) * shape.inner + c]);
    }
    dx[(o * shape.dim + key) * shape.inner + c] = store<T>(sum);
  }
}

}  // namespace

int64_t gather_grad_workspace_bytes(const GatherGradShape& shape) {
  size_t sort_bytes = 0;
  if (shape.count > 0) {
    cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), shape.count, 0,
        key_bits(shape.dim));
  }
  return shape.count * (2 * 8 + 2 * 4) + 256 + static_cast<int64_t>(sort_bytes);
}

cudaError_t launch_gather_grad(Elem type, Elem index_type, const void* dy, const void* indices,
                               void* dx, void* workspace, int64_t workspace_bytes,
                               const GatherGradShape& shape, ErrorSink sink, cudaStream_t stream) {
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const cudaError_t cleared = cudaMemsetAsync(
        dx, 0, static_cast<size_t>(shape.outer * shape.dim * shape.inner) * sizeof(T), stream);
    if (cleared != cudaSuccess || shape.count == 0 || shape.inner == 0 || shape.outer == 0) {
      return cleared;
    }
    const int64_t fixed = shape.count * (2 * 8 + 2 * 4) + 256;
    const GatherGradScratch s =
        gather_grad_scratch(workspace, shape, static_cast<size_t>(workspace_bytes - fixed));
    auto keys = [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      gather_keys_kernel<<<blocks_for(shape.count), kThreads, 0, stream>>>(
          static_cast<const I*>(indices), shape, s.keys_in, s.positions_in, sink);
      return cudaGetLastError();
    };
    cudaError_t status = visit_index_elem(index_type, keys);
    if (status != cudaSuccess) return status;
    size_t sort_bytes = s.sort_bytes;
    status =
        cub::DeviceRadixSort::SortPairs(s.sort, sort_bytes, s.keys_in, s.keys, s.positions_in,
                                        s.positions, shape.count, 0, key_bits(shape.dim), stream);
    if (status != cudaSuccess) return status;
    const int64_t total = shape.outer * shape.count * shape.inner;
    gather_grad_runs_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), s.keys, s.positions, static_cast<T*>(dx), shape);
    return cudaGetLastError();
  });
}

cudaError_t launch_batch_norm_grad(Elem type, Elem stats_type, const void* dy, const void* x,
                                   const void* scale, const void* mean, const void* var, void* dx,
                                   void* dscale, void* dbias, void* workspace,
                                   const BatchNormGradParams& params, cudaStream_t stream) {
  if (params.channels == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_float_elem(stats_type, [&](auto stats_tag) {
      using S = typename decltype(stats_tag)::type;
      const T* g = static_cast<const T*>(dy);
      const T* in = static_cast<const T*>(x);
      float* stats = static_cast<float*>(workspace);
      batch_norm_channel_kernel<T, S><<<grid_for(params.channels), kBlockTeamThreads, 0, stream>>>(
          g, in, static_cast<const S*>(mean), static_cast<const S*>(var), stats,
          static_cast<S*>(dscale), static_cast<S*>(dbias), params);
      const int64_t n = params.batch * params.channels * params.spatial;
      if (n > 0) {
        batch_norm_dx_kernel<T, S><<<blocks_for(n), kThreads, 0, stream>>>(
            g, in, static_cast<const S*>(scale), stats, static_cast<T*>(dx), params);
      }
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_pad_grad(Elem type, const void* dy, void* dx, const PadGradParams& params,
                            cudaStream_t stream) {
  int64_t n = 1;
  for (int d = 0; d < params.rank; ++d) n *= params.in[d];
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    pad_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy),
                                                               static_cast<T*>(dx), params, n);
    return cudaGetLastError();
  });
}

cudaError_t launch_activation_grad(ActivationGrad op, Elem type, const void* dy, const void* saved,
                                   void* dx, int64_t n, float alpha, cudaStream_t stream) {
  switch (op) {
    case ActivationGrad::kRelu:
      return activation_grad(type, dy, saved, dx, n, numeric::ReluGrad{}, stream);
    case ActivationGrad::kLeakyRelu:
      return activation_grad(type, dy, saved, dx, n, numeric::LeakyReluGrad{alpha}, stream);
    case ActivationGrad::kGeluErf:
      return activation_grad(type, dy, saved, dx, n, numeric::GeluErfGrad{}, stream);
    case ActivationGrad::kGeluTanh:
      return activation_grad(type, dy, saved, dx, n, numeric::GeluTanhGrad{}, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_dropout_grad(Elem type, const void* dy, const bool* mask, void* dx, int64_t n,
                                const DropoutArgs& args, ErrorSink sink, cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_grad_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), mask,
                                                                static_cast<T*>(dx), n, args, sink);
    return cudaGetLastError();
  });
}

cudaError_t launch_softmax_grad(bool log_softmax, Elem type, const void* dy, const void* y,
                                void* dx, const AxisLines& lines, cudaStream_t stream) {
  const int64_t count = lines.outer * lines.inner;
  if (count == 0 || lines.length == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_team(count, lines.length, lines.inner > 1, [&](auto team, dim3 grid, dim3 block) {
      using Team = typename decltype(team)::type;
      const T* g = static_cast<const T*>(dy);
      const T* out = static_cast<const T*>(y);
      T* result = static_cast<T*>(dx);
      if (log_softmax) {
        softmax_grad_kernel<Team, T, true><<<grid, block, 0, stream>>>(g, out, result, lines);
      } else {
        softmax_grad_kernel<Team, T, false><<<grid, block, 0, stream>>>(g, out, result, lines);
      }
    });
    return cudaGetLastError();
  });
}

cudaError_t launch_softmax_cross_entropy_grad(Elem type, Elem label_type, const void* dloss,
                                              const void* input, const void* labels,
                                              const void* weights, void* dx, void* workspace,
                                              const ClassLoss& shape, bool from_scores,
                                              ErrorSink sink, cudaStream_t stream) {
  const int64_t samples = shape.samples();
  if (samples == 0 || shape.classes == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_index_elem(label_type, [&](auto label_tag) {
      using L = typename decltype(label_tag)::type;
      const T* g = static_cast<const T*>(dloss);
      const L* label = static_cast<const L*>(labels);
      const T* weight = static_cast<const T*>(weights);
      float* factor = static_cast<float*>(workspace);
      if (shape.reduction != LossReduction::kNone) {
        loss_grad_factor_kernel<T, L>
            <<<1, kBlockTeamThreads, 0, stream>>>(g, label, weight, shape, factor);
      }
      with_team(samples, shape.classes, shape.spatial > 1, [&](auto team, dim3 grid, dim3 block) {
        using Team = typename decltype(team)::type;
        softmax_cross_entropy_grad_kernel<Team, T, L>
            <<<grid, block, 0, stream>>>(g, static_cast<const T*>(input), label, weight,
                                         static_cast<T*>(dx), factor, shape, from_scores, sink);
      });
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_negative_log_likelihood_grad(Elem type, Elem label_type, const void* dloss,
                                                const void* labels, const void* weights, void* dx,
                                                void* workspace, const ClassLoss& shape,
                                                ErrorSink sink, cudaStream_t stream) {
  const int64_t samples = shape.samples();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_index_elem(label_type, [&](auto label_tag) {
      using L = typename decltype(label_tag)::type;
      const cudaError_t cleared =
          cudaMemsetAsync(dx, 0, static_cast<size_t>(samples * shape.classes) * sizeof(T), stream);
      if (cleared != cudaSuccess || samples == 0) return cleared;
      const T* g = static_cast<const T*>(dloss);
      const L* label = static_cast<const L*>(labels);
      const T* weight = static_cast<const T*>(weights);
      float* factor = static_cast<float*>(workspace);
      if (shape.reduction != LossReduction::kNone) {
        loss_grad_factor_kernel<T, L>
            <<<1, kBlockTeamThreads, 0, stream>>>(g, label, weight, shape, factor);
      }
      negative_log_likelihood_grad_kernel<<<blocks_for(samples), kThreads, 0, stream>>>(
          g, label, weight, static_cast<T*>(dx), factor, shape, sink);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_layer_norm_grad(Elem type, const void* dy, const void* x, const void* scale,
                                   Elem stats_type, const void* mean, const void* inv_std_dev,
                                   void* dx, void* dscale, void* dbias, void* workspace,
                                   const LayerNormGradParams& params, cudaStream_t stream) {
  if (params.rows == 0 || params.n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return visit_float_elem(stats_type, [&](auto stats_tag) {
      using S = typename decltype(stats_tag)::type;
      const T* g = static_cast<const T*>(dy);
      const T* in = static_cast<const T*>(x);
      float* stats = static_cast<float*>(workspace);
      with_team(params.rows, params.n, false, [&](auto team, dim3 grid, dim3 block) {
        using Team = typename decltype(team)::type;
        layer_norm_stats_kernel<Team, T, S><<<grid, block, 0, stream>>>(
            in, static_cast<const S*>(mean), static_cast<const S*>(inv_std_dev), stats, params);
      });
      // The columns read dY before dX (which may share its buffer) is written.
      const int64_t parts = layer_norm_grad_row_parts(params.rows);
      float* part_sums = stats + 2 * params.rows;
      const dim3 part_grid(static_cast<unsigned>((params.n + kThreads - 1) / kThreads),
                           static_cast<unsigned>(parts));
      layer_norm_column_parts_kernel<<<part_grid, kThreads, 0, stream>>>(g, in, stats, part_sums,
                                                                         params);
      layer_norm_columns_kernel<<<blocks_for(params.n), kThreads, 0, stream>>>(
          part_sums, parts, static_cast<T*>(dscale), static_cast<T*>(dbias), params);
      with_team(params.rows, params.n, false, [&](auto team, dim3 grid, dim3 block) {
        using Team = typename decltype(team)::type;
        layer_norm_dx_kernel<Team, T><<<grid, block, 0, stream>>>(
            g, in, static_cast<const T*>(scale), stats, static_cast<T*>(dx), params);
      });
      return cudaGetLastError();
    });
  });
}

}  // namespace ampc::runtime::cuda
