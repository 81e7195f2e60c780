// fold-constants: shape arithmetic, Constant nodes and foldable chains become initializers;
// parameters, large values and dead nodes are left alone.
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::expect_pass;

bool expect_fold(std::string_view before, std::string_view after) {
  return expect_pass(*make_fold_constants_pass(), before, after);
}

// fold-constants then dce, as the canonicalize group runs them.
class FoldThenDce final : public Pass {
 public:
  std::string_view name() const override { return "fold-constants+dce"; }
  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    AMPC_ASSIGN_OR_RETURN(bool folded, fold_->run(graph, context));
    AMPC_ASSIGN_OR_RETURN(bool removed, dce_->run(graph, context));
    return folded || removed;
  }

 private:
  std::unique_ptr<Pass> fold_ = make_fold_constants_pass();
  std::unique_ptr<Pass> dce_ = make_dce_pass();
};

// PyTorch's x.view(x.size(0), -1) with static shapes.
constexpr std::string_view kFlattenChain = R"(
  graph g(%x: f32[2,3,4]) opset(17) {
    init %zero: i64[] = [0]
    init %axes0: i64[1] = [0]
    init %minus_one: i64[1] = [-1]
    %s = Shape(%x) : i64[3]
    %d0 = Gather<axis=0>(%s, %zero) : i64[]
    %u = Unsqueeze(%d0, %axes0) : i64[1]
    %shape = Concat<axis=0>(%u, %minus_one) : i64[2]
    %r = Reshape(%x, %shape) : f32[2,12]
    return %r
  })";

TEST(FoldConstants, ShapeChainFoldsInOneRunLeavingDeadInitializers) {
  EXPECT_TRUE(expect_fold(kFlattenChain, R"(
    graph g(%x: f32[2,3,4]) opset(17) {
      init %zero: i64[] = [0]
      init %axes0: i64[1] = [0]
      init %minus_one: i64[1] = [-1]
      init %s: i64[3] = [2, 3, 4]
      init %d0: i64[] = [2]
      init %u: i64[1] = [2]
      init %shape: i64[2] = [2, -1]
      %r = Reshape(%x, %shape) : f32[2,12]
      return %r
    })"));
}

TEST(FoldConstants, ShapeChainBecomesConstantReshapeShapeAfterDce) {
  FoldThenDce pass;
  EXPECT_TRUE(expect_pass(pass, kFlattenChain, R"(
    graph g(%x: f32[2,3,4]) opset(17) {
      init %shape: i64[2] = [2, -1]
      %r = Reshape(%x, %shape) : f32[2,12]
      return %r
    })"));
}

TEST(FoldConstants, ConstantNodesBecomeInitializersKeepingOutputNames) {
  EXPECT_TRUE(expect_fold(R"(
    graph g(%x: f32[2]) opset(17) {
      %c = Constant<value=f32[2] [1.5, -2.0]>() : f32[2]
      %k = Constant<value_ints=[3, 4]>() : i64[2]
      %y = Add(%x, %c) : f32[2]
      return %y, %k
    })",
                          R"(
    graph g(%x: f32[2]) opset(17) {
      init %c: f32[2] = [1.5, -2.0]
      init %k: i64[2] = [3, 4]
      %y = Add(%x, %c) : f32[2]
      return %y, %k
    })"));
}

TEST(FoldConstants, FoldedGraphOutputStaysAnOutputUnderItsName) {
  EXPECT_TRUE(expect_fold(R"(
    graph g(%x: f32[2,3]) opset(17) {
      %y = Relu(%x) : f32[2,3]
      %s = Shape(%x) : i64[2]
      return %y, %s
    })",
                          R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %s: i64[2] = [2, 3]
      %y = Relu(%x) : f32[2,3]
      return %y, %s
    })"));
}

// 2^53 + 1 is not a double: a fold through double would give 2^53.
TEST(FoldConstants, IntegerArithmeticFoldsExactly) {
  FoldThenDce pass;
  EXPECT_TRUE(expect_pass(pass, R"(
    graph g(%x: f32[2]) opset(17) {
      init %a: i64[2] = [9007199254740993, 6]
      init %b: i64[2] = [1, 3]
      %sum = Add(%a, %b) : i64[2]
      %prod = Mul(%sum, %b) : i64[2]
      %y = Relu(%x) : f32[2]
      return %y, %prod
    })",
                          R"(
    graph g(%x: f32[2]) opset(17) {
      init %prod: i64[2] = [9007199254740994, 27]
      %y = Relu(%x) : f32[2]
      return %y, %prod
    })"));
}

// The attention scale 1 / sqrt(d) from q.size(-1): float values derived from shapes and
// Constant nodes are known constants, so they fold.
TEST(FoldConstants, FloatValuesDerivedFromShapesAndConstantsFold) {
  FoldThenDce pass;
  EXPECT_TRUE(expect_pass(pass, R"(
    graph g(%x: f32[2,4]) opset(17) {
      init %last: i64[] = [1]
      %s = Shape(%x) : i64[2]
      %d = Gather<axis=0>(%s, %last) : i64[]
      %f = Cast<to=f32>(%d) : f32[]
      %r = Sqrt(%f) : f32[]
      %one = Constant<value=f32[] [1.0]>() : f32[]
      %scale = Div(%one, %r) : f32[]
      %y = Mul(%x, %scale) : f32[2,4]
      return %y
    })",
                          R"(
    graph g(%x: f32[2,4]) opset(17) {
      init %scale: f32[] = [0.5]
      %y = Mul(%x, %scale) : f32[2,4]
      return %y
    })"));
}

// A float initializer may be a trained parameter: folding Gather(pos_emb, arange) or a view of a
// weight into a new initializer would cut it off from its other uses (weight tying).
TEST(FoldConstants, NodesReadingFloatInitializersAreNotFolded) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[3,2]) opset(17) {
      init %pos_emb: f32[4,2] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
      init %positions: i64[3] = [0, 1, 2]
      init %flat: i64[1] = [8]
      %p = Gather<axis=0>(%pos_emb, %positions) : f32[3,2]
      %w = Reshape(%pos_emb, %flat) : f32[8]
      %y = Add(%x, %p) : f32[3,2]
      return %y, %w
    })";
  EXPECT_FALSE(expect_fold(kGraph, kGraph));
}

TEST(FoldConstants, NodesReadingGraphInputsAreNotFolded) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: i64[2]) opset(17) {
      init %one: i64[2] = [1, 1]
      %y = Add(%x, %one) : i64[2]
      return %y
    })";
  EXPECT_FALSE(expect_fold(kGraph, kGraph));
}

// A training step's state changes after every run, whatever its dtype: an i64 counter is not a
// constant, though an i64 initializer otherwise is.
TEST(FoldConstants, NodesReadingStateAreNotFolded) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2]) opset(17) {
      init %count: i64[] = [0]
      init %one: i64[] = [1]
      %next = Add(%count, %one) : i64[]
      %y = Relu(%x) : f32[2]
      return %y, %next
      update %count = %next
    })";
  EXPECT_FALSE(expect_fold(kGraph, kGraph));
}

// 512 x 1024 f32 is 2 MiB, over kMaxFoldedBytes; the same op with a small shape folds.
TEST(FoldConstants, ValuesOverTheSizeLimitStayNodes) {
  constexpr std::string_view kLarge = R"(
    graph g(%x: f32[512,1024]) opset(17) {
      init %shape: i64[2] = [512, 1024]
      %zeros = ConstantOfShape<value=f32[1] [0.0]>(%shape) : f32[512,1024]
      %y = Add(%x, %zeros) : f32[512,1024]
      return %y
    })";
  EXPECT_FALSE(expect_fold(kLarge, kLarge));
  EXPECT_TRUE(expect_fold(R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %shape: i64[2] = [2, 3]
      %zeros = ConstantOfShape<value=f32[1] [0.0]>(%shape) : f32[2,3]
      %y = Add(%x, %zeros) : f32[2,3]
      return %y
    })",
                          R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %shape: i64[2] = [2, 3]
      init %zeros: f32[2,3] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
      %y = Add(%x, %zeros) : f32[2,3]
      return %y
    })"));
}

TEST(FoldConstants, DeadNodesAreLeftToDce) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2,3]) opset(17) {
      %s = Shape(%x) : i64[2]
      %y = Relu(%x) : f32[2,3]
      return %y
    })";
  EXPECT_FALSE(expect_fold(kGraph, kGraph));
}

TEST(FoldConstants, FoldFailureIsAnErrorNamingTheNode) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) opset(17) {
      %c = Constant<value=f32[2] [1.0, 2.0]>() {name="my_const"} : f32[2]
      %y = Add(%x, %c) : f32[2]
      return %y
    })");
  ASSERT_NE(graph, nullptr);
  // Giving the Constant a second value attribute makes its fold fail.
  graph->node_list()[0]->mutable_attrs()["value_int"] = int64_t{1};
  absl::StatusOr<bool> changed = make_fold_constants_pass()->run(*graph, PassContext{});
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("my_const"), std::string_view::npos)
      << changed.status();
}

}  // namespace
}  // namespace ampc
