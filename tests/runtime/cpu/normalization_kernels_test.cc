// LayerNormalization and BatchNormalization on the CPU backend against hand-derived values,
// naive f64 computations written here and, for f16/bf16 data, bit for bit against "upcast to f32,
// compute the documented formulas in f32 in the documented order, round once".
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::as_floats;
using testing::expect_near_all;
using testing::on_cpu_threads;
using testing::random_values;
using testing::rounded;
using testing::run_node;

// ---- LayerNormalization --------------------------------------------------------------------

// Runs LayerNormalization<attrs>(x, scale[, bias]) with all three outputs.
std::vector<Tensor> layer_norm(const std::string& attrs, const std::vector<Tensor>& inputs,
                               const Shape& stats_shape, DType stash = DType::kF32) {
  const TensorType stats{stash, stats_shape};
  return run_node("LayerNormalization", attrs, inputs, {inputs[0].type(), stats, stats});
}

// Naive f64 layer norm of [rows, n] rows; scale and bias have n elements (bias may be empty).
struct NaiveLayerNorm {
  std::vector<double> y, mean, inv_std;
};
NaiveLayerNorm naive_layer_norm(const std::vector<double>& x, int64_t n,
                                const std::vector<double>& scale, const std::vector<double>& bias,
                                double epsilon) {
  NaiveLayerNorm r;
  for (size_t first = 0; first < x.size(); first += n) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[first + j] / n;
    for (int64_t j = 0; j < n; ++j) var += (x[first + j] - mean) * (x[first + j] - mean) / n;
    r.mean.push_back(mean);
    r.inv_std.push_back(1 / std::sqrt(var + epsilon));
    for (int64_t j = 0; j < n; ++j) {
      r.y.push_back((x[first + j] - mean) / std::sqrt(var + epsilon) * scale[j] +
                    (bias.empty() ? 0 : bias[j]));
    }
  }
  return r;
}

TEST(LayerNormKernel, HandDerivedValues) {
  // [1, 2, 3, 4]: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25.
  const std::vector<Tensor> out =
      layer_norm("epsilon=0.0",
                 {Tensor::from_doubles(DType::kF64, {1, 4}, {1, 2, 3, 4}),
                  Tensor::from_doubles(DType::kF64, {4}, {2, 2, 2, 2}),
                  Tensor::from_doubles(DType::kF64, {4}, {1, 1, 1, 1})},
                 {1, 1});
  ASSERT_EQ(out.size(), 3u);
  const double s = std::sqrt(1.25);
  expect_near_all(out[0], {2 * -1.5 / s + 1, 2 * -0.5 / s + 1, 2 * 0.5 / s + 1, 2 * 1.5 / s + 1},
                  1e-15);
  EXPECT_EQ(out[1].element_as_double(0), 2.5);  // stash type f32
  EXPECT_EQ(out[2].element_as_double(0), static_cast<float>(1 / s));
}

TEST(LayerNormKernel, AxisMinus2WithBiasMatchesNaiveF64) {
  const std::vector<double> x = random_values(4 * 3 * 5, 1, 2, 0.5);
  const std::vector<double> scale = random_values(15, 2), bias = random_values(15, 3);
  for (DType dtype : {DType::kF64, DType::kF32}) {
    const std::vector<Tensor> out = layer_norm(
        "axis=-2",
        {Tensor::from_doubles(dtype, {4, 3, 5}, x), Tensor::from_doubles(dtype, {3, 5}, scale),
         Tensor::from_doubles(dtype, {3, 5}, bias)},
        {4, 1, 1});
    ASSERT_EQ(out.size(), 3u);
    const NaiveLayerNorm expected = naive_layer_norm(x, 15, scale, bias, 1e-5f);
    const double tolerance = dtype == DType::kF64 ? 1e-13 : 1e-5;
    expect_near_all(out[0], expected.y, tolerance);
    expect_near_all(out[1], expected.mean, 1e-6);  // f32 stash
    expect_near_all(out[2], expected.inv_std, 1e-6);
  }
}

TEST(LayerNormKernel, WithoutBiasAndBroadcastScale) {
  // axis=1 of [2,3,4] normalizes 12 elements; a [4] scale repeats over the 3 rows of each.
  const std::vector<double> x = random_values(24, 4), scale4 = random_values(4, 5);
  std::vector<double> scale;
  for (int r = 0; r < 3; ++r) scale.insert(scale.end(), scale4.begin(), scale4.end());
  const std::vector<Tensor> out = layer_norm("axis=1, epsilon=0.1",
                                             {Tensor::from_doubles(DType::kF64, {2, 3, 4}, x),
                                              Tensor::from_doubles(DType::kF64, {1, 4}, scale4)},
                                             {2, 1, 1});
  ASSERT_EQ(out.size(), 3u);
  expect_near_all(out[0], naive_layer_norm(x, 12, scale, {}, 0.1f).y, 1e-13);
}

// "Upcast to f32; mean, variance, 1 / sqrt(var + eps) and ((x - mean) * inv_std) * scale + bias
// in f32 in the documented order": the f32 results, before rounding.
NaiveLayerNorm f32_layer_norm(const std::vector<float>& x, int64_t n,
                              const std::vector<float>& scale, const std::vector<float>& bias,
                              float epsilon) {
  NaiveLayerNorm r;
  for (size_t first = 0; first < x.size(); first += n) {
    float sum = 0, square_sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[first + j];
    const float mean = sum / static_cast<float>(n);
    for (int64_t j = 0; j < n; ++j) square_sum += (x[first + j] - mean) * (x[first + j] - mean);
    const float inv_std = 1.0f / std::sqrt(square_sum / static_cast<float>(n) + epsilon);
    r.mean.push_back(mean);
    r.inv_std.push_back(inv_std);
    for (int64_t j = 0; j < n; ++j) {
      r.y.push_back(static_cast<float>((x[first + j] - mean) * inv_std * scale[j] + bias[j]));
    }
  }
  return r;
}

TEST(LayerNormKernel, LowPrecisionEqualsF32RoundedOnce) {
  const std::vector<double> x = random_values(6 * 40, 6, 3, 1), scale = random_values(40, 7),
                            bias = random_values(40, 8);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor xt = Tensor::from_doubles(dtype, {6, 40}, x);
    const Tensor st = Tensor::from_doubles(dtype, {40}, scale);
    const Tensor bt = Tensor::from_doubles(dtype, {40}, bias);
    const std::vector<Tensor> out = layer_norm("", {xt, st, bt}, {6, 1});
    ASSERT_EQ(out.size(), 3u);
    const NaiveLayerNorm f32 =
        f32_layer_norm(as_floats(xt), 40, as_floats(st), as_floats(bt), 1e-5f);
    auto floats = [](const std::vector<double>& v) {
      return std::vector<float>(v.begin(), v.end());
    };
    EXPECT_EQ(out[0], rounded(dtype, {6, 40}, floats(f32.y))) << dtype_name(dtype);
    EXPECT_EQ(out[1], rounded(DType::kF32, {6, 1}, floats(f32.mean))) << dtype_name(dtype);
    EXPECT_EQ(out[2], rounded(DType::kF32, {6, 1}, floats(f32.inv_std))) << dtype_name(dtype);
  }
}

TEST(LayerNormKernel, Bf16StashRoundsStatisticsOnly) {
  const std::vector<double> x = random_values(3 * 8, 9);
  const Tensor xt = Tensor::from_doubles(DType::kF32, {3, 8}, x);
  const Tensor st = Tensor::from_doubles(DType::kF32, {8}, std::vector<double>(8, 1));
  const Tensor bt = Tensor::from_doubles(DType::kF32, {8}, std::vector<double>(8, 0));
  const std::vector<Tensor> f32_stash = layer_norm("", {xt, st, bt}, {3, 1});
  const std::vector<Tensor> bf16_stash =
      layer_norm("stash_type=bf16", {xt, st, bt}, {3, 1}, DType::kBF16);
  ASSERT_EQ(bf16_stash.size(), 3u);
  EXPECT_EQ(bf16_stash[0], f32_stash[0]);
  EXPECT_EQ(bf16_stash[1], rounded(DType::kBF16, {3, 1}, as_floats(f32_stash[1])));
  EXPECT_EQ(bf16_stash[2], rounded(DType::kBF16, {3, 1}, as_floats(f32_stash[2])));
}

// ---- BatchNormalization --------------------------------------------------------------------

// Runs BatchNormalization<attrs>(x, scale, bias, mean, var); training mode returns the running
// statistics too.
std::vector<Tensor> batch_norm(const std::string& attrs, const std::vector<Tensor>& inputs,
                               bool training, int opset = 17) {
  const TensorType& stats = inputs[3].type();
  std::vector<TensorType> outputs = {inputs[0].type()};
  if (training) outputs.insert(outputs.end(), {stats, stats});
  return run_node("BatchNormalization", attrs, inputs, outputs, opset);
}

TEST(BatchNormKernel, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  // X [2, 2]: channel 0 holds 1, 3 (mean 2, biased variance 1), channel 1 holds 2, 6 (mean 4,
  // biased variance 4).
  const std::vector<Tensor> out =
      batch_norm("training_mode=1, epsilon=0.0, momentum=0.75",
                 {Tensor::from_doubles(DType::kF64, {2, 2}, {1, 2, 3, 6}),
                  Tensor::from_doubles(DType::kF64, {2}, {10, 100}),
                  Tensor::from_doubles(DType::kF64, {2}, {0.5, -1}),
                  Tensor::from_doubles(DType::kF64, {2}, {1, 8}),
                  Tensor::from_doubles(DType::kF64, {2}, {2, 0})},
                 true);
  ASSERT_EQ(out.size(), 3u);
  // (1 - 2) / 1 * 10 + 0.5, (2 - 4) / 2 * 100 - 1, (3 - 2) / 1 * 10 + 0.5, (6 - 4) / 2 * 100 - 1
  EXPECT_EQ(out[0].to_double_vector(), (std::vector<double>{-9.5, -101, 10.5, 99}));
  // running = input * momentum + batch * (1 - momentum), with the population variance
  EXPECT_EQ(out[1].to_double_vector(),
            (std::vector<double>{1 * 0.75 + 2 * 0.25, 8 * 0.75 + 4 * 0.25}));
  EXPECT_EQ(out[2].to_double_vector(),
            (std::vector<double>{2 * 0.75 + 1 * 0.25, 0 * 0.75 + 4 * 0.25}));
}

// Naive f64 batch norm of [N, C, S]: the batch statistics (training) or the given ones.
struct NaiveBatchNorm {
  std::vector<double> y, running_mean, running_var;
};
NaiveBatchNorm naive_batch_norm(const std::vector<double>& x, int64_t N, int64_t C, int64_t S,
                                const std::vector<double>& scale, const std::vector<double>& bias,
                                const std::vector<double>& mean_in,
                                const std::vector<double>& var_in, bool training, double epsilon,
                                double momentum) {
  std::vector<double> mean = mean_in, var = var_in;
  NaiveBatchNorm r;
  for (int64_t c = 0; c < C && training; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) m += x[(n * C + c) * S + s] / (N * S);
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t s = 0; s < S; ++s) v += std::pow(x[(n * C + c) * S + s] - m, 2) / (N * S);
    }
    mean[c] = m;
    var[c] = v;
    r.running_mean.push_back(mean_in[c] * momentum + m * (1 - momentum));
    r.running_var.push_back(var_in[c] * momentum + v * (1 - momentum));
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t c = (i / S) % C;
    r.y.push_back((x[i] - mean[c]) / std::sqrt(var[c] + epsilon) * scale[c] + bias[c]);
  }
  return r;
}

TEST(BatchNormKernel, FourDimensionalMatchesNaiveF64) {
  const int64_t N = 3, C = 4, S = 2 * 5;
  const std::vector<double> x = random_values(N * C * S, 10, 2, 1);
  const std::vector<double> scale = random_values(C, 11), bias = random_values(C, 12),
                            mean = random_values(C, 13), var = random_values(C, 14, 0.1, 1);
  auto inputs = [&](DType dtype) {
    return std::vector<Tensor>{
        Tensor::from_doubles(dtype, {N, C, 2, 5}, x), Tensor::from_doubles(dtype, {C}, scale),
        Tensor::from_doubles(dtype, {C}, bias), Tensor::from_doubles(dtype, {C}, mean),
        Tensor::from_doubles(dtype, {C}, var)};
  };
  for (DType dtype : {DType::kF64, DType::kF32}) {
    const double tolerance = dtype == DType::kF64 ? 1e-13 : 1e-5;
    const double momentum = 0.9f;  // the attribute is an f32
    const NaiveBatchNorm train =
        naive_batch_norm(x, N, C, S, scale, bias, mean, var, true, 1e-5f, momentum);
    const std::vector<Tensor> out = batch_norm("training_mode=1", inputs(dtype), true);
    ASSERT_EQ(out.size(), 3u);
    expect_near_all(out[0], train.y, tolerance);
    expect_near_all(out[1], train.running_mean, tolerance);
    expect_near_all(out[2], train.running_var, tolerance);

    const NaiveBatchNorm infer =
        naive_batch_norm(x, N, C, S, scale, bias, mean, var, false, 1e-5f, momentum);
    expect_near_all(batch_norm("", inputs(dtype), false)[0], infer.y, tolerance);
    // Opsets 9-13 define the same inference.
    expect_near_all(batch_norm("", inputs(dtype), false, 12)[0], infer.y, tolerance);
  }
}

TEST(BatchNormKernel, LowPrecisionDataWithF32StatisticsEqualsF32RoundedOnce) {
  const int64_t N = 4, C = 3, S = 7;
  const std::vector<double> x = random_values(N * C * S, 15, 3, 2);
  const std::vector<float> scale = {1.5f, -0.25f, 2}, bias = {0.125f, 1, -3},
                           mean_in = {0.5f, 0, 1}, var_in = {1, 2, 0.5f};
  auto f32 = [](const std::vector<float>& v) {
    return Tensor::from_doubles(DType::kF32, {static_cast<int64_t>(v.size())},
                                std::vector<double>(v.begin(), v.end()));
  };
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor xt = Tensor::from_doubles(dtype, {N, C, S}, x);
    const std::vector<Tensor> out =
        batch_norm("training_mode=1", {xt, f32(scale), f32(bias), f32(mean_in), f32(var_in)}, true);
    ASSERT_EQ(out.size(), 3u);
    // The f32 computation in the documented order (batch_statistics.h): element s of each row
    // into partial sum s mod 16, row after row, then the partial sums added 8 apart, 4, 2, 1.
    const std::vector<float> xf = as_floats(xt);
    const float epsilon = 1e-5f, momentum = 0.9f;
    auto channel_sum = [&](int64_t c, const std::function<float(float)>& f) {
      std::array<float, 16> partial{};
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t s = 0; s < S; ++s) partial[s % 16] += f(xf[(n * C + c) * S + s]);
      }
      for (int width = 8; width > 0; width /= 2) {
        for (int j = 0; j < width; ++j) partial[j] += partial[j + width];
      }
      return partial[0];
    };
    std::vector<float> y(xf.size()), running_mean, running_var;
    for (int64_t c = 0; c < C; ++c) {
      const float mean = channel_sum(c, [](float v) { return v; }) / static_cast<float>(N * S);
      const float var = channel_sum(c, [&](float v) { return (v - mean) * (v - mean); }) /
                        static_cast<float>(N * S);
      const float std_dev = std::sqrt(var + epsilon);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          y[i] = (xf[i] - mean) / std_dev * scale[c] + bias[c];
        }
      }
      running_mean.push_back(mean_in[c] * momentum + mean * (1.0f - momentum));
      running_var.push_back(var_in[c] * momentum + var * (1.0f - momentum));
    }
    EXPECT_EQ(out[0], rounded(dtype, {N, C, S}, y)) << dtype_name(dtype);
    EXPECT_EQ(out[1], f32(running_mean)) << dtype_name(dtype);
    EXPECT_EQ(out[2], f32(running_var)) << dtype_name(dtype);
  }
}

TEST(BatchNormKernel, OneDimensionalInputIsOneChannel) {
  // X [4] is four samples of one channel.
  const std::vector<Tensor> out = batch_norm(
      "training_mode=1, epsilon=0.0",
      {Tensor::from_doubles(DType::kF64, {4}, {1, 2, 3, 4}),
       Tensor::from_doubles(DType::kF64, {1}, {1}), Tensor::from_doubles(DType::kF64, {1}, {0}),
       Tensor::from_doubles(DType::kF64, {1}, {0}), Tensor::from_doubles(DType::kF64, {1}, {1})},
      true);
  ASSERT_EQ(out.size(), 3u);
  const double s = std::sqrt(1.25);
  expect_near_all(out[0], {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 1e-15);
}

TEST(NormalizationKernels, BitsDoNotDependOnThreadCount) {
  const std::vector<double> x = random_values(32 * 16 * 64, 16);
  const Tensor xt = Tensor::from_doubles(DType::kF32, {32, 16, 64}, x);
  const Tensor c16 = Tensor::from_doubles(DType::kF32, {16}, random_values(16, 17, 0.1, 1));
  const Tensor s64 = Tensor::from_doubles(DType::kF32, {64}, random_values(64, 18));
  auto all = [&] {
    std::vector<Tensor> results = layer_norm("", {xt, s64, s64}, {32, 16, 1});
    for (Tensor& t : batch_norm("training_mode=1", {xt, c16, c16, c16, c16}, true)) {
      results.push_back(std::move(t));
    }
    return results;
  };
  const std::vector<Tensor> one = on_cpu_threads(1, all), four = on_cpu_threads(4, all);
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace ampc
