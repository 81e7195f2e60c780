// Own kernels of the window and normalization ops (pool_kernels.h): one thread per output element
// for the pools and the copies, one block per channel for BatchNormalization's batch statistics.
// Each pool output walks its window in the CPU kernel's row-major scan order and computes in
// the CPU's order, so MaxPool is exact and AveragePool bit-identical to runtime/cpu/pool.cc;
// BatchNormalization's per-element formula is runtime/cpu/normalization.cc's, operation by
// operation (built with --fmad=false), and only its batch statistics sum in another order.
#include <cmath>
#include <limits>

#include "runtime/cuda/elementwise.cuh"
#include "runtime/cuda/pool_kernels.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Pools -----------------------------------------------------------------------------------

// The position of output element i: its plane and spatial coordinates.
struct OutputPosition {
  int64_t plane, o0, o1, o2;
};

__device__ __forceinline__ OutputPosition output_position(const PoolWindow& w, int64_t i) {
  OutputPosition p;
  p.o2 = i % w.out[2];
  i /= w.out[2];
  p.o1 = i % w.out[1];
  i /= w.out[1];
  p.o0 = i % w.out[0];
  p.plane = i / w.out[0];
  return p;
}

// Calls visit(i0, i1, i2, inside) for every tap of the window at `p`, in row-major order.
template <typename Visit>
__device__ __forceinline__ void for_each_tap(const PoolWindow& w, const OutputPosition& p,
                                             Visit&& visit) {
  const int64_t s0 = p.o0 * w.stride[0] - w.pad_begin[0];
  const int64_t s1 = p.o1 * w.stride[1] - w.pad_begin[1];
  const int64_t s2 = p.o2 * w.stride[2] - w.pad_begin[2];
  for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
    const int64_t i0 = s0 + k0 * w.dilation[0];
    for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
      const int64_t i1 = s1 + k1 * w.dilation[1];
      for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
        const int64_t i2 = s2 + k2 * w.dilation[2];
        const bool inside =
            i0 >= 0 && i0 < w.in[0] && i1 >= 0 && i1 < w.in[1] && i2 >= 0 && i2 < w.in[2];
        visit(i0, i1, i2, inside);
      }
    }
  }
}

// The identity of max: -inf for floats, the smallest value for integers.
template <typename T>
__device__ __forceinline__ T lowest_value() {
  if constexpr (is_float_v<T>) {
    return store<T>(-INFINITY);
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

template <typename T>
__global__ void max_pool_kernel(const T* x, T* y, int64_t* indices, PoolWindow w,
                                bool column_major) {
  using C = compute_t<T>;
  const int64_t in_size = w.in[0] * w.in[1] * w.in[2];
  const int64_t n = w.planes * w.out[0] * w.out[1] * w.out[2];
  for (int64_t out = global_thread(); out < n; out += grid_threads()) {
    const OutputPosition p = output_position(w, out);
    const T* xp = x + p.plane * in_size;
    bool found = false;
    C best = C(0);
    int64_t best_offset = -1, best_index = -1;
    for_each_tap(w, p, [&](int64_t i0, int64_t i1, int64_t i2, bool inside) {
      if (!inside) return;
      const int64_t offset = (i0 * w.in[1] + i1) * w.in[2] + i2;
      const C value = load(xp[offset]);
      if (found && !(value > best) && !(numeric::is_nan(value) && !numeric::is_nan(best))) return;
      found = true;
      best = value;
      best_offset = offset;
      best_index = column_major ? i0 + i1 * w.in[0] + i2 * w.in[0] * w.in[1] : offset;
    });
    y[out] = found ? xp[best_offset] : lowest_value<T>();
    if (indices != nullptr) indices[out] = found ? p.plane * in_size + best_index : -1;
  }
}

template <typename T>
__global__ void average_pool_kernel(const T* x, T* y, PoolWindow w, bool count_pad) {
  using C = compute_t<T>;
  const int64_t in_size = w.in[0] * w.in[1] * w.in[2];
  const int64_t n = w.planes * w.out[0] * w.out[1] * w.out[2];
  // Whether tap position i along dim d lies inside the padded input.
  auto in_padded = [&](int d, int64_t i) {
    return i >= -w.pad_begin[d] && i < w.in[d] + w.pad_end[d];
  };
  for (int64_t out = global_thread(); out < n; out += grid_threads()) {
    const OutputPosition p = output_position(w, out);
    const T* xp = x + p.plane * in_size;
    C sum = C(0);
    int64_t count = 0;
    for_each_tap(w, p, [&](int64_t i0, int64_t i1, int64_t i2, bool inside) {
      if (inside) {
        sum += load(xp[(i0 * w.in[1] + i1) * w.in[2] + i2]);
        ++count;
      } else if (count_pad && in_padded(0, i0) && in_padded(1, i1) && in_padded(2, i2)) {
        ++count;
      }
    });
    // The quiet NaN the CPU's numeric_limits gives (0x7fc00000).
    y[out] = store<T>(count > 0 ? sum / static_cast<C>(count) : f32_from_bits(0x7fc00000u));
  }
}

// ---- Pool gradients --------------------------------------------------------------------------
//
// One thread per dX element: it walks the output positions whose windows hold its input position,
// in row-major order (the order in which the CPU kernel adds them), and adds each one's share,
// from 0 in the compute type, rounding once: the CPU's bits.

// The output positions [lo, hi] along dim d whose windows may hold input position i.
__device__ __forceinline__ void window_range(const PoolWindow& w, int d, int64_t i, int64_t& lo,
                                             int64_t& hi) {
  const int64_t top = i + w.pad_begin[d];
  const int64_t bottom = top - (w.kernel[d] - 1) * w.dilation[d];
  lo = bottom <= 0 ? 0 : (bottom + w.stride[d] - 1) / w.stride[d];
  hi = top < 0 ? -1 : top / w.stride[d];
  if (hi > w.out[d] - 1) hi = w.out[d] - 1;
}

// Whether window o along dim d has a tap at input position i.
__device__ __forceinline__ bool window_holds(const PoolWindow& w, int d, int64_t o, int64_t i) {
  const int64_t relative = i + w.pad_begin[d] - o * w.stride[d];
  return relative >= 0 && relative % w.dilation[d] == 0 && relative / w.dilation[d] < w.kernel[d];
}

// Calls visit(p, out) for every output position p (flat `out` within its plane) whose window
// holds input element `offset` of `plane`, in row-major order.
template <typename Visit>
__device__ __forceinline__ void for_each_window_holding(const PoolWindow& w, int64_t plane,
                                                        int64_t offset, Visit&& visit) {
  const int64_t i[3] = {offset / (w.in[1] * w.in[2]), (offset / w.in[2]) % w.in[1],
                        offset % w.in[2]};
  int64_t lo[3], hi[3];
  for (int d = 0; d < 3; ++d) window_range(w, d, i[d], lo[d], hi[d]);
  for (int64_t o0 = lo[0]; o0 <= hi[0]; ++o0) {
    if (!window_holds(w, 0, o0, i[0])) continue;
    for (int64_t o1 = lo[1]; o1 <= hi[1]; ++o1) {
      if (!window_holds(w, 1, o1, i[1])) continue;
      for (int64_t o2 = lo[2]; o2 <= hi[2]; ++o2) {
        if (!window_holds(w, 2, o2, i[2])) continue;
        visit(OutputPosition{plane, o0, o1, o2}, (o0 * w.out[1] + o1) * w.out[2] + o2);
      }
    }
  }
}

// dX: each dY element goes to its window's maximum (MaxPool's rule: taps inside X only, the
// first maximum in scan order, the first NaN wins).
template <typename T>
__global__ void max_pool_grad_kernel(const T* dy, const T* x, T* dx, PoolWindow w) {
  using C = compute_t<T>;
  const int64_t in_size = w.in[0] * w.in[1] * w.in[2];
  const int64_t out_size = w.out[0] * w.out[1] * w.out[2];
  const int64_t n = w.planes * in_size;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t plane = e / in_size;
    const int64_t offset = e % in_size;
    const T* xp = x + plane * in_size;
    C acc = C(0);
    for_each_window_holding(w, plane, offset, [&](const OutputPosition& p, int64_t out) {
      bool found = false;
      C best = C(0);
      int64_t best_offset = -1;
      for_each_tap(w, p, [&](int64_t i0, int64_t i1, int64_t i2, bool inside) {
        if (!inside) return;
        const int64_t tap = (i0 * w.in[1] + i1) * w.in[2] + i2;
        const C value = load(xp[tap]);
        if (found && !(value > best) && !(numeric::is_nan(value) && !numeric::is_nan(best))) {
          return;
        }
        found = true;
        best = value;
        best_offset = tap;
      });
      if (best_offset == offset) acc += load(dy[plane * out_size + out]);
    });
    dx[e] = store<T>(acc);
  }
}

// dX: each dY element divided by its window's count (AveragePool's), spread over its taps inside
// X.
template <typename T>
__global__ void average_pool_grad_kernel(const T* dy, T* dx, PoolWindow w, bool count_pad) {
  using C = compute_t<T>;
  const int64_t in_size = w.in[0] * w.in[1] * w.in[2];
  const int64_t out_size = w.out[0] * w.out[1] * w.out[2];
  const int64_t n = w.planes * in_size;
  auto in_padded = [&](int d, int64_t i) {
    return i >= -w.pad_begin[d] && i < w.in[d] + w.pad_end[d];
  };
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t plane = e / in_size;
    C acc = C(0);
    for_each_window_holding(w, plane, e % in_size, [&](const OutputPosition& p, int64_t out) {
      int64_t count = 0;
      for_each_tap(w, p, [&](int64_t i0, int64_t i1, int64_t i2, bool inside) {
        count += inside || (count_pad && in_padded(0, i0) && in_padded(1, i1) && in_padded(2, i2));
      });
      acc += load(dy[plane * out_size + out]) / static_cast<C>(count);
    });
    dx[e] = store<T>(acc);
  }
}

// ---- BatchNormalization ----------------------------------------------------------------------

// The per-channel table the normalization reads, in f32: mean, std_dev, scale, bias.
struct ChannelTable {
  float* mean;
  float* std_dev;
  float* scale;
  float* bias;
};

ChannelTable channel_table(float* table, int64_t channels) {
  return {table, table + channels, table + 2 * channels, table + 3 * channels};
}

// Scale and B, and in inference the given statistics, read into the table.
template <typename P, typename S>
__global__ void batch_norm_params_kernel(const P* scale, const P* bias, const S* input_mean,
                                         const S* input_var, ChannelTable table,
                                         BatchNormShape shape) {
  for (int64_t c = global_thread(); c < shape.channels; c += grid_threads()) {
    table.scale[c] = static_cast<float>(load(scale[c]));
    table.bias[c] = static_cast<float>(load(bias[c]));
    if (!shape.training) {
      table.mean[c] = static_cast<float>(load(input_mean[c]));
      table.std_dev[c] = numeric::sqrt(static_cast<float>(load(input_var[c])) + shape.epsilon);
    }
  }
}

// The sum of `value` over the block, returned to every thread. `shared` holds one float per warp.
__device__ float block_sum(float value, float* shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
      value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    if (lane == 0) shared[0] = value;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();  // shared may be reused right after
  return total;
}

// Training: per channel (one block each) the batch mean and biased variance over (n, d), two
// passes in f32, then the table's mean and std_dev and the running statistics.
template <typename T, typename S>
__global__ void batch_norm_stats_kernel(const T* x, const S* input_mean, const S* input_var,
                                        S* running_mean, S* running_var, ChannelTable table,
                                        BatchNormShape shape) {
  __shared__ float shared[kThreads / 32];
  const int64_t count = shape.batch * shape.spatial;
  const float count_f = static_cast<float>(count);
  for (int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    auto element = [&](int64_t j) {
      const int64_t b = j / shape.spatial, i = j - b * shape.spatial;
      return static_cast<float>(load(x[(b * shape.channels + c) * shape.spatial + i]));
    };
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) sum += element(j);
    const float mean = block_sum(sum, shared) / count_f;
    float square_sum = 0.0f;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const float centered = element(j) - mean;
      square_sum += centered * centered;
    }
    const float var = block_sum(square_sum, shared) / count_f;
    if (threadIdx.x == 0) {
      table.mean[c] = mean;
      table.std_dev[c] = numeric::sqrt(var + shape.epsilon);
      const float keep = shape.momentum, take = 1.0f - shape.momentum;
      if (running_mean != nullptr) {
        running_mean[c] = store<S>(static_cast<float>(load(input_mean[c])) * keep + mean * take);
      }
      if (running_var != nullptr) {
        running_var[c] = store<S>(static_cast<float>(load(input_var[c])) * keep + var * take);
      }
    }
  }
}

// y = (x - mean) / std_dev * scale + bias, left to right, rounded once.
template <typename T>
__global__ void batch_norm_apply_kernel(const T* x, T* y, ChannelTable table,
                                        BatchNormShape shape) {
  const int64_t n = shape.batch * shape.channels * shape.spatial;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t c = (i / shape.spatial) % shape.channels;
    const float value = static_cast<float>(load(x[i]));
    y[i] = store<T>((value - table.mean[c]) / table.std_dev[c] * table.scale[c] + table.bias[c]);
  }
}

// ---- Copies ----------------------------------------------------------------------------------

template <typename W>
__global__ void broadcast_matrix_copy_kernel(const W* src, W* dst, int64_t rows, int64_t cols,
                                             int64_t row_stride, int64_t col_stride) {
  const int64_t n = rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t r = i / cols, c = i - r * cols;
    dst[i] = src[r * row_stride + c * col_stride];
  }
}

struct PadGeometry {
  int64_t planes;
  int64_t in[3];
  int64_t out[3];
  int64_t pad_begin[3];
};

template <typename W>
__global__ void conv_input_pad_kernel(const W* x, W* padded, PadGeometry g) {
  const int64_t in_size = g.in[0] * g.in[1] * g.in[2];
  const int64_t n = g.planes * g.out[0] * g.out[1] * g.out[2];
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t rest = i;
    const int64_t o2 = rest % g.out[2];
    rest /= g.out[2];
    const int64_t o1 = rest % g.out[1];
    rest /= g.out[1];
    const int64_t o0 = rest % g.out[0];
    const int64_t plane = rest / g.out[0];
    const int64_t i0 = o0 - g.pad_begin[0], i1 = o1 - g.pad_begin[1], i2 = o2 - g.pad_begin[2];
    const bool inside =
        i0 >= 0 && i0 < g.in[0] && i1 >= 0 && i1 < g.in[1] && i2 >= 0 && i2 < g.in[2];
    padded[i] = inside ? x[plane * in_size + (i0 * g.in[1] + i1) * g.in[2] + i2] : W(0);
  }
}

// The inverse: the image at pad_begin inside each padded plane (`out` dims) copied out to `in`
// dims (ConvGradData's dX from the gradient of the padded X).
template <typename W>
__global__ void conv_input_crop_kernel(const W* padded, W* x, PadGeometry g) {
  const int64_t out_size = g.out[0] * g.out[1] * g.out[2];
  const int64_t n = g.planes * g.in[0] * g.in[1] * g.in[2];
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t rest = i;
    const int64_t i2 = rest % g.in[2];
    rest /= g.in[2];
    const int64_t i1 = rest % g.in[1];
    rest /= g.in[1];
    const int64_t i0 = rest % g.in[0];
    const int64_t plane = rest / g.in[0];
    x[i] = padded[plane * out_size +
                  ((i0 + g.pad_begin[0]) * g.out[1] + i1 + g.pad_begin[1]) * g.out[2] + i2 +
                  g.pad_begin[2]];
  }
}

// Calls fn(Tag<W>) with the unsigned word type of `element_bytes` bytes.
template <typename Fn>
cudaError_t visit_word(int element_bytes, Fn&& fn) {
  switch (element_bytes) {
    case 1:
      return fn(Tag<uint8_t>{});
    case 2:
      return fn(Tag<uint16_t>{});
    case 4:
      return fn(Tag<uint32_t>{});
    case 8:
      return fn(Tag<uint64_t>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_max_pool(Elem type, const void* x, void* y, int64_t* indices,
                            const PoolWindow& window, bool column_major, cudaStream_t stream) {
  const int64_t n = window.planes * window.out[0] * window.out[1] * window.out[2];
  if (n == 0) return cudaGetLastError();
  auto launch = [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), indices, window, column_major);
    return cudaGetLastError();
  };
  switch (type) {
    case Elem::kI8:
      return launch(Tag<int8_t>{});
    case Elem::kU8:
      return launch(Tag<uint8_t>{});
    default:
      return visit_float_elem(type, launch);
  }
}

cudaError_t launch_average_pool(Elem type, const void* x, void* y, const PoolWindow& window,
                                bool count_include_pad, cudaStream_t stream) {
  const int64_t n = window.planes * window.out[0] * window.out[1] * window.out[2];
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_pool_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), window, count_include_pad);
    return cudaGetLastError();
  });
}

cudaError_t launch_max_pool_grad(Elem type, const void* dy, const void* x, void* dx,
                                 const PoolWindow& window, cudaStream_t stream) {
  const int64_t n = window.planes * window.in[0] * window.in[1] * window.in[2];
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), window);
    return cudaGetLastError();
  });
}

cudaError_t launch_average_pool_grad(Elem type, const void* dy, void* dx, const PoolWindow& window,
                                     bool count_include_pad, cudaStream_t stream) {
  const int64_t n = window.planes * window.in[0] * window.in[1] * window.in[2];
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_pool_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), window, count_include_pad);
    return cudaGetLastError();
  });
}

cudaError_t launch_batch_norm(Elem x_type, Elem param_type, Elem stats_type, const void* x,
                              const void* scale, const void* bias, const void* input_mean,
                              const void* input_var, void* y, void* running_mean, void* running_var,
                              float* table, const BatchNormShape& shape, cudaStream_t stream) {
  if (shape.channels == 0) return cudaGetLastError();
  const ChannelTable channels = channel_table(table, shape.channels);
  cudaError_t status = visit_float_elem(param_type, [&](auto param_tag) {
    using P = typename decltype(param_tag)::type;
    return visit_float_elem(stats_type, [&](auto stats_tag) {
      using S = typename decltype(stats_tag)::type;
      batch_norm_params_kernel<P, S><<<blocks_for(shape.channels), kThreads, 0, stream>>>(
          static_cast<const P*>(scale), static_cast<const P*>(bias),
          static_cast<const S*>(input_mean), static_cast<const S*>(input_var), channels, shape);
      return cudaGetLastError();
    });
  });
  if (status != cudaSuccess) return status;
  if (shape.training) {
    const unsigned blocks =
        static_cast<unsigned>(shape.channels < 65535 * 8 ? shape.channels : 65535 * 8);
    status = visit_float_elem(x_type, [&](auto x_tag) {
      using T = typename decltype(x_tag)::type;
      return visit_float_elem(stats_type, [&](auto stats_tag) {
        using S = typename decltype(stats_tag)::type;
        batch_norm_stats_kernel<T, S><<<blocks, kThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const S*>(input_mean),
            static_cast<const S*>(input_var), static_cast<S*>(running_mean),
            static_cast<S*>(running_var), channels, shape);
        return cudaGetLastError();
      });
    });
    if (status != cudaSuccess) return status;
  }
  const int64_t n = shape.batch * shape.channels * shape.spatial;
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(x_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_apply_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), channels, shape);
    return cudaGetLastError();
  });
}

cudaError_t launch_broadcast_matrix_copy(int element_bytes, const void* src, void* dst,
                                         int64_t rows, int64_t cols, int64_t row_stride,
                                         int64_t col_stride, cudaStream_t stream) {
  if (rows * cols == 0) return cudaGetLastError();
  return visit_word(element_bytes, [&](auto tag) {
    using W = typename decltype(tag)::type;
    broadcast_matrix_copy_kernel<W><<<blocks_for(rows * cols), kThreads, 0, stream>>>(
        static_cast<const W*>(src), static_cast<W*>(dst), rows, cols, row_stride, col_stride);
    return cudaGetLastError();
  });
}

namespace {

// Runs kernel<W> over the `n` elements of one side of the geometry (`from` read, `to` written).
template <template <typename> class Kernel>
cudaError_t launch_pad_geometry(int element_bytes, const void* from, void* to, int64_t planes,
                                const int64_t (&in)[3], const int64_t (&out)[3],
                                const int64_t (&pad_begin)[3], int64_t n, cudaStream_t stream) {
  const PadGeometry g{planes,
                      {in[0], in[1], in[2]},
                      {out[0], out[1], out[2]},
                      {pad_begin[0], pad_begin[1], pad_begin[2]}};
  if (n == 0) return cudaGetLastError();
  return visit_word(element_bytes, [&](auto tag) {
    using W = typename decltype(tag)::type;
    Kernel<W>::launch(static_cast<const W*>(from), static_cast<W*>(to), g, n, stream);
    return cudaGetLastError();
  });
}

template <typename W>
struct PadInto {
  static void launch(const W* x, W* padded, const PadGeometry& g, int64_t n, cudaStream_t stream) {
    conv_input_pad_kernel<W><<<blocks_for(n), kThreads, 0, stream>>>(x, padded, g);
  }
};

template <typename W>
struct CropFrom {
  static void launch(const W* padded, W* x, const PadGeometry& g, int64_t n, cudaStream_t stream) {
    conv_input_crop_kernel<W><<<blocks_for(n), kThreads, 0, stream>>>(padded, x, g);
  }
};

}  // namespace

cudaError_t launch_conv_input_pad(int element_bytes, const void* x, void* padded, int64_t planes,
                                  const int64_t (&in)[3], const int64_t (&out)[3],
                                  const int64_t (&pad_begin)[3], cudaStream_t stream) {
  return launch_pad_geometry<PadInto>(element_bytes, x, padded, planes, in, out, pad_begin,
                                      planes * out[0] * out[1] * out[2], stream);
}

cudaError_t launch_conv_input_crop(int element_bytes, const void* padded, void* x, int64_t planes,
                                   const int64_t (&in)[3], const int64_t (&out)[3],
                                   const int64_t (&pad_begin)[3], cudaStream_t stream) {
  return launch_pad_geometry<CropFrom>(element_bytes, padded, x, planes, in, out, pad_begin,
                                       planes * in[0] * in[1] * in[2], stream);
}

}  // namespace ampc::runtime::cuda
