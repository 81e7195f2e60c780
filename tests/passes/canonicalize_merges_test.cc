// canonicalize's merges of a tensor's pieces (passes/canonicalize.cc): Slices that partition an
// axis into one Split, Gathers by a Split's pieces into one Gather, a Concat of equal pieces'
// reductions into one Reshape and reduction; what must not merge; the merged reduction's values
// against the pieces', bit for bit on the CPU kernels; a merged Split's export round trip.
#include <algorithm>
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

// x [rows, 2] read by Slice(x, [s0, e0)) and Slice(x, [s1, e1)) along axis 0, the second with
// `step` (1: no steps operand).
std::string two_slices(int64_t rows, int64_t s0, int64_t e0, int64_t s1, int64_t e1, int64_t step) {
  const int64_t second = (std::min(e1, rows) - s1 + step - 1) / step;
  return str_cat(
      "graph g(%x: f32[", rows, ",2]) opset(17) {\n", "  init %s0: i64[1] = [", s0,
      "]\n  init %e0: i64[1] = [", e0, "]\n", "  init %s1: i64[1] = [", s1,
      "]\n  init %e1: i64[1] = [", e1, "]\n",
      step == 1 ? "" : str_cat("  init %axis: i64[1] = [0]\n  init %step: i64[1] = [", step, "]\n"),
      "  %a = Slice(%x, %s0, %e0) : f32[", e0 - s0, ",2]\n", "  %b = Slice(%x, %s1, %e1",
      step == 1 ? "" : ", %axis, %step", ") : f32[", second, ",2]\n  return %a, %b\n}\n");
}

TEST(CanonicalizeMerges, SlicesThatOverlapStepOrReadLittleStay) {
  // Overlapping rows, a step of 2, and two rows of 10 (a Split would copy all ten).
  for (const std::string& graph : {two_slices(4, 0, 3, 2, 4, 1), two_slices(4, 0, 2, 2, 4, 2),
                                   two_slices(10, 0, 1, 5, 6, 1)}) {
    expect_canonical_form(graph, graph);
  }
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
