// The Cast CPU kernel (runtime/cpu/cast.cc) against hand-derived bit patterns and values: float
// to integer truncation, integer wrapping, bool, round-to-nearest-even into f16/bf16/fp8 with a
// single rounding (also from f64 and from large integers), NaN and overflow handling, and every
// pair of element types on values all of them hold exactly.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::elements;
using testing::typed_tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// `%y = Cast<to=TO[, ATTRS]>(%x)` at opset 19 (fp8 and `saturate`).
Tensor cast(const Tensor& x, DType to, const std::string& attrs = "") {
  return testing::run_op("Cast", str_cat("to=", dtype_name(to), attrs.empty() ? "" : ", ", attrs),
                         {x}, TensorType{to, x.shape()}, 19);
}

// The raw element bits of a 1- or 2-byte tensor.
std::vector<uint32_t> bits(const Tensor& t) { return testing::element_bits(t); }

TEST(CastKernels, FloatToIntegerTruncatesTowardZero) {
  const Tensor x = Tensor::from_f32({6}, {2.9f, -2.9f, 0.5f, -0.5f, 1e6f, -7.0f});
  EXPECT_EQ(elements<int32_t>(cast(x, DType::kI32)),
            (std::vector<int32_t>{2, -2, 0, 0, 1000000, -7}));
  EXPECT_EQ(cast(x, DType::kI64).to_i64_vector(), (std::vector<int64_t>{2, -2, 0, 0, 1000000, -7}));
  const Tensor d = Tensor::from_doubles(DType::kF64, {2}, {-123456789012.75, 0x1p52 + 0.5});
  EXPECT_EQ(cast(d, DType::kI64).to_i64_vector(),
            (std::vector<int64_t>{-123456789012, int64_t{1} << 52}));
  const Tensor h = typed_tensor<Float16>(DType::kF16, {Float16(-3.75f), Float16(65504.0f)});
  EXPECT_EQ(elements<int32_t>(cast(h, DType::kI32)), (std::vector<int32_t>{-3, 65504}));
}

TEST(CastKernels, FloatToIntegerSaturatesOutOfRangeAndMapsNaNToZero) {
  const Tensor x = Tensor::from_f32({5}, {kNaN, 1e10f, -1e10f, kInf, 300.7f});
  const int32_t max32 = std::numeric_limits<int32_t>::max();
  const int32_t min32 = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(elements<int32_t>(cast(x, DType::kI32)),
            (std::vector<int32_t>{0, max32, min32, max32, 300}));
  EXPECT_EQ(elements<uint8_t>(cast(x, DType::kU8)), (std::vector<uint8_t>{0, 255, 0, 255, 255}));
  EXPECT_EQ(elements<int8_t>(cast(x, DType::kI8)), (std::vector<int8_t>{0, 127, -128, 127, 127}));
}

TEST(CastKernels, IntegerToIntegerWraps) {
  const Tensor x = Tensor::from_i64({4}, {300, -1, (int64_t{1} << 32) + 5, -129});
  EXPECT_EQ(elements<uint8_t>(cast(x, DType::kU8)), (std::vector<uint8_t>{44, 255, 5, 127}));
  EXPECT_EQ(elements<int32_t>(cast(x, DType::kI32)), (std::vector<int32_t>{300, -1, 5, -129}));
  const Tensor u = typed_tensor<uint8_t>(DType::kU8, {200, 7});
  EXPECT_EQ(elements<int8_t>(cast(u, DType::kI8)), (std::vector<int8_t>{-56, 7}));
  EXPECT_EQ(cast(u, DType::kI64).to_i64_vector(), (std::vector<int64_t>{200, 7}));
}

TEST(CastKernels, IntegerToFloatRoundsOnce) {
  const Tensor x = Tensor::from_i64(
      {3}, {(int64_t{1} << 24) + 1, (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::min()});
  EXPECT_EQ(elements<float>(cast(x, DType::kF32)),
            (std::vector<float>{0x1p24f, 0x1p53f, -0x1p63f}));
  EXPECT_EQ(elements<double>(cast(x, DType::kF64)),
            (std::vector<double>{0x1p24 + 1, 0x1p53, -0x1p63}));
  // bf16 holds 8 significant bits. 2^24 + 2^16 + 1 is just above the midpoint of 2^24 and
  // 2^24 + 2^17, so it rounds up; through f32 (ties to even at 2^24 + 2^16) it would round down.
  const Tensor y = Tensor::from_i64({3}, {(int64_t{1} << 24) + (1 << 16) + 1, 257, -259});
  EXPECT_EQ(bits(cast(y, DType::kBF16)),
            (std::vector<uint32_t>{0x4b81,     // 2^24 + 2^17
                                   0x4380,     // 257 -> 256 (tie, even)
                                   0xc382}));  // -259 -> -260
  const Tensor z = typed_tensor<int32_t>(DType::kI32, {65519, 65520, 2049, -70000});
  EXPECT_EQ(bits(cast(z, DType::kF16)), (std::vector<uint32_t>{0x7bff, 0x7c00, 0x6800, 0xfc00}));
}

TEST(CastKernels, F32ToF16RoundsToNearestEven) {
  const Tensor x =
      Tensor::from_f32({8}, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, 0x1p-25f,
                             3 * 0x1p-26f, -0x1p-24f, 1.0f + 0x1p-11f + 0x1p-20f});
  EXPECT_EQ(bits(cast(x, DType::kF16)), (std::vector<uint32_t>{
                                            0x3c00,  // tie -> 1.0 (even)
                                            0x3c02,  // tie -> 1 + 2^-9 (even)
                                            0x7bff,  // 65504
                                            0x7c00,  // tie at 65520 -> inf
                                            0x0000,  // 2^-25: tie -> 0
                                            0x0001,  // 0.75 * 2^-24 -> 2^-24
                                            0x8001,  // -2^-24, subnormal
                                            0x3c01,  // above the tie -> up
                                        }));
}

TEST(CastKernels, NaNStaysNaNAndInfinityStaysInfinity) {
  // A NaN whose payload is only in the low bits would become inf if bf16 just truncated.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  const Tensor x = Tensor::from_f32({4}, {low_payload_nan, kNaN, kInf, -kInf});
  const std::vector<uint32_t> b = bits(cast(x, DType::kBF16));
  EXPECT_EQ(b[0] & 0xff80u, 0x7f80u);
  EXPECT_NE(b[0] & 0x7fu, 0u);
  EXPECT_EQ(b[2], 0x7f80u);
  EXPECT_EQ(b[3], 0xff80u);
  const std::vector<uint32_t> h = bits(cast(x, DType::kF16));
  EXPECT_EQ(h[0] & 0xfc00u, 0x7c00u);  // positive, exponent all ones
  EXPECT_NE(h[0] & 0x3ffu, 0u);
  EXPECT_EQ(h[2], 0x7c00u);
  const std::vector<double> d = elements<double>(cast(x, DType::kF64));
  EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1]) && d[2] == kInf && d[3] == -kInf);
  const Tensor bf = typed_tensor<BFloat16>(DType::kBF16, {BFloat16::from_bits(0x7fc1)});
  EXPECT_TRUE(std::isnan(elements<float>(cast(bf, DType::kF32))[0]));
  EXPECT_EQ(bits(cast(bf, DType::kF16))[0] & 0x7c00u, 0x7c00u);
  EXPECT_NE(bits(cast(bf, DType::kF16))[0] & 0x3ffu, 0u);
}

TEST(CastKernels, F64ToNarrowFloatsRoundsOnce) {
  // Just above a tie: direct rounding goes up; rounding to f32 first would land on the tie and
  // then round to even (down).
  const double tiny = 0x1p-40;
  const Tensor x = Tensor::from_doubles(
      DType::kF64, {4}, {1.0 + 0x1p-11 + tiny, 1.0 + 0x1p-8 + tiny, 1.0 + 0x1p-4 + tiny, 1e300});
  const std::vector<uint32_t> h = bits(cast(x, DType::kF16));
  EXPECT_EQ(h[0], 0x3c01u);
  EXPECT_EQ(h[3], 0x7c00u);
  EXPECT_EQ(bits(cast(x, DType::kBF16))[1], 0x3f81u);
  EXPECT_EQ(bits(cast(x, DType::kF8E4M3FN))[2], 0x39u);  // 1.125
  const std::vector<float> f = elements<float>(cast(x, DType::kF32));
  EXPECT_EQ(f[0], 1.0f + 0x1p-11f);  // f32 holds the tie's neighbourhood: plain nearest
  EXPECT_EQ(f[3], kInf);
}

TEST(CastKernels, BoolCastsAreNonzeroAndZeroOne) {
  const Tensor x = Tensor::from_f32({6}, {0.0f, -0.0f, 0.1f, kNaN, -kInf, 2.0f});
  EXPECT_EQ(elements<bool>(cast(x, DType::kBool)),
            (std::vector<bool>{false, false, true, true, true, true}));
  const Tensor i = Tensor::from_i64({3}, {0, -5, 256});
  EXPECT_EQ(elements<bool>(cast(i, DType::kBool)), (std::vector<bool>{false, true, true}));
  const Tensor b = typed_tensor<bool>(DType::kBool, {true, false});
  EXPECT_EQ(elements<float>(cast(b, DType::kF32)), (std::vector<float>{1.0f, 0.0f}));
  EXPECT_EQ(bits(cast(b, DType::kF16)), (std::vector<uint32_t>{0x3c00, 0}));
  EXPECT_EQ(cast(b, DType::kI64).to_i64_vector(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(elements<uint8_t>(cast(b, DType::kU8)), (std::vector<uint8_t>{1, 0}));
}

TEST(CastKernels, Fp8SaturatesByDefaultAndOverflowsWithoutIt) {
  const Tensor x = Tensor::from_f32({5}, {448.0f, 500.0f, -1e6f, kInf, 1.0f});
  EXPECT_EQ(bits(cast(x, DType::kF8E4M3FN)), (std::vector<uint32_t>{0x7e, 0x7e, 0xfe, 0x7e, 0x38}));
  EXPECT_EQ(bits(cast(x, DType::kF8E4M3FN, "saturate=0")),
            (std::vector<uint32_t>{0x7e, 0x7f, 0xff, 0x7f, 0x38}));
  EXPECT_EQ(bits(cast(x, DType::kF8E5M2)), (std::vector<uint32_t>{0x5f, 0x60, 0xfb, 0x7b, 0x3c}));
  EXPECT_EQ(bits(cast(x, DType::kF8E5M2, "saturate=0")),
            (std::vector<uint32_t>{0x5f, 0x60, 0xfc, 0x7c, 0x3c}));
  const Tensor i = Tensor::from_i64({2}, {1000, 3});
  EXPECT_EQ(bits(cast(i, DType::kF8E4M3FN)), (std::vector<uint32_t>{0x7e, 0x44}));
  const Tensor f8 = typed_tensor<uint8_t>(DType::kF8E4M3FN, {0x7e, 0x7f, 0x01});
  const std::vector<float> back = elements<float>(cast(f8, DType::kF32));
  EXPECT_EQ(back[0], 448.0f);
  EXPECT_TRUE(std::isnan(back[1]));
  EXPECT_EQ(back[2], 0x1p-9f);
  EXPECT_EQ(elements<int32_t>(cast(f8, DType::kI32)), (std::vector<int32_t>{448, 0, 0}));
  const Tensor e5 = typed_tensor<uint8_t>(DType::kF8E5M2, {0x7c, 0x3c});
  EXPECT_EQ(bits(cast(e5, DType::kF16)), (std::vector<uint32_t>{0x7c00, 0x3c00}));
}

TEST(CastKernels, SameTypeCastCopiesBits) {
  const Tensor x = typed_tensor<Float16>(DType::kF16, {Float16::from_bits(0x7c01), Float16(2.0f)});
  EXPECT_EQ(bits(cast(x, DType::kF16)), (std::vector<uint32_t>{0x7c01, 0x4000}));
}

// Every (from, to) pair on values each type holds exactly: 0, 1, 3, 96 (bool: 0 and 1).
TEST(CastKernels, EveryPairOfTypesConvertsExactValues) {
  for (DType from : kAllDTypes) {
    const std::vector<double> values =
        from == DType::kBool ? std::vector<double>{0, 1} : std::vector<double>{0, 1, 3, 96};
    const Tensor x = Tensor::from_doubles(from, {static_cast<int64_t>(values.size())}, values);
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(str_cat(dtype_name(from), " -> ", dtype_name(to)));
      const Tensor y = cast(x, to);
      for (size_t i = 0; i < values.size(); ++i) {
        const double expected = to == DType::kBool ? (values[i] != 0) : values[i];
        EXPECT_EQ(y.element_as_double(static_cast<int64_t>(i)), expected);
      }
    }
  }
}

}  // namespace
}  // namespace ampc
