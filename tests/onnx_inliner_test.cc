// Model-local functions inlined at import (compiler/onnx_inliner.cc): attributes and their
// defaults, nested calls, outputs passed through, opsets; and functions meeting subgraphs: an If
// or a Loop in a function's body reading the function's names, calls in a Loop's body, attribute
// references in a branch, a subgraph's names shadowing the function's. Results are checked by
// running the imported graph on the CPU against values worked out by hand (small integers
// through MatMul, Add, Mul, Neg and LeakyRelu: exact in f32, so compared bit for bit; onnxruntime
// 1.32 gives the same figures for the subgraph tests' models written with onnx.helper).
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

using testing::add_input;
using testing::add_int_attr;
using testing::add_outputs;
using testing::count_ops;
using testing::expect_import_errors;
using testing::floats;
using testing::graph_attr;
using testing::import_ok;
using testing::ModelBuilder;
using testing::run_graph;

// Appends `attr` to the function as a default (FunctionProto.attribute_proto, field 11, which
// ONNX's headers of the build may not know: written as the raw field).
void add_attribute_default(onnx::FunctionProto& function, const onnx::AttributeProto& attr) {
  std::string bytes = function.SerializeAsString();
  const std::string field = attr.SerializeAsString();
  bytes.push_back(static_cast<char>(11 << 3 | 2));
  for (uint64_t n = field.size();; n >>= 7) {
    if (n < 0x80) {
      bytes.push_back(static_cast<char>(n));
      break;
    }
    bytes.push_back(static_cast<char>((n & 0x7F) | 0x80));
  }
  bytes += field;
  ASSERT_TRUE(function.ParseFromString(bytes));
}

onnx::FunctionProto& add_function(ModelBuilder& m, const std::string& name,
                                  const std::vector<std::string>& inputs,
                                  const std::vector<std::string>& outputs, int64_t opset = 18) {
  onnx::FunctionProto* f = m.model().add_functions();
  f->set_domain("local");
  f->set_name(name);
  for (const std::string& input : inputs) f->add_input(input);
  for (const std::string& output : outputs) f->add_output(output);
  onnx::OperatorSetIdProto* id = f->add_opset_import();
  id->set_domain("");
  id->set_version(opset);
  return *f;
}

// A node of a function's body or of a subgraph, named OP_N (N: its position, from 1).
template <typename Body>
onnx::NodeProto& add_node(Body& body, const std::string& op_type,
                          const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& domain = "") {
  onnx::NodeProto* node = body.add_node();
  node->set_op_type(op_type);
  node->set_domain(domain);
  node->set_name(str_cat(op_type, "_", body.node_size()));
  for (const std::string& input : inputs) node->add_input(input);
  for (const std::string& output : outputs) node->add_output(output);
  return *node;
}

onnx::AttributeProto float_attr(const std::string& name, float value) {
  onnx::AttributeProto attr;
  attr.set_name(name);
  attr.set_type(onnx::AttributeProto::FLOAT);
  attr.set_f(value);
  return attr;
}

// local.Scale(X) = X * alpha, alpha an attribute with default 2.
void add_scale_function(ModelBuilder& m) {
  onnx::FunctionProto& f = add_function(m, "Scale", {"X"}, {"Y"});
  onnx::NodeProto& constant = add_node(f, "Constant", {}, {"alpha_value"});
  onnx::AttributeProto* ref = constant.add_attribute();
  ref->set_name("value_float");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  add_node(f, "Mul", {"X", "alpha_value"}, {"Y"});
  add_attribute_default(f, float_attr("alpha", 2.0f));
}

ModelBuilder model_with_functions() {
  ModelBuilder m(18);
  onnx::OperatorSetIdProto* local = m.model().add_opset_import();
  local->set_domain("local");
  local->set_version(1);
  m.model().set_ir_version(11);
  add_scale_function(m);
  return m;
}

TEST(ModelLocalFunctions, CallsAreInlinedWithAttributesAndDefaults) {
  ModelBuilder m = model_with_functions();
  m.input("x", onnx::TensorProto::FLOAT, {"3"});
  onnx::NodeProto& by3 = m.node("Scale", {"x"}, {"y"}, "times3");
  by3.set_domain("local");
  *by3.add_attribute() = float_attr("alpha", 3.0f);
  m.node("Scale", {"x"}, {"z"}, "times2").set_domain("local");
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(count_ops(*graph, "Mul"), 2);
  bool named_under_call = false;
  for (const auto& node : graph->nodes()) named_under_call |= node->name() == "times3/Mul_2";
  EXPECT_TRUE(named_under_call) << "inlined nodes are named under their call";
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({3}, {1, -2, 0.5})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{3, -6, 1.5}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{2, -4, 1}));
}

TEST(ModelLocalFunctions, NestedCallsAndPassThroughOutputs) {
  ModelBuilder m = model_with_functions();
  // local.Twice(A) -> (B, A): B = Scale(Scale(A)), and A itself passed through.
  onnx::FunctionProto& twice = add_function(m, "Twice", {"A"}, {"B", "Same"});
  add_node(twice, "Scale", {"A"}, {"t"}, "local");
  add_node(twice, "Scale", {"t"}, {"B"}, "local");
  twice.set_output(1, "A");
  onnx::OperatorSetIdProto* id = twice.add_opset_import();
  id->set_domain("local");
  id->set_version(1);
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.node("Twice", {"x"}, {"y", "x_again"}, "twice").set_domain("local");
  m.output("y");
  m.output("x_again");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({2}, {1, 3})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{4, 12}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{1, 3}));
}

TEST(ModelLocalFunctions, ErrorsNameTheCallAndTheFunction) {
  {  // recursion
    ModelBuilder m = model_with_functions();
    onnx::FunctionProto& loop = add_function(m, "Loop", {"A"}, {"B"});
    add_node(loop, "Loop", {"A"}, {"B"}, "local");
    m.input("x", onnx::TensorProto::FLOAT, {"2"});
    m.node("Loop", {"x"}, {"y"}, "call").set_domain("local");
    m.output("y");
    expect_import_errors(
        m, {"node 'call/Loop_1' (local.Loop)", "function 'local.Loop'", "calls itself"});
  }
  {  // an attribute the function does not declare
    ModelBuilder m = model_with_functions();
    m.input("x", onnx::TensorProto::FLOAT, {"2"});
    onnx::NodeProto& call = m.node("Scale", {"x"}, {"y"}, "call");
    call.set_domain("local");
    *call.add_attribute() = float_attr("beta", 1.0f);
    m.output("y");
    expect_import_errors(
        m, {"node 'call' (local.Scale)", "'beta' is not an attribute of it", "alpha"});
  }
  {  // a body that reads a name it does not have
    ModelBuilder m = model_with_functions();
    onnx::FunctionProto& f = add_function(m, "Leaky", {"A"}, {"B"});
    add_node(f, "Add", {"A", "outer"}, {"B"});
    m.input("x", onnx::TensorProto::FLOAT, {"2"});
    m.input("outer", onnx::TensorProto::FLOAT, {"2"});
    m.node("Leaky", {"x"}, {"y"}, "call").set_domain("local");
    m.output("y");
    expect_import_errors(m, {"function 'local.Leaky'", "reads 'outer'",
                             "neither an input of the function nor defined before it"});
  }
  {  // an op whose meaning differs between the function's opset and the model's
    ModelBuilder m = model_with_functions();
    onnx::FunctionProto& f = add_function(m, "Pool", {"A"}, {"B"}, /*opset=*/11);
    onnx::NodeProto& pool = add_node(f, "BatchNormalization", {"A", "A", "A", "A", "A"}, {"B"});
    (void)pool;
    m.input("x", onnx::TensorProto::FLOAT, {"2"});
    m.node("Pool", {"x"}, {"y"}, "call").set_domain("local");
    m.output("y");
    expect_import_errors(m, {"function 'local.Pool'", "opset 11", "opset 18",
                             "BatchNormalization differs between them"});
  }
}

TEST(ModelLocalFunctions, OpsThatMeanTheSameAtBothOpsetsAreInlined) {
  ModelBuilder m = model_with_functions();
  onnx::FunctionProto& f = add_function(m, "Act", {"A"}, {"B"}, /*opset=*/14);
  add_node(f, "Relu", {"A"}, {"B"});
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.node("Act", {"x"}, {"y"}, "call").set_domain("local");
  m.output("y");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({2}, {-1, 2})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{0, 2}));
}

// ---- Functions and subgraphs ---------------------------------------------------------------

// A Constant node making `name` the i64 scalar `value`.
template <typename Body>
void add_i64_constant(Body& body, const std::string& name, int64_t value) {
  onnx::AttributeProto* attr = add_node(body, "Constant", {}, {name}).add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  attr->mutable_t()->add_int64_data(value);
}

// A Constant node making `name` the f32 scalar the attribute `attr` of the function holds.
template <typename Body>
void add_attribute_constant(Body& body, const std::string& name, const std::string& attr,
                            onnx::AttributeProto::AttributeType read_as) {
  onnx::AttributeProto* ref = add_node(body, "Constant", {}, {name}).add_attribute();
  ref->set_name("value_float");
  ref->set_type(read_as);
  ref->set_ref_attr_name(attr);
}

// c = ReduceSum(X) > 0, as onnxscript writes `if op.ReduceSum(X) > 0.0` in a function.
void add_positive_sum(onnx::FunctionProto& f, const std::string& x, const std::string& c) {
  add_int_attr(add_node(f, "ReduceSum", {x}, {"sum"}), "keepdims", 0);
  onnx::AttributeProto* zero = add_node(f, "Constant", {}, {"zero"}).add_attribute();
  *zero = float_attr("value_float", 0.0f);
  add_node(f, "Greater", {"sum", "zero"}, {c});
}

// local.MaybeProject(X, W) = X @ W if sum(X) > 0 else -(X + X), as onnxscript writes a @script
// function with a data-dependent `if`: the then_branch reads the function's inputs, the
// else_branch a value the body defined before the If. Called twice, so two copies of the
// branches' names meet in one graph.
TEST(FunctionsAndSubgraphs, AnIfInAFunctionReadsTheFunctionsInputsAndValues) {
  ModelBuilder m = model_with_functions();
  onnx::FunctionProto& f = add_function(m, "MaybeProject", {"X", "W"}, {"Y"});
  add_positive_sum(f, "X", "positive");
  add_node(f, "Add", {"X", "X"}, {"doubled"});
  onnx::NodeProto& branch = add_node(f, "If", {"positive"}, {"Y"});
  onnx::GraphProto& then_branch = graph_attr(branch, "then_branch");
  add_node(then_branch, "MatMul", {"X", "W"}, {"projected"});
  add_outputs(then_branch, {"projected"});
  onnx::GraphProto& else_branch = graph_attr(branch, "else_branch");
  add_node(else_branch, "Neg", {"doubled"}, {"negated"});
  add_outputs(else_branch, {"negated"});

  m.input("x", onnx::TensorProto::FLOAT, {"2", "2"});
  m.initializer_f32("w", {2, 2}, {1, 0, 1, -1});  // its own inverse
  m.node("MaybeProject", {"x", "w"}, {"y"}, "first").set_domain("local");
  m.node("MaybeProject", {"y", "w"}, {"z"}, "second").set_domain("local");
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  // sum 10 > 0: y = x @ w; sum 4 > 0: z = y @ w = x.
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({2, 2}, {1, 2, 3, 4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{3, -2, 7, -4}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{1, 2, 3, 4}));
  // sum -10: y = -(x + x); sum 20 > 0: z = y @ w.
  out = run_graph(*graph, {Tensor::from_f32({2, 2}, {-1, -2, -3, -4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{6, -4, 14, -8}));
}

// A Loop's body carrying h: h_out = local.Step(h_in, w, b).
void add_loop_calling_step(onnx::GraphProto& body) {
  add_input(body, "i", onnx::TensorProto::INT64);
  add_input(body, "cond", onnx::TensorProto::BOOL);
  add_input(body, "h_in", onnx::TensorProto::FLOAT);
  add_node(body, "Identity", {"cond"}, {"cond_out"});
  add_node(body, "Step", {"h_in", "w", "b"}, {"h_out"}, "local");
  add_outputs(body, {"cond_out", "h_out"});
}

// local.Step(H, W, B) = H @ W + B called in Loop bodies: one in the model's graph, one in a
// function's body (local.Iterate, whose Loop passes its own inputs on to the call).
TEST(FunctionsAndSubgraphs, CallsInLoopBodiesAreInlined) {
  ModelBuilder m = model_with_functions();
  onnx::FunctionProto& step = add_function(m, "Step", {"H", "W", "B"}, {"O"});
  add_node(step, "MatMul", {"H", "W"}, {"product"});
  add_node(step, "Add", {"product", "B"}, {"O"});
  onnx::FunctionProto& iterate = add_function(m, "Iterate", {"X", "w", "b"}, {"Y"});
  add_i64_constant(iterate, "trips", 2);
  add_loop_calling_step(graph_attr(add_node(iterate, "Loop", {"trips", "", "X"}, {"Y"}), "body"));
  onnx::OperatorSetIdProto* id = iterate.add_opset_import();
  id->set_domain("local");
  id->set_version(1);

  m.input("x", onnx::TensorProto::FLOAT, {"1", "2"});
  m.initializer_f32("w", {2, 2}, {2, 0, 0, 1});
  m.initializer_f32("b", {2}, {1, -1});
  add_i64_constant(m.graph(), "trips", 3);
  add_loop_calling_step(graph_attr(m.node("Loop", {"trips", "", "x"}, {"h"}, "loop"), "body"));
  m.node("Iterate", {"x", "w", "b"}, {"g"}, "iterate").set_domain("local");
  m.output("h");
  m.output("g");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  // [1, 2] -> [3, 1] -> [7, 0] -> [15, -1].
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({1, 2}, {1, 2})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{15, -1}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{7, 0}));
}

// local.Scaled(X) = X * alpha if sum(X) > 0 else LeakyRelu(X, alpha), alpha an attribute
// (default 2) both branches refer to: a Constant's value in one, LeakyRelu's in the other.
TEST(FunctionsAndSubgraphs, AttributeReferencesInBranchesResolveAgainstTheCall) {
  ModelBuilder m = model_with_functions();
  onnx::FunctionProto& f = add_function(m, "Scaled", {"X"}, {"Y"});
  add_attribute_default(f, float_attr("alpha", 2.0f));
  add_positive_sum(f, "X", "positive");
  onnx::NodeProto& branch = add_node(f, "If", {"positive"}, {"Y"});
  onnx::GraphProto& then_branch = graph_attr(branch, "then_branch");
  add_attribute_constant(then_branch, "alpha_value", "alpha", onnx::AttributeProto::FLOAT);
  add_node(then_branch, "Mul", {"X", "alpha_value"}, {"scaled"});
  add_outputs(then_branch, {"scaled"});
  onnx::GraphProto& else_branch = graph_attr(branch, "else_branch");
  onnx::AttributeProto* leak = add_node(else_branch, "LeakyRelu", {"X"}, {"leaky"}).add_attribute();
  leak->set_name("alpha");
  leak->set_type(onnx::AttributeProto::FLOAT);
  leak->set_ref_attr_name("alpha");
  add_outputs(else_branch, {"leaky"});

  m.input("x", onnx::TensorProto::FLOAT, {"3"});
  onnx::NodeProto& by3 = m.node("Scaled", {"x"}, {"y"}, "by3");
  by3.set_domain("local");
  *by3.add_attribute() = float_attr("alpha", 3.0f);
  m.node("Scaled", {"x"}, {"z"}, "by_default").set_domain("local");
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({3}, {1, -2, 4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{3, -6, 12}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{2, -4, 8}));
  out = run_graph(*graph, {Tensor::from_f32({3}, {-1, 2, -4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{-3, 2, -12}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{-2, 2, -8}));
}

// local.Power3(X, W) = X @ W @ W @ W, a Loop whose body's carried input is named X, as the
// function's input is: in the body X is the carried value (ONNX's scoping), not the function's
// input, while W is still the function's. The body's product is named y, as the model's result
// is: the inlined body's names are fresh, so neither reads the other.
TEST(FunctionsAndSubgraphs, ASubgraphsOwnNamesShadowTheFunctions) {
  ModelBuilder m = model_with_functions();
  onnx::FunctionProto& f = add_function(m, "Power3", {"X", "W"}, {"Y"});
  add_i64_constant(f, "trips", 3);
  onnx::GraphProto& body = graph_attr(add_node(f, "Loop", {"trips", "", "X"}, {"Y"}), "body");
  add_input(body, "i", onnx::TensorProto::INT64);
  add_input(body, "cond", onnx::TensorProto::BOOL);
  add_input(body, "X", onnx::TensorProto::FLOAT);
  add_node(body, "Identity", {"cond"}, {"cond_out"});
  add_node(body, "MatMul", {"X", "W"}, {"y"});
  add_outputs(body, {"cond_out", "y"});

  m.input("x", onnx::TensorProto::FLOAT, {"1", "2"});
  m.initializer_f32("w", {2, 2}, {2, 0, 0, 1});
  m.node("Power3", {"x", "w"}, {"y"}, "once").set_domain("local");
  m.node("Power3", {"y", "w"}, {"z"}, "twice").set_domain("local");
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = import_ok(m);
  ASSERT_NE(graph, nullptr);
  // Reading the function's X in the body would give [2, 2] and [4, 2].
  std::vector<Tensor> out = run_graph(*graph, {Tensor::from_f32({1, 2}, {1, 2})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(floats(out[0]), (std::vector<float>{8, 2}));
  EXPECT_EQ(floats(out[1]), (std::vector<float>{64, 2}));
}

// A function sees only its own names, in its subgraphs too; the errors name the call, the
// function, the node (by its path in the body) and the name.
TEST(FunctionsAndSubgraphs, ErrorsNameTheNodeInTheSubgraph) {
  // local.F(A, C) = If(C, then: A + what the case says, else: A). Before subgraphs were walked,
  // the branch read the model's `outer` unnoticed.
  enum class Case { kReadsOuter, kReturnsOuter, kReadsAFloatGivenAnInt };
  auto model = [](Case c) {
    ModelBuilder m = model_with_functions();
    onnx::FunctionProto& f = add_function(m, "F", {"A", "C"}, {"B"});
    add_attribute_default(f, float_attr("alpha", 2.0f));
    onnx::NodeProto& branch = add_node(f, "If", {"C"}, {"B"});
    onnx::GraphProto& then_branch = graph_attr(branch, "then_branch");
    std::string addend = "A";
    if (c == Case::kReadsOuter) addend = "outer";
    if (c == Case::kReadsAFloatGivenAnInt) {
      addend = "alpha_value";
      add_attribute_constant(then_branch, addend, "alpha", onnx::AttributeProto::FLOAT);
    }
    add_node(then_branch, "Add", {"A", addend}, {"sum"});
    add_outputs(then_branch, {c == Case::kReturnsOuter ? "outer" : "sum"});
    onnx::GraphProto& else_branch = graph_attr(branch, "else_branch");
    add_node(else_branch, "Identity", {"A"}, {"same"});
    add_outputs(else_branch, {"same"});
    m.input("x", onnx::TensorProto::FLOAT, {"2"});
    m.input("outer", onnx::TensorProto::FLOAT, {"2"});
    m.input("flag", onnx::TensorProto::BOOL, {});
    onnx::NodeProto& call = m.node("F", {"x", "flag"}, {"y"}, "call");
    call.set_domain("local");
    if (c == Case::kReadsAFloatGivenAnInt) add_int_attr(call, "alpha", 2);
    m.output("y");
    return m;
  };
  expect_import_errors(model(Case::kReadsOuter),
                       {"node 'call' (local.F), a call of function 'local.F'",
                        "its node 'If_1/then_branch/Add_1' reads 'outer', which is neither an "
                        "input of the function nor defined before it"});
  expect_import_errors(model(Case::kReturnsOuter),
                       {"node 'call' (local.F), a call of function 'local.F'",
                        "'If_1/then_branch' returns 'outer', which is neither an input of the "
                        "function nor defined before it"});
  expect_import_errors(model(Case::kReadsAFloatGivenAnInt),
                       {"node 'call' (local.F), a call of function 'local.F'",
                        "attribute 'alpha' is INT but its node 'If_1/then_branch/Constant_1' "
                        "reads it as FLOAT"});
}

}  // namespace
}  // namespace ampc
