// What the Slice, Gather, Split and scatter kernels and their gradients share: index operands,
// negative axes, and how Slice's starts/ends/axes/steps (operands 1-4) select a region (ONNX
// Slice-13's clamping, as ops/slice_gather.cc infers it).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "runtime/kernel.h"
#include "runtime/scatter_math.h"

namespace ampc::runtime::cpu {

inline int64_t normalized_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// The values of an i64 or i32 operand (indices, Slice's starts/ends/axes/steps).
inline std::vector<int64_t> index_values(const TensorArg& arg) {
  if (arg.dtype() == DType::kI64) {
    const std::span<const int64_t> values = arg.in<int64_t>();
    return {values.begin(), values.end()};
  }
  AMPC_CHECK(arg.dtype() == DType::kI32);  // the OpDefs admit i64 and i32 only
  const std::span<const int32_t> values = arg.in<int32_t>();
  return {values.begin(), values.end()};
}

// Gather's indices along an axis of size `dim`, negative ones counted from the back (opset 11);
// one outside [-dim, dim) is an error naming it and its position.
inline absl::StatusOr<std::vector<int64_t>> gather_indices(const TensorArg& arg, int64_t axis,
                                                           int64_t dim) {
  std::vector<int64_t> indices = index_values(arg);
  for (size_t j = 0; j < indices.size(); ++j) {
    if (indices[j] < -dim || indices[j] >= dim) {
      return absl::InvalidArgumentError(str_cat("index ", indices[j], " (element ", j,
                                                " of the indices) is out of range for axis ", axis,
                                                " of size ", dim));
    }
    if (indices[j] < 0) indices[j] += dim;
  }
  return indices;
}

// A ScatterElements or ScatterND node's `reduction` (none where the opset has no attribute).
inline numeric::ScatterReduction scatter_reduction(const Node& node) {
  if (node.find_attr("reduction") == nullptr) return numeric::ScatterReduction::kNone;
  const std::string& name = node.string_attr("reduction");
  if (name == "add") return numeric::ScatterReduction::kAdd;
  if (name == "mul") return numeric::ScatterReduction::kMul;
  if (name == "max") return numeric::ScatterReduction::kMax;
  if (name == "min") return numeric::ScatterReduction::kMin;
  return numeric::ScatterReduction::kNone;  // inference admits no other value
}

// Where one dim's slice starts in the full tensor, its step and its size.
struct DimSlice {
  int64_t start = 0;
  int64_t step = 1;
  int64_t size = 0;
};

inline DimSlice slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  const bool forward = step > 0;
  start = std::clamp<int64_t>(start, 0, forward ? dim : std::max<int64_t>(dim - 1, 0));
  end = std::clamp<int64_t>(end, forward ? 0 : -1, forward ? dim : dim - 1);
  const int64_t distance = forward ? end - start : start - end;
  const uint64_t stride = forward ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const int64_t size = distance > 0 && dim > 0 ? int64_t(1 + uint64_t(distance - 1) / stride) : 0;
  return {start, step, size};
}

// The per-dim slices that operands 1-4 of `ctx` (starts, ends, optional axes and steps) cut
// from a tensor of shape `full`. An error when the values are malformed or do not give the
// shape `sliced` the node was typed with (the values differ from those inference saw).
inline absl::StatusOr<std::vector<DimSlice>> resolve_slices(const KernelContext& ctx,
                                                            const Shape& full,
                                                            const Shape& sliced) {
  const int64_t rank = full.size();
  const std::vector<int64_t> starts = index_values(ctx.input(1));
  const std::vector<int64_t> ends = index_values(ctx.input(2));
  std::vector<int64_t> axes(starts.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = i;
  if (ctx.has_input(3)) axes = index_values(ctx.input(3));
  std::vector<int64_t> steps(starts.size(), 1);
  if (ctx.has_input(4)) steps = index_values(ctx.input(4));

  std::vector<DimSlice> dims(rank);
  for (int64_t d = 0; d < rank; ++d) dims[d] = {0, 1, full[d]};
  bool valid =
      ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size();
  for (size_t i = 0; valid && i < starts.size(); ++i) {
    const int64_t axis = normalized_axis(axes[i], rank);
    valid = axis >= 0 && axis < rank && steps[i] != 0;
    if (valid) dims[axis] = slice_dim(full[axis], starts[i], ends[i], steps[i]);
  }
  for (int64_t d = 0; valid && d < rank; ++d) valid = dims[d].size == sliced[d];
  if (!valid) {
    return absl::InvalidArgumentError(
        str_cat("starts ", shape_to_string(starts), ", ends ", shape_to_string(ends), ", axes ",
                shape_to_string(axes), " and steps ", shape_to_string(steps), " do not slice ",
                shape_to_string(sliced), " out of ", shape_to_string(full)));
  }
  return dims;
}

}  // namespace ampc::runtime::cpu
