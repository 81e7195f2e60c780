// Which output a training compile differentiates when the user names none: the output named
// `loss`, else the model's only float scalar output (exporters name it after its op:
// `cross_entropy_loss`, `add_3`), with a warning that says which; never a guess between two.
// And the names the training step gives what it adds: a model's value under one of them is
// renamed (an intermediate) or refused (a name the model shows).
#include <string>

#include "compiler/compile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;

// sum((x * w)^2) as `total`, and, with `second`, a second float scalar output (the mean).
std::unique_ptr<Graph> model(bool second) {
  const std::string mean =
      second
          ? "      %mean = ReduceMean<keepdims=0>(%sq) : f32[]\n      return %total, %mean, %sq\n"
          : "      return %total, %sq\n";
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [0.5, -2]
      %xw = Mul(%x, %w) : f32[2]
      %sq = Mul(%xw, %xw) : f32[2]
      %total = ReduceSum<keepdims=0>(%sq) : f32[]
)" + mean + "    }");
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

TEST(CompileLoss, UnnamedTheOnlyFloatScalarOutputIsTheLossWithAWarning) {
  std::unique_ptr<Graph> graph = model(/*second=*/false);
  ASSERT_NE(graph, nullptr);
  CompileOptions options = testing::sgd_options(0.5f);
  options.training->loss_named = false;
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
  EXPECT_EQ(graph->metadata().at(std::string(kMetadataLoss)), "total");
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_EQ(diagnostics.warnings()[0],
            "no graph output is named 'loss'; the loss is 'total', the model's only float scalar "
            "output (--loss NAME names it)");
}

TEST(CompileLoss, NamedOrAmbiguousTheLossIsNotGuessed) {
  // The user named `loss`, which the model lacks: an error, though one output would do.
  std::unique_ptr<Graph> graph = model(/*second=*/false);
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::Status status = compile_graph(*graph, testing::sgd_options(0.5f), diagnostics);
  EXPECT_THAT(status.message(), HasSubstr("the graph has no output 'loss' to differentiate; its "
                                          "outputs are total, sq"));
  // Two float scalar outputs, none named: an error listing them.
  graph = model(/*second=*/true);
  ASSERT_NE(graph, nullptr);
  CompileOptions options = testing::sgd_options(0.5f);
  options.training->loss_named = false;
  status = compile_graph(*graph, options, diagnostics);
  EXPECT_THAT(status.message(), HasSubstr("its outputs are total, mean, sq"));
  EXPECT_TRUE(diagnostics.warnings().empty());
}

// An intermediate value named `w.grad`, autodiff's name for w's gradient, is renamed, and w
// trains: loss = sum((x w)^2), so dL/dw = 2 x^2 w; at x = [1, 2], w = [0.5, -2] that is [1, -16],
// and one SGD step at lr 0.5 takes w to [0, 6] (exact in f32).
TEST(ReservedNames, AnIntermediateUnderAReservedNameIsRenamed) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [0.5, -2]
      %w.grad = Mul(%x, %w) : f32[2]
      %lr = Mul(%w.grad, %w.grad) : f32[2]
      %loss = ReduceSum<keepdims=0>(%lr) : f32[]
      return %loss
    })");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(**graph, testing::sgd_options(0.5f), diagnostics).ok());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(*std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<runtime::StepStats> stats =
      (*session)->step({{"x", Tensor::from_f32({2}, {1, 2})}}, 0.5f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<Tensor> w = (*session)->state("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->to_double_vector(), (std::vector<double>{0.0, 6.0}));
}

// A name the model shows (an input, an initializer, an output) is its user's: an error names it.
TEST(ReservedNames, AModelsOwnInputInitializerOrOutputUnderOneIsAnError) {
  auto compile = [](const std::string& text) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
    EXPECT_TRUE(graph.ok()) << graph.status();
    Diagnostics diagnostics;
    return graph.ok() ? compile_graph(**graph, testing::sgd_options(0.5f), diagnostics)
                      : graph.status();
  };
  EXPECT_THAT(compile(R"(
    graph g(%x: f32[2], %lr: f32[2]) {
      init %w: f32[2] = [0.5, -2]
      %a = Mul(%x, %w) : f32[2]
      %b = Mul(%a, %lr) : f32[2]
      %loss = ReduceSum<keepdims=0>(%b) : f32[]
      return %loss
    })")
                  .message(),
              HasSubstr("graph input 'lr' has a name the training step gives its own state or "
                        "inputs; rename it in the model"));
  EXPECT_THAT(compile(R"(
    graph g(%x: f32[2]) {
      init %optimizer.step: f32[2] = [0.5, -2]
      %a = Mul(%x, %optimizer.step) : f32[2]
      %loss = ReduceSum<keepdims=0>(%a) : f32[]
      return %loss
    })")
                  .message(),
              HasSubstr("initializer 'optimizer.step' has a name the training step gives"));
  EXPECT_THAT(compile(R"(
    graph g(%x: f32[2]) {
      init %w: f32[2] = [0.5, -2]
      %w.grad = Mul(%x, %w) : f32[2]
      %loss = ReduceSum<keepdims=0>(%w.grad) : f32[]
      return %loss, %w.grad
    })")
                  .message(),
              HasSubstr("graph output 'w.grad' has a name the training step gives the gradient "
                        "of initializer 'w'"));
}

}  // namespace
}  // namespace ampc
