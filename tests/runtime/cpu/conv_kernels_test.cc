// Conv on the CPU backend against a direct convolution in f64 written here (N-D, groups,
// strides, dilations, explicit begin/end pads), with the pads of auto_pad derived by hand; exact
// sums (small integers times powers of two) make the f32/f16/bf16 results exact or
// rounded-once; random f16 inputs are checked bit for bit against im2col written here, the f32
// GEMM core and one rounding.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/cpu/gemm_core.h"
#include "tests/runtime/cpu/conv_test_util.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::ConvCase;
using testing::direct_conv;
using testing::exact_values;
using testing::for_each_index;
using testing::Ints;
using testing::on_cpu_threads;
using testing::random_values;
using testing::run_op;

// Runs the case on exact values in `dtype` and expects the direct f64 result, exactly (f32,
// f64) or rounded once (f16, bf16: the sums are exact in f32, so rounding them is the answer).
void expect_exact_conv(const ConvCase& c, DType dtype, bool with_bias, uint32_t seed) {
  const std::vector<double> x = exact_values(num_elements(c.x), seed);
  const std::vector<double> w = exact_values(num_elements(c.w), seed + 1);
  const std::vector<double> b = exact_values(c.w[0], seed + 2);
  std::vector<Tensor> inputs = {Tensor::from_doubles(dtype, c.x, x),
                                Tensor::from_doubles(dtype, c.w, w)};
  if (with_bias) inputs.push_back(Tensor::from_doubles(dtype, {c.w[0]}, b));
  const Tensor y = run_op("Conv", c.attrs(), inputs, {dtype, c.y()});
  const Tensor expected =
      Tensor::from_doubles(dtype, c.y(), direct_conv(c, x, w, with_bias ? &b : nullptr));
  EXPECT_TRUE(y == expected) << dtype_name(dtype) << " " << c.attrs();
}

TEST(ConvKernel, TwoDimStridedDilatedAsymmetricPadsWithBias) {
  const ConvCase c{{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, 1};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    expect_exact_conv(c, dtype, /*with_bias=*/true, 1);
  }
}

TEST(ConvKernel, GroupsSplitChannels) {
  const ConvCase c{{1, 4, 5, 5}, {6, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 2};
  expect_exact_conv(c, DType::kF32, /*with_bias=*/true, 4);
}

// group = C: each input channel has its own filters (two per channel here).
TEST(ConvKernel, DepthwiseWithChannelMultiplier) {
  const ConvCase c{{2, 3, 6, 6}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 0}, 3};
  expect_exact_conv(c, DType::kF32, /*with_bias=*/false, 7);
  expect_exact_conv(c, DType::kBF16, /*with_bias=*/true, 8);
}

TEST(ConvKernel, OneDimStridedDilated) {
  const ConvCase c{{2, 4, 10}, {6, 4, 3}, {2}, {2}, {0, 1}, 1};
  expect_exact_conv(c, DType::kF32, /*with_bias=*/true, 10);
  expect_exact_conv(c, DType::kF16, /*with_bias=*/false, 11);
}

TEST(ConvKernel, ThreeDimPadded) {
  const ConvCase c{{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}, 1};
  expect_exact_conv(c, DType::kF32, /*with_bias=*/true, 13);
  expect_exact_conv(c, DType::kF64, /*with_bias=*/false, 14);
}

// A 1x1 kernel with unit strides reads the image as the GEMM operand directly.
TEST(ConvKernel, PointwiseKernel) {
  const ConvCase c{{2, 5, 3, 4}, {7, 5, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1};
  expect_exact_conv(c, DType::kF32, /*with_bias=*/true, 16);
  expect_exact_conv(c, DType::kF16, /*with_bias=*/true, 17);
}

// in 6, kernel 3, stride 2: out 3, total pad (3 - 1) * 2 + 3 - 6 = 1, which SAME_UPPER puts at
// the end and SAME_LOWER at the beginning; VALID pads nothing (out 2).
TEST(ConvKernel, AutoPadPlacesTheOddPad) {
  const Shape x_shape = {1, 2, 6, 6}, w_shape = {3, 2, 3, 3};
  const std::vector<double> x = exact_values(num_elements(x_shape), 19);
  const std::vector<double> w = exact_values(num_elements(w_shape), 20);
  const std::vector<Tensor> inputs = {Tensor::from_doubles(DType::kF32, x_shape, x),
                                      Tensor::from_doubles(DType::kF32, w_shape, w)};
  struct AutoPad {
    std::string mode;
    Ints pads;
  };
  for (const AutoPad& a : {AutoPad{"SAME_UPPER", {0, 0, 1, 1}}, AutoPad{"SAME_LOWER", {1, 1, 0, 0}},
                           AutoPad{"VALID", {0, 0, 0, 0}}}) {
    const ConvCase c{x_shape, w_shape, {2, 2}, {1, 1}, a.pads, 1};
    const Tensor y = run_op("Conv", str_cat("auto_pad=\"", a.mode, "\", strides=[2, 2]"), inputs,
                            {DType::kF32, c.y()});
    EXPECT_TRUE(y == Tensor::from_doubles(DType::kF32, c.y(), direct_conv(c, x, w, nullptr)))
        << a.mode;
  }
}

TEST(ConvKernel, F32RandomWithinSumErrorBound) {
  const ConvCase c{{2, 8, 9, 9}, {5, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1};
  const std::vector<double> x = random_values(num_elements(c.x), 22),
                            w = random_values(num_elements(c.w), 23);
  const Tensor y =
      run_op("Conv", c.attrs(),
             {Tensor::from_doubles(DType::kF32, c.x, x), Tensor::from_doubles(DType::kF32, c.w, w)},
             {DType::kF32, c.y()});
  const std::vector<double> expected = direct_conv(c, x, w, nullptr);
  // K = 72 terms of magnitude ~1: an f32 sum is within K * 2^-24 * sum |x w| < 1e-4.
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR(y.element_as_double(i), expected[i], 1e-4) << i;
  }
}

// f16 with random values: the kernel equals im2col (written here, in f32), the f32 GEMM core over
// the groups, + bias in f32, and one rounding.
TEST(ConvKernel, F16EqualsF32CoreThenBiasRoundedOnce) {
  const int64_t n = 2, c = 4, h = 6, w = 5, m = 6, group = 2, k = 3;
  const int64_t cg = c / group, mg = m / group, patch = cg * k * k, out = h * w;  // pads 1
  const Tensor x =
      Tensor::from_doubles(DType::kF16, {n, c, h, w}, random_values(n * c * h * w, 25));
  const Tensor wt = Tensor::from_doubles(DType::kF16, {m, cg, k, k}, random_values(m * patch, 26));
  const Tensor b = Tensor::from_doubles(DType::kF16, {m}, random_values(m, 27));
  const Tensor y =
      run_op("Conv", "pads=[1, 1, 1, 1], group=2", {x, wt, b}, {DType::kF16, {n, m, h, w}});

  std::vector<float> w32(m * patch), col(c * k * k * out), acc(m * out);
  for (int64_t i = 0; i < m * patch; ++i) w32[i] = static_cast<float>(wt.element_as_double(i));
  std::vector<uint16_t> expected;
  for (int64_t image = 0; image < n; ++image) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t ky = 0; ky < k; ++ky) {
        for (int64_t kx = 0; kx < k; ++kx) {
          for (int64_t oy = 0; oy < h; ++oy) {
            for (int64_t ox = 0; ox < w; ++ox) {
              const int64_t iy = oy - 1 + ky, ix = ox - 1 + kx;
              const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
              col[((ch * k + ky) * k + kx) * out + oy * w + ox] =
                  inside ? static_cast<float>(
                               x.element_as_double(((image * c + ch) * h + iy) * w + ix))
                         : 0.0f;
            }
          }
        }
      }
    }
    runtime::cpu::gemm({.m = mg, .n = out, .k = patch},
                       runtime::cpu::GemmBatch::strided(group, mg * patch, patch * out, mg * out),
                       w32.data(), col.data(), acc.data());
    for (int64_t i = 0; i < m * out; ++i) {
      expected.push_back(Float16(acc[i] + static_cast<float>(b.element_as_double(i / out))).bits);
    }
  }
  EXPECT_EQ(testing::bits_of(y), expected);
}

// The im2col kernels' sums do not depend on the thread count (oneDNN's, which f32 nodes use by
// default, repeat their bits for one count: onednn_conv_test).
TEST(ConvKernel, Im2colBitsDoNotDependOnThreadCount) {
  const testing::ScopedEnv im2col("AMPC_CPU_CONV", "im2col");
  const ConvCase c{{2, 16, 20, 20}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1};
  const std::vector<Tensor> inputs = {
      Tensor::from_doubles(DType::kF32, c.x, random_values(num_elements(c.x), 28)),
      Tensor::from_doubles(DType::kF32, c.w, random_values(num_elements(c.w), 29))};
  auto conv = [&] { return run_op("Conv", c.attrs(), inputs, {DType::kF32, c.y()}); };
  const Tensor one = on_cpu_threads(1, conv);
  const Tensor three = on_cpu_threads(3, conv);
  EXPECT_TRUE(one == three);
}

}  // namespace
}  // namespace ampc
