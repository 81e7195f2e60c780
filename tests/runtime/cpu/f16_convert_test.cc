// The bulk f16 <-> f32 conversions of the CPU kernels (runtime/cpu/f16_convert.h; F16C where
// the CPU has it) against IEEE rules: every one of the 65,536 f16 values widens to the f32 of
// the same value (NaN to a NaN of the same sign), and f32 values around every rounding boundary
// (halfway cases both ways, the subnormal range, the overflow threshold) narrow to the nearest
// f16, ties to even, computed here from the f16 neighbours in f64. Lengths that are not a
// multiple of 8 cover the scalar tails.
#include "runtime/cpu/f16_convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ampc::runtime::cpu {
namespace {

// The value of the f16 with these bits, from its fields (an independent decoding).
double f16_value(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 0x1f) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(F16Convert, EveryF16WidensToItsValue) {
  std::vector<Float16> in(65536 + 3);
  for (size_t i = 0; i < in.size(); ++i) in[i] = Float16::from_bits(static_cast<uint16_t>(i));
  std::vector<float> out(in.size());
  widen_f16(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = f16_value(in[i].bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << "bits " << in[i].bits;
      EXPECT_EQ(std::signbit(out[i]), (in[i].bits & 0x8000) != 0) << "bits " << in[i].bits;
    } else {
      EXPECT_EQ(static_cast<double>(out[i]), want) << "bits " << in[i].bits;
    }
  }
}

// The f16 nearest to x (ties to the even mantissa), from the candidates' values in f64.
uint16_t nearest_f16(float x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(x));
  // 65520 = 65504 + half an ulp: from there up, ties and beyond round to infinity.
  if (magnitude >= 65520.0) return sign | 0x7c00;
  uint16_t best = 0;
  for (uint16_t bits = 0; bits < 0x7c00; ++bits) {
    const double d = std::fabs(f16_value(bits) - magnitude);
    const double e = std::fabs(f16_value(best) - magnitude);
    if (d < e || (d == e && (bits & 1) == 0 && (best & 1) == 1)) best = bits;
  }
  return sign | best;
}

TEST(F16Convert, F32NarrowsToTheNearestF16TiesToEven) {
  std::vector<float> values = {0.0f,     -0.0f,    1.0f,
                               -2.5f,    65504.0f, 65519.99f,
                               65520.0f, 1e6f,     -std::numeric_limits<float>::infinity(),
                               0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                               0x1p-26f, 6.1e-5f,  -6.0e-5f};
  std::mt19937 rng(3);
  // Every f16 boundary's neighbourhood: the midpoints between neighbours and one f32 ulp on
  // either side, over random f16 values of every exponent.
  std::uniform_int_distribution<int> pick(0, 0x7bfe);
  for (int k = 0; k < 400; ++k) {
    const uint16_t bits = static_cast<uint16_t>(pick(rng));
    const float mid = static_cast<float>((f16_value(bits) + f16_value(bits + 1)) / 2);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::vector<Float16> out(values.size());
  narrow_to_f16(values.data(), out.data(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(out[i].bits, nearest_f16(values[i])) << "x = " << values[i];
  }
  // A NaN stays a NaN of its sign.
  const float nan[3] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN()};
  Float16 narrowed[3];
  narrow_to_f16(nan, narrowed, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(narrowed[i].bits & 0x7c00, 0x7c00);
    EXPECT_NE(narrowed[i].bits & 0x3ff, 0);
    EXPECT_EQ((narrowed[i].bits & 0x8000) != 0, std::signbit(nan[i]));
  }
}

}  // namespace
}  // namespace ampc::runtime::cpu
