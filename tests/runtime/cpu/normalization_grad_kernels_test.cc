// The ampc gradient kernels LayerNormalizationGrad and BatchNormalizationGrad on the CPU backend
// against central differences of naive f64 forward computations written here, and, for f16/bf16,
// bit for bit against "upcast to f32, sum in order, round once".
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

std::vector<Tensor> run_ampc(const std::string& op, const std::string& attrs,
                             const std::vector<Tensor>& inputs,
                             const std::vector<TensorType>& outputs) {
  std::vector<std::optional<TensorType>> types;
  for (const Tensor& input : inputs) types.push_back(input.type());
  std::string text = testing::one_node_graph("ampc." + op, attrs, types, outputs);
  text.insert(text.find(')', text.find("opset(")), ", ampc:1");
  return testing::run(text, inputs);
}

// d/dv of sum(dy * f(...)) at v, by central differences, for each element of v (f64 references
// are smooth in every input, so h = 1e-6 leaves errors near 1e-9).
std::vector<double> numeric_grad(std::vector<double>& v,
                                 const std::function<double()>& weighted_output) {
  const double h = 1e-6;
  std::vector<double> grad(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const double up = weighted_output();
    v[i] = saved - h;
    const double down = weighted_output();
    v[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// ---- LayerNormalizationGrad ----------------------------------------------------------------

// Naive f64 LayerNormalization of `rows` rows of n, scale and bias given per column (n values).
std::vector<double> naive_layer_norm(const std::vector<double>& x, int64_t n,
                                     const std::vector<double>& scale,
                                     const std::vector<double>& bias, double epsilon) {
  std::vector<double> y(x.size());
  for (size_t first = 0; first < x.size(); first += n) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += x[first + j] / n;
    for (int64_t j = 0; j < n; ++j) var += (x[first + j] - mean) * (x[first + j] - mean) / n;
    for (int64_t j = 0; j < n; ++j) {
      y[first + j] = (x[first + j] - mean) / std::sqrt(var + epsilon) * scale[j] + bias[j];
    }
  }
  return y;
}

struct LayerNormCase {
  Shape x_shape;
  int64_t axis;
  Shape scale_shape;  // broadcasts to the normalized dims
  bool has_bias;
  float epsilon;
};

TEST(LayerNormalizationGradKernel, MatchesCentralDifferencesOfNaiveF64) {
  for (const LayerNormCase& c : {LayerNormCase{{3, 5}, -1, {5}, true, 1e-5f},
                                 LayerNormCase{{2, 3, 4}, -2, {3, 4}, false, 0.1f},
                                 LayerNormCase{{2, 3, 4}, 1, {1, 4}, true, 0.01f},
                                 LayerNormCase{{4, 6}, 0, {4, 6}, true, 1e-5f}}) {
    SCOPED_TRACE(str_cat(shape_to_string(c.x_shape), " axis ", c.axis));
    const int64_t rank = static_cast<int64_t>(c.x_shape.size());
    const int64_t axis = c.axis < 0 ? c.axis + rank : c.axis;
    const Shape normalized(c.x_shape.begin() + axis, c.x_shape.end());
    const int64_t n = num_elements(normalized), count = num_elements(c.x_shape);
    std::vector<double> x = random_values(count, 1), dy = random_values(count, 2);
    const std::vector<double> scale_values = random_values(num_elements(c.scale_shape), 3, 0.5, 1);
    // Scale and bias as one value per normalized element (the broadcast done here).
    std::vector<double> scale(n), bias = random_values(n, 4);
    const int64_t scale_cols = c.scale_shape.back();
    for (int64_t j = 0; j < n; ++j) {
      scale[j] = num_elements(c.scale_shape) == n ? scale_values[j] : scale_values[j % scale_cols];
    }
    auto loss = [&] { return dot(dy, naive_layer_norm(x, n, scale, bias, c.epsilon)); };
    const std::vector<double> dx = numeric_grad(x, loss);
    const std::vector<double> dscale = numeric_grad(scale, loss);
    const std::vector<double> dbias = numeric_grad(bias, loss);

    const TensorType x_type{DType::kF64, c.x_shape}, param_type{DType::kF64, normalized};
    std::vector<TensorType> outputs = {x_type, param_type};
    if (c.has_bias) outputs.push_back(param_type);
    const std::vector<Tensor> grads =
        run_ampc("LayerNormalizationGrad", str_cat("axis=", c.axis, ", epsilon=", c.epsilon),
                 {Tensor::from_doubles(DType::kF64, c.x_shape, dy),
                  Tensor::from_doubles(DType::kF64, c.x_shape, x),
                  Tensor::from_doubles(DType::kF64, c.scale_shape, scale_values)},
                 outputs);
    ASSERT_EQ(grads.size(), outputs.size());
    expect_near_all(grads[0], dx, 1e-7);
    expect_near_all(grads[1], dscale, 1e-7);
    if (c.has_bias) expect_near_all(grads[2], dbias, 1e-7);
  }
}

TEST(LayerNormalizationGradKernel, SavedStatisticsGiveTheRecomputedBits) {
  const Shape shape = {6, 10};
  const Tensor x = Tensor::from_doubles(DType::kF32, shape, random_values(60, 5));
  const Tensor dy = Tensor::from_doubles(DType::kF32, shape, random_values(60, 6));
  const Tensor scale = Tensor::from_doubles(DType::kF32, {10}, random_values(10, 7));
  const TensorType stats{DType::kF32, {6, 1}};
  const std::vector<Tensor> forward =
      testing::run_node("LayerNormalization", "", {x, scale}, {x.type(), stats, stats});
  const std::vector<TensorType> outputs = {x.type(), scale.type()};
  const std::vector<Tensor> recomputed =
      run_ampc("LayerNormalizationGrad", "", {dy, x, scale}, outputs);
  const std::vector<Tensor> saved =
      run_ampc("LayerNormalizationGrad", "", {dy, x, scale, forward[1], forward[2]}, outputs);
  EXPECT_EQ(recomputed, saved);
}

// The kernel's order in f32: statistics as the forward, column sums, row sums, round once.
std::vector<std::vector<float>> f32_layer_norm_grad(const std::vector<float>& dy,
                                                    const std::vector<float>& x,
                                                    const std::vector<float>& scale, int64_t n,
                                                    float epsilon) {
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  std::vector<float> mean(rows), inv_std(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0, square_sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[r * n + j];
    mean[r] = sum / static_cast<float>(n);
    for (int64_t j = 0; j < n; ++j) {
      square_sum += (x[r * n + j] - mean[r]) * (x[r * n + j] - mean[r]);
    }
    inv_std[r] = 1.0f / std::sqrt(square_sum / static_cast<float>(n) + epsilon);
  }
  std::vector<float> dx(x.size()), dscale(n), dbias(n);
  for (int64_t j = 0; j < n; ++j) {
    float scale_sum = 0, bias_sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      scale_sum += dy[r * n + j] * ((x[r * n + j] - mean[r]) * inv_std[r]);
      bias_sum += dy[r * n + j];
    }
    dscale[j] = scale_sum;
    dbias[j] = bias_sum;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float grad_sum = 0, grad_xhat_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float grad = dy[r * n + j] * scale[j];
      grad_sum += grad;
      grad_xhat_sum += grad * ((x[r * n + j] - mean[r]) * inv_std[r]);
    }
    const float grad_mean = grad_sum / static_cast<float>(n);
    const float grad_xhat_mean = grad_xhat_sum / static_cast<float>(n);
    for (int64_t j = 0; j < n; ++j) {
      const float xhat = (x[r * n + j] - mean[r]) * inv_std[r];
      dx[r * n + j] = inv_std[r] * (dy[r * n + j] * scale[j] - grad_mean - xhat * grad_xhat_mean);
    }
  }
  return {dx, dscale, dbias};
}

TEST(LayerNormalizationGradKernel, LowPrecisionEqualsF32RoundedOnce) {
  const Shape shape = {5, 24};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor dy = Tensor::from_doubles(dtype, shape, random_values(120, 8));
    const Tensor x = Tensor::from_doubles(dtype, shape, random_values(120, 9, 2, 0.5));
    const Tensor scale = Tensor::from_doubles(dtype, {24}, random_values(24, 10));
    const std::vector<Tensor> grads =
        run_ampc("LayerNormalizationGrad", "epsilon=0.001", {dy, x, scale},
                 {x.type(), scale.type(), scale.type()});
    ASSERT_EQ(grads.size(), 3u);
    const std::vector<std::vector<float>> expected =
        f32_layer_norm_grad(as_floats(dy), as_floats(x), as_floats(scale), 24, 0.001f);
    EXPECT_EQ(grads[0], rounded(dtype, shape, expected[0])) << dtype_name(dtype);
    EXPECT_EQ(grads[1], rounded(dtype, {24}, expected[1])) << dtype_name(dtype);
    EXPECT_EQ(grads[2], rounded(dtype, {24}, expected[2])) << dtype_name(dtype);
  }
}

TEST(LayerNormalizationGradKernel, BitsDoNotDependOnThreadCount) {
  const Shape shape = {300, 64};
  const Tensor dy = Tensor::from_doubles(DType::kF32, shape, random_values(300 * 64, 11));
  const Tensor x = Tensor::from_doubles(DType::kF32, shape, random_values(300 * 64, 12));
  const Tensor scale = Tensor::from_doubles(DType::kF32, {64}, random_values(64, 13));
  auto grads = [&] {
    return run_ampc("LayerNormalizationGrad", "", {dy, x, scale},
                    {x.type(), scale.type(), scale.type()});
  };
  EXPECT_EQ(on_cpu_threads(1, grads), on_cpu_threads(4, grads));
}

// ---- BatchNormalizationGrad ----------------------------------------------------------------

// Naive f64 BatchNormalization of X [N, C, D...] viewed as [N, C, spatial]; training uses the
// biased batch variance, inference the given statistics.
std::vector<double> naive_batch_norm(const std::vector<double>& x, int64_t batch, int64_t channels,
                                     const std::vector<double>& scale,
                                     const std::vector<double>& bias,
                                     const std::vector<double>& given_mean,
                                     const std::vector<double>& given_var, double epsilon,
                                     bool training) {
  const int64_t spatial = static_cast<int64_t>(x.size()) / batch / channels;
  std::vector<double> y(x.size());
  for (int64_t c = 0; c < channels; ++c) {
    auto at = [&](int64_t b, int64_t i) { return (b * channels + c) * spatial + i; };
    double mean = given_mean[c], var = given_var[c];
    if (training) {
      const double m = static_cast<double>(batch * spatial);
      mean = var = 0;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < spatial; ++i) mean += x[at(b, i)] / m;
      }
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < spatial; ++i) var += std::pow(x[at(b, i)] - mean, 2) / m;
      }
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < spatial; ++i) {
        y[at(b, i)] = (x[at(b, i)] - mean) / std::sqrt(var + epsilon) * scale[c] + bias[c];
      }
    }
  }
  return y;
}

TEST(BatchNormalizationGradKernel, MatchesCentralDifferencesOfNaiveF64) {
  for (const Shape& shape : {Shape{2, 3, 2, 2}, Shape{6, 3}, Shape{5}}) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(str_cat(shape_to_string(shape), training ? " training" : " inference"));
      const int64_t channels = shape.size() >= 2 ? shape[1] : 1, count = num_elements(shape);
      std::vector<double> x = random_values(count, 14), dy = random_values(count, 15);
      std::vector<double> scale = random_values(channels, 16), bias = random_values(channels, 17);
      const std::vector<double> mean = random_values(channels, 18, 0.3);
      const std::vector<double> var = random_values(channels, 19, 0.2, 1);
      const float epsilon = 0.01f;
      auto loss = [&] {
        return dot(
            dy, naive_batch_norm(x, shape[0], channels, scale, bias, mean, var, epsilon, training));
      };
      const std::vector<double> dx = numeric_grad(x, loss);
      const std::vector<double> dscale = numeric_grad(scale, loss);
      const std::vector<double> dbias = numeric_grad(bias, loss);

      auto f64 = [](const Shape& s, const std::vector<double>& v) {
        return Tensor::from_doubles(DType::kF64, s, v);
      };
      const TensorType param{DType::kF64, {channels}};
      const std::vector<Tensor> grads =
          run_ampc("BatchNormalizationGrad",
                   str_cat("epsilon=", epsilon, ", training_mode=", training ? 1 : 0),
                   {f64(shape, dy), f64(shape, x), f64({channels}, scale), f64({channels}, mean),
                    f64({channels}, var)},
                   {TensorType{DType::kF64, shape}, param, param});
      ASSERT_EQ(grads.size(), 3u);
      expect_near_all(grads[0], dx, 1e-7);
      expect_near_all(grads[1], dscale, 1e-7);
      expect_near_all(grads[2], dbias, 1e-7);
    }
  }
}

TEST(BatchNormalizationGradKernel, LowPrecisionDataWithF32ParametersEqualsF32RoundedOnce) {
  const int64_t batch = 7, channels = 3;
  const Shape shape = {batch, channels};
  const Tensor scale = Tensor::from_doubles(DType::kF32, {channels}, random_values(3, 20));
  const Tensor stats = Tensor::from_doubles(DType::kF32, {channels}, {0.5, 1, 2});
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor dy = Tensor::from_doubles(dtype, shape, random_values(21, 21));
    const Tensor x = Tensor::from_doubles(dtype, shape, random_values(21, 22, 2, 1));
    const std::vector<Tensor> grads =
        run_ampc("BatchNormalizationGrad", "training_mode=1", {dy, x, scale, stats, stats},
                 {x.type(), scale.type(), scale.type()});
    ASSERT_EQ(grads.size(), 3u);
    const std::vector<float> g = as_floats(dy), v = as_floats(x), s = as_floats(scale);
    std::vector<float> dx(21), dscale(channels), dbias(channels);
    const float count = static_cast<float>(batch), epsilon = 1e-5f;
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0, square_sum = 0, scale_sum = 0, bias_sum = 0;
      for (int64_t b = 0; b < batch; ++b) sum += v[b * channels + c];
      const float mean = sum / count;
      for (int64_t b = 0; b < batch; ++b) {
        square_sum += (v[b * channels + c] - mean) * (v[b * channels + c] - mean);
      }
      const float inv_std = 1.0f / std::sqrt(square_sum / count + epsilon);
      for (int64_t b = 0; b < batch; ++b) {
        scale_sum += g[b * channels + c] * ((v[b * channels + c] - mean) * inv_std);
        bias_sum += g[b * channels + c];
      }
      dscale[c] = scale_sum;
      dbias[c] = bias_sum;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t i = b * channels + c;
        const float centered =
            g[i] - (bias_sum / count + (v[i] - mean) * inv_std * (scale_sum / count));
        dx[i] = s[c] * inv_std * centered;
      }
    }
    EXPECT_EQ(grads[0], rounded(dtype, shape, dx)) << dtype_name(dtype);
    EXPECT_EQ(grads[1], rounded(DType::kF32, {channels}, dscale)) << dtype_name(dtype);
    EXPECT_EQ(grads[2], rounded(DType::kF32, {channels}, dbias)) << dtype_name(dtype);
  }
}

TEST(BatchNormalizationGradKernel, BitsDoNotDependOnThreadCount) {
  const Shape shape = {8, 16, 12, 12};
  const int64_t count = num_elements(shape);
  const Tensor dy = Tensor::from_doubles(DType::kF32, shape, random_values(count, 23));
  const Tensor x = Tensor::from_doubles(DType::kF32, shape, random_values(count, 24));
  const Tensor param = Tensor::from_doubles(DType::kF32, {16}, random_values(16, 25, 0.2, 1));
  auto grads = [&] {
    return run_ampc("BatchNormalizationGrad", "training_mode=1", {dy, x, param, param, param},
                    {x.type(), param.type(), param.type()});
  };
  EXPECT_EQ(on_cpu_threads(1, grads), on_cpu_threads(4, grads));
}

}  // namespace
}  // namespace ampc
