// The Conv and pooling gradient kernels (ampc.ConvGradData, ConvGradFilter, MaxPoolGrad,
// AveragePoolGrad) on the CPU backend against direct scatters in f64 written here from the
// definitions (N-D, groups, strides, dilations, explicit begin/end pads, ceil_mode windows).
// Exact values (small integers times powers of two) make every sum exact in f32, so f32 and f64
// results are exact and f16/bf16 ones the exact value rounded once; hand-derived cases pin the
// tie rule of MaxPoolGrad and the divisor rule of AveragePoolGrad; adjointness against the
// forward kernels covers random inputs.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/conv_test_util.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::ConvCase;
using testing::direct_grad_data;
using testing::direct_grad_filter;
using testing::exact_values;
using testing::for_each_index;
using testing::grad_data;
using testing::grad_filter;
using testing::Ints;
using testing::on_cpu_threads;
using testing::random_values;
using testing::run_ampc;

constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

// ---- Convolution ----------------------------------------------------------------------------

// The exact result, rounded once to `dtype`.
std::vector<double> rounded(DType dtype, const Shape& shape, const std::vector<double>& exact) {
  return Tensor::from_doubles(dtype, shape, exact).to_double_vector();
}

const ConvCase kConvCases[] = {
    // 2-D, stride 2, asymmetric pads, dilation, batch 2.
    {{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 2}, {2, 1}, {1, 0, 2, 1}, 1},
    // Two groups.
    {{1, 4, 5, 5}, {6, 2, 3, 3}, {1, 2}, {1, 1}, {1, 1, 1, 1}, 2},
    // Depthwise with a channel multiplier of 2.
    {{2, 3, 4, 5}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3},
    // 1-D strided and dilated.
    {{2, 3, 11}, {2, 3, 3}, {2}, {2}, {0, 1}, 1},
    // 3-D strided, padded.
    {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {2, 1, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}, 1},
    // Pointwise.
    {{2, 4, 3, 3}, {5, 4, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1},
    // Stride larger than the kernel: some inputs get no gradient.
    {{1, 2, 7}, {2, 2, 2}, {3}, {1}, {0, 0}, 1},
};

TEST(ConvGradDataKernel, MatchesDirectScatterInEveryDType) {
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " W ", shape_to_string(c.w), " ", c.attrs()));
    const std::vector<double> dy = exact_values(num_elements(c.y()), 1);
    const std::vector<double> w = exact_values(num_elements(c.w), 2);
    const std::vector<double> expected = direct_grad_data(c, dy, w);
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      const Tensor dx = grad_data(c, dtype, dy, w);
      EXPECT_EQ(dx.to_double_vector(), rounded(dtype, c.x, expected));
    }
  }
}

TEST(ConvGradFilterKernel, MatchesDirectSumInEveryDType) {
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " W ", shape_to_string(c.w), " ", c.attrs()));
    const std::vector<double> x = exact_values(num_elements(c.x), 3);
    const std::vector<double> dy = exact_values(num_elements(c.y()), 4);
    const std::vector<double> expected = direct_grad_filter(c, x, dy);
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      const Tensor dw = grad_filter(c, dtype, x, dy);
      EXPECT_EQ(dw.to_double_vector(), rounded(dtype, c.w, expected));
    }
  }
}

// A 1-D hand case: X [1, 1, 4], W [1, 1, 2] = [a, b], stride 2, pads [1, 1]: windows read
// (pad, x0), (x1, x2), (x3, pad), so dX = [b dy0, a dy1, b dy1, a dy2] and
// dW = [x1 dy1 + x3 dy2, x0 dy0 + x2 dy1].
TEST(ConvGradKernels, HandDerivedStridedPaddedCase) {
  const ConvCase c{{1, 1, 4}, {1, 1, 2}, {2}, {1}, {1, 1}, 1};
  ASSERT_EQ(c.y(), (Shape{1, 1, 3}));
  const std::vector<double> x = {1, 2, 3, 4}, w = {10, 100}, dy = {1, 2, 3};
  EXPECT_EQ(grad_data(c, DType::kF32, dy, w).to_double_vector(),
            (std::vector<double>{100, 20, 200, 30}));
  EXPECT_EQ(grad_filter(c, DType::kF32, x, dy).to_double_vector(),
            (std::vector<double>{2 * 2 + 4 * 3, 1 * 1 + 3 * 2}));
}

// <conv(x, w), dy> = <x, ConvGradData(dy, w)> = <w, ConvGradFilter(x, dy)> on random f64 values.
TEST(ConvGradKernels, AdjointToTheForwardConv) {
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " W ", shape_to_string(c.w), " ", c.attrs()));
    const std::vector<double> x = random_values(num_elements(c.x), 5);
    const std::vector<double> w = random_values(num_elements(c.w), 6);
    const std::vector<double> dy = random_values(num_elements(c.y()), 7);
    const Tensor y = testing::run_op(
        "Conv", c.attrs(),
        {Tensor::from_doubles(DType::kF64, c.x, x), Tensor::from_doubles(DType::kF64, c.w, w)},
        {DType::kF64, c.y()});
    auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
      double sum = 0;
      for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
      return sum;
    };
    const double forward = dot(y.to_double_vector(), dy);
    EXPECT_NEAR(dot(x, grad_data(c, DType::kF64, dy, w).to_double_vector()), forward, 1e-9);
    EXPECT_NEAR(dot(w, grad_filter(c, DType::kF64, x, dy).to_double_vector()), forward, 1e-9);
  }
}

// The im2col kernels' sums do not depend on the thread count (oneDNN's, which f32 nodes use by
// default, repeat their bits for one count: onednn_conv_test).
TEST(ConvGradKernels, Im2colBitsDoNotDependOnThreadCount) {
  const testing::ScopedEnv im2col("AMPC_CPU_CONV", "im2col");
  const ConvCase c{{2, 32, 24, 24}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 2};
  const std::vector<double> x = random_values(num_elements(c.x), 8);
  const std::vector<double> w = random_values(num_elements(c.w), 9);
  const std::vector<double> dy = random_values(num_elements(c.y()), 10);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor dx1 = on_cpu_threads(1, [&] { return grad_data(c, dtype, dy, w); });
    const Tensor dx4 = on_cpu_threads(4, [&] { return grad_data(c, dtype, dy, w); });
    EXPECT_TRUE(testing::same_tensor(dx4, dx1));
    const Tensor dw1 = on_cpu_threads(1, [&] { return grad_filter(c, dtype, x, dy); });
    const Tensor dw4 = on_cpu_threads(4, [&] { return grad_filter(c, dtype, x, dy); });
    EXPECT_TRUE(testing::same_tensor(dw4, dw1));
  }
}

// ---- Pooling --------------------------------------------------------------------------------

struct PoolCase {
  Shape x;  // [N, C, spatial...]
  Ints kernel, strides, dilations, pads;
  bool ceil_mode = false;

  size_t rank() const { return kernel.size(); }
  Ints in() const { return Ints(x.begin() + 2, x.end()); }
  // The forward op's output size rule (ops/conv.cc), ceil_mode included.
  Shape y() const {
    Shape y = {x[0], x[1]};
    for (size_t i = 0; i < rank(); ++i) {
      const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
      const int64_t span = x[2 + i] + pads[i] + pads[rank() + i] - extent;
      int64_t out = (ceil_mode ? (span + strides[i] - 1) / strides[i] : span / strides[i]) + 1;
      if (ceil_mode && (out - 1) * strides[i] >= x[2 + i] + pads[i]) --out;
      y.push_back(out);
    }
    return y;
  }
  std::string attrs() const {
    return str_cat("kernel_shape=[", str_join(kernel, ", "), "], strides=[",
                   str_join(strides, ", "), "], dilations=[", str_join(dilations, ", "),
                   "], pads=[", str_join(pads, ", "), "], ceil_mode=", ceil_mode ? 1 : 0);
  }
};

// Calls window(y_offset, taps, in_padded) per output element: the flat X offsets of the taps
// inside X in scan order, and the number of taps inside the padded input.
template <typename Window>
void for_each_window(const PoolCase& c, Window&& window) {
  const Shape y_shape = c.y();
  const Ints in = c.in(), out(y_shape.begin() + 2, y_shape.end());
  int64_t y_offset = 0;
  for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane) {
    for_each_index(out, [&](const Ints& o) {
      std::vector<int64_t> taps;
      int64_t in_padded = 0;
      for_each_index(c.kernel, [&](const Ints& k) {
        bool inside = true, within_pads = true;
        Ints i(c.rank());
        for (size_t d = 0; d < c.rank(); ++d) {
          i[d] = o[d] * c.strides[d] - c.pads[d] + k[d] * c.dilations[d];
          inside &= i[d] >= 0 && i[d] < in[d];
          within_pads &= i[d] >= -c.pads[d] && i[d] < in[d] + c.pads[c.rank() + d];
        }
        in_padded += within_pads;
        if (inside) taps.push_back(plane * num_elements(in) + testing::flat(in, i));
      });
      window(y_offset++, taps, in_padded);
    });
  }
}

Tensor max_pool_grad(const PoolCase& c, DType dtype, const std::vector<double>& dy,
                     const std::vector<double>& x) {
  return run_ampc("MaxPoolGrad", c.attrs(),
                  {Tensor::from_doubles(dtype, c.y(), dy), Tensor::from_doubles(dtype, c.x, x)},
                  {dtype, c.x});
}

Tensor average_pool_grad(const PoolCase& c, DType dtype, const std::vector<double>& dy,
                         bool count_include_pad) {
  return run_ampc("AveragePoolGrad",
                  str_cat(c.attrs(), ", count_include_pad=", count_include_pad ? 1 : 0,
                          ", input_shape=[", str_join(c.x, ", "), "]"),
                  {Tensor::from_doubles(dtype, c.y(), dy)}, {dtype, c.x});
}

const PoolCase kPoolCases[] = {
    // 2-D overlapping windows, ceil_mode: the last windows hang over the end.
    {{2, 2, 5, 5}, {3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}, true},
    // 2-D asymmetric pads, dilation.
    {{1, 3, 6, 5}, {2, 3}, {1, 2}, {2, 1}, {1, 0, 0, 2}, false},
    // 1-D strided, padded, ceil_mode.
    {{2, 2, 8}, {3}, {2}, {1}, {1, 1}, true},
    // 3-D.
    {{1, 2, 4, 3, 4}, {2, 2, 2}, {2, 1, 2}, {1, 1, 1}, {1, 0, 0, 0, 1, 1}, false},
    // ceil_mode with a kernel larger than the (padded) input: one window, hanging over the end
    // (PyTorch's nn.AvgPool2d(8, ceil_mode=True) on 7 x 7; a padded 1-D one).
    {{1, 2, 7, 7}, {8, 8}, {8, 8}, {1, 1}, {0, 0, 0, 0}, true},
    {{2, 1, 3}, {6}, {4}, {1}, {1, 1}, true},
};

// Few distinct values, so windows hold ties: the gradient goes to the first maximum in scan
// order, as the forward kernel picks it.
TEST(MaxPoolGradKernel, RoutesToTheFirstMaximumInEveryDType) {
  for (const PoolCase& c : kPoolCases) {
    SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " ", c.attrs()));
    std::vector<double> x = exact_values(num_elements(c.x), 11, /*max_mantissa=*/2,
                                         /*max_exponent=*/0);
    const std::vector<double> dy = exact_values(num_elements(c.y()), 12);
    std::vector<double> expected(num_elements(c.x), 0.0);
    for_each_window(c, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t) {
      int64_t best = -1;
      for (int64_t t : taps) {
        if (best < 0 || x[t] > x[best]) best = t;
      }
      if (best >= 0) expected[best] += dy[yi];
    });
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(dtype_name(dtype));
      EXPECT_EQ(max_pool_grad(c, dtype, dy, x).to_double_vector(), rounded(dtype, c.x, expected));
    }
  }
}

// X [1, 1, 4] = [5, 5, 1, 5], kernel 2, stride 1: windows (5, 5), (5, 1), (1, 5); the tie in the
// first window goes to x0.
TEST(MaxPoolGradKernel, TieGoesToTheFirstTap) {
  const PoolCase c{{1, 1, 4}, {2}, {1}, {1}, {0, 0}, false};
  EXPECT_EQ(max_pool_grad(c, DType::kF32, {1, 10, 100}, {5, 5, 1, 5}).to_double_vector(),
            (std::vector<double>{1, 10, 0, 100}));
}

// 1-D X [1, 1, 4], kernel 3, stride 2, pads [1, 1], ceil_mode: windows start at -1, 1, 3. The
// last reads x3, the pad at 4 and position 5 beyond the end padding. With count_include_pad the
// counts are 3, 3, 2 (position 5 never counts); without, 2, 3, 1.
TEST(AveragePoolGradKernel, DivisorRuleMatchesTheForwardKernel) {
  const PoolCase c{{1, 1, 4}, {3}, {2}, {1}, {1, 1}, true};
  ASSERT_EQ(c.y(), (Shape{1, 1, 3}));
  const std::vector<double> dy = {3, 6, 4};
  EXPECT_EQ(average_pool_grad(c, DType::kF32, dy, true).to_double_vector(),
            (std::vector<double>{1, 3, 2, 4}));
  EXPECT_EQ(average_pool_grad(c, DType::kF32, dy, false).to_double_vector(),
            (std::vector<double>{1.5, 3.5, 2, 6}));
}

TEST(AveragePoolGradKernel, MatchesDirectScatterInEveryDType) {
  for (const PoolCase& c : kPoolCases) {
    for (bool count_pad : {false, true}) {
      SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " ", c.attrs(), " count_pad ", count_pad));
      const std::vector<double> dy = random_values(num_elements(c.y()), 13);
      // f64 and f32 compute in their own type; f16/bf16 in f32, rounded once: one rounding
      // (plus the f32 sums of a few terms) from the exact result.
      const double tolerances[] = {1e-6, 1e-14, 1e-3, 8e-3};
      for (size_t t = 0; t < 4; ++t) {
        SCOPED_TRACE(dtype_name(kFloatDTypes[t]));
        const Tensor dy_rounded = Tensor::from_doubles(kFloatDTypes[t], c.y(), dy);
        std::vector<double> exact(num_elements(c.x), 0.0);
        for_each_window(c, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t in_padded) {
          const int64_t count = count_pad ? in_padded : static_cast<int64_t>(taps.size());
          for (int64_t i : taps) exact[i] += dy_rounded.element_as_double(yi) / count;
        });
        testing::expect_near_all(average_pool_grad(c, kFloatDTypes[t], dy, count_pad), exact,
                                 tolerances[t]);
      }
    }
  }
}

// <AveragePool(x), dy> = <x, AveragePoolGrad(dy)> with the forward kernel, in f64.
TEST(AveragePoolGradKernel, AdjointToTheForwardKernel) {
  for (const PoolCase& c : kPoolCases) {
    for (bool count_pad : {false, true}) {
      SCOPED_TRACE(str_cat("X ", shape_to_string(c.x), " ", c.attrs(), " count_pad ", count_pad));
      const std::vector<double> x = random_values(num_elements(c.x), 14);
      const std::vector<double> dy = random_values(num_elements(c.y()), 15);
      const Tensor y = testing::run_op(
          "AveragePool", str_cat(c.attrs(), ", count_include_pad=", count_pad ? 1 : 0),
          {Tensor::from_doubles(DType::kF64, c.x, x)}, {DType::kF64, c.y()}, 19);
      const std::vector<double> dx =
          average_pool_grad(c, DType::kF64, dy, count_pad).to_double_vector();
      double forward = 0, backward = 0;
      for (size_t i = 0; i < dy.size(); ++i) forward += y.element_as_double(i) * dy[i];
      for (size_t i = 0; i < x.size(); ++i) backward += x[i] * dx[i];
      EXPECT_NEAR(backward, forward, 1e-9);
    }
  }
}

TEST(PoolGradKernels, BitsDoNotDependOnThreadCount) {
  const PoolCase c{{4, 16, 20, 20}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, true};
  const std::vector<double> x = random_values(num_elements(c.x), 16);
  const std::vector<double> dy = random_values(num_elements(c.y()), 17);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    const Tensor max1 = on_cpu_threads(1, [&] { return max_pool_grad(c, dtype, dy, x); });
    const Tensor max4 = on_cpu_threads(4, [&] { return max_pool_grad(c, dtype, dy, x); });
    EXPECT_TRUE(testing::same_tensor(max4, max1));
    const Tensor avg1 = on_cpu_threads(1, [&] { return average_pool_grad(c, dtype, dy, true); });
    const Tensor avg4 = on_cpu_threads(4, [&] { return average_pool_grad(c, dtype, dy, true); });
    EXPECT_TRUE(testing::same_tensor(avg4, avg1));
  }
}

}  // namespace
}  // namespace ampc
