// The f32 convolutions oneDNN runs (runtime/cpu/onednn_conv.h): which nodes it takes, that
// Conv, ConvGradData and ConvGradFilter on random values stay within the f32 sum bound of the
// direct f64 sums (tests/runtime/cpu/conv_test_util.h), the AMPC_CPU_CONV switch, and repeatable
// bits. Exact-value cases of every geometry run through the same kernels in conv_kernels_test and
// conv_grad_kernels_test.
#include "runtime/cpu/onednn_conv.h"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/conv_test_util.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using runtime::KernelContext;
using runtime::KernelState;
using runtime::TensorArg;
using runtime::cpu::ConvPass;
using testing::ConvCase;
using testing::on_cpu_threads;
using testing::random_values;
using testing::ScopedEnv;

// Geometries oneDNN's JIT kernels take on an AVX2 or AVX-512 CPU, with channel counts that fill
// its blocks, and small ones it may leave to the im2col kernels.
const ConvCase kCases[] = {
    {{4, 16, 12, 12}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1},
    {{2, 32, 15, 15}, {64, 32, 3, 3}, {2, 2}, {1, 1}, {1, 1, 0, 0}, 1},  // asymmetric pads
    {{2, 32, 10, 10}, {32, 32, 3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, 1},  // dilated
    {{2, 32, 9, 9}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 32},    // depthwise
    {{2, 64, 8, 8}, {32, 64, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1},    // pointwise
    {{2, 32, 8, 8}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 2},    // two groups
    {{2, 16, 50}, {32, 16, 5}, {2}, {1}, {2, 2}, 1},                     // 1-D
    {{1, 16, 6, 6, 6}, {16, 16, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, 1},  // 3-D
    {{2, 3, 16, 16}, {16, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1},  // a stem: 3 channels
    {{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 2}, {2, 1}, {1, 0, 2, 1}, 1},     // small and irregular
};

bool cpu_has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

// The text IR of the one node of `pass` for case `c` in f32.
std::string node_text(const ConvCase& c, ConvPass pass) {
  auto f32 = [](const Shape& shape) { return TensorType{DType::kF32, shape}; };
  switch (pass) {
    case ConvPass::kForward:
      return testing::one_node_graph("Conv", c.attrs(), {f32(c.x), f32(c.w), f32({c.w[0]})},
                                     {f32(c.y())});
    case ConvPass::kGradData:
      return testing::one_node_graph(
          "ampc.ConvGradData", str_cat(c.attrs(), ", input_shape=[", str_join(c.x, ", "), "]"),
          {f32(c.y()), f32(c.w)}, {f32(c.x)}, 17);
    case ConvPass::kGradFilter:
      return testing::one_node_graph(
          "ampc.ConvGradFilter",
          str_cat(c.attrs(), ", kernel_shape=[", str_join(c.kernel(), ", "), "]"),
          {f32(c.x), f32(c.y())}, {f32(c.w)}, 17);
  }
  return "";
}

// What make_onednn_conv makes for the node of `pass` (tensors without data: init reads types).
absl::StatusOr<std::unique_ptr<KernelState>> make_state(const ConvCase& c, ConvPass pass) {
  std::string text = node_text(c, pass);
  if (pass != ConvPass::kForward) {
    text.replace(text.find("opset(17)"), 9, "opset(17, ampc:1)");
  }
  const std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return absl::InvalidArgumentError("graph did not parse");
  const Node& node = *graph->nodes().front();
  KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
  for (const Value* operand : node.operands()) ctx.inputs.push_back({&operand->type(), nullptr});
  ctx.outputs.push_back({&node.output(0)->type(), nullptr});
  return runtime::cpu::make_onednn_conv(ctx, pass);
}

// Whether oneDNN takes every pass of `c`.
bool onednn_takes(const ConvCase& c) {
  for (ConvPass pass : {ConvPass::kForward, ConvPass::kGradData, ConvPass::kGradFilter}) {
    absl::StatusOr<std::unique_ptr<KernelState>> state = make_state(c, pass);
    if (!state.ok() || *state == nullptr) return false;
  }
  return true;
}

std::vector<double> absolute(std::vector<double> values) {
  for (double& v : values) v = std::fabs(v);
  return values;
}

// |got - exact| <= 2 (K + 1) 2^-24 sum |terms| per element, K the longest sum: f32 summation in
// any order, one rounding per addition.
void expect_within_sum_bound(const Tensor& got, const std::vector<double>& exact,
                             const std::vector<double>& magnitude, int64_t terms,
                             const std::string& what) {
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(exact.size())) << what;
  const double unit = 2.0 * static_cast<double>(terms + 1) * std::ldexp(1.0, -24);
  int failures = 0;
  for (size_t i = 0; i < exact.size() && failures < 5; ++i) {
    const double error = std::fabs(got.element_as_double(static_cast<int64_t>(i)) - exact[i]);
    if (error > unit * magnitude[i] + 1e-30) {
      ADD_FAILURE() << what << " element " << i << ": " << got.element_as_double(i) << " vs exact "
                    << exact[i] << " (bound " << unit * magnitude[i] << ")";
      ++failures;
    }
  }
}

TEST(OnednnConv, TakesTypicalConvolutionsOnAnAvx2Cpu) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "oneDNN's JIT kernels want AVX2 here";
  for (const ConvCase& c : {kCases[0], kCases[1], kCases[4]}) {
    SCOPED_TRACE(c.describe());
    for (ConvPass pass : {ConvPass::kForward, ConvPass::kGradData, ConvPass::kGradFilter}) {
      absl::StatusOr<std::unique_ptr<KernelState>> state = make_state(c, pass);
      ASSERT_TRUE(state.ok()) << state.status();
      ASSERT_NE(*state, nullptr) << "pass " << static_cast<int>(pass);
      const std::string name = runtime::cpu::onednn_conv_kernel_name(**state);
      EXPECT_TRUE(name.find("gemm") == std::string::npos && name.rfind("ref", 0) != 0) << name;
    }
  }
}

TEST(OnednnConv, RandomF32WithinTheSumBoundOfDirectF64Sums) {
  std::set<size_t> taken;  // the cases oneDNN's JIT kernels ran, by index
  for (size_t i = 0; i < std::size(kCases); ++i) {
    const ConvCase& c = kCases[i];
    SCOPED_TRACE(c.describe());
    if (onednn_takes(c)) taken.insert(i);
    const std::vector<double> x = random_values(num_elements(c.x), 41);
    const std::vector<double> w = random_values(num_elements(c.w), 42);
    const std::vector<double> b = random_values(c.w[0], 43);
    const std::vector<double> dy = random_values(num_elements(c.y()), 44);
    const int64_t patch = num_elements(c.kernel()) * c.w[1];

    const Tensor y = testing::run_op(
        "Conv", c.attrs(),
        {Tensor::from_doubles(DType::kF32, c.x, x), Tensor::from_doubles(DType::kF32, c.w, w),
         Tensor::from_doubles(DType::kF32, {c.w[0]}, b)},
        {DType::kF32, c.y()});
    const std::vector<double> abs_b = absolute(b);
    expect_within_sum_bound(y, testing::direct_conv(c, x, w, &b),
                            testing::direct_conv(c, absolute(x), absolute(w), &abs_b), patch,
                            "Conv");

    const Tensor dx = testing::grad_data(c, DType::kF32, dy, w);
    expect_within_sum_bound(dx, testing::direct_grad_data(c, dy, w),
                            testing::direct_grad_data(c, absolute(dy), absolute(w)),
                            c.w[0] / c.group * num_elements(c.kernel()), "ConvGradData");

    const Tensor dw = testing::grad_filter(c, DType::kF32, x, dy);
    expect_within_sum_bound(dw, testing::direct_grad_filter(c, x, dy),
                            testing::direct_grad_filter(c, absolute(x), absolute(dy)),
                            num_elements(c.y()) / c.w[0], "ConvGradFilter");
  }
  // The bound was checked on oneDNN's kernels, not only on the im2col fallback. Which of the
  // cases oneDNN has JIT kernels for depends on the CPU's instruction set (an AVX2-only AMD EPYC
  // declines the dilated, 1-D, 3-D and small irregular ones, where an earlier CI machine took at
  // least 8 of the 10), but it takes the typical ones on any AVX2 CPU (as
  // TakesTypicalConvolutionsOnAnAvx2Cpu checks).
  if (cpu_has_avx2()) {
    for (size_t typical : {0, 1, 4}) {
      EXPECT_TRUE(taken.contains(typical)) << kCases[typical].describe();
    }
  }
}

TEST(OnednnConv, EnvironmentSelectsTheIm2colKernels) {
  const ConvCase& c = kCases[0];
  {
    ScopedEnv env("AMPC_CPU_CONV", "im2col");
    for (ConvPass pass : {ConvPass::kForward, ConvPass::kGradData, ConvPass::kGradFilter}) {
      absl::StatusOr<std::unique_ptr<KernelState>> state = make_state(c, pass);
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(*state, nullptr);
    }
  }
  {
    ScopedEnv env("AMPC_CPU_CONV", "winograd");
    absl::StatusOr<std::unique_ptr<KernelState>> state = make_state(c, ConvPass::kForward);
    ASSERT_FALSE(state.ok());
    EXPECT_NE(state.status().message().find("AMPC_CPU_CONV=winograd"), std::string::npos)
        << state.status();
    // Through a session, the load fails and names the node.
    const std::vector<double> x = random_values(num_elements(c.x), 1);
    const std::vector<double> w = random_values(num_elements(c.w), 2);
    absl::StatusOr<Tensor> y = testing::try_op(
        "Conv", c.attrs(),
        {Tensor::from_doubles(DType::kF32, c.x, x), Tensor::from_doubles(DType::kF32, c.w, w)},
        {DType::kF32, c.y()});
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find("Conv"), std::string::npos) << y.status();
    EXPECT_NE(y.status().message().find("AMPC_CPU_CONV"), std::string::npos) << y.status();
  }
}

// A thread count gives the same bits on every run; another count stays within the bound (the
// filter gradient's batch sum is split by thread).
TEST(OnednnConv, RepeatableBitsForAThreadCount) {
  const ConvCase& c = kCases[0];
  const std::vector<double> x = random_values(num_elements(c.x), 51);
  const std::vector<double> dy = random_values(num_elements(c.y()), 52);
  auto filter = [&] { return testing::grad_filter(c, DType::kF32, x, dy); };
  const Tensor first = on_cpu_threads(2, filter);
  const Tensor second = on_cpu_threads(2, filter);
  EXPECT_TRUE(testing::same_tensor(first, second));
  const Tensor four = on_cpu_threads(4, filter);
  expect_within_sum_bound(four, testing::direct_grad_filter(c, x, dy),
                          testing::direct_grad_filter(c, absolute(x), absolute(dy)),
                          num_elements(c.y()) / c.w[0], "ConvGradFilter on 4 threads");
}

}  // namespace
}  // namespace ampc
