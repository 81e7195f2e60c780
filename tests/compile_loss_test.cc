// Which output a training compile differentiates when the user names none: the output named
// `loss`, else the model's only float scalar output (exporters name it after its op:
// `cross_entropy_loss`, `add_3`), with a warning that says which; never a guess between two.
#include <string>

#include "compiler/compile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

}  // namespace
}  // namespace ampc
