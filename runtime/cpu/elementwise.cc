// CPU kernels for the element-wise ops of ops/elementwise.cc: Add, Sub, Mul, Div, Mod, Pow, Sqrt,
// Exp, Log, Neg, Abs, Reciprocal, variadic Min and Max, Clip, Where, Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual, And, Or, Xor, Not, IsNaN, IsInf.
//
// Numerics: f16 and bf16 elements are computed in f32 and rounded once on store, f32 in f32,
// f64 in f64. Transcendental results (Exp, Log, Sqrt, float Pow) are those of the C library's
// function for the compute type (std::exp(float) for f32, f16 and bf16); the CUDA backend calls
// the same f32 functions. Integer arithmetic wraps on overflow (two's complement), integer
// division truncates toward zero and a zero divisor is an error, as in the constant folder.
// Min and Max let a NaN operand win (numpy's minimum/maximum, which the ONNX reference uses).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>

#include "compiler/strings.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/vector_math.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

// The scalar operations are runtime/numeric.h's, shared with the CUDA kernels.
using numeric::Abs;
using numeric::Add;
using numeric::Ceil;
using numeric::Div;
using numeric::Exp;
using numeric::Floor;
using numeric::Log;
using numeric::Max;
using numeric::Min;
using numeric::Mul;
using numeric::Neg;
using numeric::Reciprocal;
using numeric::Round;
using numeric::Sqrt;
using numeric::Sub;

// ---- Kernels ------------------------------------------------------------------------------

template <typename T, typename Op>
absl::Status unary_kernel(const KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Op, Exp>) {
    map_unary_arrays<float>(ctx.input(0), ctx.output(0),
                            [](const float* x, float* y, int64_t n) { exp_array(x, y, n); });
  } else {
    map_unary<T, T>(ctx.input(0), ctx.output(0), Op{});
  }
  return absl::OkStatus();
}

template <typename T, typename Op>
absl::Status binary_kernel(const KernelContext& ctx) {
  map_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), Op{});
  return absl::OkStatus();
}

template <typename T>
absl::Status div_kernel(const KernelContext& ctx) {
  if constexpr (std::is_integral_v<T>) {
    const std::span<const T> divisor = ctx.input(1).in<T>();
    if (std::find(divisor.begin(), divisor.end(), T{0}) != divisor.end()) {
      return absl::InvalidArgumentError("integer division by zero (operand 1 'B' has a zero)");
    }
  }
  return binary_kernel<T, Div>(ctx);
}

// Mod: fmod = 1 truncates, fmod = 0 floors (runtime/numeric.h); an integer zero divisor is an
// error, as for Div.
template <typename T>
absl::Status mod_kernel(const KernelContext& ctx) {
  if constexpr (std::is_integral_v<T>) {
    const std::span<const T> divisor = ctx.input(1).in<T>();
    if (std::find(divisor.begin(), divisor.end(), T{0}) != divisor.end()) {
      return absl::InvalidArgumentError("integer Mod by zero (operand 1 'B' has a zero)");
    }
  }
  if (ctx.node.int_attr("fmod") != 0) return binary_kernel<T, numeric::Fmod>(ctx);
  return binary_kernel<T, numeric::FloorMod>(ctx);
}

// Pow with base type T and exponent type E: float bases compute in their compute type (the
// exponent converted to it); integer bases with float exponents in f64, truncated back.
template <typename T, typename E>
absl::Status pow_typed(const KernelContext& ctx) {
  const TensorArg& base = ctx.input(0);
  const TensorArg& exponent = ctx.input(1);
  if constexpr (is_float_v<T>) {
    using X = compute_t<T>;
    map_binary<T, T, E>(base, exponent, ctx.output(0),
                        [](X x, compute_t<E> y) { return numeric::FloatPow{}(x, y); });
  } else if constexpr (is_float_v<E>) {
    map_binary<T, T, E>(base, exponent, ctx.output(0), [](T x, compute_t<E> y) {
      return truncate_to_int<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
    });
  } else {
    std::atomic<bool> undefined = false;
    map_binary<T, T, E>(base, exponent, ctx.output(0), [&undefined](T x, E y) {
      bool zero_to_negative = false;
      const T result = numeric::IntegerPow{}(x, static_cast<int64_t>(y), zero_to_negative);
      if (zero_to_negative) undefined.store(true, std::memory_order_relaxed);
      return result;
    });
    if (undefined.load()) return absl::InvalidArgumentError("integer Pow of 0 to a negative power");
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status pow_kernel(const KernelContext& ctx) {
  switch (ctx.input(1).dtype()) {
    case DType::kF32:
      return pow_typed<T, float>(ctx);
    case DType::kF64:
      return pow_typed<T, double>(ctx);
    case DType::kF16:
      return pow_typed<T, Float16>(ctx);
    case DType::kBF16:
      return pow_typed<T, BFloat16>(ctx);
    case DType::kI64:
      return pow_typed<T, int64_t>(ctx);
    case DType::kI32:
      return pow_typed<T, int32_t>(ctx);
    case DType::kI8:
      return pow_typed<T, int8_t>(ctx);
    case DType::kU8:
      return pow_typed<T, uint8_t>(ctx);
    default:
      return absl::UnimplementedError(
          str_cat("Pow exponent of type ", dtype_name(ctx.input(1).dtype())));
  }
}

// Variadic Min/Max, folded pairwise into the output: out = op(in0, in1), then
// out = op(out, in_k). Exact in every dtype, since each result is one of the operands.
template <typename T, typename Op>
absl::Status extremum_kernel(const KernelContext& ctx) {
  const TensorArg& out = ctx.output(0);
  if (ctx.inputs.size() == 1) {
    if (ctx.input(0).data != out.data) std::memcpy(out.data, ctx.input(0).data, out.byte_size());
    return absl::OkStatus();
  }
  map_binary<T, T, T>(ctx.input(0), ctx.input(1), out, Op{});
  for (size_t k = 2; k < ctx.inputs.size(); ++k) {
    map_binary<T, T, T>(out, ctx.input(static_cast<int>(k)), out, Op{});
  }
  return absl::OkStatus();
}

// min(max(x, min), max): an absent bound does not clip, min > max gives max, NaN stays NaN.
template <typename T>
absl::Status clip_kernel(const KernelContext& ctx) {
  using X = compute_t<T>;
  const bool has_low = ctx.has_input(1);
  const bool has_high = ctx.has_input(2);
  const numeric::Clip<X> clip{has_low ? load(ctx.input(1).in<T>()[0]) : X{},
                              has_high ? load(ctx.input(2).in<T>()[0]) : X{}, has_low, has_high};
  map_unary<T, T>(ctx.input(0), ctx.output(0), clip);
  return absl::OkStatus();
}

// Copies the chosen element's bits (`Bits` is an unsigned type of the element's size), so
// every dtype, NaN payloads included, passes through unchanged.
template <typename Bits>
absl::Status where_kernel(const KernelContext& ctx) {
  map_ternary<Bits, bool, Bits, Bits>(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0),
                                      [](bool c, Bits x, Bits y) { return c ? x : y; });
  return absl::OkStatus();
}

template <typename T, typename Compare>
absl::Status compare_kernel(const KernelContext& ctx) {
  map_binary<bool, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), Compare{});
  return absl::OkStatus();
}

template <typename Op>
absl::Status logical_kernel(const KernelContext& ctx) {
  map_binary<bool, bool, bool>(ctx.input(0), ctx.input(1), ctx.output(0), Op{});
  return absl::OkStatus();
}

absl::Status not_kernel(const KernelContext& ctx) {
  map_unary<bool, bool>(ctx.input(0), ctx.output(0), [](bool x) { return !x; });
  return absl::OkStatus();
}

template <typename T>
absl::Status is_nan_kernel(const KernelContext& ctx) {
  map_unary<bool, T>(ctx.input(0), ctx.output(0), numeric::IsNaN{});
  return absl::OkStatus();
}

template <typename T>
absl::Status is_inf_kernel(const KernelContext& ctx) {
  const numeric::IsInf is_inf{ctx.node.int_attr("detect_positive") != 0,
                              ctx.node.int_attr("detect_negative") != 0};
  map_unary<bool, T>(ctx.input(0), ctx.output(0), is_inf);
  return absl::OkStatus();
}

// ---- Registration -------------------------------------------------------------------------

// Every kernel here may write its output over operand 0 (Where: operand 1) of the same size:
// each output element is stored after its own operands were read.
KernelDef in_place(std::string op) { return kernel_def(std::move(op), {.in_place_operand = 0}); }

template <typename Make>
void add_numeric(KernelRegistry& r, const KernelDef& def, Make make) {
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(r, def, make);
}
template <typename Make>
void add_float(KernelRegistry& r, const KernelDef& def, Make make) {
  add_kernels<float, double, Float16, BFloat16>(r, def, make);
}

template <typename Op>
void add_unary_float(KernelRegistry& r, std::string op) {
  add_float(r, in_place(std::move(op)), []<typename T>() { return &unary_kernel<T, Op>; });
}

void add_where(KernelRegistry& r) {
  KernelDef def = kernel_def("Where", {.in_place_operand = 1, .keyed_on = {.index = 1}});
  for (DType dtype : kAllDTypes) {
    def.dtypes = {dtype};
    switch (dtype_size(dtype)) {
      case 1:
        def.fn = &where_kernel<uint8_t>;
        break;
      case 2:
        def.fn = &where_kernel<uint16_t>;
        break;
      case 4:
        def.fn = &where_kernel<uint32_t>;
        break;
      case 8:
        def.fn = &where_kernel<uint64_t>;
        break;
      default:
        AMPC_CHECK(false);
    }
    r.add(def);
  }
}

void register_elementwise_kernels(KernelRegistry& r) {
  add_numeric(r, in_place("Add"), []<typename T>() { return &binary_kernel<T, Add>; });
  add_numeric(r, in_place("Sub"), []<typename T>() { return &binary_kernel<T, Sub>; });
  add_numeric(r, in_place("Mul"), []<typename T>() { return &binary_kernel<T, Mul>; });
  add_numeric(r, in_place("Div"), []<typename T>() { return &div_kernel<T>; });
  add_numeric(r, in_place("Mod"), []<typename T>() { return &mod_kernel<T>; });
  add_numeric(r, in_place("Pow"), []<typename T>() { return &pow_kernel<T>; });

  add_unary_float<Sqrt>(r, "Sqrt");
  add_unary_float<Exp>(r, "Exp");
  add_unary_float<Log>(r, "Log");
  add_unary_float<Reciprocal>(r, "Reciprocal");
  add_unary_float<Floor>(r, "Floor");
  add_unary_float<Ceil>(r, "Ceil");
  add_unary_float<Round>(r, "Round");
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t>(
      r, in_place("Neg"), []<typename T>() { return &unary_kernel<T, Neg>; });
  add_numeric(r, in_place("Abs"), []<typename T>() { return &unary_kernel<T, Abs>; });

  add_numeric(r, in_place("Min"), []<typename T>() { return &extremum_kernel<T, Min>; });
  add_numeric(r, in_place("Max"), []<typename T>() { return &extremum_kernel<T, Max>; });
  add_numeric(r, in_place("Clip"), []<typename T>() { return &clip_kernel<T>; });
  add_where(r);

  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t, bool>(
      r, in_place("Equal"), []<typename T>() { return &compare_kernel<T, numeric::Equal>; });
  add_numeric(r, in_place("Less"), []<typename T>() { return &compare_kernel<T, numeric::Less>; });
  add_numeric(r, in_place("Greater"),
              []<typename T>() { return &compare_kernel<T, numeric::Greater>; });
  add_numeric(r, in_place("LessOrEqual"),
              []<typename T>() { return &compare_kernel<T, numeric::LessOrEqual>; });
  add_numeric(r, in_place("GreaterOrEqual"),
              []<typename T>() { return &compare_kernel<T, numeric::GreaterOrEqual>; });
  add_kernels<bool>(r, in_place("And"), []<typename T>() { return &logical_kernel<numeric::And>; });
  add_kernels<bool>(r, in_place("Or"), []<typename T>() { return &logical_kernel<numeric::Or>; });
  add_kernels<bool>(r, in_place("Xor"), []<typename T>() { return &logical_kernel<numeric::Xor>; });
  add_float(r, in_place("IsNaN"), []<typename T>() { return &is_nan_kernel<T>; });
  add_float(r, in_place("IsInf"), []<typename T>() { return &is_inf_kernel<T>; });
  KernelDef logical_not = in_place("Not");
  logical_not.dtypes = {DType::kBool};
  logical_not.fn = &not_kernel;
  r.add(std::move(logical_not));
}

static KernelRegistration kElementwiseKernels(&register_elementwise_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
