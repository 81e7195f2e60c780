// CPU kernels of runtime/cpu/constant.cc: Constant, ConstantOfShape and Range, against
// hand-written tensors.
#include <cstdint>
#include <string>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::run;
using testing::same_tensor;
using testing::try_run;

// A tensor from raw element bytes.
Tensor from_bytes(DType dtype, Shape shape, std::vector<uint8_t> bytes) {
  return Tensor(TensorType{dtype, std::move(shape)}, std::move(bytes));
}

// ---- Constant ---------------------------------------------------------------------------------

TEST(ConstantKernel, ValueTensorOfEveryElementSize) {
  const std::vector<Tensor> out = run(R"(graph g() {
    %a = Constant<value=f32[2,2] [1.0, -2.5, 3.0, 0.125]>() : f32[2,2]
    %b = Constant<value=bf16[3] [1.0, -0.0, 3.0e+38]>() : bf16[3]
    %c = Constant<value=bool[3] [true, false, true]>() : bool[3]
    %d = Constant<value=f8e4m3fn[2] [0x7e, 0x01]>() : f8e4m3fn[2]
    %e = Constant<value=f64[] [0.1]>() : f64[]
    %f = Constant<value=i8[0] []>() : i8[0]
    return %a, %b, %c, %d, %e, %f
  })");
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_f32({2, 2}, {1.0f, -2.5f, 3.0f, 0.125f})));
  // bf16 3.0e+38 rounds to 0x7f62 (2^127 * 1.765625 = 3.0033e38), -0.0 is 0x8000.
  EXPECT_TRUE(
      same_tensor(out[1], from_bytes(DType::kBF16, {3}, {0x80, 0x3f, 0x00, 0x80, 0x62, 0x7f})));
  EXPECT_TRUE(same_tensor(out[2], from_bytes(DType::kBool, {3}, {1, 0, 1})));
  EXPECT_TRUE(same_tensor(out[3], from_bytes(DType::kF8E4M3FN, {2}, {0x7e, 0x01})));
  EXPECT_TRUE(same_tensor(out[4], Tensor::from_doubles(DType::kF64, {}, {0.1})));
  EXPECT_TRUE(same_tensor(out[5], from_bytes(DType::kI8, {0}, {})));
}

TEST(ConstantKernel, ScalarAndListValueAttributes) {
  const std::vector<Tensor> out = run(R"(graph g() {
    %a = Constant<value_float=2.5>() : f32[]
    %b = Constant<value_floats=[1.0, -2.5]>() : f32[2]
    %c = Constant<value_int=-7>() : i64[]
    %d = Constant<value_ints=[1, -2, 3]>() : i64[3]
    return %a, %b, %c, %d
  })");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_f32({}, {2.5f})));
  EXPECT_TRUE(same_tensor(out[1], Tensor::from_f32({2}, {1.0f, -2.5f})));
  EXPECT_TRUE(same_tensor(out[2], Tensor::from_i64({}, {-7})));
  EXPECT_TRUE(same_tensor(out[3], Tensor::from_i64({3}, {1, -2, 3})));
}

TEST(ConstantKernel, ElidedValueIsAnErrorNotGarbage) {
  absl::StatusOr<std::vector<Tensor>> out = try_run(R"(graph g() {
    %a = Constant<value=f32[64] elided>() : f32[64]
    return %a
  })");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("elided"), std::string::npos) << out.status();
}

// ---- ConstantOfShape --------------------------------------------------------------------------

TEST(ConstantOfShapeKernel, DefaultIsF32Zeros) {
  const std::vector<Tensor> out = run(R"(graph g() {
    init %s: i64[2] = [2, 3]
    %y = ConstantOfShape(%s) : f32[2,3]
    return %y
  })");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_f32({2, 3}, std::vector<float>(6, 0.0f))));
}

TEST(ConstantOfShapeKernel, FillsWithTheValueOfEveryElementSize) {
  const std::vector<Tensor> out = run(R"(graph g() {
    init %s: i64[1] = [4]
    %a = ConstantOfShape<value=i64[1] [-7]>(%s) : i64[4]
    %b = ConstantOfShape<value=bf16[1] [-1.5]>(%s) : bf16[4]
    %c = ConstantOfShape<value=bool[1] [true]>(%s) : bool[4]
    %d = ConstantOfShape<value=f8e5m2[1] [0x7c]>(%s) : f8e5m2[4]
    %e = ConstantOfShape<value=i32[1] [123456]>(%s) : i32[4]
    return %a, %b, %c, %d, %e
  })");
  ASSERT_EQ(out.size(), 5u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_i64({4}, {-7, -7, -7, -7})));
  // bf16 -1.5 is 0xbfc0.
  EXPECT_TRUE(same_tensor(
      out[1], from_bytes(DType::kBF16, {4}, {0xc0, 0xbf, 0xc0, 0xbf, 0xc0, 0xbf, 0xc0, 0xbf})));
  EXPECT_TRUE(same_tensor(out[2], from_bytes(DType::kBool, {4}, {1, 1, 1, 1})));
  EXPECT_TRUE(same_tensor(out[3], from_bytes(DType::kF8E5M2, {4}, {0x7c, 0x7c, 0x7c, 0x7c})));
  EXPECT_TRUE(same_tensor(
      out[4], Tensor::from_doubles(DType::kI32, {4}, {123456, 123456, 123456, 123456})));
}

TEST(ConstantOfShapeKernel, EmptyShapeIsAScalarAndZeroDimIsEmpty) {
  const std::vector<Tensor> out = run(R"(graph g() {
    init %none: i64[0] = []
    init %zero: i64[2] = [3, 0]
    %a = ConstantOfShape<value=f16[1] [2.0]>(%none) : f16[]
    %b = ConstantOfShape(%zero) : f32[3,0]
    return %a, %b
  })");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(same_tensor(out[0], from_bytes(DType::kF16, {}, {0x00, 0x40})));  // f16 2.0
  EXPECT_TRUE(same_tensor(out[1], Tensor::from_f32({3, 0}, {})));
}

// ---- Range ------------------------------------------------------------------------------------

// Range(start, limit, delta) of scalar `dtype` constants; the output type is what inference gives.
std::vector<Tensor> run_range(std::string_view dtype, std::string_view start,
                              std::string_view limit, std::string_view delta,
                              std::string_view out_type) {
  return run(str_cat("graph g() {\n  init %s: ", dtype, "[] = [", start, "]\n  init %l: ", dtype,
                     "[] = [", limit, "]\n  init %d: ", dtype, "[] = [", delta, "]\n",
                     "  %y = Range(%s, %l, %d) : ", out_type, "\n  return %y\n}"));
}

TEST(RangeKernel, FloatUpAndDownBySteps) {
  std::vector<Tensor> up = run_range("f32", "1.0", "5.0", "0.5", "f32[8]");
  ASSERT_EQ(up.size(), 1u);
  EXPECT_TRUE(
      same_tensor(up[0], Tensor::from_f32({8}, {1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 4.5f})));
  std::vector<Tensor> down = run_range("f32", "1.0", "-1.0", "-0.5", "f32[4]");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_TRUE(same_tensor(down[0], Tensor::from_f32({4}, {1.0f, 0.5f, 0.0f, -0.5f})));
  std::vector<Tensor> f64 = run_range("f64", "-1.0", "0.0", "0.25", "f64[4]");
  ASSERT_EQ(f64.size(), 1u);
  EXPECT_TRUE(
      same_tensor(f64[0], Tensor::from_doubles(DType::kF64, {4}, {-1, -0.75, -0.5, -0.25})));
}

TEST(RangeKernel, FloatElementsAreStartPlusIndexTimesDeltaInF32) {
  // 0.1f steps: element i is 0.1f + f32(i) * 0.1f, rounded in f32 at each operation (ONNX's
  // reference computes start + i * delta), not accumulated.
  std::vector<Tensor> out = run_range("f32", "0.1", "1.0", "0.1", "f32[9]");
  ASSERT_EQ(out.size(), 1u);
  std::vector<float> expected(9);
  for (int i = 0; i < 9; ++i) {
    const volatile float product = static_cast<float>(i) * 0.1f;  // no fused multiply-add
    expected[i] = 0.1f + product;
  }
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_f32({9}, expected)));
}

TEST(RangeKernel, IntegersWithNegativeDeltaAndEmptyOutput) {
  std::vector<Tensor> down = run_range("i64", "10", "4", "-2", "i64[3]");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_TRUE(same_tensor(down[0], Tensor::from_i64({3}, {10, 8, 6})));
  std::vector<Tensor> i32 = run_range("i32", "-3", "4", "2", "i32[4]");
  ASSERT_EQ(i32.size(), 1u);
  EXPECT_TRUE(same_tensor(i32[0], Tensor::from_doubles(DType::kI32, {4}, {-3, -1, 1, 3})));
  std::vector<Tensor> empty = run_range("i64", "5", "1", "1", "i64[0]");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_TRUE(same_tensor(empty[0], Tensor::from_i64({0}, {})));
  std::vector<Tensor> empty_float = run_range("f32", "0.0", "1.0", "-1.0", "f32[0]");
  ASSERT_EQ(empty_float.size(), 1u);
  EXPECT_TRUE(same_tensor(empty_float[0], Tensor::from_f32({0}, {})));
}

TEST(RangeKernel, IntegerRangeAcrossTheWholeInt64LineDoesNotOverflow) {
  // INT64_MIN, INT64_MIN + (2^63 - 1) = -1, then 2^63 - 2.
  std::vector<Tensor> out = run_range("i64", "-9223372036854775808", "9223372036854775807",
                                      "9223372036854775807", "i64[3]");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_i64({3}, {INT64_MIN, -1, INT64_MAX - 1})));
}

}  // namespace
}  // namespace ampc
