// ampc.UnscaleGradients on the CPU backend, against IEEE arithmetic: each result is the
// gradient, read exactly into f32, times the inverse scale, rounded once; found_inf says whether
// any result is inf or NaN.
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::run_node;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs UnscaleGradients(inverse, grads...) and returns (found_inf, unscaled...).
std::vector<Tensor> unscale(float inverse, const std::vector<Tensor>& grads) {
  std::vector<Tensor> inputs = {Tensor::from_f32({}, {inverse})};
  std::vector<TensorType> outputs = {TensorType{DType::kBool, {}}};
  for (const Tensor& g : grads) {
    inputs.push_back(g);
    outputs.push_back(TensorType{DType::kF32, g.shape()});
  }
  return run_node("ampc.UnscaleGradients", "", inputs, outputs);
}

Tensor tensor(DType dtype, const std::vector<double>& values) {
  return Tensor::from_doubles(dtype, {static_cast<int64_t>(values.size())}, values);
}

bool found_inf(const std::vector<Tensor>& result) { return result.at(0).element_as_i64(0) != 0; }

// 1/65536 is a power of two: every product is exact. fp16's largest finite value, 65504,
// unscales to 65504 / 65536; a bf16 and an f32 gradient in the same call.
TEST(UnscaleGradientsKernel, LowPrecisionInF32OutExactlyForAPowerOfTwo) {
  const std::vector<Tensor> result =
      unscale(1.0f / 65536, {tensor(DType::kF16, {1, 65504, -3, 0.5}),
                             tensor(DType::kBF16, {256, -0.125}), tensor(DType::kF32, {6e-5})});
  ASSERT_EQ(result.size(), 4u);
  EXPECT_FALSE(found_inf(result));
  EXPECT_EQ(result[1].dtype(), DType::kF32);
  EXPECT_EQ(result[1].to_double_vector(),
            (std::vector<double>{1.0 / 65536, 65504.0 / 65536, -3.0 / 65536, 0.5 / 65536}));
  EXPECT_EQ(result[2].to_double_vector(), (std::vector<double>{256.0 / 65536, -0.125 / 65536}));
  EXPECT_EQ(result[3].to_double_vector(),
            std::vector<double>{static_cast<float>(static_cast<float>(6e-5) / 65536.0f)});
}

// 1/3 is not exact in f32: the product is f32(g) * f32(1/3), rounded once.
TEST(UnscaleGradientsKernel, ProductsRoundOnceInF32) {
  const float inverse = 1.0f / 3.0f;
  const std::vector<Tensor> result = unscale(inverse, {tensor(DType::kF16, {7, 11, 1000})});
  EXPECT_FALSE(found_inf(result));
  EXPECT_EQ(result[1].to_double_vector(),
            (std::vector<double>{7.0f * inverse, 11.0f * inverse, 1000.0f * inverse}));
}

// An inf or NaN in any tensor is found; the other tensors are still unscaled.
TEST(UnscaleGradientsKernel, AnInfOrNaNAnywhereIsFound) {
  for (double bad : {kInf, -kInf, kNaN}) {
    SCOPED_TRACE(bad);
    const std::vector<Tensor> result = unscale(
        0.5f,
        {tensor(DType::kF32, {2, 4}), tensor(DType::kF16, {1, bad, 3}), tensor(DType::kBF16, {8})});
    EXPECT_TRUE(found_inf(result));
    EXPECT_EQ(result[1].to_double_vector(), (std::vector<double>{1, 2}));
    EXPECT_EQ(result[3].to_double_vector(), std::vector<double>{4});
  }
}

// With a scale below 1 the inverse is above 1, and a finite gradient can overflow f32 when
// unscaled: that is found too (the check reads the results).
TEST(UnscaleGradientsKernel, AFiniteGradientThatOverflowsWhenUnscaledIsFound) {
  const std::vector<Tensor> result = unscale(4.0f, {tensor(DType::kF32, {1, 3e38})});
  EXPECT_TRUE(found_inf(result));
  EXPECT_EQ(result[1].to_double_vector(), (std::vector<double>{4, kInf}));
}

}  // namespace
}  // namespace ampc
