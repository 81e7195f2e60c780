// The reduction kernels: ReduceSum, ReduceMean, ReduceMax and GlobalAveragePool (one reducer
// over a ReduceLayout), ArgMax and ArgMin (the same walk with an index-carrying reducer) and
// CumSum (a sequential scan per line, or a block scan for long contiguous lines).
//
// Each output is reduced by one team (reduce.cuh): a warp or a block when the input's innermost
// dim is reduced (the row's elements are contiguous), a column team otherwise (neighbouring
// outputs are contiguous). Sums accumulate in f32 (f16, bf16, f32) or wrap in i64 (integers);
// a maximum is exact in the compute type.
#include <limits>
#include <type_traits>

#include "runtime/cuda/reduce.cuh"
#include "runtime/numeric.h"

namespace ampc::runtime::cuda {
namespace {

// ---- The walk ------------------------------------------------------------------------------

__device__ __forceinline__ int64_t kept_offset(const ReduceLayout& layout, int64_t output) {
  int64_t offset = 0;
  for (int d = layout.kept_rank - 1; d >= 0; --d) {
    offset += (output % layout.kept_sizes[d]) * layout.kept_strides[d];
    output /= layout.kept_sizes[d];
  }
  return offset;
}

__device__ __forceinline__ int64_t reduced_offset(const ReduceLayout& layout, int64_t r) {
  if (layout.reduced_rank == 1) return r * layout.reduced_strides[0];
  int64_t offset = 0;
  for (int d = layout.reduced_rank - 1; d >= 0; --d) {
    offset += (r % layout.reduced_sizes[d]) * layout.reduced_strides[d];
    r /= layout.reduced_sizes[d];
  }
  return offset;
}

// y[o] = reducer.finish(the combination of reducer.add over o's reduced elements). A reducer
// has: Acc, Out, identity(), add(acc, element, r), operator()(acc, acc) and finish(acc).
template <typename Team, typename T, typename Reducer>
__global__ void __launch_bounds__(kMaxTeamThreads)
    reduce_kernel(const T* x, typename Reducer::Out* y, ReduceLayout layout, Reducer reducer) {
  const Team team;
  for (int64_t base = team.first(); base < layout.outputs; base += team.stride()) {
    const int64_t o = base + team.offset();
    const bool valid = o < layout.outputs;
    typename Reducer::Acc acc = reducer.identity();
    if (valid) {
      const T* in = x + kept_offset(layout, o);
      for (int64_t r = team.rank(); r < layout.count; r += team.size()) {
        reducer.add(acc, in[reduced_offset(layout, r)], r);
      }
    }
    acc = team.reduce(acc, reducer);
    if (valid && team.rank() == 0) y[o] = reducer.finish(acc);
  }
}

// A warp or block per output when the innermost dim is reduced; a column team otherwise.
template <typename T, typename Reducer>
cudaError_t launch_reducer(const void* x, void* y, const ReduceLayout& layout, Reducer reducer,
                           cudaStream_t stream) {
  if (layout.outputs == 0) return cudaGetLastError();
  const T* in = static_cast<const T*>(x);
  auto* out = static_cast<typename Reducer::Out*>(y);
  const bool rows = layout.kept_rank == 0 || (layout.reduced_rank > 0 &&
                                              layout.reduced_strides[layout.reduced_rank - 1] == 1);
  if (!rows) {
    reduce_kernel<ColumnTeam, T>
        <<<column_team_blocks(layout.outputs), column_team_threads(layout.outputs, layout.count), 0,
           stream>>>(in, out, layout, reducer);
  } else if (block_team_for(layout.outputs, layout.count)) {
    reduce_kernel<BlockTeam, T>
        <<<grid_for(layout.outputs), kBlockTeamThreads, 0, stream>>>(in, out, layout, reducer);
  } else {
    reduce_kernel<WarpTeam, T>
        <<<warp_team_blocks(layout.outputs), kThreads, 0, stream>>>(in, out, layout, reducer);
  }
  return cudaGetLastError();
}

// ---- Sum, mean, max ------------------------------------------------------------------------

template <typename T, ReduceOp kOp>
using accumulate_t =
    std::conditional_t<kOp == ReduceOp::kMax || is_float_v<T>, compute_t<T>, int64_t>;

template <typename T, ReduceOp kOp>
struct ValueReducer {
  using Acc = accumulate_t<T, kOp>;
  using Out = T;
  int64_t count;

  __device__ Acc identity() const {
    if constexpr (kOp != ReduceOp::kMax) {
      return Acc(0);
    } else if constexpr (std::numeric_limits<Acc>::has_infinity) {
      return -std::numeric_limits<Acc>::infinity();
    } else {
      return std::numeric_limits<Acc>::lowest();
    }
  }
  __device__ Acc operator()(Acc acc, Acc value) const {
    if constexpr (kOp == ReduceOp::kMax) {
      // A NaN replaces the maximum and nothing replaces a NaN maximum (the CPU's rule).
      return (value > acc || numeric::is_nan(value)) ? value : acc;
    } else if constexpr (std::is_integral_v<Acc>) {
      return numeric::wrapping_add(acc, value);
    } else {
      return acc + value;
    }
  }
  __device__ void add(Acc& acc, T element, int64_t) const {
    acc = (*this)(acc, static_cast<Acc>(load(element)));
  }
  __device__ T finish(Acc acc) const {
    if constexpr (kOp == ReduceOp::kMean) {
      if constexpr (std::is_integral_v<Acc>) {
        acc = count == 0 ? 0 : acc / count;
      } else {
        acc /= static_cast<Acc>(count);
      }
    }
    if constexpr (is_float_v<T>) {
      return store<T>(acc);
    } else {
      return static_cast<T>(acc);
    }
  }
};

template <ReduceOp kOp>
cudaError_t reduce_values(Elem type, const void* x, void* y, const ReduceLayout& layout,
                          cudaStream_t stream) {
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_reducer<T>(x, y, layout, ValueReducer<T, kOp>{layout.count}, stream);
  });
}

// ---- ArgMax, ArgMin ------------------------------------------------------------------------

// No index yet: index < 0. No constructor, so it can live in shared memory.
template <typename X>
struct ArgAcc {
  X value;
  int64_t index;
};

// A total order on (value, index): a NaN beats every number and the earlier NaN the later one;
// between numbers the larger (smaller) wins, between equals the earlier (later with
// select_last_index) one. The CPU's sequential scan picks this order's best element.
template <typename T, bool kMax>
struct ArgReducer {
  using X = compute_t<T>;
  using Acc = ArgAcc<X>;
  using Out = int64_t;
  bool last;

  __device__ Acc identity() const { return Acc{X(0), -1}; }
  __device__ Acc operator()(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = numeric::is_nan(a.value), b_nan = numeric::is_nan(b.value);
    if (a_nan && b_nan) return a.index < b.index ? a : b;
    if (a_nan || b_nan) return a_nan ? a : b;
    if (kMax ? a.value > b.value : a.value < b.value) return a;
    if (kMax ? b.value > a.value : b.value < a.value) return b;
    return (last ? a.index > b.index : a.index < b.index) ? a : b;
  }
  __device__ void add(Acc& acc, T element, int64_t r) const {
    acc = (*this)(acc, Acc{load(element), r});
  }
  __device__ int64_t finish(Acc acc) const { return acc.index < 0 ? 0 : acc.index; }
};

// ---- CumSum --------------------------------------------------------------------------------

template <typename T>
using scan_t = std::conditional_t<is_float_v<T>, compute_t<T>, int64_t>;

template <typename A>
__device__ __forceinline__ A scan_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return numeric::wrapping_add(a, b);
  } else {
    return a + b;
  }
}

template <typename T>
__device__ __forceinline__ T scan_store(scan_t<T> sum) {
  if constexpr (is_float_v<T>) {
    return store<T>(sum);
  } else {
    return static_cast<T>(sum);
  }
}

// One thread per line, in order (neighbouring lines are neighbours in memory when inner > 1).
template <typename T>
__global__ void cumsum_lines_kernel(const T* x, T* y, AxisLines lines, bool exclusive,
                                    bool reverse) {
  using A = scan_t<T>;
  const int64_t count = lines.outer * lines.inner;
  for (int64_t line = global_thread(); line < count; line += grid_threads()) {
    const int64_t first = line_first(lines, line);
    A sum = A(0);
    for (int64_t k = 0; k < lines.length; ++k) {
      const int64_t i = first + (reverse ? lines.length - 1 - k : k) * lines.inner;
      const A value = static_cast<A>(load(x[i]));
      if (!exclusive) sum = scan_add(sum, value);
      y[i] = scan_store<T>(sum);
      if (exclusive) sum = scan_add(sum, value);
    }
  }
}

// The block's inclusive and exclusive prefix sums of `value` (thread order) and their total.
template <typename A>
struct BlockScan {
  A inclusive, exclusive, total;
};

template <typename A>
__device__ BlockScan<A> block_scan(A value) {
  __shared__ A warp_prefix[kBlockTeamThreads / kWarp];
  __shared__ A block_total;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  A inclusive = value;
  for (int delta = 1; delta < kWarp; delta *= 2) {
    const A before = shuffle(inclusive, lane >= delta ? lane - delta : lane);
    if (lane >= delta) inclusive = scan_add(before, inclusive);
  }
  A exclusive = shuffle(inclusive, lane > 0 ? lane - 1 : 0);
  if (lane == 0) exclusive = A(0);
  __syncthreads();  // the previous scan's readers are done with the shared values
  if (lane == kWarp - 1) warp_prefix[warp] = inclusive;
  __syncthreads();
  if (threadIdx.x == 0) {
    A running = A(0);
    for (int w = 0; w < warps; ++w) {
      const A warp_total = warp_prefix[w];
      warp_prefix[w] = running;
      running = scan_add(running, warp_total);
    }
    block_total = running;
  }
  __syncthreads();
  const A prefix = warp_prefix[warp];
  return {scan_add(prefix, inclusive), scan_add(prefix, exclusive), block_total};
}

// One block per contiguous line (inner == 1), a chunk of blockDim elements at a time.
template <typename T>
__global__ void cumsum_block_kernel(const T* x, T* y, AxisLines lines, bool exclusive,
                                    bool reverse) {
  using A = scan_t<T>;
  const int64_t length = lines.length;
  for (int64_t line = blockIdx.x; line < lines.outer; line += gridDim.x) {
    const T* in = x + line * length;
    T* out = y + line * length;
    A carry = A(0);
    for (int64_t chunk = 0; chunk < length; chunk += blockDim.x) {
      const int64_t k = chunk + threadIdx.x;
      const int64_t i = reverse ? length - 1 - k : k;
      const A value = k < length ? static_cast<A>(load(in[i])) : A(0);
      const BlockScan<A> scan = block_scan(value);
      if (k < length) {
        out[i] = scan_store<T>(scan_add(carry, exclusive ? scan.exclusive : scan.inclusive));
      }
      carry = scan_add(carry, scan.total);
    }
  }
}

}  // namespace

cudaError_t launch_reduce(ReduceOp op, Elem type, const void* x, void* y,
                          const ReduceLayout& layout, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
      return reduce_values<ReduceOp::kSum>(type, x, y, layout, stream);
    case ReduceOp::kMean:
      return reduce_values<ReduceOp::kMean>(type, x, y, layout, stream);
    case ReduceOp::kMax:
      return reduce_values<ReduceOp::kMax>(type, x, y, layout, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_arg_reduce(bool max, bool select_last, Elem type, const void* x,
                              int64_t* indices, const ReduceLayout& layout, cudaStream_t stream) {
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (max) return launch_reducer<T>(x, indices, layout, ArgReducer<T, true>{select_last}, stream);
    return launch_reducer<T>(x, indices, layout, ArgReducer<T, false>{select_last}, stream);
  });
}

cudaError_t launch_cumsum(Elem type, const void* x, void* y, const AxisLines& lines, bool exclusive,
                          bool reverse, cudaStream_t stream) {
  const int64_t count = lines.outer * lines.inner;
  if (count == 0 || lines.length == 0) return cudaGetLastError();
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (lines.inner == 1 && lines.length > 64) {
      cumsum_block_kernel<<<grid_for(lines.outer), kBlockTeamThreads, 0, stream>>>(
          in, out, lines, exclusive, reverse);
    } else {
      cumsum_lines_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, out, lines, exclusive,
                                                                      reverse);
    }
    return cudaGetLastError();
  });
}

}  // namespace ampc::runtime::cuda
