// Bit-exact conversions between f32 and the OCP 8-bit float formats that ONNX calls
// FLOAT8E4M3FN and FLOAT8E5M2 (storage types only: nothing computes in them).
//
//   e4m3fn: bias 7, no infinity, one NaN per sign (S.1111.111), max 448, smallest subnormal 2^-9.
//   e5m2:   bias 15, IEEE-like (S.11111.00 is inf, S.11111.{01,10,11} NaN), max 57344,
//           smallest subnormal 2^-16.
//
// f32 -> fp8 rounds to nearest, ties to even, subnormals included, and follows ONNX Cast-19:
// with `saturate` a value whose rounding exceeds the largest finite value, and +-inf, become
// +-max (sign kept); without it, they become NaN (e4m3fn) or +-inf (e5m2). NaN stays NaN (the
// canonical S.1111111 pattern). "Exceeds" is judged after rounding, as IEEE overflow is: 464
// is a tie between 448 (even) and the unrepresentable 480, so it rounds to 448 in both modes.
#pragma once

#include <cstdint>

#include "ampc/host_device.h"

namespace ampc {

namespace float8_internal {

// The format with `kExponentBits` exponent bits and `kMantissaBits` mantissa bits, whose
// largest finite magnitude has the code `kMaxCode` and which overflows to `kOverflowCode`
// when not saturating.
template <int kExponentBits, int kMantissaBits, uint8_t kMaxCode, uint8_t kOverflowCode>
struct Format {
  static constexpr int kBias = (1 << (kExponentBits - 1)) - 1;
  static constexpr int kMinNormalExponent = 1 - kBias;  // unbiased
  static constexpr uint8_t kNaN = 0x7f;

  // Rounds the finite f32 magnitude `abs` (f32 bits without sign) to the code of the nearest
  // value, ties to even. The code may exceed kMaxCode: the caller decides what overflow means.
  AMPC_HD static uint32_t round_magnitude(uint32_t abs) {
    const int biased = static_cast<int>(abs >> 23);
    if (biased == 0) return 0;  // f32 subnormals are far below half the smallest fp8 subnormal
    const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;  // value = sig * 2^(e - 23)
    const int exponent = biased - 127;
    // Bits of the 24-bit significand to drop: 23 - M for normals, more below the normal range.
    int shift = 23 - kMantissaBits;
    if (exponent < kMinNormalExponent) shift += kMinNormalExponent - exponent;
    if (shift >= 25) return 0;  // below half the smallest subnormal
    uint32_t kept = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1u))) ++kept;
    if (exponent < kMinNormalExponent) return kept;  // subnormal; a carry makes the min normal
    // `kept` holds the implicit bit at position M, so adding it to (biased exponent - 1) << M
    // writes exponent and mantissa, and a rounding carry moves into the exponent.
    return (static_cast<uint32_t>(exponent + kBias - 1) << kMantissaBits) + kept;
  }

  AMPC_HD static uint8_t from_f32(float value, bool saturate) {
    const uint32_t bits = f32_bits(value);
    const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | kNaN;
    const uint32_t code = abs == 0x7f800000u ? 0xffu : round_magnitude(abs);
    if (code > kMaxCode) return sign | (saturate ? kMaxCode : kOverflowCode);
    return static_cast<uint8_t>(sign | code);
  }

  AMPC_HD static float to_f32(uint8_t bits) {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
    const uint32_t exponent_field = (bits & 0x7fu) >> kMantissaBits;
    const uint32_t mantissa = bits & ((1u << kMantissaBits) - 1);
    if (exponent_field == 0) {
      // Subnormal: mantissa * 2^(min normal exponent - M), exact in f32.
      const float magnitude =
          static_cast<float>(mantissa) *
          f32_from_bits(static_cast<uint32_t>((kMinNormalExponent - kMantissaBits + 127) << 23));
      return sign ? -magnitude : magnitude;
    }
    return f32_from_bits(sign | ((exponent_field - kBias + 127) << 23) |
                         (mantissa << (23 - kMantissaBits)));
  }
};

using E4M3FN = Format<4, 3, 0x7e, 0x7f>;  // overflow without saturation: NaN
using E5M2 = Format<5, 2, 0x7b, 0x7c>;    // overflow without saturation: inf

}  // namespace float8_internal

AMPC_HD uint8_t f32_to_f8e4m3fn_bits(float value, bool saturate = true) {
  return float8_internal::E4M3FN::from_f32(value, saturate);
}

AMPC_HD float f8e4m3fn_bits_to_f32(uint8_t bits) {
  if ((bits & 0x7fu) == 0x7fu) {  // the only NaN; e4m3fn has no infinity
    return f32_from_bits((static_cast<uint32_t>(bits & 0x80u) << 24) | 0x7fc00000u);
  }
  return float8_internal::E4M3FN::to_f32(bits);
}

AMPC_HD uint8_t f32_to_f8e5m2_bits(float value, bool saturate = true) {
  return float8_internal::E5M2::from_f32(value, saturate);
}

AMPC_HD float f8e5m2_bits_to_f32(uint8_t bits) {
  if ((bits & 0x7cu) == 0x7cu) {  // exponent all ones: inf (mantissa 0) or NaN, as in IEEE
    const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
    const uint32_t mantissa = bits & 0x3u;
    return f32_from_bits(sign | 0x7f800000u | (mantissa << 21));
  }
  return float8_internal::E5M2::to_f32(bits);
}

}  // namespace ampc
