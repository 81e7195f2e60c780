// Storage types for the 16-bit float formats. A Float16 or BFloat16 holds the bits; arithmetic
// happens in f32 after an explicit conversion, and a result is rounded once when it is stored
// back (round to nearest, ties to even). This is the numeric contract of every backend; the
// types are usable in device code too.
#pragma once

#include <cstdint>

#include "ampc/float16.h"

namespace ampc {

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  AMPC_HD explicit Float16(float value) : bits(f32_to_f16_bits(value)) {}
  // Rounding a double through f32 to f16 would round twice; compute in f32 instead.
  explicit Float16(double value) = delete;
  AMPC_HD explicit operator float() const { return f16_bits_to_f32(bits); }
  AMPC_HD static Float16 from_bits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  AMPC_HD explicit BFloat16(float value) : bits(f32_to_bf16_bits(value)) {}
  explicit BFloat16(double value) = delete;
  AMPC_HD explicit operator float() const { return bf16_bits_to_f32(bits); }
  AMPC_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

}  // namespace ampc
