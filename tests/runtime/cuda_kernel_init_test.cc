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
#include "runtime/cuda/attention_path.h"
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

// The CUDA kernel state of the one node of `text` (an ampc.Attention over f16 or bf16 operands
// [1, 2, 8, 64] and Kt [1, 2, 64, keys]), made at load on a context with no stream or handles.
absl::StatusOr<std::unique_ptr<KernelState>> attention_state(const std::string& text) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return absl::InvalidArgumentError("the test graph did not parse");
  ExecutionContext exec;
  exec.device = Device::kCuda;
  const Node& node = *graph->nodes().front();
  AMPC_ASSIGN_OR_RETURN(const KernelDef* kernel,
                        KernelRegistry::global().resolve(node, Device::kCuda));
  KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
  ctx.exec = &exec;
  for (const Value* operand : node.operands()) {
    ctx.inputs.push_back(TensorArg{&operand->type(), nullptr});
  }
  for (int i = 0; i < node.num_outputs(); ++i) {
    ctx.outputs.push_back(TensorArg{&node.output(i)->type(), nullptr});
  }
  return kernel->init(ctx);
}

std::string attention_graph(int64_t keys, std::string_view dtype = "f16",
                            std::string_view mask = "", std::string_view safe = "0") {
  const std::string t(dtype);
  const std::string mask_input = mask.empty() ? "" : str_cat(", %m: ", mask);
  return str_cat("graph g(%q: ", t, "[1,2,8,64], %kt: ", t, "[1,2,64,", keys, "], %v: ", t, "[1,2,",
                 keys, ",64]", mask_input, R"() opset(17, "ampc": 1) {
        %y, %lse = ampc.Attention<scale=0.125, safe=)",
                 safe, ">(%q, %kt, %v", mask.empty() ? "" : ", %m", ") : ", t,
                 "[1,2,8,64], f32[1,2,8]\n        return %y\n      }");
}

// ampc.Attention of bf16 over 16 keys with a constant bool mask: query i keeps keys j <= i +
// `ahead` (0: causal).
std::string constant_mask_attention_graph(int ahead, std::string_view safe = "0") {
  std::string mask;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 16; ++j) {
      mask += str_cat(mask.empty() ? "" : ", ", j <= i + ahead ? "true" : "false");
    }
  }
  return str_cat(
      R"(graph g(%q: bf16[1,2,8,64], %kt: bf16[1,2,64,16], %v: bf16[1,2,16,64]) opset(17, "ampc": 1) {
        init %m: bool[8,16] = [)",
      mask, R"(]
        %y, %lse = ampc.Attention<scale=0.125, safe=)",
      safe, R"(>(%q, %kt, %v, %m) : bf16[1,2,8,64], f32[1,2,8]
        return %y
      })");
}

// ampc.AttentionGrad over 128 keys of bf16 with the float mask `mask`: a graph input when
// `fill` is empty, else a constant of 0 and `fill`.
std::string attention_grad_graph(std::string_view fill) {
  constexpr int kKeys = 128;
  const std::string rows = "[1,2,8,64]";
  std::string mask_init;
  std::string mask_input = ", %m: bf16[8,128]";
  if (!fill.empty()) {
    mask_input.clear();
    mask_init = "init %m: bf16[8,128] = [";
    for (int i = 0; i < 8 * kKeys; ++i) {
      mask_init += str_cat(i == 0 ? "" : ", ", i % kKeys <= i / kKeys ? "0.0" : std::string(fill));
    }
    mask_init += "]\n";
  }
  return str_cat(
      "graph g(%dy: bf16", rows, ", %q: bf16", rows,
      ", %kt: bf16[1,2,64,128], %v: ", "bf16[1,2,128,64], %y: bf16", rows, ", %lse: f32[1,2,8]",
      mask_input,
      R"() opset(17, "ampc": 1) {
        )",
      mask_init,
      R"(%dq, %dkt, %dv = ampc.AttentionGrad<scale=0.125>(%dy, %q, %kt, %v, %y, %lse, %m) : bf16)",
      rows, ", bf16[1,2,64,128], bf16[1,2,128,64]\n        return %dq\n      }");
}

// ampc.Attention's CUDA kernels hold one row of scores in shared memory: a longer row is refused
// at load, naming the limit, instead of failing at launch.
TEST(CudaKernelInit, AttentionRowsLongerThanSharedMemoryAreRefusedAtLoad) {
#if !defined(AMPC_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA";
#endif
  for (const int64_t keys : {int64_t{4096}, int64_t{12033}}) {
    absl::StatusOr<std::unique_ptr<KernelState>> state = attention_state(attention_graph(keys));
    if (keys <= 12032) {
      EXPECT_TRUE(state.ok()) << state.status();
    } else {
      ASSERT_FALSE(state.ok());
      EXPECT_NE(state.status().message().find("at most 12032 keys"), std::string::npos)
          << state.status();
    }
  }
}

TEST(CudaKernelInit, AmpcCudaAttentionNamesItsFourPathsAndRefusesAnyOther) {
  using cuda::AttentionPath;
  EXPECT_EQ(*cuda::parse_attention_path(nullptr), AttentionPath::kRows);
  EXPECT_EQ(*cuda::parse_attention_path("rows"), AttentionPath::kRows);
  EXPECT_EQ(*cuda::parse_attention_path("gemm"), AttentionPath::kGemm);
  EXPECT_EQ(*cuda::parse_attention_path("cudnn"), AttentionPath::kCudnn);
  EXPECT_EQ(*cuda::parse_attention_path("cudnn-only"), AttentionPath::kCudnnOnly);
  for (const char* bad : {"", "flash", "CUDNN"}) {
    absl::StatusOr<AttentionPath> path = cuda::parse_attention_path(bad);
    ASSERT_FALSE(path.ok()) << bad;
    EXPECT_NE(path.status().message().find(str_cat("AMPC_CUDA_ATTENTION=", bad, ":")),
              std::string::npos)
        << path.status();
    EXPECT_NE(path.status().message().find("`cudnn-only`"), std::string::npos) << path.status();
  }
}

// AMPC_CUDA_ATTENTION=cudnn takes cuDNN's fused attention where it applies and falls back where
// it does not (here, with no device, nowhere): the node still loads. cudnn-only refuses at load
// instead, saying why: an f32 node, a `safe` node with a mask, a float mask wider than the
// operands, a backward's float mask that is not a constant without large finite values, or
// what cuDNN itself refused.
TEST(CudaKernelInit, CudnnAttentionFallsBackUnlessOnlyItIsAsked) {
#if !defined(AMPC_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA";
#endif
  {
    testing::ScopedEnv path("AMPC_CUDA_ATTENTION", "cudnn");
    for (const std::string& text :
         {attention_graph(16), attention_graph(16, "bf16", "bool[8,16]"),
          attention_graph(16, "f32"), attention_graph(16, "bf16", "bool[8,16]", "1"),
          attention_grad_graph(""), attention_grad_graph("-3.3895313892515355e38")}) {
      absl::StatusOr<std::unique_ptr<KernelState>> state = attention_state(text);
      EXPECT_TRUE(state.ok()) << state.status() << "\n" << text;
    }
  }
  testing::ScopedEnv path("AMPC_CUDA_ATTENTION", "cudnn-only");
  const std::vector<std::pair<std::string, std::string>> refusals = {
      {attention_graph(16, "f32"), "reads f16 or bf16 operands only"},
      {attention_graph(16, "bf16", "bool[8,16]", "1"), "`safe` with a mask"},
      {attention_graph(16, "bf16", "f32[1,1,8,16]"), "would round this node's wider float mask"},
      // cuDNN's backward would make a row masked by a large finite fill uniform over every key.
      {attention_grad_graph(""), "float mask %m is computed in the graph"},
      {attention_grad_graph("-3.3895313892515355e38"),
       "float mask %m holds -3.3895313892515355e+38"},
      {attention_grad_graph("-8192"), "float mask %m holds -8192"},
      // No device here: cuDNN (or the build, without the frontend) refuses the graph itself,
      // and its message says which graph: with a bias, or in cuDNN's causal mode for a constant
      // causal mask (safe or not: it leaves every row a key).
      {attention_graph(16, "bf16", "bf16[1,1,8,16]"),
       "forward bf16 b 1 h 2 T 8 S 16 D 64 Dv 64, bias [1, 1]"},
      {constant_mask_attention_graph(1), "forward bf16 b 1 h 2 T 8 S 16 D 64 Dv 64, bias [1, 1]"},
      {constant_mask_attention_graph(0), "forward bf16 b 1 h 2 T 8 S 16 D 64 Dv 64, causal"},
      {constant_mask_attention_graph(0, "1"), "forward bf16 b 1 h 2 T 8 S 16 D 64 Dv 64, causal"},
      {constant_mask_attention_graph(1, "1"), "`safe` with a mask"}};
  for (const auto& [text, why] : refusals) {
    absl::StatusOr<std::unique_ptr<KernelState>> state = attention_state(text);
    ASSERT_FALSE(state.ok()) << text;
    std::printf("refused: %s\n", std::string(state.status().message()).c_str());
    EXPECT_NE(state.status().message().find("AMPC_CUDA_ATTENTION=cudnn-only: "), std::string::npos)
        << state.status();
    EXPECT_NE(state.status().message().find(why), std::string::npos) << state.status();
  }
}

}  // namespace
}  // namespace ampc::runtime
