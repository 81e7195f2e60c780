// Element-wise fusion on the example models, end to end: `ampc compile` fuses the training step
// (and `--disable-pass fuse-elementwise` does not), and training the fused, the unfused and the
// recomputing (`--recompute cheap`) compile for the same steps on the same data writes the same
// checkpoint, byte for byte, in f32, fp16 (with dynamic loss scaling) and bf16; recomputation
// plans fewer activation bytes. Bit-exact: the fused kernels round where the
// nodes they replace did (tests/passes/fuse_elementwise_test.cc checks random graphs).
#include <filesystem>
#include <string>

#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

class RecomputeCliTest : public testing::TempDirTest {
 public:
  RecomputeCliTest() : TempDirTest("ampc_recompute_") {}
};

TEST_P(FusionCliTest, FusionLeavesTheTrajectoryUnchanged) {
  const auto& [model, precision] = GetParam();
  const std::string source = testing::source_path("models/" + model + ".onnx");
  const std::string data = testing::source_path("models/" + model + ".train.npz");
  // Fused, unfused, and fused with --recompute cheap.
  const std::string flags[3] = {"", " --disable-pass fuse-elementwise", " --recompute cheap"};
  std::string checkpoints[3];
  for (int run = 0; run < 3; ++run) {
    const bool fused = run != 1;
    SCOPED_TRACE(flags[run]);
    const std::string tag = str_cat("run", run);
    const std::string compiled = path(tag + ".onnx");
    CliResult compile = run_ampc("compile " + source + " -o " + compiled +
                                 " --optimizer adamw --precision " + precision + flags[run]);
    ASSERT_EQ(compile.exit_code, 0) << compile.err;
    CliResult inspect = run_ampc("inspect " + compiled + " --format text");
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    // The MLP's f32 step has nothing to fuse: its only element-wise nodes are the Relus (read by
    // the next Gemm and by the backward) and the ReluGrads (read by two Gemms and a reduction).
    const bool has_fused = inspect.out.find("ampc.FusedElementwise") != std::string::npos;
    if (!fused) {
      EXPECT_FALSE(has_fused);
    } else if (model != "mlp") {
      EXPECT_TRUE(has_fused);
    }
    CliResult train = run_ampc("train " + compiled + " --data " + data +
                               " --steps 12 --checkpoint " + path(tag + ".ckpt"));
    ASSERT_EQ(train.exit_code, 0) << train.err;
    checkpoints[run] = read_file(path(tag + ".ckpt/checkpoint.safetensors"));
  }
  ASSERT_FALSE(checkpoints[0].empty());
  EXPECT_TRUE(checkpoints[0] == checkpoints[1]) << "fusion changed the trained state";
  EXPECT_TRUE(checkpoints[2] == checkpoints[1]) << "recomputation changed the trained state";
}

// The planned activations of the training step, from `inspect --precision --format json`.
int64_t planned_activations(const std::string& compiled) {
  const CliResult r = run_ampc("inspect --precision --format json " + compiled);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return -1;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  for (const auto& graph : report["graphs"]) {
    if (graph["kind"] == "training_step") {
      return graph["summary"]["planned_memory"]["activations"].get<int64_t>();
    }
  }
  return -1;
}

// tiny_gpt's GELU (exported as Erf arithmetic) is recomputed in the backward from values it
// reads anyway: the step keeps fewer activations.
TEST_F(RecomputeCliTest, RecomputeCheapPlansLessActivationMemory) {
  const std::string source = testing::source_path("models/tiny_gpt.onnx");
  int64_t activations[2];
  for (int recompute = 0; recompute < 2; ++recompute) {
    const std::string compiled = path(str_cat("r", recompute, ".onnx"));
    const CliResult r =
        run_ampc("compile " + source + " -o " + compiled + " --optimizer adamw --precision fp16" +
                 (recompute ? " --recompute cheap" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    activations[recompute] = planned_activations(compiled);
  }
  EXPECT_GT(activations[0], 0);
  EXPECT_LT(activations[1], activations[0]);
}

TEST_F(RecomputeCliTest, RecomputeWithoutFusionIsAnError) {
  const CliResult r =
      run_ampc("compile " + testing::source_path("models/mlp.onnx") + " -o " + path("out.onnx") +
               " --optimizer sgd --recompute cheap --disable-pass fuse-elementwise");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--recompute cheap does nothing"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("out.onnx")));
}

INSTANTIATE_TEST_SUITE_P(ExampleModels, FusionCliTest,
                         ::testing::Combine(::testing::Values("mlp", "cnn", "tiny_gpt"),
                                            ::testing::Values("fp32", "fp16", "bf16")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ampc
