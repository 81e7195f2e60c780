// Launchers of the data-movement kernels (data_movement_kernels.cu): Transpose, Concat, Split,
// Slice, Expand, Tile and Pad as one index map, plus Gather, GatherElements, ScatterElements,
// GatherND, ScatterND, Trilu and Range. Elements move as
// unsigned words of their byte size (wider words where a contiguous run allows), so one kernel
// per size serves every dtype and no value is converted. Plain data only (C++17, no IR).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernels.h"
#include "runtime/scatter_math.h"

namespace ampc::runtime::cuda {

// How output index o of one dim of a MoveMap picks its input index (runtime/cpu/pad.cc's rule).
enum class DimRule : uint8_t {
  kStride,       // o
  kPadConstant,  // o - pad_begin; outside [0, in_dim): the pad value (0 without one)
  kPadReflect,   // mirrored without repeating the edge: -1 -> 1, in_dim -> in_dim - 2
  kPadEdge,      // clamped to [0, in_dim)
  kPadWrap,      // the other end: -1 -> in_dim - 1, in_dim -> 0
};

// `size` elements, walked row-major over `dims`: the element at multi-index o is written to
// out[out_offset + sum o_d * out_strides[d]] from in[in_offset + sum i_d * in_strides[d]], i_d
// being rules[d]'s input index for o_d. in_dims and pad_begin are read by the pad rules only.
// Made on the host with neighbouring stride dims merged; each output element is written once.
struct MoveMap {
  int rank = 0;
  int64_t size = 0;
  int64_t in_offset = 0;
  int64_t out_offset = 0;
  int64_t dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t out_strides[kMaxRank] = {};
  DimRule rules[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t pad_begin[kMaxRank] = {};
};

// Moves elements of `element_bytes` bytes as `map` says; `pad_value` is a device pointer to one
// element (kPadConstant's value) or null for zero. A contiguous map is one cudaMemcpyAsync.
cudaError_t launch_move(const MoveMap& map, int element_bytes, const void* in, void* out,
                        const void* pad_value, cudaStream_t stream);

// out[o, j, e] = data[o, indices[j], e] over outer x count x inner elements of `element_bytes`
// bytes, data's gathered axis of size `dim`; indices are i64 (or i32), negative ones counted
// from the back. One outside [-dim, dim) is recorded as kIndexOutOfRange (element j, value the
// index, bound dim) and its output elements are 0.
cudaError_t launch_gather(int element_bytes, const void* data, const void* indices,
                          bool indices_i64, void* out, int64_t outer, int64_t count, int64_t dim,
                          int64_t inner, ErrorSink sink, cudaStream_t stream);

// The element-wise index ops (GatherElements, ScatterElements): indices of `rank` dims `dims`
// (`total` elements) address data of row-major `data_strides`; an index element's data offset
// is its own multi-index with coordinate `axis` replaced by its value, of data dim `axis_dim`.
struct ElementsMap {
  int rank = 0;
  int axis = 0;
  int64_t axis_dim = 0;
  int64_t total = 0;
  int64_t dims[kMaxRank] = {};
  int64_t data_strides[kMaxRank] = {};
};

// out[i] = data[offset of index element i]; indices are i64 (or i32), negative ones counted from
// the back. One outside [-axis_dim, axis_dim) is recorded as kIndexOutOfRange and its output
// element is 0.
cudaError_t launch_gather_elements(int element_bytes, const void* data, const void* indices,
                                   bool indices_i64, void* out, const ElementsMap& map,
                                   ErrorSink sink, cudaStream_t stream);

// `out` holds the data; each update i is combined into out[offset of index element i], one
// thread per line along the axis walking it in index order, so duplicates apply in the CPU's
// order. `type` is f32, f16, bf16, i64 or i32; a bad index is recorded and its update skipped.
cudaError_t launch_scatter_elements(Elem type, numeric::ScatterReduction reduction,
                                    const void* indices, bool indices_i64, const void* updates,
                                    void* out, const ElementsMap& map, ErrorSink sink,
                                    cudaStream_t stream);

// The tuple index ops (GatherND, ScatterND): `tuples` tuples of `k` indices, `per_batch` to a
// batch whose data starts `batch_stride` elements after the last; index t of a tuple addresses
// a dim of size dims[t] and stride strides[t]; each tuple addresses `slice` contiguous elements.
struct TupleMap {
  int k = 0;
  int64_t tuples = 0;
  int64_t per_batch = 1;
  int64_t batch_stride = 0;
  int64_t slice = 1;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

// out[j, e] = data[offset of tuple j + e]; a bad index is recorded (element j * k + t) and its
// slice is 0.
cudaError_t launch_gather_nd(int element_bytes, const void* data, const void* indices,
                             bool indices_i64, void* out, const TupleMap& map, ErrorSink sink,
                             cudaStream_t stream);

// `out` holds the data; update slice j is combined into the slice of tuple j, one thread per
// slice element walking the tuples in order (duplicates apply in the CPU's order). Types as
// launch_scatter_elements'.
cudaError_t launch_scatter_nd(Elem type, numeric::ScatterReduction reduction, const void* indices,
                              bool indices_i64, const void* updates, void* out, const TupleMap& map,
                              ErrorSink sink, cudaStream_t stream);

// Trilu over `total` elements of [..., rows, cols] matrices: element (i, j) is kept where
// j - i >= k (upper) or j - i <= k (lower), else 0. `k` is a device pointer to one i64, or null
// for 0. `in` and `out` may be the same buffer.
cudaError_t launch_trilu(int element_bytes, const void* in, void* out, int64_t total, int64_t rows,
                         int64_t cols, const int64_t* k, bool upper, cudaStream_t stream);

// out[i] = start + i * delta for i < n, as runtime/cpu/constant.cc computes it: in the element
// type for f32 and f64 (two roundings, no FMA), in wrapping 64-bit arithmetic for i32 and i64.
// `start` and `delta` are device pointers to one element of `type`.
cudaError_t launch_range(Elem type, const void* start, const void* delta, void* out, int64_t n,
                         cudaStream_t stream);

}  // namespace ampc::runtime::cuda
