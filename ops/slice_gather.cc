// Slice and Gather, which pick input elements by position, and their gradients SliceGrad and
// GatherGrad (ampc domain), which put the output gradient back at those positions in zeros shaped
// like the input. Slice picks each input element at most once, so SliceGrad is a scatter;
// Gather may pick one several times (repeated indices), so GatherGrad is a scatter-add, and a
// tied embedding's gradient sums its uses. The gradient ops carry the input's shape as their
// `shape` attribute, so their output types are static.
//
// PyTorch's embedding takes a padding_idx, a row that gets no gradient; ONNX's Gather cannot say
// so, and ampc's Gather has it as an extension attribute (AttrSpec::extension; import reads it
// from the dynamo exporter's node metadata), passed on to GatherGrad, which adds nothing at that
// row.
//
// Slice's starts/ends/axes/steps need their values at compile time. The folds copy element
// bytes, so they are exact for every dtype; index arithmetic is int64, with the clamping of Slice
// done so that INT64_MAX / INT64_MIN bounds and steps never overflow.
#include <algorithm>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

Tensor ints(const std::vector<int64_t>& values) {
  return Tensor::from_i64({static_cast<int64_t>(values.size())}, values);
}

Tensor i32s(const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kI32, {static_cast<int64_t>(values.size())}, values);
}

// The node's operands from `first` on, with null for omitted ones (to pass them on unchanged).
std::vector<Value*> operands_from(const GradBuilder& b, int first) {
  std::vector<Value*> operands;
  for (int i = first; i < b.node().num_operands(); ++i) {
    operands.push_back(b.has_input(i) ? b.input(i) : nullptr);
  }
  return operands;
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

// Slice's starts, ends, axes and steps: operands first..first+3 of a Slice (1) or SliceGrad (1)
// node, null where omitted or, unless `required`, where not known at compile time.
absl::StatusOr<std::vector<const Tensor*>> slice_args(const InferenceContext& ctx, bool required) {
  constexpr const char* kNames[] = {"starts", "ends", "axes", "steps"};
  std::vector<const Tensor*> args(4, nullptr);
  for (int i = 1; i <= 4; ++i) {
    if (!ctx.has_input(i)) continue;
    // ONNX says 1-D; a scalar is read as one element, as ONNX Runtime reads it (PyTorch's
    // TorchScript exporter slices a Loop's iteration with scalars, e.g. for tensor_split).
    if (ctx.input_type(i).shape.size() > 1) {
      return absl::InvalidArgumentError(str_cat("input ", i, " ('", kNames[i - 1],
                                                "') must be 1-D (or a scalar), got shape ",
                                                shape_to_string(ctx.input_type(i).shape)));
    }
    const Tensor* value = ctx.input_value(i);
    if (value == nullptr || !value->has_data()) {
      if (!required) return std::vector<const Tensor*>{};
      return absl::InvalidArgumentError(
          str_cat("input ", i, " ('", kNames[i - 1],
                  "') must be known at compile time (a constant or foldable shape arithmetic); "
                  "the output shape depends on it"));
    }
    args[i - 1] = value;
  }
  return args;
}

Shape sliced_shape(const std::vector<DimSlice>& dims) {
  Shape out(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) out[d] = dims[d].size;
  return out;
}

absl::Status infer_slice(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const std::vector<const Tensor*> args, slice_args(ctx, true));
  const TensorType& in = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slice(in.shape, args));
  ctx.set_output(0, TensorType{in.dtype, sliced_shape(dims)});
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

// d/dx slice(x) = zeros shaped like x with dy at the positions the slice read.
absl::StatusOr<Grads> slice_grad(GradBuilder& b) {
  std::vector<Value*> operands = {b.grad_of_output(0)};
  for (Value* arg : operands_from(b, 1)) operands.push_back(arg);
  return Grads{b.ampc_op("SliceGrad", operands, {{"shape", b.input(0)->shape()}})};
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
  def.gradient = slice_grad;
  def.autocast.category = AutocastCategory::kClear;
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
      {"3-D, negative axes and steps, i32",
       {{DType::kF32, {3, 4, 5}},
        {DType::kI32, {2}},
        {DType::kI32, {2}},
        {DType::kI32, {2}},
        {DType::kI32, {2}}},
       {{1, i32s({4, -1})}, {2, i32s({0, -4})}, {3, i32s({-1, 0})}, {4, i32s({-2, -2})}},
       {},
       {{DType::kF32, {2, 4, 2}}}},
  };
  return def;
}

// ---- SliceGrad --------------------------------------------------------------------------------

// dX (of the `shape` attribute) is zero except where Slice(dX, starts, ends, axes, steps) reads,
// which holds dY. The slice arguments are checked against dY's shape when they are known; they
// need not be (the forward Slice's may come from shape arithmetic the rule does not fold).
absl::Status infer_slice_grad(InferenceContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  const Shape& shape = ctx.ints_attr("shape");
  AMPC_ASSIGN_OR_RETURN(const std::vector<const Tensor*> args, slice_args(ctx, false));
  if (shape.size() != dy.shape.size() ||
      std::any_of(shape.begin(), shape.end(), [](int64_t dim) { return dim < 0; })) {
    return absl::InvalidArgumentError(str_cat("shape ", shape_to_string(shape),
                                              " is not a shape of dY's rank ", dy.shape.size()));
  }
  if (!args.empty()) {
    AMPC_ASSIGN_OR_RETURN(const std::vector<DimSlice> dims, resolve_slice(shape, args));
    if (sliced_shape(dims) != dy.shape) {
      return absl::InvalidArgumentError(str_cat("slicing shape ", shape_to_string(shape), " gives ",
                                                shape_to_string(sliced_shape(dims)), ", not dY's ",
                                                shape_to_string(dy.shape)));
    }
  }
  ctx.set_output(0, TensorType{dy.dtype, shape});
  return absl::OkStatus();
}

OpDef slice_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "SliceGrad";
  def.since_opset = 1;
  def.summary = "Slice's gradient: zeros of `shape` with dY where the slice read";
  def.inputs = {input("dY", kFloatTypes), input("starts", kIndexTypes), input("ends", kIndexTypes),
                optional_input("axes", kIndexTypes), optional_input("steps", kIndexTypes)};
  def.outputs = {input("dX")};
  def.attrs = {required_attr("shape", AttrKind::kInts)};
  def.infer = infer_slice_grad;
  def.autocast.category = AutocastCategory::kClear;
  // Linear in dY: d/d(dY) slice_grad(dY) = slice(g).
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    std::vector<Value*> operands = {b.grad_of_output(0)};
    for (Value* arg : operands_from(b, 1)) operands.push_back(arg);
    return Grads{b.op("Slice", operands)};
  };
  const TensorType i64_2{DType::kI64, {2}};
  def.samples = {
      {"f32 axes and steps",
       {{DType::kF32, {1, 2}}, i64_2, i64_2, i64_2, i64_2},
       {{1, ints({1, 0})}, {2, ints({2, 3})}, {3, ints({0, 1})}, {4, ints({1, 2})}},
       {{"shape", std::vector<int64_t>{2, 4}}},
       {{DType::kF32, {2, 4}}}},
      {"f16 negative axes and steps",
       {{DType::kF16, {2, 4, 2}}, i64_2, i64_2, i64_2, i64_2},
       {{1, ints({4, -1})}, {2, ints({0, -4})}, {3, ints({-1, 0})}, {4, ints({-2, -2})}},
       {{"shape", std::vector<int64_t>{3, 4, 5}}},
       {{DType::kF16, {3, 4, 5}}}},
      {"bf16 default axes and steps",
       {{DType::kBF16, {1, 3}}, i64_2, i64_2},
       {{1, ints({0, 1})}, {2, ints({-1, 1000})}},
       {{"shape", std::vector<int64_t>{2, 4}}},
       {{DType::kBF16, {2, 4}}}},
  };
  return def;
}

// ---- Gather -----------------------------------------------------------------------------------

// padding_idx, when set, is a row of the gathered axis (PyTorch's, made non-negative).
absl::Status check_padding_idx(InferenceContext& ctx, int64_t dim) {
  if (!ctx.has_attr("padding_idx")) return absl::OkStatus();
  const int64_t row = ctx.int_attr("padding_idx");
  if (row < 0 || row >= dim) {
    return absl::InvalidArgumentError(
        str_cat("padding_idx ", row, " is not a row of the gathered axis of size ", dim));
  }
  return absl::OkStatus();
}

absl::Status infer_gather(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  AMPC_RETURN_IF_ERROR(expect_rank_at_least(ctx, 0, 1));
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        normalize_axis(ctx.int_attr("axis"), data.shape.size()));
  AMPC_RETURN_IF_ERROR(check_padding_idx(ctx, data.shape[axis]));
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

// d/dx gather(x, indices, axis) = zeros shaped like x, plus each slice of dy added at the row its
// index picked: repeated indices sum. PyTorch's padding_idx row gets none (not the derivative:
// the row stays as it is, as in PyTorch). With PyTorch's scale_grad_by_freq, each row's sum is
// divided by the number of times the indices pick it (PyTorch divides each pick's slice before
// adding them; the sums round differently, within a reduction's tolerance). The counts and their
// reciprocals are f32, so a low-precision gradient scales by a rounded 1/count only once.
absl::StatusOr<Grads> gather_grad(GradBuilder& b) {
  const Shape& shape = b.input(0)->shape();
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        normalize_axis(b.node().int_attr("axis"), shape.size()));
  Attributes attrs = {{"axis", axis}, {"shape", shape}};
  if (const AttrValue* padding = b.node().find_attr("padding_idx")) {
    attrs.emplace("padding_idx", *padding);
  }
  Value* dx = b.ampc_op("GatherGrad", {b.grad_of_output(0), b.input(1)}, attrs);
  if (b.node().int_attr("scale_grad_by_freq") == 0) return Grads{dx};
  if (axis != 0) {
    return absl::UnimplementedError(str_cat(
        "scale_grad_by_freq is an embedding's (a Gather along axis 0), not along axis ", axis));
  }
  // ones shaped like the indices, then a 1 for each of the data's other dims: the picks of each
  // row land in a count of shape [rows, 1, ...], which broadcasts over the row.
  Shape ones_shape = b.input(1)->shape();
  Shape counts_shape(shape.size(), 1);
  counts_shape[0] = shape[0];
  ones_shape.insert(ones_shape.end(), shape.size() - 1, 1);
  attrs["shape"] = counts_shape;
  Value* ones = b.op("Expand", {b.scalar(1, DType::kF32), b.int64s(ones_shape)});
  Value* counts = b.ampc_op("GatherGrad", {ones, b.input(1)}, std::move(attrs));
  // A row no index picks has a zero gradient; its count of 0 divides as 1.
  Value* scale = b.op("Reciprocal", {b.op("Max", {counts, b.scalar(1, DType::kF32)})});
  const DType dtype = dx->dtype();
  if (dtype != DType::kF32) scale = b.op("Cast", {scale}, {{"to", dtype}});
  return Grads{b.op("Mul", {dx, scale})};
}

// The extension attributes PyTorch's embedding has beside what Gather does (AttrSpec::extension).
std::vector<AttrSpec> embedding_attrs() {
  AttrSpec padding = optional_attr("padding_idx", AttrKind::kInt);
  AttrSpec by_freq = flag_attr("scale_grad_by_freq", 0);
  padding.extension = by_freq.extension = true;
  return {padding, by_freq};
}

OpDef gather_op() {
  OpDef def;
  def.name = "Gather";
  def.since_opset = 1;  // negative indices (11) only widen what is accepted
  def.summary = "picks entries of `data` along `axis` at `indices` (negative from the back)";
  def.inputs = {input("data"), input("indices", kIndexTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{0})};
  for (AttrSpec& spec : embedding_attrs()) def.attrs.push_back(std::move(spec));
  def.infer = infer_gather;
  def.fold = fold_gather;
  def.gradient = gather_grad;
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
      {"axis 0, repeated and negative indices",
       {{DType::kF32, {5, 3}}, {DType::kI64, {2, 3}}},
       {{1, Tensor::from_i64({2, 3}, {0, 4, -1, 2, 0, -5})}},
       {},
       {{DType::kF32, {2, 3, 3}}}},
      {"axis 1, repeated indices",
       {{DType::kF32, {2, 4, 3}}, {DType::kI32, {5}}},
       {{1, i32s({3, 1, 3, -4, 1})}},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 5, 3}}}},
      {"axis -1",
       {{DType::kF32, {3, 4}}, {DType::kI64, {2}}},
       {{1, ints({1, -1})}},
       {{"axis", int64_t{-1}}},
       {{DType::kF32, {3, 2}}}},
  };
  return def;
}

// ---- GatherGrad -------------------------------------------------------------------------------

// dX of the `shape` attribute; dY is shaped as Gather's output on it: shape[:axis], the indices'
// shape, shape[axis+1:].
absl::Status infer_gather_grad(InferenceContext& ctx) {
  const TensorType& dy = ctx.input_type(0);
  const Shape& shape = ctx.ints_attr("shape");
  if (shape.empty() ||
      std::any_of(shape.begin(), shape.end(), [](int64_t dim) { return dim < 0; })) {
    return absl::InvalidArgumentError(str_cat("shape ", shape_to_string(shape),
                                              " is not the shape of a tensor of rank 1 or more"));
  }
  AMPC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(ctx.int_attr("axis"), shape.size()));
  AMPC_RETURN_IF_ERROR(check_padding_idx(ctx, shape[axis]));
  const Shape& indices = ctx.input_type(1).shape;
  Shape expected(shape.begin(), shape.begin() + axis);
  expected.insert(expected.end(), indices.begin(), indices.end());
  expected.insert(expected.end(), shape.begin() + axis + 1, shape.end());
  if (dy.shape != expected) {
    return absl::InvalidArgumentError(
        str_cat("dY has shape ", shape_to_string(dy.shape), "; gathering ",
                shape_to_string(indices), " indices on axis ", axis, " of shape ",
                shape_to_string(shape), " gives ", shape_to_string(expected)));
  }
  ctx.set_output(0, TensorType{dy.dtype, shape});
  return absl::OkStatus();
}

OpDef gather_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "GatherGrad";
  def.since_opset = 1;
  def.summary = "Gather's gradient: zeros of `shape` plus dY's slices added at their indices";
  def.inputs = {input("dY", kFloatTypes), input("indices", kIndexTypes)};
  def.outputs = {input("dX")};
  def.attrs = {attr("axis", int64_t{0}), required_attr("shape", AttrKind::kInts),
               optional_attr("padding_idx", AttrKind::kInt)};
  def.infer = infer_gather_grad;
  def.autocast.category = AutocastCategory::kClear;
  // Linear in dY: d/d(dY) gather_grad(dY) = gather(g) at the same indices, of g with the
  // padding_idx row zeroed when there is one.
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    const Shape& shape = b.node().ints_attr("shape");
    AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                          normalize_axis(b.node().int_attr("axis"), shape.size()));
    Value* g = b.grad_of_output(0);
    if (const AttrValue* padding = b.node().find_attr("padding_idx")) {
      Shape rows(shape.size() - axis, 1);
      rows[0] = shape[axis];
      std::vector<double> keep(shape[axis], 1.0);
      keep[std::get<int64_t>(*padding)] = 0.0;
      Value* mask = b.constant(Tensor::from_doubles(DType::kBool, rows, keep));
      g = b.op("Where", {mask, g, b.scalar(0.0, g->dtype())});
    }
    return Grads{b.op("Gather", {g, b.input(1)}, {{"axis", axis}})};
  };
  def.samples = {
      {"f32 axis 0, repeated and negative indices",
       {{DType::kF32, {2, 3, 3}}, {DType::kI64, {2, 3}}},
       {{1, Tensor::from_i64({2, 3}, {0, 4, -1, 2, 0, -5})}},
       {{"shape", std::vector<int64_t>{5, 3}}},
       {{DType::kF32, {5, 3}}}},
      {"f16 axis -2",
       {{DType::kF16, {2, 5, 3}}, {DType::kI32, {5}}},
       {{1, i32s({3, 1, 3, -4, 1})}},
       {{"axis", int64_t{-2}}, {"shape", std::vector<int64_t>{2, 4, 3}}},
       {{DType::kF16, {2, 4, 3}}}},
      {"bf16 scalar index",
       {{DType::kBF16, {2, 3}}, {DType::kI64, {}}},
       {},
       {{"axis", int64_t{1}}, {"shape", std::vector<int64_t>{2, 5, 3}}},
       {{DType::kBF16, {2, 5, 3}}}},
      {"padding_idx: that row gets nothing",
       {{DType::kF32, {2, 3, 3}}, {DType::kI64, {2, 3}}},
       {{1, Tensor::from_i64({2, 3}, {0, 4, -1, 2, 0, -5})}},
       {{"shape", std::vector<int64_t>{5, 3}}, {"padding_idx", int64_t{0}}},
       {{DType::kF32, {5, 3}}}},
      {"f16 padding_idx on axis 1, picked twice",
       {{DType::kF16, {2, 5, 3}}, {DType::kI32, {5}}},
       {{1, i32s({3, 1, 3, -4, 1})}},
       {{"axis", int64_t{1}},
        {"shape", std::vector<int64_t>{2, 4, 3}},
        {"padding_idx", int64_t{3}}},
       {{DType::kF16, {2, 4, 3}}}},
  };
  return def;
}

void register_slice_gather_ops(OpRegistry& registry) {
  registry.add(slice_op());
  registry.add(slice_grad_op());
  registry.add(gather_op());
  registry.add(gather_grad_op());
}

const OpRegistration kSliceGatherOps(&register_slice_gather_ops);

}  // namespace
}  // namespace ampc::ops
