// dce: dead nodes (whole chains) and unread initializers go; graph inputs, graph outputs and
// nodes with any live output stay.
#include <string_view>

#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

bool expect_dce(std::string_view before, std::string_view after) {
  return testing::expect_pass(*make_dce_pass(), before, after);
}

TEST(Dce, DeadChainIsRemovedInOneRun) {
  EXPECT_TRUE(expect_dce(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %b = Sigmoid(%a) : f32[4]
      %c = Tanh(%b) : f32[4]
      %y = Neg(%x) : f32[4]
      return %y
    })",
                         R"(
    graph g(%x: f32[4]) opset(17) {
      %y = Neg(%x) : f32[4]
      return %y
    })"));
}

TEST(Dce, UnreadInitializersAreRemovedButReadAndOutputOnesStay) {
  EXPECT_TRUE(expect_dce(R"(
    graph g(%x: f32[2]) opset(17) {
      init %unused: f32[2] = [1.0, 2.0]
      init %read: f32[2] = [3.0, 4.0]
      init %returned: i64[1] = [7]
      %y = Add(%x, %read) : f32[2]
      return %y, %returned
    })",
                         R"(
    graph g(%x: f32[2]) opset(17) {
      init %read: f32[2] = [3.0, 4.0]
      init %returned: i64[1] = [7]
      %y = Add(%x, %read) : f32[2]
      return %y, %returned
    })"));
}

// The initializer is read only by the dead chain: it goes in the same run.
TEST(Dce, InitializerReadOnlyByDeadNodesIsRemoved) {
  EXPECT_TRUE(expect_dce(R"(
    graph g(%x: f32[2]) opset(17) {
      init %w: f32[2] = [1.0, 2.0]
      %a = Add(%x, %w) : f32[2]
      %y = Relu(%x) : f32[2]
      return %y
    })",
                         R"(
    graph g(%x: f32[2]) opset(17) {
      %y = Relu(%x) : f32[2]
      return %y
    })"));
}

TEST(Dce, UnusedGraphInputsStay) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2], %unused: f32[3]) opset(17) {
      %y = Relu(%x) : f32[2]
      return %y
    })";
  EXPECT_FALSE(expect_dce(kGraph, kGraph));
}

TEST(Dce, NodeWithOneLiveOutputStays) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[4]) opset(13) {
      %y, %mask = Dropout(%x) : f32[4], bool[4]
      return %y
    })";
  EXPECT_FALSE(expect_dce(kGraph, kGraph));
}

TEST(Dce, NodeWithAllOutputsDeadIsRemoved) {
  EXPECT_TRUE(expect_dce(R"(
    graph g(%x: f32[4]) opset(13) {
      %y, %mask = Dropout(%x) : f32[4], bool[4]
      %z = Relu(%x) : f32[4]
      return %z
    })",
                         R"(
    graph g(%x: f32[4]) opset(13) {
      %z = Relu(%x) : f32[4]
      return %z
    })"));
}

TEST(Dce, GraphWithNothingDeadIsUnchanged) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %y = Sigmoid(%a) : f32[4]
      return %y, %a
    })";
  EXPECT_FALSE(expect_dce(kGraph, kGraph));
}

}  // namespace
}  // namespace ampc
