// insert-casts, in text IR: exactly the casts the decisions need, one per (value, dtype); graph
// outputs keep their dtypes; constants converted at compile time; fp32 operands stay fp32.
#include "compiler/precision_policy.h"
#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

std::unique_ptr<Graph> cast_graph(std::string_view text, PrecisionPolicy policy = {},
                                  bool low_precision_weights = false) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return nullptr;
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  EXPECT_TRUE(make_autocast_pass(policy)->run(*graph, context).ok());
  absl::StatusOr<bool> changed =
      make_insert_casts_pass(low_precision_weights)->run(*graph, context);
  EXPECT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  return graph;
}

int count_casts(const Graph& graph) {
  int casts = 0;
  for (const auto& node : graph.nodes()) casts += node->op_type() == "Cast";
  return casts;
}

TEST(InsertCasts, AWeightReadByThreeMatMulsIsCastOnce) {
  std::unique_ptr<Graph> graph = cast_graph(R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm1"} : f32[4,8]
      %b = MatMul(%a, %w) {name="mm2"} : f32[4,8]
      %c = MatMul(%b, %w) {name="mm3"} : f32[4,8]
      %s = Softmax(%c) {name="softmax"} : f32[4,8]
      return %s
    })");
  ASSERT_NE(graph, nullptr);
  EXPECT_TRUE(testing::same_lines(print_graph(*graph), R"(graph g(%x: f32[4,8]) opset(17) {
  init %w: f32[8,8] = elided
  %x.f16 = Cast<to=f16>(%x) {name="x/to_f16"} : f16[4,8]  # f16: cast for mm1 (allow-list MatMul)
  %w.f16 = Cast<to=f16>(%w) {name="w/to_f16"} : f16[8,8]  # f16: cast for mm1 (allow-list MatMul)
  %a = MatMul(%x.f16, %w.f16) {name="mm1"} : f16[4,8]  # f16 (acc f32): allow-list MatMul
  %b = MatMul(%a, %w.f16) {name="mm2"} : f16[4,8]  # f16 (acc f32): allow-list MatMul
  %c = MatMul(%b, %w.f16) {name="mm3"} : f16[4,8]  # f16 (acc f32): allow-list MatMul
  %c.f32 = Cast<to=f32>(%c) {name="c/to_f32"} : f32[4,8]  # f32: cast for softmax (deny-list Softmax)
  %s = Softmax(%c.f32) {name="softmax"} : f32[4,8]  # f32: deny-list Softmax
  return %s
}
)"));
}

TEST(InsertCasts, GraphOutputsKeepTheirDtypeAndConstantsConvertAtCompileTime) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      init %half: f32[] = [0.5]
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %y = Mul(%a, %half) {name="scale"} : f32[4,8]
      return %y
    })";
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kText);
  ASSERT_NE(graph, nullptr);
  graph->initializers()[1]->set_constant(true);
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  ASSERT_TRUE(make_autocast_pass({})->run(*graph, context).ok());
  ASSERT_TRUE(make_insert_casts_pass()->run(*graph, context).ok());
  ASSERT_TRUE(verify(*graph).ok()) << verify(*graph);
  // x and w are cast for the MatMul; 0.5 becomes an f16 constant; y is cast back to f32 and
  // keeps its name.
  EXPECT_EQ(count_casts(*graph), 3);
  ASSERT_EQ(graph->outputs().size(), 1u);
  EXPECT_EQ(graph->outputs()[0]->name(), "y");
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {4, 8}}));
  const Node* scale = graph->outputs()[0]->producer()->operand(0)->producer();
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->name(), "scale");
  EXPECT_EQ(scale->output(0)->dtype(), DType::kF16);
  const Value* half = scale->operand(1);
  ASSERT_NE(half->initializer(), nullptr);
  EXPECT_EQ(half->dtype(), DType::kF16);
  EXPECT_TRUE(half->is_constant());
  EXPECT_EQ(half->initializer()->element_as_double(0), 0.5);
}

// BatchNormalization computes in the low dtype but keeps scale, bias and statistics in fp32.
TEST(InsertCasts, Fp32OperandsStayFp32) {
  std::unique_ptr<Graph> graph = cast_graph(R"(
    graph g(%x: f32[2,3,4,4]) opset(17) {
      init %w: f32[3,3,1,1] = elided
      init %scale: f32[3] = [1.0, 1.0, 1.0]
      init %bias: f32[3] = [0.0, 0.0, 0.0]
      init %mean: f32[3] = [0.0, 0.0, 0.0]
      init %var: f32[3] = [1.0, 1.0, 1.0]
      %c = Conv(%x, %w) {name="conv"} : f32[2,3,4,4]
      %y = BatchNormalization(%c, %scale, %bias, %mean, %var) {name="bn"} : f32[2,3,4,4]
      %r = Relu(%y) {name="relu"} : f32[2,3,4,4]
      return %r
    })");
  ASSERT_NE(graph, nullptr);
  const Node* bn = nullptr;
  for (const auto& node : graph->nodes()) {
    if (node->name() == "bn") bn = node.get();
  }
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->precision().compute, DType::kF16);
  EXPECT_EQ(bn->operand(0)->dtype(), DType::kF16);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(bn->operand(i)->dtype(), DType::kF32) << i;
  EXPECT_EQ(bn->output(0)->dtype(), DType::kF16);
  // x and w for the Conv, and the Relu's output back to f32: three casts.
  EXPECT_EQ(count_casts(*graph), 3);
}

// O3 (no master weights): a weight only low nodes read is stored in f16 (its value rounded once,
// at compile time) and read without a Cast; BatchNorm's fp32 operands stay f32.
TEST(InsertCasts, WithoutMasterWeightsWeightsAreStoredLow) {
  PrecisionPolicy policy;
  policy.level = OptLevel::kO3;
  std::unique_ptr<Graph> graph = cast_graph(R"(
    graph g(%x: f32[1,3,2,2]) opset(17) {
      init %w: f32[3,3,1,1] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
      init %scale: f32[3] = [1.0, 1.0, 1.0]
      init %bias: f32[3] = [0.0, 0.0, 0.0]
      init %mean: f32[3] = [0.0, 0.0, 0.0]
      init %var: f32[3] = [1.0, 1.0, 1.0]
      %c = Conv(%x, %w) {name="conv"} : f32[1,3,2,2]
      %y = BatchNormalization(%c, %scale, %bias, %mean, %var) {name="bn"} : f32[1,3,2,2]
      return %y
    })",
                                            policy, /*low_precision_weights=*/true);
  ASSERT_NE(graph, nullptr);
  for (const Value* init : graph->initializers()) {
    SCOPED_TRACE(init->name());
    if (init->name() == "w") {
      EXPECT_EQ(init->dtype(), DType::kF16);
      // 0.1 in f16 is 1638/16384 (the nearest of its neighbours 1638 and 1639 over 2^14).
      EXPECT_EQ(init->initializer()->element_as_double(0), 1638.0 / 16384.0);
    } else {
      EXPECT_EQ(init->dtype(), DType::kF32);
    }
  }
  // x for the Conv and y back to f32: no Cast of w.
  EXPECT_EQ(count_casts(*graph), 2);
}

}  // namespace
}  // namespace ampc
