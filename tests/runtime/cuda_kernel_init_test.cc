// The host half of the CUDA kernels, without a GPU: for every sample of every ONNX op, in f32,
// f16 and bf16, the CUDA kernel resolves and its load-time init (layouts, attribute and shape
// checks, everything but the library calls and pinned memory that need a device) accepts what the
// CPU accepts. A kernel state that cannot be made here must fail with a Status naming the CUDA
// library or runtime call, never crash; an init that rejects a sample for any other reason fails
// the test with the message, since the same node would then fail to load on a GPU.
#include <random>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"
#include "tests/op_sample_graph.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

// Messages of inits that stopped at a call that needs a GPU (cuBLASLt's heuristic on an
// uninitialized handle, cuDNN's algorithm query, pinned host memory).
bool needs_device(std::string_view message) {
  for (std::string_view call :
       {"library was not initialized", "cudnnGet", "cudaMallocHost", "CUDA driver"}) {
    if (message.find(call) != std::string_view::npos) return true;
  }
  return false;
}

bool is_cuda_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

TEST(CudaKernelInit, EverySampleTheCpuRunsLoadsOnCudaUpToTheDevice) {
#if !defined(AMPC_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA";
#endif
  std::mt19937 rng(7);
  ExecutionContext exec;  // no stream or handles: what an init may use of them fails cleanly
  exec.device = Device::kCuda;
  int initialized = 0;
  int needed_device = 0;
  std::vector<std::string> rejected;
  for (const OpDef* def : OpRegistry::global().all()) {
    if (def->domain != kOnnxDomain) continue;
    for (const OpSample& sample : def->samples) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        testing::SampleGraph built = testing::sample_graph(*def, sample, dtype, rng);
        if (built.graph == nullptr) continue;
        const Node& node = *built.graph->nodes().front();
        absl::StatusOr<const KernelDef*> cpu = KernelRegistry::global().resolve(node, Device::kCpu);
        if (!cpu.ok()) continue;
        // The CUDA kernels cover f32, f16 and bf16 (f64 and integer-only uses stay on the CPU).
        const TensorType* key = key_type(node, (*cpu)->keyed_on);
        if (key == nullptr || !is_cuda_float(key->dtype)) continue;
        const std::string what =
            str_cat(def->name, " sample '", sample.name, "' in ", dtype_name(dtype));
        absl::StatusOr<const KernelDef*> kernel =
            KernelRegistry::global().resolve(node, Device::kCuda);
        if (!kernel.ok()) {
          rejected.push_back(str_cat(what, ": ", kernel.status().message()));
          continue;
        }
        if ((*kernel)->init == nullptr) continue;
        KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
        ctx.exec = &exec;
        for (const Value* operand : node.operands()) {
          ctx.inputs.push_back(operand ? TensorArg{&operand->type(), nullptr} : TensorArg{});
        }
        for (int i = 0; i < node.num_outputs(); ++i) {
          ctx.outputs.push_back(node.has_output(i) ? TensorArg{&node.output(i)->type(), nullptr}
                                                   : TensorArg{});
        }
        absl::StatusOr<std::unique_ptr<KernelState>> state = (*kernel)->init(ctx);
        if (state.ok()) {
          ++initialized;
        } else if (needs_device(std::string(state.status().message()))) {
          ++needed_device;
        } else {
          rejected.push_back(str_cat(what, ": ", state.status().message()));
        }
      }
    }
  }
  std::printf("%d kernel states made without a GPU, %d stopped at a device call\n", initialized,
              needed_device);
  EXPECT_GT(initialized, 150);
  EXPECT_TRUE(rejected.empty()) << rejected.size() << " samples the CPU runs are refused:\n"
                                << str_join(rejected, "\n");
}

// ampc.Attention's CUDA kernels hold one row of scores in shared memory: a longer row is refused
// at load, naming the limit, instead of failing at launch.
TEST(CudaKernelInit, AttentionRowsLongerThanSharedMemoryAreRefusedAtLoad) {
#if !defined(AMPC_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA";
#endif
  ExecutionContext exec;
  exec.device = Device::kCuda;
  for (const int64_t keys : {int64_t{4096}, int64_t{12033}}) {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(str_cat(R"(
      graph g(%q: f16[1,2,8,64], %kt: f16[1,2,64,)",
                                                                  keys, R"(], %v: f16[1,2,)", keys,
                                                                  R"(,64]) opset(17, "ampc": 1) {
        %y, %lse = ampc.Attention<scale=0.125>(%q, %kt, %v) : f16[1,2,8,64], f32[1,2,8]
        return %y
      })"));
    ASSERT_NE(graph, nullptr);
    const Node& node = *graph->nodes().front();
    absl::StatusOr<const KernelDef*> kernel = KernelRegistry::global().resolve(node, Device::kCuda);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
    ctx.exec = &exec;
    for (const Value* operand : node.operands()) {
      ctx.inputs.push_back(TensorArg{&operand->type(), nullptr});
    }
    for (int i = 0; i < node.num_outputs(); ++i) {
      ctx.outputs.push_back(TensorArg{&node.output(i)->type(), nullptr});
    }
    absl::StatusOr<std::unique_ptr<KernelState>> state = (*kernel)->init(ctx);
    if (keys <= 12032) {
      EXPECT_TRUE(state.ok()) << state.status();
    } else {
      ASSERT_FALSE(state.ok());
      EXPECT_NE(state.status().message().find("at most 12032 keys"), std::string::npos)
          << state.status();
    }
  }
}

}  // namespace
}  // namespace ampc::runtime
