// The data-movement kernels: one index-map kernel (with a shared-memory tiled variant for maps
// that transpose the input's contiguous dim), Gather, GatherElements, ScatterElements, GatherND,
// ScatterND, Trilu and Range. Elements move as
// unsigned words of their size, or as wider words (up to 16 bytes) where the innermost dim is
// contiguous on both sides and the addresses allow, so every dtype moves bit-exactly. Each output
// element is written once, from its own input elements.
#include "runtime/cuda/data_movement_kernels.h"
#include "runtime/cuda/elementwise.cuh"

namespace ampc::runtime::cuda {
namespace {

// 16 bytes moved as one access.
struct alignas(16) Word16 {
  uint64_t lo;
  uint64_t hi;
};

// Calls fn(Tag<Word>{}) with the unsigned word of `bytes` bytes.
template <typename Fn>
cudaError_t visit_word(int bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn(Tag<uint8_t>{});
    case 2:
      return fn(Tag<uint16_t>{});
    case 4:
      return fn(Tag<uint32_t>{});
    case 8:
      return fn(Tag<uint64_t>{});
    case 16:
      return fn(Tag<Word16>{});
    default:
      return cudaErrorInvalidValue;
  }
}

bool aligned_to(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// ---- Index map -------------------------------------------------------------------------------

// The input index output index `o` of a pad dim reads, or -1 for the constant; as
// source_index in runtime/cpu/pad.cc (inference keeps reflect pads below the dim).
__device__ __forceinline__ int64_t pad_source(int64_t o, int64_t begin, int64_t n, DimRule rule) {
  const int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  switch (rule) {
    case DimRule::kPadReflect:
      return i < 0 ? -i : 2 * (n - 1) - i;
    case DimRule::kPadEdge:
      return i < 0 ? 0 : n - 1;
    case DimRule::kPadWrap:
      return i < 0 ? i + n : i - n;
    default:
      return -1;
  }
}

// kRules: some dim has a pad rule (else every dim is a plain stride).
template <typename Word, bool kRules>
__global__ void move_kernel(const Word* in, Word* out, MoveMap map, const Word* pad_value) {
  for (int64_t i = global_thread(); i < map.size; i += grid_threads()) {
    int64_t rest = i;
    int64_t from = 0;
    int64_t to = 0;
    bool inside = true;
    for (int d = map.rank - 1; d >= 0; --d) {
      const int64_t o = rest % map.dims[d];
      rest /= map.dims[d];
      to += o * map.out_strides[d];
      int64_t source = o;
      if constexpr (kRules) {
        if (map.rules[d] != DimRule::kStride) {
          source = pad_source(o, map.pad_begin[d], map.in_dims[d], map.rules[d]);
          if (source < 0) inside = false;
        }
      }
      from += source * map.in_strides[d];
    }
    if (inside) {
      out[to] = in[from];
    } else {
      out[to] = pad_value != nullptr ? *pad_value : Word{};
    }
  }
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// A stride-only map whose input-contiguous dim `p` is not the output's last: each block moves
// kTile x kTile tiles of (dim p, last dim) through shared memory, reading along p and writing
// along the last dim, so both sides are coalesced. Work items are (batch, p tile, last tile),
// the batch running over the other dims.
template <typename Word>
__global__ void transpose_tiles_kernel(const Word* in, Word* out, MoveMap map, int p,
                                       int64_t p_tiles, int64_t last_tiles, int64_t items) {
  __shared__ Word tile[kTile][kTile + 1];
  const int last = map.rank - 1;
  const int64_t p_size = map.dims[p];
  const int64_t last_size = map.dims[last];
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t last_begin = (item % last_tiles) * kTile;
    const int64_t p_begin = (item / last_tiles % p_tiles) * kTile;
    int64_t rest = item / last_tiles / p_tiles;
    int64_t from = 0;
    int64_t to = 0;
    for (int d = last - 1; d >= 0; --d) {
      if (d == p) continue;
      const int64_t o = rest % map.dims[d];
      rest /= map.dims[d];
      from += o * map.in_strides[d];
      to += o * map.out_strides[d];
    }
    // tile[r][c] holds the element at (p_begin + c, last_begin + r).
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const int64_t q = p_begin + threadIdx.x;
      const int64_t l = last_begin + r;
      if (q < p_size && l < last_size) {
        tile[r][threadIdx.x] = in[from + q * map.in_strides[p] + l * map.in_strides[last]];
      }
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const int64_t q = p_begin + r;
      const int64_t l = last_begin + threadIdx.x;
      if (q < p_size && l < last_size) {
        out[to + q * map.out_strides[p] + l * map.out_strides[last]] = tile[threadIdx.x][r];
      }
    }
    __syncthreads();
  }
}

// The dim that reads the input contiguously when the map transposes it away from the output's
// last dim (which must then be contiguous in the output), or -1.
int transposed_dim(const MoveMap& map) {
  const int last = map.rank - 1;
  if (map.rank < 2 || map.in_strides[last] == 1 || map.out_strides[last] != 1) return -1;
  for (int d = 0; d < last; ++d) {
    if (map.in_strides[d] == 1) return d;
  }
  return -1;
}

bool has_rules(const MoveMap& map) {
  for (int d = 0; d < map.rank; ++d) {
    if (map.rules[d] != DimRule::kStride) return true;
  }
  return false;
}

// The widest word (at most 16 bytes) the map can move instead of `element_bytes`: the last dim
// contiguous on both sides, its size and every other stride a multiple of the word's elements,
// both addresses aligned to it. Rewrites `map` in units of that word.
int widen(MoveMap& map, int element_bytes, const void* in, const void* out) {
  const int last = map.rank - 1;
  if (has_rules(map) || map.in_strides[last] != 1 || map.out_strides[last] != 1) {
    return element_bytes;
  }
  for (int word = 16; word > element_bytes; word /= 2) {
    const int64_t factor = word / element_bytes;
    bool fits = map.dims[last] % factor == 0 && aligned_to(in, word) && aligned_to(out, word);
    for (int d = 0; fits && d < last; ++d) {
      fits = map.in_strides[d] % factor == 0 && map.out_strides[d] % factor == 0;
    }
    if (!fits) continue;
    map.dims[last] /= factor;
    map.size /= factor;
    for (int d = 0; d < last; ++d) {
      map.in_strides[d] /= factor;
      map.out_strides[d] /= factor;
    }
    return word;
  }
  return element_bytes;
}

}  // namespace

cudaError_t launch_move(const MoveMap& map, int element_bytes, const void* in, void* out,
                        const void* pad_value, cudaStream_t stream) {
  if (map.size == 0) return cudaGetLastError();
  // The offsets go into the pointers, so the kernels and the alignment checks see none.
  const char* from = static_cast<const char*>(in) + map.in_offset * element_bytes;
  char* to = static_cast<char*>(out) + map.out_offset * element_bytes;
  MoveMap local = map;
  local.in_offset = 0;
  local.out_offset = 0;
  const int last = local.rank - 1;
  if (local.rank == 1 && !has_rules(local) && local.in_strides[0] == 1 &&
      local.out_strides[0] == 1) {
    return cudaMemcpyAsync(to, from, local.size * element_bytes, cudaMemcpyDeviceToDevice, stream);
  }
  const int p = has_rules(local) ? -1 : transposed_dim(local);
  const int word = widen(local, element_bytes, from, to);
  return visit_word(word, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    const Word* source = reinterpret_cast<const Word*>(from);
    Word* target = reinterpret_cast<Word*>(to);
    if (p >= 0) {
      const int64_t p_tiles = (local.dims[p] + kTile - 1) / kTile;
      const int64_t last_tiles = (local.dims[last] + kTile - 1) / kTile;
      const int64_t items = local.size / local.dims[p] / local.dims[last] * p_tiles * last_tiles;
      const unsigned blocks = static_cast<unsigned>(items < (1 << 20) ? items : (1 << 20));
      transpose_tiles_kernel<Word><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(
          source, target, local, p, p_tiles, last_tiles, items);
    } else if (has_rules(local)) {
      move_kernel<Word, true><<<blocks_for(local.size), kThreads, 0, stream>>>(
          source, target, local, static_cast<const Word*>(pad_value));
    } else {
      move_kernel<Word, false>
          <<<blocks_for(local.size), kThreads, 0, stream>>>(source, target, local, nullptr);
    }
    return cudaGetLastError();
  });
}

// ---- Gather ----------------------------------------------------------------------------------

namespace {

template <typename Word, typename Index>
__global__ void gather_kernel(const Word* data, const Index* indices, Word* out, int64_t total,
                              int64_t count, int64_t dim, int64_t inner, ErrorSink sink) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t e = i % inner;
    const int64_t j = i / inner % count;
    const int64_t o = i / inner / count;
    int64_t index = static_cast<int64_t>(indices[j]);
    if (index < -dim || index >= dim) {
      // One thread per bad index records it: the first element of its first block.
      if (e == 0 && o == 0) {
        record_device_error(sink.error, kIndexOutOfRange, sink.step, j, index, dim);
      }
      out[i] = Word{};
      continue;
    }
    if (index < 0) index += dim;
    out[i] = data[(o * dim + index) * inner + e];
  }
}

// Calls `launch` with `indices` as the const int64_t* or const int32_t* it is, then returns
// the launch's error.
template <typename Launch>
cudaError_t with_indices(const void* indices, bool indices_i64, Launch&& launch) {
  if (indices_i64) {
    launch(static_cast<const int64_t*>(indices));
  } else {
    launch(static_cast<const int32_t*>(indices));
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gather(int element_bytes, const void* data, const void* indices,
                          bool indices_i64, void* out, int64_t outer, int64_t count, int64_t dim,
                          int64_t inner, ErrorSink sink, cudaStream_t stream) {
  const int64_t total_elements = outer * count * inner;
  if (total_elements == 0) return cudaGetLastError();
  // Each gathered block of inner elements moves as the widest word that divides it.
  int word = element_bytes;
  for (int wide = 16; wide > element_bytes; wide /= 2) {
    if ((inner * element_bytes) % wide == 0 && aligned_to(data, wide) && aligned_to(out, wide)) {
      word = wide;
      break;
    }
  }
  const int64_t words = inner * element_bytes / word;
  const int64_t total = outer * count * words;
  return visit_word(word, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    const Word* from = static_cast<const Word*>(data);
    Word* to = static_cast<Word*>(out);
    return with_indices(indices, indices_i64, [&](auto index) {
      gather_kernel<<<blocks_for(total), kThreads, 0, stream>>>(from, index, to, total, count, dim,
                                                                words, sink);
    });
  });
}

// ---- GatherElements, ScatterElements ---------------------------------------------------------

namespace {

// The data offset of index element `i` whose value is `index` (already wrapped), skipping the
// axis coordinate of `i` itself.
__device__ __forceinline__ int64_t element_offset(const ElementsMap& map, int64_t i,
                                                  int64_t index) {
  int64_t offset = index * map.data_strides[map.axis];
  for (int d = map.rank - 1; d >= 0; --d) {
    const int64_t coord = i % map.dims[d];
    i /= map.dims[d];
    if (d != map.axis) offset += coord * map.data_strides[d];
  }
  return offset;
}

template <typename Word, typename Index>
__global__ void gather_elements_kernel(const Word* data, const Index* indices, Word* out,
                                       ElementsMap map, ErrorSink sink) {
  for (int64_t i = global_thread(); i < map.total; i += grid_threads()) {
    int64_t index = static_cast<int64_t>(indices[i]);
    if (index < -map.axis_dim || index >= map.axis_dim) {
      record_device_error(sink.error, kIndexOutOfRange, sink.step, i, index, map.axis_dim);
      out[i] = Word{};
      continue;
    }
    if (index < 0) index += map.axis_dim;
    out[i] = data[element_offset(map, i, index)];
  }
}

// One thread per line of the indices along the axis: the lines own disjoint data elements, and
// each walks its updates in order.
template <typename T, typename Index>
__global__ void scatter_elements_kernel(numeric::ScatterReduction reduction, const Index* indices,
                                        const T* updates, T* out, ElementsMap map, int64_t lines,
                                        int64_t inner, ErrorSink sink) {
  const int64_t along = map.dims[map.axis];
  for (int64_t line = global_thread(); line < lines; line += grid_threads()) {
    // Lines are (outer, inner) pairs around the axis of the row-major indices.
    const int64_t first = (line / inner) * along * inner + line % inner;
    for (int64_t a = 0; a < along; ++a) {
      const int64_t i = first + a * inner;
      int64_t index = static_cast<int64_t>(indices[i]);
      if (index < -map.axis_dim || index >= map.axis_dim) {
        record_device_error(sink.error, kIndexOutOfRange, sink.step, i, index, map.axis_dim);
        continue;
      }
      if (index < 0) index += map.axis_dim;
      T& to = out[element_offset(map, i, index)];
      if (reduction == numeric::ScatterReduction::kNone) {
        to = updates[i];
      } else {
        to = store<T>(numeric::scatter_combine(reduction, load(to), load(updates[i])));
      }
    }
  }
}

}  // namespace

cudaError_t launch_gather_elements(int element_bytes, const void* data, const void* indices,
                                   bool indices_i64, void* out, const ElementsMap& map,
                                   ErrorSink sink, cudaStream_t stream) {
  if (map.total == 0) return cudaGetLastError();
  if (element_bytes > 8) return cudaErrorInvalidValue;
  return visit_word(element_bytes, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    const Word* from = static_cast<const Word*>(data);
    Word* to = static_cast<Word*>(out);
    return with_indices(indices, indices_i64, [&](auto index) {
      gather_elements_kernel<<<blocks_for(map.total), kThreads, 0, stream>>>(from, index, to, map,
                                                                             sink);
    });
  });
}

cudaError_t launch_scatter_elements(Elem type, numeric::ScatterReduction reduction,
                                    const void* indices, bool indices_i64, const void* updates,
                                    void* out, const ElementsMap& map, ErrorSink sink,
                                    cudaStream_t stream) {
  if (map.total == 0) return cudaGetLastError();
  int64_t inner = 1;
  for (int d = map.axis + 1; d < map.rank; ++d) inner *= map.dims[d];
  const int64_t lines = map.total / map.dims[map.axis];
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* from = static_cast<const T*>(updates);
    T* to = static_cast<T*>(out);
    return with_indices(indices, indices_i64, [&](auto index) {
      scatter_elements_kernel<<<blocks_for(lines), kThreads, 0, stream>>>(
          reduction, index, from, to, map, lines, inner, sink);
    });
  });
}

// ---- GatherND, ScatterND ---------------------------------------------------------------------

namespace {

// The data offset of tuple j's slice, or -1 after recording its first bad index (when `record`).
template <typename Index>
__device__ __forceinline__ int64_t tuple_offset(const TupleMap& map, const Index* indices,
                                                int64_t j, bool record, ErrorSink sink) {
  int64_t offset = (j / map.per_batch) * map.batch_stride;
  for (int t = 0; t < map.k; ++t) {
    int64_t index = static_cast<int64_t>(indices[j * map.k + t]);
    if (index < -map.dims[t] || index >= map.dims[t]) {
      if (record) {
        record_device_error(sink.error, kIndexOutOfRange, sink.step, j * map.k + t, index,
                            map.dims[t]);
      }
      return -1;
    }
    if (index < 0) index += map.dims[t];
    offset += index * map.strides[t];
  }
  return offset;
}

template <typename Word, typename Index>
__global__ void gather_nd_kernel(const Word* data, const Index* indices, Word* out, TupleMap map,
                                 ErrorSink sink) {
  const int64_t total = map.tuples * map.slice;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t j = i / map.slice;
    const int64_t e = i % map.slice;
    const int64_t offset = tuple_offset(map, indices, j, e == 0, sink);
    out[i] = offset < 0 ? Word{} : data[offset + e];
  }
}

// One thread per slice element, walking the tuples in order: the threads own disjoint data
// elements (element e of every slice), and duplicates apply in index order.
template <typename T, typename Index>
__global__ void scatter_nd_kernel(numeric::ScatterReduction reduction, const Index* indices,
                                  const T* updates, T* out, TupleMap map, ErrorSink sink) {
  for (int64_t e = global_thread(); e < map.slice; e += grid_threads()) {
    for (int64_t j = 0; j < map.tuples; ++j) {
      const int64_t offset = tuple_offset(map, indices, j, e == 0, sink);
      if (offset < 0) continue;
      T& to = out[offset + e];
      const T update = updates[j * map.slice + e];
      if (reduction == numeric::ScatterReduction::kNone) {
        to = update;
      } else {
        to = store<T>(numeric::scatter_combine(reduction, load(to), load(update)));
      }
    }
  }
}

}  // namespace

cudaError_t launch_gather_nd(int element_bytes, const void* data, const void* indices,
                             bool indices_i64, void* out, const TupleMap& map, ErrorSink sink,
                             cudaStream_t stream) {
  const int64_t total = map.tuples * map.slice;
  if (total == 0) return cudaGetLastError();
  if (element_bytes > 8) return cudaErrorInvalidValue;
  return visit_word(element_bytes, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    const Word* from = static_cast<const Word*>(data);
    Word* to = static_cast<Word*>(out);
    return with_indices(indices, indices_i64, [&](auto index) {
      gather_nd_kernel<<<blocks_for(total), kThreads, 0, stream>>>(from, index, to, map, sink);
    });
  });
}

cudaError_t launch_scatter_nd(Elem type, numeric::ScatterReduction reduction, const void* indices,
                              bool indices_i64, const void* updates, void* out, const TupleMap& map,
                              ErrorSink sink, cudaStream_t stream) {
  if (map.tuples * map.slice == 0) return cudaGetLastError();
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* from = static_cast<const T*>(updates);
    T* to = static_cast<T*>(out);
    return with_indices(indices, indices_i64, [&](auto index) {
      scatter_nd_kernel<<<blocks_for(map.slice), kThreads, 0, stream>>>(reduction, index, from, to,
                                                                        map, sink);
    });
  });
}

// ---- Trilu -----------------------------------------------------------------------------------

namespace {

template <typename Word>
__global__ void trilu_kernel(const Word* in, Word* out, int64_t total, int64_t rows, int64_t cols,
                             const int64_t* k_value, bool upper) {
  const int64_t k = k_value != nullptr ? *k_value : 0;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t col = i % cols;
    const int64_t row = i / cols % rows;
    const bool keep = upper ? col - row >= k : col - row <= k;
    out[i] = keep ? in[i] : Word{};
  }
}

}  // namespace

cudaError_t launch_trilu(int element_bytes, const void* in, void* out, int64_t total, int64_t rows,
                         int64_t cols, const int64_t* k, bool upper, cudaStream_t stream) {
  if (total == 0) return cudaGetLastError();
  if (element_bytes > 8) return cudaErrorInvalidValue;
  return visit_word(element_bytes, [&](auto tag) {
    using Word = typename decltype(tag)::type;
    trilu_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const Word*>(in), static_cast<Word*>(out), total, rows, cols, k, upper);
    return cudaGetLastError();
  });
}

// ---- Range -----------------------------------------------------------------------------------

namespace {

// Two roundings, as the CPU's `start + T(i) * delta`: the _rn intrinsics are never contracted.
__device__ __forceinline__ float range_element(float start, float delta, int64_t i) {
  return __fadd_rn(start, __fmul_rn(static_cast<float>(i), delta));
}
__device__ __forceinline__ double range_element(double start, double delta, int64_t i) {
  return __dadd_rn(start, __dmul_rn(static_cast<double>(i), delta));
}
// Unsigned, so a range spanning more than INT64_MAX wraps instead of overflowing.
template <typename I>
__device__ __forceinline__ I range_element(I start, I delta, int64_t i) {
  const uint64_t value =
      static_cast<uint64_t>(static_cast<int64_t>(start)) +
      static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(delta));
  return static_cast<I>(static_cast<int64_t>(value));
}

template <typename T>
__global__ void range_kernel(const T* start, const T* delta, T* out, int64_t n) {
  const T first = *start;
  const T step = *delta;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    out[i] = range_element(first, step, i);
  }
}

template <typename T>
cudaError_t launch_range_of(const void* start, const void* delta, void* out, int64_t n,
                            cudaStream_t stream) {
  range_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const T*>(start), static_cast<const T*>(delta), static_cast<T*>(out), n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_range(Elem type, const void* start, const void* delta, void* out, int64_t n,
                         cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  switch (type) {
    case Elem::kF32:
      return launch_range_of<float>(start, delta, out, n, stream);
    case Elem::kF64:
      return launch_range_of<double>(start, delta, out, n, stream);
    case Elem::kI64:
      return launch_range_of<int64_t>(start, delta, out, n, stream);
    case Elem::kI32:
      return launch_range_of<int32_t>(start, delta, out, n, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ampc::runtime::cuda
