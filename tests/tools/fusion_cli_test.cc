// Element-wise fusion on the example models, end to end: `ampc compile` fuses the training step
// (and `--disable-pass fuse-elementwise` does not), and training the fused and the unfused
// compile for the same steps on the same data writes the same checkpoint, byte for byte, in
// f32, fp16 (with dynamic loss scaling) and bf16. Bit-exact: the fused kernels round where the
// nodes they replace did (tests/passes/fuse_elementwise_test.cc checks random graphs).
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using testing::CliResult;
using testing::read_file;
using testing::run_ampc;

class FusionCliTest : public testing::TempDirTest,
                      public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {
 public:
  FusionCliTest() : TempDirTest("ampc_fusion_") {}
};

TEST_P(FusionCliTest, FusionLeavesTheTrajectoryUnchanged) {
  const auto& [model, precision] = GetParam();
  const std::string source = testing::source_path("models/" + model + ".onnx");
  const std::string data = testing::source_path("models/" + model + ".train.npz");
  std::string checkpoints[2];
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    const std::string tag = fused ? "fused" : "plain";
    const std::string compiled = path(tag + ".onnx");
    CliResult compile =
        run_ampc("compile " + source + " -o " + compiled + " --optimizer adamw --precision " +
                 precision + (fused ? "" : " --disable-pass fuse-elementwise"));
    ASSERT_EQ(compile.exit_code, 0) << compile.err;
    CliResult inspect = run_ampc("inspect " + compiled + " --format text");
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    // The MLP's f32 step has nothing to fuse: its only element-wise nodes are the Relus (read by
    // the next Gemm and by the backward) and the ReluGrads (read by two Gemms and a reduction).
    const bool has_fused = inspect.out.find("ampc.FusedElementwise") != std::string::npos;
    if (!fused) EXPECT_FALSE(has_fused);
    if (fused && model != "mlp") EXPECT_TRUE(has_fused);
    CliResult train = run_ampc("train " + compiled + " --data " + data +
                               " --steps 12 --checkpoint " + path(tag + ".ckpt"));
    ASSERT_EQ(train.exit_code, 0) << train.err;
    checkpoints[fused ? 0 : 1] = read_file(path(tag + ".ckpt/checkpoint.safetensors"));
  }
  ASSERT_FALSE(checkpoints[0].empty());
  EXPECT_TRUE(checkpoints[0] == checkpoints[1]) << "the trained state differs";
}

INSTANTIATE_TEST_SUITE_P(ExampleModels, FusionCliTest,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "tiny_gpt"),
                                            ::testing::Values("fp32", "fp16", "bf16")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ampc
