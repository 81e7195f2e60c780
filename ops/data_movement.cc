// Data movement: Transpose, Concat, Split and Trilu (Slice and Gather are in
// ops/slice_gather.cc). Each output element is an input element moved to a new position (or, for
// Trilu, zeroed); no arithmetic on values. Their gradients move the output gradient back with
// the inverse op: Transpose by the inverse permutation, Concat by a Split, Split by a Concat,
// Trilu by the same Trilu; all exact in every dtype.
//
// Split sizes that come from inputs need those inputs at compile time. The folds copy element
// bytes, so they are exact for every dtype.
#include <algorithm>
#include <cstring>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {

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

namespace {

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

// d/dx transpose(x, perm) = transpose(dy, inverse(perm)); reversing the dims (no perm) is its
// own inverse.
absl::StatusOr<Grads> transpose_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  if (!b.node().find_attr("perm")) return Grads{b.op("Transpose", {dy})};
  const std::vector<int64_t>& perm = b.node().ints_attr("perm");
  std::vector<int64_t> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = static_cast<int64_t>(d);
  return Grads{b.op("Transpose", {dy}, {{"perm", inverse}})};
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
  def.gradient = transpose_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"default reverses", {{DType::kF32, {2, 3, 4}}}, {}, {}, {{DType::kF32, {4, 3, 2}}}},
      {"perm",
       {{DType::kF16, {2, 3, 4}}},
       {},
       {{"perm", std::vector<int64_t>{0, 2, 1}}},
       {{DType::kF16, {2, 4, 3}}}},
      {"perm not its own inverse",
       {{DType::kF32, {2, 3, 4}}},
       {},
       {{"perm", std::vector<int64_t>{1, 2, 0}}},
       {{DType::kF32, {3, 4, 2}}}},
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

// d/dx_i concat(x_0, ..., axis) = piece i of dy split along axis by the inputs' sizes there.
absl::StatusOr<Grads> concat_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  const int n = b.node().num_operands();
  if (n == 1) return Grads{dy};
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        normalize_axis(b.node().int_attr("axis"), dy->shape().size()));
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) sizes.push_back(b.input(i)->shape()[axis]);
  return b.op_n(kOnnxDomain, "Split", {dy}, n, {{"axis", axis}, {"split", sizes}});
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
  def.gradient = concat_grad;
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
      {"3-D, axis 0",
       {{DType::kF32, {1, 3, 2}}, {DType::kF32, {2, 3, 2}}},
       {},
       {{"axis", int64_t{0}}},
       {{DType::kF32, {3, 3, 2}}}},
      {"3-D, axis -1, three inputs",
       {{DType::kF32, {2, 3, 1}}, {DType::kF32, {2, 3, 4}}, {DType::kF32, {2, 3, 2}}},
       {},
       {{"axis", int64_t{-1}}},
       {{DType::kF32, {2, 3, 7}}}},
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

// d/dx split(x, axis) = the outputs' gradients concatenated along axis, zeros for outputs no
// gradient flows into (omitted outputs included: their sizes are re-derived as inference cuts).
absl::StatusOr<Grads> split_grad(GradBuilder& b) {
  const Node& node = b.node();
  const TensorType& in = b.input(0)->type();
  AMPC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(node.int_attr("axis"), in.shape.size()));
  std::vector<int64_t> sizes;
  for (int k = 0; k < node.num_outputs() && sizes.empty(); ++k) {
    if (node.has_output(k)) continue;
    std::vector<const TensorType*> types;
    std::vector<const Tensor*> values;
    for (int i = 0; i < node.num_operands(); ++i) {
      types.push_back(node.has_operand(i) ? &node.operand(i)->type() : nullptr);
      values.push_back(node.has_operand(i) ? node.operand(i)->initializer() : nullptr);
    }
    AMPC_ASSIGN_OR_RETURN(sizes,
                          split_sizes(InferenceContext(node, types, values), in.shape[axis]));
  }
  std::vector<Value*> pieces;
  for (int k = 0; k < node.num_outputs(); ++k) {
    if (node.has_output(k)) {
      pieces.push_back(b.grad_of_output_or_zeros(k));
      continue;
    }
    TensorType zeros = in;
    zeros.shape[axis] = sizes[k];
    pieces.push_back(b.constant(Tensor(zeros)));
  }
  if (pieces.size() == 1) return Grads{pieces[0]};
  return Grads{b.op("Concat", pieces, {{"axis", axis}})};
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
  def.gradient = split_grad;
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
      {"3-D, axis -1, split attribute",
       {{DType::kF32, {2, 3, 5}}},
       {},
       {{"axis", int64_t{-1}}, {"split", std::vector<int64_t>{1, 3, 1}}},
       {{DType::kF32, {2, 3, 1}}, {DType::kF32, {2, 3, 3}}, {DType::kF32, {2, 3, 1}}}},
      {"3-D, axis 1, one output",
       {{DType::kF32, {2, 4, 3}}},
       {},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 4, 3}}}},
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

// d/dx trilu(x, k) = trilu(dy, k) with the same `upper`: the kept triangle passes dy through.
absl::StatusOr<Grads> trilu_grad(GradBuilder& b) {
  std::vector<Value*> operands = {b.grad_of_output(0)};
  if (b.has_input(1)) operands.push_back(b.input(1));
  return Grads{b.op("Trilu", operands, {{"upper", b.node().int_attr("upper")}})};
}

OpDef trilu_op() {
  OpDef def;
  def.name = "Trilu";
  def.since_opset = 14;
  def.summary = "keeps the upper (or lower) triangle of the last two dims from diagonal k";
  def.inputs = {input("input"), optional_input("k", {DType::kI64})};
  def.outputs = {input("output")};
  def.attrs = {flag_attr("upper", 1)};
  def.infer = infer_trilu;
  def.gradient = trilu_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"upper", {{DType::kF32, {4, 5}}}, {}, {}, {{DType::kF32, {4, 5}}}},
      {"lower batched with k",
       {{DType::kF16, {2, 3, 3}}, {DType::kI64, {}}},
       {{1, Tensor::from_i64({}, {-1})}},
       {{"upper", int64_t{0}}},
       {{DType::kF16, {2, 3, 3}}}},
      {"upper with k 1, wide",
       {{DType::kF32, {3, 5}}, {DType::kI64, {}}},
       {{1, Tensor::from_i64({}, {1})}},
       {},
       {{DType::kF32, {3, 5}}}},
  };
  return def;
}

void register_data_movement_ops(OpRegistry& registry) {
  registry.add(transpose_op());
  registry.add(concat_op());
  registry.add(split_op());
  registry.add(trilu_op());
}

const OpRegistration kDataMovementOps(&register_data_movement_ops);

}  // namespace
}  // namespace ampc::ops
