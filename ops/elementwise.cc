// Element-wise ops: arithmetic (Add, Sub, Mul, Div, Mod, Pow), unary math (Sqrt, Exp, Log, Neg,
// Abs, Reciprocal), variadic Min and Max, Clip, Where, the comparisons Equal, Less, Greater,
// LessOrEqual and GreaterOrEqual, the logical And, Or, Xor and Not, and the float tests IsNaN and
// IsInf. Operands broadcast numpy-style. Their gradient rules are in ops/elementwise_grad.cc.
//
// The ops that take part in shape arithmetic fold. Integer and bool operands are combined in
// int64 (wrapping on overflow, integer division truncating toward zero as ONNX Runtime does), so
// folds stay exact beyond 2^53; float operands are combined in double and rounded once to the
// output type.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <tuple>

#include "ops/elementwise_grad.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

using IntFn = absl::StatusOr<int64_t> (*)(std::span<const int64_t> args);
using FloatFn = double (*)(std::span<const double> args);

bool is_exact_integer(DType dtype) { return is_integer(dtype) || dtype == DType::kBool; }

// Folds over broadcast inputs: in int64 with `int_fn` when every operand is an integer or bool
// (and `int_fn` is given), else in double with `float_fn`.
absl::StatusOr<std::vector<Tensor>> fold_map(const FoldContext& ctx, IntFn int_fn,
                                             FloatFn float_fn) {
  const TensorType& out_type = *ctx.output_types.at(0);
  Tensor out(out_type);
  const bool in_int64 = int_fn != nullptr &&
                        std::all_of(ctx.inputs.begin(), ctx.inputs.end(),
                                    [](const Tensor* in) { return is_exact_integer(in->dtype()); });
  std::vector<int64_t> ints(ctx.inputs.size());
  std::vector<double> reals(ctx.inputs.size());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = unravel(i, out_type.shape);
    for (size_t k = 0; k < ctx.inputs.size(); ++k) {
      const int64_t offset = broadcast_offset(index, ctx.inputs[k]->shape());
      if (in_int64) {
        ints[k] = ctx.inputs[k]->element_as_i64(offset);
      } else {
        reals[k] = ctx.inputs[k]->element_as_double(offset);
      }
    }
    if (in_int64) {
      AMPC_ASSIGN_OR_RETURN(const int64_t value, int_fn(ints));
      out.set_element_i64(i, value);
    } else {
      out.set_element(i, float_fn(reals));
    }
  }
  return std::vector<Tensor>{std::move(out)};
}

// Two's-complement arithmetic without signed-overflow undefined behaviour.
int64_t wrap(uint64_t bits) { return static_cast<int64_t>(bits); }
uint64_t bits(int64_t value) { return static_cast<uint64_t>(value); }

absl::StatusOr<int64_t> int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    // 1 / base^n truncated toward zero.
    if (base == 0) return absl::InvalidArgumentError("integer Pow of 0 to a negative exponent");
    if (base == 1) return 1;
    if (base == -1) return exponent % 2 == 0 ? 1 : -1;
    return 0;
  }
  uint64_t result = 1;
  uint64_t factor = bits(base);
  for (uint64_t e = bits(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return wrap(result);
}

absl::StatusOr<int64_t> int_div(int64_t a, int64_t b) {
  if (b == 0) return absl::InvalidArgumentError("integer division by zero");
  if (b == -1) return wrap(0 - bits(a));  // INT64_MIN / -1 wraps instead of trapping
  return a / b;
}

// ---- Definitions --------------------------------------------------------------------------

OpDef make_def(std::string name, int since_opset, std::string summary,
               std::vector<OperandSpec> inputs, AutocastCategory category) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = since_opset;
  def.summary = std::move(summary);
  def.inputs = std::move(inputs);
  def.outputs = {input("C")};
  def.autocast.category = category;
  def.gradient = elementwise_gradient(def.name);
  return def;
}

Tensor scalar_f32(float value) { return Tensor::from_f32({}, {value}); }

// Two same-typed operands broadcast into one output of their type.
OpDef binary(std::string name, std::string summary, AutocastCategory category, IntFn int_fn,
             FloatFn float_fn) {
  OpDef def = make_def(std::move(name), 7, std::move(summary),
                       {input("A", kNumericTypes), input("B", kNumericTypes)}, category);
  def.infer = [](InferenceContext& ctx) { return infer_broadcast(ctx); };
  def.fold = [int_fn, float_fn](const FoldContext& ctx) { return fold_map(ctx, int_fn, float_fn); };
  def.samples = {
      {"row broadcast", {f32({2, 3}), f32({3})}, {}, {}, {f32({2, 3})}},
      {"i64 scalar with vector", {i64({}), i64({4})}, {}, {}, {i64({4})}},
      {"both sides broadcast", {f32({4, 1, 5}), f32({3, 1})}, {}, {}, {f32({4, 3, 5})}},
      {"column times row", {f32({2, 1}), f32({1, 3})}, {}, {}, {f32({2, 3})}},
      {"scalar first", {f32({}), f32({2, 3})}, {}, {}, {f32({2, 3})}},
      {"bf16 same shapes",
       {TensorType{DType::kBF16, {2, 2}}, TensorType{DType::kBF16, {2, 2}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 2}}}},
  };
  return def;
}

void register_arithmetic(OpRegistry& registry) {
  using Ints = std::span<const int64_t>;
  using Reals = std::span<const double>;
  registry.add(binary(
      "Add", "a + b", AutocastCategory::kFollow,
      [](Ints a) -> absl::StatusOr<int64_t> { return wrap(bits(a[0]) + bits(a[1])); },
      [](Reals a) { return a[0] + a[1]; }));
  registry.add(binary(
      "Sub", "a - b", AutocastCategory::kFollow,
      [](Ints a) -> absl::StatusOr<int64_t> { return wrap(bits(a[0]) - bits(a[1])); },
      [](Reals a) { return a[0] - a[1]; }));
  registry.add(binary(
      "Mul", "a * b", AutocastCategory::kFollow,
      [](Ints a) -> absl::StatusOr<int64_t> { return wrap(bits(a[0]) * bits(a[1])); },
      [](Reals a) { return a[0] * a[1]; }));
  registry.add(binary(
      "Div", "a / b (integers truncate toward zero)", AutocastCategory::kFollow,
      [](Ints a) { return int_div(a[0], a[1]); }, [](Reals a) { return a[0] / a[1]; }));

  // Mod: fmod = 1 truncates (the dividend's sign, C's fmod and %), fmod = 0 floors (the
  // divisor's sign, Python's %; ONNX asks fmod = 1 of floats, whose fmod = 0 follows numpy).
  OpDef mod =
      make_def("Mod", 10, "a mod b: the dividend's sign with fmod = 1, the divisor's with 0",
               {input("A", kNumericTypes), input("B", kNumericTypes)}, AutocastCategory::kFollow);
  mod.attrs = {flag_attr("fmod", 0)};
  // fmod is 0 or 1 (AttrSpec::int_range).
  mod.infer = [](InferenceContext& ctx) { return infer_broadcast(ctx); };
  mod.fold = [](const FoldContext& ctx) {
    if (ctx.node.int_attr("fmod") != 0) {
      return fold_map(
          ctx,
          [](Ints a) -> absl::StatusOr<int64_t> {
            if (a[1] == 0) return absl::InvalidArgumentError("integer Mod by zero");
            return a[1] == -1 ? 0 : a[0] % a[1];
          },
          [](Reals a) { return std::fmod(a[0], a[1]); });
    }
    return fold_map(
        ctx,
        [](Ints a) -> absl::StatusOr<int64_t> {
          if (a[1] == 0) return absl::InvalidArgumentError("integer Mod by zero");
          const int64_t r = a[1] == -1 ? 0 : a[0] % a[1];
          return r != 0 && (r < 0) != (a[1] < 0) ? r + a[1] : r;
        },
        [](Reals a) {
          const double r = std::fmod(a[0], a[1]);
          if (r == 0) return std::copysign(0.0, a[1]);
          return (r < 0) != (a[1] < 0) ? r + a[1] : r;
        });
  };
  mod.samples = {
      {"row broadcast", {f32({2, 3}), f32({3})}, {}, {{"fmod", int64_t{1}}}, {f32({2, 3})}},
      {"i64 floored", {i64({4}), i64({})}, {}, {}, {i64({4})}},
      {"bf16 truncated",
       {TensorType{DType::kBF16, {2, 2}}, TensorType{DType::kBF16, {2, 2}}},
       {},
       {{"fmod", int64_t{1}}},
       {TensorType{DType::kBF16, {2, 2}}}},
  };
  registry.add(std::move(mod));

  // Pow keeps the base's type whatever the exponent's (mixed types from opset 12).
  OpDef pow =
      make_def("Pow", 7, "x ^ y, in x's element type",
               {input("X", kNumericTypes), input("Y", kNumericTypes)}, AutocastCategory::kDeny);
  pow.infer = [](InferenceContext& ctx) -> absl::Status {
    if (ctx.opset() < 12) AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
    AMPC_ASSIGN_OR_RETURN(Shape shape,
                          broadcast_shapes(ctx.input_type(0).shape, ctx.input_type(1).shape));
    ctx.set_output(0, TensorType{ctx.input_type(0).dtype, std::move(shape)});
    return absl::OkStatus();
  };
  pow.fold = [](const FoldContext& ctx) {
    return fold_map(
        ctx, [](Ints a) { return int_pow(a[0], a[1]); },
        [](Reals a) { return std::pow(a[0], a[1]); });
  };
  pow.samples = {
      {"scalar exponent", {f32({2, 3}), f32({})}, {}, {}, {f32({2, 3})}},
      {"f32 base, i64 exponent", {f32({4}), i64({1})}, {}, {}, {f32({4})}},
      {"i64 base, f32 exponent", {i64({2, 1}), f32({3})}, {}, {}, {i64({2, 3})}},
      {"exponent row broadcast", {f32({2, 3}), f32({3})}, {}, {}, {f32({2, 3})}},
      {"base broadcast", {f32({3}), f32({2, 3})}, {}, {}, {f32({2, 3})}},
      {"constant square", {f32({2, 3}), f32({})}, {{1, scalar_f32(2)}}, {}, {f32({2, 3})}},
      {"constant -1.5", {f32({4}), f32({})}, {{1, scalar_f32(-1.5f)}}, {}, {f32({4})}},
      {"constant exponents with a zero",
       {f32({2, 3}), f32({3})},
       {{1, Tensor::from_f32({3}, {0, 0.5f, 3})}},
       {},
       {f32({2, 3})}},
  };
  registry.add(std::move(pow));
}

// ---- Unary --------------------------------------------------------------------------------

OpDef unary(std::string name, std::string summary, std::vector<DType> dtypes,
            AutocastCategory category) {
  OpDef def =
      make_def(std::move(name), 6, std::move(summary), {input("X", std::move(dtypes))}, category);
  def.outputs = {input("Y")};
  def.infer = infer_same_as_input;
  def.samples = {
      {"vector", {f32({5})}, {}, {}, {f32({5})}},
      {"bf16 matrix",
       {TensorType{DType::kBF16, {2, 3}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 3}}}},
      {"scalar", {f32({})}, {}, {}, {f32({})}},
  };
  return def;
}

double floor_of(std::span<const double> a) { return std::floor(a[0]); }
double ceil_of(std::span<const double> a) { return std::ceil(a[0]); }
// nearbyint in the default rounding mode: halves to even.
double round_half_even(std::span<const double> a) { return std::nearbyint(a[0]); }

void register_unary(OpRegistry& registry) {
  using Ints = std::span<const int64_t>;
  using Reals = std::span<const double>;
  OpDef sqrt = unary("Sqrt", "square root", kFloatTypes, AutocastCategory::kFollow);
  sqrt.fold = [](const FoldContext& ctx) {
    return fold_map(ctx, nullptr, [](Reals a) { return std::sqrt(a[0]); });
  };
  registry.add(std::move(sqrt));
  registry.add(unary("Exp", "e ^ x", kFloatTypes, AutocastCategory::kDeny));
  registry.add(unary("Log", "natural logarithm", kFloatTypes, AutocastCategory::kDeny));

  OpDef reciprocal = unary("Reciprocal", "1 / x", kFloatTypes, AutocastCategory::kDeny);
  reciprocal.fold = [](const FoldContext& ctx) {
    return fold_map(ctx, nullptr, [](Reals a) { return 1.0 / a[0]; });
  };
  registry.add(std::move(reciprocal));

  // Floor, Ceil and Round (halves to even, as numpy's round) give integers exactly representable
  // in the operand's dtype: exact in every dtype. Their derivative is 0 wherever it exists, so
  // no gradient flows back through them (PyTorch's is zeros).
  for (auto [name, summary, fn] :
       {std::tuple{"Floor", "the largest integer <= x", &floor_of},
        std::tuple{"Ceil", "the smallest integer >= x", &ceil_of},
        std::tuple{"Round", "the nearest integer, halves to even", &round_half_even}}) {
    OpDef def = unary(name, summary, kFloatTypes, AutocastCategory::kClear);
    def.since_opset = std::string_view(name) == "Round" ? 11 : 6;
    def.no_gradient_outputs = {0};
    def.fold = [fn](const FoldContext& ctx) { return fold_map(ctx, nullptr, fn); };
    registry.add(std::move(def));
  }

  // Negation and absolute value change no bits but the sign: exact in every dtype.
  std::vector<DType> signed_types = kFloatTypes;
  signed_types.insert(signed_types.end(), {DType::kI64, DType::kI32, DType::kI8});
  OpDef neg = unary("Neg", "-x", signed_types, AutocastCategory::kClear);
  neg.fold = [](const FoldContext& ctx) {
    return fold_map(
        ctx, [](Ints a) -> absl::StatusOr<int64_t> { return wrap(0 - bits(a[0])); },
        [](Reals a) { return -a[0]; });
  };
  neg.samples.push_back({"i64", {i64({3})}, {}, {}, {i64({3})}});
  registry.add(std::move(neg));

  OpDef abs = unary("Abs", "|x|", kNumericTypes, AutocastCategory::kClear);
  abs.fold = [](const FoldContext& ctx) {
    return fold_map(
        ctx,
        [](Ints a) -> absl::StatusOr<int64_t> { return a[0] < 0 ? wrap(0 - bits(a[0])) : a[0]; },
        [](Reals a) { return std::fabs(a[0]); });
  };
  abs.samples.push_back({"i64", {i64({3})}, {}, {}, {i64({3})}});
  registry.add(std::move(abs));
}

// ---- Min, Max, Clip -----------------------------------------------------------------------

OpDef variadic_extremum(std::string name, IntFn int_fn, FloatFn float_fn) {
  OpDef def = make_def(std::move(name), 8, "element-wise extremum of all inputs, broadcast",
                       {variadic_input("data_0", kNumericTypes)}, AutocastCategory::kClear);
  def.infer = [](InferenceContext& ctx) { return infer_broadcast(ctx); };
  def.fold = [int_fn, float_fn](const FoldContext& ctx) { return fold_map(ctx, int_fn, float_fn); };
  def.samples = {
      {"one input", {f32({2, 3})}, {}, {}, {f32({2, 3})}},
      {"three inputs broadcast", {f32({2, 1}), f32({3}), f32({})}, {}, {}, {f32({2, 3})}},
      {"i64 pair", {i64({4}), i64({4})}, {}, {}, {i64({4})}},
      {"pair", {f32({2, 3}), f32({2, 3})}, {}, {}, {f32({2, 3})}},
  };
  return def;
}

// Min and max of the operands; a NaN operand wins, as in the ONNX reference (numpy).
double min_of(std::span<const double> args) {
  double m = args[0];
  for (double x : args) m = (std::isnan(x) || x < m) ? x : m;
  return m;
}
double max_of(std::span<const double> args) {
  double m = args[0];
  for (double x : args) m = (std::isnan(x) || x > m) ? x : m;
  return m;
}

absl::Status infer_clip(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  for (int i : {1, 2}) {
    if (!ctx.has_input(i)) continue;
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, i));
    const Shape& bound = ctx.input_type(i).shape;
    // ONNX asks for a scalar; ONNX Runtime also takes a one-element vector, and so do we.
    if (bound.size() > 1 || num_elements(bound) != 1) {
      return absl::InvalidArgumentError(str_cat("input ", i, " ('", i == 1 ? "min" : "max",
                                                "') must be a scalar, got shape ",
                                                shape_to_string(bound)));
    }
  }
  ctx.set_output(0, in);
  return absl::OkStatus();
}

void register_extrema(OpRegistry& registry) {
  using Ints = std::span<const int64_t>;
  registry.add(variadic_extremum(
      "Min",
      [](Ints a) -> absl::StatusOr<int64_t> { return *std::min_element(a.begin(), a.end()); },
      min_of));
  registry.add(variadic_extremum(
      "Max",
      [](Ints a) -> absl::StatusOr<int64_t> { return *std::max_element(a.begin(), a.end()); },
      max_of));

  // From opset 11 the bounds are inputs (attributes before).
  OpDef clip = make_def("Clip", 11, "min(max(x, min), max); absent bounds do not clip",
                        {input("input", kNumericTypes), optional_input("min", kNumericTypes),
                         optional_input("max", kNumericTypes)},
                        AutocastCategory::kClear);
  clip.outputs = {input("output")};
  clip.infer = infer_clip;
  // Bounds computed from trained values get gradients, as PyTorch's clamp gives them; bounds
  // stored as initializers are hyperparameters (ReLU6's 0 and 6), not trained.
  clip.hyperparameter_inputs = {1, 2};
  clip.samples = {
      {"no bounds", {f32({2, 3})}, {}, {}, {f32({2, 3})}},
      {"both bounds",
       {f32({2, 4}), f32({}), f32({})},
       {{1, scalar_f32(-0.5f)}, {2, scalar_f32(0.6f)}},
       {},
       {f32({2, 4})}},
      {"both bounds computed at run time (differentiated)",
       {f32({2, 4}), f32({}), f32({})},
       {},
       {},
       {f32({2, 4})}},
      {"min only, one-element vector",
       {f32({6}), f32({1})},
       {{1, Tensor::from_f32({1}, {0.1f})}},
       {},
       {f32({6})}},
      {"i64 constant bounds",
       {i64({3}), i64({}), i64({})},
       {{1, Tensor::from_i64({}, {0})}, {2, Tensor::from_i64({}, {5})}},
       {},
       {i64({3})}},
  };
  registry.add(std::move(clip));
}

// ---- Where --------------------------------------------------------------------------------

absl::Status infer_where(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 1, 2));
  AMPC_ASSIGN_OR_RETURN(Shape shape,
                        broadcast_shapes(ctx.input_type(0).shape, ctx.input_type(1).shape));
  AMPC_ASSIGN_OR_RETURN(shape, broadcast_shapes(shape, ctx.input_type(2).shape));
  ctx.set_output(0, TensorType{ctx.input_type(1).dtype, std::move(shape)});
  return absl::OkStatus();
}

// Copies the chosen element's bytes, so every dtype folds exactly.
absl::StatusOr<std::vector<Tensor>> fold_where(const FoldContext& ctx) {
  const TensorType& out_type = *ctx.output_types.at(0);
  Tensor out(out_type);
  const size_t size = static_cast<size_t>(dtype_size(out_type.dtype));
  std::span<uint8_t> out_bytes = out.mutable_bytes();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = unravel(i, out_type.shape);
    const Tensor& cond = *ctx.inputs[0];
    const Tensor& chosen = cond.element_as_i64(broadcast_offset(index, cond.shape()))
                               ? *ctx.inputs[1]
                               : *ctx.inputs[2];
    const int64_t offset = broadcast_offset(index, chosen.shape());
    std::memcpy(out_bytes.data() + i * size, chosen.bytes().data() + offset * size, size);
  }
  return std::vector<Tensor>{std::move(out)};
}

void register_where(OpRegistry& registry) {
  OpDef where = make_def("Where", 9, "condition ? x : y, broadcast over all three",
                         {input("condition", {DType::kBool}), input("X"), input("Y")},
                         AutocastCategory::kClear);
  where.outputs = {input("output")};
  where.infer = infer_where;
  where.fold = fold_where;
  where.samples = {
      {"same shapes", {boolean({2, 3}), f32({2, 3}), f32({2, 3})}, {}, {}, {f32({2, 3})}},
      {"three-way broadcast", {boolean({3, 1}), i64({1, 4}), i64({})}, {}, {}, {i64({3, 4})}},
      {"f32 three-way broadcast", {boolean({3, 1}), f32({1, 4}), f32({})}, {}, {}, {f32({3, 4})}},
  };
  registry.add(std::move(where));
}

// ---- Comparisons and Not ------------------------------------------------------------------

// `allowed_before`: until `widened_at`, the op accepted only these element types.
OpDef comparison(std::string name, std::string summary, std::vector<DType> dtypes, int since,
                 int widened_at, std::vector<DType> allowed_before, IntFn int_fn,
                 FloatFn float_fn) {
  OpDef def = make_def(std::move(name), since, std::move(summary),
                       {input("A", dtypes), input("B", dtypes)}, AutocastCategory::kClear);
  def.infer = [widened_at, allowed_before](InferenceContext& ctx) -> absl::Status {
    const DType dtype = ctx.input_type(0).dtype;
    if (ctx.opset() < widened_at &&
        std::find(allowed_before.begin(), allowed_before.end(), dtype) == allowed_before.end()) {
      return absl::InvalidArgumentError(str_cat("element type ", dtype_name(dtype),
                                                " is accepted from opset ", widened_at,
                                                "; the model's opset is ", ctx.opset()));
    }
    return infer_broadcast(ctx, DType::kBool);
  };
  def.fold = [int_fn, float_fn](const FoldContext& ctx) { return fold_map(ctx, int_fn, float_fn); };
  def.samples = {
      {"f32 broadcast", {f32({2, 3}), f32({3})}, {}, {}, {boolean({2, 3})}},
      {"i64 scalar", {i64({4}), i64({})}, {}, {}, {boolean({4})}},
  };
  return def;
}

// And, Or, Xor: bool operands, broadcast (opset 7 on).
OpDef logical(std::string name, std::string summary, IntFn int_fn) {
  OpDef def =
      make_def(std::move(name), 7, std::move(summary),
               {input("A", {DType::kBool}), input("B", {DType::kBool})}, AutocastCategory::kClear);
  def.infer = [](InferenceContext& ctx) { return infer_broadcast(ctx, DType::kBool); };
  def.fold = [int_fn](const FoldContext& ctx) { return fold_map(ctx, int_fn, nullptr); };
  def.samples = {
      {"same shapes", {boolean({2, 3}), boolean({2, 3})}, {}, {}, {boolean({2, 3})}},
      {"broadcast", {boolean({2, 1}), boolean({4})}, {}, {}, {boolean({2, 4})}},
  };
  return def;
}

void register_logic(OpRegistry& registry) {
  using Ints = std::span<const int64_t>;
  using Reals = std::span<const double>;
  std::vector<DType> equal_types = kNumericTypes;
  equal_types.push_back(DType::kBool);
  registry.add(comparison(
      "Equal", "a == b", equal_types, 7, 11, {DType::kBool, DType::kI32, DType::kI64},
      [](Ints a) -> absl::StatusOr<int64_t> { return a[0] == a[1]; },
      [](Reals a) -> double { return a[0] == a[1]; }));
  registry.add(comparison(
      "Less", "a < b", kNumericTypes, 7, 9, kFloatTypes,
      [](Ints a) -> absl::StatusOr<int64_t> { return a[0] < a[1]; },
      [](Reals a) -> double { return a[0] < a[1]; }));
  registry.add(comparison(
      "Greater", "a > b", kNumericTypes, 7, 9, kFloatTypes,
      [](Ints a) -> absl::StatusOr<int64_t> { return a[0] > a[1]; },
      [](Reals a) -> double { return a[0] > a[1]; }));

  registry.add(comparison(
      "LessOrEqual", "a <= b", kNumericTypes, 12, 12, kNumericTypes,
      [](Ints a) -> absl::StatusOr<int64_t> { return a[0] <= a[1]; },
      [](Reals a) -> double { return a[0] <= a[1]; }));
  registry.add(comparison(
      "GreaterOrEqual", "a >= b", kNumericTypes, 12, 12, kNumericTypes,
      [](Ints a) -> absl::StatusOr<int64_t> { return a[0] >= a[1]; },
      [](Reals a) -> double { return a[0] >= a[1]; }));
  registry.add(logical("And", "a and b",
                       [](Ints a) -> absl::StatusOr<int64_t> { return a[0] != 0 && a[1] != 0; }));
  registry.add(logical("Or", "a or b",
                       [](Ints a) -> absl::StatusOr<int64_t> { return a[0] != 0 || a[1] != 0; }));
  registry.add(logical("Xor", "a xor b", [](Ints a) -> absl::StatusOr<int64_t> {
    return (a[0] != 0) != (a[1] != 0);
  }));

  OpDef logical_not = make_def("Not", 1, "logical negation", {input("X", {DType::kBool})},
                               AutocastCategory::kClear);
  logical_not.outputs = {input("Y")};
  logical_not.infer = infer_same_as_input;
  logical_not.fold = [](const FoldContext& ctx) {
    return fold_map(
        ctx, [](Ints a) -> absl::StatusOr<int64_t> { return a[0] == 0; }, nullptr);
  };
  logical_not.samples = {
      {"vector", {boolean({4})}, {}, {}, {boolean({4})}},
      {"matrix", {boolean({2, 3})}, {}, {}, {boolean({2, 3})}},
  };
  registry.add(std::move(logical_not));
}

// ---- IsNaN, IsInf -------------------------------------------------------------------------

// A float test: bool of X's shape. Exact in every float type, nothing differentiates through it.
OpDef float_test(std::string name, int since_opset, std::string summary) {
  OpDef def = make_def(std::move(name), since_opset, std::move(summary), {input("X", kFloatTypes)},
                       AutocastCategory::kClear);
  def.outputs = {input("Y")};
  def.infer = [](InferenceContext& ctx) -> absl::Status {
    ctx.set_output(0, TensorType{DType::kBool, ctx.input_type(0).shape});
    return absl::OkStatus();
  };
  def.samples = {
      {"vector", {f32({5})}, {}, {}, {boolean({5})}},
      {"bf16 matrix", {TensorType{DType::kBF16, {2, 3}}}, {}, {}, {boolean({2, 3})}},
  };
  return def;
}

void register_float_tests(OpRegistry& registry) {
  // Opsets 13 and 20 only added element types (bf16, then float8).
  registry.add(float_test("IsNaN", 9, "x is NaN"));

  // Opset 20 only added element types.
  OpDef is_inf = float_test("IsInf", 10, "x is an infinity of a sign the attributes select");
  is_inf.attrs = {flag_attr("detect_negative", 1), flag_attr("detect_positive", 1)};
  is_inf.samples.push_back(
      {"negative only", {f32({2, 3})}, {}, {{"detect_positive", int64_t{0}}}, {boolean({2, 3})}});
  registry.add(std::move(is_inf));
}

void register_elementwise_ops(OpRegistry& registry) {
  register_arithmetic(registry);
  register_unary(registry);
  register_extrema(registry);
  register_where(registry);
  register_logic(registry);
  register_float_tests(registry);
}

const OpRegistration kElementwiseOps(&register_elementwise_ops);

}  // namespace
}  // namespace ampc::ops
