// Bit-exact conversions between f32 and the 16-bit float formats (IEEE binary16 and bfloat16).
// Rounding is to nearest, ties to even; overflow goes to infinity; NaN stays NaN.
#pragma once

#include <cstdint>

#include "ampc/host_device.h"

namespace ampc {

// On the device, the conversion instructions (cvt.rn: round to nearest even, overflow to
// infinity, subnormals kept) give the same bits as the code below for every non-NaN value, in
// one instruction instead of a dozen: element-wise kernels are otherwise bound by this
// arithmetic, not by memory. NaNs take the code below, which keeps their payload (the
// instructions return one canonical NaN).

AMPC_HD uint16_t f32_to_f16_bits(float value) {
  const uint32_t bits = f32_bits(value);
#if defined(__CUDA_ARCH__)
  if ((bits & 0x7fffffffu) <= 0x7f800000u) {
    uint16_t half;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(half) : "f"(value));
    return half;
  }
#endif
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN; a NaN keeps its top payload bits and stays quiet
    const uint32_t payload = (abs >> 13) & 0x3ffu;  // the mask keeps the exponent out of the sign
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | payload : 0));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 2^16
  if (abs < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 (half the smallest)
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24 for exponents 102..112
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

AMPC_HD float f16_bits_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7fffu) <= 0x7c00u) {
    float value;
    asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(h));
    return value;
  }
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return f32_from_bits(sign);
    // Subnormal: value = mantissa * 2^-24, exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

AMPC_HD uint16_t f32_to_bf16_bits(float value) {
  const uint32_t bits = f32_bits(value);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if ((bits & 0x7fffffffu) <= 0x7f800000u) {
    uint16_t bf16;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bf16) : "f"(value));
    return bf16;
  }
#endif
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncation could make it inf, so force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

AMPC_HD float bf16_bits_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

}  // namespace ampc
