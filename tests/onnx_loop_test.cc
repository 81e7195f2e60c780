// Loop, unrolled at import (compiler/onnx_control_flow.cc): trip counts and conditions known at
// import, loop-carried tensors and sequences, scan outputs, an If and a Loop inside a body, and
// the errors for what is decided at run time. Values are checked against the loop worked out
// in C++ (data movement and additions in the loop's order: bit-exact; tanh in f64: within a few
// ulps), gradients against central differences in f64. Slices whose bounds are data, reduced
// (compiler/onnx_ragged.h): one, and a Loop of bags merged into one segment reduction. PyTorch's
// exports with Loops (EmbeddingBag, scripted loops) are checked against PyTorch by the model
// zoo (tests/runtime/zoo_test.cc), tests/runtime/ragged_bag_test.cc (bags with offsets) and
// tools/layer_gradient_sweep.py.
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_lowering.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "passes/passes.h"
#include "runtime/interpreter.h"
#include "runtime/training_session.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using onnx::TensorProto;
using testing::add_input;
using testing::add_int_attr;
using testing::add_outputs;
using testing::count_ops;
using testing::expect_import_error;
using testing::graph_attr;
using testing::import_ok;
using testing::ModelBuilder;
using testing::run_graph;

onnx::NodeProto& add_node(onnx::GraphProto& graph, const std::string& op_type,
                          const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = graph.add_node();
  node->set_op_type(op_type);
  node->set_name(outputs.empty() ? op_type : outputs[0]);
  for (const std::string& input : inputs) node->add_input(input);
  for (const std::string& output : outputs) node->add_output(output);
  return *node;
}

// A Constant node of `graph` making `name` a scalar.
void scalar_constant(onnx::GraphProto& graph, const std::string& name, int elem_type,
                     int64_t value) {
  onnx::NodeProto& node = add_node(graph, "Constant", {}, {name});
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(elem_type);
  if (elem_type == TensorProto::BOOL) {
    attr->mutable_t()->add_int32_data(static_cast<int32_t>(value));
  } else if (elem_type == TensorProto::FLOAT) {
    attr->mutable_t()->add_float_data(static_cast<float>(value));
  } else {
    attr->mutable_t()->add_int64_data(value);
  }
}

// An RNN written as a Loop, as PyTorch's TorchScript exporter writes a scripted for-loop over
// x.size(0): the trip count from Shape, h = tanh(X[i] * W + h) carried, each h scanned into Y.
ModelBuilder recurrent_loop(int elem_type, int64_t steps) {
  ModelBuilder m(17);
  const std::string n = std::to_string(steps);
  m.input("X", elem_type, {n, "3"});
  m.input("H0", elem_type, {"3"});
  m.input("Wt", elem_type, {"3"});
  m.node("Shape", {"X"}, {"shape"}, "shape");
  scalar_constant(m.graph(), "zero", TensorProto::INT64, 0);
  m.node("Gather", {"shape", "zero"}, {"steps"}, "steps");
  onnx::NodeProto& loop = m.node("Loop", {"steps", "", "H0"}, {"H", "Y"}, "rnn");
  onnx::GraphProto& body = graph_attr(loop, "body");
  add_input(body, "i", TensorProto::INT64);
  add_input(body, "cond", TensorProto::BOOL);
  add_input(body, "h", elem_type);
  add_node(body, "Gather", {"X", "i"}, {"x_i"});
  add_node(body, "Mul", {"x_i", "Wt"}, {"xw"});
  add_node(body, "Add", {"xw", "h"}, {"pre"});
  add_node(body, "Tanh", {"pre"}, {"h_next"});
  add_node(body, "Identity", {"h_next"}, {"y_i"});
  add_node(body, "Identity", {"cond"}, {"cond_out"});
  add_outputs(body, {"cond_out", "h_next", "y_i"});
  return m;
}

TEST(Loop, ARecurrenceIsUnrolledWithItsCarriedValueAndScanOutput) {
  ModelBuilder m = recurrent_loop(TensorProto::DOUBLE, 4);
  m.output("H");
  m.output("Y");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(count_ops(*graph, "Loop"), 0);
  EXPECT_EQ(count_ops(*graph, "Tanh"), 4);
  EXPECT_EQ(graph->outputs()[1]->shape(), (Shape{4, 3}));

  const std::vector<double> x = {0.5, -1.0, 0.25, 2.0, 0.0, -0.75, 1.5, 1.25, -2.0, -0.5, 0.3, 1};
  const std::vector<double> h0 = {0.1, -0.2, 0.3};
  const std::vector<double> w = {0.9, -1.1, 0.4};
  const std::vector<Tensor> out = run_graph(*graph, {Tensor::from_doubles(DType::kF64, {4, 3}, x),
                                                     Tensor::from_doubles(DType::kF64, {3}, h0),
                                                     Tensor::from_doubles(DType::kF64, {3}, w)});
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> h = h0;
  for (int i = 0; i < 4; ++i) {
    for (int k = 0; k < 3; ++k) {
      h[k] = std::tanh(x[i * 3 + k] * w[k] + h[k]);
      // tanh in f64: within 4 ulps of the C library's.
      EXPECT_NEAR(out[1].element_as_double(i * 3 + k), h[k], 4e-16 * std::max(1.0, std::abs(h[k])))
          << "Y[" << i << "][" << k << "]";
    }
  }
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(out[0].element_as_double(k), out[1].element_as_double(9 + k));
}

TEST(LoopGradients, ThroughEveryIterationToTheInputsAndTheInitialState) {
  ModelBuilder m = recurrent_loop(TensorProto::DOUBLE, 4);
  testing::add_weighted_loss(m, "Y", {"4", "3"});
  testing::expect_onnx_gradients_match(m, "^(X|H0|Wt)$", 5);
}

// An If whose condition is data: both branches run, forward and backward, and the gradient of
// what they read must come from the taken branch only. The else_branch reads Sqrt(W) of a W
// with negative elements: NaN it never uses, and which must not reach W's gradient. loss =
// sum(If(flag, x W, x sqrt(W))); with flag true, dL/dW[i][j] = sum_r x[r][i], and one SGD step
// at lr 1 (small integers: exact) takes W to W - dL/dW.
TEST(RunTimeIf, TheBranchNotTakenGivesNoGradient) {
  ModelBuilder m(17);
  m.input("x", TensorProto::FLOAT, {"2", "2"});
  m.input("flag", TensorProto::BOOL, {});
  m.initializer_f32("W", {2, 2}, {1, -4, -9, 2});
  onnx::NodeProto& branch = m.node("If", {"flag"}, {"y"}, "guarded");
  onnx::GraphProto& then_graph = graph_attr(branch, "then_branch");
  add_node(then_graph, "MatMul", {"x", "W"}, {"plain"});
  add_outputs(then_graph, {"plain"});
  onnx::GraphProto& else_graph = graph_attr(branch, "else_branch");
  add_node(else_graph, "Sqrt", {"W"}, {"root"});
  add_node(else_graph, "MatMul", {"x", "root"}, {"rooted"});
  add_outputs(else_graph, {"rooted"});
  m.node("ReduceSum", {"y"}, {"loss"}, "loss");
  add_int_attr(*m.graph().mutable_node(m.graph().node_size() - 1), "keepdims", 0);
  m.output("loss");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, testing::sgd_options(1.0f), diagnostics).ok());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor x = Tensor::from_f32({2, 2}, {1, 2, 3, -5});
  absl::StatusOr<runtime::StepStats> stats =
      (*session)->step({{"x", x}, {"flag", Tensor::from_doubles(DType::kBool, {}, {1})}}, 1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // loss = sum(x W) = [1,2]W + [3,-5]W summed: rows of x summed = [4, -3] dotted with W's rows.
  EXPECT_EQ(stats->loss, 4.0 * (1 - 4) + -3.0 * (-9 + 2));
  EXPECT_TRUE(std::isfinite(stats->grad_norm)) << stats->grad_norm;
  absl::StatusOr<Tensor> w = (*session)->state("W");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->to_double_vector(), (std::vector<double>{1 - 4, -4 - 4, -9 + 3, 2 + 3}));
}

// What a branch reads that is known at import and that no float initializer reaches (a float
// computed from shapes) is not guarded, so it stays known where a shape needs it: Range's limit.
// y = flag ? Range(0, rows, 1) : 2 Range(0, rows, 1), rows = x's first dim as a float.
TEST(RunTimeIf, ValuesKnownFromShapesStayKnownInTheBranches) {
  ModelBuilder m(17);
  m.input("x", TensorProto::FLOAT, {"3", "2"});
  m.input("flag", TensorProto::BOOL, {});
  m.node("Shape", {"x"}, {"shape"}, "shape");
  scalar_constant(m.graph(), "zero", TensorProto::INT64, 0);
  m.node("Gather", {"shape", "zero"}, {"rows_i"}, "rows_i");
  add_int_attr(m.node("Cast", {"rows_i"}, {"rows"}, "rows"), "to", TensorProto::FLOAT);
  for (const char* name : {"start", "step"}) {
    onnx::NodeProto& constant = m.node("Constant", {}, {name}, name);
    onnx::AttributeProto* value = constant.add_attribute();
    value->set_name("value_float");
    value->set_type(onnx::AttributeProto::FLOAT);
    value->set_f(name == std::string("start") ? 0.0f : 1.0f);
  }
  onnx::NodeProto& branch = m.node("If", {"flag"}, {"y"}, "ranges");
  onnx::GraphProto& then_graph = graph_attr(branch, "then_branch");
  add_node(then_graph, "Range", {"start", "rows", "step"}, {"plain"});
  add_outputs(then_graph, {"plain"});
  onnx::GraphProto& else_graph = graph_attr(branch, "else_branch");
  add_node(else_graph, "Range", {"start", "rows", "step"}, {"counted"});
  add_node(else_graph, "Add", {"counted", "counted"}, {"doubled"});
  add_outputs(else_graph, {"doubled"});
  m.output("y");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  for (const bool flag : {true, false}) {
    const std::vector<Tensor> y =
        run_graph(*graph, {Tensor::from_f32({3, 2}, {1, 2, 3, 4, 5, 6}),
                           Tensor::from_doubles(DType::kBool, {}, {flag ? 1.0 : 0.0})});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].to_double_vector(),
              flag ? (std::vector<double>{0, 1, 2}) : (std::vector<double>{0, 2, 4}));
  }
}

// A float initializer (which may be trained) that a branch reads where its value decides a shape,
// Range's limit, is read as it is, so it stays known; where a branch computes with it, it is
// guarded. y = flag ? Range(0, n, 1) * n : Range(0, n, 1), n an initializer of 3.
TEST(RunTimeIf, AFloatInitializerDecidingAShapeIsReadUnguardedThere) {
  ModelBuilder m(17);
  m.input("flag", TensorProto::BOOL, {});
  m.initializer_f32("n", {}, {3});
  scalar_constant(m.graph(), "start", TensorProto::FLOAT, 0);
  scalar_constant(m.graph(), "step", TensorProto::FLOAT, 1);
  onnx::NodeProto& branch = m.node("If", {"flag"}, {"y"}, "ranges");
  onnx::GraphProto& then_graph = graph_attr(branch, "then_branch");
  add_node(then_graph, "Range", {"start", "n", "step"}, {"counted"});
  add_node(then_graph, "Mul", {"counted", "n"}, {"scaled"});
  add_outputs(then_graph, {"scaled"});
  onnx::GraphProto& else_graph = graph_attr(branch, "else_branch");
  add_node(else_graph, "Range", {"start", "n", "step"}, {"plain"});
  add_outputs(else_graph, {"plain"});
  m.output("y");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  int guards = 0;  // the then-branch's Mul reads n through Where(flag, n, detached n)
  for (const Node* node : graph->node_list()) {
    guards += node->op_type() == "Where" && node->operand(1)->name() == "n";
  }
  EXPECT_EQ(guards, 1);
  for (const bool flag : {true, false}) {
    const std::vector<Tensor> y =
        run_graph(*graph, {Tensor::from_doubles(DType::kBool, {}, {flag ? 1.0 : 0.0})});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].to_double_vector(),
              flag ? (std::vector<double>{0, 3, 6}) : (std::vector<double>{0, 1, 2}));
  }
}

// A while-loop over the rows of X (no trip count; the body's condition i + 1 < rows), collecting
// a sequence whose rows an If inside the body negates for the first two iterations; the
// sequence is the Loop's output, stacked by ConcatFromSequence.
TEST(Loop, AWhileLoopCarriesASequenceAndRunsAnIfOnTheIterationNumber) {
  ModelBuilder m(17);
  m.input("X", TensorProto::FLOAT, {"5", "2"});
  onnx::NodeProto& empty = m.node("SequenceEmpty", {}, {"rows"}, "rows");
  add_int_attr(empty, "dtype", TensorProto::FLOAT);
  m.node("Shape", {"X"}, {"shape"}, "shape");
  scalar_constant(m.graph(), "zero", TensorProto::INT64, 0);
  m.node("Gather", {"shape", "zero"}, {"limit"}, "limit");
  scalar_constant(m.graph(), "go", TensorProto::BOOL, 1);
  onnx::NodeProto& loop = m.node("Loop", {"", "go", "rows"}, {"collected"}, "collect");
  onnx::GraphProto& body = graph_attr(loop, "body");
  add_input(body, "i", TensorProto::INT64);
  add_input(body, "c", TensorProto::BOOL);
  add_input(body, "seq", TensorProto::UNDEFINED);
  scalar_constant(body, "one", TensorProto::INT64, 1);
  scalar_constant(body, "two", TensorProto::INT64, 2);
  add_node(body, "Add", {"i", "one"}, {"next"});
  add_node(body, "Less", {"next", "limit"}, {"more"});
  add_node(body, "Gather", {"X", "i"}, {"row"});
  add_node(body, "Less", {"i", "two"}, {"early"});
  onnx::NodeProto& branch = add_node(body, "If", {"early"}, {"picked"});
  add_node(graph_attr(branch, "then_branch"), "Neg", {"row"}, {"negated"});
  add_outputs(*branch.mutable_attribute(0)->mutable_g(), {"negated"});
  add_node(graph_attr(branch, "else_branch"), "Identity", {"row"}, {"kept"});
  add_outputs(*branch.mutable_attribute(1)->mutable_g(), {"kept"});
  add_node(body, "SequenceInsert", {"seq", "picked"}, {"seq_next"});
  add_outputs(body, {"more", "seq_next"});
  onnx::NodeProto& concat = m.node("ConcatFromSequence", {"collected"}, {"Y"}, "stack");
  add_int_attr(concat, "axis", 0);
  add_int_attr(concat, "new_axis", 1);
  m.output("Y");

  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(count_ops(*graph, "Neg"), 2);
  ASSERT_EQ(graph->outputs()[0]->shape(), (Shape{5, 2}));
  std::vector<float> x(10);
  for (int i = 0; i < 10; ++i) x[i] = 0.5f * static_cast<float>(i) - 1.75f;
  const std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({5, 2}, x)});
  ASSERT_EQ(out.size(), 1u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(out[0].data<float>()[i], i < 4 ? -x[i] : x[i]) << i;  // data movement: exact
  }
}

// A Loop in a Loop's body, the inner one reading the outer's iteration number: the sum of X's
// elements in row-major order, carried through both.
TEST(Loop, ALoopInsideALoopBody) {
  ModelBuilder m(17);
  m.input("X", TensorProto::FLOAT, {"2", "3"});
  m.initializer_i64("rows", {}, {2});
  m.initializer_i64("cols", {}, {3});
  m.initializer_f32("start", {}, {0.0f});
  onnx::NodeProto& outer = m.node("Loop", {"rows", "", "start"}, {"total"}, "outer");
  onnx::GraphProto& outer_body = graph_attr(outer, "body");
  add_input(outer_body, "i", TensorProto::INT64);
  add_input(outer_body, "c", TensorProto::BOOL);
  add_input(outer_body, "acc", TensorProto::FLOAT);
  add_node(outer_body, "Gather", {"X", "i"}, {"row"});
  onnx::NodeProto& inner = add_node(outer_body, "Loop", {"cols", "", "acc"}, {"acc_row"});
  onnx::GraphProto& inner_body = graph_attr(inner, "body");
  add_input(inner_body, "j", TensorProto::INT64);
  add_input(inner_body, "c2", TensorProto::BOOL);
  add_input(inner_body, "a", TensorProto::FLOAT);
  add_node(inner_body, "Gather", {"row", "j"}, {"x"});
  add_node(inner_body, "Add", {"a", "x"}, {"a_next"});
  add_outputs(inner_body, {"c2", "a_next"});
  add_outputs(outer_body, {"c", "acc_row"});
  m.output("total");

  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(count_ops(*graph, "Add"), 6);
  // Values are named under each Loop and iteration, the inner Loop's under the outer's.
  bool named = false;
  for (const auto& node : graph->nodes()) {
    named |= node->op_type() == "Add" && node->output(0)->name() == "outer/1/acc_row/2/a_next";
  }
  EXPECT_TRUE(named);
  const std::vector<float> x = {0.1f, 1e8f, -1e8f, 0.3f, 1.0f / 3.0f, 7.0f};
  const std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({2, 3}, x)});
  ASSERT_EQ(out.size(), 1u);
  float sum = 0.0f;
  for (float v : x) sum += v;  // the loops' order, which f32 rounding makes visible
  EXPECT_EQ(out[0].data<float>()[0], sum);
}

TEST(Loop, ZeroIterationsGiveTheInitialValues) {
  ModelBuilder m = recurrent_loop(TensorProto::FLOAT, 0);
  m.output("H");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  const Tensor h0 = Tensor::from_f32({3}, {1.0f, -2.0f, 0.5f});
  const std::vector<Tensor> out = run_graph(
      *graph, {Tensor(TensorType{DType::kF32, {0, 3}}), h0, Tensor::from_f32({3}, {1, 1, 1})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], h0);

  ModelBuilder scanned = recurrent_loop(TensorProto::FLOAT, 0);
  scanned.output("Y");
  expect_import_error(scanned,
                      "graph output 'Y' is the scan output of node 'rnn' (Loop), which runs no "
                      "iteration, so it has no shape");
}

// The zoo's recommender (two EmbeddingBags: each a Loop over the 8 examples' bags, slicing the
// ids or the gathered rows per bag) trains with one Gather and one GatherGrad per table, and no
// SliceGrad: canonicalize merges the unrolled Slices into Splits and the Gathers by their pieces
// (passes/canonicalize.cc), where per bag each gradient would be a tensor of the whole table or
// batch.
TEST(Loop, UnrolledEmbeddingBagsTrainWithOneGatherPerTable) {
  for (const char* exporter : {"torchscript", "dynamo", "dynamo_raw"}) {
    SCOPED_TRACE(exporter);
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(
        testing::source_path(str_cat("models/zoo/bag_recommender.", exporter, ".onnx")));
    ASSERT_TRUE(graph.ok()) << graph.status();
    CompileOptions options;
    options.training = TrainingOptions{};
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(**graph, options, diagnostics).ok());
    const Graph& step = *(*graph)->training_step();
    EXPECT_EQ(count_ops(step, "Gather"), 2);
    EXPECT_EQ(count_ops(step, "GatherGrad"), 2);
    EXPECT_EQ(count_ops(step, "SliceGrad"), 0);
  }
}

// ---- Slices whose bounds are data (compiler/onnx_ragged.h) ----

// A Loop over bags as PyTorch's TorchScript exporter writes nn.EmbeddingBag with `offsets`: the
// bounds are Concat(offsets, [rows]); bag i is the ids from bounds[i] to bounds[i + 1], their
// table rows reduced by `reduce` (ReduceSum, ReduceMean or ReduceMax) over the bag, scanned.
ModelBuilder bag_loop(int elem_type, const std::string& reduce, int64_t rows, int64_t bags,
                      int64_t opset = 18) {
  ModelBuilder m(opset);
  m.input("table", elem_type, {"10", "3"});
  m.input("ids", TensorProto::INT64, {std::to_string(rows)});
  m.input("offsets", TensorProto::INT64, {std::to_string(bags)});
  m.initializer_i64("rows", {1}, {rows});
  m.initializer_i64("trips", {}, {bags});
  m.initializer_i64("one_dim", {1}, {1});
  m.initializer_i64("axis0", {1}, {0});
  add_int_attr(m.node("Concat", {"offsets", "rows"}, {"bounds"}, "bounds"), "axis", 0);
  onnx::NodeProto& loop = m.node("Loop", {"trips", ""}, {"Y"}, "bags");
  onnx::GraphProto& body = graph_attr(loop, "body");
  add_input(body, "i", TensorProto::INT64);
  add_input(body, "cond", TensorProto::BOOL);
  scalar_constant(body, "one", TensorProto::INT64, 1);
  add_node(body, "Add", {"i", "one"}, {"next"});
  add_node(body, "Gather", {"bounds", "i"}, {"start0"});
  add_node(body, "Gather", {"bounds", "next"}, {"end0"});
  add_node(body, "Reshape", {"start0", "one_dim"}, {"start"});
  add_node(body, "Reshape", {"end0", "one_dim"}, {"end"});
  add_node(body, "Slice", {"ids", "start", "end", "axis0"}, {"bag_ids"});
  add_node(body, "Gather", {"table", "bag_ids"}, {"bag_rows"});
  if (reduce == "ReduceSum" || opset >= 18) {
    add_int_attr(add_node(body, reduce, {"bag_rows", "axis0"}, {"bag"}), "keepdims", 0);
  } else {  // axes an attribute
    onnx::NodeProto& node = add_node(body, reduce, {"bag_rows"}, {"bag"});
    add_int_attr(node, "keepdims", 0);
    testing::add_ints_attr(node, "axes", {0});
  }
  add_outputs(body, {"cond", "bag"});
  return m;
}

// The reductions of the bags of `ids` (bounds `offsets` and `rows`) over rows of `table`
// (10 x 3), in the bags' order, in float: an empty bag gives ONNX's reduction of nothing.
std::vector<float> bags_in_cpp(const std::string& reduce, const std::vector<float>& table,
                               const std::vector<int64_t>& ids,
                               const std::vector<int64_t>& offsets) {
  std::vector<float> out;
  for (size_t b = 0; b < offsets.size(); ++b) {
    const int64_t end = b + 1 < offsets.size() ? offsets[b + 1] : static_cast<int64_t>(ids.size());
    for (int64_t c = 0; c < 3; ++c) {
      float acc = reduce == "ReduceMax" ? -INFINITY : 0.0f;
      for (int64_t r = offsets[b]; r < end; ++r) {
        const float v = table[ids[r] * 3 + c];
        acc = reduce == "ReduceMax" ? std::max(acc, v) : acc + v;
      }
      if (reduce == "ReduceMean") acc /= static_cast<float>(end - offsets[b]);  // 0/0: NaN
      out.push_back(acc);
    }
  }
  return out;
}

// The bags of consecutive iterations become one segment reduction (a ScatterND of whole rows
// with the reduction, after a ScatterElements that counts the bags' starts; a max at opset 17,
// where the scatters do not reduce by max, a running max within the bags), with no reduction of
// the whole rows per bag left; at opset 15, where they do not reduce at all, each bag keeps its
// masked reduction. Their values against the loop in C++, bit for bit (quarters, so every sum is
// exact in any order; a mean's one division rounds as C++'s), empty bags included.
TEST(RaggedSlice, ALoopOfBagsIsOneSegmentReduction) {
  std::vector<float> table(30);
  for (int i = 0; i < 30; ++i) table[i] = 0.25f * static_cast<float>((i * 7) % 23) - 2.5f;
  const std::vector<int64_t> ids = {3, 9, 0, 3, 5, 7, 1, 2};
  for (const auto& [reduce, opset] :
       std::vector<std::pair<std::string, int64_t>>{{"ReduceSum", 18},
                                                    {"ReduceMean", 18},
                                                    {"ReduceMax", 18},
                                                    {"ReduceMax", 17},
                                                    {"ReduceSum", 15},
                                                    {"ReduceMax", 15}}) {
    SCOPED_TRACE(str_cat(reduce, " at opset ", opset));
    ModelBuilder m = bag_loop(TensorProto::FLOAT, reduce, 8, 5, opset);
    m.output("Y");
    std::unique_ptr<Graph> graph = import_ok(m);
    ASSERT_NE(graph, nullptr);
    PassPipeline pipeline;
    add_canonicalize_pipeline(pipeline);
    ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
    const bool merged = opset >= 16;
    EXPECT_EQ(count_ops(*graph, "ScatterElements"), merged ? 1 : 0);
    EXPECT_EQ(count_ops(*graph, "ScatterND"), merged && (reduce != "ReduceMax" || opset >= 18));
    EXPECT_EQ(count_ops(*graph, "ReduceSum") + count_ops(*graph, "ReduceMax"), merged ? 0 : 5);
    for (const std::vector<int64_t>& offsets :
         {std::vector<int64_t>{0, 2, 2, 5, 6}, std::vector<int64_t>{0, 0, 1, 8, 8}}) {
      const std::vector<Tensor> out =
          run_graph(*graph, {Tensor::from_f32({10, 3}, table), Tensor::from_i64({8}, ids),
                             Tensor::from_i64({5}, offsets)});
      ASSERT_EQ(out.size(), 1u);
      ASSERT_EQ(out[0].shape(), (Shape{5, 3}));
      const std::vector<float> want = bags_in_cpp(reduce, table, ids, offsets);
      for (size_t k = 0; k < want.size(); ++k) {
        const float got = out[0].data<float>()[k];
        if (std::isnan(want[k])) {
          EXPECT_TRUE(std::isnan(got)) << k;
        } else {
          EXPECT_EQ(got, want[k]) << "bag " << k / 3 << " column " << k % 3;
        }
      }
    }
  }
}

// The segment reductions' gradients (ScatterND add and max, a mean's division, the running max)
// reach the table as central differences in f64 say, repeated ids in a bag included.
TEST(RaggedSlice, TheBagsGradientsReachTheTable) {
  for (const auto& [reduce, opset] : std::vector<std::pair<std::string, int64_t>>{
           {"ReduceSum", 18}, {"ReduceMean", 18}, {"ReduceMax", 18}, {"ReduceMax", 17}}) {
    SCOPED_TRACE(str_cat(reduce, " at opset ", opset));
    ModelBuilder m = bag_loop(TensorProto::DOUBLE, reduce, 8, 4, opset);
    testing::add_weighted_loss(m, "Y", {"4", "3"});
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "bags.onnx");
    ASSERT_TRUE(graph.ok()) << graph.status();
    PassPipeline pipeline;
    add_canonicalize_pipeline(pipeline);
    ASSERT_TRUE(pipeline.run(**graph, PassContext{}).ok());
    std::mt19937 rng(7);
    const std::vector<Tensor> inputs = {
        testing::random_tensor({DType::kF64, {10, 3}}, rng, -1.5, 1.5),
        // No empty bag: its mean (NaN) or max (-inf) would make the loss non-finite.
        Tensor::from_i64({8}, {4, 1, 4, 6, 0, 9, 2, 2}), Tensor::from_i64({4}, {0, 3, 4, 6}),
        testing::random_tensor({DType::kF64, {4, 3}}, rng, -1.5, 1.5)};
    absl::StatusOr<testing::GradientCheck> check =
        testing::check_gradients(**graph, inputs, "^table$");
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->inputs_checked, 1);
    EXPECT_LT(check->max_relative_error, 1e-6) << check->worst_input;
  }
}

// One slice with run-time bounds, reduced: Slice's rules (a negative bound counts from the end,
// both are clamped to the axis, an end before the start is empty) and ONNX's reductions of an
// empty set (0, the lowest float, 0/0), against the rows summed in C++, exactly.
TEST(RaggedSlice, OneSliceFollowsSlicesRulesForItsBounds) {
  ModelBuilder m(18);
  m.input("X", TensorProto::FLOAT, {"6", "2"});
  m.input("s", TensorProto::INT64, {"1"});
  m.input("e", TensorProto::INT32, {"1"});
  m.initializer_i64("axis0", {1}, {0});
  m.node("Slice", {"X", "s", "e", "axis0"}, {"rows"}, "rows");
  add_int_attr(m.node("ReduceSum", {"rows", "axis0"}, {"sum"}, "sum"), "keepdims", 0);
  m.node("ReduceMax", {"rows", "axis0"}, {"max"}, "max");
  add_int_attr(m.node("ReduceMean", {"rows", "axis0"}, {"mean"}, "mean"), "keepdims", 0);
  m.output("sum");
  m.output("max");
  m.output("mean");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->outputs()[1]->shape(), (Shape{1, 2}));
  const std::vector<float> x = {1.5f, -2, 0.25f, 4, -1, 8, 3, -0.5f, 2, 16, -4, 0.75f};
  struct Bounds {
    int64_t start;
    int32_t end;
    int64_t from, to;  // what Slice takes
  };
  for (const Bounds& b : {Bounds{1, 4, 1, 4}, Bounds{-2, 100, 4, 6}, Bounds{4, 2, 4, 4},
                          Bounds{-100, 2, 0, 2}, Bounds{0, -1, 0, 5}}) {
    SCOPED_TRACE(str_cat(b.start, " to ", b.end));
    const std::vector<Tensor> out =
        run_graph(*graph, {Tensor::from_f32({6, 2}, x), Tensor::from_i64({1}, {b.start}),
                           Tensor::from_doubles(DType::kI32, {1}, {static_cast<double>(b.end)})});
    ASSERT_EQ(out.size(), 3u);
    for (int c = 0; c < 2; ++c) {
      float sum = 0.0f;
      float max = -INFINITY;
      for (int64_t r = b.from; r < b.to; ++r) {
        sum += x[r * 2 + c];
        max = std::max(max, x[r * 2 + c]);
      }
      EXPECT_EQ(out[0].data<float>()[c], sum);
      EXPECT_EQ(out[1].data<float>()[c], max);
      const float mean = sum / static_cast<float>(b.to - b.from);
      if (b.to == b.from) {
        EXPECT_TRUE(std::isnan(out[2].data<float>()[c]));
      } else {
        EXPECT_EQ(out[2].data<float>()[c], mean);
      }
    }
  }
}

TEST(RaggedSliceErrors, ASliceWithRunTimeBoundsReadOtherwiseIsNamed) {
  ModelBuilder m(18);
  m.input("X", TensorProto::FLOAT, {"6", "2"});
  m.input("s", TensorProto::INT64, {"1"});
  m.input("e", TensorProto::INT64, {"1"});
  m.node("Slice", {"X", "s", "e"}, {"rows"}, "rows");
  m.node("Relu", {"rows"}, {"y"}, "relu");
  m.output("y");
  expect_import_error(m,
                      "node 'relu' (Relu) reads 'rows', a slice of 'X' whose bounds are "
                      "computed at run time ('s' to 'e'); ampc runs static graphs");

  // A reduction over another axis than the sliced one.
  ModelBuilder across(18);
  across.input("X", TensorProto::FLOAT, {"6", "2"});
  across.input("s", TensorProto::INT64, {"1"});
  across.input("e", TensorProto::INT64, {"1"});
  across.initializer_i64("axis1", {1}, {1});
  across.node("Slice", {"X", "s", "e"}, {"rows"}, "rows");
  across.node("ReduceSum", {"rows", "axis1"}, {"y"}, "sum");
  across.output("y");
  expect_import_error(across, "(it reduces axes [1], the slice is along axis 0)");
}

TEST(LoopErrors, ATripCountComputedAtRunTime) {
  ModelBuilder m = recurrent_loop(TensorProto::FLOAT, 4);
  m.input("n", TensorProto::INT64, {});
  m.graph().mutable_node(m.graph().node_size() - 1)->set_input(0, "n");
  m.output("Y");
  expect_import_error(m, "node 'rnn' (Loop): its trip count 'n' is computed at run time");
}

TEST(LoopErrors, AConditionTheBodyComputesFromData) {
  ModelBuilder m = recurrent_loop(TensorProto::FLOAT, 4);
  m.initializer("go", TensorProto::BOOL, {}).add_int32_data(1);
  m.initializer_f32("zero_f", {}, {0.0f});
  onnx::NodeProto& loop = *m.graph().mutable_node(m.graph().node_size() - 1);
  loop.set_input(1, "go");
  onnx::GraphProto& body = *loop.mutable_attribute(0)->mutable_g();
  add_node(body, "ReduceSum", {"h_next"}, {"total"});
  add_node(body, "Greater", {"total", "zero_f"}, {"positive"});
  body.mutable_output(0)->set_name("positive");
  m.output("Y");
  expect_import_error(m,
                      "node 'rnn' (Loop): its body's condition output 'positive' after "
                      "iteration 0 is computed at run time");
}

TEST(LoopErrors, ALoopThatNeverEndsIsRefusedAtTheIterationLimit) {
  ModelBuilder m(17);
  m.input("x", TensorProto::FLOAT, {"2"});
  scalar_constant(m.graph(), "go", TensorProto::BOOL, 1);
  onnx::NodeProto& loop = m.node("Loop", {"", "go", "x"}, {"y"}, "forever");
  onnx::GraphProto& body = graph_attr(loop, "body");
  add_input(body, "i", TensorProto::INT64);
  add_input(body, "c", TensorProto::BOOL);
  add_input(body, "v", TensorProto::FLOAT);
  add_outputs(body, {"c", "v"});
  m.output("y");
  expect_import_error(m, str_cat("node 'forever' (Loop) runs more than ",
                                 onnx_io::kMaxLoopIterations, " iterations"));

  // Neither a trip count nor a condition: the same loop, said at once.
  m.graph().mutable_node(1)->set_input(1, "");
  expect_import_error(m, "node 'forever' (Loop) has neither a trip count nor a condition");
}

TEST(LoopErrors, MalformedBodiesAreNamed) {
  ModelBuilder inputs = recurrent_loop(TensorProto::FLOAT, 4);
  onnx::GraphProto& body = *inputs.graph()
                                .mutable_node(inputs.graph().node_size() - 1)
                                ->mutable_attribute(0)
                                ->mutable_g();
  body.mutable_input()->RemoveLast();
  inputs.output("Y");
  expect_import_error(inputs,
                      "node 'rnn' (Loop): its body has 2 inputs; a Loop with 1 "
                      "loop-carried values has 3");

  // A scan output whose shape changes between iterations: X[0:i+1].
  ModelBuilder growing = recurrent_loop(TensorProto::FLOAT, 4);
  onnx::GraphProto& grow_body = *growing.graph()
                                     .mutable_node(growing.graph().node_size() - 1)
                                     ->mutable_attribute(0)
                                     ->mutable_g();
  scalar_constant(grow_body, "one", TensorProto::INT64, 1);
  scalar_constant(grow_body, "first", TensorProto::INT64, 0);
  add_node(grow_body, "Add", {"i", "one"}, {"end"});
  add_node(grow_body, "Unsqueeze", {"end", "first"}, {"ends"});
  add_node(grow_body, "Unsqueeze", {"first", "first"}, {"starts"});
  add_node(grow_body, "Slice", {"X", "starts", "ends"}, {"prefix"});
  grow_body.mutable_output(2)->set_name("prefix");
  growing.output("Y");
  expect_import_error(growing,
                      "its body's scan output 2 ('prefix') is f32[1,3] at iteration 0 "
                      "and f32[2,3] at iteration 1");

  ModelBuilder unknown = recurrent_loop(TensorProto::FLOAT, 4);
  onnx::NodeProto& loop = *unknown.graph().mutable_node(unknown.graph().node_size() - 1);
  add_int_attr(loop, "unroll", 1);
  unknown.output("Y");
  expect_import_error(unknown, "attribute 'unroll' is not an attribute of Loop (it has body)");
}

}  // namespace
}  // namespace ampc
