// The array exponentials of runtime/cpu/vector_math.h against the C library they stand in for:
// every f32 input gives expf's bits (the contract's definition of f32 exp on the CPU), and the
// sigmoid gives numeric::Sigmoid's bits. Independently of the C library, the results are within
// 1 ulp of exp computed in f64 over a sweep of the range. Lengths that are not a multiple of 8
// and aliasing input and output cover the tails and the in-place use.
#include "runtime/cpu/vector_math.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// All 2^32 bit patterns, in chunks over the threads; returns the first mismatching input's
// bits, or none.
TEST(VectorMath, ExpGivesTheCLibrarysBitsForEveryF32) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  constexpr int64_t kChunks = (int64_t{1} << 32) / kChunk;
  std::atomic<int64_t> mismatches{0};
  std::atomic<uint32_t> first_bad{0};
  parallel_for(kChunks, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> x(kChunk), y(kChunk);
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      for (int64_t j = 0; j < kChunk; ++j) {
        x[j] = std::bit_cast<float>(static_cast<uint32_t>(chunk * kChunk + j));
      }
      exp_array(x.data(), y.data(), kChunk);
      for (int64_t j = 0; j < kChunk; ++j) {
        if (!same_bits(y[j], std::exp(x[j])) && mismatches.fetch_add(1) == 0) {
          first_bad = std::bit_cast<uint32_t>(x[j]);
        }
      }
    }
  });
  EXPECT_EQ(mismatches.load(), 0) << "first at input bits 0x" << std::hex << first_bad.load();
}

TEST(VectorMath, ExpIsWithinOneUlpOfF64) {
  std::vector<float> x;
  // Up to ln(FLT_MAX) = 88.72...: beyond, f32 exp overflows to infinity.
  for (float v = -103.0f; v < 88.72f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size());
  exp_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    // One f32 ulp at the true value (the subnormal range's ulp is 2^-149).
    const double ulp = std::max(std::ldexp(1.0, std::ilogb(want) - 23), std::ldexp(1.0, -149));
    EXPECT_LE(std::fabs(static_cast<double>(y[i]) - want), ulp) << "x = " << x[i];
  }
}

TEST(VectorMath, SpecialInputsAndTailsInPlace) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f,  88.7f,   89.0f, -87.9f, -104.0f,
                          inf,  -inf,  nan,  0.5f,  1e-30f, -1e-30f, 3.0f,  2.0f};
  for (int64_t n = 0; n <= static_cast<int64_t>(x.size()); ++n) {
    std::vector<float> y(x.begin(), x.begin() + n);
    exp_array(y.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(same_bits(y[i], std::exp(x[i]))) << "x = " << x[i] << ", n = " << n;
    }
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(std::exp(0.0f)), std::bit_cast<uint32_t>(1.0f));
}

TEST(VectorMath, SigmoidGivesTheScalarFormulasBits) {
  std::vector<float> x;
  for (float v = -120.0f; v < 120.0f; v += 0.071f) x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-0.0f);
  std::vector<float> y(x.size());
  sigmoid_array(x.data(), y.data(), static_cast<int64_t>(x.size()));
  std::vector<double> xd(x.begin(), x.end()), yd(x.size());
  sigmoid_array(xd.data(), yd.data(), static_cast<int64_t>(xd.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_TRUE(same_bits(y[i], numeric::Sigmoid{}(x[i]))) << "x = " << x[i];
    EXPECT_EQ(yd[i], numeric::Sigmoid{}(xd[i])) << "x = " << xd[i];
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out = 0;
  sigmoid_array(&nan, &out, 1);
  EXPECT_TRUE(std::isnan(out));
}

}  // namespace
}  // namespace ampc::runtime::cpu
