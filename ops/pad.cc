// Pad and Tile, which lay input elements out again around or beside themselves.
//
// Pad (opset 11 on: pads, constant_value and, from 18, axes are inputs): widens (or, with
// negative pads, crops) each axis. Modes constant (the value, default 0), reflect (mirrored
// without repeating the edge), edge (the edge repeated) and wrap (opset 19: the other end of the
// axis, PyTorch's circular padding; pads up to the axis size, as PyTorch's, and no crop of the
// same axis). `pads` (and `axes`) must be known at compile time: the output shape depends on
// them.
//
// Gradient: in constant mode, Pad with the pads negated and the value 0 (the crop of what was
// widened, the zero-fill of what was cropped). Reflect, edge and wrap read an input element
// several times: ampc.PadGrad(dY, X, pads) adds each element of dY into the input element it was
// read from (pads: [begin..., end...] over every axis, constant).
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

const std::vector<DType> kIndexTypes = {DType::kI64};

// `pads` ([begin..., end...] over `axes`, or over every axis when `axes` is unset) spread over
// every axis of a rank-`rank` input: [begin..., end...] with 0 for the axes not named.
absl::StatusOr<std::vector<int64_t>> spread_pads(const std::vector<int64_t>& pads,
                                                 const std::optional<std::vector<int64_t>>& axes,
                                                 int64_t rank) {
  std::vector<int64_t> padded;
  if (axes) {
    AMPC_ASSIGN_OR_RETURN(padded, normalize_axes(*axes, rank));
  } else {
    for (int64_t d = 0; d < rank; ++d) padded.push_back(d);
  }
  const int64_t n = static_cast<int64_t>(padded.size());
  if (static_cast<int64_t>(pads.size()) != 2 * n) {
    return absl::InvalidArgumentError(str_cat("pads has ", pads.size(), " values; expected ", 2 * n,
                                              " (a begin and an end per padded axis)"));
  }
  std::vector<int64_t> full(2 * rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    full[padded[k]] = pads[k];
    full[rank + padded[k]] = pads[n + k];
  }
  return full;
}

// The node's pads over every axis, from the values of its pads and axes inputs.
absl::StatusOr<std::vector<int64_t>> full_pads(const InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, constant_ints(ctx, 1, "pads"));
  std::optional<std::vector<int64_t>> axes;
  if (ctx.has_input(3)) {
    AMPC_ASSIGN_OR_RETURN(axes, constant_ints(ctx, 3, "axes"));
  }
  return spread_pads(pads, axes, static_cast<int64_t>(ctx.input_type(0).shape.size()));
}

absl::Status infer_pad(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const std::string& mode = ctx.node().string_attr("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return absl::InvalidArgumentError(
        str_cat("mode \"", mode, "\" is not supported (constant, reflect, edge, wrap)"));
  }
  if (ctx.has_input(2)) {
    const TensorType& value = ctx.input_type(2);
    if (value.num_elements() != 1 || value.dtype != in.dtype) {
      return absl::InvalidArgumentError(str_cat("constant_value must be one ", dtype_name(in.dtype),
                                                " element, got ", type_to_string(value)));
    }
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, full_pads(ctx));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  Shape shape = in.shape;
  for (int64_t d = 0; d < rank; ++d) {
    shape[d] += pads[d] + pads[rank + d];
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(str_cat("pads crop axis ", d, " (size ", in.shape[d],
                                                ") below zero: ", pads[d], " and ",
                                                pads[rank + d]));
    }
    const bool reads_beyond = pads[d] > 0 || pads[rank + d] > 0;
    if (mode == "reflect" && reads_beyond &&
        (pads[d] >= in.shape[d] || pads[rank + d] >= in.shape[d])) {
      return absl::InvalidArgumentError(str_cat("reflect padding of axis ", d, " (size ",
                                                in.shape[d], ") must be below its size, got ",
                                                pads[d], " and ", pads[rank + d]));
    }
    if (mode == "wrap" && reads_beyond &&
        (pads[d] > in.shape[d] || pads[rank + d] > in.shape[d] || pads[d] < 0 ||
         pads[rank + d] < 0)) {
      // A crop beside a wrap has two readings (PyTorch wraps around the cropped axis, numpy
      // refuses): neither is taken.
      return absl::InvalidArgumentError(str_cat("wrap padding of axis ", d, " (size ", in.shape[d],
                                                ") must be at most its size and not beside a "
                                                "crop, got ",
                                                pads[d], " and ", pads[rank + d]));
    }
    if (mode != "constant" && reads_beyond && in.shape[d] == 0) {
      return absl::InvalidArgumentError(
          str_cat(mode, " padding of the empty axis ", d, " has no element to repeat"));
    }
  }
  ctx.set_output(0, TensorType{in.dtype, std::move(shape)});
  return absl::OkStatus();
}

// The pads over every axis, from the node's constant pads and axes (for its gradient).
absl::StatusOr<std::vector<int64_t>> node_pads(const Node& node) {
  auto constant = [&](int i, std::string_view name) -> absl::StatusOr<std::vector<int64_t>> {
    const Tensor* value = node.operand(i)->initializer();
    if (value == nullptr || !value->has_data()) {
      return absl::UnimplementedError(str_cat("Pad's gradient needs constant ", name));
    }
    return value->to_i64_vector();
  };
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, constant(1, "pads"));
  std::optional<std::vector<int64_t>> axes;
  if (node.num_operands() > 3 && node.operand(3) != nullptr) {
    AMPC_ASSIGN_OR_RETURN(axes, constant(3, "axes"));
  }
  return spread_pads(pads, axes, static_cast<int64_t>(node.operand(0)->shape().size()));
}

absl::StatusOr<Grads> pad_grad(GradBuilder& b) {
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, node_pads(b.node()));
  const std::string& mode = b.node().string_attr("mode");
  Value* dx = nullptr;
  if (mode == "constant") {
    for (int64_t& p : pads) p = -p;
    dx = b.op("Pad", {b.grad_of_output(0), b.int64s(pads)}, {{"mode", std::string("constant")}});
  } else {
    dx = b.ampc_op("PadGrad", {b.grad_of_output(0), b.input(0), b.int64s(pads)}, {{"mode", mode}});
  }
  return Grads{dx, nullptr, nullptr, nullptr};
}

// PadGrad(dY, X, pads): dX of X's type.
absl::Status infer_pad_grad(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const int64_t rank = static_cast<int64_t>(ctx.input_type(1).shape.size());
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, constant_ints(ctx, 2, "pads"));
  if (static_cast<int64_t>(pads.size()) != 2 * rank) {
    return absl::InvalidArgumentError(
        str_cat("pads has ", pads.size(), " values; expected ", 2 * rank));
  }
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t size = ctx.input_type(1).shape[d] + pads[d] + pads[rank + d];
    if (ctx.input_type(0).shape[d] != size) {
      return absl::InvalidArgumentError(str_cat("dY's axis ", d, " has size ",
                                                ctx.input_type(0).shape[d], "; the padded size is ",
                                                size));
    }
  }
  ctx.set_output(0, ctx.input_type(1));
  return absl::OkStatus();
}

OpDef pad_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "PadGrad";
  def.summary = "adds each dY element into the X element Pad read it from (reflect, edge, wrap)";
  def.inputs = {input("dY", kFloatTypes), input("X", kFloatTypes), input("pads", kIndexTypes)};
  def.outputs = {input("dX")};
  def.attrs = {attr("mode", std::string("reflect"))};
  def.infer = infer_pad_grad;
  def.no_gradient_inputs = {1, 2};
  def.autocast.category = AutocastCategory::kFollow;  // sums: as exact as the dtype's adds
  const TensorType x{DType::kF32, {2, 3}};
  def.samples = {
      {"reflect",
       {TensorType{DType::kF32, {4, 7}}, x, TensorType{DType::kI64, {4}}},
       {{2, Tensor::from_i64({4}, {1, 2, 1, 2})}},
       {},
       {x}},
      {"edge",
       {TensorType{DType::kF32, {2, 6}}, x, TensorType{DType::kI64, {4}}},
       {{2, Tensor::from_i64({4}, {0, 2, 0, 1})}},
       {{"mode", std::string("edge")}},
       {x}},
      {"wrap, the whole axis on one side",
       {TensorType{DType::kF32, {4, 7}}, x, TensorType{DType::kI64, {4}}},
       {{2, Tensor::from_i64({4}, {1, 3, 1, 1})}},
       {{"mode", std::string("wrap")}},
       {x}},
  };
  return def;
}

OpDef pad_op() {
  OpDef def;
  def.name = "Pad";
  def.since_opset = 11;
  def.summary = "pads (or, with negative pads, crops) each axis: constant, reflect, edge or wrap";
  def.inputs = {input("data"), input("pads", kIndexTypes), optional_input("constant_value"),
                optional_input("axes", kIndexTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("mode", std::string("constant"))};
  def.infer = infer_pad;
  def.gradient = pad_grad;
  def.no_gradient_inputs = {1, 2, 3};
  def.autocast.category = AutocastCategory::kClear;  // moves elements (and adds a constant)
  const TensorType f32_2x3{DType::kF32, {2, 3}};
  auto pads = [](std::vector<int64_t> values) {
    const int64_t n = static_cast<int64_t>(values.size());
    return std::pair<int, Tensor>{1, Tensor::from_i64({n}, values)};
  };
  def.samples = {
      {"constant, both axes",
       {f32_2x3, TensorType{DType::kI64, {4}}},
       {pads({1, 0, 0, 2})},
       {},
       {TensorType{DType::kF32, {3, 5}}}},
      {"constant with a crop",
       {f32_2x3, TensorType{DType::kI64, {4}}},
       {pads({0, -1, 1, 1})},
       {},
       {TensorType{DType::kF32, {3, 3}}}},
      {"reflect",
       {f32_2x3, TensorType{DType::kI64, {4}}},
       {pads({1, 2, 1, 2})},
       {{"mode", std::string("reflect")}},
       {TensorType{DType::kF32, {4, 7}}}},
      {"edge, last axis only",
       {f32_2x3, TensorType{DType::kI64, {2}}, TensorType{DType::kF32, {}},
        TensorType{DType::kI64, {1}}},
       {pads({2, 1}), {3, Tensor::from_i64({1}, {-1})}},
       {{"mode", std::string("edge")}},
       {TensorType{DType::kF32, {2, 6}}}},
      {"wrap, a whole axis, a crop of another",
       {f32_2x3, TensorType{DType::kI64, {4}}},
       {pads({2, -1, 1, 0})},
       {{"mode", std::string("wrap")}},
       {TensorType{DType::kF32, {5, 2}}}},
  };
  return def;
}

// ---- Tile -------------------------------------------------------------------------------------

// Tile(input, repeats): axis d repeated repeats[d] times; repeats must be known at compile time.
absl::Status infer_tile(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, constant_ints(ctx, 1, "repeats"));
  if (repeats.size() != in.shape.size()) {
    return absl::InvalidArgumentError(
        str_cat("repeats has ", repeats.size(), " values; the input has rank ", in.shape.size()));
  }
  Shape shape = in.shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (repeats[d] < 0) {
      return absl::InvalidArgumentError(
          str_cat("repeats[", d, "] is ", repeats[d], "; it must be >= 0"));
    }
    shape[d] *= repeats[d];
  }
  ctx.set_output(0, TensorType{in.dtype, std::move(shape)});
  return absl::OkStatus();
}

// dY viewed as [repeats[0], n0, repeats[1], n1, ...] and summed over the repeat axes.
absl::StatusOr<Grads> tile_grad(GradBuilder& b) {
  const Tensor* repeats = b.node().operand(1)->initializer();
  if (repeats == nullptr || !repeats->has_data()) {
    return absl::UnimplementedError("Tile's gradient needs constant repeats");
  }
  const Shape& shape = b.input(0)->shape();
  const std::vector<int64_t> r = repeats->to_i64_vector();
  std::vector<int64_t> split;
  std::vector<int64_t> axes;
  for (size_t d = 0; d < shape.size(); ++d) {
    axes.push_back(static_cast<int64_t>(split.size()));
    split.push_back(r[d]);
    split.push_back(shape[d]);
  }
  Value* viewed = b.op("Reshape", {b.grad_of_output(0), b.int64s(split)});
  Value* summed = b.op("ReduceSum", {viewed, b.int64s(axes)}, {{"keepdims", int64_t{0}}});
  return Grads{b.op("Reshape", {summed, b.int64s(shape)}), nullptr};
}

OpDef tile_op() {
  OpDef def;
  def.name = "Tile";
  def.since_opset = 6;
  def.summary = "repeats the input repeats[d] times along each axis d";
  def.inputs = {input("input"), input("repeats", kIndexTypes)};
  def.outputs = {input("output")};
  def.infer = infer_tile;
  def.gradient = tile_grad;
  def.no_gradient_inputs = {1};
  def.autocast.category = AutocastCategory::kClear;  // copies elements
  def.samples = {
      {"both axes",
       {TensorType{DType::kF32, {2, 3}}, TensorType{DType::kI64, {2}}},
       {{1, Tensor::from_i64({2}, {2, 3})}},
       {},
       {TensorType{DType::kF32, {4, 9}}}},
      {"one axis of three",
       {TensorType{DType::kF32, {2, 1, 3}}, TensorType{DType::kI64, {3}}},
       {{1, Tensor::from_i64({3}, {1, 4, 1})}},
       {},
       {TensorType{DType::kF32, {2, 4, 3}}}},
  };
  return def;
}

void register_pad_ops(OpRegistry& registry) {
  registry.add(pad_op());
  registry.add(pad_grad_op());
  registry.add(tile_op());
}

const OpRegistration kPadOps(&register_pad_ops);

}  // namespace
}  // namespace ampc::ops
