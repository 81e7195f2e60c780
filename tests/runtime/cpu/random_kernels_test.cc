// The random ops' CPU kernels (ops/random.cc, runtime/random_math.h) against the distributions
// they draw from: the moments and tail fractions of 2^16 draws within 5 standard errors of the
// distribution's (a test a wrong formula fails and a right one passes but for a 6e-7 chance, and
// the draws are fixed, so it passes or fails the same way every run), the support (uniform draws
// in [low, high) and exact in the output type; Bernoulli's 0 and 1), and the draws a function of
// (seed, random stream, element) alone: the same on 1 and 4 threads and run after run, new for a
// new stream or seed, and uncorrelated between neighbouring elements.
#include <cmath>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::on_cpu_threads;
using testing::run1;
using testing::try_run;

constexpr int64_t kDraws = 1 << 16;

// A one-node graph with no inputs: `%y = op<attrs>() : type`.
std::string generator(std::string_view op, std::string_view attrs, std::string_view type) {
  return str_cat("graph g() opset(17) {\n  %y = ", op, "<", attrs, ">() : ", type,
                 "\n  return %y\n}\n");
}

std::vector<double> draws(std::string_view op, std::string_view attrs, std::string_view type) {
  return run1(generator(op, attrs, type)).to_double_vector();
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  const double mean = mean_of(v);
  double sum = 0;
  for (double x : v) sum += (x - mean) * (x - mean);
  return sum / static_cast<double>(v.size());
}

double fraction_below(const std::vector<double>& v, double bound) {
  int64_t count = 0;
  for (double x : v) count += x < bound;
  return static_cast<double>(count) / static_cast<double>(v.size());
}

// 5 standard errors of a fraction p of n draws.
double fraction_tolerance(double p, int64_t n) {
  return 5 * std::sqrt(p * (1 - p) / static_cast<double>(n));
}

// The correlation of element i with element i + 1.
double neighbour_correlation(const std::vector<double>& v) {
  const double mean = mean_of(v);
  double cross = 0;
  for (size_t i = 0; i + 1 < v.size(); ++i) cross += (v[i] - mean) * (v[i + 1] - mean);
  return cross / static_cast<double>(v.size() - 1) / variance_of(v);
}

TEST(RandomUniform, DrawsFillTheUnitIntervalEvenlyAndExactlyInEachType) {
  // dtype, significant bits: every draw is a multiple of 2^-digits below 1.
  const std::vector<std::pair<std::string, int>> types = {
      {"f32", 24}, {"f64", 53}, {"f16", 11}, {"bf16", 8}};
  for (const auto& [dtype, digits] : types) {
    SCOPED_TRACE(dtype);
    const std::vector<double> u =
        draws("RandomUniform", str_cat("dtype=", dtype, ", shape=[", kDraws, "]"),
              str_cat(dtype, "[", kDraws, "]"));
    ASSERT_EQ(u.size(), static_cast<size_t>(kDraws));
    for (double x : u) {
      ASSERT_GE(x, 0.0);
      ASSERT_LT(x, 1.0);
      const double scaled = std::ldexp(x, digits);
      ASSERT_EQ(scaled, std::floor(scaled)) << x << " is not a multiple of 2^-" << digits;
    }
    // Uniform on [0, 1): mean 1/2 (variance 1/12), a quarter below 1/4, 1/12 variance.
    EXPECT_NEAR(mean_of(u), 0.5, 5 * std::sqrt(1.0 / 12 / kDraws));
    EXPECT_NEAR(fraction_below(u, 0.25), 0.25, fraction_tolerance(0.25, kDraws));
    EXPECT_NEAR(variance_of(u), 1.0 / 12, 5 * std::sqrt(1.0 / 180 / kDraws));
    EXPECT_NEAR(neighbour_correlation(u), 0.0, 5 / std::sqrt(double{kDraws}));
  }
}

TEST(RandomUniform, DrawsBetweenLowAndHigh) {
  const std::vector<double> u =
      draws("RandomUniform", str_cat("low=-2.0, high=3.0, shape=[", kDraws, "]"),
            str_cat("f32[", kDraws, "]"));
  for (double x : u) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 3.0);
  }
  // Uniform on [-2, 3): mean 1/2, variance 25/12.
  EXPECT_NEAR(mean_of(u), 0.5, 5 * std::sqrt(25.0 / 12 / kDraws));
  EXPECT_NEAR(fraction_below(u, 0.0), 0.4, fraction_tolerance(0.4, kDraws));
}

TEST(RandomNormal, DrawsHaveTheNormalsMomentsAndTails) {
  for (const char* dtype : {"f32", "f64", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::vector<double> z =
        draws("RandomNormal", str_cat("dtype=", dtype, ", shape=[", kDraws, "]"),
              str_cat(dtype, "[", kDraws, "]"));
    // Standard normal: mean 0 (standard error 1/sqrt(n)), variance 1 (sqrt(2/n)); Phi(1) =
    // 0.8413447, Phi(-2) = 0.0227501 of the draws below 1 and -2.
    EXPECT_NEAR(mean_of(z), 0.0, 5 / std::sqrt(double{kDraws}));
    EXPECT_NEAR(variance_of(z), 1.0, 5 * std::sqrt(2.0 / kDraws));
    EXPECT_NEAR(fraction_below(z, 1.0), 0.8413447, fraction_tolerance(0.8413447, kDraws));
    EXPECT_NEAR(fraction_below(z, -2.0), 0.0227501, fraction_tolerance(0.0227501, kDraws));
    // The two halves of a Box-Muller pair (elements 2i and 2i + 1 use words 4i .. 4i + 3) and
    // the pairs themselves are independent.
    EXPECT_NEAR(neighbour_correlation(z), 0.0, 5 / std::sqrt(double{kDraws}));
    for (double x : z) ASSERT_TRUE(std::isfinite(x));
  }
  const std::vector<double> shifted =
      draws("RandomNormal", str_cat("mean=3.0, scale=0.5, shape=[", kDraws, "]"),
            str_cat("f32[", kDraws, "]"));
  EXPECT_NEAR(mean_of(shifted), 3.0, 5 * 0.5 / std::sqrt(double{kDraws}));
  EXPECT_NEAR(variance_of(shifted), 0.25, 5 * 0.25 * std::sqrt(2.0 / kDraws));
}

TEST(RandomLike, DrawsTheInputsShapeInItsTypeOrTheGivenOne) {
  const Tensor x = Tensor::from_f32({2, 3}, {0, 0, 0, 0, 0, 0});
  const Tensor like = run1(R"(
      graph g(%x: f32[2,3]) opset(17) {
        %y = RandomNormalLike(%x) : f32[2,3]
        return %y
      })",
                           {x});
  // The same key (seed 0, stream 0) and elements as RandomNormal of that shape: the same draws.
  const Tensor plain = run1(generator("RandomNormal", "shape=[2,3]", "f32[2,3]"));
  EXPECT_EQ(like.to_double_vector(), plain.to_double_vector());
  const Tensor f16 = run1(R"(
      graph g(%x: i64[4]) opset(17) {
        %y = RandomUniformLike<dtype=f16, low=1.0, high=2.0>(%x) : f16[4]
        return %y
      })",
                          {Tensor::from_i64({4}, {9, 9, 9, 9})});
  for (double v : f16.to_double_vector()) {
    EXPECT_GE(v, 1.0);
    EXPECT_LT(v, 2.0);
  }
}

TEST(Bernoulli, DrawsOneWithTheElementsProbability) {
  const std::vector<float> p(kDraws, 0.3f);
  const std::string graph = str_cat("graph g(%p: f32[", kDraws, "]) opset(17) {\n",
                                    "  %y = Bernoulli(%p) : f32[", kDraws, "]\n  return %y\n}\n");
  const std::vector<double> y = run1(graph, {Tensor::from_f32({kDraws}, p)}).to_double_vector();
  for (double v : y) ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
  // 0.3f is 0.30000001192...; its fraction of ones.
  EXPECT_NEAR(1.0 - fraction_below(y, 0.5), 0.3, fraction_tolerance(0.3, kDraws));
  EXPECT_NEAR(neighbour_correlation(y), 0.0, 5 / std::sqrt(double{kDraws}));

  // p = 0 never draws 1, p = 1 always; stored as bool, i64 or f16.
  const Tensor edges = Tensor::from_f32({6}, {0, 1, 0, 1, 1, 0});
  for (const char* dtype : {"bool", "i64", "f16"}) {
    SCOPED_TRACE(dtype);
    const Tensor out =
        run1(str_cat("graph g(%p: f32[6]) opset(17) {\n  %y = Bernoulli<dtype=", dtype,
                     ">(%p) : ", dtype, "[6]\n  return %y\n}\n"),
             {edges});
    EXPECT_EQ(out.to_double_vector(), edges.to_double_vector());
  }
}

TEST(Bernoulli, RejectsAProbabilityOutsideTheUnitIntervalNamingTheElement) {
  for (float bad : {1.5f, -0.25f, std::nanf("")}) {
    const absl::StatusOr<std::vector<Tensor>> out =
        try_run(R"(
        graph g(%p: f32[4]) opset(17) {
          %y = Bernoulli(%p) : f32[4]
          return %y
        })",
                {Tensor::from_f32({4}, {0.5f, 1.0f, bad, bad})});
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_NE(std::string(out.status().message()).find("element 2 of input 0"), std::string::npos)
        << out.status();
  }
}

TEST(RandomDraws, DependOnSeedStreamAndElementOnly) {
  const std::string graph = generator("RandomNormal", "seed=5.0, shape=[4096]", "f32[4096]");
  const Tensor one = on_cpu_threads(1, [&] { return run1(graph); });
  const Tensor four = on_cpu_threads(4, [&] { return run1(graph); });
  EXPECT_EQ(one.to_double_vector(), four.to_double_vector());
  EXPECT_EQ(run1(graph).to_double_vector(), one.to_double_vector());

  // Another seed: other draws (equal ones would be a coincidence of one in 2^24 per element).
  const std::vector<double> other =
      run1(generator("RandomNormal", "seed=6.0, shape=[4096]", "f32[4096]")).to_double_vector();
  int same = 0;
  for (size_t i = 0; i < other.size(); ++i) same += other[i] == one.to_double_vector()[i];
  EXPECT_LT(same, 8);

  // Another random stream (the next training step): other draws; the same stream: the same.
  auto on_stream = [&](uint64_t stream) {
    absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> session =
        runtime::InferenceSession::create(testing::parse_or_fail(graph));
    EXPECT_TRUE(session.ok()) << session.status();
    (*session)->set_random_stream(stream);
    absl::StatusOr<std::map<std::string, Tensor>> out = (*session)->run({});
    EXPECT_TRUE(out.ok()) << out.status();
    return out->at("y").to_double_vector();
  };
  EXPECT_EQ(on_stream(0), one.to_double_vector());
  const std::vector<double> next = on_stream(1);
  EXPECT_EQ(on_stream(1), next);
  same = 0;
  for (size_t i = 0; i < next.size(); ++i) same += next[i] == one.to_double_vector()[i];
  EXPECT_LT(same, 8);
}

}  // namespace
}  // namespace ampc
