// The ops the importer expands into the ops ONNX defines them with (Attention, RMSNormalization,
// GroupNormalization, InstanceNormalization, the reductions without kernels of their own
// (ReduceLogSumExp, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceMin, ReduceProd),
// LpNormalization, RotaryEmbedding, OneHot, DepthToSpace, SpaceToDepth, Sign, the recurrent ops,
// TopK; those are checked against ONNX's test data by the conformance suites): outputs of these
// and of the lowered spatial ops (ConvTranspose, Col2Im, Resize, GridSample, whose gradients and
// errors are in tests/spatial_ops_test.cc) against references recorded from onnx's reference
// evaluator and checked against PyTorch (tests/data/function_ops/make_refs.py), and gradients
// against central differences in f64. The expansions are sums of at most a few dozen products,
// so f32 outputs are compared within 1e-5 (relative, plus 1e-6 absolute) and f16 ones within one
// f16 ulp.
#include <cmath>
#include <filesystem>
#include <random>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& entry :
       fs::directory_iterator(testing::source_path("tests/data/function_ops"))) {
    if (entry.path().extension() == ".onnx") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class FunctionOpReference : public ::testing::TestWithParam<std::string> {};

TEST_P(FunctionOpReference, MatchesTheRecordedOutputs) {
  const std::string base = testing::source_path("tests/data/function_ops/" + GetParam());
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(base + ".onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::map<std::string, Tensor>> arrays = runtime::read_npz(base + ".npz");
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  std::vector<Tensor> inputs;
  for (const Value* input : (*graph)->inputs()) inputs.push_back(arrays->at(input->name()));
  absl::StatusOr<std::vector<Tensor>> outputs = runtime::interpret_graph(**graph, inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string name = (*graph)->outputs()[i]->name();
    const Tensor& want = arrays->at("output." + name);
    const Tensor& got = (*outputs)[i];
    ASSERT_EQ(got.type(), want.type()) << name;
    const bool f16 = want.dtype() == DType::kF16;
    for (int64_t j = 0; j < want.num_elements(); ++j) {
      const double w = want.element_as_double(j);
      const double tolerance = f16 ? std::ldexp(std::abs(w), -10) : 1e-5 * std::abs(w) + 1e-6;
      ASSERT_NEAR(got.element_as_double(j), w, tolerance) << name << " element " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FunctionOpReference, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

// loss = sum(Attention(Q, K, V) * W) in f64, for the gradient checks.
testing::ModelBuilder attention_loss_model(const std::vector<std::string>& q,
                                           const std::vector<std::string>& kv,
                                           const std::vector<std::string>& y) {
  testing::ModelBuilder m(23);
  m.input("Q", onnx::TensorProto::DOUBLE, q);
  m.input("K", onnx::TensorProto::DOUBLE, kv);
  m.input("V", onnx::TensorProto::DOUBLE, kv);
  m.input("W", onnx::TensorProto::DOUBLE, y);
  return m;
}

void expect_gradients_match(const testing::ModelBuilder& m, const std::string& wrt) {
  testing::expect_onnx_gradients_match(m, wrt, 3);
}

TEST(FunctionOpGradients, CausalGroupedQueryAttentionOn3dInputs) {
  testing::ModelBuilder m = attention_loss_model({"2", "4", "8"}, {"2", "4", "4"}, {"2", "4", "8"});
  onnx::NodeProto& attention = m.node("Attention", {"Q", "K", "V"}, {"Y"}, "attention");
  testing::add_int_attr(attention, "is_causal", 1);
  testing::add_int_attr(attention, "q_num_heads", 4);
  testing::add_int_attr(attention, "kv_num_heads", 2);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(Q|K|V)$");
}

TEST(FunctionOpGradients, BooleanMaskWithAnEmptyRowGivesItNoGradient) {
  testing::ModelBuilder m =
      attention_loss_model({"1", "2", "3", "2"}, {"1", "2", "3", "2"}, {"1", "2", "3", "2"});
  // Row 1 sees no key: its output is zero and nothing flows back through it.
  onnx::TensorProto& mask = m.initializer("mask", onnx::TensorProto::BOOL, {1, 1, 3, 3});
  for (int allowed : {1, 1, 0, 0, 0, 0, 1, 0, 1}) mask.add_int32_data(allowed);
  m.node("Attention", {"Q", "K", "V", "mask"}, {"Y"}, "attention");
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(Q|K|V)$");
}

TEST(FunctionOpGradients, RmsNormalization) {
  testing::ModelBuilder m(23);
  m.input("X", onnx::TensorProto::DOUBLE, {"3", "5"});
  m.input("scale", onnx::TensorProto::DOUBLE, {"5"});
  m.input("W", onnx::TensorProto::DOUBLE, {"3", "5"});
  // Stage one in f64 too (stash_type defaults to f32, which central differences cannot see
  // through).
  testing::add_int_attr(m.node("RMSNormalization", {"X", "scale"}, {"Y"}, "norm"), "stash_type",
                        onnx::TensorProto::DOUBLE);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(X|scale)$");
}

TEST(FunctionOpGradients, GroupNormalization) {
  testing::ModelBuilder m(21);
  m.input("X", onnx::TensorProto::DOUBLE, {"2", "4", "3"});
  m.input("scale", onnx::TensorProto::DOUBLE, {"4"});
  m.input("bias", onnx::TensorProto::DOUBLE, {"4"});
  m.input("W", onnx::TensorProto::DOUBLE, {"2", "4", "3"});
  onnx::NodeProto& norm = m.node("GroupNormalization", {"X", "scale", "bias"}, {"Y"}, "norm");
  testing::add_int_attr(norm, "num_groups", 2);
  testing::add_int_attr(norm, "stash_type", onnx::TensorProto::DOUBLE);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(X|scale|bias)$");
}

TEST(FunctionOpGradients, ReduceLogSumExp) {
  testing::ModelBuilder m(18);
  m.input("X", onnx::TensorProto::DOUBLE, {"3", "4"});
  m.input("W", onnx::TensorProto::DOUBLE, {"3"});
  onnx::TensorProto& axes = m.initializer("axes", onnx::TensorProto::INT64, {1});
  axes.add_int64_data(-1);
  testing::add_int_attr(m.node("ReduceLogSumExp", {"X", "axes"}, {"Y"}, "lse"), "keepdims", 0);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^X$");
}

TEST(FunctionOpGradients, LpNormalization) {
  for (int64_t p : {1, 2}) {
    testing::ModelBuilder m(17);
    m.input("X", onnx::TensorProto::DOUBLE, {"3", "4"});
    m.input("W", onnx::TensorProto::DOUBLE, {"3", "4"});
    onnx::NodeProto& norm = m.node("LpNormalization", {"X"}, {"Y"}, "norm");
    testing::add_int_attr(norm, "p", p);
    testing::add_int_attr(norm, "axis", 0);
    m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
    testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
    m.output("loss");
    expect_gradients_match(m, "^X$");
  }
}

TEST(FunctionOpGradients, RotaryEmbeddingOfQueriesAndCaches) {
  for (int64_t interleaved : {0, 1}) {
    testing::ModelBuilder m(23);
    m.input("X", onnx::TensorProto::DOUBLE, {"1", "4", "12"});
    m.input("cos", onnx::TensorProto::DOUBLE, {"6", "3"});
    m.input("sin", onnx::TensorProto::DOUBLE, {"6", "3"});
    m.input("W", onnx::TensorProto::DOUBLE, {"1", "4", "12"});
    onnx::TensorProto& positions = m.initializer("positions", onnx::TensorProto::INT64, {1, 4});
    for (int64_t at : {5, 0, 2, 2}) positions.add_int64_data(at);
    onnx::NodeProto& rope =
        m.node("RotaryEmbedding", {"X", "cos", "sin", "positions"}, {"Y"}, "rope");
    testing::add_int_attr(rope, "num_heads", 2);
    testing::add_int_attr(rope, "interleaved", interleaved);
    m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
    testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
    m.output("loss");
    expect_gradients_match(m, "^(X|cos|sin)$");
  }
}

TEST(FunctionOps, OneHotNeedsItsDepthAtCompileTime) {
  testing::ModelBuilder m(11);
  m.input("indices", onnx::TensorProto::INT64, {"4"});
  m.input("depth", onnx::TensorProto::INT64, {"1"});
  m.initializer_f32("values", {2}, {0, 1});
  m.node("OneHot", {"indices", "depth", "values"}, {"Y"}, "hot");
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "hot.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'hot' (OneHot): depth 'depth' must be one value "
                                          "known at compile time"),
            std::string::npos)
      << graph.status();
}

TEST(FunctionOps, ErrorsNameTheNode) {
  testing::ModelBuilder m(20);
  m.input("X", onnx::TensorProto::FLOAT, {"3", "5"});
  m.input("scale", onnx::TensorProto::FLOAT, {"5"});
  m.node("RMSNormalization", {"X", "scale"}, {"Y"}, "norm");
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find(
                "node 'norm' (RMSNormalization): ampc implements RMSNormalization from opset 23"),
            std::string::npos)
      << graph.status();

  testing::ModelBuilder a(23);
  a.input("Q", onnx::TensorProto::FLOAT, {"1", "4", "6"});
  a.input("K", onnx::TensorProto::FLOAT, {"1", "4", "6"});
  a.input("V", onnx::TensorProto::FLOAT, {"1", "4", "6"});
  testing::add_int_attr(a.node("Attention", {"Q", "K", "V"}, {"Y"}, "attn"), "q_num_heads", 4);
  a.output("Y");
  graph = import_onnx_bytes(a.bytes(), "attn.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'attn' (Attention): 3-D Q, K and V need "
                                          "q_num_heads and kv_num_heads"),
            std::string::npos)
      << graph.status();
}

// `op` of X [2, 3, 4] over axes {1} (as an input: opset 18), weighted and summed.
testing::ModelBuilder reduction_loss_model(const std::string& op, bool through_exp = false) {
  testing::ModelBuilder m(18);
  m.input("X", onnx::TensorProto::DOUBLE, {"2", "3", "4"});
  m.input("W", onnx::TensorProto::DOUBLE, {"2", "4"});
  onnx::TensorProto& axes = m.initializer("axes", onnx::TensorProto::INT64, {1});
  axes.add_int64_data(1);
  if (through_exp) m.node("Exp", {"X"}, {"positive"}, "exp");  // ReduceLogSum needs sums > 0
  testing::add_int_attr(m.node(op, {through_exp ? "positive" : "X", "axes"}, {"Y"}, "reduce"),
                        "keepdims", 0);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m;
}

// ReduceL1, ReduceL2 (F.normalize's norm), ReduceSumSquare, ReduceLogSum and ReduceMin expand
// into ReduceSum or ReduceMax and element-wise ops (their values are checked against ONNX's test
// data by the conformance suites); their gradients against central differences.
TEST(FunctionOpGradients, ReductionsExpandedIntoReduceSumAndReduceMax) {
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceMin"}) {
    SCOPED_TRACE(op);
    expect_gradients_match(reduction_loss_model(op), "^X$");
  }
  expect_gradients_match(reduction_loss_model("ReduceLogSum", /*through_exp=*/true), "^X$");
}

// PyTorch's var() and std() divide by the element count, ReduceProd(Gather(Shape(x))): known at
// compile time, it becomes a constant.
TEST(FunctionOps, ReduceProdOfShapeArithmeticIsFolded) {
  testing::ModelBuilder m(17);
  m.input("X", onnx::TensorProto::FLOAT, {"2", "3", "5"});
  m.node("Shape", {"X"}, {"shape"}, "shape");
  onnx::TensorProto& dims = m.initializer("dims", onnx::TensorProto::INT64, {2});
  dims.add_int64_data(1);
  dims.add_int64_data(2);
  m.node("Gather", {"shape", "dims"}, {"reduced_dims"}, "gather");
  testing::add_int_attr(m.node("ReduceProd", {"reduced_dims"}, {"count"}, "count"), "keepdims", 0);
  testing::add_int_attr(m.node("Cast", {"count"}, {"count_f"}, "cast"), "to",
                        onnx::TensorProto::FLOAT);
  m.node("Mul", {"X", "count_f"}, {"Y"}, "scale");
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "var.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937 rng(5);
  const Tensor x = testing::random_tensor((*graph)->inputs()[0]->type(), rng, -1.0, 1.0);
  absl::StatusOr<std::vector<Tensor>> y = runtime::interpret_graph(**graph, {x});
  ASSERT_TRUE(y.ok()) << y.status();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    // 3 * 5, one IEEE multiply: the exact product rounded to f32 once.
    const auto want = static_cast<float>(x.element_as_double(i) * 15.0);
    EXPECT_EQ(y->at(0).element_as_double(i), static_cast<double>(want)) << i;
  }
}

// ReduceProd of data computed at run time is a tree of products: the f64 products of each row
// (exact to rounding in another order), and gradients, against central differences, that stay
// exact with zeros among the factors (one zero: the others' product; two: zero).
TEST(FunctionOpGradients, ReduceProdOfRunTimeDataWithZeros) {
  testing::ModelBuilder m(18);
  m.input("X", onnx::TensorProto::DOUBLE, {"3", "5"});
  m.input("W", onnx::TensorProto::DOUBLE, {"3"});
  onnx::TensorProto& axes = m.initializer("axes", onnx::TensorProto::INT64, {1});
  axes.add_int64_data(1);
  testing::add_int_attr(m.node("ReduceProd", {"X", "axes"}, {"Y"}, "product"), "keepdims", 0);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("Y");
  m.output("loss");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "prod.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::mt19937 rng(11);
  Tensor x = testing::random_tensor((*graph)->inputs()[0]->type(), rng, -1.5, 1.5);
  x.set_element(2, 0.0);  // row 0: one zero
  x.set_element(6, 0.0);  // row 1: two
  x.set_element(8, 0.0);
  const Tensor w = testing::random_tensor((*graph)->inputs()[1]->type(), rng, -1.5, 1.5);
  absl::StatusOr<std::vector<Tensor>> y = runtime::interpret_graph(**graph, {x, w});
  ASSERT_TRUE(y.ok()) << y.status();
  for (int64_t row = 0; row < 3; ++row) {
    double want = 1;
    for (int64_t k = 0; k < 5; ++k) want *= x.element_as_double(row * 5 + k);
    EXPECT_NEAR(y->at(0).element_as_double(row), want, 1e-15) << row;
  }
  absl::StatusOr<testing::GradientCheck> check = testing::check_gradients(**graph, {x, w}, "^X$");
  ASSERT_TRUE(check.ok()) << check.status().message();
  EXPECT_LT(check->max_relative_error, 1e-8) << check->worst_input;
}

// DepthToSpace (pixel_shuffle; DCR and CRD) and SpaceToDepth move data: their gradients move it
// back.
TEST(FunctionOpGradients, DepthToSpaceAndSpaceToDepth) {
  for (const char* mode : {"DCR", "CRD", ""}) {
    SCOPED_TRACE(mode);
    const bool to_space = std::string_view(mode) != "";
    testing::ModelBuilder m(13);
    m.input("X", onnx::TensorProto::DOUBLE, {"1", to_space ? "8" : "2", "2", to_space ? "3" : "6"});
    m.input("W", onnx::TensorProto::DOUBLE,
            {"1", to_space ? "2" : "8", to_space ? "4" : "1", to_space ? "6" : "3"});
    onnx::NodeProto& node =
        m.node(to_space ? "DepthToSpace" : "SpaceToDepth", {"X"}, {"Y"}, "move");
    testing::add_int_attr(node, "blocksize", 2);
    if (to_space) testing::add_string_attr(node, "mode", mode);
    m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
    testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
    m.output("loss");
    expect_gradients_match(m, "^X$");
  }
}

// `op` over X [batch 2, steps 3, input 4] (layout 1, as PyTorch's batch_first exports it) in both
// directions, with biases and initial states, its Y weighted and summed: backpropagation through
// the unrolled time steps, against central differences.
testing::ModelBuilder recurrent_loss_model(const std::string& op, int gates,
                                           const std::vector<std::pair<std::string, int>>& ints,
                                           bool peepholes = false) {
  constexpr int kHidden = 3;
  const std::string g = std::to_string(gates * kHidden);
  testing::ModelBuilder m(17);
  m.input("X", onnx::TensorProto::DOUBLE, {"2", "3", "4"});
  m.input("Wx", onnx::TensorProto::DOUBLE, {"2", g, "4"});
  m.input("Rh", onnx::TensorProto::DOUBLE, {"2", g, "3"});
  m.input("B", onnx::TensorProto::DOUBLE, {"2", std::to_string(2 * gates * kHidden)});
  m.input("H0", onnx::TensorProto::DOUBLE, {"2", "2", "3"});
  m.input("W", onnx::TensorProto::DOUBLE, {"2", "3", "2", "3"});
  std::vector<std::string> inputs = {"X", "Wx", "Rh", "B", "", "H0"};
  if (op == "LSTM") {
    m.input("C0", onnx::TensorProto::DOUBLE, {"2", "2", "3"});
    inputs.push_back("C0");
    if (peepholes) {
      m.input("P", onnx::TensorProto::DOUBLE, {"2", "9"});
      inputs.push_back("P");
    }
  }
  onnx::NodeProto& node = m.node(op, inputs, {"Y"}, "recurrent");
  testing::add_int_attr(node, "hidden_size", kHidden);
  testing::add_int_attr(node, "layout", 1);
  testing::add_string_attr(node, "direction", "bidirectional");
  for (const auto& [name, value] : ints) testing::add_int_attr(node, name, value);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m;
}

// LSTM, GRU and RNN unroll into MatMul, Slice, the activations and element-wise ops (their values
// are checked against ONNX's test data by the conformance suites).
TEST(FunctionOpGradients, RecurrentOpsUnrolledOverTheSequence) {
  const std::string every = "^(X|Wx|Rh|B|H0|C0|P)$";
  expect_gradients_match(recurrent_loss_model("LSTM", 4, {}), every);
  expect_gradients_match(recurrent_loss_model("LSTM", 4, {}, /*peepholes=*/true), every);
  expect_gradients_match(recurrent_loss_model("GRU", 3, {{"linear_before_reset", 1}}), every);
  expect_gradients_match(recurrent_loss_model("GRU", 3, {{"linear_before_reset", 0}}), every);
  expect_gradients_match(recurrent_loss_model("RNN", 1, {}), every);
}

// TopK is rounds of ArgMax (ArgMin) and a GatherElements: the values' gradient reaches the taken
// elements only (their values are checked against ONNX's test data by the conformance suites).
TEST(FunctionOpGradients, TopKValuesLargestAndSmallest) {
  for (const int largest : {1, 0}) {
    SCOPED_TRACE(largest);
    testing::ModelBuilder m(17);
    m.input("X", onnx::TensorProto::DOUBLE, {"3", "5"});
    m.input("W", onnx::TensorProto::DOUBLE, {"3", "2"});
    onnx::TensorProto& k = m.initializer("k", onnx::TensorProto::INT64, {1});
    k.add_int64_data(2);
    onnx::NodeProto& top = m.node("TopK", {"X", "k"}, {"values", "indices"}, "top");
    testing::add_int_attr(top, "largest", largest);
    m.node("Mul", {"values", "W"}, {"weighted"}, "weigh");
    testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
    m.output("loss");
    expect_gradients_match(m, "^X$");
  }
}

// F.cross_entropy against class probabilities, as PyTorch's exporters write it
// (SoftmaxCrossEntropyLoss with float labels): -sum_c p_c w_c log_softmax(x)_c, averaged over the
// rows, against that formula in double; and its gradient against central differences.
TEST(FunctionOps, CrossEntropyAgainstClassProbabilities) {
  auto model = [](onnx::TensorProto::DataType type) {
    testing::ModelBuilder m(17);
    m.input("X", type, {"2", "3"});
    m.input("P", type, {"2", "3"});
    m.input("Wc", type, {"3"});
    m.node("SoftmaxCrossEntropyLoss", {"X", "P", "Wc"}, {"loss"}, "xent");
    m.output("loss");
    return m;
  };
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_bytes(model(onnx::TensorProto::FLOAT).bytes(), "soft.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<float> x = {1.0f, -0.5f, 2.0f, 0.25f, 0.0f, -1.0f};
  const std::vector<float> p = {0.25f, 0.25f, 0.5f, 1.0f, 0.0f, 0.0f};
  const std::vector<float> w = {1.0f, 2.0f, 0.5f};
  absl::StatusOr<std::vector<Tensor>> loss = runtime::interpret_graph(
      **graph,
      {Tensor::from_f32({2, 3}, x), Tensor::from_f32({2, 3}, p), Tensor::from_f32({3}, w)});
  ASSERT_TRUE(loss.ok()) << loss.status();
  double want = 0;
  for (int row = 0; row < 2; ++row) {
    double total = 0;
    for (int c = 0; c < 3; ++c) total += std::exp(static_cast<double>(x[row * 3 + c]));
    for (int c = 0; c < 3; ++c) {
      const double log_prob = static_cast<double>(x[row * 3 + c]) - std::log(total);
      want -= static_cast<double>(p[row * 3 + c]) * static_cast<double>(w[c]) * log_prob / 2;
    }
  }
  EXPECT_NEAR(loss->at(0).element_as_double(0), want, 1e-5 * std::abs(want));
  expect_gradients_match(model(onnx::TensorProto::DOUBLE), "^(X|P)$");
}

// What the unrolling cannot do is refused naming the node: sequences of other lengths than the
// whole (PyTorch's packed sequences), and activations with parameters.
TEST(FunctionOps, RecurrentOpsRefuseWhatTheyCannotUnroll) {
  testing::ModelBuilder m(17);
  m.input("X", onnx::TensorProto::FLOAT, {"3", "2", "4"});
  m.input("Wx", onnx::TensorProto::FLOAT, {"1", "12", "4"});
  m.input("Rh", onnx::TensorProto::FLOAT, {"1", "12", "3"});
  m.input("lengths", onnx::TensorProto::INT32, {"2"});
  testing::add_int_attr(m.node("LSTM", {"X", "Wx", "Rh", "", "lengths"}, {"Y"}, "lstm"),
                        "hidden_size", 3);
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "lstm.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'lstm' (LSTM): sequence_lens 'lengths' must be "
                                          "known at compile time and equal the sequence length"),
            std::string::npos)
      << graph.status();
}

// What PyTorch's dynamo exporter writes for nn.LSTM(4, 10, proj_size=8): hidden_size 8, a cell
// state of 10 (ONNX's LSTM has no projection, so the file is not the module).
TEST(FunctionOps, ProjectedLstmIsRefusedNamingProjSize) {
  testing::ModelBuilder m(18);
  m.input("X", onnx::TensorProto::FLOAT, {"3", "2", "4"});
  m.input("Wx", onnx::TensorProto::FLOAT, {"1", "32", "4"});
  m.input("Rh", onnx::TensorProto::FLOAT, {"1", "32", "8"});
  m.input("h0", onnx::TensorProto::FLOAT, {"1", "2", "8"});
  m.input("c0", onnx::TensorProto::FLOAT, {"1", "2", "10"});
  testing::add_int_attr(m.node("LSTM", {"X", "Wx", "Rh", "", "", "h0", "c0"}, {"Y"}, "lstm"),
                        "hidden_size", 8);
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "lstm.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find(
                "node 'lstm' (LSTM): initial_c is [1,2,10] and initial_h [1,2,8]: a cell state "
                "wider than hidden_size 8 is what PyTorch's exporter writes for "
                "nn.LSTM(proj_size=8), which ONNX's LSTM cannot express"),
            std::string::npos)
      << graph.status();
}

}  // namespace
}  // namespace ampc
