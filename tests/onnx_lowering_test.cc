// What the importer rewrites (compiler/onnx_lowering.h): an If of a condition known at import to
// its branch, CastLike to Cast, sequences to the tensors they hold, ReduceMin to a mirrored
// ReduceMax (model-local functions: tests/onnx_inliner_test.cc). Results are checked by running
// the imported graph on the CPU against values worked out by hand (data movement and IEEE casts:
// bit-exact).
#include <cstring>
#include <limits>

#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::count_ops;
using testing::expect_import_errors;
using testing::floats;
using testing::import_ok;
using testing::ModelBuilder;
using testing::run_graph;

// 0, 1, ..., 11 as f32[3,4].
Tensor iota_3x4() {
  std::vector<float> values(12);
  for (int i = 0; i < 12; ++i) values[i] = static_cast<float>(i);
  return Tensor::from_f32({3, 4}, values);
}

// A Constant node of `graph` (the model's, or a branch of an If) making `name` an i64 tensor.
onnx::NodeProto& constant_i64(onnx::GraphProto& graph, const std::string& name,
                              const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& values) {
  onnx::NodeProto& node = *graph.add_node();
  node.set_op_type("Constant");
  node.set_name(name);
  node.add_output(name);
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = attr->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
  return node;
}

onnx::NodeProto& constant_i64(ModelBuilder& m, const std::string& name,
                              const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& values) {
  return constant_i64(m.graph(), name, dims, values);
}

// ---- If with a condition known at import ----------------------------------------------------

// x [2, D, 3]; y = x.squeeze(1) as PyTorch's TorchScript exporter writes it when it cannot prove
// D is 1: If(Shape(x)[1] == 1, Squeeze(x, [1]), Identity(x)).
ModelBuilder squeeze_if_model(int64_t d) {
  ModelBuilder m(17);
  m.input("x", onnx::TensorProto::FLOAT, {"2", std::to_string(d), "3"});
  m.node("Shape", {"x"}, {"shape"}, "shape");
  constant_i64(m, "one_index", {}, {1});
  m.node("Gather", {"shape", "one_index"}, {"dim"}, "dim");
  constant_i64(m, "one", {}, {1});
  m.node("Equal", {"dim", "one"}, {"is_one"}, "is_one");
  onnx::NodeProto& branch = m.node("If", {"is_one"}, {"y"}, "squeeze_if");
  onnx::AttributeProto* then_attr = branch.add_attribute();
  then_attr->set_name("then_branch");
  then_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* then_graph = then_attr->mutable_g();
  then_graph->set_name("then");
  {
    constant_i64(*then_graph, "axes", {1}, {1});
    onnx::NodeProto* squeeze = then_graph->add_node();
    squeeze->set_op_type("Squeeze");
    squeeze->add_input("x");
    squeeze->add_input("axes");
    squeeze->add_output("squeezed");
    then_graph->add_output()->set_name("squeezed");
  }
  onnx::AttributeProto* else_attr = branch.add_attribute();
  else_attr->set_name("else_branch");
  else_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* else_graph = else_attr->mutable_g();
  else_graph->set_name("else");
  onnx::NodeProto* identity = else_graph->add_node();
  identity->set_op_type("Identity");
  identity->add_input("x");
  identity->add_output("same");
  else_graph->add_output()->set_name("same");
  m.output("y");
  return m;
}

TEST(StaticIf, TheBranchTheKnownConditionTakesIsImportedInPlace) {
  for (const int64_t d : {1, 2}) {
    SCOPED_TRACE(str_cat("dim ", d));
    std::unique_ptr<Graph> graph = import_ok(squeeze_if_model(d));
    ASSERT_NE(graph, nullptr);
    EXPECT_EQ(count_ops(*graph, "If"), 0);
    EXPECT_EQ(count_ops(*graph, "Squeeze"), d == 1 ? 1 : 0);
    ASSERT_EQ(graph->outputs().size(), 1u);
    EXPECT_EQ(graph->outputs()[0]->shape(), d == 1 ? (Shape{2, 3}) : (Shape{2, d, 3}));
    std::vector<float> x(6 * d);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    const std::vector<Tensor> y = run_graph(*graph, {Tensor::from_f32({2, d, 3}, x)});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(floats(y[0]), x);  // squeezing or not moves no element
  }
}

// A condition computed at run time: both branches are computed and Where selects, which needs
// their outputs to have one type. Here the then_branch multiplies by -1 from an initializer of
// its own (as PyTorch's dynamo exporter writes a branch's constants). Against the branch worked
// out in C++, exactly (x * -1 and the selection change no bit but the sign).
TEST(StaticIf, AConditionComputedAtRunTimeSelectsBetweenBranchesOfOneType) {
  ModelBuilder m = squeeze_if_model(1);
  m.input("flag", onnx::TensorProto::BOOL, {"1"});
  onnx::NodeProto& branch = *m.graph().mutable_node(m.graph().node_size() - 1);
  branch.set_input(0, "flag");
  onnx::GraphProto& then_graph = *branch.mutable_attribute(0)->mutable_g();
  onnx::TensorProto* minus_one = then_graph.add_initializer();
  minus_one->set_name("minus_one");
  minus_one->set_data_type(onnx::TensorProto::FLOAT);
  minus_one->add_float_data(-1.0f);
  onnx::NodeProto& then_node = *then_graph.mutable_node(1);
  then_node.set_op_type("Mul");
  then_node.set_input(1, "minus_one");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  // One to select the output, and one per branch to guard its read of x (whose gradient must
  // come from the taken branch only: tests/onnx_loop_test.cc, RunTimeIf).
  EXPECT_EQ(count_ops(*graph, "Where"), 3);
  const std::vector<float> x = {1.5f, -2, 0, 3, -0.25f, 7};
  for (const bool flag : {true, false}) {
    const std::vector<Tensor> y =
        run_graph(*graph, {Tensor::from_f32({2, 1, 3}, x),
                           Tensor::from_doubles(DType::kBool, {1}, {flag ? 1.0 : 0.0})});
    ASSERT_EQ(y.size(), 1u);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(floats(y[0])[i], flag ? -x[i] : x[i]);
  }

  ModelBuilder squeezing = squeeze_if_model(1);
  squeezing.input("flag", onnx::TensorProto::BOOL, {});
  squeezing.graph().mutable_node(squeezing.graph().node_size() - 1)->set_input(0, "flag");
  expect_import_errors(squeezing,
                       {"node 'squeeze_if' (If): its condition 'flag' is computed at run time, "
                        "so ampc computes both branches",
                        "output 0 is f32[2,3] in the then_branch and f32[2,1,3] in the "
                        "else_branch; ampc runs static graphs, so both must have one type"});
}

// ---- ReduceMin -----------------------------------------------------------------------------

// ReduceMin has no kernel: it is the mirrored ReduceMax of the mirrored data, -x for floats (the
// gradient tests cover those), ~x for integers (which, unlike -x, cannot overflow at the type's
// minimum) and NOT for bool. Against std::min over the rows, exactly.
TEST(ReduceMin, OfIntegersAndBoolsIsTheMirroredReduceMaxExactly) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    onnx::TensorProto::DataType onnx_type;
    Tensor x;  // [3, 4]
  };
  const std::vector<Case> cases = {
      {onnx::TensorProto::INT64,
       Tensor::from_i64({3, 4}, {kMin, 0, kMax, -1, 5, kMax, 7, 6, -3, -3, kMin + 1, 0})},
      {onnx::TensorProto::INT32,
       Tensor::from_doubles(DType::kI32, {3, 4},
                            {-2147483648.0, 0, 2147483647.0, -1, 9, 8, 7, 6, 1, 2, 3, 4})},
      {onnx::TensorProto::INT8,
       Tensor::from_doubles(DType::kI8, {3, 4}, {-128, 127, 0, -1, 3, 2, 1, 127, 5, -5, 0, 4})},
      {onnx::TensorProto::UINT8,
       Tensor::from_doubles(DType::kU8, {3, 4}, {255, 0, 7, 9, 255, 254, 253, 255, 1, 2, 3, 4})},
      {onnx::TensorProto::BOOL,
       Tensor::from_doubles(DType::kBool, {3, 4}, {1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0})},
  };
  for (const Case& c : cases) {
    for (const int64_t keepdims : {0, 1}) {
      SCOPED_TRACE(str_cat(dtype_name(c.x.dtype()), " keepdims ", keepdims));
      ModelBuilder m(20);
      m.input("x", c.onnx_type, {"3", "4"});
      m.initializer("axes", onnx::TensorProto::INT64, {1}).add_int64_data(-1);
      add_int_attr(m.node("ReduceMin", {"x", "axes"}, {"y"}, "row_min"), "keepdims", keepdims);
      m.output("y");
      std::unique_ptr<Graph> graph = import_ok(m);
      ASSERT_NE(graph, nullptr);
      EXPECT_EQ(count_ops(*graph, "ReduceMax"), 1);
      EXPECT_EQ(graph->outputs()[0]->type(),
                (TensorType{c.x.dtype(), keepdims ? Shape{3, 1} : Shape{3}}));
      const std::vector<Tensor> y = run_graph(*graph, {c.x});
      ASSERT_EQ(y.size(), 1u);
      for (int64_t row = 0; row < 3; ++row) {
        int64_t want = c.x.element_as_i64(row * 4);
        for (int64_t i = 1; i < 4; ++i) want = std::min(want, c.x.element_as_i64(row * 4 + i));
        EXPECT_EQ(y[0].element_as_i64(row), want) << "row " << row;
      }
    }
  }
}

// ---- CastLike ----------------------------------------------------------------------------

TEST(CastLike, BecomesACastToTheTargetsTypeAndRoundsAsIeeeSays) {
  ModelBuilder m(20);
  m.input("x", onnx::TensorProto::FLOAT, {"4"});
  m.input("like", onnx::TensorProto::FLOAT16, {"1"});
  m.node("CastLike", {"x", "like"}, {"y"}, "cast_like");
  m.output("y");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  ASSERT_EQ(count_ops(*graph, "Cast"), 1);
  EXPECT_EQ(count_ops(*graph, "CastLike"), 0);
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF16, {4}}));
  EXPECT_EQ(graph->outputs()[0]->name(), "y");

  // 65504 is f16's largest finite value; 65520 is the midpoint to the next power of two, which
  // rounds to even: infinity. 1/3 in f32 (0x3EAAAAAB) rounds to 0x3555.
  const Tensor x = Tensor::from_f32({4}, {1.0f, 65504.0f, 65520.0f, 1.0f / 3.0f});
  Tensor like(TensorType{DType::kF16, {1}});
  std::vector<Tensor> out = run_graph(*graph, {x, like});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].bytes().size(), 8u);
  uint16_t y[4];
  std::memcpy(y, out[0].bytes().data(), sizeof(y));
  EXPECT_EQ(y[0], 0x3C00);
  EXPECT_EQ(y[1], 0x7BFF);
  EXPECT_EQ(y[2], 0x7C00);
  EXPECT_EQ(y[3], 0x3555);
}

TEST(CastLike, ChecksItsAttributes) {
  ModelBuilder m(20);
  m.input("x", onnx::TensorProto::FLOAT, {"4"});
  m.input("like", onnx::TensorProto::INT64, {"1"});
  add_int_attr(m.node("CastLike", {"x", "like"}, {"y"}, "c"), "axis", 1);
  m.output("y");
  expect_import_errors(m, {"node 'c' (CastLike)", "'axis' is not an attribute of CastLike"});
}

// ---- Sequences ---------------------------------------------------------------------------

TEST(Sequences, SplitToSequenceWithoutSplitGivesSlicesAndConcatFromSequenceStacksThem) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
  onnx::NodeProto& split = m.node("SplitToSequence", {"x"}, {"columns"}, "split");
  add_int_attr(split, "axis", 1);
  add_int_attr(split, "keepdims", 0);
  constant_i64(m, "last", {}, {-1});
  m.node("SequenceAt", {"columns", "last"}, {"column3"}, "at");
  m.node("SequenceLength", {"columns"}, {"count"}, "length");
  onnx::NodeProto& concat = m.node("ConcatFromSequence", {"columns"}, {"xt"}, "stack");
  add_int_attr(concat, "axis", 0);
  add_int_attr(concat, "new_axis", 1);
  m.output("column3");
  m.output("count");
  m.output("xt");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {3}}));
  EXPECT_EQ(graph->outputs()[1]->type(), (TensorType{DType::kI64, {}}));
  EXPECT_EQ(graph->outputs()[2]->type(), (TensorType{DType::kF32, {4, 3}}));

  std::vector<Tensor> out = run_graph(*graph, {iota_3x4()});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{3, 7, 11}));
  EXPECT_EQ(out[1].element_as_i64(0), 4);
  EXPECT_EQ(floats(out[2]), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

TEST(Sequences, SplitToSequenceWithAScalarSplitLeavesTheRemainderLast) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
  constant_i64(m, "three", {}, {3});
  onnx::NodeProto& split = m.node("SplitToSequence", {"x", "three"}, {"parts"}, "split");
  add_int_attr(split, "axis", 1);
  add_int_attr(split, "keepdims", 0);  // ignored when split is given
  constant_i64(m, "one", {}, {1});
  m.node("SequenceAt", {"parts", "one"}, {"rest"}, "at");
  m.output("rest");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {3, 1}}));
  std::vector<Tensor> out = run_graph(*graph, {iota_3x4()});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{3, 7, 11}));
}

TEST(Sequences, ConstructInsertEraseAndConcatenate) {
  ModelBuilder m(18);
  m.input("a", onnx::TensorProto::FLOAT, {"1", "2"});
  m.input("b", onnx::TensorProto::FLOAT, {"1", "2"});
  m.input("c", onnx::TensorProto::FLOAT, {"2", "2"});
  m.node("SequenceConstruct", {"a", "b"}, {"ab"}, "construct");
  constant_i64(m, "one", {}, {1});
  m.node("SequenceInsert", {"ab", "c", "one"}, {"acb"}, "insert");
  constant_i64(m, "first", {}, {0});
  m.node("SequenceErase", {"acb", "first"}, {"cb"}, "erase");
  m.node("SequenceEmpty", {}, {"empty"}, "empty");
  m.node("SequenceInsert", {"empty", "a"}, {"just_a"}, "append");
  add_int_attr(m.node("ConcatFromSequence", {"cb"}, {"y"}, "concat"), "axis", 0);
  add_int_attr(m.node("ConcatFromSequence", {"just_a"}, {"z"}, "concat_a"), "axis", -1);
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {3, 2}}));
  std::vector<Tensor> out =
      run_graph(*graph, {Tensor::from_f32({1, 2}, {1, 2}), Tensor::from_f32({1, 2}, {3, 4}),
                         Tensor::from_f32({2, 2}, {5, 6, 7, 8})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{5, 6, 7, 8, 3, 4}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{1, 2}));
}

TEST(Sequences, ErrorsNameTheNodeAndWhatIsWrong) {
  {  // a position only known at run time
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    m.input("i", onnx::TensorProto::INT64, {});
    m.node("SplitToSequence", {"x"}, {"rows"}, "split");
    m.node("SequenceAt", {"rows", "i"}, {"y"}, "pick");
    m.output("y");
    expect_import_errors(m, {"node 'pick' (SequenceAt)", "position 'i'", "known at compile time"});
  }
  {  // out of range
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    m.node("SplitToSequence", {"x"}, {"rows"}, "split");
    constant_i64(m, "three", {}, {3});
    m.node("SequenceAt", {"rows", "three"}, {"y"}, "pick");
    m.output("y");
    expect_import_errors(m, {"node 'pick' (SequenceAt)", "position 3 is out of range",
                             "sequence of 3 tensors", "-3 to 2"});
  }
  {  // a sequence as a graph output
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    m.node("SplitToSequence", {"x"}, {"rows"}, "split");
    m.output("rows");
    expect_import_errors(m, {"graph output 'rows' is a sequence", "node 'split'"});
  }
  {  // a sequence read by a tensor op
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    m.node("SplitToSequence", {"x"}, {"rows"}, "split");
    m.node("Relu", {"rows"}, {"y"}, "relu");
    m.output("y");
    expect_import_errors(m, {"node 'relu' (Relu) reads sequence 'rows'", "SequenceAt"});
  }
  {  // split sizes that do not cover the dim
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    constant_i64(m, "sizes", {2}, {1, 1});
    m.node("SplitToSequence", {"x", "sizes"}, {"rows"}, "split");
    constant_i64(m, "zero", {}, {0});
    m.node("SequenceAt", {"rows", "zero"}, {"y"}, "pick");
    m.output("y");
    expect_import_errors(m, {"node 'split' (SplitToSequence)", "[1,1] does not add up", "(3)"});
  }
  {  // mixed element types
    ModelBuilder m(18);
    m.input("a", onnx::TensorProto::FLOAT, {"2"});
    m.input("b", onnx::TensorProto::INT64, {"2"});
    m.node("SequenceConstruct", {"a", "b"}, {"ab"}, "construct");
    add_int_attr(m.node("ConcatFromSequence", {"ab"}, {"y"}, "concat"), "axis", 0);
    m.output("y");
    expect_import_errors(
        m, {"node 'construct' (SequenceConstruct)", "input 1 ('b') is i64", "one element type"});
  }
  {  // nothing to concatenate
    ModelBuilder m(18);
    m.node("SequenceEmpty", {}, {"none"}, "empty");
    add_int_attr(m.node("ConcatFromSequence", {"none"}, {"y"}, "concat"), "axis", 0);
    m.output("y");
    expect_import_errors(m, {"node 'concat' (ConcatFromSequence)", "empty sequence"});
  }
}

}  // namespace
}  // namespace ampc
