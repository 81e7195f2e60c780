// canonicalize: Identity removal (and when an Identity must stay), constant AttrAsInput inputs
// moved into attributes across opsets, trailing omitted operands dropped, Slices that partition
// an axis merged into a Split and Gathers by a Split's pieces into one Gather (with what must not
// merge).
#include <random>
#include <string>
#include <string_view>

#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "passes/passes.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

bool expect_canonicalize(std::string_view before, std::string_view after) {
  return testing::expect_pass(*make_canonicalize_pass(), before, after);
}

// The canonicalize group (fold-constants, canonicalize, dce) to its fixed point, then
// infer-shapes: the merges leave the Slices and Gathers they replace to dce.
void expect_canonical_form(std::string_view before, std::string_view after) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(before);
  ASSERT_NE(graph, nullptr);
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_EQ(print_graph(*graph), testing::canonical_text(after));
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

// ---- Slices as a Split, Gathers by a Split's pieces as one Gather ------------------------------

// Rows [0,2), [2,3) and [4,6) of a batch of 6 (an unrolled loop's bags; row 3 unread): one Split
// whose gap is an output nothing reads, in the Slices' order of rows whatever their order in the
// graph.
TEST(CanonicalizeMerges, SlicesThatPartitionAnAxisBecomeOneSplit) {
  expect_canonical_form(R"(
    graph g(%x: f32[6,2]) opset(17) {
      init %s0: i64[1] = [0]
      init %e0: i64[1] = [2]
      init %s2: i64[1] = [4]
      init %e2: i64[1] = [100]
      init %s1: i64[1] = [-4]
      init %e1: i64[1] = [3]
      %c = Slice(%x, %s2, %e2) : f32[2,2]
      %a = Slice(%x, %s0, %e0) : f32[2,2]
      %b = Slice(%x, %s1, %e1) : f32[1,2]
      %ra = Relu(%a) : f32[2,2]
      %rb = Relu(%b) : f32[1,2]
      %rc = Relu(%c) : f32[2,2]
      return %ra, %rb, %rc
    })",
                        R"(
    graph g(%x: f32[6,2]) opset(17) {
      %a, %b, %x/unread, %c = Split<axis=0, split=[2, 1, 1, 2]>(%x) {name="x/split"}
          : f32[2,2], f32[1,2], f32[1,2], f32[2,2]
      %ra = Relu(%a) : f32[2,2]
      %rb = Relu(%b) : f32[1,2]
      %rc = Relu(%c) : f32[2,2]
      return %ra, %rb, %rc
    })");
}

// A gap at the end is an output too (ONNX's Split has one per size), so the graph exports, passes
// ONNX's checker and imports again.
TEST(CanonicalizeMerges, ASplitWithATrailingGapExportsAndImports) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[8,2]) opset(17) {
      init %s0: i64[1] = [0]
      init %e0: i64[1] = [3]
      init %s1: i64[1] = [3]
      init %e1: i64[1] = [6]
      %a = Slice(%x, %s0, %e0) : f32[3,2]
      %b = Slice(%x, %s1, %e1) : f32[3,2]
      return %a, %b
    })");
  ASSERT_NE(graph, nullptr);
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  ASSERT_EQ(graph->num_nodes(), 1);
  EXPECT_EQ(graph->nodes().front()->num_outputs(), 3);
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*bytes, "split.onnx");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(pipeline.run(**again, PassContext{}).ok());  // the split sizes back to attributes
  EXPECT_EQ(print_graph(**again), print_graph(*graph));
}

TEST(CanonicalizeMerges, SlicesThatOverlapStepOrReadLittleStay) {
  // Overlapping rows, a step of 2, and two rows of 10 (a Split would copy all ten).
  constexpr std::string_view kOverlapping = R"(
    graph g(%x: f32[4,2]) opset(17) {
      init %s0: i64[1] = [0]
      init %e0: i64[1] = [3]
      init %s1: i64[1] = [2]
      init %e1: i64[1] = [4]
      %a = Slice(%x, %s0, %e0) : f32[3,2]
      %b = Slice(%x, %s1, %e1) : f32[2,2]
      return %a, %b
    })";
  expect_canonical_form(kOverlapping, kOverlapping);
  constexpr std::string_view kStrided = R"(
    graph g(%x: f32[4,2]) opset(17) {
      init %s0: i64[1] = [0]
      init %e0: i64[1] = [2]
      init %s1: i64[1] = [2]
      init %e1: i64[1] = [4]
      init %axis: i64[1] = [0]
      init %two: i64[1] = [2]
      %a = Slice(%x, %s0, %e0) : f32[2,2]
      %b = Slice(%x, %s1, %e1, %axis, %two) : f32[1,2]
      return %a, %b
    })";
  expect_canonical_form(kStrided, kStrided);
  constexpr std::string_view kSparse = R"(
    graph g(%x: f32[10,2]) opset(17) {
      init %s0: i64[1] = [0]
      init %e0: i64[1] = [1]
      init %s1: i64[1] = [5]
      init %e1: i64[1] = [6]
      %a = Slice(%x, %s0, %e0) : f32[1,2]
      %b = Slice(%x, %s1, %e1) : f32[1,2]
      return %a, %b
    })";
  expect_canonical_form(kSparse, kSparse);
}

// An embedding bag unrolled by rows: the ids split into bags, each bag's rows gathered from the
// table; one Gather of every id, split as the ids were.
TEST(CanonicalizeMerges, GathersFromOneTableByASplitsPiecesBecomeOneGather) {
  expect_canonical_form(R"(
    graph g(%ids: i64[2,3]) opset(17) {
      init %table: f32[5,4] = [0.0, 0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 1.3, 2.0, 2.1, 2.2, 2.3, 3.0, 3.1, 3.2, 3.3, 4.0, 4.1, 4.2, 4.3]
      %p, %q = Split<axis=1, split=[1, 2]>(%ids) : i64[2,1], i64[2,2]
      %rp = Gather<axis=0>(%table, %p) : f32[2,1,4]
      %rq = Gather<axis=0>(%table, %q) : f32[2,2,4]
      %sp = ReduceSum<axes=[1], keepdims=0>(%rp) : f32[2,4]
      %sq = ReduceSum<axes=[1], keepdims=0>(%rq) : f32[2,4]
      return %sp, %sq
    })",
                        R"(
    graph g(%ids: i64[2,3]) opset(17) {
      init %table: f32[5,4] = [0.0, 0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 1.3, 2.0, 2.1, 2.2, 2.3, 3.0, 3.1, 3.2, 3.3, 4.0, 4.1, 4.2, 4.3]
      %table/rows = Gather<axis=0>(%table, %ids) {name="ids/merged"} : f32[2,3,4]
      %rp, %rq = Split<axis=1, split=[1, 2]>(%table/rows) {name="ids/merged/split"}
          : f32[2,1,4], f32[2,2,4]
      %sp = ReduceSum<axes=[1], keepdims=0>(%rp) : f32[2,4]
      %sq = ReduceSum<axes=[1], keepdims=0>(%rq) : f32[2,4]
      return %sp, %sq
    })");
}

TEST(CanonicalizeMerges, GathersStayWhereAPieceHasAnotherReaderOrTheTablesDiffer) {
  constexpr std::string_view kOtherReader = R"(
    graph g(%ids: i64[4], %table: f32[5,2]) opset(17) {
      %p, %q = Split<axis=0, split=[2, 2]>(%ids) : i64[2], i64[2]
      %rp = Gather<axis=0>(%table, %p) : f32[2,2]
      %rq = Gather<axis=0>(%table, %q) : f32[2,2]
      return %rp, %rq, %q
    })";
  expect_canonical_form(kOtherReader, kOtherReader);
  constexpr std::string_view kTwoTables = R"(
    graph g(%ids: i64[4], %table: f32[5,2], %other: f32[5,2]) opset(17) {
      %p, %q = Split<axis=0, split=[2, 2]>(%ids) : i64[2], i64[2]
      %rp = Gather<axis=0>(%table, %p) : f32[2,2]
      %rq = Gather<axis=0>(%other, %q) : f32[2,2]
      return %rp, %rq
    })";
  expect_canonical_form(kTwoTables, kTwoTables);
  // A table computed in the graph (it may come after the Split): left as it is.
  constexpr std::string_view kComputedTable = R"(
    graph g(%ids: i64[4], %w: f32[5,2]) opset(17) {
      %p, %q = Split<axis=0, split=[2, 2]>(%ids) : i64[2], i64[2]
      %table = Relu(%w) : f32[5,2]
      %rp = Gather<axis=0>(%table, %p) : f32[2,2]
      %rq = Gather<axis=0>(%table, %q) : f32[2,2]
      return %rp, %rq
    })";
  expect_canonical_form(kComputedTable, kComputedTable);
}

// PyTorch's EmbeddingBag after the merges above: each bag's rows summed, the sums concatenated.
// The dynamo exporter keeps the dim; TorchScript drops it and unsqueezes the sum.
TEST(CanonicalizeMerges, ReductionsOfASplitsEqualPiecesBecomeOneReduction) {
  expect_canonical_form(R"(
    graph g(%x: f32[6,3]) opset(17) {
      %a, %b, %c = Split<axis=0, split=[2, 2, 2]>(%x) : f32[2,3], f32[2,3], f32[2,3]
      %sa = ReduceSum<axes=[0], keepdims=1>(%a) : f32[1,3]
      %sb = ReduceSum<axes=[0], keepdims=1>(%b) : f32[1,3]
      %sc = ReduceSum<axes=[0], keepdims=1>(%c) : f32[1,3]
      %bags = Concat<axis=0>(%sa, %sb, %sc) : f32[3,3]
      return %bags
    })",
                        R"(
    graph g(%x: f32[6,3]) opset(17) {
      init %x/grouped_shape: i64[3] = [3, 2, 3]
      %x/grouped = Reshape(%x, %x/grouped_shape) : f32[3,2,3]
      %bags = ReduceSum<axes=[1], keepdims=0>(%x/grouped) {name="x/reduced"} : f32[3,3]
      return %bags
    })");
  expect_canonical_form(R"(
    graph g(%x: f32[2,4]) opset(17) {
      %a, %b = Split<axis=1, split=[2, 2]>(%x) : f32[2,2], f32[2,2]
      %ma = ReduceMax<axes=[1], keepdims=0>(%a) : f32[2]
      %mb = ReduceMax<axes=[1], keepdims=0>(%b) : f32[2]
      %ua = Unsqueeze<axes=[1]>(%ma) : f32[2,1]
      %ub = Unsqueeze<axes=[1]>(%mb) : f32[2,1]
      %bags = Concat<axis=-1>(%ua, %ub) : f32[2,2]
      return %bags
    })",
                        R"(
    graph g(%x: f32[2,4]) opset(17) {
      init %x/grouped_shape: i64[3] = [2, 2, 2]
      %x/grouped = Reshape(%x, %x/grouped_shape) : f32[2,2,2]
      %bags = ReduceMax<axes=[2], keepdims=0>(%x/grouped) {name="x/reduced"} : f32[2,2]
      return %bags
    })");
}

// x [rows, 3] split into pieces of `first` and `second` rows, the first summed over its rows, the
// second reduced by `op`, the two concatenated along `axis`; the graph returns `outputs`.
std::string reduced_pieces(int64_t first, int64_t second, std::string_view op, int64_t axis,
                           std::string_view outputs) {
  return str_cat("graph g(%x: f32[", first + second, ",3]) opset(17) {\n",
                 "  %a, %b = Split<axis=0, split=[", first, ", ", second, "]>(%x) : f32[", first,
                 ",3], f32[", second, ",3]\n",
                 "  %sa = ReduceSum<axes=[0], keepdims=1>(%a) : f32[1,3]\n", "  %sb = ", op,
                 "<axes=[0], keepdims=1>(%b) : f32[1,3]\n", "  %bags = Concat<axis=", axis,
                 ">(%sa, %sb) : f32[", axis == 0 ? "2,3" : "1,6", "]\n  return ", outputs, "\n}\n");
}

TEST(CanonicalizeMerges, ReductionsStayWhenPiecesDifferOrAreReadElsewhere) {
  const std::string merged = reduced_pieces(2, 2, "ReduceSum", 0, "%bags");
  expect_canonical_form(merged, R"(
    graph g(%x: f32[4,3]) opset(17) {
      init %x/grouped_shape: i64[3] = [2, 2, 3]
      %x/grouped = Reshape(%x, %x/grouped_shape) : f32[2,2,3]
      %bags = ReduceSum<axes=[1], keepdims=0>(%x/grouped) {name="x/reduced"} : f32[2,3]
      return %bags
    })");
  // Unequal pieces; two reduction ops; a piece read by another node too; a Concat along
  // another axis than the Split's.
  for (const std::string& graph : {reduced_pieces(2, 3, "ReduceSum", 0, "%bags"),
                                   reduced_pieces(2, 2, "ReduceMax", 0, "%bags"),
                                   reduced_pieces(2, 2, "ReduceSum", 0, "%bags, %b"),
                                   reduced_pieces(2, 2, "ReduceSum", 1, "%bags")}) {
    expect_canonical_form(graph, graph);
  }
}

// The merged reduction gives the pieces' results bit for bit, on the CPU kernels, for sums long
// enough to be summed pairwise and for means, in f32 and f16.
TEST(CanonicalizeMerges, TheMergedReductionGivesThePiecesResultsBitForBit) {
  for (std::string_view op : {"ReduceSum", "ReduceMean"}) {
    for (std::string_view dtype : {"f32", "f16"}) {
      SCOPED_TRACE(str_cat(op, " ", dtype));
      std::string text = str_cat("graph g(%x: ", dtype, "[3,100,5]) opset(17) {\n");
      text += str_cat("  %a, %b, %c, %d = Split<axis=1, split=[25, 25, 25, 25]>(%x) : ", dtype,
                      "[3,25,5], ", dtype, "[3,25,5], ", dtype, "[3,25,5], ", dtype, "[3,25,5]\n");
      for (const char* piece : {"a", "b", "c", "d"}) {
        text += str_cat("  %r", piece, " = ", op, "<axes=[1], keepdims=1>(%", piece, ") : ", dtype,
                        "[3,1,5]\n");
      }
      text += str_cat("  %y = Concat<axis=1>(%ra, %rb, %rc, %rd) : ", dtype,
                      "[3,4,5]\n  return %y\n}\n");
      std::unique_ptr<Graph> pieces = testing::parse_or_fail(text);
      std::unique_ptr<Graph> merged = testing::parse_or_fail(text);
      ASSERT_NE(merged, nullptr);
      PassPipeline pipeline;
      add_canonicalize_pipeline(pipeline);
      ASSERT_TRUE(pipeline.run(*merged, PassContext{}).ok());
      ASSERT_EQ(merged->num_nodes(), 2) << print_graph(*merged);  // Reshape, the reduction
      std::mt19937 rng(11);
      std::uniform_real_distribution<double> uniform(-4.0, 4.0);
      std::vector<double> values(1500);
      for (double& v : values) v = uniform(rng);
      const Tensor x = Tensor::from_doubles(pieces->inputs()[0]->dtype(), {3, 100, 5}, values);
      absl::StatusOr<std::vector<Tensor>> want = runtime::interpret_graph(*pieces, {x});
      absl::StatusOr<std::vector<Tensor>> got = runtime::interpret_graph(*merged, {x});
      ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
      EXPECT_TRUE((*want)[0] == (*got)[0]);
    }
  }
}

}  // namespace
}  // namespace ampc
