// The fused attention kernels on CUDA (label `gpu`; skipped without a GPU): ampc.Attention and
// ampc.AttentionGrad against the CPU kernels on the same graph, within the contract's tolerance
// for reductions (both accumulate in f32; the CUDA block reduces the row's maximum and sum as a
// tree where the CPU adds sequentially), in f32, f16 and bf16, with a bool mask and a bias, and
// for rows longer than a block (300 keys over 256 threads), and safe with rows that keep no
// key (0, with no gradient). Then cuDNN's fused attention (AMPC_CUDA_ATTENTION=cudnn-only, so
// a node cuDNN refuses fails the test instead of falling back) against the same CPU kernels.
#include <cstdlib>
#include <random>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/attention_graphs.h"

namespace ampc::runtime {
namespace {

struct Case {
  testing::AttentionCase shape;
  DType dtype;
  // The CudnnAttentionCuda cases: AMPC_CUDA_ATTENTION (`cudnn-only`, or `cudnn` where a pass may
  // fall back), and whether the session runs as a recorded CUDA graph.
  const char* path = "cudnn-only";
  bool cuda_graph = false;
};

// The unit roundoff of `dtype`.
double roundoff(DType dtype) {
  return dtype == DType::kF32 ? 0x1p-24 : dtype == DType::kF16 ? 0x1p-11 : 0x1p-8;
}

// Y and the gradients of `c` on CUDA (under the attention path AMPC_CUDA_ATTENTION names) against
// the CPU kernels, each within `tolerance` norm-wise; `path` labels the printed figures.
void expect_cuda_matches_cpu(const Case& c, uint32_t seed, double tolerance,
                             std::string_view path) {
  std::mt19937 rng(seed);
  const std::map<std::string, Tensor> inputs = testing::attention_inputs(c.shape, rng);
  const auto cpu = testing::run_attention(c.dtype, c.shape, true, inputs, Device::kCpu);
  const auto cuda =
      testing::run_attention(c.dtype, c.shape, true, inputs, Device::kCuda, c.cuda_graph);
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(cuda.size(), 4u);
  for (const auto& [name, want] : cpu) {
    const double error = testing::relative_error(cuda.at(name), want);
    std::printf("%s in %s on %s, T = %lld: against the CPU %.3g (%.2f u)\n", name.c_str(),
                std::string(dtype_name(c.dtype)).c_str(), std::string(path).c_str(),
                static_cast<long long>(c.shape.t), error, error / roundoff(c.dtype));
    EXPECT_LT(error, tolerance) << name;
  }
}

class AttentionCuda : public ::testing::TestWithParam<Case> {};

// f32: a few ulps of the sums' length; f16/bf16: two units of the stored type, or eight where
// AMPC_CUDA_ATTENTION=cudnn hands a pass to cuDNN (tests/gpu/device_check.sh reruns these so),
// which rounds the probabilities to that type (CudnnAttentionCuda below).
TEST_P(AttentionCuda, MatchesTheCpuKernels) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  const Case& c = GetParam();
  const double u = roundoff(c.dtype);
  const char* path = std::getenv("AMPC_CUDA_ATTENTION");
  const bool cudnn = path != nullptr && std::string_view(path).starts_with("cudnn");
  expect_cuda_matches_cpu(c, 5,
                          c.dtype == DType::kF32 ? 8 * u * std::sqrt(static_cast<double>(c.shape.t))
                                                 : (cudnn ? 8 : 2) * u,
                          path == nullptr ? "CUDA" : path);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCuda,
    ::testing::Values(Case{{}, DType::kF32}, Case{{}, DType::kF16}, Case{{}, DType::kBF16},
                      Case{{.bias = true}, DType::kF16},
                      Case{{.padded = 3, .safe = true}, DType::kF32},
                      Case{{.bias = true, .padded = 3, .safe = true}, DType::kBF16},
                      Case{{.batch = 1, .heads = 3, .t = 300, .d = 64, .dv = 64}, DType::kF32},
                      Case{{.batch = 1, .heads = 3, .t = 300, .d = 64, .dv = 64}, DType::kBF16},
                      Case{{.heads = 4, .bias = true, .kv_heads = 1}, DType::kBF16}),
    [](const auto& info) {
      const Case& c = info.param;
      return str_cat(dtype_name(c.dtype), c.shape.bias ? "_bias" : "_mask", "_t", c.shape.t,
                     c.shape.safe ? "_safe_padded" : "", c.shape.kv_heads == 1 ? "_mqa" : "");
    });

// cuDNN rounds the probabilities to the I/O type before the product with V, and dS before the
// products with K and Q (runtime/cuda/cudnn_attention.h): each output is a sum of terms each
// within one rounding (u) of the CPU's, so the norm-wise error stays within a few u; 8 u leaves
// room for the f32 sums' order and still fails a wrong layout, scale or mask (errors near 1).
class CudnnAttentionCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CudnnAttentionCuda, MatchesTheCpuKernels) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  const Case& c = GetParam();
  const testing::ScopedEnv path("AMPC_CUDA_ATTENTION", c.path);
  expect_cuda_matches_cpu(c, 11, 8 * roundoff(c.dtype), str_cat("cuDNN (", c.path, ")"));
}

// Under cudnn-only: head dims cuDNN takes (multiples of 8 up to 128); a bool mask (Where) and a
// bias of 0 and -inf (Add, Q and Kt each scaled; fuse-attention makes it a bool mask), both
// causal and constant, so cuDNN's causal mode; a sliding window (a bias for cuDNN) over keys a
// multiple of 128 (ampc refuses cuDNN's backward with a bias over other lengths before cuDNN
// 9.26); no mask with T not a multiple of cuDNN's tiles; one head against several; one key and
// value head broadcast over four query heads (multi-query: expanded before the fused node); a
// session recorded as a CUDA graph (whose first run is cuDNN's first execution, inside the
// capture). Under cudnn, where one pass falls back and the other stays on cuDNN, so the LSE one
// writes the other reads: a mask over 300 keys (cuDNN's forward, its bias rows padded to 304
// elements to stay 16-byte aligned; the GEMM path's backward before cuDNN 9.26), and a bf16 bias
// filled with bf16's lowest finite value whose first rows keep no key (cuDNN's forward, which makes
// those rows uniform as the CPU does; the GEMM path's backward, which recomputes them where
// cuDNN's would give every key a probability of 1).
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnAttentionCuda,
    ::testing::Values(
        Case{{.batch = 2, .heads = 3, .t = 128, .d = 64, .dv = 64}, DType::kF16},
        Case{{.batch = 2, .heads = 3, .t = 128, .d = 64, .dv = 64}, DType::kBF16},
        Case{{.batch = 1, .heads = 2, .t = 256, .d = 128, .dv = 128, .bias = true}, DType::kBF16},
        Case{{.batch = 3, .heads = 1, .t = 100, .d = 32, .dv = 32, .masked = false}, DType::kF16},
        Case{{.batch = 2, .heads = 4, .t = 128, .d = 64, .dv = 64, .kv_heads = 1}, DType::kF16},
        Case{{.batch = 2, .heads = 2, .t = 128, .d = 64, .dv = 64, .window = 48}, DType::kF16},
        Case{{.batch = 2, .heads = 2, .t = 128, .d = 64, .dv = 64},
             DType::kBF16,
             "cudnn-only",
             true},
        Case{{.batch = 1, .heads = 3, .t = 300, .d = 64, .dv = 64}, DType::kF16, "cudnn"},
        Case{{.batch = 1,
              .heads = 2,
              .t = 128,
              .d = 64,
              .dv = 64,
              .bias = true,
              .fill = "-3.3895313892515355e38",
              .padded = 2},
             DType::kBF16,
             "cudnn"}),
    [](const auto& info) {
      const Case& c = info.param;
      return str_cat(dtype_name(c.dtype),
                     !c.shape.masked ? "_unmasked"
                     : c.shape.bias  ? "_bias"
                                     : "_mask",
                     "_b", c.shape.batch, "_h", c.shape.heads, "_t", c.shape.t, "_d", c.shape.d,
                     c.shape.padded > 0 ? "_finite_fill_padded" : "",
                     c.shape.window > 0 ? str_cat("_window", c.shape.window) : "",
                     c.shape.kv_heads == 1 ? "_mqa" : "", c.cuda_graph ? "_cuda_graph" : "",
                     std::string_view(c.path) == "cudnn" ? "_or_fallback" : "");
    });

}  // namespace
}  // namespace ampc::runtime
