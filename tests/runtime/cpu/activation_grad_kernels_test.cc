// The activation gradient CPU kernels (runtime/cpu/activation_grad.cc) against f64 references
// written here independently of the kernels' formulas (Gelu's derivative through erfc and
// cosh, itself checked against central differences of Gelu), exact values for ReluGrad and
// LeakyReluGrad, and, for f16/bf16, bit for bit against the f32 kernel's result rounded once.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::elements;
using testing::typed_tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The text IR of `%dx = ampc.OP<ATTRS>(%dy, %s)` over operands of `type`.
std::string grad_graph(const std::string& op, const std::string& attrs, const TensorType& type) {
  const std::string t = type_to_string(type);
  return str_cat("graph g(%dy: ", t, ", %s: ", t, ") opset(20, ampc:1) {\n  %dx = ampc.", op,
                 attrs.empty() ? "" : str_cat("<", attrs, ">"), "(%dy, %s) : ", t,
                 "\n  return %dx\n}\n");
}

Tensor run_grad(const std::string& op, const Tensor& dy, const Tensor& saved,
                const std::string& attrs = "") {
  std::vector<Tensor> out = testing::run(grad_graph(op, attrs, dy.type()), {dy, saved});
  return out.empty() ? Tensor(dy.type()) : out[0];
}

// Parse, verify and run, for the cases that must fail somewhere along the way.
absl::Status grad_status(const std::string& text, const std::vector<Tensor>& inputs) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, parse_graph(text));
  AMPC_RETURN_IF_ERROR(verify(*graph));
  return runtime::interpret_graph(*graph, inputs).status();
}

// ---- f64 references -------------------------------------------------------------------------

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * std::pow(x, 3))));
}
// Phi(x) + x * phi(x).
double gelu_slope_ref(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
}
// 0.5 (1 + tanh u) + 0.5 x sech^2(u) u'.
double gelu_tanh_slope_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double u = k * (x + 0.044715 * std::pow(x, 3));
  const double sech = 1.0 / std::cosh(u);
  return 0.5 * (1.0 + std::tanh(u)) + 0.5 * x * sech * sech * k * (1.0 + 3 * 0.044715 * x * x);
}

TEST(ActivationGradReferences, GeluSlopesMatchCentralDifferences) {
  for (double x = -6; x <= 6; x += 0.125) {
    const double h = 1e-5;
    EXPECT_NEAR(gelu_slope_ref(x), (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h), 1e-9) << x;
    EXPECT_NEAR(gelu_tanh_slope_ref(x), (gelu_tanh_ref(x + h) - gelu_tanh_ref(x - h)) / (2 * h),
                1e-9)
        << x;
  }
}

// ---- ReluGrad, LeakyReluGrad --------------------------------------------------------------------

template <typename T>
void expect_relu_grads_exact(DType dtype) {
  // Values exact in every float type, so the references are exact too.
  const std::vector<double> dy = {1.5, -2.25, 0.75, -3.0, 0.5, 8.0, -0.125, 2.0};
  const std::vector<double> s = {2.0, 1e-3, 0.0, -0.0, -4.5, kNaN, -1e-3, 0.25};
  const Tensor dy_t = Tensor::from_doubles(dtype, {8}, dy);
  const Tensor s_t = Tensor::from_doubles(dtype, {8}, s);
  const Tensor relu = run_grad("ReluGrad", dy_t, s_t);
  const Tensor leaky = run_grad("LeakyReluGrad", dy_t, s_t, "alpha=0.5");
  for (size_t i = 0; i < dy.size(); ++i) {
    // PyTorch's threshold_backward: 0 where y <= 0, so a NaN output passes dy.
    const double relu_ref = s[i] <= 0 ? 0.0 : dy[i];
    const double leaky_ref = s[i] > 0 ? dy[i] : 0.5 * dy[i];
    EXPECT_EQ(relu.element_as_double(i), relu_ref) << dtype_name(dtype) << " element " << i;
    EXPECT_EQ(leaky.element_as_double(i), leaky_ref) << dtype_name(dtype) << " element " << i;
  }
}

TEST(ActivationGradKernels, ReluGradAndLeakyReluGradAreExact) {
  expect_relu_grads_exact<float>(DType::kF32);
  expect_relu_grads_exact<double>(DType::kF64);
  expect_relu_grads_exact<Float16>(DType::kF16);
  expect_relu_grads_exact<BFloat16>(DType::kBF16);
}

TEST(ActivationGradKernels, LeakyReluGradScalesByTheF32Alpha) {
  const Tensor dy = Tensor::from_f32({2}, {3.0f, 3.0f});
  const Tensor x = Tensor::from_f32({2}, {-1.0f, 1.0f});
  // The default alpha, 0.01, as the attribute holds it (an f32), times dy in f32.
  EXPECT_EQ(elements<float>(run_grad("LeakyReluGrad", dy, x)),
            (std::vector<float>{3.0f * 0.01f, 3.0f}));
  const Tensor dy64 = Tensor::from_doubles(DType::kF64, {1}, {3.0});
  const Tensor x64 = Tensor::from_doubles(DType::kF64, {1}, {-1.0});
  EXPECT_EQ(elements<double>(run_grad("LeakyReluGrad", dy64, x64))[0],
            3.0 * static_cast<double>(0.01f));
}

// ---- GeluGrad ---------------------------------------------------------------------------------

struct GeluCase {
  std::string attrs;
  double (*slope)(double);
};
const GeluCase kGeluCases[] = {{"", gelu_slope_ref},
                               {"approximate=\"none\"", gelu_slope_ref},
                               {"approximate=\"tanh\"", gelu_tanh_slope_ref}};

// x swept over [-8, 8] plus special points; dy of either sign.
void gelu_inputs(std::vector<double>& x, std::vector<double>& dy) {
  x = {0.0, -0.0, 1.0, -1.0, -0.7518, 1e-4, -20.0, 20.0};
  for (int i = 0; i <= 160; ++i) x.push_back(-8.0 + 0.1 * i);
  dy = testing::random_values(static_cast<int64_t>(x.size()), 11);
}

TEST(ActivationGradKernels, GeluGradMatchesF64ReferenceInF32AndF64) {
  std::vector<double> x, dy;
  gelu_inputs(x, dy);
  const Shape shape = {static_cast<int64_t>(x.size())};
  for (const GeluCase& c : kGeluCases) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const Tensor dy_t = Tensor::from_doubles(dtype, shape, dy);
      const Tensor x_t = Tensor::from_doubles(dtype, shape, x);
      const Tensor dx = run_grad("GeluGrad", dy_t, x_t, c.attrs);
      // Relative to |dy| as well: the slope cancels to 0 near x = -0.75.
      const double tolerance = dtype == DType::kF32 ? 2e-6 : 1e-13;
      for (size_t i = 0; i < x.size(); ++i) {
        const double xi = x_t.element_as_double(i);
        const double dyi = dy_t.element_as_double(i);
        const double expected = dyi * c.slope(xi);
        EXPECT_NEAR(dx.element_as_double(i), expected,
                    tolerance * (std::fabs(expected) + std::fabs(dyi)))
            << dtype_name(dtype) << " GeluGrad<" << c.attrs << ">(dy=" << dyi << ", x=" << xi
            << ")";
      }
    }
  }
}

// f16 and bf16 compute in f32 and round once: their result is the f32 kernel's on the upcast
// operands, rounded.
template <typename T>
void expect_rounded_once(DType dtype) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-6.0f, 6.0f);
  std::vector<T> dy, s;
  for (int i = 0; i < 512; ++i) {
    dy.push_back(T(uniform(rng)));
    s.push_back(T(uniform(rng)));
  }
  for (float special : {0.0f, -0.0f, 1e-3f, -12.0f, 12.0f}) {
    dy.push_back(T(1.0f));
    s.push_back(T(special));
  }
  const Tensor dy_t = typed_tensor<T>(dtype, dy);
  const Tensor s_t = typed_tensor<T>(dtype, s);
  const Shape shape = dy_t.shape();
  const Tensor dy32 = testing::rounded(DType::kF32, shape, testing::upcast(dy_t));
  const Tensor s32 = testing::rounded(DType::kF32, shape, testing::upcast(s_t));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ReluGrad", ""},
      {"LeakyReluGrad", ""},
      {"LeakyReluGrad", "alpha=0.3"},
      {"GeluGrad", ""},
      {"GeluGrad", "approximate=\"tanh\""}};
  for (const auto& [op, attrs] : cases) {
    const std::vector<float> f32 = elements<float>(run_grad(op, dy32, s32, attrs));
    const Tensor low = run_grad(op, dy_t, s_t, attrs);
    EXPECT_EQ(testing::bits_of(low), testing::bits_of(testing::rounded(dtype, shape, f32)))
        << dtype_name(dtype) << " " << op << "<" << attrs << ">";
  }
}

TEST(ActivationGradKernels, F16RoundsTheF32ResultOnce) {
  expect_rounded_once<Float16>(DType::kF16);
}
TEST(ActivationGradKernels, BF16RoundsTheF32ResultOnce) {
  expect_rounded_once<BFloat16>(DType::kBF16);
}

TEST(ActivationGradKernels, ResultsDoNotDependOnTheThreadCount) {
  const int64_t n = int64_t{1} << 17;
  const Tensor dy = Tensor::from_doubles(DType::kF32, {n}, testing::random_values(n, 3));
  const Tensor x = Tensor::from_doubles(DType::kF32, {n}, testing::random_values(n, 4, 3.0));
  for (const std::string op : {"ReluGrad", "LeakyReluGrad", "GeluGrad"}) {
    const Tensor one = testing::on_cpu_threads(1, [&] { return run_grad(op, dy, x); });
    const Tensor four = testing::on_cpu_threads(4, [&] { return run_grad(op, dy, x); });
    EXPECT_TRUE(testing::same_tensor(four, one)) << op;
  }
}

TEST(ActivationGradKernels, RejectsMismatchedOperandsAndUnknownApproximations) {
  const Tensor a = Tensor::from_f32({2}, {1.0f, 2.0f});
  const TensorType f32_2{DType::kF32, {2}};
  const absl::Status bad_approximation =
      grad_status(grad_graph("GeluGrad", "approximate=\"erf\"", f32_2), {a, a});
  ASSERT_FALSE(bad_approximation.ok());
  EXPECT_NE(bad_approximation.message().find("approximate"), std::string_view::npos)
      << bad_approximation;

  const std::string mixed =
      "graph g(%dy: f32[2], %y: f16[2]) opset(20, ampc:1) {\n"
      "  %dx = ampc.ReluGrad(%dy, %y) : f32[2]\n  return %dx\n}\n";
  EXPECT_FALSE(grad_status(mixed, {a, Tensor::from_doubles(DType::kF16, {2}, {1, 2})}).ok());
  const std::string shapes =
      "graph g(%dy: f32[2], %y: f32[2,1]) opset(20, ampc:1) {\n"
      "  %dx = ampc.ReluGrad(%dy, %y) : f32[2]\n  return %dx\n}\n";
  const absl::Status shape_status =
      grad_status(shapes, {a, Tensor::from_f32({2, 1}, {1.0f, 2.0f})});
  ASSERT_FALSE(shape_status.ok());
  EXPECT_NE(shape_status.message().find("one shape"), std::string_view::npos) << shape_status;
}

}  // namespace
}  // namespace ampc
