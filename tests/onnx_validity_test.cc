// Every model the suite compiles (the example models in models/ and every file of the model zoo
// in models/zoo/), at fp32, fp16 and bf16, for inference and with a training step, is valid
// ONNX: the ONNX checker and strict shape inference with type checks accept it. That needs every
// node's element types to be legal at the file's opset; mixed precision raises the opset where
// the model's does not admit them (bf16 Conv and pooling from 22; passes/legalize_opset.cc).
//
// The checker is the ONNX library the build links. Debian's libonnx 1.12 knows ai.onnx up to
// opset 17, so it cannot judge a file of a later opset (it would read ReduceMean-18's axes input
// by ReduceMean-13's schema): those files are only re-imported here, and tools/check_onnx.py
// checks all of them with the current onnx from PyPI (its last run: docs/training-graph.md).
#include <filesystem>
#include <fstream>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/precision_policy.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;

// The highest ai.onnx opset the linked ONNX library defines.
int64_t checker_opset() {
  return onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
}

std::vector<std::string> models() {
  std::vector<std::string> paths;
  for (const char* folder : {"models", "models/zoo"}) {
    for (const auto& entry : fs::directory_iterator(testing::source_path(folder))) {
      if (entry.path().extension() == ".onnx") paths.push_back(entry.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

CompileOptions options_for(const std::string& precision, bool training) {
  CompileOptions options;
  if (training) {
    options.training = TrainingOptions{};
    options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  }
  if (precision != "fp32") {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = precision == "fp16" ? DType::kF16 : DType::kBF16;
  }
  return options;
}

TEST(OnnxValidity, EveryCompiledModelPassesTheCheckerWithFullShapeInference) {
  const int64_t known = checker_opset();
  int checked = 0;
  int beyond = 0;
  int raised = 0;
  for (const std::string& path : models()) {
    const std::string file = fs::path(path).filename().string();
    for (const std::string precision : {"fp32", "fp16", "bf16"}) {
      for (const bool training : {false, true}) {
        const std::string what = str_cat(file, " at ", precision, training ? " with AdamW" : "");
        Diagnostics diagnostics;
        absl::StatusOr<std::unique_ptr<Graph>> graph =
            compile_file(path, options_for(precision, training), diagnostics);
        if (!graph.ok()) {
          // An export that does not import names what it lacks (tests/runtime/zoo_test.cc).
          EXPECT_EQ(graph.status().code(), absl::StatusCode::kUnimplemented)
              << what << ": " << graph.status();
          continue;
        }
        absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
        ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status();
        absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*bytes, file);
        EXPECT_TRUE(again.ok()) << what << ": " << again.status();
        const int64_t opset = (*graph)->opset("");
        if (opset > known) {
          ++beyond;
        } else {
          EXPECT_EQ(testing::onnx_checker_errors(*bytes), "") << what << " (opset " << opset << ")";
          ++checked;
        }
        // A bf16 CNN's Conv is legal ONNX only from opset 22.
        if (precision == "bf16" && (file == "cnn.onnx" || file == "res_cnn.torchscript.onnx")) {
          EXPECT_EQ(opset, 22) << what;
          ++raised;
        }
      }
    }
  }
  std::printf("checked %d compiled files; %d are at opsets beyond %lld, the linked checker's\n",
              checked, beyond, static_cast<long long>(known));
  EXPECT_GE(checked, 40);
  EXPECT_EQ(raised, 4);
}

// fp32 and fp16 keep the model's opset: nothing there needs a later one.
TEST(OnnxValidity, OnlyTypesTheModelsOpsetRejectsRaiseIt) {
  for (const std::string precision : {"fp32", "fp16"}) {
    Diagnostics diagnostics;
    absl::StatusOr<std::unique_ptr<Graph>> graph = compile_file(
        testing::source_path("models/cnn.onnx"), options_for(precision, true), diagnostics);
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ((*graph)->opset(""), 17) << precision;
  }
}

// ONNX admits f16 and bf16 Celu only from opset 28: a mixed-precision compile keeps it fp32, so
// the file stays at the model's opset and passes the checker; a policy that makes it low (--follow
// Celu) raises the file to opset 28, where it is legal.
TEST(OnnxValidity, ACeluKeepsTheFileLegalAtItsOpset) {
  constexpr std::string_view kModel = R"(
    graph g(%x: f32[4,2]) opset(17) {
      init %w: f32[2,2] = [0.5, -1.0, 0.25, 2.0]
      %a = MatMul(%x, %w) {name="mm"} : f32[4,2]
      %c = Celu<alpha=2.0>(%a) {name="celu"} : f32[4,2]
      %d = MatMul(%c, %w) {name="mm2"} : f32[4,2]
      %loss = ReduceSum<keepdims=0>(%d) {name="sum"} : f32[]
      return %loss
    })";
  for (const std::string precision : {"fp16", "bf16"}) {
    for (const bool named : {false, true}) {
      SCOPED_TRACE(precision + (named ? " --follow Celu" : ""));
      std::unique_ptr<Graph> graph = testing::parse_or_fail(kModel);
      ASSERT_NE(graph, nullptr);
      CompileOptions options = options_for(precision, true);
      if (named) {
        ASSERT_TRUE(add_op_entry(options.mixed_precision->policy, "Celu", AutocastCategory::kFollow,
                                 "--follow Celu")
                        .ok());
      }
      Diagnostics diagnostics;
      ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
      EXPECT_TRUE(diagnostics.warnings().empty()) << diagnostics.warnings()[0];
      EXPECT_EQ(graph->opset(""), named ? 28 : 17);
      if (named) continue;  // beyond the linked checker's opsets
      absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(testing::onnx_checker_errors(*bytes), "");
    }
  }
}

}  // namespace
}  // namespace ampc
