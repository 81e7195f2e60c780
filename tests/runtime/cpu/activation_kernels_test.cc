// The activation CPU kernels (runtime/cpu/activation.cc) against f64 references computed here,
// hand values for the exact ones, and, for f16/bf16, bit for bit against "upcast to f32, apply
// the documented f32 formula, round once".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::elements;
using testing::try_op;
using testing::typed_tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Gelu's first opset.
constexpr int64_t kOpset = 20;

// `%y = OP<ATTRS>(%x) : same type`.
Tensor activation(const std::string& op, const Tensor& x, const std::string& attrs = "") {
  return testing::run_op(op, attrs, {x}, x.type(), kOpset);
}

// An even sweep of [low, high] plus a few special points.
std::vector<float> sweep(float low, float high, int count) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f};
  for (int i = 0; i < count; ++i) values.push_back(low + (high - low) * i / (count - 1));
  return values;
}

// f64 references of the ONNX definitions.
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double inner = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

// |y - ref| within 1e-6 relative, with an absolute floor of 1e-6 * scale for results that
// cancel (Gelu near its negative tail).
void expect_close(const std::string& what, const std::vector<float>& x, const std::vector<float>& y,
                  double (*reference)(double), double scale = 0.0) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double expected = reference(x[i]);
    EXPECT_NEAR(y[i], expected, 1e-6 * std::fabs(expected) + 1e-6 * scale)
        << what << "(" << x[i] << ")";
  }
}

TEST(ActivationKernels, ReluAndLeakyReluAreExact) {
  const std::vector<float> x = {-3.5f, -0.0f, 0.0f, 2.25f, -1e-30f, kNaN};
  const Tensor t = Tensor::from_f32({6}, x);
  const std::vector<float> relu = elements<float>(activation("Relu", t));
  EXPECT_EQ(std::vector<float>(relu.begin(), relu.begin() + 5),
            (std::vector<float>{0.0f, 0.0f, 0.0f, 2.25f, 0.0f}));
  EXPECT_TRUE(std::isnan(relu[5]));
  const std::vector<float> leaky = elements<float>(activation("LeakyRelu", t));
  EXPECT_EQ(leaky[0], 0.01f * -3.5f);  // default alpha, rounded to f32 as the attribute is
  EXPECT_EQ(leaky[3], 2.25f);
  EXPECT_TRUE(std::isnan(leaky[5]));
  const std::vector<float> steep = elements<float>(activation("LeakyRelu", t, "alpha=0.5"));
  EXPECT_EQ(steep[0], -1.75f);
  EXPECT_EQ(steep[4], -0.5e-30f);
}

TEST(ActivationKernels, SmoothActivationsMatchF64Reference) {
  const std::vector<float> x = sweep(-6.0f, 6.0f, 97);
  const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x);
  expect_close("Sigmoid", x, elements<float>(activation("Sigmoid", t)), sigmoid_ref);
  expect_close("Tanh", x, elements<float>(activation("Tanh", t)),
               [](double v) { return std::tanh(v); });
  expect_close("Erf", x, elements<float>(activation("Erf", t)),
               [](double v) { return std::erf(v); });
  expect_close("Gelu", x, elements<float>(activation("Gelu", t)), gelu_ref, 1.0);
  expect_close("Gelu", x, elements<float>(activation("Gelu", t, "approximate=\"none\"")), gelu_ref,
               1.0);
  expect_close("Gelu tanh", x, elements<float>(activation("Gelu", t, "approximate=\"tanh\"")),
               gelu_tanh_ref, 1.0);
}

// Below x = -5.4, 1 + erf(x / sqrt(2)) cancels to nothing in f32 (f32 erf is -1 there), and a
// Gelu written that way returns -0 or a value off by 50%. The reference is 0.5 x erfc(-x/sqrt(2))
// in f64 (the same value without the cancellation). In f32 the argument z = -x/sqrt(2) is rounded
// once (half an ulp), which erfc's condition number 2 z^2 magnifies: f32 must stay within
// 2 + 2 z^2 ulps (2.5e-6 relative at x = -13, against 100% before); bf16 within one bf16 ulp of
// its rounding. Down to where the result leaves the normal range.
TEST(ActivationKernels, GeluKeepsItsNegativeTail) {
  auto reference = [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); };
  const std::vector<float> x = sweep(-13.0f, -4.0f, 181);
  const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x);
  const std::vector<float> y = elements<float>(activation("Gelu", t));
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected = static_cast<float>(reference(x[i]));
    const float ulp = std::fabs(std::nextafter(expected, 0.0f) - expected);
    const double z = x[i] / std::sqrt(2.0);
    EXPECT_NEAR(y[i], expected, (2 + 2 * z * z) * ulp) << "Gelu(" << x[i] << ")";
  }
  const Tensor low =
      Tensor::from_doubles(DType::kBF16, t.shape(), std::vector<double>(x.begin(), x.end()));
  const std::vector<double> x_bf16 = low.to_double_vector();
  const std::vector<double> y_bf16 = activation("Gelu", low).to_double_vector();
  for (size_t i = 0; i < x_bf16.size(); ++i) {
    const double expected =
        Tensor::from_doubles(DType::kBF16, {}, {reference(x_bf16[i])}).element_as_double(0);
    const double ulp = std::ldexp(1.0, std::ilogb(expected) - 7);
    EXPECT_NEAR(y_bf16[i], expected, ulp) << "bf16 Gelu(" << x_bf16[i] << ")";
  }
}

// Softplus, HardSigmoid, HardSwish, Sin and Cos against their ONNX definitions in f64.
double softplus_ref(double x) { return std::log(std::exp(x) + 1.0); }
double hard_sigmoid_ref(double x) { return std::max(0.0, std::min(1.0, 0.2 * x + 0.5)); }
double hard_swish_ref(double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); }

TEST(ActivationKernels, NewerActivationsMatchF64Reference) {
  const std::vector<float> x = sweep(-7.0f, 7.0f, 113);
  const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x);
  expect_close("Softplus", x, elements<float>(activation("Softplus", t)), softplus_ref);
  expect_close("HardSigmoid", x, elements<float>(activation("HardSigmoid", t)), hard_sigmoid_ref,
               1.0);
  expect_close("HardSwish", x, elements<float>(activation("HardSwish", t)), hard_swish_ref, 1.0);
  expect_close(
      "Sin", x, elements<float>(activation("Sin", t)), [](double v) { return std::sin(v); }, 1.0);
  expect_close(
      "Cos", x, elements<float>(activation("Cos", t)), [](double v) { return std::cos(v); }, 1.0);
  // PyTorch exports hardsigmoid with alpha = 1/6: the kinks move to -3 and 3.
  const std::vector<float> kinks = {-4.0f, -3.0f, 0.0f, 3.0f, 4.0f};
  const std::vector<float> y = elements<float>(
      activation("HardSigmoid", Tensor::from_f32({5}, kinks), "alpha=0.16666667, beta=0.5"));
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.5f, 1.0f, 1.0f}));
}

// Elu, Selu, Celu, Mish and Softsign against their ONNX definitions in f64.
constexpr double kSeluAlpha = 1.67326319217681884765625;
constexpr double kSeluGamma = 1.05070102214813232421875;
double elu_ref(double x, double alpha) { return x >= 0 ? x : alpha * (std::exp(x) - 1); }
double selu_ref(double x, double alpha, double gamma) {
  return x > 0 ? gamma * x : gamma * (alpha * std::exp(x) - alpha);
}
double celu_ref(double x, double alpha) {
  return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1));
}
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double softsign_ref(double x) { return x / (1 + std::fabs(x)); }

TEST(ActivationKernels, ExponentialFamilyAndSoftsignMatchF64Reference) {
  const std::vector<float> x = sweep(-9.0f, 9.0f, 121);
  const Tensor t = Tensor::from_f32({static_cast<int64_t>(x.size())}, x);
  expect_close("Elu", x, elements<float>(activation("Elu", t)),
               [](double v) { return elu_ref(v, 1.0); });
  expect_close("Elu alpha 0.5", x, elements<float>(activation("Elu", t, "alpha=0.5")),
               [](double v) { return elu_ref(v, 0.5); });
  expect_close("Selu", x, elements<float>(activation("Selu", t)),
               [](double v) { return selu_ref(v, kSeluAlpha, kSeluGamma); });
  expect_close("Selu 2, 3", x, elements<float>(activation("Selu", t, "alpha=2.0, gamma=3.0")),
               [](double v) { return selu_ref(v, 2.0, 3.0); });
  expect_close("Celu", x, elements<float>(activation("Celu", t)),
               [](double v) { return celu_ref(v, 1.0); });
  expect_close("Celu alpha 2", x, elements<float>(activation("Celu", t, "alpha=2.0")),
               [](double v) { return celu_ref(v, 2.0); });
  expect_close("Mish", x, elements<float>(activation("Mish", t)), mish_ref, 1.0);
  expect_close("Softsign", x, elements<float>(activation("Softsign", t)), softsign_ref);
}

// expm1 keeps Elu's relative precision just below 0, where exp(x) - 1 cancels; Mish neither
// overflows for large x nor loses its tiny negative tail.
TEST(ActivationKernels, EluAndMishAreAccurateInTheirTails) {
  const std::vector<float> small = {-1e-6f, -1e-3f};
  const std::vector<float> elu = elements<float>(activation("Elu", Tensor::from_f32({2}, small)));
  EXPECT_NEAR(elu[0], std::expm1(-1e-6), 1e-7 * 1e-6);
  EXPECT_NEAR(elu[1], std::expm1(-1e-3), 1e-7 * 1e-3);
  const std::vector<float> x = {-30.0f, 100.0f, 1000.0f};
  const std::vector<float> mish = elements<float>(activation("Mish", Tensor::from_f32({3}, x)));
  EXPECT_NEAR(mish[0], mish_ref(-30.0), 1e-6 * std::fabs(mish_ref(-30.0)));
  EXPECT_EQ(mish[1], 100.0f);
  EXPECT_EQ(mish[2], 1000.0f);
}

// PRelu's slope broadcasts to X; the products are single IEEE multiplications.
TEST(ActivationKernels, PReluBroadcastsTheSlopeAndIsExact) {
  const Tensor x =
      Tensor::from_f32({2, 3, 2}, {-1, 2, -3, 4, -5, 6, -0.5f, 0, -0.0f, kNaN, -2, 1e-30f});
  const Tensor slope = Tensor::from_f32({3, 1}, {0.25f, -1, 3});
  const std::vector<float> y =
      elements<float>(testing::run_op("PRelu", "", {x, slope}, x.type(), kOpset));
  ASSERT_EQ(y.size(), 12u);
  const std::vector<float> expected = {-0.25f, 2, 3, 4, -15, 6, -0.125f, 0, 0, kNaN, -6, 1e-30f};
  for (size_t i = 0; i < y.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << i;
    } else {
      EXPECT_EQ(y[i], expected[i]) << i;
    }
  }
}

// ln(exp(x) + 1) overflows f32's exp for x > 88; the kernel's form does not, and keeps the
// relative precision of the tiny values far into the negative tail.
TEST(ActivationKernels, SoftplusIsAccurateFarIntoBothTails) {
  const std::vector<float> x = {-100.0f, -30.0f, 30.0f, 100.0f, 1000.0f};
  const std::vector<float> y = elements<float>(activation("Softplus", Tensor::from_f32({5}, x)));
  EXPECT_NEAR(y[0], std::exp(-100.0), 1e-45);
  EXPECT_NEAR(y[1], std::log1p(std::exp(-30.0)), 1e-6 * std::exp(-30.0));
  EXPECT_EQ(y[2], 30.0f);
  EXPECT_EQ(y[3], 100.0f);
  EXPECT_EQ(y[4], 1000.0f);
}

TEST(ActivationKernels, SigmoidIsAccurateFarIntoBothTails) {
  const std::vector<float> x = {-87.0f, -60.0f, -20.0f, 20.0f, 60.0f, 100.0f};
  const Tensor t = Tensor::from_f32({6}, x);
  const std::vector<float> y = elements<float>(activation("Sigmoid", t));
  // In the negative tail sigmoid(x) ~ exp(x): a relative error, not 1 - tiny, is what counts.
  expect_close("Sigmoid", x, y, sigmoid_ref);
  EXPECT_EQ(y[5], 1.0f);
  // Beyond f32's exp range the naive 1 / (1 + exp(-x)) gives 0 for x = -100; exp(x)/(1+exp(x))
  // gives the subnormal nearest e^-100.
  const Tensor far = Tensor::from_f32({1}, {-100.0f});
  const float tiny = elements<float>(activation("Sigmoid", far))[0];
  EXPECT_GT(tiny, 0.0f);
  EXPECT_NEAR(tiny, std::exp(-100.0), 1e-45);
}

TEST(ActivationKernels, F64ComputesInF64) {
  const std::vector<double> x = {-30.0, -2.5, -1e-3, 0.5, 3.0};
  const Tensor t = Tensor::from_doubles(DType::kF64, {5}, x);
  const std::vector<double> sigmoid = elements<double>(activation("Sigmoid", t));
  const std::vector<double> gelu = elements<double>(activation("Gelu", t));
  for (size_t i = 0; i < x.size(); ++i) {
    // f32 would be off by ~1e-7 relative; f64 agrees to a few ulps (more where 1 + erf cancels).
    EXPECT_NEAR(sigmoid[i], sigmoid_ref(x[i]), 1e-14 * sigmoid_ref(x[i])) << x[i];
    EXPECT_NEAR(gelu[i], gelu_ref(x[i]), 1e-12 * std::fabs(gelu_ref(x[i])) + 1e-17) << x[i];
  }
}

// The f32 formulas the kernels document, written out here.
float sigmoid_f32(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}
// 1 + erf(x / sqrt(2)) as erfc(-x / sqrt(2)), which does not cancel for negative x.
float gelu_f32(float x) { return 0.5f * x * std::erfc(-x * 0.70710678118654752440f); }
float softplus_f32(float v) { return (v > 0.0f ? v : 0.0f) + std::log1p(std::exp(-std::fabs(v))); }
float gelu_tanh_f32(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}

template <typename T>
void expect_rounded_once(DType dtype) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  std::vector<T> x;
  for (int i = 0; i < 512; ++i) x.push_back(T(uniform(rng)));
  for (float special : {0.0f, -0.0f, 1e-3f, -12.0f, 12.0f}) x.push_back(T(special));
  const Tensor t = typed_tensor<T>(dtype, x);
  struct Case {
    std::string op, attrs;
    float (*f32)(float);
  };
  const std::vector<Case> cases = {
      {"Sigmoid", "", sigmoid_f32},
      {"Gelu", "", gelu_f32},
      {"Gelu", "approximate=\"tanh\"", gelu_tanh_f32},
      {"Tanh", "", [](float v) { return std::tanh(v); }},
      {"Erf", "", [](float v) { return std::erf(v); }},
      {"Relu", "", [](float v) { return v < 0.0f ? 0.0f : v; }},
      {"LeakyRelu", "", [](float v) { return v < 0.0f ? 0.01f * v : v; }},
      {"Softplus", "", softplus_f32},
      {"Softsign", "", [](float v) { return v / (1.0f + std::fabs(v)); }},
      {"Elu", "", [](float v) { return v > 0.0f ? v : 1.0f * std::expm1(v); }},
      {"Elu", "alpha=0.3", [](float v) { return v > 0.0f ? v : 0.3f * std::expm1(v); }},
      {"Selu", "",
       [](float v) {
         const float inner = v > 0.0f ? v : static_cast<float>(kSeluAlpha) * std::expm1(v);
         return static_cast<float>(kSeluGamma) * inner;
       }},
      {"Celu", "alpha=2.0", [](float v) { return v > 0.0f ? v : 2.0f * std::expm1(v / 2.0f); }},
      {"Mish", "", [](float v) { return v * std::tanh(softplus_f32(v)); }},
      {"HardSigmoid", "", [](float v) { return std::max(0.0f, std::min(1.0f, 0.2f * v + 0.5f)); }},
      {"HardSwish", "",
       [](float v) {
         return v * std::max(0.0f, std::min(1.0f, v * static_cast<float>(1.0 / 6.0) + 0.5f));
       }},
      {"Sin", "", [](float v) { return std::sin(v); }},
      {"Cos", "", [](float v) { return std::cos(v); }},
  };
  for (const Case& c : cases) {
    const std::vector<T> y = elements<T>(activation(c.op, t, c.attrs));
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const T expected(c.f32(static_cast<float>(x[i])));
      EXPECT_EQ(y[i].bits, expected.bits)
          << c.op << c.attrs << "(" << static_cast<float>(x[i]) << ")";
    }
  }
}

TEST(ActivationKernels, F16RoundsTheF32FormulaOnce) { expect_rounded_once<Float16>(DType::kF16); }
TEST(ActivationKernels, BF16RoundsTheF32FormulaOnce) {
  expect_rounded_once<BFloat16>(DType::kBF16);
}

TEST(ActivationKernels, GeluRejectsAnUnknownApproximation) {
  const Tensor t = Tensor::from_f32({2}, {1.0f, 2.0f});
  absl::StatusOr<Tensor> y = try_op("Gelu", "approximate=\"erf\"", {t}, t.type(), kOpset);
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("approximate"), std::string_view::npos) << y.status();
}

}  // namespace
}  // namespace ampc
