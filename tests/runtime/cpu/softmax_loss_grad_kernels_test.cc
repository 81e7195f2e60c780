// The ampc gradient kernels SoftmaxGrad, LogSoftmaxGrad, SoftmaxCrossEntropyLossGrad and
// NegativeLogLikelihoodLossGrad on the CPU backend against naive f64 derivatives written here,
// and, for f16/bf16, bit for bit against "upcast to f32, sum in order, round once".
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::as_floats;
using testing::expect_near_all;
using ::testing::HasSubstr;
using testing::on_cpu_threads;
using testing::random_values;
using testing::rounded;

// The text of a graph of the one ampc-domain node `ampc.op<attrs>(inputs...) : outputs`.
std::string ampc_graph(const std::string& op, const std::string& attrs,
                       const std::vector<std::optional<TensorType>>& inputs,
                       const std::vector<TensorType>& outputs) {
  std::string text = testing::one_node_graph("ampc." + op, attrs, inputs, outputs);
  const size_t opset = text.find("opset(");
  text.insert(text.find(')', opset), ", ampc:1");
  return text;
}

absl::StatusOr<std::vector<Tensor>> try_ampc(const std::string& op, const std::string& attrs,
                                             const std::vector<Tensor>& inputs,
                                             const std::vector<TensorType>& outputs) {
  std::vector<std::optional<TensorType>> types;
  for (const Tensor& input : inputs) types.push_back(input.type());
  return testing::try_run(ampc_graph(op, attrs, types, outputs), inputs);
}

Tensor run_ampc(const std::string& op, const std::string& attrs, const std::vector<Tensor>& inputs,
                const TensorType& output) {
  absl::StatusOr<std::vector<Tensor>> result = try_ampc(op, attrs, inputs, {output});
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  return result.ok() ? (*result)[0] : Tensor(output);
}

// Naive f64 softmax of [outer, n, inner] along n (log-softmax when `log`).
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t outer, int64_t n,
                                  int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double max = x[at(0)], sum = 0;
      for (int64_t k = 1; k < n; ++k) max = std::max(max, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[at(k)] - max);
      for (int64_t k = 0; k < n; ++k) {
        y[at(k)] = log ? x[at(k)] - max - std::log(sum) : std::exp(x[at(k)] - max) / sum;
      }
    }
  }
  return y;
}

// The Jacobian-vector product written as the full sum over the row:
// dx_k = sum_j dy_j * d y_j / d x_k, with d softmax_j / d x_k = y_j ([j == k] - y_k) and
// d log_softmax_j / d x_k = [j == k] - softmax_k.
std::vector<double> naive_softmax_grad(const std::vector<double>& dy, const std::vector<double>& x,
                                       int64_t outer, int64_t n, int64_t inner, bool log) {
  const std::vector<double> p = naive_softmax(x, outer, n, inner, false);
  std::vector<double> dx(x.size(), 0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      for (int64_t k = 0; k < n; ++k) {
        for (int64_t j = 0; j < n; ++j) {
          const double delta = j == k ? 1 : 0;
          const double jacobian = log ? delta - p[at(k)] : p[at(j)] * (delta - p[at(k)]);
          dx[at(k)] += dy[at(j)] * jacobian;
        }
      }
    }
  }
  return dx;
}

// ---- SoftmaxGrad / LogSoftmaxGrad ----------------------------------------------------------

TEST(SoftmaxGradKernel, AlongEachAxisMatchesNaiveF64) {
  const Shape shape = {2, 3, 4};
  const std::vector<double> x = random_values(24, 1, 2), dy = random_values(24, 2);
  const Tensor grad = Tensor::from_doubles(DType::kF64, shape, dy);
  struct Axis {
    const char* attr;
    int64_t outer, n, inner;
  };
  for (const Axis& axis : {Axis{"axis=0", 1, 2, 12}, Axis{"axis=1", 2, 3, 4},
                           Axis{"axis=-1", 6, 4, 1}, Axis{"", 6, 4, 1}}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(str_cat(axis.attr, log ? " LogSoftmaxGrad" : " SoftmaxGrad"));
      const Tensor y = Tensor::from_doubles(DType::kF64, shape,
                                            naive_softmax(x, axis.outer, axis.n, axis.inner, log));
      const Tensor dx =
          run_ampc(log ? "LogSoftmaxGrad" : "SoftmaxGrad", axis.attr, {grad, y}, y.type());
      expect_near_all(dx, naive_softmax_grad(dy, x, axis.outer, axis.n, axis.inner, log), 1e-14);
      const Tensor dx32 = run_ampc(log ? "LogSoftmaxGrad" : "SoftmaxGrad", axis.attr,
                                   {Tensor::from_doubles(DType::kF32, shape, dy),
                                    Tensor::from_doubles(DType::kF32, shape, y.to_double_vector())},
                                   TensorType{DType::kF32, shape});
      expect_near_all(dx32, naive_softmax_grad(dy, x, axis.outer, axis.n, axis.inner, log), 1e-6);
    }
  }
}

// "Upcast, s = sum in row order in f32, dx = y * (dy - s) or dy - exp(y) * s, round once".
std::vector<float> f32_softmax_grad_rows(const std::vector<float>& dy, const std::vector<float>& y,
                                         int64_t n, bool log) {
  std::vector<float> dx(dy.size());
  for (size_t first = 0; first < dy.size(); first += n) {
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += log ? dy[first + k] : dy[first + k] * y[first + k];
    for (int64_t k = 0; k < n; ++k) {
      dx[first + k] =
          log ? dy[first + k] - std::exp(y[first + k]) * sum : y[first + k] * (dy[first + k] - sum);
    }
  }
  return dx;
}

TEST(SoftmaxGradKernel, LowPrecisionEqualsF32RoundedOnce) {
  const Shape shape = {5, 23};
  const std::vector<double> x = random_values(5 * 23, 3, 3), dy = random_values(5 * 23, 4);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (bool log : {false, true}) {
      const Tensor grad = Tensor::from_doubles(dtype, shape, dy);
      const Tensor y = Tensor::from_doubles(dtype, shape, naive_softmax(x, 5, 23, 1, log));
      const Tensor dx = run_ampc(log ? "LogSoftmaxGrad" : "SoftmaxGrad", "", {grad, y}, y.type());
      EXPECT_EQ(
          dx, rounded(dtype, shape, f32_softmax_grad_rows(as_floats(grad), as_floats(y), 23, log)))
          << dtype_name(dtype) << (log ? " LogSoftmaxGrad" : " SoftmaxGrad");
    }
  }
}

TEST(SoftmaxGradKernel, BitsDoNotDependOnThreadCount) {
  const Shape shape = {32, 40, 17};
  const int64_t count = 32 * 40 * 17;
  const Tensor dy = Tensor::from_doubles(DType::kF32, shape, random_values(count, 5));
  const Tensor y = Tensor::from_doubles(DType::kF32, shape, random_values(count, 6));
  auto both = [&] {
    return std::vector<Tensor>{run_ampc("SoftmaxGrad", "axis=1", {dy, y}, y.type()),
                               run_ampc("LogSoftmaxGrad", "", {dy, y}, y.type())};
  };
  EXPECT_EQ(on_cpu_threads(1, both), on_cpu_threads(4, both));
}

// ---- SoftmaxCrossEntropyLossGrad / NegativeLogLikelihoodLossGrad -----------------------------

Tensor labels_of(DType dtype, Shape shape, const std::vector<int64_t>& values) {
  Tensor t(TensorType{dtype, std::move(shape)});
  for (size_t i = 0; i < values.size(); ++i) t.set_element_i64(i, values[i]);
  return t;
}

// A loss gradient case over scores [N, C, d...]: labels, optional weights, reduction and
// ignore_index, and the incoming dLoss (one value per sample for "none").
struct LossGradCase {
  Shape shape;
  std::vector<double> scores;
  std::vector<int64_t> labels;
  std::optional<std::vector<double>> weights;
  std::string reduction = "mean";
  std::optional<int64_t> ignore_index;
  std::vector<double> dloss;

  int64_t classes() const { return shape[1]; }
  int64_t spatial() const { return num_elements(shape) / shape[0] / shape[1]; }
  Shape sample_shape() const {
    Shape s = shape;
    s.erase(s.begin() + 1);
    return s;
  }
  std::string attrs() const {
    std::string text = str_cat("reduction=\"", reduction, "\"");
    if (ignore_index) text += str_cat(", ignore_index=", *ignore_index);
    return text;
  }
  Tensor dloss_tensor(DType dtype) const {
    return Tensor::from_doubles(dtype, reduction == "none" ? sample_shape() : Shape{}, dloss);
  }
  Tensor labels_tensor() const { return labels_of(DType::kI64, sample_shape(), labels); }
  bool ignored(int64_t s) const { return ignore_index && labels[s] == *ignore_index; }

  // d reduced loss / d input: dloss per sample (or shared, divided by the kept weight for mean)
  // times the sample's weight, times (softmax - onehot) or (-onehot).
  std::vector<double> naive_grad(bool cross_entropy) const {
    const int64_t C = classes(), D = spatial(), samples = shape[0] * D;
    const std::vector<double> p = naive_softmax(scores, shape[0], C, D, false);
    double weight_sum = 0;
    for (int64_t s = 0; s < samples; ++s) {
      if (!ignored(s)) weight_sum += weights ? (*weights)[labels[s]] : 1;
    }
    std::vector<double> grad(num_elements(shape), 0);
    for (int64_t s = 0; s < samples; ++s) {
      if (ignored(s)) continue;
      double g = reduction == "none" ? dloss[s] : dloss[0];
      if (reduction == "mean") g /= weight_sum;
      g *= weights ? (*weights)[labels[s]] : 1;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t i = ((s / D) * C + c) * D + s % D;
        const double onehot = c == labels[s] ? 1 : 0;
        grad[i] = g * (cross_entropy ? p[i] - onehot : -onehot);
      }
    }
    return grad;
  }
};

LossGradCase random_case(Shape shape, uint32_t seed) {
  LossGradCase c;
  c.shape = std::move(shape);
  c.scores = random_values(num_elements(c.shape), seed, 2);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> label(0, c.classes() - 1);
  for (int64_t s = 0; s < c.shape[0] * c.spatial(); ++s) c.labels.push_back(label(rng));
  return c;
}

TEST(SoftmaxCrossEntropyLossGradKernel, EveryModeMatchesNaiveF64) {
  for (const Shape& shape : {Shape{6, 5}, Shape{2, 4, 3}, Shape{2, 3, 2, 2}}) {
    LossGradCase c = random_case(shape, 7);
    for (bool weighted : {false, true}) {
      c.weights.reset();
      if (weighted) c.weights = random_values(c.classes(), 8, 0.3, 1);
      for (std::optional<int64_t> ignored : {std::optional<int64_t>(), std::optional<int64_t>(1)}) {
        c.ignore_index = ignored;
        for (const char* reduction : {"none", "sum", "mean"}) {
          c.reduction = reduction;
          c.dloss = random_values(
              reduction == std::string("none") ? num_elements(shape) / shape[1] : 1, 9);
          SCOPED_TRACE(str_cat(shape_to_string(shape), weighted ? " weighted " : " ", c.attrs()));
          const Tensor scores = Tensor::from_doubles(DType::kF64, shape, c.scores);
          const Tensor log_prob = Tensor::from_doubles(
              DType::kF64, shape,
              naive_softmax(c.scores, shape[0], c.classes(), c.spatial(), true));
          std::vector<Tensor> inputs = {c.dloss_tensor(DType::kF64), log_prob, c.labels_tensor()};
          if (c.weights)
            inputs.push_back(Tensor::from_doubles(DType::kF64, {c.classes()}, *c.weights));
          const std::vector<double> expected = c.naive_grad(true);
          expect_near_all(run_ampc("SoftmaxCrossEntropyLossGrad", c.attrs(), inputs, scores.type()),
                          expected, 1e-14);
          inputs[1] = scores;
          expect_near_all(run_ampc("SoftmaxCrossEntropyLossGrad", c.attrs() + ", from_scores=1",
                                   inputs, scores.type()),
                          expected, 1e-14);
          inputs.erase(inputs.begin() + 1);
          expect_near_all(
              run_ampc("NegativeLogLikelihoodLossGrad",
                       c.attrs() + str_cat(", classes=", c.classes()), inputs, scores.type()),
              c.naive_grad(false), 1e-14);
        }
      }
    }
  }
}

TEST(SoftmaxCrossEntropyLossGradKernel, HandDerivedValues) {
  // Scores 0, ln 2, ln 3: softmax 1/6, 2/6, 3/6. Labels 2 and 0 (ignored), mean, dLoss 1: the
  // one kept sample gets softmax - onehot(2), the ignored one zeros.
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  const Tensor scores = Tensor::from_doubles(DType::kF64, {2, 3}, {0, l2, l3, 0, l2, l3});
  const Tensor dx = run_ampc(
      "SoftmaxCrossEntropyLossGrad", "ignore_index=0, from_scores=1",
      {Tensor::from_doubles(DType::kF64, {}, {1.0}), scores, labels_of(DType::kI64, {2}, {2, 0})},
      scores.type());
  expect_near_all(dx, {1.0 / 6, 2.0 / 6, 3.0 / 6 - 1, 0, 0, 0}, 1e-15);
  const Tensor nll =
      run_ampc("NegativeLogLikelihoodLossGrad", "reduction=\"sum\", classes=3",
               {Tensor::from_doubles(DType::kF32, {}, {2.0}), labels_of(DType::kI32, {2}, {2, 0}),
                Tensor::from_doubles(DType::kF32, {3}, {0.5, 1, 4})},
               TensorType{DType::kF32, {2, 3}});
  EXPECT_EQ(nll.to_double_vector(), (std::vector<double>{0, 0, -8, -1, 0, 0}));
}

// The mean's weight sum W is the forward kernel's, bit for bit, with ignored samples among the
// kept ones: the forward's sum of per-sample losses of inputs -1 is W in the forward's order
// (pairwise, an ignored sample adding 0), and each kept sample's gradient at its label is
// -(dLoss / W) * w_t. Over 1,000 samples the order matters: a left-to-right sum of the kept
// weights, or a pairwise sum that skips the ignored samples, gives another W.
TEST(SoftmaxCrossEntropyLossGradKernel, MeanDividesByTheForwardsWeightSum) {
  const int64_t n = 1000;
  const std::vector<double> weight_values = {1.1, 0.3, 0.7, 3};
  std::vector<int64_t> labels(n);
  std::mt19937 rng(31);
  for (int64_t& t : labels) t = std::uniform_int_distribution<int64_t>(0, 3)(rng);
  const Tensor weights = Tensor::from_doubles(DType::kF32, {4}, weight_values);
  const Tensor scores = Tensor::from_doubles(DType::kF32, {n, 4}, std::vector<double>(n * 4, -1));
  const Tensor labels_tensor = labels_of(DType::kI64, {n}, labels);
  const Tensor sum =
      testing::run_op("NegativeLogLikelihoodLoss", "reduction=\"sum\", ignore_index=3",
                      {scores, labels_tensor, weights}, {DType::kF32, {}});
  const float w_sum = static_cast<float>(sum.element_as_double(0));
  float sequential = 0;
  for (int64_t t : labels) {
    if (t != 3) sequential += static_cast<float>(weight_values[t]);
  }
  EXPECT_NE(w_sum, sequential);
  const Tensor dx = run_ampc("NegativeLogLikelihoodLossGrad", "ignore_index=3, classes=4",
                             {Tensor::from_doubles(DType::kF32, {}, {1.0}), labels_tensor, weights},
                             scores.type());
  for (int64_t s = 0; s < n; ++s) {
    const float want =
        labels[s] == 3 ? 0.0f : -((1.0f / w_sum) * static_cast<float>(weight_values[labels[s]]));
    ASSERT_EQ(static_cast<float>(dx.element_as_double(s * 4 + labels[s])), want) << "sample " << s;
  }
}

// "Upcast, p = exp(log_prob) in f32, factor = dLoss * w (mean: / kept count), round once".
std::vector<float> f32_cross_entropy_grad(const std::vector<float>& log_prob,
                                          const std::vector<int64_t>& labels, int64_t C,
                                          float dloss, int64_t ignored) {
  int64_t kept = 0;
  for (int64_t t : labels) kept += t != ignored;
  const float factor = dloss / static_cast<float>(kept);
  std::vector<float> dx(log_prob.size(), 0.0f);
  for (size_t s = 0; s < labels.size(); ++s) {
    if (labels[s] == ignored) continue;
    for (int64_t c = 0; c < C; ++c) {
      dx[s * C + c] = factor * (std::exp(log_prob[s * C + c]) - (c == labels[s] ? 1.0f : 0.0f));
    }
  }
  return dx;
}

TEST(SoftmaxCrossEntropyLossGradKernel, LowPrecisionEqualsF32RoundedOnce) {
  const int64_t N = 9, C = 11;
  const LossGradCase c = random_case({N, C}, 10);
  const std::vector<double> log_prob = naive_softmax(c.scores, N, C, 1, true);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor lp = Tensor::from_doubles(dtype, {N, C}, log_prob);
    const Tensor dloss = Tensor::from_doubles(dtype, {}, {0.75});
    const Tensor dx = run_ampc("SoftmaxCrossEntropyLossGrad", "ignore_index=3",
                               {dloss, lp, c.labels_tensor()}, lp.type());
    EXPECT_EQ(dx,
              rounded(dtype, {N, C}, f32_cross_entropy_grad(as_floats(lp), c.labels, C, 0.75f, 3)))
        << dtype_name(dtype);
  }
}

TEST(SoftmaxCrossEntropyLossGradKernel, BitsDoNotDependOnThreadCount) {
  const LossGradCase c = random_case({64, 30, 20}, 11);
  const Tensor scores = Tensor::from_doubles(DType::kF32, c.shape, c.scores);
  const Tensor dloss = Tensor::from_doubles(DType::kF32, {}, {1.0});
  auto grad = [&] {
    return run_ampc("SoftmaxCrossEntropyLossGrad", "from_scores=1",
                    {dloss, scores, c.labels_tensor()}, scores.type());
  };
  EXPECT_EQ(on_cpu_threads(1, grad), on_cpu_threads(4, grad));
}

TEST(LossGradKernels, LabelOutOfRangeIsAnError) {
  const Tensor dloss = Tensor::from_doubles(DType::kF32, {}, {1.0});
  const Tensor labels = labels_of(DType::kI64, {2}, {1, 7});
  absl::StatusOr<std::vector<Tensor>> sce =
      try_ampc("SoftmaxCrossEntropyLossGrad", "",
               {dloss, Tensor::from_doubles(DType::kF32, {2, 3}, random_values(6, 12)), labels},
               {TensorType{DType::kF32, {2, 3}}});
  ASSERT_FALSE(sce.ok());
  EXPECT_THAT(sce.status().message(), HasSubstr("label 7"));
  absl::StatusOr<std::vector<Tensor>> nll =
      try_ampc("NegativeLogLikelihoodLossGrad", "classes=3", {dloss, labels},
               {TensorType{DType::kF32, {2, 3}}});
  ASSERT_FALSE(nll.ok());
  EXPECT_THAT(nll.status().message(), HasSubstr("label 7"));
}

}  // namespace
}  // namespace ampc
