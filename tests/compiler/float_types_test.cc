// f16 and bf16 conversions (ampc/float16.h) against an independent reference: every bit
// pattern decodes to the value its fields say and round-trips; f32 -> 16 bits rounds to nearest
// even on every halfway case of the whole finite range and on random bit patterns.
//
// The reference never touches bits the way the implementation does: it builds the value of each
// code in double with ldexp from its exponent and mantissa fields, and rounds by bracketing a
// value between two adjacent codes and comparing it with their exact midpoint.
#include "ampc/float_types.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ampc/float16.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

// A binary float format with `exponent_bits` and `mantissa_bits` (sign bit on top).
struct RefFormat {
  int exponent_bits;
  int mantissa_bits;

  uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
  // The code of +inf: the first code past the largest finite value.
  uint32_t inf_code() const { return ((1u << exponent_bits) - 1) << mantissa_bits; }
  // The value of a code with the sign bit clear, read as if the exponent were unbounded:
  // inf_code() reads as the power of two past the largest finite value (2^16 for f16), which is
  // where IEEE rounding overflows to.
  double magnitude(uint32_t code) const {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    const int exponent = static_cast<int>(code >> mantissa_bits);
    const int mantissa = static_cast<int>(code & ((1u << mantissa_bits) - 1));
    if (exponent == 0) return std::ldexp(mantissa, 1 - bias - mantissa_bits);
    return std::ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
  }
};

constexpr RefFormat kF16{5, 10};
constexpr RefFormat kBF16{8, 7};

// The magnitudes of codes 0..inf_code(), increasing.
std::vector<double> magnitude_table(const RefFormat& format) {
  std::vector<double> table;
  for (uint32_t code = 0; code <= format.inf_code(); ++code)
    table.push_back(format.magnitude(code));
  return table;
}

// IEEE round to nearest, ties to even, of a finite f32 to `format`, by bracketing |x| in
// `table`. A magnitude that rounds to inf_code() overflows to inf, as IEEE says.
uint32_t reference_round(const RefFormat& format, const std::vector<double>& table, float x) {
  const uint32_t sign = std::signbit(x) ? format.sign_bit() : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= table.back()) return sign | format.inf_code();
  const uint32_t hi =
      static_cast<uint32_t>(std::upper_bound(table.begin(), table.end(), a) - table.begin());
  const uint32_t lo = hi - 1;
  const double midpoint = (table[lo] + table[hi]) / 2;  // exact: both have few significant bits
  if (a < midpoint) return sign | lo;
  if (a > midpoint) return sign | hi;
  return sign | (lo % 2 == 0 ? lo : hi);
}

float f32_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

// ---- decoding and round trips over all 65,536 patterns ----

TEST(Float16, EveryPatternDecodesToItsFieldValueAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float value = f16_bits_to_f32(bits);
    const uint32_t magnitude_code = b & 0x7fffu;
    if (magnitude_code > kF16.inf_code()) {  // NaN: stays NaN, comes back quiet, sign and payload
      ASSERT_TRUE(std::isnan(value)) << std::hex << b;
      ASSERT_EQ(f32_to_f16_bits(value), b | 0x200u) << std::hex << b;
      ASSERT_EQ(std::signbit(value), (b & 0x8000u) != 0) << std::hex << b;
      continue;
    }
    const double expected = magnitude_code == kF16.inf_code()
                                ? std::numeric_limits<double>::infinity()
                                : kF16.magnitude(magnitude_code);
    ASSERT_EQ(static_cast<double>(value), (b & 0x8000u) ? -expected : expected) << std::hex << b;
    ASSERT_EQ(std::signbit(value), (b & 0x8000u) != 0) << std::hex << b;
    ASSERT_EQ(f32_to_f16_bits(value), b) << std::hex << b;
    ASSERT_EQ(Float16(value).bits, b);
    ASSERT_EQ(bits_of(static_cast<float>(Float16::from_bits(bits))), bits_of(value));
  }
}

TEST(BFloat16, EveryPatternDecodesToItsFieldValueAndRoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float value = bf16_bits_to_f32(bits);
    const uint32_t magnitude_code = b & 0x7fffu;
    if (magnitude_code > kBF16.inf_code()) {  // NaN: its payload survives in the f32's top bits
      ASSERT_TRUE(std::isnan(value)) << std::hex << b;
      ASSERT_EQ(bits_of(value) >> 16, b) << std::hex << b;
      ASSERT_EQ(f32_to_bf16_bits(value), b | 0x40u) << std::hex << b;  // comes back quiet
      continue;
    }
    const double expected = magnitude_code == kBF16.inf_code()
                                ? std::numeric_limits<double>::infinity()
                                : kBF16.magnitude(magnitude_code);
    ASSERT_EQ(static_cast<double>(value), (b & 0x8000u) ? -expected : expected) << std::hex << b;
    ASSERT_EQ(std::signbit(value), (b & 0x8000u) != 0) << std::hex << b;
    ASSERT_EQ(f32_to_bf16_bits(value), b) << std::hex << b;
    ASSERT_EQ(BFloat16(value).bits, b);
  }
}

// ---- halfway cases: every pair of adjacent codes over the whole finite range ----

// For each adjacent pair (lo, lo + 1) up to the overflow code: the exact midpoint rounds to the
// even code, its f32 neighbours one ulp below and above to the nearer one, for both signs.
template <typename Convert>
void check_every_halfway_case(const RefFormat& format, Convert convert) {
  const std::vector<double> table = magnitude_table(format);
  for (uint32_t lo = 0; lo < format.inf_code(); ++lo) {
    const uint32_t hi = lo + 1;
    const double midpoint = (table[lo] + table[hi]) / 2;
    const float mid = static_cast<float>(midpoint);
    ASSERT_EQ(static_cast<double>(mid), midpoint) << "midpoint not exact in f32, code " << lo;
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, std::numeric_limits<float>::infinity());
    const uint32_t even = lo % 2 == 0 ? lo : hi;
    for (const uint32_t sign : {0u, format.sign_bit()}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(convert(s * mid), sign | even) << std::hex << "midpoint above code " << lo;
      ASSERT_EQ(convert(s * below), sign | lo) << std::hex << "below midpoint above " << lo;
      ASSERT_EQ(convert(s * above), sign | hi) << std::hex << "above midpoint above " << lo;
      // The reference agrees on the same points (it is what the random sweeps trust).
      ASSERT_EQ(reference_round(format, table, s * mid), sign | even);
      ASSERT_EQ(reference_round(format, table, s * below), sign | lo);
      ASSERT_EQ(reference_round(format, table, s * above), sign | hi);
    }
  }
}

TEST(Float16, EveryHalfwayCaseRoundsToEvenAndNeighboursToNearest) {
  check_every_halfway_case(kF16, [](float x) -> uint32_t { return f32_to_f16_bits(x); });
}

TEST(BFloat16, EveryHalfwayCaseRoundsToEvenAndNeighboursToNearest) {
  check_every_halfway_case(kBF16, [](float x) -> uint32_t { return f32_to_bf16_bits(x); });
}

// ---- random f32 bit patterns ----

// `count` random f32 bit patterns, and `count` more whose exponent lies within
// [min_exponent, max_exponent] (biased), where the format's normals, subnormals and
// overflow threshold are, since uniform bits mostly land far outside an f16's range.
std::vector<uint32_t> random_f32_bits(int count, uint32_t min_exponent, uint32_t max_exponent) {
  std::mt19937 rng(20240603);
  std::uniform_int_distribution<uint32_t> any;
  std::uniform_int_distribution<uint32_t> exponent(min_exponent, max_exponent);
  std::vector<uint32_t> bits;
  bits.reserve(2 * static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) bits.push_back(any(rng));
  for (int i = 0; i < count; ++i) {
    const uint32_t r = any(rng);
    bits.push_back((r & 0x807fffffu) | (exponent(rng) << 23));
  }
  return bits;
}

template <typename Convert>
void check_random_bits(const RefFormat& format, std::vector<uint32_t> bits, Convert convert) {
  const std::vector<double> table = magnitude_table(format);
  const uint32_t quiet_bit = 1u << (format.mantissa_bits - 1);
  for (const uint32_t b : bits) {
    const float x = f32_from_bits(b);
    const uint32_t got = convert(x);
    if (std::isnan(x)) {  // stays a NaN (never inf, even when the kept payload bits are zero)
      ASSERT_LT(got, 2 * format.sign_bit()) << std::hex << b;
      ASSERT_EQ(got & format.inf_code(), format.inf_code()) << std::hex << b;
      ASSERT_NE(got & quiet_bit, 0u) << std::hex << b;
      ASSERT_EQ((got & format.sign_bit()) != 0, std::signbit(x)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(got, reference_round(format, table, x)) << std::hex << "f32 bits " << b;
  }
}

TEST(Float16, MatchesReferenceOnRandomF32Bits) {
  // f16 spans 2^-25 (half the smallest subnormal) to 2^16: biased f32 exponents 102..143.
  check_random_bits(kF16, random_f32_bits(1'000'000, 100, 145),
                    [](float x) -> uint32_t { return f32_to_f16_bits(x); });
}

TEST(BFloat16, MatchesReferenceOnRandomF32Bits) {
  // bf16 shares f32's exponent range: uniform bits already cover it; the second half stresses
  // the subnormals and the top binade.
  check_random_bits(kBF16, random_f32_bits(1'000'000, 0, 3),
                    [](float x) -> uint32_t { return f32_to_bf16_bits(x); });
  check_random_bits(kBF16, random_f32_bits(100'000, 252, 254),
                    [](float x) -> uint32_t { return f32_to_bf16_bits(x); });
}

// ---- the IEEE facts the runtime's overflow and underflow tests rely on ----

TEST(Float16, OverflowsToInfinityFrom65520) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00u);  // the tie goes to the even "2^16", i.e. inf
  EXPECT_EQ(f32_to_f16_bits(-65520.0f), 0xfc00u);
  EXPECT_EQ(f32_to_f16_bits(1e10f), 0x7c00u);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f32_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xfc00u);
}

TEST(Float16, SubnormalsAreExactAndTinyValuesFlushToSignedZero) {
  for (int k = 1; k < 1024; ++k) {
    EXPECT_EQ(f32_to_f16_bits(std::ldexp(static_cast<float>(k), -24)), static_cast<uint32_t>(k));
  }
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000u);  // half the smallest subnormal: tie to even 0
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(f32_to_f16_bits(3 * 0x1p-25f), 0x0002u);  // tie between 1 and 2 ulps: even 2
  EXPECT_EQ(f32_to_f16_bits(-0x1p-26f), 0x8000u);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(f32_to_f16_bits(-std::numeric_limits<float>::denorm_min()), 0x8000u);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16_bits(std::nextafter(0x1p-14f, 0.0f)), 0x0400u);  // rounds up to normal
}

TEST(Float16, NaNKeepsItsSignAndStaysQuiet) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(f32_to_f16_bits(nan), 0x7e00u);
  EXPECT_EQ(f32_to_f16_bits(-nan), 0xfe00u);
  EXPECT_EQ(f32_to_f16_bits(f32_from_bits(0x7f800001u)), 0x7e00u);  // payload below f16's bits
  EXPECT_EQ(f32_to_f16_bits(f32_from_bits(0xffa02000u)), 0xff01u);  // sNaN: quieted, payload kept
}

TEST(BFloat16, OverflowsToInfinityAtTheIeeeThreshold) {
  const float threshold = std::ldexp(2.0f - 0x1p-8f, 127);  // midpoint of max and 2^128
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(f32_to_bf16_bits(threshold), 0x7f80u);
  EXPECT_EQ(f32_to_bf16_bits(std::nextafter(threshold, 0.0f)), 0x7f7fu);
  EXPECT_EQ(f32_to_bf16_bits(-threshold), 0xff80u);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80u);      // tie to even 1.0
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3 * 0x1p-8f), 0x3f82u);  // tie to even 1 + 2^-6
}

TEST(BFloat16, NaNStaysNaNEvenWhenItsPayloadIsInTheDroppedBits) {
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x7f800001u)), 0x7fc0u);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0xff80ffffu)), 0xffc0u);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x7fffffffu)), 0x7fffu);  // no carry into the sign
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80u);
}

}  // namespace
}  // namespace ampc
