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

TEST(Autodiff, OpWithoutAGradientRuleOnThePathIsAnErrorNamingTheNode) {
  OpDef def;
  def.domain = "ampc";
  def.name = "AutodiffTestOpaque";
  def.inputs.push_back(OperandSpec{"X", OperandSpec::Arity::kSingle, {}});
  def.outputs.push_back(OperandSpec{"Y", OperandSpec::Arity::kSingle, {}});
  def.infer = [](InferenceContext& ctx) {
    ctx.set_output(0, ctx.input_type(0));
    return absl::OkStatus();
  };
  OpRegistry::global().add(std::move(def));
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g() opset(17, ampc:1) {
      init %w: f32[] = [2.0]
      %loss = ampc.AutodiffTestOpaque(%w) : f32[]
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

}  // namespace
}  // namespace ampc
