// autodiff: the walker's own behaviour (loss checks, which values are trainable, errors), and
// gradients of whole graphs (broadcasting, values read several times, tied weights) against
// central differences in f64.
#include <random>

#include "compiler/op_def.h"
#include "passes/passes.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

absl::StatusOr<bool> run_autodiff(Graph& graph, Diagnostics& diagnostics,
                                  AutodiffOptions options = {}) {
  return make_autodiff_pass(std::move(options))->run(graph, PassContext{&diagnostics});
}

TEST(Autodiff, LossMustBeAFloatScalar) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [1.0, 2.0]
      %loss = Mul(%x, %w) : f32[2]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("must be a float scalar"), std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("f32[2]"), std::string::npos) << result.status();
}

TEST(Autodiff, MissingLossOutputListsTheOutputs) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) {
      %total = ReduceSum<keepdims=0>(%x) : f32[]
      return %total
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("'loss'"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("total"), std::string::npos) << result.status();
}

TEST(Autodiff, ParameterTheLossDoesNotReadIsReportedAndLeftFrozen) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [1.0, 2.0]
      %side = Mul(%x, %w) : f32[2]
      %loss = ReduceSum<keepdims=0>(%x) : f32[]
      return %loss, %side
    })");
  ASSERT_NE(graph, nullptr);
  const std::string before = print_graph(*graph);
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(*result);
  EXPECT_EQ(print_graph(*graph), before);
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_NE(diagnostics.warnings()[0].find("'w' does not affect 'loss'"), std::string::npos)
      << diagnostics.warnings()[0];
}

// A float buffer that only feeds comparisons (an attention mask) and BatchNorm running
// statistics are data and state, not parameters: not trained, and no warning about them.
TEST(Autodiff, BuffersWithoutADifferentiablePathAreNotParametersAndNotReported) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2,2,1,1]) opset(17) {
      init %mask: f32[2] = [1.0, 0.0]
      init %zero: f32[] = [0.0]
      init %scale: f32[2] = [1.0, 2.0]
      init %bias: f32[2] = [0.0, 0.5]
      init %mean: f32[2] = [0.0, 0.0]
      init %var: f32[2] = [1.0, 1.0]
      %keep = Equal(%mask, %zero) : bool[2]
      %y, %m, %v = BatchNormalization<training_mode=1>(%x, %scale, %bias, %mean, %var) : f32[2,2,1,1], f32[2], f32[2]
      %sq = Mul(%y, %y) : f32[2,2,1,1]
      %loss = ReduceSum<keepdims=0>(%sq) : f32[]
      return %loss, %keep
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(diagnostics.warnings().empty()) << diagnostics.warnings()[0];
  std::vector<std::string> outputs;
  for (const Value* output : graph->outputs()) outputs.push_back(output->name());
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "keep", "scale.grad", "bias.grad"}));
}

// What exporters lift into initializers without being parameters: a Pow exponent (training it
// takes log of negative bases), an additive mask of -inf (a step turns it into NaN) and one of
// the lowest f32 (torch.finfo(float32).min, as the dynamo exporter folds causal masks). None is
// trained by default; --trainable names the scalar to train it.
TEST(Autodiff, LiftedScalarsAndNonFiniteMasksAreNotTrainedByDefault) {
  const char* text = R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [1.0, 2.0]
      init %two: f32[] = [2.0]
      init %val_72: f32[1] = [1.5]
      init %bias: f32[1] = [0.25]
      init %mask: f32[2] = [0.0, -inf]
      init %lowest: f32[2] = [-3.4028235e+38, 0.0]
      %h0 = Mul(%x, %w) : f32[2]
      %h1 = Div(%h0, %val_72) : f32[2]
      %h = Add(%h1, %bias) : f32[2]
      %sq = Pow(%h, %two) : f32[2]
      %masked = Add(%sq, %mask) : f32[2]
      %masked2 = Add(%masked, %lowest) : f32[2]
      %e = Exp(%masked2) : f32[2]
      %loss = ReduceSum<keepdims=0>(%e) : f32[]
      return %loss
    })";
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::string> grads;
  for (const Value* output : graph->outputs()) grads.push_back(output->name());
  // A [1] parameter with a module's name (a one-output Linear's bias) trains.
  EXPECT_EQ(grads, (std::vector<std::string>{"loss", "w.grad", "bias.grad"}));
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_NE(diagnostics.warnings()[0].find("lifted constants two, val_72 are taken as constants"),
            std::string::npos)
      << diagnostics.warnings()[0];

  std::unique_ptr<Graph> named = testing::parse_or_fail(text);
  ASSERT_NE(named, nullptr);
  Diagnostics named_diagnostics;
  AutodiffOptions options;
  options.trainable = "^(w|two|val_72|bias|mask)$";
  result = run_autodiff(*named, named_diagnostics, options);
  ASSERT_TRUE(result.ok()) << result.status();
  grads.clear();
  for (const Value* output : named->outputs()) grads.push_back(output->name());
  EXPECT_EQ(grads,
            (std::vector<std::string>{"loss", "w.grad", "two.grad", "val_72.grad", "bias.grad"}));
  ASSERT_EQ(named_diagnostics.warnings().size(), 1u);
  EXPECT_NE(
      named_diagnostics.warnings()[0].find("'mask' holds inf, NaN or its type's largest values"),
      std::string::npos)
      << named_diagnostics.warnings()[0];
}

TEST(Autodiff, OpWithoutAGradientRuleOnThePathIsAnErrorNamingTheNode) {
  testing::register_passthrough_op("AutodiffTestOpaque");
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g() opset(17, ampc:1) {
      init %w: f32[2] = [2.0, 3.0]
      %y = ampc.AutodiffTestOpaque(%w) : f32[2]
      %loss = ReduceSum<keepdims=0>(%y) : f32[]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  graph->node_list()[0]->set_name("mystery");
  Diagnostics diagnostics;
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("mystery"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("no gradient rule"), std::string::npos)
      << result.status();
}

TEST(Autodiff, FreezeAndTrainableRegexesChooseTheParameters) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g() {
      init %fc.weight: f32[] = [2.0]
      %loss = Identity(%fc.weight) : f32[]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  AutodiffOptions options;
  options.freeze = "weight$";
  absl::StatusOr<bool> result = run_autodiff(*graph, diagnostics, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(*result) << "a frozen parameter gets no gradient";
  options.freeze = "(";
  EXPECT_FALSE(run_autodiff(*graph, diagnostics, options).ok()) << "a bad regex is an error";
}

// Whole graphs against central differences in f64 (tests/gradient_check.h).
void expect_gradients_match(std::string_view text, const std::string& wrt) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  ASSERT_NE(graph, nullptr);
  std::mt19937 rng(5);
  std::vector<Tensor> inputs;
  for (const Value* input : graph->inputs()) {
    if (is_float(input->dtype())) {
      inputs.push_back(testing::random_tensor(input->type(), rng, -1, 1));
    } else {
      // Indices: 0, 1, 2, ... wrapping at 3, so every case below repeats some.
      Tensor indices(input->type());
      for (int64_t i = 0; i < indices.num_elements(); ++i) indices.set_element_i64(i, i % 3);
      inputs.push_back(indices);
    }
  }
  absl::StatusOr<testing::GradientCheck> check = testing::check_gradients(*graph, inputs, wrt);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_GT(check->inputs_checked, 0);
  EXPECT_LT(check->max_relative_error, 1e-6) << "worst: " << check->worst_input;
}

TEST(AutodiffGradients, TwoLayerPerceptronWithBroadcastBiases) {
  expect_gradients_match(R"(
    graph g(%x: f64[4,3], %w1: f64[3,5], %b1: f64[5], %w2: f64[5,2], %b2: f64[2]) {
      %h = MatMul(%x, %w1) : f64[4,5]
      %hb = Add(%h, %b1) : f64[4,5]
      %a = Tanh(%hb) : f64[4,5]
      %y = MatMul(%a, %w2) : f64[4,2]
      %yb = Add(%y, %b2) : f64[4,2]
      %sq = Mul(%yb, %yb) : f64[4,2]
      %loss = ReduceMean<keepdims=0>(%sq) : f64[]
      return %loss
    })",
                         "^(w|b)");
}

TEST(AutodiffGradients, BroadcastingBothWaysIsSummedBackToEachShape) {
  expect_gradients_match(R"(
    graph g(%a: f64[3,1], %b: f64[1,4], %c: f64[]) {
      %s = Add(%a, %b) : f64[3,4]
      %p = Mul(%s, %c) : f64[3,4]
      %e = Exp(%p) : f64[3,4]
      %loss = ReduceSum<keepdims=0>(%e) : f64[]
      return %loss
    })",
                         "^[abc]$");
}

TEST(AutodiffGradients, TiedEmbeddingAndHeadSumBothUses) {
  // The embedding table is read by Gather (rows, repeated indices) and, transposed, by the
  // output projection: its gradient is the sum of both.
  expect_gradients_match(R"(
    graph g(%tokens: i64[5], %table: f64[3,4]) {
      %h = Gather<axis=0>(%table, %tokens) : f64[5,4]
      %t = Transpose<perm=[1,0]>(%table) : f64[4,3]
      %logits = MatMul(%h, %t) : f64[5,3]
      %p = Softmax<axis=-1>(%logits) : f64[5,3]
      %sq = Mul(%p, %logits) : f64[5,3]
      %loss = ReduceSum<keepdims=0>(%sq) : f64[]
      return %loss
    })",
                         "^table$");
}

TEST(AutodiffGradients, ValueReadTwiceByOneNode) {
  expect_gradients_match(R"(
    graph g(%x: f64[6]) {
      %sq = Mul(%x, %x) : f64[6]
      %s = Sigmoid(%sq) : f64[6]
      %loss = ReduceSum<keepdims=0>(%s) : f64[]
      return %loss
    })",
                         "^x$");
}

}  // namespace
}  // namespace ampc
