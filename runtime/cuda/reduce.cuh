// Device machinery of the reduction-shaped kernels (reduce_kernels.cu, softmax_loss_kernels.cu):
// teams of threads that each own one row (one output, one line) and reduce it together. A team
// is a warp (short contiguous rows), a whole block (long contiguous rows) or the threads of one
// column of a 2-D block (rows whose elements are strided: 32 neighbouring rows side by side in
// x, so every load is coalesced, the row's elements split over y).
//
// Every team walks rows in a grid-stride loop whose bound is uniform over the team's barriers;
// a thread whose row is past the end still joins the reductions with the identity. A team
// combines its threads' partial results in a fixed order, so results are deterministic, and
// every thread of the team receives the one result.
// Included by nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "runtime/cuda/elementwise.cuh"
#include "runtime/cuda/reduce_kernels.h"

namespace ampc::runtime::cuda {

inline constexpr int kWarp = 32;
// Threads of a block team.
inline constexpr int kBlockTeamThreads = 512;
// Most threads along y of a column team's block (blockDim = (kWarp, ranks)).
inline constexpr int kMaxColumnRanks = 32;
// The largest team block: the team kernels are compiled for it (__launch_bounds__).
inline constexpr int kMaxTeamThreads = kWarp * kMaxColumnRanks;

// `value` of lane `lane` of the warp, moved as 32-bit words (any trivially copyable type).
template <typename V>
__device__ __forceinline__ V shuffle(V value, int lane) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are whole 32-bit words");
  constexpr int kWords = sizeof(V) / 4;
  uint32_t words[kWords];
  memcpy(words, &value, sizeof(V));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_sync(0xffffffffu, words[w], lane);
  memcpy(&value, words, sizeof(V));
  return value;
}

template <typename V>
__device__ __forceinline__ V shuffle_down(V value, int delta) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are whole 32-bit words");
  constexpr int kWords = sizeof(V) / 4;
  uint32_t words[kWords];
  memcpy(words, &value, sizeof(V));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_down_sync(0xffffffffu, words[w], delta);
  memcpy(&value, words, sizeof(V));
  return value;
}

// The warp's values combined as a tree (lane i with lane i + delta), given to every lane.
template <typename Acc, typename Combine>
__device__ __forceinline__ Acc warp_all_reduce(Acc acc, Combine combine) {
  for (int delta = kWarp / 2; delta > 0; delta /= 2) acc = combine(acc, shuffle_down(acc, delta));
  return shuffle(acc, 0);
}

// One warp per row; blocks of kThreads.
struct WarpTeam {
  __device__ int rank() const { return threadIdx.x % kWarp; }
  __device__ int size() const { return kWarp; }
  __device__ int64_t first() const { return global_thread() / kWarp; }
  __device__ int64_t stride() const { return grid_threads() / kWarp; }
  __device__ int64_t offset() const { return 0; }

  template <typename Acc, typename Combine>
  __device__ Acc reduce(Acc acc, Combine combine) const {
    return warp_all_reduce(acc, combine);
  }
};

// One block per row; blocks of kBlockTeamThreads.
struct BlockTeam {
  __device__ int rank() const { return threadIdx.x; }
  __device__ int size() const { return blockDim.x; }
  __device__ int64_t first() const { return blockIdx.x; }
  __device__ int64_t stride() const { return gridDim.x; }
  __device__ int64_t offset() const { return 0; }

  // Each warp's tree, then thread 0 combines the warps' results in warp order.
  template <typename Acc, typename Combine>
  __device__ Acc reduce(Acc acc, Combine combine) const {
    __shared__ Acc partial[kBlockTeamThreads / kWarp];
    acc = warp_all_reduce(acc, combine);
    __syncthreads();  // the previous reduction's readers are done with `partial`
    if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      Acc total = partial[0];
      for (unsigned w = 1; w < blockDim.x / kWarp; ++w) total = combine(total, partial[w]);
      partial[0] = total;
    }
    __syncthreads();
    return partial[0];
  }
};

// Rows side by side in x (row = first + threadIdx.x), each split over the blockDim.y threads of
// its column; blocks of (kWarp, ranks <= kMaxColumnRanks).
struct ColumnTeam {
  __device__ int rank() const { return threadIdx.y; }
  __device__ int size() const { return blockDim.y; }
  __device__ int64_t first() const { return static_cast<int64_t>(blockIdx.x) * kWarp; }
  __device__ int64_t stride() const { return static_cast<int64_t>(gridDim.x) * kWarp; }
  __device__ int64_t offset() const { return threadIdx.x; }

  // The column's values combined in y order by every thread of the column.
  template <typename Acc, typename Combine>
  __device__ Acc reduce(Acc acc, Combine combine) const {
    __shared__ Acc partial[kMaxColumnRanks][kWarp];
    __syncthreads();  // the previous reduction's readers are done with `partial`
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    Acc total = partial[0][threadIdx.x];
    for (unsigned r = 1; r < blockDim.y; ++r) total = combine(total, partial[r][threadIdx.x]);
    return total;
  }
};

// Whether contiguous rows of `length` elements go to block teams rather than warps: long rows,
// or rows too few for warps to fill the GPU.
inline bool block_team_for(int64_t rows, int64_t length) {
  return length > 4096 || (length > 256 && rows < 4096);
}

// Launch shapes of the teams for `rows` rows.
inline unsigned grid_for(int64_t blocks) {
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}
inline unsigned warp_team_blocks(int64_t rows) {
  return grid_for((rows + kThreads / kWarp - 1) / (kThreads / kWarp));
}
inline unsigned column_team_blocks(int64_t rows) { return grid_for((rows + kWarp - 1) / kWarp); }
// More threads per column only where there are few columns to spread over the GPU.
inline dim3 column_team_threads(int64_t rows, int64_t length) {
  const bool deep = length >= 1024 && rows < 64 * 1024;
  return dim3(kWarp, deep ? kMaxColumnRanks : 8);
}

// Combiners.
struct Plus {
  template <typename A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};

// std::max's rule, as the CPU's softmax: a NaN candidate never replaces the maximum.
struct MaxSkipNan {
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

// The first element of a row (o, i) of `lines`: o * length * inner + i.
__device__ __forceinline__ int64_t line_first(const AxisLines& lines, int64_t line) {
  return (line / lines.inner) * lines.length * lines.inner + line % lines.inner;
}

}  // namespace ampc::runtime::cuda
