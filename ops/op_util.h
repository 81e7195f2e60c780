// Helpers shared by the op families: operand specs, dtype sets, broadcasting, axes.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"

namespace ampc::ops {

inline const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
inline const std::vector<DType> kIntTypes = {DType::kI64, DType::kI32, DType::kI8, DType::kU8};
inline const std::vector<DType> kNumericTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                 DType::kF64, DType::kI64, DType::kI32,
                                                 DType::kI8,  DType::kU8};
inline const std::vector<DType> kIndexTypes = {DType::kI64, DType::kI32};

// Tensor types by dtype, for the examples of an OpDef.
inline TensorType typed(DType dtype, Shape shape) { return {dtype, std::move(shape)}; }
inline TensorType f32(Shape shape) { return typed(DType::kF32, std::move(shape)); }
inline TensorType f16(Shape shape) { return typed(DType::kF16, std::move(shape)); }
inline TensorType bf16(Shape shape) { return typed(DType::kBF16, std::move(shape)); }
inline TensorType i64(Shape shape) { return typed(DType::kI64, std::move(shape)); }
inline TensorType boolean(Shape shape) { return typed(DType::kBool, std::move(shape)); }

inline OperandSpec input(std::string name, std::vector<DType> dtypes = {}) {
  return {std::move(name), OperandSpec::Arity::kSingle, std::move(dtypes)};
}
inline OperandSpec optional_input(std::string name, std::vector<DType> dtypes = {}) {
  return {std::move(name), OperandSpec::Arity::kOptional, std::move(dtypes)};
}
inline OperandSpec variadic_input(std::string name, std::vector<DType> dtypes = {}) {
  return {std::move(name), OperandSpec::Arity::kVariadic, std::move(dtypes)};
}

inline AttrSpec attr(std::string name, AttrValue default_value) {
  AttrKind kind = attr_kind(default_value);
  return {std::move(name), kind, std::move(default_value), false, std::nullopt};
}
// An int attribute that is 0 or 1 (transA, keepdims, ...).
inline AttrSpec flag_attr(std::string name, int64_t default_value) {
  AttrSpec spec = attr(std::move(name), default_value);
  spec.int_range = {0, 1};
  return spec;
}
inline AttrSpec optional_attr(std::string name, AttrKind kind) {
  return {std::move(name), kind, std::nullopt, false, std::nullopt};
}
inline AttrSpec required_attr(std::string name, AttrKind kind) {
  return {std::move(name), kind, std::nullopt, true, std::nullopt};
}

// ONNX multidirectional (numpy) broadcasting. The error names both shapes.
absl::StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// True when `from` broadcasts to `to` without changing `to` (ONNX unidirectional broadcasting).
bool broadcasts_to(const Shape& from, const Shape& to);

// Maps a possibly negative axis into [0, rank); the error names the axis and the rank.
absl::StatusOr<int64_t> normalize_axis(int64_t axis, int64_t rank);
// The same for a list; duplicates are an error.
absl::StatusOr<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);

// Fails unless inputs `a` and `b` of the node have the same element type.
absl::Status expect_same_dtype(const InferenceContext& ctx, int a, int b);

// The values of input `i` (named `name` in messages), which the output shape depends on: known
// at compile time (an initializer or folded shape arithmetic), else an error that says so.
absl::StatusOr<std::vector<int64_t>> constant_ints(const InferenceContext& ctx, int i,
                                                   std::string_view name);

// Output 0 gets input 0's type.
absl::Status infer_same_as_input(InferenceContext& ctx);

// Output 0 = broadcast of all inputs, with input 0's dtype (or `result_dtype` when given);
// all inputs must share one dtype.
absl::Status infer_broadcast(InferenceContext& ctx, std::optional<DType> result_dtype = {});

// Element-wise fold over broadcast inputs, computed in double (exact for the integer and f32
// shape arithmetic folding is used for) and rounded to the output type.
absl::StatusOr<std::vector<Tensor>> fold_elementwise(const FoldContext& ctx,
                                                     double (*fn)(const double* args));

// The number of windows of `extent` positions (the dilated kernel) at `stride` over `in` positions
// padded by `pad_begin` and `pad_end` (ONNX's pooling rule): floor((padded - extent) / stride) + 1,
// or with `ceil_mode` ceil(...) + 1, less one when the last window would start in the end
// padding; with ceil_mode a window may reach past the padded input (the first one too, when the
// kernel is larger). nullopt when no window fits: the extent exceeds the padded input (by the
// stride or more, with ceil_mode).
std::optional<int64_t> sliding_window_count(int64_t in, int64_t extent, int64_t stride,
                                            int64_t pad_begin, int64_t pad_end, bool ceil_mode);
// The multi-index of flat index `flat` in `shape`, and back, for folds.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
// Row-major element strides of `shape`.
std::vector<int64_t> strides_of(const Shape& shape);
// The product of dims [begin, end) of `shape` (1 when the range is empty).
int64_t dims_product(const Shape& shape, size_t begin, size_t end);

// A tensor of `type` whose element at multi-index `o` is element `source(o)` of `in` (the
// folds of the ops that move data).
template <typename SourceFn>
Tensor copy_from(const Tensor& in, const TensorType& type, SourceFn source) {
  Tensor out(type);
  const int64_t size = dtype_size(type.dtype);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const int64_t from = source(unravel(i, type.shape));
    std::memcpy(out.mutable_bytes().data() + i * size, in.bytes().data() + from * size, size);
  }
  return out;
}

// Fails unless input `i` of the node has rank `rank` or more.
absl::Status expect_rank_at_least(const InferenceContext& ctx, int i, size_t rank);
// The flat index into `shape` of `index`, with broadcasting (dims of size 1 read index 0; the
// index may have more leading dims than the shape).
int64_t broadcast_offset(const std::vector<int64_t>& index, const Shape& shape);

// A Transpose node's permutation (the default reverses the dims); an error naming `perm` when it
// is not a permutation of `rank` dims.
absl::StatusOr<std::vector<int64_t>> permutation(const Node& node, size_t rank);

// The [start, end) range of dims a Shape node reports (opset 15 attributes; absent before, which
// reads as the whole shape): negative values count from the back, then both clamp to [0, rank].
std::pair<int64_t, int64_t> shape_range(const Node& node, int64_t rank);

// A Constant node's value from whichever of value, value_float(s), value_int(s) it has; an error
// unless it has exactly one (strings have no ampc dtype). Its fold and every backend's kernel
// read it here.
absl::StatusOr<Tensor> constant_value(const Node& node);

// Whether `node` draws random numbers: Dropout, RandomUniform(Like), RandomNormal(Like),
// Bernoulli (ops/random.cc).
bool is_random_op(const Node& node);
// The seed of a random op's draws (runtime/random_math.h): its `seed` attribute (an int on
// Dropout; a float on the others, whose integer part counts, or its bits beyond int64's range),
// nullopt without one.
std::optional<int64_t> random_seed(const Node& node);

}  // namespace ampc::ops
