// MaxPool, AveragePool and GlobalAveragePool on the CPU backend: hand-derived windows on small
// inputs, and a direct N-D pooling written here for the general cases.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using Ints = std::vector<int64_t>;

using testing::for_each_index;
using testing::random_values;

// Runs `op<attrs>(x)` with outputs of the given types and returns them.
std::vector<Tensor> run_pool(const std::string& op, const std::string& attrs, const Tensor& x,
                             const std::vector<TensorType>& outputs, int opset = 17) {
  return testing::run_node(op, attrs, {x}, outputs, opset);
}

Tensor run_one(const std::string& op, const std::string& attrs, const Tensor& x,
               const TensorType& output, int opset = 17) {
  return testing::run_op(op, attrs, {x}, output, opset);
}

// 1, 2, ..., count.
std::vector<double> iota(int64_t count) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<double>(i + 1);
  return values;
}

std::vector<double> doubles(const Tensor& t) { return t.to_double_vector(); }

// A pooling window written from the definition: taps o * stride - pad_begin + k * dilation.
struct PoolCase {
  Ints x;  // [N, C, spatial...]
  Ints kernel, strides, dilations, pads;
  Ints out;  // the expected output spatial dims (derived by hand in each test)
};

// For each output element: the values at taps inside X (scan order), and the number of taps
// inside the padded input.
struct Taps {
  std::vector<std::vector<double>> inside;
  std::vector<std::vector<int64_t>> offsets;  // flat offsets into X of the inside taps
  std::vector<int64_t> in_padded;
};

Taps window_taps(const PoolCase& c, const std::vector<double>& x) {
  const size_t rank = c.kernel.size();
  const Ints in(c.x.begin() + 2, c.x.end());
  Taps taps;
  for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane) {
    for_each_index(c.out, [&](const Ints& o) {
      std::vector<double>& values = taps.inside.emplace_back();
      std::vector<int64_t>& offsets = taps.offsets.emplace_back();
      int64_t& padded = taps.in_padded.emplace_back(0);
      for_each_index(c.kernel, [&](const Ints& k) {
        bool inside = true, within_pads = true;
        int64_t offset = 0;
        for (size_t d = 0; d < rank; ++d) {
          const int64_t i = o[d] * c.strides[d] - c.pads[d] + k[d] * c.dilations[d];
          inside &= i >= 0 && i < in[d];
          within_pads &= i >= -c.pads[d] && i < in[d] + c.pads[rank + d];
          offset = offset * in[d] + i;
        }
        padded += within_pads;
        if (!inside) return;
        values.push_back(x[plane * num_elements(in) + offset]);
        offsets.push_back(plane * num_elements(in) + offset);
      });
    });
  }
  return taps;
}

std::string window_attrs(const PoolCase& c) {
  return str_cat("kernel_shape=[", str_join(c.kernel, ", "), "], strides=[",
                 str_join(c.strides, ", "), "], pads=[", str_join(c.pads, ", "), "]");
}

Ints y_shape(const PoolCase& c) {
  Ints y = {c.x[0], c.x[1]};
  y.insert(y.end(), c.out.begin(), c.out.end());
  return y;
}

// ---- MaxPool --------------------------------------------------------------------------------

TEST(MaxPoolKernel, TwoByTwoStrideTwo) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4, 4}, iota(16));
  const Tensor y =
      run_one("MaxPool", "kernel_shape=[2, 2], strides=[2, 2]", x, {DType::kF32, {1, 1, 2, 2}});
  EXPECT_EQ(doubles(y), (std::vector<double>{6, 8, 14, 16}));
}

// 4x4, kernel 3, stride 2, ceil_mode: out 2x2; the last windows hang over the end (rows 2..4),
// and only their taps inside X count.
TEST(MaxPoolKernel, CeilModeWindowsHangOverTheEnd) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4, 4}, iota(16));
  const Tensor y = run_one("MaxPool", "kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1", x,
                           {DType::kF32, {1, 1, 2, 2}});
  EXPECT_EQ(doubles(y), (std::vector<double>{11, 12, 15, 16}));
}

// 4x4, kernel 2, dilation 2: window (0,0) reads (0,0), (0,2), (2,0), (2,2).
TEST(MaxPoolKernel, Dilations) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4, 4}, iota(16));
  const Tensor y =
      run_one("MaxPool", "kernel_shape=[2, 2], dilations=[2, 2]", x, {DType::kF32, {1, 1, 2, 2}});
  EXPECT_EQ(doubles(y), (std::vector<double>{11, 12, 15, 16}));
}

// Negative values with pads: padding never wins, and Indices point into X (row-major, or
// column-major within each plane with storage_order=1), offset by the plane.
TEST(MaxPoolKernel, PadsNeverWinAndIndicesPointIntoX) {
  const PoolCase c{{2, 2, 5, 4}, {3, 2}, {2, 1}, {1, 1}, {1, 0, 1, 1}, {3, 4}};
  std::vector<double> values = random_values(num_elements(c.x), 1);
  for (double& v : values) v = static_cast<float>(-std::abs(v) - 1);  // exact in f32
  const Tensor x = Tensor::from_doubles(DType::kF32, c.x, values);
  const Taps taps = window_taps(c, values);
  for (int64_t storage_order : {0, 1}) {
    const std::vector<Tensor> y =
        run_pool("MaxPool", str_cat(window_attrs(c), ", storage_order=", storage_order), x,
                 {{DType::kF32, y_shape(c)}, {DType::kI64, y_shape(c)}});
    ASSERT_EQ(y.size(), 2u);
    for (size_t i = 0; i < taps.inside.size(); ++i) {
      const auto best = std::max_element(taps.inside[i].begin(), taps.inside[i].end());
      const int64_t offset = taps.offsets[i][best - taps.inside[i].begin()];
      EXPECT_EQ(y[0].element_as_double(i), *best) << i;
      const int64_t plane = offset / 20, row = offset % 20 / 4, col = offset % 4;
      const int64_t expected = storage_order == 0 ? offset : plane * 20 + row + col * 5;
      EXPECT_EQ(y[1].element_as_i64(i), expected) << i << " storage_order " << storage_order;
    }
  }
}

TEST(MaxPoolKernel, TiesTakeTheFirstTapInScanOrder) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 3, 3}, std::vector<double>(9, 2.0));
  const std::vector<Tensor> y =
      run_pool("MaxPool", "kernel_shape=[2, 2]", x,
               {{DType::kF32, {1, 1, 2, 2}}, {DType::kI64, {1, 1, 2, 2}}});
  EXPECT_EQ(y[1].to_i64_vector(), (Ints{0, 1, 3, 4}));
}

TEST(MaxPoolKernel, NanPropagates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4}, {1, nan, 3, 2});
  const Tensor y = run_one("MaxPool", "kernel_shape=[2]", x, {DType::kF32, {1, 1, 3}});
  EXPECT_TRUE(std::isnan(y.element_as_double(0)));
  EXPECT_TRUE(std::isnan(y.element_as_double(1)));
  EXPECT_EQ(y.element_as_double(2), 3);
}

// Max copies one input element, so low-precision and integer results are exact.
TEST(MaxPoolKernel, ExactInEveryDtype) {
  const PoolCase c{{1, 3, 7}, {3}, {2}, {1}, {1, 1}, {4}};
  const std::vector<double> values = {-3, 7, 0.5, -128, 127, 2,  9,  1, 1, 1,  0,
                                      0,  5, 6,   -1,   -2,  -3, 65, 4, 3, 100};
  const Taps taps = window_taps(c, values);
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF64, DType::kI8}) {
    const Tensor x = Tensor::from_doubles(dtype, c.x, values);
    const Tensor y = run_one("MaxPool", window_attrs(c), x, {dtype, y_shape(c)});
    for (size_t i = 0; i < taps.inside.size(); ++i) {
      const double best = *std::max_element(taps.inside[i].begin(), taps.inside[i].end());
      EXPECT_EQ(y.element_as_double(i),
                Tensor::from_doubles(dtype, {}, {best}).element_as_double(0))
          << dtype_name(dtype) << " " << i;
    }
  }
  const Tensor u8 = Tensor::from_doubles(DType::kU8, {1, 1, 5}, {3, 250, 7, 0, 255});
  EXPECT_EQ(doubles(run_one("MaxPool", "kernel_shape=[2]", u8, {DType::kU8, {1, 1, 4}})),
            (std::vector<double>{250, 250, 7, 255}));
}

TEST(MaxPoolKernel, ThreeDimMatchesDirectPooling) {
  const PoolCase c{{1, 2, 4, 5, 3}, {2, 3, 2}, {2, 1, 1}, {1, 1, 1}, {0, 1, 1, 1, 1, 0}, {2, 5, 3}};
  const std::vector<double> values = random_values(num_elements(c.x), 2);
  const Taps taps = window_taps(c, values);
  const Tensor y =
      run_one("MaxPool", window_attrs(c), Tensor::from_doubles(DType::kF64, c.x, values),
              {DType::kF64, y_shape(c)});
  for (size_t i = 0; i < taps.inside.size(); ++i) {
    EXPECT_EQ(y.element_as_double(i),
              *std::max_element(taps.inside[i].begin(), taps.inside[i].end()));
  }
}

// ---- AveragePool ----------------------------------------------------------------------------

// 3x3 of 1..9, kernel 2, pads 1: corner windows hold one element of X and three pads.
TEST(AveragePoolKernel, CountIncludePadChangesTheDivisor) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 3, 3}, iota(9));
  const std::string attrs = "kernel_shape=[2, 2], pads=[1, 1, 1, 1]";
  const Tensor excluded = run_one("AveragePool", attrs, x, {DType::kF32, {1, 1, 4, 4}});
  const Tensor included = run_one("AveragePool", str_cat(attrs, ", count_include_pad=1"), x,
                                  {DType::kF32, {1, 1, 4, 4}});
  EXPECT_EQ(excluded.element_as_double(0), 1.0);   // 1 / 1
  EXPECT_EQ(included.element_as_double(0), 0.25);  // 1 / 4
  EXPECT_EQ(excluded.element_as_double(1), 1.5);   // (1 + 2) / 2
  EXPECT_EQ(included.element_as_double(1), 0.75);  // (1 + 2) / 4
  EXPECT_EQ(excluded.element_as_double(5), 3.0);   // (1 + 2 + 4 + 5) / 4
  EXPECT_EQ(included.element_as_double(5), 3.0);
  EXPECT_EQ(excluded.element_as_double(15), 9.0);   // 9 / 1
  EXPECT_EQ(included.element_as_double(15), 2.25);  // 9 / 4
}

// ONNX's averagepool_2d_ceil: 4x4 of 1..16, kernel 3, stride 2. Taps of the overhanging windows
// beyond the (absent) end padding are not counted, with or without count_include_pad.
TEST(AveragePoolKernel, CeilModeCountsNoTapsBeyondThePadding) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4, 4}, iota(16));
  for (const char* include : {"0", "1"}) {
    const Tensor y = run_one(
        "AveragePool",
        str_cat("kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1, count_include_pad=", include), x,
        {DType::kF32, {1, 1, 2, 2}});
    EXPECT_EQ(doubles(y), (std::vector<double>{6, 7.5, 12, 13.5})) << include;
  }
}

// ceil_mode with a kernel larger than the input (HF EfficientNet's pooler,
// nn.AvgPool2d(1280, ceil_mode=True) on a 7 x 7 map): one window over the whole plane, its taps
// beyond the input neither read nor counted, so the plane's mean (with or without
// count_include_pad: no pads) and its max.
TEST(AveragePoolKernel, CeilModeKernelLargerThanTheInputPoolsThePlane) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 2, 3, 3}, iota(18));
  for (const char* include : {"0", "1"}) {
    const Tensor y = run_one(
        "AveragePool",
        str_cat("kernel_shape=[8, 8], strides=[8, 8], ceil_mode=1, count_include_pad=", include), x,
        {DType::kF32, {1, 2, 1, 1}});
    EXPECT_EQ(doubles(y), (std::vector<double>{5, 14})) << include;  // means of 1..9, 10..18
  }
  const Tensor y = run_one("MaxPool", "kernel_shape=[8, 8], strides=[8, 8], ceil_mode=1", x,
                           {DType::kF32, {1, 2, 1, 1}});
  EXPECT_EQ(doubles(y), (std::vector<double>{9, 18}));
}

// in 6, kernel 3, stride 2: out 3 with one pad, at the end (UPPER) or the beginning (LOWER).
TEST(AveragePoolKernel, AutoPadPlacesTheOddPad) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 6}, iota(6));
  const Tensor upper =
      run_one("AveragePool", "kernel_shape=[3], strides=[2], auto_pad=\"SAME_UPPER\"", x,
              {DType::kF32, {1, 1, 3}});
  EXPECT_EQ(doubles(upper), (std::vector<double>{2, 4, 5.5}));  // [1,2,3] [3,4,5] [5,6,pad]
  const Tensor lower =
      run_one("AveragePool", "kernel_shape=[3], strides=[2], auto_pad=\"SAME_LOWER\"", x,
              {DType::kF32, {1, 1, 3}});
  EXPECT_EQ(doubles(lower), (std::vector<double>{1.5, 3, 5}));  // [pad,1,2] [2,3,4] [4,5,6]
}

// AveragePool-19 adds dilations: 4x4, kernel 2, dilation 2 averages (0,0), (0,2), (2,0), (2,2).
TEST(AveragePoolKernel, DilationsFromOpset19) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {1, 1, 4, 4}, iota(16));
  const Tensor y = run_one("AveragePool", "kernel_shape=[2, 2], dilations=[2, 2]", x,
                           {DType::kF32, {1, 1, 2, 2}}, /*opset=*/19);
  EXPECT_EQ(doubles(y), (std::vector<double>{6, 7, 10, 11}));  // (1 + 3 + 9 + 11) / 4, ...
}

// f16/bf16: the taps are summed in f32 in scan order, divided once and rounded once.
TEST(AveragePoolKernel, LowPrecisionSumsInF32AndRoundsOnce) {
  const PoolCase c{{1, 2, 5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, {3, 3}};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor x = Tensor::from_doubles(dtype, c.x, random_values(num_elements(c.x), 3));
    const Taps taps = window_taps(c, doubles(x));
    for (int include : {0, 1}) {
      const Tensor y =
          run_one("AveragePool", str_cat(window_attrs(c), ", count_include_pad=", include), x,
                  {dtype, y_shape(c)});
      for (size_t i = 0; i < taps.inside.size(); ++i) {
        float sum = 0.0f;
        for (double v : taps.inside[i]) sum += static_cast<float>(v);
        const float count = static_cast<float>(include ? taps.in_padded[i] : taps.inside[i].size());
        const float mean = sum / count;
        const uint16_t expected = dtype == DType::kF16 ? Float16(mean).bits : BFloat16(mean).bits;
        EXPECT_EQ(y.data<uint16_t>()[i], expected) << dtype_name(dtype) << " " << i;
      }
    }
  }
}

TEST(AveragePoolKernel, ThreeDimMatchesDirectPooling) {
  const PoolCase c{{2, 1, 5, 4, 4}, {2, 2, 3}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1, 0, 1, 1}, {3, 4, 2}};
  const std::vector<double> values = random_values(num_elements(c.x), 4);
  const Taps taps = window_taps(c, values);
  const Tensor y =
      run_one("AveragePool", str_cat(window_attrs(c), ", count_include_pad=1"),
              Tensor::from_doubles(DType::kF64, c.x, values), {DType::kF64, y_shape(c)});
  for (size_t i = 0; i < taps.inside.size(); ++i) {
    double sum = 0;
    for (double v : taps.inside[i]) sum += v;
    EXPECT_NEAR(y.element_as_double(i), sum / static_cast<double>(taps.in_padded[i]), 1e-15) << i;
  }
}

// ---- GlobalAveragePool ----------------------------------------------------------------------

TEST(GlobalAveragePoolKernel, AveragesEachPlane) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {2, 3, 2, 2}, iota(24));
  const Tensor y = run_one("GlobalAveragePool", "", x, {DType::kF32, {2, 3, 1, 1}});
  EXPECT_EQ(doubles(y), (std::vector<double>{2.5, 6.5, 10.5, 14.5, 18.5, 22.5}));
  const Tensor x3 = Tensor::from_doubles(DType::kF64, {1, 2, 2, 1, 3}, iota(12));
  const Tensor y3 = run_one("GlobalAveragePool", "", x3, {DType::kF64, {1, 2, 1, 1, 1}});
  EXPECT_EQ(doubles(y3), (std::vector<double>{3.5, 9.5}));
}

TEST(GlobalAveragePoolKernel, LowPrecisionSumsInF32InOrderAndRoundsOnce) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor x = Tensor::from_doubles(dtype, {2, 3, 37}, random_values(2 * 3 * 37, 5));
    const Tensor y = run_one("GlobalAveragePool", "", x, {dtype, {2, 3, 1}});
    for (int64_t plane = 0; plane < 6; ++plane) {
      float sum = 0.0f;
      for (int64_t i = 0; i < 37; ++i)
        sum += static_cast<float>(x.element_as_double(plane * 37 + i));
      const float mean = sum / 37.0f;
      EXPECT_EQ(y.data<uint16_t>()[plane],
                dtype == DType::kF16 ? Float16(mean).bits : BFloat16(mean).bits);
    }
  }
}

}  // namespace
}  // namespace ampc
