// What the precision report says of the nodes the training step's own passes add (compiled at
// fp16 with AdamW, the example CNN: BatchNorm, convolutions, a bias-gradient sum, loss scaling):
// every node that reads or writes floats has a compute dtype (a test of floats, IsNaN, computes in
// what it reads); every node whose kernel accumulates in fp32 says so, a gradient's as a forward
// node's (the bias gradient's ReduceSum did not); and the running statistics' guard and the loss
// scale's inverse say what they are (they read "optimizer: fp32 master weights and state").
#include <string>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

std::unique_ptr<Graph> cnn_at_fp16() {
  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  // Fused nodes report their bodies' nodes in one line: each node is looked at alone here.
  options.pipeline.disabled = {"fuse-elementwise"};
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/cnn.onnx"), options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

bool holds_floats(const Node& node) {
  for (int i = 0; i < node.num_operands(); ++i) {
    if (node.has_operand(i) && is_arithmetic_float(node.operand(i)->dtype())) return true;
  }
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i) && is_arithmetic_float(node.output(i)->dtype())) return true;
  }
  return false;
}

TEST(StepReasons, TheStepsOwnNodesSayWhatTheyComputeAndWhy) {
  std::unique_ptr<Graph> graph = cnn_at_fp16();
  ASSERT_NE(graph, nullptr);
  const Graph& step = *graph->training_step();
  int guards = 0, inverses = 0, low_sums = 0;
  for (const auto& node : step.nodes()) {
    SCOPED_TRACE(node->describe());
    const PrecisionDecision& d = node->precision();
    EXPECT_EQ(d.compute.has_value(), holds_floats(*node)) << d.reason;
    if (node->op_type() == "ReduceSum" && d.compute != DType::kF32) {
      ++low_sums;
      EXPECT_EQ(d.accumulate, DType::kF32) << d.reason;
    }
    if (node->name().find("/keep_finite/") != std::string::npos) {
      ++guards;
      EXPECT_EQ(d.compute, DType::kF32);
      EXPECT_EQ(d.reason, "BatchNorm's running statistics, in their dtype");
    }
    if (node->name() == "loss_scale/Cast" || node->name() == "loss_scale/Reciprocal") {
      ++inverses;
      EXPECT_NE(d.reason.find("loss scaling: 1 / scale taken in f64"), std::string::npos)
          << d.reason;
    }
  }
  EXPECT_EQ(guards, 4 * 4);  // Mul, ReduceSum, IsNaN, Where for 2 BatchNorms' 2 statistics
  EXPECT_EQ(inverses, 3);    // Cast to f64, Reciprocal, Cast to f32
  EXPECT_GT(low_sums, 0);
}

}  // namespace
}  // namespace ampc
