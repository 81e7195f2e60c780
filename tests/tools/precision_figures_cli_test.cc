// What `ampc inspect --precision` measures, and that the O0 baseline `ampc compile --precision`
// records and `ampc compare`'s planned memory measure the same thing the same way; how it
// reports fused nodes, nameless nodes and a file compiled without --precision.
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"
#include "tests/onnx_model_builder.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using testing::CliResult;
using ::testing::HasSubstr;

class PrecisionFiguresCliTest : public testing::TempDirTest {
 protected:
  PrecisionFiguresCliTest() : TempDirTest("ampc_precision_figures_") {}

  // `inspect --precision --format json` of `model` (a file of models/, or a path) compiled with
  // `flags` into `out`.
  nlohmann::json compile_and_inspect(const std::string& model, const std::string& flags,
                                     const std::string& out = "out.onnx") const {
    const std::string input = model.find('/') == std::string::npos
                                  ? testing::source_path("models/" + model + ".onnx")
                                  : model;
    CliResult r = testing::run_ampc("compile " + input + " -o " + path(out) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = testing::run_ampc("inspect --precision --format json " + path(out));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
};

// weight_bytes or state_bytes: the figure the o0 entry holds for the graph's kind.
int64_t memory_figure(const nlohmann::json& summary) {
  return summary.contains("state_bytes") ? summary["state_bytes"].get<int64_t>()
                                         : summary["weight_bytes"].get<int64_t>();
}

// An O0 compile is its own baseline to the byte, and the baseline is what inspect reports for the
// plain fp32 compile of the same model: one measure, taken on the model as its file holds it
// (export adds the ReduceSum axes and Split sizes the opset takes as inputs; the baseline once
// measured the graph before export and missed them).
TEST_F(PrecisionFiguresCliTest, AnO0CompileShowsNoChangeAgainstItsBaseline) {
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    for (const std::string training : {"", " --optimizer adamw"}) {
      SCOPED_TRACE(model + training);
      const nlohmann::json o0 =
          compile_and_inspect(model, "--precision fp16 --opt-level O0" + training, "o0.onnx");
      const nlohmann::json fp32 = compile_and_inspect(model, training, "fp32.onnx");
      ASSERT_EQ(o0["graphs"].size(), fp32["graphs"].size());
      for (size_t g = 0; g < o0["graphs"].size(); ++g) {
        const nlohmann::json& summary = o0["graphs"][g]["summary"];
        SCOPED_TRACE(o0["graphs"][g]["kind"].get<std::string>());
        ASSERT_TRUE(summary["o0"].is_object()) << summary.dump();
        EXPECT_EQ(summary["o0"]["planned_bytes"], summary["planned_memory"]["total"]);
        EXPECT_EQ(memory_figure(summary["o0"]), memory_figure(summary));
        const nlohmann::json& plain = fp32["graphs"][g]["summary"];
        EXPECT_EQ(summary["o0"]["planned_bytes"], plain["planned_memory"]["total"]);
        EXPECT_EQ(memory_figure(summary["o0"]), memory_figure(plain));
      }
      const CliResult r = testing::run_ampc("inspect --precision " + path("o0.onnx"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_THAT(r.out, HasSubstr("(this compile +0.0%)"));
      EXPECT_THAT(r.out, ::testing::Not(::testing::ContainsRegex("this compile [-+]0\\.[1-9]")));
    }
  }
}

// weight_bytes counts the floating-point initializers that are not program constants: an i64
// shape tensor the exporter stored as an initializer is not a weight.
TEST_F(PrecisionFiguresCliTest, WeightBytesCountOnlyFloatingPointWeights) {
  testing::ModelBuilder m(17);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "6"});
  m.initializer_f32("w", {6, 4}, std::vector<float>(24, 0.5f));
  m.initializer_i64("shape", {2}, {4, 2});
  m.node("MatMul", {"x", "w"}, {"xw"}, "matmul");
  m.node("Reshape", {"xw", "shape"}, {"y"}, "reshape");
  m.output("y");
  write("model.onnx", m.bytes());
  const nlohmann::json json = compile_and_inspect(path("model.onnx"), "--precision bf16");
  const nlohmann::json& summary = json["graphs"][0]["summary"];
  // w stored in bf16 for the bf16 MatMul: 24 x 2 bytes; the shape is not counted.
  EXPECT_EQ(summary["weight_bytes"], 48) << summary.dump();
  // At O0 the same weight in f32.
  EXPECT_EQ(summary["o0"]["weight_bytes"], 96) << summary.dump();
}

// compare's planned memory for each precision is the figure inspect gives the file `ampc compile`
// writes with the same flags (its optimizer, adamw; fp16 with dynamic loss scaling).
TEST_F(PrecisionFiguresCliTest, CompareShowsThePlannedMemoryInspectGivesTheSameCompile) {
  const CliResult r =
      testing::run_ampc("compare " + testing::source_path("models/mlp.onnx") + " --data " +
                        testing::source_path("models/mlp.train.npz") + " --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string precision : {"fp32", "fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    std::smatch match;
    ASSERT_TRUE(
        std::regex_search(r.out, match, std::regex("(^|\n)" + precision + " +([0-9,]+) bytes")))
        << r.out;
    const std::string compared = std::regex_replace(match[2].str(), std::regex(","), "");
    const nlohmann::json json = compile_and_inspect(
        "mlp", (precision == "fp32" ? "" : "--precision " + precision) + " --optimizer adamw");
    EXPECT_EQ(std::stoll(compared),
              json["graphs"][1]["summary"]["planned_memory"]["total"].get<int64_t>());
  }
}

// A fused node computes in the widest dtype of its body: cnn's fused gradient of the f32 global
// pool's Expand, then the Cast back to f16, computes in f32 (its last member, the Cast, is f16).
// Text, JSON counts and dot colours agree; the casts the bodies hold are counted on their own.
TEST_F(PrecisionFiguresCliTest, AFusedNodeReportsTheWidestDtypeOfItsBody) {
  const nlohmann::json json = compile_and_inspect("cnn", "--precision fp16 --optimizer adamw");
  const nlohmann::json& step = json["graphs"][1];
  const std::string fused = "/MaxPool_1_output_0/to_f32/grad/Cast/fused";
  std::map<std::string, int> by_compute;
  bool saw_fused = false;
  for (const nlohmann::json& node : step["nodes"]) {
    by_compute[node["compute"].is_null() ? "-" : node["compute"].get<std::string>()]++;
    if (node["name"] != fused) continue;
    saw_fused = true;
    EXPECT_EQ(node["op"], "ampc.FusedElementwise");
    EXPECT_EQ(node["compute"], "f32");
    EXPECT_EQ(node["outputs"], nlohmann::json({"f16"}));
  }
  EXPECT_TRUE(saw_fused);
  EXPECT_EQ(nlohmann::json(by_compute), step["summary"]["nodes_by_compute"]);
  CliResult r = testing::run_ampc("inspect --precision " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              ::testing::ContainsRegex(fused + " +ampc.FusedElementwise +f32 +f32 +- +f16 +fuses"));
  r = testing::run_ampc("inspect --precision --format dot " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[label=\"" + fused +
                               "\\nFusedElementwise f32\", shape=box, style=filled, "
                               "fillcolor=\"#fdd0a2\""));

  // Fusion moves casts into bodies, and the casts figure keeps them apart: the standalone ones
  // and those inside fused nodes add up to the casts of the same compile without fusion.
  const nlohmann::json fused_step = compile_and_inspect(
      "tiny_gpt", "--precision fp16 --optimizer adamw", "fused.onnx")["graphs"][1]["summary"];
  const nlohmann::json unfused_step = compile_and_inspect(
      "tiny_gpt", "--precision fp16 --optimizer adamw --disable-pass fuse-elementwise",
      "unfused.onnx")["graphs"][1]["summary"];
  EXPECT_GT(fused_step["casts"]["fused"]["count"].get<int>(), 0);
  EXPECT_EQ(
      fused_step["casts"]["count"].get<int>() + fused_step["casts"]["fused"]["count"].get<int>(),
      unfused_step["casts"]["count"].get<int>());
  EXPECT_EQ(unfused_step["casts"]["fused"]["count"], 0);
}

// A node the file leaves nameless (the optimizer's step counter) is reported as nameless, with
// the output that identifies it, never under its op type.
TEST_F(PrecisionFiguresCliTest, ANamelessNodeIsReportedByItsOutput) {
  const nlohmann::json json = compile_and_inspect("mlp", "--precision bf16 --optimizer adamw");
  bool saw_counter = false;
  for (const nlohmann::json& node : json["graphs"][1]["nodes"]) {
    EXPECT_NE(node["name"], node["op"]) << node.dump();
    if (node["name"] != "") continue;
    EXPECT_TRUE(node.contains("output_name")) << node.dump();
    if (node["output_name"] == "optimizer.step.next") saw_counter = true;
  }
  EXPECT_TRUE(saw_counter);
  CliResult r = testing::run_ampc("inspect --precision " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::ContainsRegex("\\(no name: %optimizer.step.next\\) +Add +f32"));
}

// Without --precision no node has a decision: they are counted as undecided, not under "-",
// which counts the decided nodes with no floating-point data.
TEST_F(PrecisionFiguresCliTest, AFileCompiledWithoutPrecisionCountsItsNodesAsUndecided) {
  const nlohmann::json json = compile_and_inspect("mlp", "--optimizer adamw");
  for (const nlohmann::json& graph : json["graphs"]) {
    EXPECT_EQ(graph["summary"]["nodes_by_compute"],
              nlohmann::json({{"undecided", graph["nodes"].size()}}));
    EXPECT_TRUE(graph["summary"]["o0"].is_null());
  }
}

}  // namespace
}  // namespace ampc
