// fp8 conversions (compiler/float8.h) against an independent reference and the ONNX Cast-19 /
// OCP FP8 rules: all 256 patterns of each kind decode to their field values and round-trip;
// f32 -> fp8 rounds to nearest even on every halfway case and on random bits, in both
// saturation modes; overflow saturates, goes to NaN (e4m3fn) or to inf (e5m2).
//
// The reference builds each code's value in double with ldexp from its fields and rounds by
// bracketing between adjacent codes. Overflow is IEEE's: a value overflows when it rounds (with
// an unbounded exponent) past the largest finite value, i.e. to the code just above it.
#include "compiler/float8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ampc/tensor.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Fp8Kind {
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  uint32_t max_code;       // the largest finite magnitude
  uint32_t overflow_code;  // what overflow gives without saturation: NaN or inf
  uint8_t (*encode)(float, bool);
  float (*decode)(uint8_t);

  // The magnitude of `code` (sign clear) with an unbounded exponent: max_code + 1 reads as the
  // next value the format would have (480 for e4m3fn, 65536 for e5m2).
  double magnitude(uint32_t code) const {
    const int bias = (1 << (exponent_bits - 1)) - 1;
    const int exponent = static_cast<int>(code >> mantissa_bits);
    const int mantissa = static_cast<int>(code & ((1u << mantissa_bits) - 1));
    if (exponent == 0) return std::ldexp(mantissa, 1 - bias - mantissa_bits);
    return std::ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
  }
  std::vector<double> table() const {
    std::vector<double> t;
    for (uint32_t code = 0; code <= max_code + 1; ++code) t.push_back(magnitude(code));
    return t;
  }
  bool is_nan_code(uint32_t code) const {
    const uint32_t m = code & 0x7fu;
    return exponent_bits == 4 ? m == 0x7fu : m > 0x7cu;
  }
};

const Fp8Kind kE4M3FN{"e4m3fn", 4, 3, 0x7e, 0x7f, &f32_to_f8e4m3fn_bits, &f8e4m3fn_bits_to_f32};
const Fp8Kind kE5M2{"e5m2", 5, 2, 0x7b, 0x7c, &f32_to_f8e5m2_bits, &f8e5m2_bits_to_f32};

// Round to nearest even of a non-NaN f32, then the ONNX overflow rule of `saturate`.
uint32_t reference_round(const Fp8Kind& kind, const std::vector<double>& table, float x,
                         bool saturate) {
  const uint32_t sign = std::signbit(x) ? 0x80u : 0u;
  const double a = std::fabs(static_cast<double>(x));
  uint32_t code;
  if (a >= table.back()) {
    code = kind.max_code + 1;  // inf lands here too
  } else {
    const uint32_t hi =
        static_cast<uint32_t>(std::upper_bound(table.begin(), table.end(), a) - table.begin());
    const uint32_t lo = hi - 1;
    const double midpoint = (table[lo] + table[hi]) / 2;
    code = a < midpoint ? lo : a > midpoint ? hi : (lo % 2 == 0 ? lo : hi);
  }
  if (code > kind.max_code) code = saturate ? kind.max_code : kind.overflow_code;
  return sign | code;
}

class Float8 : public ::testing::TestWithParam<Fp8Kind> {};

TEST_P(Float8, EveryPatternDecodesToItsFieldValueAndRoundTrips) {
  const Fp8Kind& kind = GetParam();
  for (uint32_t b = 0; b < 256; ++b) {
    const float value = kind.decode(static_cast<uint8_t>(b));
    const uint32_t code = b & 0x7fu;
    const bool negative = (b & 0x80u) != 0;
    if (kind.is_nan_code(code)) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << b;
      for (const bool saturate : {true, false}) {
        ASSERT_EQ(kind.encode(value, saturate), negative ? 0xffu : 0x7fu) << std::hex << b;
      }
      continue;
    }
    ASSERT_EQ(std::signbit(value), negative) << std::hex << b;
    if (code > kind.max_code) {  // e5m2's inf: kept without saturation, clamped with it
      ASSERT_EQ(value, negative ? -kInf : kInf);
      ASSERT_EQ(kind.encode(value, false), b);
      ASSERT_EQ(kind.encode(value, true), (b & 0x80u) | kind.max_code);
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), (negative ? -1 : 1) * kind.magnitude(code)) << b;
    ASSERT_EQ(kind.encode(value, true), b) << std::hex << b;
    ASSERT_EQ(kind.encode(value, false), b) << std::hex << b;
  }
}

// Every pair of adjacent codes up to the overflow boundary: the midpoint goes to the even code,
// its f32 neighbours to the nearer one; past the largest finite value, the mode decides.
TEST_P(Float8, EveryHalfwayCaseRoundsToEvenAndNeighboursToNearest) {
  const Fp8Kind& kind = GetParam();
  const std::vector<double> table = kind.table();
  for (uint32_t lo = 0; lo <= kind.max_code; ++lo) {
    const uint32_t hi = lo + 1;
    const float mid = static_cast<float>((table[lo] + table[hi]) / 2);
    ASSERT_EQ(static_cast<double>(mid), (table[lo] + table[hi]) / 2);
    const float below = std::nextafter(mid, 0.0f);
    const float above = std::nextafter(mid, kInf);
    const uint32_t even = lo % 2 == 0 ? lo : hi;
    for (const bool saturate : {true, false}) {
      const auto resolve = [&](uint32_t code) {
        if (code <= kind.max_code) return code;
        return saturate ? kind.max_code : kind.overflow_code;
      };
      for (const float s : {1.0f, -1.0f}) {
        const uint32_t sign = s < 0 ? 0x80u : 0u;
        ASSERT_EQ(kind.encode(s * mid, saturate), sign | resolve(even)) << mid << " " << saturate;
        ASSERT_EQ(kind.encode(s * below, saturate), sign | resolve(lo)) << below;
        ASSERT_EQ(kind.encode(s * above, saturate), sign | resolve(hi)) << above;
        ASSERT_EQ(reference_round(kind, table, s * mid, saturate), sign | resolve(even));
        ASSERT_EQ(reference_round(kind, table, s * below, saturate), sign | resolve(lo));
        ASSERT_EQ(reference_round(kind, table, s * above, saturate), sign | resolve(hi));
      }
    }
  }
}

TEST_P(Float8, MatchesReferenceOnRandomF32Bits) {
  const Fp8Kind& kind = GetParam();
  const std::vector<double> table = kind.table();
  std::mt19937 rng(8);
  std::uniform_int_distribution<uint32_t> any;
  // Half uniform bits; half with an exponent where the format lives (2^-20 .. 2^17).
  std::uniform_int_distribution<uint32_t> exponent(127 - 20, 127 + 17);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t bits = any(rng);
    if (i % 2 == 1) bits = (bits & 0x807fffffu) | (exponent(rng) << 23);
    const float x = std::bit_cast<float>(bits);
    for (const bool saturate : {true, false}) {
      const uint32_t got = kind.encode(x, saturate);
      if (std::isnan(x)) {
        ASSERT_EQ(got, std::signbit(x) ? 0xffu : 0x7fu) << std::hex << bits;
      } else {
        ASSERT_EQ(got, reference_round(kind, table, x, saturate)) << std::hex << bits;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Float8, ::testing::Values(kE4M3FN, kE5M2),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the values the ONNX Cast table and the OCP spec name ----

TEST(Float8E4M3FN, SaturatesAtFourFortyEightOrOverflowsToNaN) {
  EXPECT_EQ(f32_to_f8e4m3fn_bits(448.0f), 0x7eu);
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0xfe), -448.0f);
  // 464 is the tie between 448 (mantissa 110, even) and 480 (111, not representable): it
  // rounds to 448, so it does not overflow in either mode. Anything above it does.
  EXPECT_EQ(f32_to_f8e4m3fn_bits(464.0f, true), 0x7eu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(464.0f, false), 0x7eu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(std::nextafter(464.0f, kInf), true), 0x7eu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(std::nextafter(464.0f, kInf), false), 0x7fu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-480.0f, true), 0xfeu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-480.0f, false), 0xffu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(1e30f, true), 0x7eu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(kInf, true), 0x7eu);  // no infinity: +-inf saturate
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-kInf, true), 0xfeu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(kInf, false), 0x7fu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-kInf, false), 0xffu);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(std::numeric_limits<float>::quiet_NaN()), 0x7fu);
  EXPECT_TRUE(std::isnan(f8e4m3fn_bits_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3fn_bits_to_f32(0xff)));
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0x78), 256.0f);  // exponent 1111 is finite in e4m3fn
}

TEST(Float8E4M3FN, SubnormalsRoundToNearestEvenAndKeepTheSign) {
  EXPECT_EQ(f32_to_f8e4m3fn_bits(0x1p-9f), 0x01u);  // the smallest subnormal
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(f8e4m3fn_bits_to_f32(0x08), 0x1p-6f);    // the smallest normal
  EXPECT_EQ(f32_to_f8e4m3fn_bits(0x1p-10f), 0x00u);  // half of it: tie to even zero
  EXPECT_EQ(f32_to_f8e4m3fn_bits(std::nextafter(0x1p-10f, 1.0f)), 0x01u);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-0x1p-10f), 0x80u);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(3 * 0x1p-10f), 0x02u);  // tie between 1 and 2: even 2
  EXPECT_EQ(f32_to_f8e4m3fn_bits(-0.0f), 0x80u);
  EXPECT_EQ(f32_to_f8e4m3fn_bits(1e-30f), 0x00u);
}

TEST(Float8E5M2, SaturatesAtFiftySevenThousandOrOverflowsToInf) {
  EXPECT_EQ(f32_to_f8e5m2_bits(57344.0f), 0x7bu);
  EXPECT_EQ(f8e5m2_bits_to_f32(0x7b), 57344.0f);
  // 61440 is the tie between 57344 (mantissa 11, odd) and 65536 (even): it overflows.
  EXPECT_EQ(f32_to_f8e5m2_bits(61440.0f, false), 0x7cu);
  EXPECT_EQ(f32_to_f8e5m2_bits(-61440.0f, false), 0xfcu);
  EXPECT_EQ(f32_to_f8e5m2_bits(61440.0f, true), 0x7bu);
  EXPECT_EQ(f32_to_f8e5m2_bits(std::nextafter(61440.0f, 0.0f), false), 0x7bu);
  // ONNX Cast-19 with saturate: +-inf -> +-57344 (the reference implementation keeps the sign).
  EXPECT_EQ(f32_to_f8e5m2_bits(kInf, true), 0x7bu);
  EXPECT_EQ(f32_to_f8e5m2_bits(-kInf, true), 0xfbu);
  EXPECT_EQ(f32_to_f8e5m2_bits(kInf, false), 0x7cu);
  EXPECT_EQ(f32_to_f8e5m2_bits(-kInf, false), 0xfcu);
  EXPECT_EQ(f8e5m2_bits_to_f32(0x7c), kInf);
  EXPECT_EQ(f8e5m2_bits_to_f32(0xfc), -kInf);
  EXPECT_EQ(f32_to_f8e5m2_bits(std::numeric_limits<float>::quiet_NaN()), 0x7fu);
  for (const uint8_t nan : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) {
    EXPECT_TRUE(std::isnan(f8e5m2_bits_to_f32(nan))) << int{nan};
  }
}

TEST(Float8E5M2, SubnormalsRoundToNearestEvenAndKeepTheSign) {
  EXPECT_EQ(f32_to_f8e5m2_bits(0x1p-16f), 0x01u);  // the smallest subnormal
  EXPECT_EQ(f8e5m2_bits_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(f8e5m2_bits_to_f32(0x04), 0x1p-14f);   // the smallest normal
  EXPECT_EQ(f32_to_f8e5m2_bits(0x1p-17f), 0x00u);  // tie to even zero
  EXPECT_EQ(f32_to_f8e5m2_bits(-std::nextafter(0x1p-17f, 1.0f)), 0x81u);
  EXPECT_EQ(f32_to_f8e5m2_bits(3 * 0x1p-17f), 0x02u);
  EXPECT_EQ(f32_to_f8e5m2_bits(-0x1p-18f), 0x80u);
}

// ---- host tensors of fp8 elements ----

TEST(Float8Tensor, ElementsConvertThroughTheSaturatingCast) {
  Tensor e4m3 = Tensor::from_doubles(DType::kF8E4M3FN, {4}, {1.5, 448, 1000, -INFINITY});
  EXPECT_EQ(std::vector<uint8_t>(e4m3.bytes().begin(), e4m3.bytes().end()),
            (std::vector<uint8_t>{0x3c, 0x7e, 0x7e, 0xfe}));
  EXPECT_EQ(e4m3.to_double_vector(), (std::vector<double>{1.5, 448, 448, -448}));

  Tensor e5m2 = Tensor::from_doubles(DType::kF8E5M2, {3}, {-0x1p-16, 1e6, INFINITY});
  EXPECT_EQ(std::vector<uint8_t>(e5m2.bytes().begin(), e5m2.bytes().end()),
            (std::vector<uint8_t>{0x81, 0x7b, 0x7b}));
  EXPECT_EQ(e5m2.element_as_double(0), -0x1p-16);
}

TEST(Float8Tensor, SetElementRoundsADoubleOnlyOnce) {
  // Just above the midpoint of 1 and 1.125: it must round up. Through a plain f32 cast it
  // would first become the midpoint itself and then tie to the even 1.0.
  Tensor t(TensorType{DType::kF8E4M3FN, {2}});
  t.set_element(0, 1.0625 + 0x1p-40);
  t.set_element(1, -(1.0625 - 0x1p-40));
  EXPECT_EQ(t.element_as_double(0), 1.125);
  EXPECT_EQ(t.element_as_double(1), -1.0);
}

}  // namespace
}  // namespace ampc
