// CPU kernel for Cast, between every pair of element types: f32, f16, bf16, f64, i64, i32, i8,
// u8, bool, f8e4m3fn and f8e5m2.
//
// Every conversion rounds once, to nearest even, as a direct conversion of the exact source value:
//   - float sources widen exactly (f16, bf16 and fp8 to f32; f64 stays f64) and integers and
//     bool to int64, then the value is converted to the target;
//   - f64 to f16, bf16 or fp8 goes through f32 rounded to odd (truncated, last bit set when
//     inexact), which makes the final round-to-nearest-even equal to rounding the f64 directly;
//   - integers to bf16 round to 8 significant bits in integer arithmetic (an int above 2^24
//     rounded to f32 first could round twice); to f16 and fp8 the f32 route is exact wherever
//     the result is finite;
//   - float to integer truncates toward zero (numpy, ONNX Runtime); NaN becomes 0 and values out
//     of range saturate (ONNX leaves both undefined; CUDA's conversions do this);
//   - integer to integer keeps the low bits (two's complement wrap, as numpy);
//   - to bool: nonzero is true, NaN included; from bool: 0 or 1;
//   - to fp8, `saturate` (opset 19, default 1) clamps out-of-range values and infinities to the
//     largest finite value; without it they become NaN (e4m3fn) or inf (e5m2). See
//     compiler/float8.h.
// A cast to the same type copies the bytes, NaN payloads included.
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "compiler/float8.h"
#include "runtime/cpu/broadcast.h"

namespace ampc::runtime::cpu {
namespace {

// Storage of the fp8 element types: the bits, converted by compiler/float8.h.
struct F8E4M3FN {
  uint8_t bits;
};
struct F8E5M2 {
  uint8_t bits;
};

// Calls fn(std::type_identity<T>{}) with the C++ type that stores elements of `dtype`.
template <typename Fn>
auto visit_element_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(std::type_identity<float>{});
    case DType::kF16:
      return fn(std::type_identity<Float16>{});
    case DType::kBF16:
      return fn(std::type_identity<BFloat16>{});
    case DType::kF64:
      return fn(std::type_identity<double>{});
    case DType::kI64:
      return fn(std::type_identity<int64_t>{});
    case DType::kI32:
      return fn(std::type_identity<int32_t>{});
    case DType::kI8:
      return fn(std::type_identity<int8_t>{});
    case DType::kU8:
      return fn(std::type_identity<uint8_t>{});
    case DType::kBool:
      return fn(std::type_identity<bool>{});
    case DType::kF8E4M3FN:
      return fn(std::type_identity<F8E4M3FN>{});
    case DType::kF8E5M2:
      return fn(std::type_identity<F8E5M2>{});
  }
  AMPC_CHECK(false);
  return fn(std::type_identity<float>{});
}

// ---- Exact widening of a source element ---------------------------------------------------

float widen(float x) { return x; }
float widen(Float16 x) { return static_cast<float>(x); }
float widen(BFloat16 x) { return static_cast<float>(x); }
float widen(F8E4M3FN x) { return f8e4m3fn_bits_to_f32(x.bits); }
float widen(F8E5M2 x) { return f8e5m2_bits_to_f32(x.bits); }
double widen(double x) { return x; }
template <typename I>
requires std::is_integral_v<I> int64_t widen(I x) { return static_cast<int64_t>(x); }

// ---- Conversion to the target, rounding once ----------------------------------------------

template <typename To>
To convert(float x, bool saturate) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != 0.0f;
  } else if constexpr (std::is_integral_v<To>) {
    return truncate_to_int<To>(x);
  } else if constexpr (std::is_same_v<To, F8E4M3FN>) {
    return {f32_to_f8e4m3fn_bits(x, saturate)};
  } else if constexpr (std::is_same_v<To, F8E5M2>) {
    return {f32_to_f8e5m2_bits(x, saturate)};
  } else {
    return To(x);  // f32 and f64 exactly; f16 and bf16 round to nearest even
  }
}

// `x` in f32, rounded to odd: truncated toward zero, the last mantissa bit set when inexact.
// Rounding the result to nearest even in a format at least two bits narrower than f32
// (f16, bf16, fp8) gives the same as rounding `x` itself.
float round_to_odd_f32(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

template <typename To>
To convert(double x, bool saturate) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != 0.0;
  } else if constexpr (std::is_integral_v<To>) {
    return truncate_to_int<To>(x);
  } else if constexpr (std::is_same_v<To, double> || std::is_same_v<To, float>) {
    return static_cast<To>(x);
  } else {
    return convert<To>(round_to_odd_f32(x), saturate);
  }
}

// `x` rounded to `precision` significant bits (at most 24), to nearest even; exact in f32.
float round_to_precision(int64_t x, int precision) {
  const bool negative = x < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const int width = 64 - std::countl_zero(magnitude);
  float rounded = static_cast<float>(magnitude);  // exact when width <= precision
  if (width > precision) {
    const int dropped = width - precision;
    uint64_t kept = magnitude >> dropped;
    const uint64_t rest = magnitude & ((uint64_t{1} << dropped) - 1);
    const uint64_t halfway = uint64_t{1} << (dropped - 1);
    if (rest > halfway || (rest == halfway && (kept & 1))) ++kept;
    rounded = std::ldexp(static_cast<float>(kept), dropped);
  }
  return negative ? -rounded : rounded;
}

template <typename To>
To convert(int64_t x, bool saturate) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != 0;
  } else if constexpr (std::is_integral_v<To>) {
    return static_cast<To>(x);
  } else if constexpr (std::is_same_v<To, double> || std::is_same_v<To, float>) {
    return static_cast<To>(x);  // the hardware conversion rounds once
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16(round_to_precision(x, 8));
  } else {
    // f16 and fp8 overflow long before 2^24, where f32 stops holding every integer.
    return convert<To>(static_cast<float>(x), saturate);
  }
}

// ---- Kernel -------------------------------------------------------------------------------

template <typename From, typename To>
void cast_elements(const TensorArg& in, const TensorArg& out, bool saturate) {
  const From* src = in.in<From>().data();
  To* dst = out.out<To>().data();
  parallel_for(out.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = convert<To>(widen(src[i]), saturate);
  });
}

template <typename From>
absl::Status cast_kernel(const KernelContext& ctx) {
  const TensorArg& in = ctx.input(0);
  const TensorArg& out = ctx.output(0);
  if (in.dtype() == out.dtype()) {
    if (in.data != out.data) std::memcpy(out.data, in.data, out.byte_size());
    return absl::OkStatus();
  }
  const bool saturate = ctx.node.int_attr("saturate") != 0;
  visit_element_type(out.dtype(), [&]<typename To>(std::type_identity<To>) {
    cast_elements<From, To>(in, out, saturate);
  });
  return absl::OkStatus();
}

void register_cast_kernels(KernelRegistry& r) {
  for (DType dtype : kAllDTypes) {
    // Element i is read before it is written, at the same byte offset when the sizes match.
    KernelDef def = kernel_def("Cast", {.in_place_operand = 0});
    def.dtypes = {dtype};
    def.fn = visit_element_type(
        dtype, []<typename From>(std::type_identity<From>) { return &cast_kernel<From>; });
    r.add(std::move(def));
  }
}

static KernelRegistration kRegistration(&register_cast_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
