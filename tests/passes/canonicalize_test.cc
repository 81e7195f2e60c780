// canonicalize: Identity removal (and when an Identity must stay), constant AttrAsInput inputs
// moved into attributes across opsets, trailing omitted operands dropped, log(sigmoid(x)) in
// PyTorch's stable form. The merges of sliced
// pieces: tests/passes/canonicalize_merges_test.cc.
#include <cmath>
#include <string_view>

#include "compiler/text_ir.h"
#include "passes/passes.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

bool expect_canonicalize(std::string_view before, std::string_view after) {
  return testing::expect_pass(*make_canonicalize_pass(), before, after);
}

// ---- Identity ---------------------------------------------------------------------------------

TEST(Canonicalize, InnerIdentityIsRemoved) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %b = Identity(%a) : f32[4]
      %c = Sigmoid(%b) : f32[4]
      %d = Tanh(%b) : f32[4]
      return %c, %d
    })",
                                  R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %c = Sigmoid(%a) : f32[4]
      %d = Tanh(%a) : f32[4]
      return %c, %d
    })"));
}

TEST(Canonicalize, IdentityOfGraphInputFeedingNodesIsRemoved) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(17) {
      %b = Identity(%x) : f32[4]
      %c = Relu(%b) : f32[4]
      return %c
    })",
                                  R"(
    graph g(%x: f32[4]) opset(17) {
      %c = Relu(%x) : f32[4]
      return %c
    })"));
}

TEST(Canonicalize, ChainedIdentitiesAreRemovedInOneRun) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Identity(%x) : f32[4]
      %b = Identity(%a) : f32[4]
      %c = Relu(%b) : f32[4]
      return %c
    })",
                                  R"(
    graph g(%x: f32[4]) opset(17) {
      %c = Relu(%x) : f32[4]
      return %c
    })"));
}

// The graph output keeps its name: the producer of the Identity's input takes it over.
TEST(Canonicalize, IdentityProducingGraphOutputHandsItsNameToItsInput) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %y = Identity(%a) : f32[4]
      %z = Sigmoid(%a) : f32[4]
      return %y, %z
    })",
                                  R"(
    graph g(%x: f32[4]) opset(17) {
      %y = Relu(%x) : f32[4]
      %z = Sigmoid(%y) : f32[4]
      return %y, %z
    })"));
}

TEST(Canonicalize, IdentityFromGraphInputToGraphOutputIsKept) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[4]) opset(17) {
      %y = Identity(%x) : f32[4]
      return %y
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

TEST(Canonicalize, IdentityFromInitializerToGraphOutputIsKept) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2]) opset(17) {
      init %w: f32[2] = [1.0, 2.0]
      %w_out = Identity(%w) : f32[2]
      %y = Add(%x, %w) : f32[2]
      return %y, %w_out
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

TEST(Canonicalize, IdentityBetweenTwoGraphOutputsIsKept) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %y = Identity(%a) : f32[4]
      return %a, %y
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

// The first Identity hands %a its name and makes it a graph output; the second must then stay.
TEST(Canonicalize, SecondIdentityOfSameValueToGraphOutputIsKept) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(17) {
      %a = Relu(%x) : f32[4]
      %y1 = Identity(%a) : f32[4]
      %y2 = Identity(%a) : f32[4]
      return %y1, %y2
    })",
                                  R"(
    graph g(%x: f32[4]) opset(17) {
      %y1 = Relu(%x) : f32[4]
      %y2 = Identity(%y1) : f32[4]
      return %y1, %y2
    })"));
}

// ---- AttrAsInput: inputs become attributes ----------------------------------------------------

TEST(Canonicalize, ReduceSumAxesInputBecomesAttributeAtOpset13) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %axes: i64[1] = [1]
      %y = ReduceSum<keepdims=0>(%x, %axes) : f32[2,4]
      return %y
    })",
                                  R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %axes: i64[1] = [1]
      %y = ReduceSum<axes=[1], keepdims=0>(%x) : f32[2,4]
      return %y
    })"));
}

TEST(Canonicalize, ReduceMeanAxesInputBecomesAttributeAtOpset18) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[2,3,4]) opset(18) {
      init %axes: i64[2] = [-1, 0]
      %y = ReduceMean(%x, %axes) : f32[1,3,1]
      return %y
    })",
                                  R"(
    graph g(%x: f32[2,3,4]) opset(18) {
      init %axes: i64[2] = [-1, 0]
      %y = ReduceMean<axes=[-1, 0]>(%x) : f32[1,3,1]
      return %y
    })"));
}

TEST(Canonicalize, ReduceMeanAxesAttributeAtOpset13IsAlreadyCanonical) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      %y = ReduceMean<axes=[1], keepdims=0>(%x) : f32[2,4]
      return %y
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

// An empty axes input reduces over every axis, like an absent one (noop_with_empty_axes = 0).
TEST(Canonicalize, EmptyReduceSumAxesInputBecomesEmptyAttribute) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[2,3]) opset(13) {
      init %axes: i64[0] = []
      %y = ReduceSum<keepdims=0>(%x, %axes) : f32[]
      return %y
    })",
                                  R"(
    graph g(%x: f32[2,3]) opset(13) {
      init %axes: i64[0] = []
      %y = ReduceSum<axes=[], keepdims=0>(%x) : f32[]
      return %y
    })"));
}

TEST(Canonicalize, SqueezeAndUnsqueezeAxesInputsBecomeAttributes) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[1,3,1,2]) opset(13) {
      init %squeeze_axes: i64[2] = [0, 2]
      init %unsqueeze_axes: i64[2] = [0, -1]
      %s = Squeeze(%x, %squeeze_axes) : f32[3,2]
      %u = Unsqueeze(%s, %unsqueeze_axes) : f32[1,3,2,1]
      return %u
    })",
                                  R"(
    graph g(%x: f32[1,3,1,2]) opset(13) {
      init %squeeze_axes: i64[2] = [0, 2]
      init %unsqueeze_axes: i64[2] = [0, -1]
      %s = Squeeze<axes=[0, 2]>(%x) : f32[3,2]
      %u = Unsqueeze<axes=[0, -1]>(%s) : f32[1,3,2,1]
      return %u
    })"));
}

TEST(Canonicalize, SplitSizesInputBecomesAttribute) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[6,2]) opset(13) {
      init %split: i64[2] = [2, 4]
      %a, %b = Split<axis=0>(%x, %split) : f32[2,2], f32[4,2]
      return %a, %b
    })",
                                  R"(
    graph g(%x: f32[6,2]) opset(13) {
      init %split: i64[2] = [2, 4]
      %a, %b = Split<axis=0, split=[2, 4]>(%x) : f32[2,2], f32[4,2]
      return %a, %b
    })"));
}

// Dropout's ratio is a float attribute before opset 12 and an input after; an input that is not
// last (training_mode follows) is omitted, not truncated.
TEST(Canonicalize, DropoutRatioInputBecomesFloatAttribute) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(13) {
      init %ratio: f32[] = [0.25]
      init %training: bool[] = [true]
      %y, %mask = Dropout(%x, %ratio, %training) : f32[4], bool[4]
      %z = Dropout(%x, %ratio) : f32[4]
      return %y, %mask, %z
    })",
                                  R"(
    graph g(%x: f32[4]) opset(13) {
      init %ratio: f32[] = [0.25]
      init %training: bool[] = [true]
      %y, %mask = Dropout<ratio=0.25>(%x, _, %training) : f32[4], bool[4]
      %z = Dropout<ratio=0.25>(%x) : f32[4]
      return %y, %mask, %z
    })"));
}

// PyTorch's training-mode exports write Dropout(x, ratio, training_mode=true) for every
// nn.Dropout, ratio 0 included (Hugging Face's attention_dropout=0.0): the identity, which the
// attention pattern must not see as a node between Softmax and MatMul.
TEST(Canonicalize, DropoutOfRatioZeroIsRemoved) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(13) {
      init %zero: f32[] = [0]
      init %training: bool[] = [true]
      %a = Relu(%x) : f32[4]
      %b = Dropout(%a, %zero, %training) : f32[4]
      %y = Sigmoid(%b) : f32[4]
      return %y
    })",
                                  R"(
    graph g(%x: f32[4]) opset(13) {
      init %zero: f32[] = [0]
      init %training: bool[] = [true]
      %a = Relu(%x) : f32[4]
      %y = Sigmoid(%a) : f32[4]
      return %y
    })"));
}

// Without training_mode, or with a constant false one, Dropout is the identity whatever its
// ratio; a mask nothing reads does not keep it.
TEST(Canonicalize, DropoutOutsideTrainingIsRemoved) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4]) opset(13) {
      init %half: f32[] = [0.5]
      init %off: bool[] = [false]
      %a = Relu(%x) : f32[4]
      %b = Dropout(%a, %half) : f32[4]
      %c, %unread = Dropout(%b, %half, %off) : f32[4], bool[4]
      %y = Sigmoid(%c) : f32[4]
      return %y
    })",
                                  R"(
    graph g(%x: f32[4]) opset(13) {
      init %half: f32[] = [0.5]
      init %off: bool[] = [false]
      %a = Relu(%x) : f32[4]
      %y = Sigmoid(%a) : f32[4]
      return %y
    })"));
}

// A Dropout that may drop (a nonzero ratio in training, or a training_mode known only at run
// time) stays, and so does one whose mask is read (the mask is a value of its own).
TEST(Canonicalize, DropoutThatMayDropOrWhoseMaskIsReadStays) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[4], %training: bool[]) opset(13) {
      init %zero: f32[] = [0]
      init %tenth: f32[] = [0.1]
      init %on: bool[] = [true]
      %a = Dropout(%x, %tenth, %on) : f32[4]
      %b = Dropout(%a, %tenth, %training) : f32[4]
      %c, %mask = Dropout(%b, %zero, %on) : f32[4], bool[4]
      return %c, %mask
    })",
                                  R"(
    graph g(%x: f32[4], %training: bool[]) opset(13) {
      init %zero: f32[] = [0]
      init %tenth: f32[] = [0.1]
      init %on: bool[] = [true]
      %a = Dropout<ratio=0.1>(%x, _, %on) : f32[4]
      %b = Dropout<ratio=0.1>(%a, _, %training) : f32[4]
      %c, %mask = Dropout<ratio=0>(%b, _, %on) : f32[4], bool[4]
      return %c, %mask
    })"));
}

// Values computed by nodes are fold-constants' business; once folded, they move here.
TEST(Canonicalize, AxesComputedByNodesStayInputs) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %minus_one: i64[1] = [-1]
      %axes = Neg(%minus_one) : i64[1]
      %y = ReduceSum(%x, %axes) : f32[2,1,4]
      return %y
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

TEST(Canonicalize, AxesBehindRemovedIdentityMoveInTheSameRun) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %axes: i64[1] = [2]
      %a = Identity(%axes) : i64[1]
      %y = ReduceSum(%x, %a) : f32[2,3,1]
      return %y
    })",
                                  R"(
    graph g(%x: f32[2,3,4]) opset(13) {
      init %axes: i64[1] = [2]
      %y = ReduceSum<axes=[2]>(%x) : f32[2,3,1]
      return %y
    })"));
}

// ---- Omitted operands -------------------------------------------------------------------------

TEST(Canonicalize, TrailingOmittedOperandsAreDropped) {
  EXPECT_TRUE(expect_canonicalize(R"(
    graph g(%x: f32[6,2]) opset(13) {
      %a, %b = Split<axis=0>(%x, _) : f32[3,2], f32[3,2]
      %y = ReduceSum<keepdims=0>(%a, _) : f32[]
      return %y, %b
    })",
                                  R"(
    graph g(%x: f32[6,2]) opset(13) {
      %a, %b = Split<axis=0>(%x) : f32[3,2], f32[3,2]
      %y = ReduceSum<keepdims=0>(%a) : f32[]
      return %y, %b
    })"));
}

TEST(Canonicalize, OmittedOperandBeforeAPresentOneStays) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[4], %training: bool[]) opset(13) {
      %y, %mask = Dropout(%x, _, %training) : f32[4], bool[4]
      return %y, %mask
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

// ---- log(sigmoid(x)) ----------------------------------------------------------------------------

// Log(Sigmoid(x)), as the dynamo exporter writes F.logsigmoid, is -Softplus(-x): where Sigmoid
// underflows (below -88 in f32) the composition gives -inf, and its gradient 1/0; the rewrite
// gives log(sigmoid(x)) = -log1p(exp(-x)) rounded once, against std::log1p in f64. A Sigmoid
// that something else reads stays for it.
TEST(Canonicalize, LogOfSigmoidIsMinusSoftplusOfMinusX) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[5]) opset(18) {
      %s = Sigmoid(%x) : f32[5]
      %l = Log(%s) {name="log_sigmoid"} : f32[5]
      return %l, %s
    })");
  ASSERT_NE(graph, nullptr);
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  const auto count = [&](std::string_view op) {
    int n = 0;
    for (const auto& node : graph->nodes()) n += node->op_type() == op;
    return n;
  };
  EXPECT_EQ(count("Log"), 0) << print_graph(*graph);
  EXPECT_EQ(count("Sigmoid"), 1);
  // Without dce (--disable-pass dce) the rewritten Log stays, unread, and is not rewritten again.
  std::unique_ptr<Graph> undead = testing::parse_or_fail(R"(
    graph g(%x: f32[5]) opset(18) {
      %s = Sigmoid(%x) : f32[5]
      %l = Log(%s) : f32[5]
      %n = Neg(%l) : f32[5]
      return %n
    })");
  ASSERT_NE(undead, nullptr);
  ASSERT_TRUE(make_canonicalize_pass()->run(*undead, PassContext{}).value_or(false));
  absl::StatusOr<bool> again = make_canonicalize_pass()->run(*undead, PassContext{});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << print_graph(*undead);
  const std::vector<float> x = {-100.0f, -20.0f, 0.0f, 3.5f, 30.0f};
  absl::StatusOr<std::vector<Tensor>> out =
      runtime::interpret_graph(*graph, {Tensor::from_f32({5}, x)});
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = x[i] < 0 ? x[i] - std::log1p(std::exp(static_cast<double>(x[i])))
                                 : -std::log1p(std::exp(-static_cast<double>(x[i])));
    const double got = (*out)[0].element_as_double(static_cast<int64_t>(i));
    EXPECT_NEAR(got, want, std::abs(want) * 2.5e-7) << "x = " << x[i];  // ~2 ulp of f32
  }
}

// TorchScript writes binary_cross_entropy_with_logits as -(y log(sigmoid(x)) + (1 - y)
// log(1 - sigmoid(x))). 1 - sigmoid(x) is 0 from x = 17 in f32, so a confident right answer
// (y = 1) gave 0 * log(0) = NaN; Log(1 - Sigmoid(x)) is -Softplus(x) now, and each element's loss
// is max(x, 0) - x y + log1p(exp(-|x|)) in f64 within a few ulp of f32, as PyTorch computes it.
TEST(Canonicalize, LogOfOneMinusSigmoidIsMinusSoftplus) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[7], %y: f32[7]) opset(17) {
      %s = Sigmoid(%x) : f32[7]
      %ls = Log(%s) : f32[7]
      %one = Constant<value=f32[1] [1.0]>() : f32[1]
      %c = Sub(%one, %s) : f32[7]
      %lc = Log(%c) : f32[7]
      %one_y = Constant<value=f32[1] [1.0]>() : f32[1]
      %ny = Sub(%one_y, %y) : f32[7]
      %a = Mul(%y, %ls) : f32[7]
      %b = Mul(%ny, %lc) : f32[7]
      %sum = Add(%a, %b) : f32[7]
      %loss = Neg(%sum) : f32[7]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  for (const auto& node : graph->nodes()) {
    EXPECT_NE(node->op_type(), "Log") << print_graph(*graph);
    EXPECT_NE(node->op_type(), "Sigmoid") << print_graph(*graph);
  }
  const std::vector<float> x = {-100.0f, -20.0f, 0.0f, 3.5f, 17.0f, 30.0f, 100.0f};
  const std::vector<float> y = {0.0f, 1.0f, 1.0f, 0.25f, 1.0f, 1.0f, 0.0f};
  absl::StatusOr<std::vector<Tensor>> out =
      runtime::interpret_graph(*graph, {Tensor::from_f32({7}, x), Tensor::from_f32({7}, y)});
  ASSERT_TRUE(out.ok()) << out.status();
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double want = std::max(xi, 0.0) - xi * y[i] + std::log1p(std::exp(-std::abs(xi)));
    const double got = (*out)[0].element_as_double(static_cast<int64_t>(i));
    EXPECT_NEAR(got, want, std::abs(want) * 4e-7 + 1e-30) << "x = " << x[i] << ", y = " << y[i];
  }
}

// 1 - Sigmoid(x) under another constant, or broadcast to more elements than x has, is not the
// complement: those Logs stay.
TEST(Canonicalize, LogOfAnotherDifferenceOfASigmoidStays) {
  constexpr std::string_view kGraph = R"(
    graph g(%x: f32[3]) opset(17) {
      init %two: f32[1] = [2.0]
      init %ones: f32[2,3] = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
      %s = Sigmoid(%x) : f32[3]
      %a = Sub(%two, %s) : f32[3]
      %la = Log(%a) : f32[3]
      %b = Sub(%ones, %s) : f32[2,3]
      %lb = Log(%b) : f32[2,3]
      return %la, %lb
    })";
  EXPECT_FALSE(expect_canonicalize(kGraph, kGraph));
}

}  // namespace
}  // namespace ampc
