// Shape and view ops: Shape, Reshape, Squeeze, Unsqueeze, Flatten, Expand, Identity and Cast
// (Dropout, which computes, is in ops/dropout.cc). Their outputs hold the input's elements in the
// same order under a new shape (or broadcast by Expand, converted by Cast), so most folds are
// byte copies, and so are the gradients: a view's gradient is the output gradient viewed back,
// Expand's is summed back by the autodiff walker, Cast's is a Cast back.
//
// Output shapes that depend on input values (Reshape's and Expand's `shape`) need those values at
// compile time: from initializers or from folded shape arithmetic. Folds of integer data are exact
// (bytes are copied, Cast converts integers through int64, never through double).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <type_traits>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"
#include "runtime/cast_math.h"
#include "runtime/storage_type.h"

namespace ampc::ops {

// The [start, end) range of dims Shape reports (opset 15 attributes; absent before, which reads
// as the whole shape): negative values count from the back, then both clamp to [0, rank].
std::pair<int64_t, int64_t> shape_range(const Node& node, int64_t rank) {
  auto clamp = [rank](int64_t axis) {
    return std::clamp<int64_t>(axis < 0 ? axis + rank : axis, 0, rank);
  };
  const int64_t start = clamp(node.int_attr("start"));
  const int64_t end = node.find_attr("end") ? clamp(node.int_attr("end")) : rank;
  return {start, std::max(start, end)};
}

namespace {

absl::Status expect_rank(const InferenceContext& ctx, int i, std::string_view name, size_t rank) {
  const Shape& shape = ctx.input_type(i).shape;
  if (shape.size() != rank) {
    return absl::InvalidArgumentError(str_cat("input ", i, " ('", name, "') must have rank ", rank,
                                              ", got shape ", shape_to_string(shape)));
  }
  return absl::OkStatus();
}

// The input's bytes under the inferred output type: Reshape, Squeeze, Unsqueeze, Flatten,
// Identity.
absl::StatusOr<std::vector<Tensor>> fold_view(const FoldContext& ctx) {
  const std::span<const uint8_t> bytes = ctx.inputs[0]->bytes();
  return std::vector<Tensor>{
      Tensor(*ctx.output_types[0], std::vector<uint8_t>(bytes.begin(), bytes.end()))};
}

// ---- Shape ------------------------------------------------------------------------------------

absl::Status infer_shape(InferenceContext& ctx) {
  const auto [start, end] = shape_range(ctx.node(), ctx.input_type(0).shape.size());
  ctx.set_output(0, TensorType{DType::kI64, {end - start}});
  return absl::OkStatus();
}

// Reads only the input's static type, so it folds whatever the data (fold_needs_values = false).
absl::StatusOr<std::vector<Tensor>> fold_shape(const FoldContext& ctx) {
  const Shape& shape = ctx.input_types[0]->shape;
  const auto [start, end] = shape_range(ctx.node, shape.size());
  return std::vector<Tensor>{
      Tensor::from_i64({end - start}, Shape(shape.begin() + start, shape.begin() + end))};
}

OpDef shape_op() {
  OpDef def;
  def.name = "Shape";
  def.since_opset = 1;  // opset 15 adds start/end; absent, they mean the whole shape as before
  def.summary = "the input's shape as a 1-D int64 tensor, optionally dims [start, end)";
  def.inputs = {input("data")};
  def.outputs = {input("shape")};
  def.attrs = {attr("start", int64_t{0}), optional_attr("end", AttrKind::kInt)};
  def.infer = infer_shape;
  def.fold = fold_shape;
  def.fold_needs_values = false;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"whole shape", {{DType::kF16, {2, 3, 4}}}, {}, {}, {{DType::kI64, {3}}}},
      {"start -2", {{DType::kF32, {2, 3, 4}}}, {}, {{"start", int64_t{-2}}}, {{DType::kI64, {2}}}},
      {"end past rank clamps",
       {{DType::kF32, {2, 3, 4}}},
       {},
       {{"start", int64_t{1}}, {"end", int64_t{10}}},
       {{DType::kI64, {2}}}},
      {"scalar", {{DType::kI64, {}}}, {}, {}, {{DType::kI64, {0}}}},
  };
  return def;
}

// Reshape, Squeeze, Unsqueeze and Flatten keep the elements' order, so d/dx view(x) = dy viewed
// as x's shape. allowzero keeps a 0 dim of an empty x from meaning "copy dy's dim".
absl::StatusOr<Grads> view_grad(GradBuilder& b) {
  const Shape& shape = b.input(0)->shape();
  Attributes attrs;
  if (std::count(shape.begin(), shape.end(), 0) > 0) attrs["allowzero"] = int64_t{1};
  return Grads{b.op("Reshape", {b.grad_of_output(0), b.int64s(shape)}, std::move(attrs))};
}

// ---- Reshape ----------------------------------------------------------------------------------

absl::StatusOr<int64_t> checked_product(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    return absl::InvalidArgumentError(str_cat("element count overflows int64 (", a, " * ", b, ")"));
  }
  return product;
}

absl::Status infer_reshape(InferenceContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  AMPC_RETURN_IF_ERROR(expect_rank(ctx, 1, "shape", 1));
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> target, constant_ints(ctx, 1, "shape"));
  const std::string target_text = shape_to_string(target);
  const bool allow_zero = ctx.int_attr("allowzero") != 0;
  Shape out(target.size());
  int inferred = -1;
  int64_t known_elements = 1;
  for (int i = 0; i < static_cast<int>(target.size()); ++i) {
    int64_t dim = target[i];
    if (dim == -1) {
      if (inferred >= 0) {
        return absl::InvalidArgumentError(str_cat("shape ", target_text, " has more than one -1"));
      }
      inferred = i;
      continue;
    }
    if (dim < -1) {
      return absl::InvalidArgumentError(str_cat("shape ", target_text, " has invalid dim ", dim));
    }
    if (dim == 0 && !allow_zero) {  // 0 copies the input's dim at the same index
      if (i >= static_cast<int>(in.size())) {
        return absl::InvalidArgumentError(str_cat("shape ", target_text, " copies dim ", i,
                                                  " (a 0) but the input ", shape_to_string(in),
                                                  " has rank ", in.size()));
      }
      dim = in[i];
    }
    out[i] = dim;
    AMPC_ASSIGN_OR_RETURN(known_elements, checked_product(known_elements, dim));
  }
  const int64_t total = num_elements(in);
  if (inferred >= 0) {
    if (allow_zero && std::count(target.begin(), target.end(), 0) > 0) {
      return absl::InvalidArgumentError(
          str_cat("shape ", target_text, " has both 0 and -1, which allowzero=1 forbids"));
    }
    if (known_elements == 0 || total % known_elements != 0) {
      return absl::InvalidArgumentError(str_cat("cannot infer the -1 of shape ", target_text,
                                                " for an input of shape ", shape_to_string(in)));
    }
    out[inferred] = total / known_elements;
  } else if (known_elements != total) {
    return absl::InvalidArgumentError(str_cat("cannot reshape input of shape ", shape_to_string(in),
                                              " (", total, " elements) to ", target_text, " (",
                                              known_elements, " elements)"));
  }
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

OpDef reshape_op() {
  OpDef def;
  def.name = "Reshape";
  def.since_opset = 5;  // shape as an input; allowzero (14) defaults to the old meaning
  def.summary = "the same elements under a new shape (-1 inferred, 0 copies the input dim)";
  def.inputs = {input("data"), input("shape", {DType::kI64})};
  def.outputs = {input("reshaped")};
  def.attrs = {flag_attr("allowzero", 0)};
  def.infer = infer_reshape;
  def.fold = fold_view;
  def.gradient = view_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"infer -1",
       {{DType::kF32, {2, 3, 4}}, {DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {-1, 4})}},
       {},
       {{DType::kF32, {6, 4}}}},
      {"0 copies a dim",
       {{DType::kF16, {2, 3, 4}}, {DType::kI64, {3}}},
       {{1, Tensor::from_i64({3}, {0, 4, 3})}},
       {},
       {{DType::kF16, {2, 4, 3}}}},
      {"allowzero keeps a 0 dim",
       {{DType::kF32, {0, 3}}, {DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {3, 0})}},
       {{"allowzero", int64_t{1}}},
       {{DType::kF32, {3, 0}}}},
  };
  return def;
}

// ---- Squeeze, Unsqueeze, Flatten --------------------------------------------------------------

absl::Status infer_squeeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                        ctx.ints_attr_or_input("axes", 1));
  std::vector<bool> drop(in.size(), false);
  // No axes (or, as ONNX Runtime reads it, an empty list) drops every dim of size 1.
  if (!axes || axes->empty()) {
    for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
  } else {
    AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> normalized, normalize_axes(*axes, in.size()));
    for (int64_t axis : normalized) {
      if (in[axis] != 1) {
        return absl::InvalidArgumentError(str_cat("cannot squeeze axis ", axis, " of shape ",
                                                  shape_to_string(in), ": its size is ", in[axis],
                                                  ", not 1"));
      }
      drop[axis] = true;
    }
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!drop[d]) out.push_back(in[d]);
  }
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

absl::Status infer_unsqueeze(InferenceContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                        ctx.ints_attr_or_input("axes", 1));
  if (!axes) {
    return absl::InvalidArgumentError(
        "needs axes: the 'axes' attribute (before opset 13) or input 1 (from opset 13)");
  }
  const int64_t out_rank = static_cast<int64_t>(in.size() + axes->size());
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> normalized, normalize_axes(*axes, out_rank));
  Shape out(out_rank, 1);
  std::vector<bool> inserted(out_rank, false);
  for (int64_t axis : normalized) inserted[axis] = true;
  size_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (!inserted[d]) out[d] = in[next++];
  }
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

absl::Status infer_flatten(InferenceContext& ctx) {
  const Shape& in = ctx.input_type(0).shape;
  const int64_t rank = in.size();
  int64_t axis = ctx.int_attr("axis");
  // Unlike most axes, rank itself is valid here: everything goes to the outer dim.
  if (axis < -rank || axis > rank) {
    return absl::InvalidArgumentError(
        str_cat("axis ", axis, " is out of range [", -rank, ", ", rank, "] for rank ", rank));
  }
  if (axis < 0) axis += rank;
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype,
                               {num_elements(Shape(in.begin(), in.begin() + axis)),
                                num_elements(Shape(in.begin() + axis, in.end()))}});
  return absl::OkStatus();
}

OpDef squeeze_op() {
  OpDef def;
  def.name = "Squeeze";
  def.since_opset = 1;  // negative axes (11) only widen; axes become an input at 13
  def.summary = "removes dims of size 1 (the given axes, or all)";
  def.inputs = {input("data"), optional_input("axes", {DType::kI64})};
  def.outputs = {input("squeezed")};
  def.attrs = {optional_attr("axes", AttrKind::kInts)};
  def.attrs_as_inputs = {{"axes", 1, 13}};
  def.infer = infer_squeeze;
  def.fold = fold_view;
  def.gradient = view_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"all ones", {{DType::kF32, {1, 3, 1, 2}}}, {}, {}, {{DType::kF32, {3, 2}}}},
      {"axes input",
       {{DType::kF32, {1, 3, 1, 2}}, {DType::kI64, {1}}},
       {{1, Tensor::from_i64({1}, {-2})}},
       {},
       {{DType::kF32, {1, 3, 2}}}},
      {"axes attribute",
       {{DType::kI64, {1, 1}}},
       {},
       {{"axes", std::vector<int64_t>{0}}},
       {{DType::kI64, {1}}}},
  };
  return def;
}

OpDef unsqueeze_op() {
  OpDef def;
  def.name = "Unsqueeze";
  def.since_opset = 1;  // negative axes (11) only widen; axes become an input at 13
  def.summary = "inserts dims of size 1 at the given axes of the output";
  def.inputs = {input("data"), optional_input("axes", {DType::kI64})};
  def.outputs = {input("expanded")};
  def.attrs = {optional_attr("axes", AttrKind::kInts)};
  def.attrs_as_inputs = {{"axes", 1, 13}};
  def.infer = infer_unsqueeze;
  def.fold = fold_view;
  def.gradient = view_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"axes input",
       {{DType::kF32, {3, 4}}, {DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {0, -1})}},
       {},
       {{DType::kF32, {1, 3, 4, 1}}}},
      {"scalar to vector",
       {{DType::kI64, {}}},
       {},
       {{"axes", std::vector<int64_t>{0}}},
       {{DType::kI64, {1}}}},
      {"middle axis",
       {{DType::kBF16, {2, 5}}},
       {},
       {{"axes", std::vector<int64_t>{1}}},
       {{DType::kBF16, {2, 1, 5}}}},
  };
  return def;
}

OpDef flatten_op() {
  OpDef def;
  def.name = "Flatten";
  def.since_opset = 1;  // negative axis (11) only widens what is accepted
  def.summary = "2-D view: dims before axis times dims from axis on";
  def.inputs = {input("input")};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{1})};
  def.infer = infer_flatten;
  def.fold = fold_view;
  def.gradient = view_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"default axis", {{DType::kF32, {2, 3, 4}}}, {}, {}, {{DType::kF32, {2, 12}}}},
      {"axis 0", {{DType::kF16, {2, 3}}}, {}, {{"axis", int64_t{0}}}, {{DType::kF16, {1, 6}}}},
      {"axis -1", {{DType::kF32, {2, 3, 4}}}, {}, {{"axis", int64_t{-1}}}, {{DType::kF32, {6, 4}}}},
  };
  return def;
}

// ---- Expand, Identity -------------------------------------------------------------------------

absl::Status infer_expand(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_rank(ctx, 1, "shape", 1));
  AMPC_ASSIGN_OR_RETURN(const Shape target, constant_ints(ctx, 1, "shape"));
  for (int64_t dim : target) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          str_cat("shape ", shape_to_string(target), " has negative dim ", dim));
    }
  }
  AMPC_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(ctx.input_type(0).shape, target));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_expand(const FoldContext& ctx) {
  const Tensor& in = *ctx.inputs[0];
  const TensorType& out_type = *ctx.output_types[0];
  Tensor out(out_type);
  const int64_t size = dtype_size(in.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const int64_t from = broadcast_offset(unravel(i, out_type.shape), in.shape());
    std::memcpy(out.mutable_bytes().data() + i * size, in.bytes().data() + from * size, size);
  }
  return std::vector<Tensor>{std::move(out)};
}

OpDef expand_op() {
  OpDef def;
  def.name = "Expand";
  def.since_opset = 8;
  def.summary = "broadcasts the input against `shape` (either side's 1s stretch)";
  def.inputs = {input("input"), input("shape", {DType::kI64})};
  def.outputs = {input("output")};
  def.infer = infer_expand;
  def.fold = fold_expand;
  // d/dx expand(x) = dy: the autodiff walker sums it back over the broadcast dims.
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> { return Grads{b.grad_of_output(0)}; };
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"grow leading dims",
       {{DType::kF32, {3, 1}}, {DType::kI64, {3}}},
       {{1, Tensor::from_i64({3}, {2, 3, 4})}},
       {},
       {{DType::kF32, {2, 3, 4}}}},
      {"shape 1s keep input dims",
       {{DType::kF16, {3, 4}}, {DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {1, 4})}},
       {},
       {{DType::kF16, {3, 4}}}},
      {"1s of either side stretch",
       {{DType::kF32, {2, 1, 3}}, {DType::kI64, {3}}},
       {{1, Tensor::from_i64({3}, {2, 4, 1})}},
       {},
       {{DType::kF32, {2, 4, 3}}}},
  };
  return def;
}

OpDef identity_op() {
  OpDef def;
  def.name = "Identity";
  def.since_opset = 1;
  def.summary = "the input, unchanged";
  def.inputs = {input("input")};
  def.outputs = {input("output")};
  // PyTorch's detach(), which ONNX cannot say: the value passes, its gradient does not (autodiff
  // takes no gradient through the node, and canonicalize keeps it). An extension attribute
  // (AttrSpec::extension), read from the FX nodes PyTorch's dynamo exporter records.
  AttrSpec stop_gradient = flag_attr("stop_gradient", 0);
  stop_gradient.extension = true;
  def.attrs = {stop_gradient};
  def.infer = infer_same_as_input;
  def.fold = fold_view;
  // d/dx x = dy.
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> { return Grads{b.grad_of_output(0)}; };
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"matrix", {{DType::kF32, {2, 3}}}, {}, {}, {{DType::kF32, {2, 3}}}},
      {"bool scalar", {{DType::kBool, {}}}, {}, {}, {{DType::kBool, {}}}},
  };
  return def;
}

// ---- Cast -------------------------------------------------------------------------------------

absl::Status infer_cast(InferenceContext& ctx) {
  if (ctx.has_attr("round_mode")) {
    const std::string& mode = ctx.string_attr("round_mode");
    if (ctx.opset() < 24) {
      return absl::InvalidArgumentError(
          str_cat("attribute 'round_mode' is an attribute of Cast from opset 24; the model "
                  "imports opset ",
                  ctx.opset()));
    }
    if (mode != "up" && mode != "down" && mode != "nearest") {
      return absl::InvalidArgumentError(str_cat("attribute 'round_mode' is \"", mode,
                                                "\"; it must be \"up\", \"down\" or \"nearest\""));
    }
  }
  ctx.set_output(0, TensorType{ctx.dtype_attr("to"), ctx.input_type(0).shape});
  return absl::OkStatus();
}

// Integer and bool sources convert through int64 (exact); float sources through double, with
// float -> integer truncating toward zero. An empty result means "not folded": fp8 (storage only
// in the compiler) and non-finite or out-of-range float -> integer values, whose result ONNX
// leaves undefined, are left to the runtime.
// Folds through the kernels' own conversions (runtime/cast_math.h), so a Cast of a constant gives
// the bits the same Cast computes at run time: one rounding, saturating float to integer.
absl::StatusOr<std::vector<Tensor>> fold_cast(const FoldContext& ctx) {
  const Tensor& in = *ctx.inputs[0];
  Tensor out(*ctx.output_types[0]);
  if (in.dtype() == out.dtype()) return std::vector<Tensor>{in};
  const bool saturate = ctx.node.int_attr("saturate") != 0;
  visit_storage_type(in.dtype(), [&]<typename From>(std::type_identity<From>) {
    visit_storage_type(out.dtype(), [&]<typename To>(std::type_identity<To>) {
      const std::span<const uint8_t> src = in.bytes();
      const std::span<uint8_t> dst = out.mutable_bytes();
      for (int64_t i = 0; i < in.num_elements(); ++i) {
        From x;
        std::memcpy(&x, src.data() + i * sizeof(From), sizeof(From));
        const To y = cast_math::cast<From, To>(x, saturate);
        std::memcpy(dst.data() + i * sizeof(To), &y, sizeof(To));
      }
    });
  });
  return std::vector<Tensor>{std::move(out)};
}

// d/dx cast(x) = dy cast back to x's dtype: the gradient of a Cast is a Cast.
absl::StatusOr<Grads> cast_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  const DType from = b.input(0)->dtype();
  if (dy->dtype() == from) return Grads{dy};
  return Grads{b.op("Cast", {dy}, {{"to", from}})};
}

OpDef cast_op() {
  OpDef def;
  def.name = "Cast";
  // `to` is an element type from opset 6 (a string before). 13 adds bf16, 19 fp8 and `saturate`,
  // which only affects fp8 targets, 24 float8e8m0 and `round_mode`, which only affects
  // float8e8m0 targets (not an ampc type); none changes what the cast means for the other types.
  def.since_opset = 6;
  def.summary = "converts the elements to the element type `to`";
  def.inputs = {input("input")};
  def.outputs = {input("output")};
  def.attrs = {required_attr("to", AttrKind::kDType), flag_attr("saturate", 1),
               optional_attr("round_mode", AttrKind::kString)};
  def.infer = infer_cast;
  def.fold = fold_cast;
  def.gradient = cast_grad;
  // The output dtype is the node's own: autocast neither lowers nor raises it.
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"f32 to f16", {{DType::kF32, {2, 3}}}, {}, {{"to", DType::kF16}}, {{DType::kF16, {2, 3}}}},
      {"i64 to f32", {{DType::kI64, {4}}}, {}, {{"to", DType::kF32}}, {{DType::kF32, {4}}}},
      {"bf16 to bool", {{DType::kBF16, {}}}, {}, {{"to", DType::kBool}}, {{DType::kBool, {}}}},
      {"f16 to f64", {{DType::kF16, {3, 2}}}, {}, {{"to", DType::kF64}}, {{DType::kF64, {3, 2}}}},
  };
  return def;
}

void register_shape_ops(OpRegistry& registry) {
  registry.add(shape_op());
  registry.add(reshape_op());
  registry.add(squeeze_op());
  registry.add(unsqueeze_op());
  registry.add(flatten_op());
  registry.add(expand_op());
  registry.add(identity_op());
  registry.add(cast_op());
}

const OpRegistration kShapeOps(&register_shape_ops);

}  // namespace
}  // namespace ampc::ops
