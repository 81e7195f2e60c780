// The numeric contract of the CPU backend, checked bit for bit: for f16 and bf16 inputs, MatMul,
// Conv, Add, Mul, Softmax and LayerNormalization give exactly "upcast every input to f32,
// compute in f32 in the documented order, round once (to nearest even)". The f32 computation is
// written here, independently of the kernels; rounding uses ampc/float16.h, which
// tests/compiler/float_types_test.cc checks exhaustively.
//
// The order the contract fixes, and these references follow:
// - MatMul, Conv: f32 accumulation. With small integers times powers of two every partial sum is
//   exact in f32, so any order gives the same f32 result and a naive loop is the reference.
//   Random inputs are compared with one call of oneDNN's sgemm (the f32 core's library, on one
//   thread) on the upcast operands.
// - Add, Mul: one f32 operation per element.
// - Softmax, per row: m = max; e_i = exp(x_i - m) (std::exp on f32); s = e_0 + ... + e_{n-1}
//   summed left to right; y_i = e_i / s.
// - LayerNormalization, per row of n elements, as ONNX's function body defines it:
//   mean = (x_0 + ... + x_{n-1}) / n and var = ((x_0 - mean)^2 + ...) / n, sequential sums;
//   inv_std = 1 / sqrt(var + epsilon); y_j = (x_j - mean) * inv_std * scale_j + bias_j.
// Overflow and underflow happen where IEEE puts them: f16 65504 + 16 is inf, 65504 + 15 is
// 65504; a MatMul of 70000 is inf in f16 and finite in bf16; results below half the smallest
// subnormal are zeros of the right sign, results in the subnormal range are exact.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

// ---- helpers -------------------------------------------------------------------------------

using testing::bits_of;
using testing::exact_values;
using testing::random_values;
using testing::round_to;
using testing::run_op;
using testing::upcast;

std::string dtype_label(DType dtype) { return std::string(dtype_name(dtype)); }

// A tensor of `dtype` holding `values`, each of which must be representable exactly.
Tensor exact_tensor(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t = Tensor::from_doubles(dtype, std::move(shape), values);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(t.element_as_double(static_cast<int64_t>(i)), values[i]) << "not exact in " << i;
  }
  return t;
}

// Checks every element of `got` is the rounding of the f32 result `expected`, bit for bit;
// reports the first few differences.
void expect_rounded(const Tensor& got, const std::vector<float>& expected, const char* what) {
  const std::vector<uint16_t> bits = bits_of(got);
  ASSERT_EQ(bits.size(), expected.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint16_t want = round_to(got.dtype(), expected[i]);
    if (bits[i] == want) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << what << " " << dtype_name(got.dtype()) << " element " << i << ": f32 result "
                    << expected[i] << " rounds to 0x" << std::hex << want << ", kernel gave 0x"
                    << bits[i] << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << expected.size();
}

// `value` as f32, asserting the f64 reference was exact in f32 (so f32 accumulation in any
// order gives it).
float exact_f32(double value) {
  EXPECT_EQ(static_cast<double>(static_cast<float>(value)), value) << "not exact in f32";
  return static_cast<float>(value);
}

class NumericContract : public ::testing::TestWithParam<DType> {};

// ---- MatMul --------------------------------------------------------------------------------

// [batch..., m, k] x [k, n] with exact values against a naive product.
void check_exact_matmul(DType dtype, const Shape& a_shape, int64_t n, uint32_t seed) {
  const int64_t k = a_shape.back();
  const int64_t m = a_shape[a_shape.size() - 2];
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < a_shape.size(); ++d) batch *= a_shape[d];
  const std::vector<double> a = exact_values(batch * m * k, seed);
  const std::vector<double> b = exact_values(k * n, seed + 1);
  Shape y_shape = a_shape;
  y_shape.back() = n;
  const Tensor y =
      run_op("MatMul", "", {exact_tensor(dtype, a_shape, a), exact_tensor(dtype, {k, n}, b)},
             TensorType{dtype, y_shape});
  std::vector<float> expected;
  for (int64_t i = 0; i < batch * m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
      expected.push_back(exact_f32(sum));
    }
  }
  expect_rounded(y, expected, "MatMul");
}

TEST_P(NumericContract, MatMulWithExactSumsIsTheRoundedF32Product) {
  check_exact_matmul(GetParam(), {2, 3, 17}, 5, 1);
  // More rows and columns than one GEMM tile (128 x 256) of the kernel.
  check_exact_matmul(GetParam(), {130, 40}, 260, 2);
}

TEST_P(NumericContract, MatMulWithRandomInputsIsUpcastSgemmRounded) {
  const DType dtype = GetParam();
  const int m = 48, k = 96, n = 40;  // one tile: the kernel makes one sgemm call of this shape
  const Tensor a = Tensor::from_doubles(dtype, {m, k}, random_values(m * k, 3));
  const Tensor b = Tensor::from_doubles(dtype, {k, n}, random_values(k * n, 4));
  const Tensor y = run_op("MatMul", "", {a, b}, TensorType{dtype, {m, n}});
  const std::vector<float> a32 = upcast(a), b32 = upcast(b);
  std::vector<float> expected(m * n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);  // on more threads oneDNN may split K, and the sums' order with it
  const dnnl_status_t status =
      dnnl_sgemm('N', 'N', m, n, k, 1.0f, a32.data(), k, b32.data(), n, 0.0f, expected.data(), n);
  omp_set_num_threads(threads);
  ASSERT_EQ(status, dnnl_success);
  expect_rounded(y, expected, "MatMul");
}

TEST_P(NumericContract, MatMulOf70000OverflowsInF16Only) {
  const DType dtype = GetParam();
  const Tensor a = exact_tensor(dtype, {2, 2}, {200, 150, -200, -150});
  const Tensor b = exact_tensor(dtype, {2, 1}, {200, 200});
  const Tensor y = run_op("MatMul", "", {a, b}, TensorType{dtype, {2, 1}});
  expect_rounded(y, {70000.0f, -70000.0f}, "MatMul");
  const std::vector<float> got = upcast(y);
  if (dtype == DType::kF16) {
    EXPECT_EQ(got, (std::vector<float>{INFINITY, -INFINITY}));
  } else {
    EXPECT_EQ(got, (std::vector<float>{70144.0f, -70144.0f}));  // 137 * 2^9, the nearest bf16
  }
}

TEST(NumericContractF16, MatMulUnderflowsToSignedZeroAndIsExactInTheSubnormalRange) {
  const Tensor a = exact_tensor(DType::kF16, {1, 2}, {0x1p-12, 0x1p-12});
  // Columns: -2^-26 + 2^-27 = -2^-27 (below half the smallest subnormal 2^-24: -0);
  // 2^-24 + 2^-23 = 3 * 2^-24 (exact subnormal); 2^-25 + 2^-26 = 0.75 * 2^-24 (rounds to
  // 2^-24); 2^-25 + 0 (half the smallest subnormal: ties to the even zero).
  const Tensor b = exact_tensor(DType::kF16, {2, 4},
                                {-0x1p-14, 0x1p-12, 0x1p-13, 0x1p-13,  //
                                 0x1p-15, 0x1p-11, 0x1p-14, 0});
  const Tensor y = run_op("MatMul", "", {a, b}, TensorType{DType::kF16, {1, 4}});
  EXPECT_EQ(bits_of(y), (std::vector<uint16_t>{0x8000, 0x0003, 0x0001, 0x0000}));
}

// ---- Conv ----------------------------------------------------------------------------------

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> pads, strides, dilations;
  bool bias;
};

void check_exact_conv(DType dtype, const ConvCase& c, uint32_t seed) {
  const int64_t batch = c.x[0], channels = c.x[1], height = c.x[2], width = c.x[3];
  const int64_t filters = c.w[0], kh = c.w[2], kw = c.w[3];
  const int64_t out_h =
      (height + c.pads[0] + c.pads[2] - c.dilations[0] * (kh - 1) - 1) / c.strides[0] + 1;
  const int64_t out_w =
      (width + c.pads[1] + c.pads[3] - c.dilations[1] * (kw - 1) - 1) / c.strides[1] + 1;
  const std::vector<double> x = exact_values(num_elements(c.x), seed);
  const std::vector<double> w = exact_values(num_elements(c.w), seed + 1);
  const std::vector<double> b = exact_values(filters, seed + 2);
  std::vector<Tensor> inputs = {exact_tensor(dtype, c.x, x), exact_tensor(dtype, c.w, w)};
  if (c.bias) inputs.push_back(exact_tensor(dtype, {filters}, b));
  const std::string attrs =
      str_cat("dilations=[", str_join(c.dilations, ", "), "], pads=[", str_join(c.pads, ", "),
              "], strides=[", str_join(c.strides, ", "), "]");
  const Tensor y = run_op("Conv", attrs, inputs, TensorType{dtype, {batch, filters, out_h, out_w}});

  std::vector<float> expected;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t f = 0; f < filters; ++f) {
      for (int64_t oh = 0; oh < out_h; ++oh) {
        for (int64_t ow = 0; ow < out_w; ++ow) {
          double sum = c.bias ? b[f] : 0.0;
          for (int64_t ch = 0; ch < channels; ++ch) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = oh * c.strides[0] - c.pads[0] + i * c.dilations[0];
                const int64_t iw = ow * c.strides[1] - c.pads[1] + j * c.dilations[1];
                if (ih < 0 || ih >= height || iw < 0 || iw >= width) continue;
                sum += x[((n * channels + ch) * height + ih) * width + iw] *
                       w[((f * channels + ch) * kh + i) * kw + j];
              }
            }
          }
          expected.push_back(exact_f32(sum));
        }
      }
    }
  }
  expect_rounded(y, expected, "Conv");
}

TEST_P(NumericContract, ConvWithExactSumsIsTheRoundedF32Convolution) {
  check_exact_conv(GetParam(), {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
                   10);
  check_exact_conv(GetParam(), {{1, 5, 9, 8}, {3, 5, 3, 2}, {0, 1, 2, 0}, {2, 1}, {2, 2}, false},
                   20);
}

// ---- Add, Mul ------------------------------------------------------------------------------

TEST_P(NumericContract, AddIsOneRoundedF32Addition) {
  const DType dtype = GetParam();
  const Tensor a = Tensor::from_doubles(dtype, {64, 33}, random_values(64 * 33, 5, 100));
  const Tensor b = Tensor::from_doubles(dtype, {33}, random_values(33, 6));  // broadcast
  const Tensor y = run_op("Add", "", {a, b}, TensorType{dtype, {64, 33}});
  const std::vector<float> a32 = upcast(a), b32 = upcast(b);
  std::vector<float> expected;
  for (int64_t i = 0; i < 64 * 33; ++i) expected.push_back(a32[i] + b32[i % 33]);
  expect_rounded(y, expected, "Add");
}

TEST(NumericContractF16, AddOverflowsToInfinityExactlyFrom65520) {
  const Tensor a = exact_tensor(DType::kF16, {5}, {65504, 65504, -65504, 65504, 65504});
  const Tensor b = exact_tensor(DType::kF16, {5}, {16, 15, -16, -65504, 8});
  const Tensor y = run_op("Add", "", {a, b}, TensorType{DType::kF16, {5}});
  EXPECT_EQ(upcast(y), (std::vector<float>{INFINITY, 65504, -INFINITY, 0, 65504}));
}

TEST(NumericContractBF16, AddOverflowsToInfinityAtTheIeeeThreshold) {
  const double max = std::ldexp(2 - 0x1p-7, 127);  // the largest finite bf16
  // max + 2^119 is the midpoint of max and 2^128 (exact in f32), a tie that goes to the even
  // 2^128: inf. max + 2^118 rounds back to max.
  const Tensor a = exact_tensor(DType::kBF16, {3}, {max, max, -max});
  const Tensor b = exact_tensor(DType::kBF16, {3}, {0x1p119, 0x1p118, -0x1p119});
  const Tensor y = run_op("Add", "", {a, b}, TensorType{DType::kBF16, {3}});
  EXPECT_EQ(upcast(y), (std::vector<float>{INFINITY, static_cast<float>(max), -INFINITY}));
}

TEST(NumericContractF16, MulUnderflowsToSignedZeroAndIsExactInTheSubnormalRange) {
  const Tensor a =
      exact_tensor(DType::kF16, {6}, {0x1p-14, -0x1p-14, 0x1p-14, 0x1p-14, 0x1p-12, -0x1p-7});
  const Tensor b = exact_tensor(DType::kF16, {6},
                                {0x1p-11, 0x1p-12, 0x1p-10, 3 * 0x1p-11, 5 * 0x1p-12, 3 * 0x1p-18});
  const Tensor y = run_op("Mul", "", {a, b}, TensorType{DType::kF16, {6}});
  // 2^-25: tie to +0; -2^-26: -0; 2^-24: the smallest subnormal; 3 * 2^-25: tie to the even
  // 2 * 2^-24; 5 * 2^-24: exact; -3 * 2^-25: tie to -2 * 2^-24.
  EXPECT_EQ(bits_of(y), (std::vector<uint16_t>{0x0000, 0x8000, 0x0001, 0x0002, 0x0005, 0x8002}));
}

TEST(NumericContractBF16, MulUnderflowsToSignedZeroAndIsExactInTheSubnormalRange) {
  const Tensor a = exact_tensor(DType::kBF16, {3}, {0x1p-70, -0x1p-70, 0x1p-66});
  const Tensor b = exact_tensor(DType::kBF16, {3}, {0x1p-70, 0x1p-70, 3 * 0x1p-67});
  const Tensor y = run_op("Mul", "", {a, b}, TensorType{DType::kBF16, {3}});
  // 2^-140 and -2^-140 are below half the smallest bf16 subnormal (2^-133); 3 * 2^-133 is exact.
  EXPECT_EQ(bits_of(y), (std::vector<uint16_t>{0x0000, 0x8000, 0x0003}));
}

// ---- Softmax -------------------------------------------------------------------------------

// Softmax over rows of `length` elements that are `stride` apart (the layout of any axis).
std::vector<float> reference_softmax(const std::vector<float>& x, int64_t outer, int64_t length,
                                     int64_t stride) {
  std::vector<float> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t s = 0; s < stride; ++s) {
      const int64_t first = o * length * stride + s;
      float max = -INFINITY;
      for (int64_t k = 0; k < length; ++k) max = std::max(max, x[first + k * stride]);
      float sum = 0;
      for (int64_t k = 0; k < length; ++k) sum += std::exp(x[first + k * stride] - max);
      for (int64_t k = 0; k < length; ++k) {
        y[first + k * stride] = std::exp(x[first + k * stride] - max) / sum;
      }
    }
  }
  return y;
}

TEST_P(NumericContract, SoftmaxIsTheRoundedF32SoftmaxInSequentialOrder) {
  const DType dtype = GetParam();
  // Many rows: an f32 result one ulp off rounds differently in f16 about once in 2^13 elements
  // and in bf16 once in 2^16, so a different order shows only over a few hundred thousand.
  const int64_t rows = 4096, n = 96;
  const Tensor x = Tensor::from_doubles(dtype, {rows, n}, random_values(rows * n, 7, 4));
  expect_rounded(run_op("Softmax", "", {x}, TensorType{dtype, {rows, n}}),
                 reference_softmax(upcast(x), rows, n, 1), "Softmax axis -1");
  const Tensor x3 = Tensor::from_doubles(dtype, {3, 6, 5}, random_values(90, 8, 3, 10));
  expect_rounded(run_op("Softmax", "axis=1", {x3}, TensorType{dtype, {3, 6, 5}}),
                 reference_softmax(upcast(x3), 3, 6, 5), "Softmax axis 1");
}

// ---- LayerNormalization --------------------------------------------------------------------

std::vector<float> reference_layer_norm(const std::vector<float>& x,
                                        const std::vector<float>& scale,
                                        const std::vector<float>& bias, int64_t n, float epsilon) {
  std::vector<float> y(x.size());
  for (size_t first = 0; first < x.size(); first += n) {
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[first + j];
    const float mean = sum / static_cast<float>(n);
    float square_sum = 0;
    for (int64_t j = 0; j < n; ++j) square_sum += (x[first + j] - mean) * (x[first + j] - mean);
    const float var = square_sum / static_cast<float>(n);
    const float inv_std = 1.0f / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < n; ++j) {
      y[first + j] = (x[first + j] - mean) * inv_std * scale[j] + bias[j];
    }
  }
  return y;
}

TEST_P(NumericContract, LayerNormalizationIsTheRoundedF32NormalizationInOnnxOrder) {
  const DType dtype = GetParam();
  const int64_t rows = 4096, n = 96;  // many rows, as for Softmax
  const Tensor x = Tensor::from_doubles(dtype, {rows, n}, random_values(rows * n, 9, 3, 1));
  const Tensor scale = Tensor::from_doubles(dtype, {n}, random_values(n, 10, 0.5, 1));
  const Tensor bias = Tensor::from_doubles(dtype, {n}, random_values(n, 11));
  expect_rounded(run_op("LayerNormalization", "", {x, scale, bias}, TensorType{dtype, {rows, n}}),
                 reference_layer_norm(upcast(x), upcast(scale), upcast(bias), n, 1e-5f),
                 "LayerNormalization axis -1");

  // Normalized over the last two dims (axis 1 of 3), with a non-default epsilon.
  const Tensor x3 = Tensor::from_doubles(dtype, {3, 4, 5}, random_values(60, 12, 5, -2));
  const Tensor scale3 = Tensor::from_doubles(dtype, {4, 5}, random_values(20, 13, 0.5, 1));
  const Tensor bias3 = Tensor::from_doubles(dtype, {4, 5}, random_values(20, 14));
  expect_rounded(run_op("LayerNormalization", "axis=1, epsilon=0.01", {x3, scale3, bias3},
                        TensorType{dtype, {3, 4, 5}}),
                 reference_layer_norm(upcast(x3), upcast(scale3), upcast(bias3), 20, 0.01f),
                 "LayerNormalization axis 1");
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, NumericContract,
                         ::testing::Values(DType::kF16, DType::kBF16),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace ampc
