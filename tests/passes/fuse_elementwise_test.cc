// fuse-elementwise: what fuses (chains, trees, casts, scalar and bias broadcasts, Expand) and
// what must not (a value read before the group ends, a reduction, a shape change, a broadcast
// that is not one block of dimensions, integer arithmetic); and the fused graph computes the
// same bits as the unfused one on the CPU, for random element-wise graphs over f32, f16 and
// bf16 (bit-exact: each body instruction rounds where its node did).
#include "passes/fuse_elementwise.h"

#include <string_view>

#include "compiler/fused_body.h"
#include "tests/fused_graphs.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

bool expect_fusion(std::string_view before, std::string_view after) {
  return testing::expect_pass(*make_fuse_elementwise_pass(), before, after);
}

TEST(FuseElementwise, BiasAddActivationAndCastBecomeOneNode) {
  EXPECT_TRUE(expect_fusion(R"(
    graph g(%x: f32[4,3], %b: f32[3]) opset(17) {
      %a = Add(%x, %b) : f32[4,3]
      %r = Relu(%a) : f32[4,3]
      %y = Cast<to=f16>(%r) : f16[4,3]
      return %y
    })",
                            R"(
    graph g(%x: f32[4,3], %b: f32[3]) opset(17) {
      %y = ampc.FusedElementwise<body="t0 = Add(x0, x1) : f32; t1 = Relu(t0) : f32; t2 = Cast(t1) : f16; return t2", shape=[4, 3]>(%x, %b) : f16[4,3]
      return %y
    })"));
}

// A tree: two chains meet in a residual add; the shared operand is read once.
TEST(FuseElementwise, TreesAndSharedOperandsFuse) {
  EXPECT_TRUE(expect_fusion(R"(
    graph g(%x: f16[2,5], %s: f16[]) opset(17) {
      %m = Mul(%x, %s) : f16[2,5]
      %e = Exp(%x) : f16[2,5]
      %y = Add(%m, %e) : f16[2,5]
      return %y
    })",
                            R"(
    graph g(%x: f16[2,5], %s: f16[]) opset(17) {
      %y = ampc.FusedElementwise<body="t0 = Mul(x0, x1) : f16; t1 = Exp(x0) : f16; t2 = Add(t0, t1) : f16; return t2", shape=[2, 5]>(%x, %s) : f16[2,5]
      return %y
    })"));
}

// %a is read after the chain ends (by the reduction): it stays a value, as an output of the
// fused node.
TEST(FuseElementwise, ValueReadAfterTheGroupBecomesAnOutput) {
  EXPECT_TRUE(expect_fusion(R"(
    graph g(%x: f32[4], %w: f32[4]) opset(17) {
      %a = Mul(%x, %w) : f32[4]
      %b = Sigmoid(%a) : f32[4]
      %s = ReduceSum<keepdims=0>(%a) : f32[]
      return %b, %s
    })",
                            R"(
    graph g(%x: f32[4], %w: f32[4]) opset(17) {
      %a, %b = ampc.FusedElementwise<body="t0 = Mul(x0, x1) : f32; t1 = Sigmoid(t0) : f32; return t0, t1", shape=[4]>(%x, %w) : f32[4], f32[4]
      %s = ReduceSum<keepdims=0>(%a) : f32[]
      return %b, %s
    })"));
}

// %a is read by the reduction before the chain ends, and the chain reads the reduction: fusing
// %a would put the reduction's operand after it. %a stays; the rest fuses.
TEST(FuseElementwise, ValueReadBeforeTheGroupEndsStaysOutside) {
  EXPECT_TRUE(expect_fusion(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Mul(%x, %x) : f32[4]
      %s = ReduceSum<keepdims=0>(%a) : f32[]
      %b = Sub(%a, %s) : f32[4]
      %y = Exp(%b) : f32[4]
      return %y
    })",
                            R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Mul(%x, %x) : f32[4]
      %s = ReduceSum<keepdims=0>(%a) : f32[]
      %y = ampc.FusedElementwise<body="t0 = Sub(x0, x1) : f32; t1 = Exp(t0) : f32; return t1", shape=[4]>(%a, %s) : f32[4]
      return %y
    })"));
}

TEST(FuseElementwise, ShapeChangesAndReductionsEndGroups) {
  const std::string_view graph = R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %shape: i64[1] = [6]
      %a = Relu(%x) : f32[2,3]
      %r = Reshape(%a, %shape) : f32[6]
      %b = Neg(%r) : f32[6]
      %s = ReduceMax<keepdims=0>(%b) : f32[]
      %y = Exp(%s) : f32[]
      return %y
    })";
  EXPECT_FALSE(expect_fusion(graph, graph));  // unchanged
}

// [2,1,4] against [2,3,4] is not one block of dimensions; integer arithmetic stays as it is.
TEST(FuseElementwise, SplitBroadcastsAndIntegersDoNotFuse) {
  const std::string_view graph = R"(
    graph g(%x: f32[2,3,4], %m: f32[2,1,4], %i: i64[4]) opset(17) {
      %a = Add(%x, %m) : f32[2,3,4]
      %b = Relu(%a) : f32[2,3,4]
      %j = Add(%i, %i) : i64[4]
      %k = Mul(%j, %i) : i64[4]
      return %b, %k
    })";
  EXPECT_FALSE(expect_fusion(graph, graph));  // unchanged
}

// Expand of a scalar is a broadcast the body does by indexing; its shape operand goes.
TEST(FuseElementwise, ExpandOfAScalarFuses) {
  EXPECT_TRUE(expect_fusion(R"(
    graph g(%x: bf16[2,3], %c: bf16[]) opset(17) {
      init %shape: i64[2] = [2, 3]
      %e = Expand(%c, %shape) : bf16[2,3]
      %y = Div(%x, %e) : bf16[2,3]
      return %y
    })",
                            R"(
    graph g(%x: bf16[2,3], %c: bf16[]) opset(17) {
      %y = ampc.FusedElementwise<body="t0 = Identity(x0) : bf16; t1 = Div(x1, t0) : bf16; return t1", shape=[2, 3]>(%c, %x) : bf16[2,3]
      return %y
    })"));
}

bool expect_recompute(std::string_view before, std::string_view after) {
  return testing::expect_pass(*make_fuse_elementwise_pass({.recompute = true}), before, after);
}

// The backward (%a, %b) reads the forward's %s and %x. With --recompute cheap it computes
// Sigmoid(%x) again from %x, which it reads anyway, so the forward group stops keeping %s.
TEST(FuseElementwise, RecomputeCheapRecomputesWhatTheBackwardCanFromItsOwnOperands) {
  const std::string_view graph = R"(
    graph g(%x: f32[4], %dy: f32[4]) opset(17) {
      %s = Sigmoid(%x) : f32[4]
      %y = Mul(%x, %s) : f32[4]
      %r = ReduceSum<keepdims=0>(%y) : f32[]
      %a = Mul(%dy, %s) : f32[4]
      %b = Mul(%a, %x) : f32[4]
      return %r, %b
    })";
  EXPECT_TRUE(expect_fusion(graph, R"(
    graph g(%x: f32[4], %dy: f32[4]) opset(17) {
      %s, %y = ampc.FusedElementwise<body="t0 = Sigmoid(x0) : f32; t1 = Mul(x0, t0) : f32; return t0, t1", shape=[4]>(%x) : f32[4], f32[4]
      %r = ReduceSum<keepdims=0>(%y) : f32[]
      %b = ampc.FusedElementwise<body="t0 = Mul(x0, x1) : f32; t1 = Mul(t0, x2) : f32; return t1", shape=[4]>(%dy, %s, %x) : f32[4]
      return %r, %b
    })"));
  EXPECT_TRUE(expect_recompute(graph, R"(
    graph g(%x: f32[4], %dy: f32[4]) opset(17) {
      %y = ampc.FusedElementwise<body="t0 = Sigmoid(x0) : f32; t1 = Mul(x0, t0) : f32; return t1", shape=[4]>(%x) : f32[4]
      %r = ReduceSum<keepdims=0>(%y) : f32[]
      %b = ampc.FusedElementwise<body="t0 = Sigmoid(x0) : f32; t1 = Mul(x1, t0) : f32; t2 = Mul(t1, x0) : f32; return t2", shape=[4]>(%x, %dy) : f32[4]
      return %r, %b
    })"));
}

// Recomputing %s would make the backward read %x, which it does not read otherwise: %x would
// live on to the backward for it. %s is kept instead.
TEST(FuseElementwise, RecomputeCheapAddsNoOperand) {
  const std::string_view graph = R"(
    graph g(%x: f32[4], %dy: f32[4]) opset(17) {
      %s = Sigmoid(%x) : f32[4]
      %y = Mul(%x, %s) : f32[4]
      %r = ReduceSum<keepdims=0>(%y) : f32[]
      %a = Mul(%dy, %s) : f32[4]
      %b = Neg(%a) : f32[4]
      return %r, %b
    })";
  const std::string_view fused = R"(
    graph g(%x: f32[4], %dy: f32[4]) opset(17) {
      %s, %y = ampc.FusedElementwise<body="t0 = Sigmoid(x0) : f32; t1 = Mul(x0, t0) : f32; return t0, t1", shape=[4]>(%x) : f32[4], f32[4]
      %r = ReduceSum<keepdims=0>(%y) : f32[]
      %b = ampc.FusedElementwise<body="t0 = Mul(x0, x1) : f32; t1 = Neg(t0) : f32; return t1", shape=[4]>(%dy, %s) : f32[4]
      return %r, %b
    })";
  EXPECT_TRUE(expect_fusion(graph, fused));
  EXPECT_TRUE(expect_recompute(graph, fused));
}

TEST(FusedBody, PrintsAndParsesBack) {
  const std::string text =
      "t0 = LeakyRelu[0.01](x0) : f16; t1 = Less(t0, x1) : bool; t2 = Where(t1, x1, t0) : f16; "
      "return t0, t2";
  absl::StatusOr<FusedBody> body = FusedBody::parse(text, 2);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->to_string(), text);
  EXPECT_EQ(body->output_dtype(1), DType::kF16);
}

TEST(FusedBody, ErrorsNameTheInstruction) {
  const auto error = [](std::string_view text, int inputs) {
    return std::string(FusedBody::parse(text, inputs).status().message());
  };
  EXPECT_EQ(error("t0 = Frobnicate(x0) : f32; return t0", 1),
            "instruction 0 't0 = Frobnicate(x0) : f32': unknown op 'Frobnicate'");
  EXPECT_EQ(error("t0 = Add(x0, x2) : f32; return t0", 2),
            "instruction 0 't0 = Add(x0, x2) : f32': 'x2' is not defined here (2 operands, 0 "
            "results so far)");
  EXPECT_EQ(error("t0 = Relu(x0, x0) : f32; return t0", 1),
            "instruction 0 't0 = Relu(x0, x0) : f32': Relu takes 1 operands, got 2");
  EXPECT_EQ(error("t0 = Relu(x0) : i64; return t0", 1),
            "instruction 0 't0 = Relu(x0) : i64': result type 'i64' is not one of f32, f16, bf16, "
            "bool");
  EXPECT_EQ(error("t0 = Relu(x0) : f32", 1), "a fused body ends with `return tK, ...`");
  EXPECT_EQ(error("t0 = Relu(x0) : f32; return x0", 1),
            "a fused body returns results, not operands ('x0')");
}

TEST(BroadcastWindow, IndexesScalarsBiasesRowsAndFullTensors) {
  const auto window = [](Shape in, Shape out) {
    std::optional<BroadcastWindow> w = broadcast_window(in, out);
    return w ? std::pair{w->inner, w->count} : std::pair<int64_t, int64_t>{-1, -1};
  };
  EXPECT_EQ(window({}, {4, 3}), (std::pair<int64_t, int64_t>{1, 1}));
  EXPECT_EQ(window({1, 1}, {4, 3}), (std::pair<int64_t, int64_t>{1, 1}));
  EXPECT_EQ(window({3}, {4, 3}), (std::pair<int64_t, int64_t>{1, 3}));
  EXPECT_EQ(window({4, 1}, {4, 3}), (std::pair<int64_t, int64_t>{3, 4}));
  EXPECT_EQ(window({4, 3}, {4, 3}), (std::pair<int64_t, int64_t>{1, 12}));
  EXPECT_EQ(window({1, 5, 1}, {2, 5, 7}), (std::pair<int64_t, int64_t>{7, 5}));
  EXPECT_EQ(window({2, 1, 7}, {2, 5, 7}), (std::pair<int64_t, int64_t>{-1, -1}));
  EXPECT_EQ(window({3}, {4, 5}), (std::pair<int64_t, int64_t>{-1, -1}));
}

// ---- Fused and unfused give the same bits ----------------------------------------------------

TEST(FuseElementwise, FusedGraphsComputeTheUnfusedBitsOnTheCpu) {
  const int fused_nodes = testing::expect_fusion_keeps_bits(20261126, 60, runtime::Device::kCpu);
  EXPECT_GE(fused_nodes, 60);  // the trials did fuse
}

TEST(FuseElementwise, RecomputingGraphsComputeTheUnfusedBitsOnTheCpu) {
  const int fused_nodes =
      testing::expect_fusion_keeps_bits(20261128, 60, runtime::Device::kCpu, {.recompute = true});
  EXPECT_GE(fused_nodes, 60);
}

}  // namespace
}  // namespace ampc
