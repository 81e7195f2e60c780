// `ampc bench`, end to end on the CPU: the JSON report's figures hold together (throughput and
// TFLOP/s from the median step time, tokens per step for token inputs, MFU against the given
// peak), the matrix FLOPs of the MLP's step equal a hand count, `--no-fuse` compiles without
// fused nodes, `--disable-pass fuse-attention` keeps the FLOPs and plans more memory, and bad
// flags, data, loss names and devices exit non-zero with a message naming them.
// (Timings themselves are benchmarks, not tested.)
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using testing::CliResult;
using ::testing::HasSubstr;
using testing::run_ampc;

nlohmann::json bench_json(const std::string& model, const std::string& flags) {
  const CliResult r = run_ampc("bench " + testing::source_path("models/" + model + ".onnx") +
                               " --data " + testing::source_path("models/" + model + ".train.npz") +
                               " --steps 3 --warmup 1 --format json " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

TEST(BenchCli, TheMlpReportHoldsTogether) {
  const nlohmann::json j = bench_json("mlp", "--optimizer sgd --peak-tflops 2");
  ASSERT_FALSE(j.is_null());
  const double median = j["step_ms"]["median"];
  EXPECT_LE(j["step_ms"]["min"].get<double>(), median);
  EXPECT_GE(j["step_ms"]["max"].get<double>(), median);
  // models/mlp.onnx: batch 8, Gemm layers 64 -> 64 -> 64 -> 10. A step multiplies each layer
  // forward, for its weight gradient and (all but the first, whose input is the data) for its
  // input gradient: 2 FLOPs per multiply-add.
  const int64_t forward = 2 * 8 * (64 * 64 + 64 * 64 + 64 * 10);
  EXPECT_EQ(j["matrix_flops_per_step"].get<int64_t>(), 3 * forward - 2 * 8 * 64 * 64);
  EXPECT_NEAR(j["samples_per_second"].get<double>(), 8 / (median * 1e-3), 1e-6 * 8e3 / median);
  const double tflops = j["tflops_per_second"];
  EXPECT_NEAR(tflops, j["matrix_flops_per_step"].get<double>() / (median * 1e-3) / 1e12,
              1e-9 * tflops);
  EXPECT_NEAR(j["mfu"].get<double>(), tflops / 2, 1e-9);
  EXPECT_TRUE(j["tokens_per_second"].is_null());
  EXPECT_GT(j["planned_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(j["measured_bytes"].is_number_integer());
  EXPECT_TRUE(std::isfinite(j["final_loss"].get<double>()));
  EXPECT_EQ(j["cuda_graph"], false);  // --cuda-graph auto records none on the cpu
}

TEST(BenchCli, TokenInputsReportTokensAndFusionCanBeOff) {
  const nlohmann::json fused = bench_json("tiny_gpt", "--precision bf16");
  ASSERT_FALSE(fused.is_null());
  // models/tiny_gpt.onnx reads 4 sequences of 32 token ids a step.
  EXPECT_NEAR(fused["tokens_per_second"].get<double>() * fused["step_ms"]["median"].get<double>(),
              128e3, 1e-6 * 128e3);
  EXPECT_GT(fused["fused_nodes"].get<int64_t>(), 0);
  EXPECT_TRUE(fused["mfu"].is_null());  // no peak figure for the CPU
  const nlohmann::json plain = bench_json("tiny_gpt", "--precision bf16 --no-fuse");
  ASSERT_FALSE(plain.is_null());
  EXPECT_EQ(plain["fused_nodes"].get<int64_t>(), 0);
  EXPECT_GT(plain["step_nodes"].get<int64_t>(), fused["step_nodes"].get<int64_t>());
  EXPECT_EQ(plain["matrix_flops_per_step"], fused["matrix_flops_per_step"]);
  // Recomputation keeps fewer activations: the planned memory drops, the FLOPs do not change.
  const nlohmann::json recomputing = bench_json("tiny_gpt", "--precision bf16 --recompute cheap");
  ASSERT_FALSE(recomputing.is_null());
  EXPECT_EQ(recomputing["recompute"], "cheap");
  EXPECT_LT(recomputing["planned_bytes"].get<int64_t>(), fused["planned_bytes"].get<int64_t>());
  EXPECT_EQ(recomputing["matrix_flops_per_step"], fused["matrix_flops_per_step"]);
  // Without the attention fusion the step keeps the probabilities for the backward: more planned
  // memory, the same matrix FLOPs (ampc.Attention counts the products it replaced).
  const nlohmann::json unfused_attention =
      bench_json("tiny_gpt", "--precision bf16 --disable-pass fuse-attention");
  ASSERT_FALSE(unfused_attention.is_null());
  EXPECT_EQ(unfused_attention["disabled_passes"], nlohmann::json::array({"fuse-attention"}));
  EXPECT_GT(unfused_attention["planned_bytes"].get<int64_t>(),
            fused["planned_bytes"].get<int64_t>());
  EXPECT_EQ(unfused_attention["matrix_flops_per_step"], fused["matrix_flops_per_step"]);
}

// --comm trains as a data-parallel group of one rank: the step's gradients go through the
// communicator, which changes nothing in the training (the same final loss, bit for bit: a sum
// over one rank), only the time. NCCL needs a GPU.
TEST(BenchCli, CommTrainsAGroupOfOneThroughTheCommunicator) {
  const nlohmann::json alone = bench_json("mlp", "--optimizer adamw");
  const nlohmann::json grouped = bench_json("mlp", "--optimizer adamw --comm gloo");
  ASSERT_FALSE(alone.is_null());
  ASSERT_FALSE(grouped.is_null());
  EXPECT_EQ(alone["comm"], "none");
  EXPECT_EQ(grouped["comm"], "gloo");
  EXPECT_EQ(grouped["final_loss"].get<double>(), alone["final_loss"].get<double>());
  const std::string model = testing::source_path("models/mlp.onnx");
  const std::string data = testing::source_path("models/mlp.train.npz");
  CliResult r = run_ampc("bench " + model + " --data " + data + " --steps 2 --comm gloo");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(", through gloo (one rank): 2 steps"));
  r = run_ampc("bench " + model + " --data " + data + " --comm nccl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--comm nccl communicates between GPUs: use it with --device cuda"));
  r = run_ampc("bench " + model + " --data " + data + " --comm mpi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--comm"));
}

// An export with a dynamic batch (PyTorch's dynamic_axes) trains on the data's batch, to the same
// final loss as the static file, bit for bit.
TEST(BenchCli, ADynamicBatchTakesTheDatasSize) {
  // models/mlp.onnx with its inputs' batch dim named `batch` (tests/data/dynamic/make_models.py).
  const std::string dynamic = testing::source_path("tests/data/dynamic/mlp_batch.onnx");
  const CliResult r =
      run_ampc("bench " + dynamic + " --data " + testing::source_path("models/mlp.train.npz") +
               " --steps 3 --warmup 1 --format json --optimizer sgd");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json fixed = bench_json("mlp", "--optimizer sgd");
  ASSERT_FALSE(fixed.is_null());
  EXPECT_EQ(nlohmann::json::parse(r.out)["final_loss"].get<double>(),
            fixed["final_loss"].get<double>());
}

TEST(BenchCli, BadInputIsNamed) {
  const std::string model = testing::source_path("models/mlp.onnx");
  const std::string data = testing::source_path("models/mlp.train.npz");
  CliResult r = run_ampc("bench " + model + " --data /nonexistent/data.npz");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/data.npz"));
  r = run_ampc("bench " + model + " --data " + data + " --lr 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--lr"));
  r = run_ampc("bench " + model + " --data " + data + " --steps 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--steps"));
  r = run_ampc("bench " + model + " --data " + data + " --no-fuse --recompute cheap");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--recompute cheap does nothing with --no-fuse"));
  r = run_ampc("bench " + model + " --data " + data + " --disable-pass fuse-everything");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--disable-pass: unknown pass 'fuse-everything'"));
  r = run_ampc("bench " + model + " --data " + data + " --loss nosuch");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err,
              HasSubstr("no output 'nosuch' to differentiate; its outputs are loss, logits"));
  r = run_ampc("bench " + model + " --data " + data + " --peak-tflops 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--peak-tflops: must be a finite number > 0, not '0'"));
  r = run_ampc("bench " + model + " --data " + data + " --precision fp8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--precision"));
  r = run_ampc("bench " + model + " --data " + data + " --cuda-graph on");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--cuda-graph on has no effect on the cpu device"));
  r = run_ampc("bench " + model + " --data " + data + " --cuda-graph maybe");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cuda-graph"));
  if (!testing::cuda_device_present()) {
    r = run_ampc("bench " + model + " --data " + data + " --device cuda");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("CUDA"));
  }
}

}  // namespace
}  // namespace ampc
