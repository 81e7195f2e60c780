// Data movement: Transpose, Concat, Split, Slice, Gather and Trilu. Each output element is an
// input element moved to a new position (or, for Trilu, zeroed); no arithmetic on values.
//
// Slice and Split sizes that come from inputs need those inputs at compile time. The folds copy
// element bytes, so they are exact for every dtype; index arithmetic is int64, with the clamping
// of Slice done so that INT64_MAX / INT64_MIN bounds and steps never overflow.
#include <algorithm>
#include <cstring>

#include "ops/op_util.h"

namespace ampc::ops {
namespace {

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * shape[d + 1];
  }
  return strides;
}

// A tensor of `type` whose element at multi-index `o` is element `source(o)` of `in`.
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

absl::Status expect_rank_at_least(const InferenceContext& ctx, int i, size_t rank) {
  const Shape& shape = ctx.input_type(i).shape;
  if (shape.size() < rank) {
    return absl::InvalidArgumentError(str_cat("input ", i, " must have rank ", rank,
                                              " or more, got shape ", shape_to_string(shape)));
  }
  return absl::OkStatus();
}

// ---- Transpose --------------------------------------------------------------------------------

// The node's permutation; the default reverses the dims.
absl::StatusOr<std::vector<int64_t>> permutation(const Node& node, size_t rank) {
  std::vector<int64_t> perm(rank);
  if (!node.find_attr("perm")) {
    for (size_t d = 0; d < rank; ++d) perm[d] = rank - 1 - d;
    return perm;
  }
  perm = node.ints_attr("perm");
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank;
  for (size_t d = 0; valid && d < rank; ++d) {
    valid = perm[d] >= 0 && perm[d] < static_cast<int64_t>(rank) && !seen[perm[d]];
    if (valid) seen[perm[d]] = true;
  }
  if (!valid) {
    return absl::InvalidArgumentError(str_cat(
        "perm ", shape_to_string(perm), " is not a permutation of the ", rank, " input dims"));
  }
  return perm;
}

absl::Status infer_transpose(InferenceContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, permutation(ctx.node(), in.size()));
  Shape out(in.size());
  for (size_t d = 0; d < in.size(); ++d) out[d] = in[perm[d]];
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_transpose(const FoldContext& ctx) {
  const Tensor& in = *ctx.inputs[0];
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, permutation(ctx.node, in.shape().size()));
  const std::vector<int64_t> strides = strides_of(in.shape());
  // Output dim d walks input dim perm[d].
  return std::vector<Tensor>{copy_from(in, *ctx.output_types[0], [&](const auto& o) {
    int64_t from = 0;
    for (size_t d = 0; d < o.size(); ++d) from += o[d] * strides[perm[d]];
    return from;
  })};
}

OpDef transpose_op() {
  OpDef def;
  def.name = "Transpose";
  def.since_opset = 1;
  def.summary = "permutes the dims (default: reverses them)";
  def.inputs = {input("data")};
  def.outputs = {input("transposed")};
  def.attrs = {optional_attr("perm", AttrKind::kInts)};
  def.infer = infer_transpose;
  def.fold = fold_transpose;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"default reverses", {{DType::kF32, {2, 3, 4}}}, {}, {}, {{DType::kF32, {4, 3, 2}}}},
      {"perm",
       {{DType::kF16, {2, 3, 4}}},
       {},
       {{"perm", std::vector<int64_t>{0, 2, 1}}},
       {{DType::kF16, {2, 4, 3}}}},
  };
  return def;
}

// ---- Concat -----------------------------------------------------------------------------------

absl::Status infer_concat(InferenceContext& ctx) {
  const TensorType& first = ctx.input_type(0);
  AMPC_RETURN_IF_ERROR(expect_rank_at_least(ctx, 0, 1));
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        normalize_axis(ctx.int_attr("axis"), first.shape.size()));
  Shape out = first.shape;
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
    const Shape& shape = ctx.input_type(i).shape;
    bool matches = shape.size() == out.size();
    for (size_t d = 0; matches && d < shape.size(); ++d) {
      matches = static_cast<int64_t>(d) == axis || shape[d] == first.shape[d];
    }
    if (!matches) {
      return absl::InvalidArgumentError(str_cat(
          "input ", i, " has shape ", shape_to_string(shape), ", which does not match input 0's ",
          shape_to_string(first.shape), " outside axis ", axis));
    }
    out[axis] += shape[axis];
  }
  ctx.set_output(0, TensorType{first.dtype, out});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_concat(const FoldContext& ctx) {
  const TensorType& out_type = *ctx.output_types[0];
  const int64_t rank = out_type.shape.size();
  const int64_t axis =
      ctx.node.int_attr("axis") < 0 ? ctx.node.int_attr("axis") + rank : ctx.node.int_attr("axis");
  const std::vector<int64_t> out_strides = strides_of(out_type.shape);
  Tensor out(out_type);
  const int64_t size = dtype_size(out_type.dtype);
  int64_t axis_offset = 0;
  for (const Tensor* in : ctx.inputs) {
    for (int64_t i = 0; i < in->num_elements(); ++i) {
      std::vector<int64_t> index = unravel(i, in->shape());
      index[axis] += axis_offset;
      int64_t to = 0;
      for (int64_t d = 0; d < rank; ++d) to += index[d] * out_strides[d];
      std::memcpy(out.mutable_bytes().data() + to * size, in->bytes().data() + i * size, size);
    }
    axis_offset += in->shape()[axis];
  }
  return std::vector<Tensor>{std::move(out)};
}

OpDef concat_op() {
  OpDef def;
  def.name = "Concat";
  def.since_opset = 4;  // axis required from 4 (it defaulted to 1 before)
  def.summary = "joins the inputs along `axis`";
  def.inputs = {variadic_input("inputs")};
  def.outputs = {input("concat_result")};
  def.attrs = {required_attr("axis", AttrKind::kInt)};
  def.infer = infer_concat;
  def.fold = fold_concat;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"axis 1",
       {{DType::kF32, {2, 3}}, {DType::kF32, {2, 5}}},
       {},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 8}}}},
      {"three vectors, axis -1",
       {{DType::kI64, {1}}, {DType::kI64, {2}}, {DType::kI64, {1}}},
       {},
       {{"axis", int64_t{-1}}},
       {{DType::kI64, {4}}}},
      {"single input",
       {{DType::kF16, {4, 2}}},
       {},
       {{"axis", int64_t{0}}},
       {{DType::kF16, {4, 2}}}},
  };
  return def;
}

// ---- Split ------------------------------------------------------------------------------------

// The sizes along the axis of the node's outputs: from `split` (attribute before 13, input
// from 13), or equal chunks of ceil(dim / n) with a smaller last one (num_outputs from 18, or
// the number of outputs), as ONNX's reference implementation splits.
absl::StatusOr<std::vector<int64_t>> split_sizes(const InferenceContext& ctx, int64_t dim) {
  const int outputs = ctx.num_outputs();
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> split,
                        ctx.ints_attr_or_input("split", 1));
  const AttrValue* num_outputs = ctx.node().find_attr("num_outputs");
  if (split && num_outputs) {
    return absl::InvalidArgumentError("'split' and 'num_outputs' are both given; give one");
  }
  if (num_outputs && ctx.int_attr("num_outputs") != outputs) {
    return absl::InvalidArgumentError(str_cat("num_outputs is ", ctx.int_attr("num_outputs"),
                                              " but the node has ", outputs, " outputs"));
  }
  if (split) {
    int64_t total = 0;
    bool valid = static_cast<int>(split->size()) == outputs;
    for (int64_t size : *split)
      valid = valid && size >= 0 && !__builtin_add_overflow(total, size, &total);
    if (!valid || total != dim) {
      return absl::InvalidArgumentError(str_cat("split ", shape_to_string(*split),
                                                " does not cut dim ", dim, " into the node's ",
                                                outputs, " outputs"));
    }
    return *split;
  }
  const int64_t chunk = (dim + outputs - 1) / outputs;
  std::vector<int64_t> sizes(outputs, chunk);
  sizes.back() = dim - chunk * (outputs - 1);
  if (sizes.back() < 0) {
    return absl::InvalidArgumentError(
        str_cat("dim ", dim, " cannot be split into ", outputs, " chunks of ", chunk));
  }
  return sizes;
}

absl::Status infer_split(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  AMPC_RETURN_IF_ERROR(expect_rank_at_least(ctx, 0, 1));
  AMPC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(ctx.int_attr("axis"), in.shape.size()));
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, split_sizes(ctx, in.shape[axis]));
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    Shape shape = in.shape;
    shape[axis] = sizes[i];
    ctx.set_output(i, TensorType{in.dtype, shape});
  }
  return absl::OkStatus();
}

// Output k starts where the sizes of outputs 0..k-1 end; the sizes are the inferred types'.
absl::StatusOr<std::vector<Tensor>> fold_split(const FoldContext& ctx) {
  const Tensor& in = *ctx.inputs[0];
  const int64_t rank = in.shape().size();
  const int64_t axis =
      ctx.node.int_attr("axis") < 0 ? ctx.node.int_attr("axis") + rank : ctx.node.int_attr("axis");
  const std::vector<int64_t> strides = strides_of(in.shape());
  std::vector<Tensor> outs;
  int64_t offset = 0;
  for (const std::optional<TensorType>& type : ctx.output_types) {
    outs.push_back(copy_from(in, *type, [&](const auto& o) {
      int64_t from = offset * strides[axis];
      for (int64_t d = 0; d < rank; ++d) from += o[d] * strides[d];
      return from;
    }));
    offset += type->shape[axis];
  }
  return outs;
}

OpDef split_op() {
  OpDef def;
  def.name = "Split";
  def.since_opset = 2;  // `split` an attribute to 12, an input from 13; num_outputs from 18
  def.summary = "cuts the input along `axis` into the node's outputs";
  def.inputs = {input("input"), optional_input("split", {DType::kI64})};
  def.outputs = {variadic_input("outputs")};
  def.attrs = {attr("axis", int64_t{0}), optional_attr("split", AttrKind::kInts),
               optional_attr("num_outputs", AttrKind::kInt)};
  def.attrs_as_inputs = {{"split", 1, 13}};
  def.infer = infer_split;
  def.fold = fold_split;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"equal parts",
       {{DType::kF32, {6, 2}}},
       {},
       {},
       {{DType::kF32, {3, 2}}, {DType::kF32, {3, 2}}}},
      {"split input",
       {{DType::kF32, {2, 6}}, {DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {2, 4})}},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 2}}, {DType::kF32, {2, 4}}}},
      {"num_outputs, smaller last",
       {{DType::kF16, {7}}},
       {},
       {{"num_outputs", int64_t{3}}},
       {{DType::kF16, {3}}, {DType::kF16, {3}}, {DType::kF16, {1}}}},
  };
  return def;
}

// ---- Slice ------------------------------------------------------------------------------------

// Where a dim's slice starts in the input, its step and its output size.
struct DimSlice {
  int64_t start = 0;
  int64_t step = 1;
  int64_t size = 0;
};

// ONNX Slice-13: negative starts/ends count from the back, then clamp to [0, dim] stepping
// forward, to [0, dim-1] (start) and [-1, dim-1] (end) stepping backward.
DimSlice slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;  // no overflow: dim >= 0 and start < 0
  if (end < 0) end += dim;
  const bool forward = step > 0;
  start = std::clamp<int64_t>(start, 0, forward ? dim : std::max<int64_t>(dim - 1, 0));
  end = std::clamp<int64_t>(end, forward ? 0 : -1, forward ? dim : dim - 1);
  const int64_t distance = forward ? end - start : start - end;
  // |step| as unsigned: -INT64_MIN does not fit in int64.
  const uint64_t stride = forward ? uint64_t(step) : uint64_t(0) - uint64_t(step);
  const int64_t size = distance > 0 && dim > 0 ? int64_t(1 + uint64_t(distance - 1) / stride) : 0;
  return {start, step, size};
}

// Resolves starts, ends, axes and steps (null when omitted) against the input shape.
absl::StatusOr<std::vector<DimSlice>> resolve_slice(const Shape& in,
                                                    const std::vector<const Tensor*>& args) {
  const std::vector<int64_t> starts = args[0]->to_i64_vector();
  const std::vector<int64_t> ends = args[1]->to_i64_vector();
  std::vector<int64_t> axes(starts.size());
  for (size_t i = 0; i < axes.size(); ++i) axes[i] = i;
  if (args[2]) axes = args[2]->to_i64_vector();
  std::vector<int64_t> steps(starts.size(), 1);
  if (args[3]) steps = args[3]->to_i64_vector();
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return absl::InvalidArgumentError(str_cat("starts, ends, axes and steps have ", starts.size(),
                                              ", ", ends.size(), ", ", axes.size(), " and ",
                                              steps.size(), " elements; they must agree"));
  }
  AMPC_ASSIGN_OR_RETURN(axes, normalize_axes(axes, in.size()));
  std::vector<DimSlice> dims(in.size());
  for (size_t d = 0; d < in.size(); ++d) dims[d] = {0, 1, in[d]};
  for (size_t i = 0; i < axes.size(); ++i) {
    if (steps[i] == 0) return absl::InvalidArgumentError(str_cat("steps[", i, "] is 0"));
    dims[axes[i]] = slice_dim(in[axes[i]], starts[i], ends[i], steps[i]);
  }
  return dims;
}

absl::Status infer_slice(InferenceContext& ctx) {
  constexpr const char* kNames[] = {"starts", "ends", "axes", "steps"};
  std::vector<const Tensor*> args(4, nullptr);
  for (int i = 1; i <= 4; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input_type(i).shape.size() != 1) {
      return absl::InvalidArgumentError(str_cat("input ", i, " ('", kNames[i - 1],
                                                "') must be 1-D, got shape ",
                                                shape_to_string(ctx.input_type(i).shape)));
    }
    const Tensor* value = ctx.input_value(i);
    if (value == nullptr || !value->has_data()) {
      return absl::InvalidArgumentError(
          str_cat("input ", i, " ('", kNames[i - 1],
                  "') must be known at compile time (a constant or foldable shape arithmetic); "
                  "the output shape depends on it"));
    }
    args[i - 1] = value;
  }
  const TensorType& in = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slice(in.shape, args));
  Shape out(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) out[d] = dims[d].size;
  ctx.set_output(0, TensorType{in.dtype, out});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_slice(const FoldContext& ctx) {
  const Tensor& in = *ctx.inputs[0];
  std::vector<const Tensor*> args(4, nullptr);
  for (size_t i = 1; i < ctx.inputs.size(); ++i) args[i - 1] = ctx.inputs[i];
  AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slice(in.shape(), args));
  const std::vector<int64_t> strides = strides_of(in.shape());
  return std::vector<Tensor>{copy_from(in, *ctx.output_types[0], [&](const auto& o) {
    int64_t from = 0;
    for (size_t d = 0; d < o.size(); ++d)
      from += (dims[d].start + o[d] * dims[d].step) * strides[d];
    return from;
  })};
}

OpDef slice_op() {
  OpDef def;
  def.name = "Slice";
  def.since_opset = 10;  // starts/ends/axes/steps as inputs (attributes before 10)
  def.summary = "a strided window: starts, ends (exclusive), axes and steps per sliced axis";
  def.inputs = {input("data"), input("starts", kIndexTypes), input("ends", kIndexTypes),
                optional_input("axes", kIndexTypes), optional_input("steps", kIndexTypes)};
  def.outputs = {input("output")};
  def.infer = infer_slice;
  def.fold = fold_slice;
  def.autocast.category = AutocastCategory::kClear;
  auto ints = [](std::vector<int64_t> v) { return Tensor::from_i64({int64_t(v.size())}, v); };
  def.samples = {
      {"ONNX example 1: axes and steps",
       {{DType::kF32, {2, 4}},
        {DType::kI64, {2}},
        {DType::kI64, {2}},
        {DType::kI64, {2}},
        {DType::kI64, {2}}},
       {{1, ints({1, 0})}, {2, ints({2, 3})}, {3, ints({0, 1})}, {4, ints({1, 2})}},
       {},
       {{DType::kF32, {1, 2}}}},
      {"ONNX example 2: negative and clamped ends",
       {{DType::kF32, {2, 4}}, {DType::kI64, {2}}, {DType::kI64, {2}}},
       {{1, ints({0, 1})}, {2, ints({-1, 1000})}},
       {},
       {{DType::kF32, {1, 3}}}},
      {"reverse with INT64_MIN end",
       {{DType::kF16, {5, 3}},
        {DType::kI64, {1}},
        {DType::kI64, {1}},
        {DType::kI64, {1}},
        {DType::kI64, {1}}},
       {{1, ints({-1})}, {2, ints({INT64_MIN})}, {3, ints({0})}, {4, ints({-1})}},
       {},
       {{DType::kF16, {5, 3}}}},
  };
  return def;
}

// ---- Gather -----------------------------------------------------------------------------------

absl::Status infer_gather(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  AMPC_RETURN_IF_ERROR(expect_rank_at_least(ctx, 0, 1));
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        normalize_axis(ctx.int_attr("axis"), data.shape.size()));
  const Shape& indices = ctx.input_type(1).shape;
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  ctx.set_output(0, TensorType{data.dtype, out});
  return absl::OkStatus();
}

// Output index = data dims before axis, then the indices' dims, then data dims after axis.
absl::StatusOr<std::vector<Tensor>> fold_gather(const FoldContext& ctx) {
  const Tensor& data = *ctx.inputs[0];
  const Tensor& indices = *ctx.inputs[1];
  const int64_t rank = data.shape().size();
  const int64_t axis =
      ctx.node.int_attr("axis") < 0 ? ctx.node.int_attr("axis") + rank : ctx.node.int_attr("axis");
  const int64_t dim = data.shape()[axis];
  std::vector<int64_t> positions = indices.to_i64_vector();
  for (int64_t& position : positions) {
    if (position < -dim || position >= dim) {
      return absl::InvalidArgumentError(
          str_cat("index ", position, " is out of range for axis ", axis, " of size ", dim));
    }
    if (position < 0) position += dim;  // negative indices count from the back (opset 11)
  }
  const int64_t index_rank = indices.shape().size();
  const std::vector<int64_t> strides = strides_of(data.shape());
  const std::vector<int64_t> index_strides = strides_of(indices.shape());
  return std::vector<Tensor>{copy_from(data, *ctx.output_types[0], [&](const auto& o) {
    int64_t from = 0;
    for (int64_t d = 0; d < axis; ++d) from += o[d] * strides[d];
    int64_t which = 0;
    for (int64_t k = 0; k < index_rank; ++k) which += o[axis + k] * index_strides[k];
    from += positions[which] * strides[axis];
    for (int64_t d = axis + 1; d < rank; ++d) from += o[d + index_rank - 1] * strides[d];
    return from;
  })};
}

OpDef gather_op() {
  OpDef def;
  def.name = "Gather";
  def.since_opset = 1;  // negative indices (11) only widen what is accepted
  def.summary = "picks entries of `data` along `axis` at `indices` (negative from the back)";
  def.inputs = {input("data"), input("indices", kIndexTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{0})};
  def.infer = infer_gather;
  def.fold = fold_gather;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"embedding lookup",
       {{DType::kF32, {10, 4}}, {DType::kI64, {2, 3}}},
       {},
       {},
       {{DType::kF32, {2, 3, 4}}}},
      {"scalar index on axis 1",
       {{DType::kF16, {2, 5, 3}}, {DType::kI32, {}}},
       {},
       {{"axis", int64_t{1}}},
       {{DType::kF16, {2, 3}}}},
  };
  return def;
}

// ---- Trilu ------------------------------------------------------------------------------------

absl::Status infer_trilu(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_rank_at_least(ctx, 0, 2));
  if (ctx.has_input(1) && ctx.input_type(1).num_elements() != 1) {
    return absl::InvalidArgumentError(str_cat("input 1 ('k') must be a scalar, got shape ",
                                              shape_to_string(ctx.input_type(1).shape)));
  }
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

OpDef trilu_op() {
  OpDef def;
  def.name = "Trilu";
  def.since_opset = 14;
  def.summary = "keeps the upper (or lower) triangle of the last two dims from diagonal k";
  def.inputs = {input("input"), optional_input("k", {DType::kI64})};
  def.outputs = {input("output")};
  def.attrs = {attr("upper", int64_t{1})};
  def.infer = infer_trilu;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"upper", {{DType::kF32, {4, 5}}}, {}, {}, {{DType::kF32, {4, 5}}}},
      {"lower batched with k",
       {{DType::kF16, {2, 3, 3}}, {DType::kI64, {}}},
       {{1, Tensor::from_i64({}, {-1})}},
       {{"upper", int64_t{0}}},
       {{DType::kF16, {2, 3, 3}}}},
  };
  return def;
}

void register_data_movement_ops(OpRegistry& registry) {
  registry.add(transpose_op());
  registry.add(concat_op());
  registry.add(split_op());
  registry.add(slice_op());
  registry.add(gather_op());
  registry.add(trilu_op());
}

const OpRegistration kRegistration(&register_data_movement_ops);

}  // namespace
}  // namespace ampc::ops
