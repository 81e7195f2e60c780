// What the dynamo exporter's optimizer (torch.onnx.export's default optimize=True) does to
// parameters, and what import undoes or reports: it keeps one initializer of several equal ones
// (every norm's weight starts as ones), so they would train as one parameter; each node's FX
// node names the parameter it read, and import gives each its own copy again. Reference: one SGD
// step worked out by hand (y = x * a * b: da = x * b, db = x * a). And it folds a training-mode
// batch norm into the convolution before it, which the compile reports.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/training_session.h"
#include "tests/onnx_model_builder.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::add_metadata;
using testing::from_aten;
using testing::kGraphMetadataField;
using testing::ModelBuilder;

constexpr const char* kSignature =
    "\n# inputs\np_a: PARAMETER target='a'\np_b: PARAMETER target='b'\nx: USER_INPUT\n\n"
    "# outputs\nsum: USER_OUTPUT\n";

// loss = sum(x * a * b) for parameters a and b, both [1, 1] when exported; the optimizer kept
// `a` alone, and the second Mul, whose FX node reads %p_b, reads it. With `b_in_file`, the file
// also holds b (a file the optimizer did not merge), which the second Mul still does not read.
std::unique_ptr<Graph> merged_model(bool b_in_file) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.initializer_f32("a", {2}, {1, 1});
  if (b_in_file) m.initializer_f32("b", {2}, {1, 1});
  from_aten(m.node("Mul", {"x", "a"}, {"xa"}, "mul_a"), "mul", "mul.Tensor", "%x, %p_a");
  from_aten(m.node("Mul", {"xa", "a"}, {"xab"}, "mul_b"), "mul_1", "mul.Tensor", "%mul, %p_b");
  add_int_attr(m.node("ReduceSum", {"xab"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  add_metadata(m.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
               kSignature);
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "merged.onnx");
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}

// Each state after one SGD step at lr 1 on x = {0.5, -2}.
std::map<std::string, std::vector<double>> one_step(std::unique_ptr<Graph> graph) {
  Diagnostics diagnostics;
  EXPECT_TRUE(compile_graph(*graph, testing::sgd_options(1.0f), diagnostics).ok());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  EXPECT_TRUE((*session)->step({{"x", Tensor::from_f32({2}, {0.5f, -2})}}, 1.0f).ok());
  std::map<std::string, std::vector<double>> states;
  for (const char* name : {"a", "b"}) {
    if (absl::StatusOr<Tensor> state = (*session)->state(name); state.ok()) {
      states[name] = state->to_double_vector();
    }
  }
  return states;
}

TEST(TorchMergedParameters, EachParameterTheOptimizerMergedTrainsOnItsOwn) {
  std::unique_ptr<Graph> graph = merged_model(/*b_in_file=*/false);
  ASSERT_NE(graph, nullptr);
  std::vector<std::string> names;
  for (const Value* init : graph->initializers()) {
    names.push_back(init->name());
    EXPECT_EQ(init->declared(), Value::Declared::kParameter) << init->name();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
  // da = x * b, db = x * a, each 1 - x after the step; merged, a would move by 2x.
  auto states = one_step(std::move(graph));
  EXPECT_EQ(states["a"], (std::vector<double>{0.5, 3}));
  EXPECT_EQ(states["b"], (std::vector<double>{0.5, 3}));
}

TEST(TorchMergedParameters, AParameterTheFileHoldsIsNotCopied) {
  // The file holds b, so the second Mul reads a on purpose, whatever its FX node says: nothing
  // is rewritten, and a gets both gradients (da = 2 x a).
  std::unique_ptr<Graph> graph = merged_model(/*b_in_file=*/true);
  ASSERT_NE(graph, nullptr);
  auto states = one_step(std::move(graph));
  EXPECT_EQ(states["a"], (std::vector<double>{0, 5}));
  EXPECT_FALSE(states.contains("b"));
}

// F.layer_norm(x, [2]) (no weight, no bias) then loss = sum(ln * w) for a parameter w of ones
// (another norm's weight, as it starts): the exporter gives the first norm a constant scale of
// ones, and its optimizer merged that into w. The norm's call reads no parameter, so it reads a
// constant copy, and w trains through the Mul alone: dw = ln(x), where the merge would give
// d(sum(ln * w * w))/dw = 2 ln(x) w. Reference: the normalization worked out in f64.
TEST(TorchMergedParameters, ANormWithoutParametersReadsAConstantCopyOfWhatItWasMergedInto) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.initializer_f32("w", {2}, {1, 1});
  from_aten(m.node("LayerNormalization", {"x", "w"}, {"ln"}, "norm"), "layer_norm",
            "layer_norm.default", "%x, [2], None, None");
  from_aten(m.node("Mul", {"ln", "w"}, {"scaled"}, "scale"), "mul", "mul.Tensor",
            "%layer_norm, %p_w");
  add_int_attr(m.node("ReduceSum", {"scaled"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  add_metadata(m.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
               "\n# inputs\np_w: PARAMETER target='w'\nx: USER_INPUT\n\n# outputs\nsum: "
               "USER_OUTPUT\n");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "norm.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(**graph, testing::sgd_options(1.0f), diagnostics).ok());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(*std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->step({{"x", Tensor::from_f32({2}, {0.5f, -2})}}, 1.0f).ok());
  absl::StatusOr<Tensor> w = (*session)->state("w");
  ASSERT_TRUE(w.ok()) << w.status();
  // x - mean = +-1.25, the variance 1.5625; LayerNormalization's epsilon defaults to 1e-5.
  const double n = 1.25 / std::sqrt(1.5625 + 1e-5);
  EXPECT_NEAR(w->element_as_double(0), 1 - n, 1e-6);
  EXPECT_NEAR(w->element_as_double(1), 1 + n, 1e-6);
}

// With its optimizer on, the dynamo exporter folds a training-mode batch norm into the
// convolution before it, running statistics and all: the Conv carries the batch norm's FX node
// and no BatchNormalization is left, so the file normalizes nothing by the batch. The compile
// says so, naming the node; a Conv with its own FX node is not named.
TEST(TorchFoldedBatchNorm, AConvCarryingATrainingBatchNormIsNamedInAWarning) {
  for (const bool folded : {true, false}) {
    SCOPED_TRACE(folded ? "folded" : "a plain convolution");
    ModelBuilder m(18);
    m.input("x", onnx::TensorProto::FLOAT, {"1", "1", "3", "3"});
    m.initializer_f32("a", {1, 1, 1, 1}, {2});
    onnx::NodeProto& conv = m.node("Conv", {"x", "a"}, {"y"}, "node_Conv_7");
    if (folded) {
      from_aten(conv, "_native_batch_norm_legit_functional",
                "_native_batch_norm_legit_functional.default",
                "%conv2d, %p_a, %p_b, %b_mean, %b_var, True, 0.1, 1e-05");
    } else {
      from_aten(conv, "conv2d", "conv2d.default", "%x, %p_a");
    }
    add_int_attr(m.node("ReduceSum", {"y"}, {"loss"}, "sum"), "keepdims", 0);
    m.output("loss");
    add_metadata(m.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
                 kSignature);
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "bn.onnx");
    ASSERT_TRUE(graph.ok()) << graph.status();
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(**graph, testing::sgd_options(0.1f), diagnostics).ok());
    bool named = false;
    for (const std::string& warning : diagnostics.warnings()) {
      named = named || (warning.find("node_Conv_7") != std::string::npos &&
                        warning.find("batch norm") != std::string::npos);
    }
    EXPECT_EQ(named, folded);
  }
}

// With its optimizer on, the dynamo exporter drops a bias that starts at zero from its Gemm and
// writes GroupNorm's weight (ones) as a constant: the signature declares them and the nodes' FX
// nodes read them, but the file holds neither, so they would not train. The compile names them.
// A parameter the file holds in another form (a transposed weight, as floats not all equal:
// it trains as the parameter would) and one no node reads (an unused module's) are not named.
TEST(TorchMissingParameters, AParameterTheOptimizerDroppedOrMadeUniformIsNamedInAWarning) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.initializer_f32("a.weight", {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  m.initializer_f32("val_3", {3, 3}, {1, 4, 7, 2, 5, 8, 3, 6, 9});  // c.weight transposed
  m.initializer_f32("val_5", {3}, {1, 1, 1});                       // g.weight, ones
  from_aten(m.node("Gemm", {"x", "a.weight"}, {"h"}, "node_Gemm_1"), "linear", "linear.default",
            "%x, %p_a_weight, %p_a_bias");
  from_aten(m.node("MatMul", {"h", "val_3"}, {"k"}, "node_MatMul_2"), "linear_1", "linear.default",
            "%linear, %p_c_weight");
  from_aten(m.node("Mul", {"k", "val_5"}, {"n"}, "node_Mul_3"), "group_norm", "group_norm.default",
            "%linear_1, 1, %p_g_weight, %p_g_bias, 1e-05");
  add_int_attr(m.node("ReduceSum", {"n"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  add_metadata(m.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
               "\n# inputs\np_a_weight: PARAMETER target='a.weight'\n"
               "p_a_bias: PARAMETER target='a.bias'\np_c_weight: PARAMETER target='c.weight'\n"
               "p_g_weight: PARAMETER target='g.weight'\np_g_bias: PARAMETER target='g.bias'\n"
               "p_unused_weight: PARAMETER target='unused.weight'\nx: USER_INPUT\n\n"
               "# outputs\nsum: USER_OUTPUT\n");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "optimized.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(**graph, testing::sgd_options(0.1f), diagnostics).ok());
  std::vector<std::string> named;
  for (const std::string& warning : diagnostics.warnings()) {
    if (warning.find("file holds no initializer of them") != std::string::npos) {
      named.push_back(warning);
    }
  }
  ASSERT_EQ(named.size(), 1u) << str_join(diagnostics.warnings(), "\n");
  EXPECT_NE(named[0].find("parameters a.bias, g.bias, g.weight are declared"), std::string::npos)
      << named[0];
}

}  // namespace
}  // namespace ampc
