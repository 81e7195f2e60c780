// CPU kernels of ops/scatter_gather.cc: GatherElements, ScatterElements (and Scatter), GatherND,
// ScatterND, and the gradients GatherElementsGrad and GatherNDGrad (ampc domain).
//
// Every index is checked before anything is written (an index outside [-dim, dim) is an error
// naming its value, its element of the indices and the dim), and negative ones count from the
// back. The gathers move elements as unsigned words of their size, so one kernel per size serves
// every dtype. The scatters copy the data, then apply the updates one at a time in row-major
// order of the indices: without a reduction the last duplicate wins, with one each update is
// combined in the compute type and rounded on store (runtime/numeric.h's scatter_combine), as
// the CUDA kernels do, so both backends agree bit for bit. The gather gradients add dY into zeros
// in the same order, in f32 for f16 and bf16 (a workspace, rounded once per element at the end),
// so repeated indices sum the same way on any thread count.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/slicing.h"

namespace ampc::runtime::cpu {
namespace {

using numeric::ScatterReduction;
using ops::strides_of;

absl::Status index_error(int64_t value, int64_t element, int64_t axis, int64_t dim) {
  return absl::InvalidArgumentError(str_cat("index ", value, " (element ", element,
                                            " of the indices) is out of range for axis ", axis,
                                            " of size ", dim));
}

// For each element of the indices of an element-wise op (GatherElements, ScatterElements,
// GatherElementsGrad), the flat offset in `data` it addresses: its own multi-index with the axis
// coordinate replaced by its (wrapped) value.
absl::StatusOr<std::vector<int64_t>> element_offsets(const TensorArg& indices, const Shape& data,
                                                     int64_t axis_attr) {
  const Shape& shape = indices.shape();
  const int64_t axis = normalized_axis(axis_attr, data.size());
  const int64_t dim = data[axis];
  const std::vector<int64_t> strides = strides_of(data);
  std::vector<int64_t> offsets = index_values(indices);
  std::vector<int64_t> coord(shape.size(), 0);
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int64_t value = offsets[i];
    if (value < -dim || value >= dim) return index_error(value, i, axis, dim);
    int64_t offset = (value < 0 ? value + dim : value) * strides[axis];
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int64_t>(d) != axis) offset += coord[d] * strides[d];
    }
    offsets[i] = offset;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {  // the next multi-index
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
  return offsets;
}

// The tuple form (GatherND, ScatterND, GatherNDGrad): indices [batch..., m..., k] address slices
// of `slice` elements of data [batch..., d_1..d_k, rest...].
struct TupleLayout {
  std::vector<int64_t> offsets;  // per tuple, the flat data offset of its slice
  int64_t slice = 1;
};

absl::StatusOr<TupleLayout> tuple_offsets(const TensorArg& indices, const Shape& data,
                                          int64_t batch_dims) {
  const Shape& shape = indices.shape();
  const int64_t k = shape.back();
  const std::vector<int64_t> values = index_values(indices);
  const std::vector<int64_t> strides = strides_of(data);
  const int64_t tuples = k == 0 ? 0 : static_cast<int64_t>(values.size()) / k;
  int64_t per_batch = 1;  // tuples in one batch
  for (size_t d = batch_dims; d + 1 < shape.size(); ++d) per_batch *= shape[d];
  const int64_t batch_stride = batch_dims == 0 ? 0 : strides[batch_dims - 1];
  TupleLayout layout;
  for (size_t d = batch_dims + k; d < data.size(); ++d) layout.slice *= data[d];
  layout.offsets.resize(tuples);
  for (int64_t j = 0; j < tuples; ++j) {
    int64_t offset = (j / per_batch) * batch_stride;
    for (int64_t t = 0; t < k; ++t) {
      const int64_t axis = batch_dims + t;
      const int64_t value = values[j * k + t];
      if (value < -data[axis] || value >= data[axis]) {
        return index_error(value, j * k + t, axis, data[axis]);
      }
      offset += (value < 0 ? value + data[axis] : value) * strides[axis];
    }
    layout.offsets[j] = offset;
  }
  return layout;
}

// ---- GatherElements, GatherND -----------------------------------------------------------------

template <typename Word>
absl::Status gather_elements_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(
      const std::vector<int64_t> offsets,
      element_offsets(ctx.input(1), ctx.input(0).shape(), ctx.node.int_attr("axis")));
  const Word* data = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  for (size_t i = 0; i < offsets.size(); ++i) out[i] = data[offsets[i]];
  return absl::OkStatus();
}

template <typename Word>
absl::Status gather_nd_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const TupleLayout layout, tuple_offsets(ctx.input(1), ctx.input(0).shape(),
                                                                ctx.node.int_attr("batch_dims")));
  const Word* data = ctx.input(0).in<Word>().data();
  Word* out = ctx.output(0).out<Word>().data();
  for (size_t j = 0; j < layout.offsets.size(); ++j) {
    std::copy_n(data + layout.offsets[j], layout.slice, out + j * layout.slice);
  }
  return absl::OkStatus();
}

// ---- ScatterElements, ScatterND ---------------------------------------------------------------

// out = data, then out[offsets[j] + e] = combine(out[...], updates[j * slice + e]) in order.
template <typename T>
void scatter(const KernelContext& ctx, const std::vector<int64_t>& offsets, int64_t slice) {
  const ScatterReduction reduction = scatter_reduction(ctx.node);
  const T* data = ctx.input(0).in<T>().data();
  const T* updates = ctx.input(2).in<T>().data();
  T* out = ctx.output(0).out<T>().data();
  if (out != data) std::copy_n(data, ctx.output(0).num_elements(), out);
  for (size_t j = 0; j < offsets.size(); ++j) {
    T* to = out + offsets[j];
    const T* from = updates + j * slice;
    for (int64_t e = 0; e < slice; ++e) {
      if (reduction == ScatterReduction::kNone) {
        to[e] = from[e];
      } else {
        to[e] = store<T>(numeric::scatter_combine(reduction, load(to[e]), load(from[e])));
      }
    }
  }
}

template <typename T>
absl::Status scatter_elements_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(
      const std::vector<int64_t> offsets,
      element_offsets(ctx.input(1), ctx.input(0).shape(), ctx.node.int_attr("axis")));
  scatter<T>(ctx, offsets, 1);
  return absl::OkStatus();
}

template <typename T>
absl::Status scatter_nd_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const TupleLayout layout,
                        tuple_offsets(ctx.input(1), ctx.input(0).shape(), 0));
  scatter<T>(ctx, layout.offsets, layout.slice);
  return absl::OkStatus();
}

// ---- GatherElementsGrad, GatherNDGrad ---------------------------------------------------------

// f32 accumulators for f16/bf16 outputs; none for f32 and f64, which accumulate in place.
int64_t scatter_add_workspace(const Node& node) {
  const TensorType& dx = node.output(0)->type();
  const bool low_precision = dx.dtype == DType::kF16 || dx.dtype == DType::kBF16;
  return low_precision ? dx.num_elements() * static_cast<int64_t>(sizeof(float)) : 0;
}

// dX = zeros, then dX[offsets[j] + e] += dY[j * slice + e] in order.
template <typename T>
void scatter_add_into_zeros(const KernelContext& ctx, const std::vector<int64_t>& offsets,
                            int64_t slice) {
  using Acc = compute_t<T>;
  const T* dy = ctx.input(0).in<T>().data();
  T* dx = ctx.output(0).out<T>().data();
  const int64_t total = ctx.output(0).num_elements();
  Acc* acc = nullptr;
  if constexpr (std::is_same_v<Acc, T>) {
    acc = dx;
  } else {
    acc = reinterpret_cast<Acc*>(ctx.workspace.data());
  }
  std::fill_n(acc, total, Acc(0));
  for (size_t j = 0; j < offsets.size(); ++j) {
    for (int64_t e = 0; e < slice; ++e) acc[offsets[j] + e] += load(dy[j * slice + e]);
  }
  if constexpr (!std::is_same_v<Acc, T>) {
    for (int64_t i = 0; i < total; ++i) dx[i] = store<T>(acc[i]);
  }
}

template <typename T>
absl::Status gather_elements_grad_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(
      const std::vector<int64_t> offsets,
      element_offsets(ctx.input(1), ctx.output(0).shape(), ctx.node.int_attr("axis")));
  scatter_add_into_zeros<T>(ctx, offsets, 1);
  return absl::OkStatus();
}

template <typename T>
absl::Status gather_nd_grad_kernel(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const TupleLayout layout, tuple_offsets(ctx.input(1), ctx.output(0).shape(),
                                                                ctx.node.int_attr("batch_dims")));
  scatter_add_into_zeros<T>(ctx, layout.offsets, layout.slice);
  return absl::OkStatus();
}

void register_scatter_gather_kernels(KernelRegistry& r) {
  add_kernels_by_element_size(r, kernel_def("GatherElements"),
                              []<typename Word>() { return &gather_elements_kernel<Word>; });
  add_kernels_by_element_size(r, kernel_def("GatherND"),
                              []<typename Word>() { return &gather_nd_kernel<Word>; });
  // The scatters may update their data in place: each output element reads only itself.
  for (const char* op : {"Scatter", "ScatterElements"}) {
    add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t, bool>(
        r, kernel_def(op, {.in_place_operand = 0}),
        []<typename T>() { return &scatter_elements_kernel<T>; });
  }
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t, bool>(
      r, kernel_def("ScatterND", {.in_place_operand = 0}),
      []<typename T>() { return &scatter_nd_kernel<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("GatherElementsGrad", {.workspace_bytes = &scatter_add_workspace}),
      []<typename T>() { return &gather_elements_grad_kernel<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("GatherNDGrad", {.workspace_bytes = &scatter_add_workspace}),
      []<typename T>() { return &gather_nd_grad_kernel<T>; });
}

static KernelRegistration kScatterGatherKernels(&register_scatter_gather_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
