// The `ampc compile` pipeline: the canonicalize group runs to a fixed point, then infer-shapes.
#include <string>
#include <string_view>
#include <vector>

#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

TEST(CanonicalizePipeline, HoldsTheGroupThenInferShapes) {
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  EXPECT_EQ(pipeline.pass_names(),
            (std::vector<std::string>{"fold-constants", "canonicalize", "dce", "infer-shapes"}));
}

// A PyTorch-style export at opset 13: x.view(x.size(0), -1), Identities around the graph, and a
// sum whose axes reach ReduceSum through an Identity. Folding, Identity removal, the axes move
// and dce each expose work for the others.
TEST(CanonicalizePipeline, MultiStepChainConvergesToCanonicalForm) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %zero: i64[] = [0]
      init %axes0: i64[1] = [0]
      init %minus_one: i64[1] = [-1]
      init %reduce_axes: i64[1] = [1]
      %s = Shape(%x) : i64[3]
      %d0 = Gather<axis=0>(%s, %zero) : i64[]
      %u = Unsqueeze(%d0, %axes0) : i64[1]
      %shape = Concat<axis=0>(%u, %minus_one) : i64[2]
      %xi = Identity(%x) : f32[2,3,4]
      %r = Reshape(%xi, %shape) : f32[2,12]
      %ax = Identity(%reduce_axes) : i64[1]
      %sum = ReduceSum<keepdims=0>(%r, %ax) : f32[2]
      %sq = Unsqueeze(%sum, %axes0) : f32[1,2]
      %out = Identity(%sq) : f32[1,2]
      return %out
    })");
  ASSERT_NE(graph, nullptr);
  int fold_runs = 0;
  PipelineOptions options;
  options.dump_after = {"fold-constants"};
  options.dump = [&](std::string_view, const Graph&) {
    ++fold_runs;
    return absl::OkStatus();
  };
  PassPipeline pipeline(options);
  add_canonicalize_pipeline(pipeline);
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(print_graph(*graph), testing::canonical_text(R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %shape: i64[2] = [2, -1]
      %r = Reshape(%x, %shape) : f32[2,12]
      %sum = ReduceSum<axes=[1], keepdims=0>(%r) : f32[2]
      %out = Unsqueeze<axes=[0]>(%sum) : f32[1,2]
      return %out
    })"));
  // One round that changes the graph, one that confirms the fixed point.
  EXPECT_EQ(fold_runs, 2);
  EXPECT_TRUE(diagnostics.warnings().empty());
}

TEST(CanonicalizePipeline, CanonicalGraphIsUnchanged) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2,3]) opset(13) {
      %y = ReduceSum<axes=[1]>(%x) : f32[2,1]
      return %y
    })");
  ASSERT_NE(graph, nullptr);
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
}

TEST(CanonicalizePipeline, DisabledFoldingLeavesShapeArithmetic) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2,3]) opset(13) {
      %s = Shape(%x) : i64[2]
      %r = Reshape(%x, %s) : f32[2,3]
      return %r
    })");
  ASSERT_NE(graph, nullptr);
  PipelineOptions options;
  options.disabled = {"fold-constants"};
  PassPipeline pipeline(options);
  add_canonicalize_pipeline(pipeline);
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(graph->num_nodes(), 2);
}

}  // namespace
}  // namespace ampc
