// The CUDA source generated for fused element-wise bodies compiles with NVRTC (no GPU needed):
// every fused body of the example models' training steps in f32, fp16 and bf16, and one body
// that uses every op of compiler/fused_body.h over every operand type. Skipped in a build
// without the CUDA toolkit. Running the kernels is tests/gpu/fused_cuda_test.cc's.
#include "runtime/fused_codegen.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "compiler/compile.h"
#include "compiler/fused_body.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#if defined(AMPC_HAVE_CUDA)
#include "runtime/cuda/nvrtc.h"
#endif

namespace ampc::runtime {
namespace {

constexpr int kHopper = 90;

absl::Status compile_body(const std::string& text, const std::vector<DType>& input_dtypes) {
#if defined(AMPC_HAVE_CUDA)
  AMPC_ASSIGN_OR_RETURN(const FusedBody body,
                        FusedBody::parse(text, static_cast<int>(input_dtypes.size())));
  const std::string name = fused_kernel_name(fused_body_hash(text, input_dtypes));
  AMPC_ASSIGN_OR_RETURN(
      const std::string cubin,
      cuda::nvrtc_compile(fused_cuda_source(body, input_dtypes, name), name + ".cu", kHopper));
  if (cubin.empty()) return absl::InternalError("an empty cubin");
  return absl::OkStatus();
#else
  (void)text;
  (void)input_dtypes;
  return absl::UnimplementedError("built without CUDA");
#endif
}

#if defined(AMPC_HAVE_CUDA)
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

TEST(FusedCodegen, EveryFusedBodyOfTheExampleModelsCompiles) {
  if (!kHaveCuda) GTEST_SKIP() << "built without the CUDA toolkit";
  int compiled = 0;
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    for (const DType low : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(str_cat(model, " ", dtype_name(low)));
      CompileOptions options;
      options.training = TrainingOptions{};
      if (low != DType::kF32) {
        options.mixed_precision = MixedPrecisionOptions{};
        options.mixed_precision->policy.low = low;
        options.mixed_precision->policy.low_source = "test";
      }
      Diagnostics diagnostics;
      absl::StatusOr<std::unique_ptr<Graph>> graph =
          compile_file(testing::source_path("models/" + model + ".onnx"), options, diagnostics);
      ASSERT_TRUE(graph.ok()) << graph.status();
      std::set<std::string> seen;
      for (const auto& node : (*graph)->training_step()->nodes()) {
        if (node->op_type() != "FusedElementwise") continue;
        std::vector<DType> dtypes;
        for (const Value* operand : node->operands()) dtypes.push_back(operand->dtype());
        const std::string& body = node->string_attr("body");
        if (!seen.insert(str_cat(body, dtypes.size(), dtype_name(dtypes[0]))).second) continue;
        const absl::Status status = compile_body(body, dtypes);
        EXPECT_TRUE(status.ok()) << node->describe() << ": " << status;
        ++compiled;
      }
    }
  }
  EXPECT_GE(compiled, 15);
}

TEST(FusedCodegen, EveryOpAndOperandTypeCompiles) {
  if (!kHaveCuda) GTEST_SKIP() << "built without the CUDA toolkit";
  // x0 f32, x1 f16, x2 bf16, x3 bool; each op reads x0 (and x1, x2), the logic ops x3.
  std::vector<std::string> instrs;
  std::vector<std::string> results;
  for (int op = 0; op <= static_cast<int>(FusedOp::kWhere); ++op) {
    const FusedOp fused = static_cast<FusedOp>(op);
    const std::string_view name = fused_op_name(fused);
    const bool logic = fused == FusedOp::kNot || fused == FusedOp::kAnd || fused == FusedOp::kOr ||
                       fused == FusedOp::kXor;
    std::vector<std::string> args;
    if (fused == FusedOp::kWhere) {
      args = {"x3", "x1", "x2"};
    } else {
      for (int i = 0; i < fused_op_arity(fused); ++i)
        args.push_back(logic ? "x3" : str_cat("x", i));
    }
    std::vector<std::string> params;
    for (int i = 0; i < fused_op_num_params(fused); ++i) params.push_back(i == 0 ? "0.01" : "-1.5");
    const bool boolean = logic || (fused >= FusedOp::kEqual && fused <= FusedOp::kGreaterOrEqual);
    const std::string dtype = boolean ? "bool"
                                      : (op % 3 == 0   ? "f16"
                                         : op % 3 == 1 ? "bf16"
                                                       : "f32");
    instrs.push_back(str_cat("t", instrs.size(), " = ", name,
                             params.empty() ? "" : str_cat("[", str_join(params, ","), "]"), "(",
                             str_join(args, ", "), ") : ", dtype));
    results.push_back(str_cat("t", results.size()));
  }
  const std::string body = str_cat(str_join(instrs, "; "), "; return ", str_join(results, ", "));
  const absl::Status status =
      compile_body(body, {DType::kF32, DType::kF16, DType::kBF16, DType::kBool});
  EXPECT_TRUE(status.ok()) << status;
}

// The kernel cache: a compiled body lands in $AMPC_KERNEL_CACHE under its name; a cache
// directory the user named that cannot be written is an error naming the variable.
TEST(FusedCodegen, CompiledKernelsAreCachedWhereAmpcKernelCacheSays) {
#if defined(AMPC_HAVE_CUDA)
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / str_cat("ampc_kernel_cache_", ::getpid());
  ASSERT_EQ(::setenv("AMPC_KERNEL_CACHE", dir.c_str(), 1), 0);
  absl::StatusOr<FusedBody> body = FusedBody::parse("t0 = Sigmoid(x0) : f16; return t0", 1);
  ASSERT_TRUE(body.ok());
  const std::string source = fused_cuda_source(*body, {DType::kF16}, "k_cached");
  absl::StatusOr<std::string> cubin = cuda::cached_cubin(source, "k_cached_sm90", kHopper);
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  std::ifstream file(dir / "k_cached_sm90.cubin", std::ios::binary);
  const std::string stored((std::istreambuf_iterator<char>(file)), {});
  EXPECT_EQ(stored, *cubin);
  ASSERT_EQ(::setenv("AMPC_KERNEL_CACHE", "/proc/ampc_cannot_be_here", 1), 0);
  absl::StatusOr<std::string> refused = cuda::cached_cubin(
      fused_cuda_source(*body, {DType::kF16}, "k_refused"), "k_refused_sm90", kHopper);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("AMPC_KERNEL_CACHE"), std::string::npos)
      << refused.status();
  ::unsetenv("AMPC_KERNEL_CACHE");
  std::filesystem::remove_all(dir);
#else
  GTEST_SKIP() << "built without the CUDA toolkit";
#endif
}

// The kernel states each instruction as the op's shared formula, rounded to its dtype.
TEST(FusedCodegen, SourceRoundsEachInstructionToItsType) {
  absl::StatusOr<FusedBody> body = FusedBody::parse(
      "t0 = Mul(x0, x1) : f16; t1 = LeakyRelu[0.25](t0) : bf16; t2 = Less(t1, x0) : bool; "
      "return t1, t2",
      2);
  ASSERT_TRUE(body.ok()) << body.status();
  const std::string source = fused_cuda_source(*body, {DType::kF16, DType::kF32}, "k");
  EXPECT_NE(source.find("const float t0 = static_cast<float>(ampc::Float16(nm::Mul{}(x0, x1)));"),
            std::string::npos)
      << source;
  EXPECT_NE(source.find("static_cast<float>(ampc::BFloat16(nm::LeakyRelu{0x1p-2f}(t0)))"),
            std::string::npos)
      << source;
  EXPECT_NE(source.find("y0[e] = ampc::BFloat16(t1);"), std::string::npos) << source;
  EXPECT_NE(source.find("y1[e] = (t2 != 0.0f);"), std::string::npos) << source;
}

}  // namespace
}  // namespace ampc::runtime
