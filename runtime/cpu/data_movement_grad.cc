// CPU kernels for the gradients of ops/slice_gather.cc: SliceGrad and GatherGrad (ampc domain).
//
// SliceGrad writes zeros, then dY's elements where the Slice read (a slice reads each position at
// most once, so this is a plain scatter of moved elements, exact in every dtype). GatherGrad adds
// each slice of dY at the row its index picked, in index order, so repeated indices sum the same
// way on any thread count: f32 and f64 accumulate in the output, f16 and bf16 in an f32
// workspace rounded once per element at the end (the numeric contract's "compute in f32, round
// once"). Work is split over (outer block, column range) pairs, each owning its output elements.
//
// Slice's arguments are re-read and resolved as runtime/cpu/data_movement.cc resolves them, and
// checked against the inferred shapes; GatherGrad checks each index, since indices are data.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/slicing.h"

namespace ampc::runtime::cpu {
namespace {

using ops::dims_product;

// Columns (elements of one index's slice) a GatherGrad work item accumulates.
constexpr int64_t kGatherColumns = 512;

// ---- SliceGrad --------------------------------------------------------------------------------

// dX[start + o * step] = dY[o] for every multi-index o of dY; zero elsewhere.
template <typename T>
absl::Status slice_grad_kernel(const KernelContext& ctx) {
  const Shape& dy_shape = ctx.input(0).shape();
  const Shape& dx_shape = ctx.output(0).shape();
  const int64_t rank = dx_shape.size();
  AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slices(ctx, dx_shape, dy_shape));
  T* dx = ctx.output(0).out<T>().data();
  const T* dy = ctx.input(0).in<T>().data();
  const int64_t total = num_elements(dx_shape);
  parallel_for(total, kGrainElements,
               [&](int64_t begin, int64_t end) { std::fill(dx + begin, dx + end, T{}); });
  const int64_t count = num_elements(dy_shape);
  if (count == 0) return absl::OkStatus();
  // The dX offset of dY's first element, and how far one step of each dY dim moves in dX (a dim
  // of dY size 1 never moves, so its step, maybe INT64_MAX, is never multiplied).
  int64_t base = 0;
  std::vector<int64_t> dx_steps(rank, 0);
  for (int64_t d = rank - 1, stride = 1; d >= 0; stride *= dx_shape[d], --d) {
    base += dims[d].start * stride;
    if (dims[d].size > 1) dx_steps[d] = dims[d].step * stride;
  }
  const int64_t inner = rank == 0 ? 1 : dy_shape[rank - 1];
  const int64_t inner_step = rank == 0 ? 0 : dx_steps[rank - 1];
  parallel_for(count / inner, std::max<int64_t>(1, kGrainElements / inner),
               [&](int64_t begin, int64_t end) {
                 for (int64_t row = begin; row < end; ++row) {
                   int64_t offset = base;
                   for (int64_t d = rank - 2, rest = row; d >= 0; --d) {
                     offset += (rest % dy_shape[d]) * dx_steps[d];
                     rest /= dy_shape[d];
                   }
                   for (int64_t j = 0; j < inner; ++j) {
                     dx[offset + j * inner_step] = dy[row * inner + j];
                   }
                 }
               });
  return absl::OkStatus();
}

// ---- GatherGrad -------------------------------------------------------------------------------

// f32 accumulators for f16/bf16 outputs; none for f32 and f64, which accumulate in place.
int64_t gather_grad_workspace(const Node& node) {
  const TensorType& dx = node.output(0)->type();
  const bool low_precision = dx.dtype == DType::kF16 || dx.dtype == DType::kBF16;
  return low_precision ? dx.num_elements() * static_cast<int64_t>(sizeof(float)) : 0;
}

// dX[outer, r, inner] = sum over j with indices[j] == r (wrapped) of dY[outer, j, inner], summed
// in j order; nothing at the padding_idx row when there is one.
template <typename T>
absl::Status gather_grad_kernel(const KernelContext& ctx) {
  using Acc = compute_t<T>;
  const Shape& shape = ctx.output(0).shape();
  const int64_t axis = normalized_axis(ctx.node.int_attr("axis"), shape.size());
  const int64_t dim = shape[axis];
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> indices,
                        gather_indices(ctx.input(1), static_cast<int64_t>(axis), dim));
  const int64_t outer = dims_product(shape, 0, axis);
  const int64_t inner = dims_product(shape, axis + 1, shape.size());
  const int64_t count = indices.size();
  const AttrValue* padding = ctx.node.find_attr("padding_idx");
  const int64_t skip = padding != nullptr ? std::get<int64_t>(*padding) : -1;
  const T* dy = ctx.input(0).in<T>().data();
  T* dx = ctx.output(0).out<T>().data();
  Acc* acc = nullptr;
  if constexpr (std::is_same_v<Acc, T>) {
    acc = dx;
  } else {
    acc = reinterpret_cast<Acc*>(ctx.workspace.data());
  }
  const int64_t column_blocks = (inner + kGatherColumns - 1) / kGatherColumns;
  const int64_t work = std::max<int64_t>(1, (dim + count) * std::min(inner, kGatherColumns));
  parallel_for(outer * column_blocks, std::max<int64_t>(1, kGrainElements / work),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t o = item / column_blocks;
                   const int64_t c0 = (item % column_blocks) * kGatherColumns;
                   const int64_t c1 = std::min(inner, c0 + kGatherColumns);
                   Acc* rows = acc + o * dim * inner;
                   for (int64_t r = 0; r < dim; ++r) {
                     std::fill(rows + r * inner + c0, rows + r * inner + c1, Acc(0));
                   }
                   for (int64_t j = 0; j < count; ++j) {
                     if (indices[j] == skip) continue;
                     const T* from = dy + (o * count + j) * inner;
                     Acc* to = rows + indices[j] * inner;
                     for (int64_t c = c0; c < c1; ++c) to[c] += load(from[c]);
                   }
                   if constexpr (!std::is_same_v<Acc, T>) {
                     T* out = dx + o * dim * inner;
                     for (int64_t r = 0; r < dim; ++r) {
                       for (int64_t c = c0; c < c1; ++c)
                         out[r * inner + c] = store<T>(rows[r * inner + c]);
                     }
                   }
                 }
               });
  return absl::OkStatus();
}

void register_data_movement_grad_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(r, ampc_kernel_def("SliceGrad"),
                                                []<typename T>() { return &slice_grad_kernel<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("GatherGrad", {.workspace_bytes = &gather_grad_workspace}),
      []<typename T>() { return &gather_grad_kernel<T>; });
}

static KernelRegistration kDataMovementGradKernels(&register_data_movement_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
