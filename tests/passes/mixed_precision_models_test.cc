// The example models compiled for training at fp16 (O1): the exact casts and per-dtype node
// counts of the eval graph, whose fp32 master weights are each cast once, derived by hand from
// the policy (docs/precision-policy.md) below, and for tiny_gpt the invariants that must hold of
// any model; an inference compile stores the weights in f16 instead.
#include <map>
#include <set>

#include "compiler/compile.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

std::unique_ptr<Graph> compile_fp16(const std::string& model, bool training = true) {
  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  if (training) {
    options.training = TrainingOptions{};
    options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  }
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + model + ".onnx"), options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  EXPECT_TRUE(diagnostics.warnings().empty()) << diagnostics.warnings()[0];
  return graph.ok() ? *std::move(graph) : nullptr;
}

struct Counts {
  int casts_to_f16 = 0;
  int casts_to_f32 = 0;
  std::map<std::string, int> by_compute;  // "f16", "f32", "-" (no float data)
};

Counts count(const Graph& graph) {
  Counts c;
  for (const auto& node : graph.nodes()) {
    const PrecisionDecision& d = node->precision();
    c.by_compute[d.compute ? std::string(dtype_name(*d.compute)) : "-"]++;
    if (node->op_type() != "Cast") continue;
    c.casts_to_f16 += node->output(0)->dtype() == DType::kF16;
    c.casts_to_f32 += node->output(0)->dtype() == DType::kF32;
  }
  return c;
}

// Gemm x3 (allow) f16, Relu x2 (clear, after a Gemm) f16, SoftmaxCrossEntropyLoss (deny) f32.
// Casts down: x and the three weights and biases (7); up: the logits, once, for the loss and the
// graph output `logits` together.
TEST(MixedPrecisionModels, Mlp) {
  std::unique_ptr<Graph> graph = compile_fp16("mlp");
  ASSERT_NE(graph, nullptr);
  const Counts c = count(*graph);
  EXPECT_EQ(c.casts_to_f16, 7);
  EXPECT_EQ(c.casts_to_f32, 1);
  EXPECT_EQ(c.by_compute, (std::map<std::string, int>{{"f16", 5 + 7}, {"f32", 1 + 1}}));
}

// Conv x2 (allow), BatchNormalization x2 (follow; its statistics are fp32 operands and do not
// count), Relu x2 and MaxPool x2 (clear), Gemm (allow): 9 nodes f16. GlobalAveragePool (deny),
// Flatten (clear, after it) and the loss: 3 nodes f32. Casts down: x, both convs' weight and
// bias, the flattened features and fc's weight and bias (8); up: the last MaxPool's output for
// GlobalAveragePool, and the logits (2).
// An inference compile needs no fp32 master weights: the weights are stored in f16 (rounded
// at compile time to what the casts above would give), so only x goes down and the logits up.
TEST(MixedPrecisionModels, MlpForInferenceStoresItsWeightsInF16) {
  std::unique_ptr<Graph> graph = compile_fp16("mlp", /*training=*/false);
  ASSERT_NE(graph, nullptr);
  const Counts c = count(*graph);
  EXPECT_EQ(c.casts_to_f16, 1);
  EXPECT_EQ(c.casts_to_f32, 1);
  EXPECT_EQ(c.by_compute, (std::map<std::string, int>{{"f16", 5 + 1}, {"f32", 1 + 1}}));
  for (const Value* init : graph->initializers()) {
    EXPECT_EQ(init->dtype(), DType::kF16) << init->name();
  }
}

TEST(MixedPrecisionModels, Cnn) {
  std::unique_ptr<Graph> graph = compile_fp16("cnn");
  ASSERT_NE(graph, nullptr);
  const Counts c = count(*graph);
  EXPECT_EQ(c.casts_to_f16, 8);
  EXPECT_EQ(c.casts_to_f32, 2);
  EXPECT_EQ(c.by_compute, (std::map<std::string, int>{{"f16", 9 + 8}, {"f32", 3 + 2}}));
}

// Invariants of any compiled model: every MatMul/Gemm computes in f16 (nothing pins them here),
// every deny-list op in f32, every node reads its float operands in its compute dtype (but the
// fp32 operands of its op), no value is cast twice to one dtype, and no Cast reads a Cast.
TEST(MixedPrecisionModels, TinyGptInvariants) {
  std::unique_ptr<Graph> graph = compile_fp16("tiny_gpt");
  ASSERT_NE(graph, nullptr);
  std::set<std::pair<const Value*, DType>> casts;
  int matmuls = 0;
  for (const auto& node : graph->nodes()) {
    const PrecisionDecision& d = node->precision();
    const std::string& op = node->op_type();
    if (op == "MatMul" || op == "Gemm") {
      EXPECT_EQ(d.compute, DType::kF16) << node->describe();
      ++matmuls;
    }
    if (op == "Softmax" || op == "LayerNormalization" || op == "SoftmaxCrossEntropyLoss") {
      EXPECT_EQ(d.compute, DType::kF32) << node->describe();
    }
    if (op == "Cast") {
      EXPECT_TRUE(casts.insert({node->operand(0), node->output(0)->dtype()}).second)
          << node->describe() << " casts a value a second time";
      const Node* producer = node->operand(0)->producer();
      EXPECT_FALSE(producer != nullptr && producer->op_type() == "Cast") << node->describe();
      continue;
    }
    if (!d.compute || (*d.compute != DType::kF16 && *d.compute != DType::kF32)) continue;
    const std::vector<int> fp32 = node->def()->autocast.fp32_operands;
    for (int i = 0; i < node->num_operands(); ++i) {
      const Value* operand = node->operand(i);
      if (operand == nullptr) continue;
      const DType dtype = operand->dtype();
      if (dtype != DType::kF16 && dtype != DType::kF32) continue;
      const bool keeps_fp32 = std::find(fp32.begin(), fp32.end(), i) != fp32.end();
      EXPECT_EQ(dtype, keeps_fp32 ? DType::kF32 : *d.compute)
          << node->describe() << " operand " << i;
    }
  }
  // Per block: qkv, q @ k^T, attention @ v, proj, fc, fc_out; then the LM head.
  EXPECT_EQ(matmuls, 2 * 6 + 1);
  for (const Value* output : graph->outputs()) EXPECT_EQ(output->dtype(), DType::kF32);
}

// A training compile explains every node of both graphs: the eval graph (whose BatchNorms the
// training-step pass rebuilds in eval mode) and the step (backward, loss scaling, optimizer).
TEST(MixedPrecisionModels, EveryNodeOfATrainingCompileHasADecision) {
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    std::unique_ptr<Graph> graph = compile_fp16(model, /*training=*/true);
    ASSERT_NE(graph, nullptr) << model;
    ASSERT_NE(graph->training_step(), nullptr) << model;
    for (const Graph* g : {static_cast<const Graph*>(graph.get()), graph->training_step()}) {
      for (const auto& node : g->nodes()) {
        EXPECT_FALSE(node->precision().reason.empty()) << model << ": " << node->describe();
      }
    }
  }
}

}  // namespace
}  // namespace ampc
