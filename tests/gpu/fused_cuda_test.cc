// The fused element-wise kernels on CUDA (label `gpu`; skipped without a GPU): the generated
// kernel of each random graph's fused nodes gives the bits the unfused CUDA kernels give (both
// run the same device math; each body instruction rounds where its node did), and within the
// numeric contract of the CPU reference (bit-exact but for the transcendentals' 2 ulp in f32,
// which f16/bf16 rounding may turn into one unit of the low type).
#include <random>

#include "compiler/fused_body.h"
#include "gtest/gtest.h"
#include "passes/fuse_elementwise.h"
#include "runtime/interpreter.h"
#include "tests/fused_graphs.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

TEST(FusedCuda, FusedKernelsGiveTheUnfusedCudaBits) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  EXPECT_GE(testing::expect_fusion_keeps_bits(20261127, 40, Device::kCuda), 40);
}

// A body without transcendentals is bit-exact against the CPU kernel (NaN payloads aside).
TEST(FusedCuda, ArithmeticBodiesAreTheCpuBits) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[4,300], %b: f32[300], %s: f16[]) opset(17) {
      %a = Add(%x, %b) : f32[4,300]
      %h = Cast<to=f16>(%a) : f16[4,300]
      %m = Mul(%h, %s) : f16[4,300]
      %r = Relu(%m) : f16[4,300]
      %c = Less(%r, %s) : bool[4,300]
      %w = Where(%c, %m, %r) : f16[4,300]
      %y = Cast<to=bf16>(%w) : bf16[4,300]
      return %y, %c
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(make_fuse_elementwise_pass()->run(*graph, PassContext{&diagnostics}).ok());
  ASSERT_EQ(graph->num_nodes(), 1);
  std::mt19937 rng(7);
  const std::vector<Tensor> inputs = {testing::special_input(rng, {4, 300}),
                                      testing::special_input(rng, {300}),
                                      Tensor::from_doubles(DType::kF16, {}, {0.75})};
  absl::StatusOr<std::vector<Tensor>> cpu = interpret_graph(*graph, inputs, Device::kCpu);
  absl::StatusOr<std::vector<Tensor>> cuda = interpret_graph(*graph, inputs, Device::kCuda);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  for (size_t i = 0; i < cpu->size(); ++i) {
    EXPECT_TRUE(testing::same_bits_but_nan_payloads((*cpu)[i], (*cuda)[i])) << "output " << i;
  }
}

}  // namespace
}  // namespace ampc::runtime
