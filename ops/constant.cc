// Tensor generators: Constant, ConstantOfShape and Range. Their outputs depend only on
// attributes and input values, so they fold whenever those are known; the output shapes of
// ConstantOfShape and Range need their inputs at compile time.
//
// Integer Range is computed in int64 (its length with 128-bit intermediates), so it is exact;
// float Range is computed in its own element type, as a kernel does.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/op_util.h"

namespace ampc::ops {

// ---- Constant ---------------------------------------------------------------------------------

// ONNX's ways of giving a Constant's value; exactly one is present. Strings have no ampc dtype.
constexpr std::string_view kConstantValueAttrs[] = {"value",        "value_float", "value_floats",
                                                    "value_int",    "value_ints",  "value_string",
                                                    "value_strings"};

absl::StatusOr<Tensor> constant_value(const Node& node) {
  std::vector<std::string_view> given;
  for (std::string_view name : kConstantValueAttrs) {
    if (node.find_attr(name)) given.push_back(name);
  }
  if (given.size() != 1) {
    return absl::InvalidArgumentError(
        str_cat("needs exactly one of the attributes ", str_join(kConstantValueAttrs, ", "),
                "; got ", given.empty() ? std::string("none") : str_join(given, ", ")));
  }
  const std::string_view name = given[0];
  if (name == "value") return node.tensor_attr(name);
  if (name == "value_float") return Tensor::from_f32({}, {node.float_attr(name)});
  if (name == "value_int") return Tensor::from_i64({}, {node.int_attr(name)});
  if (name == "value_floats") {
    const std::vector<float>& values = node.floats_attr(name);
    return Tensor::from_f32({static_cast<int64_t>(values.size())}, values);
  }
  if (name == "value_ints") {
    const std::vector<int64_t>& values = node.ints_attr(name);
    return Tensor::from_i64({static_cast<int64_t>(values.size())}, values);
  }
  return absl::UnimplementedError(
      str_cat("attribute '", name, "': string tensors are not supported by ampc"));
}

namespace {

absl::Status infer_constant(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const Tensor value, constant_value(ctx.node()));
  ctx.set_output(0, value.type());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_constant(const FoldContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Tensor value, constant_value(ctx.node));
  // The text IR may elide a large constant's data: then there is nothing to propagate.
  if (!value.has_data()) return std::vector<Tensor>{};
  return std::vector<Tensor>{std::move(value)};
}

OpDef constant_op() {
  OpDef def;
  def.name = "Constant";
  def.since_opset = 1;  // value_* (12) are alternatives to `value`; the importer makes a
  // sparse_value (11) the dense `value` it stands for
  def.summary = "a constant tensor given by one of its value attributes";
  def.outputs = {input("output")};
  def.attrs = {optional_attr("value", AttrKind::kTensor),
               optional_attr("value_float", AttrKind::kFloat),
               optional_attr("value_floats", AttrKind::kFloats),
               optional_attr("value_int", AttrKind::kInt),
               optional_attr("value_ints", AttrKind::kInts),
               optional_attr("value_string", AttrKind::kString),
               optional_attr("value_strings", AttrKind::kStrings)};
  def.infer = infer_constant;
  def.fold = fold_constant;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"tensor",
       {},
       {},
       {{"value", Tensor::from_f32({2, 2}, {1, 2, 3, 4})}},
       {{DType::kF32, {2, 2}}}},
      {"value_int", {}, {}, {{"value_int", int64_t{7}}}, {{DType::kI64, {}}}},
      {"value_floats",
       {},
       {},
       {{"value_floats", std::vector<float>{1, 2, 3}}},
       {{DType::kF32, {3}}}},
  };
  return def;
}

// ---- ConstantOfShape --------------------------------------------------------------------------

absl::Status infer_constant_of_shape(InferenceContext& ctx) {
  const Shape& shape_shape = ctx.input_type(0).shape;
  if (shape_shape.size() != 1) {
    return absl::InvalidArgumentError(
        str_cat("input 0 ('input') must be 1-D, got shape ", shape_to_string(shape_shape)));
  }
  const Tensor* shape_value = ctx.input_value(0);
  if (shape_value == nullptr || !shape_value->has_data()) {
    return absl::InvalidArgumentError(
        "input 0 ('input') must be known at compile time (a constant or foldable shape "
        "arithmetic); the output shape is its value");
  }
  const Shape shape = shape_value->to_i64_vector();
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          str_cat("shape ", shape_to_string(shape), " has negative dim ", dim));
    }
  }
  const Tensor& value = ctx.node().tensor_attr("value");
  if (value.num_elements() != 1) {
    return absl::InvalidArgumentError(
        str_cat("attribute 'value' must hold one element, got ", type_to_string(value.type())));
  }
  ctx.set_output(0, TensorType{value.dtype(), shape});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_constant_of_shape(const FoldContext& ctx) {
  const Tensor& value = ctx.node.tensor_attr("value");
  if (!value.has_data()) return std::vector<Tensor>{};
  Tensor out(*ctx.output_types[0]);
  const size_t size = dtype_size(value.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::memcpy(out.mutable_bytes().data() + i * size, value.bytes().data(), size);
  }
  return std::vector<Tensor>{std::move(out)};
}

OpDef constant_of_shape_op() {
  OpDef def;
  def.name = "ConstantOfShape";
  def.since_opset = 9;
  def.summary = "a tensor of the shape given by the input, filled with `value`";
  def.inputs = {input("input", {DType::kI64})};
  def.outputs = {input("output")};
  // ONNX: "if not specified, it defaults to a tensor of value 0 and datatype float32".
  def.attrs = {attr("value", Tensor::from_f32({1}, {0.0f}))};
  def.infer = infer_constant_of_shape;
  def.fold = fold_constant_of_shape;
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"default f32 zeros",
       {{DType::kI64, {2}}},
       {{0, Tensor::from_i64({2}, {3, 4})}},
       {},
       {{DType::kF32, {3, 4}}}},
      {"i64 value",
       {{DType::kI64, {1}}},
       {{0, Tensor::from_i64({1}, {5})}},
       {{"value", Tensor::from_i64({1}, {1})}},
       {{DType::kI64, {5}}}},
      {"empty shape is a scalar",
       {{DType::kI64, {0}}},
       {{0, Tensor::from_i64({0}, {})}},
       {},
       {{DType::kF32, {}}}},
  };
  return def;
}

// ---- Range ------------------------------------------------------------------------------------

// max(ceil((limit - start) / delta), 0), exactly for integers.
absl::StatusOr<int64_t> range_length_int(int64_t start, int64_t limit, int64_t delta) {
  if (delta == 0) return absl::InvalidArgumentError("delta is 0");
  const __int128 span = static_cast<__int128>(limit) - start;
  __int128 count = span / delta;
  if (count * delta != span && (span > 0) == (delta > 0)) ++count;  // ceil for same signs
  if (count > INT64_MAX) {
    return absl::InvalidArgumentError(
        str_cat("range from ", start, " to ", limit, " by ", delta, " has over 2^63 elements"));
  }
  return static_cast<int64_t>(std::max<__int128>(count, 0));
}

// The same in the element type T of the inputs, as the kernel computes it.
template <typename T>
absl::StatusOr<int64_t> range_length_float(T start, T limit, T delta) {
  if (delta == 0) return absl::InvalidArgumentError("delta is 0");
  const T count = std::ceil((limit - start) / delta);
  if (!std::isfinite(count) || count >= static_cast<T>(0x1p62)) {
    return absl::InvalidArgumentError(str_cat("range from ", start, " to ", limit, " by ", delta,
                                              " does not have a finite length"));
  }
  return std::max<int64_t>(static_cast<int64_t>(count), 0);
}

absl::StatusOr<int64_t> range_length(const Tensor& start, const Tensor& limit,
                                     const Tensor& delta) {
  switch (start.dtype()) {
    case DType::kF32:
      return range_length_float<float>(start.element_as_double(0), limit.element_as_double(0),
                                       delta.element_as_double(0));
    case DType::kF64:
      return range_length_float<double>(start.element_as_double(0), limit.element_as_double(0),
                                        delta.element_as_double(0));
    default:
      return range_length_int(start.element_as_i64(0), limit.element_as_i64(0),
                              delta.element_as_i64(0));
  }
}

absl::Status infer_range(InferenceContext& ctx) {
  // stash_type (opset 27) is the precision f16 and bf16 ranges are computed in; ampc's ranges
  // are f32, f64 or integers, which it leaves alone.
  if (ctx.has_attr("stash_type")) {
    if (ctx.opset() < 27) {
      return absl::InvalidArgumentError(str_cat(
          "attribute 'stash_type' is an attribute of Range from opset 27; the model imports "
          "opset ",
          ctx.opset()));
    }
    if (const int64_t stash = ctx.int_attr("stash_type"); stash != 1 && stash != 11) {
      return absl::InvalidArgumentError(
          str_cat("attribute 'stash_type' is ", stash, "; it must be 1 (float) or 11 (double)"));
    }
  }
  constexpr const char* kNames[] = {"start", "limit", "delta"};
  std::vector<const Tensor*> values;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
    if (ctx.input_type(i).num_elements() != 1) {
      return absl::InvalidArgumentError(str_cat("input ", i, " ('", kNames[i],
                                                "') must be a scalar, got shape ",
                                                shape_to_string(ctx.input_type(i).shape)));
    }
    const Tensor* value = ctx.input_value(i);
    if (value == nullptr || !value->has_data()) {
      return absl::InvalidArgumentError(
          str_cat("input ", i, " ('", kNames[i],
                  "') must be known at compile time (a constant or foldable shape arithmetic); "
                  "the output length depends on it"));
    }
    values.push_back(value);
  }
  AMPC_ASSIGN_OR_RETURN(const int64_t length, range_length(*values[0], *values[1], *values[2]));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, {length}});
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> fold_range(const FoldContext& ctx) {
  const Tensor& start = *ctx.inputs[0];
  const Tensor& delta = *ctx.inputs[2];
  Tensor out(*ctx.output_types[0]);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (out.dtype() == DType::kF32) {
      const float value = static_cast<float>(start.element_as_double(0)) +
                          static_cast<float>(i) * static_cast<float>(delta.element_as_double(0));
      out.set_element(i, value);
    } else if (out.dtype() == DType::kF64) {
      out.set_element(i, start.element_as_double(0) + i * delta.element_as_double(0));
    } else {
      // Wraps like the kernel's integer arithmetic would, without signed-overflow UB.
      const uint64_t value =
          static_cast<uint64_t>(start.element_as_i64(0)) +
          static_cast<uint64_t>(i) * static_cast<uint64_t>(delta.element_as_i64(0));
      out.set_element_i64(i, static_cast<int64_t>(value));
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

OpDef range_op() {
  OpDef def;
  def.name = "Range";
  def.since_opset = 11;
  def.summary = "start, start + delta, ... up to limit (exclusive)";
  const std::vector<DType> types = {DType::kF32, DType::kF64, DType::kI32, DType::kI64};
  def.inputs = {input("start", types), input("limit", types), input("delta", types)};
  def.outputs = {input("output")};
  def.attrs = {optional_attr("stash_type", AttrKind::kInt)};
  def.infer = infer_range;
  def.fold = fold_range;
  // start, limit and delta only place the elements; nothing trains through them.
  def.no_gradient_inputs = {0, 1, 2};
  def.autocast.category = AutocastCategory::kClear;
  auto i64 = [](int64_t v) { return Tensor::from_i64({}, {v}); };
  auto f32 = [](float v) { return Tensor::from_f32({}, {v}); };
  const TensorType i64_scalar{DType::kI64, {}};
  const TensorType f32_scalar{DType::kF32, {}};
  def.samples = {
      {"int 3 to 9 by 3",
       {i64_scalar, i64_scalar, i64_scalar},
       {{0, i64(3)}, {1, i64(9)}, {2, i64(3)}},
       {},
       {{DType::kI64, {2}}}},
      {"int 10 down to 4 by -2",
       {i64_scalar, i64_scalar, i64_scalar},
       {{0, i64(10)}, {1, i64(4)}, {2, i64(-2)}},
       {},
       {{DType::kI64, {3}}}},
      {"float 1 to 5 by 0.5",
       {f32_scalar, f32_scalar, f32_scalar},
       {{0, f32(1)}, {1, f32(5)}, {2, f32(0.5f)}},
       {},
       {{DType::kF32, {8}}}},
  };
  return def;
}

void register_constant_ops(OpRegistry& registry) {
  registry.add(constant_op());
  registry.add(constant_of_shape_op());
  registry.add(range_op());
}

const OpRegistration kConstantOps(&register_constant_ops);

}  // namespace
}  // namespace ampc::ops
