// Device-side machinery the *_kernels.cu files share: the storage type of each Elem, grid
// shapes, 16-byte vector access on contiguous data and the offsets of a broadcast layout.
// Included by nvcc only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/kernels.h"
#include "runtime/element_types.h"

namespace ampc::runtime::cuda {

inline constexpr int kThreads = 256;

// Blocks for n work items of kThreads each, capped so a grid-stride loop covers the rest.
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// V elements of T moved as one aligned access (16 bytes at most).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Elements per 16-byte access for the wider of two element types.
template <typename A, typename B>
inline constexpr int kPackOf = 16 / (sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B));

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Operand k's element offset for output element i of a broadcast layout.
template <int N>
__device__ __forceinline__ void layout_offsets(const Layout<N>& layout, int64_t i,
                                               int64_t (&offsets)[N]) {
  for (int k = 0; k < N; ++k) offsets[k] = 0;
  for (int d = layout.rank - 1; d >= 0; --d) {
    const int64_t dim = layout.dims[d];
    const int64_t index = i % dim;
    i /= dim;
    for (int k = 0; k < N; ++k) offsets[k] += index * layout.strides[k][d];
  }
}

// Calls fn(type_tag) with a value of the storage type of `elem` (for dispatch in launchers).
template <typename T>
struct Tag {
  using type = T;
};

template <typename Fn>
cudaError_t visit_elem(Elem elem, Fn&& fn) {
  switch (elem) {
    case Elem::kF32:
      return fn(Tag<float>{});
    case Elem::kF16:
      return fn(Tag<Float16>{});
    case Elem::kBF16:
      return fn(Tag<BFloat16>{});
    case Elem::kF64:
      return fn(Tag<double>{});
    case Elem::kI64:
      return fn(Tag<int64_t>{});
    case Elem::kI32:
      return fn(Tag<int32_t>{});
    case Elem::kI8:
      return fn(Tag<int8_t>{});
    case Elem::kU8:
      return fn(Tag<uint8_t>{});
    case Elem::kBool:
      return fn(Tag<bool>{});
    case Elem::kF8E4M3FN:
      return fn(Tag<F8E4M3FN>{});
    case Elem::kF8E5M2:
      return fn(Tag<F8E5M2>{});
  }
  return cudaErrorInvalidValue;
}

// The float element types the float kernels are instantiated for.
template <typename Fn>
cudaError_t visit_float_elem(Elem elem, Fn&& fn) {
  switch (elem) {
    case Elem::kF32:
      return fn(Tag<float>{});
    case Elem::kF16:
      return fn(Tag<Float16>{});
    case Elem::kBF16:
      return fn(Tag<BFloat16>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// The index (and class label) types: i64 and i32.
template <typename Fn>
cudaError_t visit_index_elem(Elem elem, Fn&& fn) {
  switch (elem) {
    case Elem::kI64:
      return fn(Tag<int64_t>{});
    case Elem::kI32:
      return fn(Tag<int32_t>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// Float element types plus the integers arithmetic is instantiated for.
template <typename Fn>
cudaError_t visit_numeric_elem(Elem elem, Fn&& fn) {
  switch (elem) {
    case Elem::kI64:
      return fn(Tag<int64_t>{});
    case Elem::kI32:
      return fn(Tag<int32_t>{});
    default:
      return visit_float_elem(elem, fn);
  }
}

// Dropout's ratio operand, of any float type, as the double the CPU reads (DropoutArgs).
__device__ __forceinline__ double read_ratio(const DropoutArgs& args) {
  if (args.ratio == nullptr) return args.default_ratio;
  switch (args.ratio_type) {
    case Elem::kF16:
      return static_cast<float>(*static_cast<const Float16*>(args.ratio));
    case Elem::kBF16:
      return static_cast<float>(*static_cast<const BFloat16*>(args.ratio));
    case Elem::kF64:
      return *static_cast<const double*>(args.ratio);
    default:
      return *static_cast<const float*>(args.ratio);
  }
}

}  // namespace ampc::runtime::cuda
