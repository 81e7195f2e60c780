// CPU kernels for data movement: Concat, Split, Gather, Slice, Transpose and Trilu.
//
// Every output element is an input element moved (or, for Trilu, a zero), so the kernels move
// bytes: Concat, Split and Gather copy contiguous blocks, the others move elements as unsigned
// words of the element size. One kernel per element size serves every dtype, fp8 and bool
// included, and no value is ever converted.
//
// Sizes come from the types inferred at load. Slice re-reads starts/ends/axes/steps (where each
// dim starts and how it steps) and Split its `split` sizes (an omitted output still takes its
// piece), both resolved as inference resolves them and checked against the inferred shapes.
// Gather checks each index, since indices are data.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/slicing.h"

namespace ampc::runtime::cpu {
namespace {

using ops::dims_product;
using ops::strides_of;

// ---- Concat, Split ----------------------------------------------------------------------------

// The output is `outer` blocks; block o holds block o of each input in turn.
absl::Status concat_kernel(const KernelContext& ctx) {
  const TensorArg& out = ctx.output(0);
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), out.shape().size());
  const int64_t outer = dims_product(out.shape(), 0, axis);
  const int64_t out_block = out.byte_size() / std::max<int64_t>(outer, 1);
  std::byte* to = static_cast<std::byte*>(out.data);
  int64_t block_offset = 0;
  for (const TensorArg& in : ctx.inputs) {
    const int64_t block = in.byte_size() / std::max<int64_t>(outer, 1);
    const std::byte* from = static_cast<const std::byte*>(in.data);
    parallel_for(outer, std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(block, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     std::memcpy(to + o * out_block + block_offset, from + o * block, block);
                   }
                 });
    block_offset += block;
  }
  return absl::OkStatus();
}

// The size along the axis of each output, omitted ones included, as inference cuts the dim:
// the `split` input (from opset 13) or attribute, else equal chunks of ceil(dim / n) with a
// smaller last one (num_outputs, from opset 18, equals the number of outputs).
std::vector<int64_t> split_sizes(const KernelContext& ctx, int64_t dim) {
  if (ctx.has_input(1)) return index_values(ctx.input(1));
  if (ctx.node.find_attr("split")) return ctx.node.ints_attr("split");
  const int64_t count = ctx.outputs.size();
  const int64_t chunk = (dim + count - 1) / count;
  std::vector<int64_t> sizes(count, chunk);
  sizes.back() = dim - chunk * (count - 1);
  return sizes;
}

// The inverse of Concat: output k takes the next sizes[k] slices along the axis of each block.
absl::Status split_kernel(const KernelContext& ctx) {
  const TensorArg& in = ctx.input(0);
  const Shape& shape = in.shape();
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), shape.size());
  const int64_t outer = dims_product(shape, 0, axis);
  const int64_t slice_bytes = dims_product(shape, axis + 1, shape.size()) * dtype_size(in.dtype());
  const int64_t in_block = shape[axis] * slice_bytes;
  const std::vector<int64_t> sizes = split_sizes(ctx, shape[axis]);
  int64_t total = 0;
  bool valid = sizes.size() == ctx.outputs.size();
  for (size_t k = 0; valid && k < sizes.size(); ++k) {
    valid = sizes[k] >= 0 && (!ctx.outputs[k].present() ||
                              ctx.outputs[k].byte_size() == outer * sizes[k] * slice_bytes);
    total += sizes[k];
  }
  if (!valid || total != shape[axis]) {  // values other than those inference saw
    return absl::InvalidArgumentError(
        str_cat("split ", shape_to_string(sizes), " does not give the inferred output shapes"));
  }
  const std::byte* from = static_cast<const std::byte*>(in.data);
  int64_t block_offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t block = sizes[k] * slice_bytes;
    const TensorArg& out = ctx.outputs[k];
    if (out.present()) {
      std::byte* to = static_cast<std::byte*>(out.data);
      parallel_for(outer, std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(block, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t o = begin; o < end; ++o) {
                       std::memcpy(to + o * block, from + o * in_block + block_offset, block);
                     }
                   });
    }
    block_offset += block;
  }
  return absl::OkStatus();
}

// ---- Gather -----------------------------------------------------------------------------------

// out[outer, j, inner] = data[outer, indices[j], inner]; a negative index counts from the back
// (opset 11), and one outside [-dim, dim) is an error naming it and its position.
absl::Status gather_kernel(const KernelContext& ctx) {
  const TensorArg& data = ctx.input(0);
  const Shape& shape = data.shape();
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), shape.size());
  const int64_t dim = shape[axis];
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> indices,
                        gather_indices(ctx.input(1), static_cast<int64_t>(axis), dim));
  const int64_t outer = dims_product(shape, 0, axis);
  const int64_t block = dims_product(shape, axis + 1, shape.size()) * dtype_size(data.dtype());
  const int64_t count = indices.size();
  const std::byte* from = static_cast<const std::byte*>(data.data);
  std::byte* to = static_cast<std::byte*>(ctx.output(0).data);
  parallel_for(outer * count, std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(block, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i) {
                   const int64_t o = i / count;
                   const int64_t j = i % count;
                   std::memcpy(to + i * block, from + (o * dim + indices[j]) * block, block);
                 }
               });
  return absl::OkStatus();
}

// ---- Slice ------------------------------------------------------------------------------------

template <typename Word>
absl::Status slice_kernel(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const int64_t rank = in_shape.size();
  AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slices(ctx, in_shape, out_shape));
  const std::vector<int64_t> strides = strides_of(in_shape);
  int64_t base = 0;
  std::vector<int64_t> in_strides(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (dims[d].size == 0) return absl::OkStatus();
    base += dims[d].start * strides[d];
    // An output dim of size 1 never moves, so its step (maybe INT64_MAX) is never multiplied.
    in_strides[d] = dims[d].size == 1 ? 0 : dims[d].step * strides[d];
  }
  strided_copy(ctx.input(0).in<Word>().data(), base, in_strides, out_shape,
               ctx.output(0).out<Word>().data());
  return absl::OkStatus();
}

// ---- Transpose --------------------------------------------------------------------------------

// A transpose that moves the input's innermost dim to output dim `p` (not the last): reading
// along the output's last dim would stride through memory, so each (batch, tile of dim p) work
// item copies kTile x kTile blocks, whose kTile input lines stay in cache while they are read.
template <typename Word>
void tiled_transpose(const Word* in, const std::vector<int64_t>& in_strides, const Shape& out_shape,
                     int p, Word* out) {
  constexpr int64_t kTile = 32;
  const int rank = static_cast<int>(out_shape.size());
  const int64_t p_size = out_shape[p];
  const int64_t last_size = out_shape[rank - 1];
  const int64_t last_stride = in_strides[rank - 1];  // input stride of the output's last dim
  const std::vector<int64_t> out_strides = strides_of(out_shape);
  std::vector<int> batch_dims;  // the other output dims
  int64_t batches = 1;
  for (int d = 0; d < rank - 1; ++d) {
    if (d == p) continue;
    batch_dims.push_back(d);
    batches *= out_shape[d];
  }
  const int64_t p_tiles = (p_size + kTile - 1) / kTile;
  if (batches * p_size * last_size == 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / (kTile * last_size));
  parallel_for(batches * p_tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t in_base = 0;
      int64_t out_base = 0;
      int64_t rest = item / p_tiles;
      for (int k = static_cast<int>(batch_dims.size()) - 1; k >= 0; --k) {
        const int d = batch_dims[k];
        const int64_t index = rest % out_shape[d];
        rest /= out_shape[d];
        in_base += index * in_strides[d];
        out_base += index * out_strides[d];
      }
      const int64_t p_begin = (item % p_tiles) * kTile;
      const int64_t p_end = std::min(p_size, p_begin + kTile);
      for (int64_t l_begin = 0; l_begin < last_size; l_begin += kTile) {
        const int64_t l_end = std::min(last_size, l_begin + kTile);
        for (int64_t i = p_begin; i < p_end; ++i) {
          Word* dst = out + out_base + i * out_strides[p];
          const Word* src = in + in_base + i;  // the input stride of dim p is 1
          for (int64_t l = l_begin; l < l_end; ++l) dst[l] = src[l * last_stride];
        }
      }
    }
  });
}

// Output dim d walks input dim perm[d] (ops::permutation: default the dims reversed).
template <typename Word>
absl::Status transpose_kernel(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const int rank = static_cast<int>(in_shape.size());
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, ops::permutation(ctx.node, rank));
  const std::vector<int64_t> strides = strides_of(in_shape);
  std::vector<int64_t> in_strides(rank);
  for (int d = 0; d < rank; ++d) in_strides[d] = strides[perm[d]];
  const Word* in = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  // Where the input's innermost dim lands in the output.
  const int p =
      rank == 0 ? 0
                : static_cast<int>(std::find(perm.begin(), perm.end(), rank - 1) - perm.begin());
  if (rank >= 2 && p != rank - 1 && in_shape[rank - 1] > 1 && out_shape[rank - 1] > 1) {
    tiled_transpose(in, in_strides, out_shape, p, out);
  } else {
    strided_copy(in, 0, in_strides, out_shape, out);
  }
  return absl::OkStatus();
}

// ---- Trilu ------------------------------------------------------------------------------------

// Keeps element (i, j) of each matrix in the last two dims where j - i >= k (upper) or
// j - i <= k (lower), and writes zero elsewhere (zero is the all-zero word in every dtype).
template <typename Word>
absl::Status trilu_kernel(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const int64_t rows = shape[shape.size() - 2];
  const int64_t cols = shape[shape.size() - 1];
  const int64_t k = ctx.has_input(1) ? index_values(ctx.input(1))[0] : 0;
  const bool upper = ctx.node.int_attr("upper") != 0;
  const Word* in = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  const int64_t total_rows = num_elements(shape) / std::max<int64_t>(cols, 1);
  parallel_for(total_rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t i = r % rows;
                   for (int64_t j = 0; j < cols; ++j) {
                     const bool keep = upper ? j - i >= k : j - i <= k;
                     out[r * cols + j] = keep ? in[r * cols + j] : Word{0};
                   }
                 }
               });
  return absl::OkStatus();
}

void register_data_movement_kernels(KernelRegistry& r) {
  add_kernel_for_all_dtypes(r, kernel_def("Concat"), &concat_kernel);
  add_kernel_for_all_dtypes(r, kernel_def("Split"), &split_kernel);
  add_kernel_for_all_dtypes(r, kernel_def("Gather"), &gather_kernel);
  add_kernels_by_element_size(r, kernel_def("Slice"),
                              []<typename Word>() { return &slice_kernel<Word>; });
  add_kernels_by_element_size(r, kernel_def("Transpose"),
                              []<typename Word>() { return &transpose_kernel<Word>; });
  add_kernels_by_element_size(r, kernel_def("Trilu", {.in_place_operand = 0}),
                              []<typename Word>() { return &trilu_kernel<Word>; });
}

static KernelRegistration kDataMovementKernels(&register_data_movement_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
