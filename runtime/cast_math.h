// Cast's conversions between every pair of element types, for every backend (host and device).
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
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "runtime/element_types.h"

namespace ampc::cast_math {

// ---- Exact widening of a source element ------------------------------------------------------

AMPC_HD float widen(float x) { return x; }
AMPC_HD float widen(Float16 x) { return static_cast<float>(x); }
AMPC_HD float widen(BFloat16 x) { return static_cast<float>(x); }
AMPC_HD float widen(F8E4M3FN x) { return f8e4m3fn_bits_to_f32(x.bits); }
AMPC_HD float widen(F8E5M2 x) { return f8e5m2_bits_to_f32(x.bits); }
AMPC_HD double widen(double x) { return x; }
template <typename I, typename = std::enable_if_t<std::is_integral_v<I>>>
AMPC_HD int64_t widen(I x) {
  return static_cast<int64_t>(x);
}

// A float truncated toward zero into integer type I. Out-of-range values saturate and NaN
// becomes 0.
template <typename I, typename F>
AMPC_HD I truncate_to_int(F value) {
  static_assert(std::is_integral_v<I> && std::is_floating_point_v<F>);
  if (value != value) return 0;
  // The limits as F: min is a power of two (exact); max + 1 is one too, and values at or above
  // it saturate.
  constexpr F kLow = static_cast<F>(std::numeric_limits<I>::min());
  constexpr F kHighExclusive = static_cast<F>(std::numeric_limits<I>::max() / 2 + 1) * F(2);
  if (value <= kLow) return std::numeric_limits<I>::min();
  if (value >= kHighExclusive) return std::numeric_limits<I>::max();
  return static_cast<I>(value);
}

// ---- Conversion to the target, rounding once -------------------------------------------------

template <typename To>
AMPC_HD To convert(float x, bool saturate) {
  if constexpr (std::is_same_v<To, bool>) {
    return x != 0.0f;
  } else if constexpr (std::is_integral_v<To>) {
    return truncate_to_int<To>(x);
  } else if constexpr (std::is_same_v<To, F8E4M3FN>) {
    return F8E4M3FN{f32_to_f8e4m3fn_bits(x, saturate)};
  } else if constexpr (std::is_same_v<To, F8E5M2>) {
    return F8E5M2{f32_to_f8e5m2_bits(x, saturate)};
  } else {
    return To(x);  // f32 and f64 exactly; f16 and bf16 round to nearest even
  }
}

// `x` in f32, rounded to odd: truncated toward zero, the last mantissa bit set when inexact.
// Rounding the result to nearest even in a format at least two bits narrower than f32
// (f16, bf16, fp8) gives the same as rounding `x` itself.
AMPC_HD float round_to_odd_f32(double x) {
  float f = static_cast<float>(x);
  if (x != x || static_cast<double>(f) == x) return f;
  const double magnitude = x < 0 ? -x : x;
  const double rounded = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
  // One step toward zero (f is not zero here: it rounded away from a nonzero x).
  if (rounded > magnitude) f = f32_from_bits(f32_bits(f) - 1u);
  return f32_from_bits(f32_bits(f) | 1u);
}

template <typename To>
AMPC_HD To convert(double x, bool saturate) {
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

// Leading zero bits of a nonzero 64-bit word.
AMPC_HD int leading_zeros(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return __builtin_clzll(x);
#endif
}

// `x` rounded to `precision` significant bits (at most 24), to nearest even; exact in f32.
AMPC_HD float round_to_precision(int64_t x, int precision) {
  const bool negative = x < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  if (magnitude == 0) return 0.0f;
  const int width = 64 - leading_zeros(magnitude);
  float rounded = static_cast<float>(magnitude);  // exact when width <= precision
  if (width > precision) {
    const int dropped = width - precision;
    uint64_t kept = magnitude >> dropped;
    const uint64_t rest = magnitude & ((uint64_t{1} << dropped) - 1);
    const uint64_t halfway = uint64_t{1} << (dropped - 1);
    if (rest > halfway || (rest == halfway && (kept & 1))) ++kept;
    // kept * 2^dropped, exact: kept has at most precision + 1 bits and 2^dropped <= 2^63.
    rounded = static_cast<float>(kept) * f32_from_bits(static_cast<uint32_t>(127 + dropped) << 23);
  }
  return negative ? -rounded : rounded;
}

template <typename To>
AMPC_HD To convert(int64_t x, bool saturate) {
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

// One element of From as To.
template <typename From, typename To>
AMPC_HD To cast(From x, bool saturate) {
  return convert<To>(widen(x), saturate);
}

}  // namespace ampc::cast_math
