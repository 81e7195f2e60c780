// Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss on the CPU backend
// against hand-derived values, naive f64 computations written here and, for f16/bf16, bit for
// bit against "upcast to f32, max-subtract, exp, sum in order, divide (or subtract the log),
// round once".
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
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
using testing::try_run;

constexpr double kInf = std::numeric_limits<double>::infinity();

// `%y = OP<ATTRS>(%x) : type of x`.
Tensor unary(const std::string& op, const std::string& attrs, const Tensor& x) {
  return testing::run_op(op, attrs, {x}, x.type());
}

// Naive f64 (log-)softmax of [outer, n, inner] along n.
std::vector<double> naive_softmax(const std::vector<double>& x, int64_t outer, int64_t n,
                                  int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double max = -kInf, sum = 0;
      for (int64_t k = 0; k < n; ++k) max = std::max(max, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[at(k)] - max);
      for (int64_t k = 0; k < n; ++k) {
        y[at(k)] = log ? x[at(k)] - max - std::log(sum) : std::exp(x[at(k)] - max) / sum;
      }
    }
  }
  return y;
}

// ---- Softmax / LogSoftmax ------------------------------------------------------------------

TEST(SoftmaxKernel, HandDerivedValues) {
  // exp(0), exp(ln 2), exp(ln 3) = 1, 2, 3: the softmax is 1/6, 2/6, 3/6.
  const std::vector<double> x = {0, std::log(2.0), std::log(3.0)};
  const Tensor y = unary("Softmax", "", Tensor::from_doubles(DType::kF64, {3}, x));
  expect_near_all(y, {1.0 / 6, 2.0 / 6, 3.0 / 6}, 1e-15);
  const Tensor z = unary("LogSoftmax", "", Tensor::from_doubles(DType::kF64, {3}, x));
  expect_near_all(z, {std::log(1.0 / 6), std::log(2.0 / 6), std::log(3.0 / 6)}, 1e-15);
  const Tensor y32 = unary("Softmax", "", Tensor::from_doubles(DType::kF32, {3}, x));
  expect_near_all(y32, {1.0 / 6, 2.0 / 6, 3.0 / 6}, 1e-7);
}

TEST(SoftmaxKernel, AlongEachAxisMatchesNaiveF64) {
  const std::vector<double> x = random_values(2 * 3 * 4, 1, 3);
  const Tensor input = Tensor::from_doubles(DType::kF64, {2, 3, 4}, x);
  for (bool log : {false, true}) {
    const std::string op = log ? "LogSoftmax" : "Softmax";
    expect_near_all(unary(op, "", input), naive_softmax(x, 6, 4, 1, log), 1e-14);
    expect_near_all(unary(op, "axis=1", input), naive_softmax(x, 2, 3, 4, log), 1e-14);
    expect_near_all(unary(op, "axis=-3", input), naive_softmax(x, 1, 2, 12, log), 1e-14);
    const Tensor f32 = Tensor::from_doubles(DType::kF32, {2, 3, 4}, x);
    expect_near_all(unary(op, "axis=1", f32), naive_softmax(f32.to_double_vector(), 2, 3, 4, log),
                    1e-6);
  }
}

// "Upcast to f32, max-subtract, exp in f32, sum in f32 in order, divide (or x - m - log s)".
std::vector<float> f32_softmax_rows(const std::vector<float>& x, int64_t n, bool log) {
  std::vector<float> y(x.size());
  for (size_t first = 0; first < x.size(); first += n) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n; ++k) max = std::max(max, x[first + k]);
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += std::exp(x[first + k] - max);
    for (int64_t k = 0; k < n; ++k) {
      y[first + k] =
          log ? (x[first + k] - max) - std::log(sum) : std::exp(x[first + k] - max) / sum;
    }
  }
  return y;
}

TEST(SoftmaxKernel, LowPrecisionEqualsF32RoundedOnce) {
  const std::vector<double> x = random_values(6 * 37, 3, 4);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor input = Tensor::from_doubles(dtype, {6, 37}, x);
    for (bool log : {false, true}) {
      const Tensor y = unary(log ? "LogSoftmax" : "Softmax", "", input);
      EXPECT_EQ(y, rounded(dtype, {6, 37}, f32_softmax_rows(as_floats(input), 37, log)))
          << dtype_name(dtype) << (log ? " LogSoftmax" : " Softmax");
    }
  }
  // f32 follows the same order with no rounding on store.
  const Tensor input = Tensor::from_doubles(DType::kF32, {6, 37}, x);
  EXPECT_EQ(unary("Softmax", "", input),
            rounded(DType::kF32, {6, 37}, f32_softmax_rows(as_floats(input), 37, false)));
}

TEST(SoftmaxKernel, MaskedEntriesGiveExactZeros) {
  // A causal mask: -inf entries get probability exactly 0 (log-probability -inf) and the rest
  // normalize among themselves; a row masked entirely has no distribution (NaN).
  const Tensor x = Tensor::from_doubles(
      DType::kF32, {3, 3}, {0, -kInf, -kInf, 0, std::log(3.0), -kInf, -kInf, -kInf, -kInf});
  const Tensor y = unary("Softmax", "", x);
  const std::vector<double> expected = {1, 0, 0, 0.25, 0.75, 0};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.element_as_double(i), expected[i], 1e-7) << i;
  EXPECT_EQ(y.element_as_double(0), 1.0);
  EXPECT_EQ(y.element_as_double(1), 0.0);
  EXPECT_EQ(y.element_as_double(5), 0.0);
  for (int i = 6; i < 9; ++i) EXPECT_TRUE(std::isnan(y.element_as_double(i))) << i;
  const Tensor z = unary("LogSoftmax", "", x);
  EXPECT_EQ(z.element_as_double(0), 0.0);
  EXPECT_EQ(z.element_as_double(1), -kInf);
  EXPECT_EQ(z.element_as_double(5), -kInf);
}

TEST(SoftmaxKernel, EqualRowsAreUniform) {
  const Tensor x =
      Tensor::from_doubles(DType::kF16, {2, 4}, {5, 5, 5, 5, -60000, -60000, -60000, -60000});
  const Tensor y = unary("Softmax", "", x);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.element_as_double(i), 0.25) << i;
  const Tensor z = unary("LogSoftmax", "", x);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(z.element_as_double(i), static_cast<float>(Float16(-std::log(4.0f)))) << i;
}

TEST(SoftmaxKernel, LargeInputsDoNotOverflow) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {2}, {1000, 0});
  const Tensor y = unary("Softmax", "", x);
  EXPECT_EQ(y.element_as_double(0), 1.0);
  EXPECT_EQ(y.element_as_double(1), 0.0);
  const Tensor z = unary("LogSoftmax", "", x);
  EXPECT_EQ(z.element_as_double(0), 0.0);
  EXPECT_EQ(z.element_as_double(1), -1000.0);
  // f16's largest values too.
  const Tensor h = unary("Softmax", "", Tensor::from_doubles(DType::kF16, {2}, {65504, 65504}));
  EXPECT_EQ(h.element_as_double(0), 0.5);
}

TEST(SoftmaxKernel, BitsDoNotDependOnThreadCount) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {64, 50, 33}, random_values(64 * 50 * 33, 4));
  auto both = [&] {
    return std::vector<Tensor>{unary("Softmax", "axis=1", x), unary("LogSoftmax", "", x)};
  };
  const std::vector<Tensor> one = on_cpu_threads(1, both), four = on_cpu_threads(4, both);
  EXPECT_EQ(one, four);
}

// ---- SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss -------------------------------------

// A loss node over scores [N, C, ...] `x`, labels `t` and optional weights `w`, with the log_prob
// output when asked (SoftmaxCrossEntropyLoss only).
struct LossCase {
  std::string op = "SoftmaxCrossEntropyLoss";
  Tensor scores, labels;
  std::optional<Tensor> weights;
  std::string reduction = "mean";
  std::optional<int64_t> ignore_index;
  bool log_prob = false;

  std::string text() const {
    Shape loss_shape;
    if (reduction == "none") {
      loss_shape = scores.shape();
      loss_shape.erase(loss_shape.begin() + 1);
    }
    const TensorType loss_type{scores.dtype(), loss_shape};
    std::string attrs = str_cat("reduction=\"", reduction, "\"");
    if (ignore_index) attrs += str_cat(", ignore_index=", *ignore_index);
    return str_cat("graph g(%x: ", type_to_string(scores.type()),
                   ", %t: ", type_to_string(labels.type()),
                   weights ? str_cat(", %w: ", type_to_string(weights->type())) : "", ") {\n  ",
                   log_prob ? "%loss, %lp" : "%loss", " = ", op, "<", attrs, ">(%x, %t",
                   weights ? ", %w" : "", ") : ", type_to_string(loss_type),
                   log_prob ? str_cat(", ", type_to_string(scores.type())) : "", "\n  return %loss",
                   log_prob ? ", %lp" : "", "\n}\n");
  }
  std::vector<Tensor> inputs() const {
    std::vector<Tensor> result = {scores, labels};
    if (weights) result.push_back(*weights);
    return result;
  }
  std::vector<Tensor> run() const { return testing::run(text(), inputs()); }
};

// Naive f64 loss: log_prob (log-softmax over C for SoftmaxCrossEntropyLoss, the input itself for
// NegativeLogLikelihoodLoss), per-sample losses, then the reduction.
struct NaiveLoss {
  std::vector<double> log_prob, loss;
  double reduced = 0;
};

NaiveLoss naive_loss(const LossCase& c) {
  const Shape& shape = c.scores.shape();
  const int64_t N = shape[0], C = shape[1];
  int64_t D = 1;
  for (size_t d = 2; d < shape.size(); ++d) D *= shape[d];
  const std::vector<double> x = c.scores.to_double_vector();
  NaiveLoss r;
  r.log_prob = c.op == "SoftmaxCrossEntropyLoss" ? naive_softmax(x, N, C, D, true) : x;
  double loss_sum = 0, weight_sum = 0;
  for (int64_t s = 0; s < N * D; ++s) {
    const int64_t t = c.labels.element_as_i64(s);
    double loss = 0, weight = 0;
    if (!(c.ignore_index && t == *c.ignore_index)) {
      weight = c.weights ? c.weights->element_as_double(t) : 1.0;
      loss = -r.log_prob[((s / D) * C + t) * D + s % D] * weight;
    }
    r.loss.push_back(loss);
    loss_sum += loss;
    weight_sum += weight;
  }
  r.reduced = c.reduction == "sum" ? loss_sum : loss_sum / weight_sum;
  return r;
}

Tensor labels_of(DType dtype, Shape shape, const std::vector<int64_t>& values) {
  Tensor t(TensorType{dtype, std::move(shape)});
  for (size_t i = 0; i < values.size(); ++i) t.set_element_i64(i, values[i]);
  return t;
}

std::vector<int64_t> random_labels(int64_t count, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> label(0, classes - 1);
  std::vector<int64_t> labels(count);
  for (int64_t& l : labels) l = label(rng);
  return labels;
}

TEST(SoftmaxCrossEntropyKernel, EachReductionMatchesNaiveF64) {
  LossCase c;
  c.scores = Tensor::from_doubles(DType::kF64, {6, 5}, random_values(30, 5, 2));
  c.labels = labels_of(DType::kI64, {6}, random_labels(6, 5, 6));
  for (const char* reduction : {"none", "sum", "mean"}) {
    c.reduction = reduction;
    const NaiveLoss expected = naive_loss(c);
    const std::vector<Tensor> y = c.run();
    ASSERT_EQ(y.size(), 1u);
    if (c.reduction == "none") {
      expect_near_all(y[0], expected.loss, 1e-14);
    } else {
      expect_near_all(y[0], {expected.reduced}, 1e-14);
    }
  }
}

TEST(SoftmaxCrossEntropyKernel, MeanWithWeightsDividesByWeightsOfKeptLabels) {
  // Scores 0, ln 2, ln 3 give log-probabilities ln(1/6), ln(2/6), ln(3/6) in every row.
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  LossCase c;
  c.scores =
      Tensor::from_doubles(DType::kF64, {4, 3}, {0, l2, l3, 0, l2, l3, 0, l2, l3, 0, l2, l3});
  c.labels = labels_of(DType::kI64, {4}, {0, 1, 2, 1});
  c.weights = Tensor::from_doubles(DType::kF64, {3}, {0.5, 2, 1});
  c.ignore_index = 2;
  const double kept = 0.5 * -std::log(1.0 / 6) + 2 * -std::log(2.0 / 6) * 2;  // rows 0, 1, 3
  c.reduction = "mean";
  expect_near_all(c.run()[0], {kept / (0.5 + 2 + 2)}, 1e-15);
  c.reduction = "sum";
  expect_near_all(c.run()[0], {kept}, 1e-15);
  c.reduction = "none";
  expect_near_all(c.run()[0],
                  {0.5 * -std::log(1.0 / 6), 2 * -std::log(2.0 / 6), 0, 2 * -std::log(2.0 / 6)},
                  1e-15);
  // Without weights, the mean divides by the number of kept labels.
  c.weights.reset();
  c.reduction = "mean";
  expect_near_all(c.run()[0], {(-std::log(1.0 / 6) - 2 * std::log(2.0 / 6)) / 3}, 1e-15);
}

TEST(SoftmaxCrossEntropyKernel, KDimensionalWithLogProbMatchesNaiveF64) {
  LossCase c;
  c.scores = Tensor::from_doubles(DType::kF32, {2, 4, 3}, random_values(24, 7, 2));
  c.labels = labels_of(DType::kI32, {2, 3}, {3, 0, 1, 2, 2, 0});
  c.weights = Tensor::from_doubles(DType::kF32, {4}, {1, 0.25, 2, 0.5});
  c.ignore_index = 0;
  c.log_prob = true;
  for (const char* reduction : {"none", "mean"}) {
    c.reduction = reduction;
    const NaiveLoss expected = naive_loss(c);
    const std::vector<Tensor> y = c.run();
    ASSERT_EQ(y.size(), 2u);
    expect_near_all(y[0], c.reduction == "none" ? expected.loss : std::vector{expected.reduced},
                    1e-6);
    expect_near_all(y[1], expected.log_prob, 1e-6);
  }
}

// "Upcast to f32, log-softmax over C as LogSoftmax does, losses and their sum in f32 in sample
// order, divide once, round once" for [N, C] scores without weights.
std::vector<float> f32_cross_entropy(const std::vector<float>& x, const std::vector<int64_t>& t,
                                     int64_t C, const std::string& reduction) {
  const std::vector<float> log_prob = f32_softmax_rows(x, C, true);
  std::vector<float> losses;
  float sum = 0;
  for (size_t s = 0; s < t.size(); ++s) {
    losses.push_back(-log_prob[s * C + t[s]]);
    sum += losses.back();
  }
  if (reduction == "none") return losses;
  return {reduction == "sum" ? sum : sum / static_cast<float>(t.size())};
}

TEST(SoftmaxCrossEntropyKernel, LowPrecisionEqualsF32RoundedOnce) {
  const int64_t N = 9, C = 11;
  const std::vector<int64_t> labels = random_labels(N, C, 8);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    LossCase c;
    c.scores = Tensor::from_doubles(dtype, {N, C}, random_values(N * C, 9, 3));
    c.labels = labels_of(DType::kI64, {N}, labels);
    c.log_prob = true;
    for (const char* reduction : {"none", "sum", "mean"}) {
      c.reduction = reduction;
      const std::vector<Tensor> y = c.run();
      ASSERT_EQ(y.size(), 2u);
      const std::vector<float> expected =
          f32_cross_entropy(as_floats(c.scores), labels, C, reduction);
      EXPECT_EQ(y[0], rounded(dtype, y[0].shape(), expected))
          << dtype_name(dtype) << " " << reduction;
      // log_prob is LogSoftmax along C, bit for bit.
      EXPECT_EQ(y[1], rounded(dtype, {N, C}, f32_softmax_rows(as_floats(c.scores), C, true)));
    }
  }
}

TEST(NegativeLogLikelihoodKernel, HandDerivedValues) {
  LossCase c;
  c.op = "NegativeLogLikelihoodLoss";
  c.scores = Tensor::from_doubles(DType::kF32, {2, 3}, {-1, -2, -3, -4, -5, -6});
  c.labels = labels_of(DType::kI64, {2}, {2, 0});
  c.weights = Tensor::from_doubles(DType::kF32, {3}, {1, 2, 3});
  c.reduction = "none";
  EXPECT_EQ(c.run()[0].to_double_vector(), (std::vector<double>{9, 4}));  // 3 * 3, 4 * 1
  c.reduction = "sum";
  EXPECT_EQ(c.run()[0].to_double_vector(), (std::vector<double>{13}));
  c.reduction = "mean";
  EXPECT_EQ(c.run()[0].to_double_vector(), (std::vector<double>{13.0 / 4}));  // weights 3 + 1
  c.ignore_index = 2;
  EXPECT_EQ(c.run()[0].to_double_vector(), (std::vector<double>{4}));  // 4 * 1 / 1
  c.weights.reset();
  c.ignore_index.reset();
  EXPECT_EQ(c.run()[0].to_double_vector(), (std::vector<double>{3.5}));  // (3 + 4) / 2
}

TEST(NegativeLogLikelihoodKernel, KDimensionalMatchesNaiveF64) {
  LossCase c;
  c.op = "NegativeLogLikelihoodLoss";
  c.scores = Tensor::from_doubles(DType::kF64, {3, 4, 2, 5}, random_values(120, 10));
  c.labels = labels_of(DType::kI32, {3, 2, 5}, random_labels(30, 4, 11));
  c.weights = Tensor::from_doubles(DType::kF64, {4}, {0.5, 1.5, 1, 2});
  c.ignore_index = 1;
  for (const char* reduction : {"none", "sum", "mean"}) {
    c.reduction = reduction;
    const NaiveLoss expected = naive_loss(c);
    expect_near_all(c.run()[0],
                    c.reduction == "none" ? expected.loss : std::vector{expected.reduced}, 1e-14);
  }
}

// The sum of 65,536 per-sample losses, the first 2^24 and the others 1, in pairwise_sum.h's
// order: the first block of 64 stays at 2^24 (each + 1 rounds back to even), the other 1,023
// blocks add 64 each, exactly; a left-to-right sum would stay at 2^24.
TEST(NegativeLogLikelihoodKernel, LongSumsArePairwise) {
  const int64_t n = 65536;
  std::vector<double> input(n, -1.0);
  input[0] = -16777216.0;
  LossCase c;
  c.op = "NegativeLogLikelihoodLoss";
  c.scores = Tensor::from_doubles(DType::kF32, {n, 1}, input);
  c.labels = labels_of(DType::kI64, {n}, std::vector<int64_t>(n, 0));
  c.reduction = "sum";
  const double sum = 16777216.0 + 64.0 * 1023;
  EXPECT_EQ(c.run()[0].element_as_double(0), sum);
  c.reduction = "mean";
  EXPECT_EQ(c.run()[0].element_as_double(0), static_cast<double>(static_cast<float>(sum) / n));
}

TEST(LossKernels, LabelOutOfRangeIsAnErrorNamingIt) {
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    LossCase c;
    c.op = op;
    c.scores = Tensor::from_doubles(DType::kF32, {3, 5}, random_values(15, 12));
    c.labels = labels_of(DType::kI64, {3}, {0, 7, 1});
    absl::StatusOr<std::vector<Tensor>> y = try_run(c.text(), c.inputs());
    ASSERT_FALSE(y.ok()) << op;
    EXPECT_THAT(std::string(y.status().message()), HasSubstr("label 7 at index [1]")) << op;
    // -1 is out of range too, unless it is the ignore_index.
    c.labels = labels_of(DType::kI32, {3}, {0, -1, 1});
    EXPECT_THAT(std::string(try_run(c.text(), c.inputs()).status().message()),
                HasSubstr("label -1"));
    c.ignore_index = -1;
    EXPECT_TRUE(try_run(c.text(), c.inputs()).ok()) << op;
  }
}

TEST(LossKernels, MeanOfOnlyIgnoredLabelsIsNaN) {
  LossCase c;
  c.scores = Tensor::from_doubles(DType::kF32, {2, 3}, random_values(6, 13));
  c.labels = labels_of(DType::kI64, {2}, {1, 1});
  c.ignore_index = 1;
  EXPECT_TRUE(std::isnan(c.run()[0].element_as_double(0)));
  c.reduction = "sum";
  EXPECT_EQ(c.run()[0].element_as_double(0), 0.0);
}

TEST(LossKernels, BitsDoNotDependOnThreadCount) {
  LossCase c;
  c.scores = Tensor::from_doubles(DType::kF32, {512, 10, 4}, random_values(512 * 40, 14));
  c.labels = labels_of(DType::kI64, {512, 4}, random_labels(512 * 4, 10, 15));
  c.log_prob = true;
  auto losses = [&] {
    std::vector<Tensor> all = c.run();
    LossCase none = c;
    none.reduction = "none";
    for (Tensor& t : none.run()) all.push_back(t);
    return all;
  };
  const std::vector<Tensor> one = on_cpu_threads(1, losses), four = on_cpu_threads(4, losses);
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace ampc
