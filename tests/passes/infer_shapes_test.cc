// infer-shapes: stale output types are rewritten from the ops' inference, with values known at
// compile time propagated; errors name the node.
#include <memory>
#include <string_view>

#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

// Parses without verifying: the inputs here have stale types on purpose.
std::unique_ptr<Graph> parse_unverified(std::string_view text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

TEST(InferShapes, StaleTypesAreRewrittenDownstream) {
  // %x was re-typed from f32[4,3] (a --shape override); every type after it is stale.
  std::unique_ptr<Graph> graph = parse_unverified(R"(
    graph g(%x: f32[8,6]) opset(17) {
      init %flat: i64[1] = [-1]
      %a = Relu(%x) : f32[4,3]
      %b = Reshape(%a, %flat) : f32[12]
      %s = Shape(%b) : i64[1]
      return %b, %s
    })");
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<bool> changed = make_infer_shapes_pass()->run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_EQ(print_graph(*graph), testing::canonical_text(R"(
    graph g(%x: f32[8,6]) opset(17) {
      init %flat: i64[1] = [-1]
      %a = Relu(%x) : f32[8,6]
      %b = Reshape(%a, %flat) : f32[48]
      %s = Shape(%b) : i64[1]
      return %b, %s
    })"));
}

// The Reshape's shape is computed by nodes; inference knows it through value propagation.
TEST(InferShapes, ShapesComputedByNodesArePropagated) {
  std::unique_ptr<Graph> graph = parse_unverified(R"(
    graph g(%x: f32[2,3,4]) opset(17) {
      init %minus_one: i64[1] = [-1]
      %last = Neg(%minus_one) : i64[1]
      %shape = Concat<axis=0>(%last, %minus_one) : i64[2]
      %r = Reshape(%x, %shape) : f32[1,1]
      return %r
    })");
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<bool> changed = make_infer_shapes_pass()->run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(graph->outputs().size(), 1u);
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {1, 24}}));
}

TEST(InferShapes, UpToDateGraphIsUnchanged) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2,3]) opset(17) {
      %a = Relu(%x) : f32[2,3]
      %s = Shape(%a) : i64[2]
      return %a, %s
    })";
  EXPECT_FALSE(testing::expect_pass(*make_infer_shapes_pass(), kGraph, kGraph));
}

TEST(InferShapes, ShapeMismatchIsAnErrorNamingNodeAndShapes) {
  std::unique_ptr<Graph> graph = parse_unverified(R"(
    graph g(%x: f32[2,3], %z: f32[4]) opset(17) {
      %y = Add(%x, %z) {name="bad_add"} : f32[2,3]
      return %y
    })");
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<bool> changed = make_infer_shapes_pass()->run(*graph, PassContext{});
  ASSERT_FALSE(changed.ok());
  const std::string message(changed.status().message());
  EXPECT_NE(message.find("bad_add"), std::string::npos) << message;
  EXPECT_NE(message.find("[2,3]"), std::string::npos) << message;
  EXPECT_NE(message.find("[4]"), std::string::npos) << message;
}

}  // namespace
}  // namespace ampc
