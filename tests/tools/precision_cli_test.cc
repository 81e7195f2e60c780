// `ampc compile --precision ...`: the written model computes in the decided dtypes and says why
// in every node's doc_string; bad policy flags are errors naming the flag, with nothing written.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "runtime/npy.h"
#include "tests/onnx_model_builder.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using testing::CliResult;
using ::testing::HasSubstr;

class PrecisionCliTest : public testing::TempDirTest {
 protected:
  PrecisionCliTest() : TempDirTest("ampc_precision_cli_") {}

  CliResult compile(const std::string& model, const std::string& flags) const {
    return testing::run_ampc("compile " + testing::source_path("models/" + model + ".onnx") +
                             " -o " + path("out.onnx") + " " + flags);
  }
};

TEST_F(PrecisionCliTest, Fp16ModelCarriesItsDecisionsAndPassesTheChecker) {
  CliResult r = compile("mlp", "--precision fp16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(testing::read_file(path("out.onnx"))));
  EXPECT_NO_THROW(onnx::checker::check_model(proto));
  int casts = 0;
  int gemms_in_f16 = 0;
  for (const onnx::NodeProto& node : proto.graph().node()) {
    EXPECT_THAT(node.doc_string(), HasSubstr("ampc precision:")) << node.name();
    casts += node.op_type() == "Cast";
    if (node.op_type() == "Gemm") {
      EXPECT_THAT(node.doc_string(), HasSubstr("compute=f16 accumulate=f32"));
      EXPECT_THAT(node.doc_string(), HasSubstr("reason=allow-list Gemm"));
      ++gemms_in_f16;
    }
  }
  EXPECT_EQ(gemms_in_f16, 3);
  // An inference compile stores the three weights and biases in f16 (no master weights to
  // keep): x goes down (1), the logits come back up for the loss and for the graph output
  // (which shares it) (1).
  EXPECT_EQ(casts, 2);
  for (const onnx::TensorProto& init : proto.graph().initializer()) {
    EXPECT_EQ(init.data_type(), onnx::TensorProto::FLOAT16) << init.name();
  }
}

TEST_F(PrecisionCliTest, InspectPrecisionShowsEveryDecisionAndTheCasts) {
  CliResult r = compile("mlp", "--precision fp16 --optimizer sgd");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_ampc("inspect --precision " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // A Gemm: its operands cast to f16, computing in f16 with f32 accumulation, and why.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "/fc1/Gemm +Gemm +f16,f16,f16 +f16 +f32 +f16 +allow-list Gemm"));
  EXPECT_THAT(r.out, HasSubstr("casts: 8 (7 to f16, 1 to f32)"));
  // The training step: backward nodes take their forward node's precision, the update is fp32.
  EXPECT_THAT(r.out, HasSubstr("precision of training step"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("/fc1/Gemm/grad/Gemm +Gemm +f16,f16 +f16 +f32 "
                                              "+f16 +gradient of /fc1/Gemm"));
  // The weights' f16 gradients go straight into the fused unscale and check, which writes f32
  // for the f32 master weights: the Casts up (the gradients of the Casts down) are gone.
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "loss_scale/UnscaleGradients +ampc.UnscaleGradients +f32,f16,f16,f16,f16,"
                         "f16,f16 +f32 +- +bool,f32,f32,f32,f32,f32,f32 +loss scaling: fused"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("fc1.weight/to_f16/grad/Cast")));
  EXPECT_THAT(r.out, ::testing::ContainsRegex(
                         "optimizer/SGD +ampc.SGD .* f32 .*optimizer: fp32 master weights"));
  EXPECT_THAT(r.out, HasSubstr("planned memory:"));
}

// The training step's memory by role, against figures derived from the mlp's shapes (8,970
// parameters: 64x64 + 64 + 64x64 + 64 + 64x10 + 10), and against the same model at O0. SGD keeps
// a momentum buffer per parameter only with momentum (PyTorch's is None without).
TEST_F(PrecisionCliTest, InspectPrecisionSplitsTheStateAndComparesWithO0) {
  constexpr int64_t kParameters = 8970;
  struct Case {
    std::string flags;
    int64_t parameter_bytes;  // master weights f32, or the parameters themselves f16 at O3
    int64_t gradient_bytes;
  };
  for (const Case& c :
       // Every parameter is read by an f16 Gemm through its cast down, so every gradient
       // reaches the fused unscale in f16, at O1 as at O3.
       {Case{"--precision fp16", kParameters * 4, kParameters * 2},
        Case{"--precision fp16 --clip-grad-norm 1", kParameters * 4, kParameters * 2},
        Case{"--precision fp16 --opt-level O3", kParameters * 2, kParameters * 2}}) {
    for (const bool momentum : {false, true}) {
      SCOPED_TRACE(c.flags + (momentum ? " --momentum 0.9" : ""));
      CliResult r =
          compile("mlp", c.flags + " --optimizer sgd" + (momentum ? " --momentum 0.9" : ""));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      r = testing::run_ampc("inspect --precision --format json " + path("out.onnx"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const nlohmann::json summary = nlohmann::json::parse(r.out)["graphs"][1]["summary"];
      EXPECT_EQ(summary["state"]["parameters"], c.parameter_bytes);
      // The momentum buffers (stored like the parameters) and the f32 step counter.
      const int64_t buffer_bytes = momentum ? c.parameter_bytes : 0;
      EXPECT_EQ(summary["state"]["optimizer"], buffer_bytes + 4);
      // The dynamic loss scale: the f32 scale, the i64 growth tracker and skipped count.
      EXPECT_EQ(summary["state"]["other"], 4 + 8 + 8);
      EXPECT_EQ(summary["gradient_bytes"], c.gradient_bytes);
      EXPECT_EQ(summary["state_bytes"], c.parameter_bytes + buffer_bytes + 4 + 20);
      // At O0: f32 parameters and momentum, the step counter, no loss scale.
      EXPECT_EQ(summary["o0"]["state_bytes"], (momentum ? 2 : 1) * kParameters * 4 + 4);
      // (The planned memory itself is the planner's: for this small-batch mlp, whose weights
      // outweigh its activations, the f16 copies and casts make it larger than at O0.)
      EXPECT_GT(summary["o0"]["planned_bytes"].get<int64_t>(), 0);
      r = testing::run_ampc("inspect --precision " + path("out.onnx"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_THAT(r.out, HasSubstr("at O0 (every node f32): planned memory "));
    }
  }
}

// `inspect --precision --format json` of the three example models trained at fp16 (O1, AdamW)
// equals the snapshot checked in under tests/data/precision/, which was reviewed by hand against
// docs/precision-policy.md: a change to any decision, reason, cast or memory figure shows up
// here. After an intended change, rewrite the snapshots with
//   AMPC_UPDATE_SNAPSHOTS=1 build/tests/precision_cli_test --gtest_filter='*Snapshot*'
// and review the diff.
TEST_F(PrecisionCliTest, InspectJsonOfTheExampleModelsMatchesTheSnapshot) {
  const bool update = std::getenv("AMPC_UPDATE_SNAPSHOTS") != nullptr;
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    SCOPED_TRACE(model);
    CliResult r = compile(model, "--precision fp16 --optimizer adamw");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = testing::run_ampc("inspect --precision --format json " + path("out.onnx"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string snapshot =
        testing::source_path("tests/data/precision/" + model + ".fp16.adamw.json");
    if (update) {
      std::ofstream(snapshot, std::ios::binary) << r.out;
      continue;
    }
    const std::string expected = testing::read_file(snapshot);
    ASSERT_FALSE(expected.empty()) << "no snapshot " << snapshot;
    if (r.out == expected) continue;
    std::istringstream got(r.out);
    std::istringstream want(expected);
    std::string got_line;
    std::string want_line;
    for (int line = 1;; ++line) {
      const bool more_got = static_cast<bool>(std::getline(got, got_line));
      const bool more_want = static_cast<bool>(std::getline(want, want_line));
      if (!more_got && !more_want) break;
      if (got_line != want_line || more_got != more_want) {
        ADD_FAILURE() << snapshot << " line " << line << ":\n  snapshot: " << want_line
                      << "\n  now:      " << got_line;
        break;
      }
    }
  }
}

// The JSON and dot forms carry the same facts as the text: per-node decisions, the casts.
TEST_F(PrecisionCliTest, InspectPrecisionAsJsonAndDot) {
  CliResult r = compile("mlp", "--precision fp16 --optimizer sgd");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_ampc("inspect --precision --format json " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["schema"], "ampc.precision/1");
  ASSERT_EQ(json["graphs"].size(), 2u);
  EXPECT_EQ(json["graphs"][0]["kind"], "eval");
  EXPECT_EQ(json["graphs"][1]["kind"], "training_step");
  EXPECT_EQ(json["graphs"][0]["summary"]["casts"]["count"], 8);
  EXPECT_EQ(json["graphs"][0]["summary"]["casts"]["to"]["f16"], 7);
  bool saw_gemm = false;
  for (const nlohmann::json& node : json["graphs"][0]["nodes"]) {
    if (node["name"] != "/fc1/Gemm") continue;
    saw_gemm = true;
    EXPECT_EQ(node["compute"], "f16");
    EXPECT_EQ(node["accumulate"], "f32");
    EXPECT_EQ(node["inputs"], nlohmann::json({"f16", "f16", "f16"}));
    EXPECT_EQ(node["reason"], "allow-list Gemm");
  }
  EXPECT_TRUE(saw_gemm);
  int casts = 0;
  for (const nlohmann::json& graph : json["graphs"])
    casts += graph["summary"]["casts"]["count"].get<int>();

  r = testing::run_ampc("inspect --precision --format dot " + path("out.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("digraph \"main_graph\" {")) << r.out.substr(0, 80);
  int diamonds = 0;
  for (size_t at = r.out.find("shape=diamond"); at != std::string::npos;
       at = r.out.find("shape=diamond", at + 1)) {
    ++diamonds;
  }
  EXPECT_EQ(diamonds, casts);
  EXPECT_THAT(r.out, HasSubstr("label=\"/fc1/Gemm\\nGemm f16\""));
}

TEST_F(PrecisionCliTest, CompareTrainsEachPrecisionAndPrintsOneTable) {
  CliResult r =
      testing::run_ampc("compare " + testing::source_path("models/mlp.onnx") + " --data " +
                        testing::source_path("models/mlp.train.npz") + " --steps 20");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("precision"));
  // One line per precision (std::regex: gtest's regex has no \n).
  auto has_line = [&](const std::string& pattern) {
    return std::regex_search(r.out, std::regex("(^|\n)" + pattern + "(\n|$)"));
  };
  EXPECT_TRUE(has_line(R"(fp32 .* - +[0-9.]+ +\+0\.00%)")) << r.out;
  // fp16 trains with dynamic loss scaling (65536 unless a step overflowed); bf16 without.
  EXPECT_TRUE(has_line(R"(fp16 .* ms +[0-9]+ +[0-9]+ +[0-9.]+ +[-+][0-9.]+%)")) << r.out;
  EXPECT_TRUE(has_line(R"(bf16 .* ms +0 +- +[0-9.]+ +[-+][0-9.]+%)")) << r.out;

  r = testing::run_ampc("compare " + testing::source_path("models/mlp.onnx") + " --data " +
                        testing::source_path("models/mlp.train.npz") +
                        " --steps 2 --precisions fp32,fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--precisions fp8: fp8 training is not supported yet"));
  // Every precision is checked before the first is trained.
  EXPECT_THAT(r.err, Not(HasSubstr("trained fp32")));

  const std::string two_steps = "compare " + testing::source_path("models/mlp.onnx") + " --data " +
                                testing::source_path("models/mlp.train.npz") +
                                " --steps 2 --device ";
  EXPECT_EQ(testing::run_ampc(two_steps + "tpu").exit_code, 2);
  if (!testing::cuda_device_present()) {
    r = testing::run_ampc(two_steps + "cuda");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("no usable CUDA device"),
                                        HasSubstr("built without CUDA")));
    EXPECT_EQ(r.out, "");
  }
}

// A model exported without output_names has its loss named after the op that made it; compare and
// bench, which have no --loss flag or leave it unset, train its only float scalar output.
TEST_F(PrecisionCliTest, CompareAndBenchTrainTheOnlyScalarOutputOfAModelWithoutOneNamedLoss) {
  testing::ModelBuilder m(17);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.initializer_f32("w", {3}, {0.5f, -1, 2});
  m.node("Mul", {"x", "w"}, {"xw"}, "mul");
  m.node("Mul", {"xw", "xw"}, {"sq"}, "square");
  testing::add_int_attr(m.node("ReduceSum", {"sq"}, {"cross_entropy_loss"}, "sum"), "keepdims", 0);
  m.output("cross_entropy_loss");
  m.output("xw");
  write("named.onnx", m.bytes());
  ASSERT_TRUE(runtime::write_npz(path("data.npz"),
                                 {{"x", Tensor::from_f32({1, 2, 3}, {1, 2, 3, -1, 0, 1})}})
                  .ok());
  for (const std::string command : {"compare", "bench"}) {
    CliResult r = testing::run_ampc(command + " " + path("named.onnx") + " --data " +
                                    path("data.npz") + " --steps 2");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("the loss is 'cross_entropy_loss', the model's only float "
                                 "scalar output"))
        << command;
  }
}

// A run whose loss turns NaN (here a NaN in the second batch) fails, as ampc train does, naming
// the precision and the step; with one step, none is timed.
TEST_F(PrecisionCliTest, CompareFailsOnADivergedRunAndTimesNoStepOfOne) {
  testing::ModelBuilder m(17);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.initializer_f32("w", {3}, {0.5f, -1, 2});
  m.node("Mul", {"x", "w"}, {"xw"}, "mul");
  m.node("Mul", {"xw", "xw"}, {"sq"}, "square");
  testing::add_int_attr(m.node("ReduceSum", {"sq"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  write("square.onnx", m.bytes());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(runtime::write_npz(
                  path("nan.npz"),
                  {{"x", Tensor::from_f32({2, 2, 3}, {1, 2, 3, -1, 0, 1, 1, nan, 3, -1, 0, 1})}})
                  .ok());
  CliResult r = testing::run_ampc("compare " + path("square.onnx") + " --data " + path("nan.npz") +
                                  " --steps 3 --precisions fp32");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("fp32: training stopped at step 2: the loss is NaN"));

  r = testing::run_ampc("compare " + path("square.onnx") + " --data " + path("nan.npz") +
                        " --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string precision : {"fp32", "fp16", "bf16"}) {
    EXPECT_TRUE(
        std::regex_search(r.out, std::regex("(^|\n)" + precision + " +[0-9,]+ bytes +- +0 ")))
        << r.out;
  }
}

TEST_F(PrecisionCliTest, BadPolicyFlagsAreErrorsAndWriteNothing) {
  write("bf16_o2.json", R"({"precision": "bf16", "opt_level": "O2", "deny": ["Tanh"]})");
  write("fp32.json", R"({"precision": "fp32", "deny": ["Tanh"]})");
  const struct {
    std::string flags;
    std::string needle;
  } cases[] = {
      {"--precision fp16 --allow NoSuchOp", "no op 'NoSuchOp'"},
      {"--precision fp16 --allow Softmax --deny Softmax", "--allow Softmax and --deny Softmax"},
      {"--precision fp8", "not supported yet"},
      {"--precision fp64", "unknown --precision 'fp64'"},
      {"--precision fp16 --opt-level O7", "unknown --opt-level 'O7'"},
      {"--deny Gemm", "add --precision"},
      {"--precision fp16 --policy " + path("missing.json"),
       "--policy: cannot read '" + path("missing.json") + "'"},
      {"--precision fp16 --optimizer sgd --loss-scale static:abc", "expected static:S"},
      {"--precision fp16 --optimizer sgd --loss-scale always", "unknown --loss-scale 'always'"},
      {"--precision fp16 --optimizer sgd --loss-scale dynamic --scale-backoff 1.5",
       "--scale-backoff 1.5"},
      {"--precision fp16 --optimizer sgd --loss-scale dynamic --scale-growth-interval 0",
       "--scale-growth-interval"},
      {"--precision fp16 --optimizer sgd --loss-scale dynamic --scale-hysteresis 0",
       "--scale-hysteresis"},
      // A flag that says otherwise than the policy file names both; fp32 takes no shaping.
      {"--policy " + path("bf16_o2.json") + " --precision fp16",
       "--precision fp16 conflicts with " + path("bf16_o2.json") + ": precision bf16"},
      {"--policy " + path("bf16_o2.json") + " --opt-level O1",
       "--opt-level O1 conflicts with " + path("bf16_o2.json") + ": opt_level O2"},
      {"--precision fp32 --opt-level O2",
       "precision fp32 (--precision) turns mixed precision off, so --opt-level O2 does nothing"},
      {"--precision fp32 --allow Tanh --fp32-nodes x", "so --allow Tanh, --fp32-nodes do nothing"},
      {"--policy " + path("fp32.json"), "so " + path("fp32.json") + ": deny Tanh does nothing"},
      // Levels but O1 decide every node by the level: op lists do nothing there, nor pins at O0.
      {"--precision fp16 --opt-level O2 --deny Gemm",
       "--opt-level O2 decides every node by its level, so --deny Gemm does nothing"},
      {"--precision bf16 --opt-level O3 --allow Softmax", "so --allow Softmax does nothing"},
      {"--precision fp16 --opt-level O0 --fp32-nodes fc1", "so --fp32-nodes does nothing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    CliResult r = compile("mlp", c.flags);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr(c.needle));
    EXPECT_FALSE(std::filesystem::exists(path("out.onnx")));
  }
}

// A regex that pins nothing does nothing: an error naming the flag, and nothing written (one that
// matches a node compiles).
TEST_F(PrecisionCliTest, AnFp32NodesRegexThatMatchesNothingIsAnError) {
  CliResult r = compile("mlp", "--precision bf16 --fp32-nodes '^no_such_node$'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("ampc: error: "));
  EXPECT_THAT(r.err,
              HasSubstr("--fp32-nodes '^no_such_node$' matches no node, so it pins nothing"));
  EXPECT_FALSE(std::filesystem::exists(path("out.onnx")));
  r = compile("mlp", "--precision bf16 --fp32-nodes 'fc1'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace ampc
