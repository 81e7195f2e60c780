// The fused attention kernels on CUDA (label `gpu`; skipped without a GPU): ampc.Attention and
// ampc.AttentionGrad against the CPU kernels on the same graph, within the contract's tolerance
// for reductions (both accumulate in f32; the CUDA block reduces the row's maximum and sum as a
// tree where the CPU adds sequentially), in f32, f16 and bf16, with a bool mask and a bias, and
// for rows longer than a block (300 keys over 256 threads), and safe with rows that keep no
// key (0, with no gradient).
#include <random>

#include "gtest/gtest.h"
#include "tests/attention_graphs.h"

namespace ampc::runtime {
namespace {

struct Case {
  testing::AttentionCase shape;
  DType dtype;
};

class AttentionCuda : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCuda, MatchesTheCpuKernels) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  const Case& c = GetParam();
  std::mt19937 rng(5);
  const std::map<std::string, Tensor> inputs = testing::attention_inputs(c.shape, rng);
  const auto cpu = testing::run_attention(c.dtype, c.shape, true, inputs, Device::kCpu);
  const auto cuda = testing::run_attention(c.dtype, c.shape, true, inputs, Device::kCuda);
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(cuda.size(), 4u);
  // f32: a few ulps of the sums' length; f16/bf16: one unit of the stored type.
  const double u = c.dtype == DType::kF32 ? 0x1p-24 : c.dtype == DType::kF16 ? 0x1p-11 : 0x1p-8;
  const double tolerance =
      c.dtype == DType::kF32 ? 8 * u * std::sqrt(static_cast<double>(c.shape.t)) : 2 * u;
  for (const auto& [name, want] : cpu) {
    const double error = testing::relative_error(cuda.at(name), want);
    std::printf("%s in %s, T = %lld: CUDA against CPU %.3g\n", name.c_str(),
                std::string(dtype_name(c.dtype)).c_str(), static_cast<long long>(c.shape.t), error);
    EXPECT_LT(error, tolerance) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCuda,
    ::testing::Values(Case{{}, DType::kF32}, Case{{}, DType::kF16}, Case{{}, DType::kBF16},
                      Case{{.bias = true}, DType::kF16},
                      Case{{.padded = 3, .safe = true}, DType::kF32},
                      Case{{.bias = true, .padded = 3, .safe = true}, DType::kBF16},
                      Case{{.batch = 1, .heads = 3, .t = 300, .d = 64, .dv = 64}, DType::kF32},
                      Case{{.batch = 1, .heads = 3, .t = 300, .d = 64, .dv = 64}, DType::kBF16}),
    [](const auto& info) {
      const Case& c = info.param;
      return str_cat(dtype_name(c.dtype), c.shape.bias ? "_bias" : "_mask", "_t", c.shape.t,
                     c.shape.safe ? "_safe_padded" : "");
    });

}  // namespace
}  // namespace ampc::runtime
