#include "ops/op_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <set>

namespace ampc::ops {

absl::StatusOr<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(
          str_cat("shapes ", shape_to_string(a), " and ", shape_to_string(b), " do not broadcast"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  }
  return true;
}

absl::StatusOr<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1) ||
      (rank == 0 && axis != 0 && axis != -1)) {
    return absl::InvalidArgumentError(str_cat("axis ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

absl::StatusOr<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes,
                                                    int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      return absl::InvalidArgumentError(str_cat("axis ", axis, " is out of range for rank ", rank));
    }
    const int64_t normalized = axis < 0 ? axis + rank : axis;
    if (std::find(out.begin(), out.end(), normalized) != out.end()) {
      return absl::InvalidArgumentError(str_cat("axis ", axis, " is repeated"));
    }
    out.push_back(normalized);
  }
  return out;
}

absl::Status expect_same_dtype(const InferenceContext& ctx, int a, int b) {
  const DType ta = ctx.input_type(a).dtype;
  const DType tb = ctx.input_type(b).dtype;
  if (ta != tb) {
    return absl::InvalidArgumentError(str_cat("inputs ", a, " and ", b,
                                              " must have the same element type, got ",
                                              dtype_name(ta), " and ", dtype_name(tb)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> constant_ints(const InferenceContext& ctx, int i,
                                                   std::string_view name) {
  const Tensor* value = ctx.input_value(i);
  if (value == nullptr || !value->has_data()) {
    return absl::InvalidArgumentError(str_cat("input ", i, " ('", name,
                                              "') must be known at compile time (a constant or "
                                              "foldable shape arithmetic); the output shape "
                                              "depends on its values"));
  }
  return value->to_i64_vector();
}

absl::Status infer_same_as_input(InferenceContext& ctx) {
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

absl::Status infer_broadcast(InferenceContext& ctx, std::optional<DType> result_dtype) {
  Shape shape = ctx.input_type(0).shape;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
    AMPC_ASSIGN_OR_RETURN(shape, broadcast_shapes(shape, ctx.input_type(i).shape));
  }
  ctx.set_output(0, TensorType{result_dtype.value_or(ctx.input_type(0).dtype), shape});
  return absl::OkStatus();
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

std::optional<int64_t> sliding_window_count(int64_t in, int64_t extent, int64_t stride,
                                            int64_t pad_begin, int64_t pad_end, bool ceil_mode) {
  const int64_t span = in + pad_begin + pad_end - extent;
  if (!ceil_mode) return span < 0 ? std::nullopt : std::optional<int64_t>(span / stride + 1);
  // ceil(span / stride), rounding toward +inf for either sign.
  int64_t count = (span >= 0 ? (span + stride - 1) / stride : -((-span) / stride)) + 1;
  if (count > 1 && (count - 1) * stride >= in + pad_begin) --count;
  return count < 1 ? std::nullopt : std::optional<int64_t>(count);
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t d = begin; d < end; ++d) result *= shape[d];
  return result;
}

absl::Status expect_rank_at_least(const InferenceContext& ctx, int i, size_t rank) {
  const Shape& shape = ctx.input_type(i).shape;
  if (shape.size() < rank) {
    return absl::InvalidArgumentError(str_cat("input ", i, " must have rank ", rank,
                                              " or more, got shape ", shape_to_string(shape)));
  }
  return absl::OkStatus();
}

int64_t broadcast_offset(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t offset = 0;
  const size_t lead = index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    offset = offset * shape[d] + (shape[d] == 1 ? 0 : index[lead + d]);
  }
  return offset;
}

absl::StatusOr<std::vector<Tensor>> fold_elementwise(const FoldContext& ctx,
                                                     double (*fn)(const double* args)) {
  const TensorType& out_type = *ctx.output_types.at(0);
  Tensor out(out_type);
  std::vector<double> args(ctx.inputs.size());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = unravel(i, out_type.shape);
    for (size_t k = 0; k < ctx.inputs.size(); ++k) {
      const Tensor* in = ctx.inputs[k];
      args[k] = in ? in->element_as_double(broadcast_offset(index, in->shape())) : 0.0;
    }
    out.set_element(i, fn(args.data()));
  }
  return std::vector<Tensor>{std::move(out)};
}

bool is_random_op(const Node& node) {
  static const std::set<std::string, std::less<>> kRandomOps = {
      "Dropout",      "RandomUniform",    "RandomUniformLike",
      "RandomNormal", "RandomNormalLike", "Bernoulli"};
  return node.domain() == kOnnxDomain && kRandomOps.contains(node.op_type());
}

std::optional<int64_t> random_seed(const Node& node) {
  const AttrValue* seed = node.find_attr("seed");
  if (seed == nullptr) return std::nullopt;
  if (const int64_t* value = std::get_if<int64_t>(seed)) return *value;
  const float value = std::get<float>(*seed);
  if (std::isfinite(value) && std::fabs(value) < 9.0e18f) return static_cast<int64_t>(value);
  return std::bit_cast<uint32_t>(value);
}

}  // namespace ampc::ops
