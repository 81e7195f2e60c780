// Opsets 24 to 28: what changed in them for the ops ampc has (Cast's round_mode, Range's
// stash_type, SpaceToDepth's mode, Attention's sliding windows, external-cache lengths and short
// masks) and the ops they add that ampc lowers at import (Swish, SwiGLU, CumProd). Values are
// checked against ONNX's reference evaluator and PyTorch by FunctionOpReference
// (tests/data/function_ops, the `*_opset2x` and `cum_prod_*` cases); here, gradients against
// central differences in f64, a mixed-precision training compile of an opset-28 model, and the
// errors.
#include <random>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_opset_conversion.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "passes/passes.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"

namespace ampc {
namespace {

using onnx::TensorProto;

using testing::add_weighted_loss;
using testing::expect_import_error;
using testing::expect_onnx_gradients_match;

TEST(NewerOpsets, Opset28IsTheNewestAmpcImports) {
  EXPECT_EQ(onnx_io::kNewestOnnxOpset, 28);
  testing::ModelBuilder m(29);
  m.input("x", TensorProto::FLOAT, {"2"});
  m.node("Relu", {"x"}, {"y"}, "relu");
  m.output("y");
  expect_import_error(m,
                      "opset_import gives ai.onnx version 29; ampc implements ai.onnx up to "
                      "opset 28");
}

// Swish with alpha (the argument scaled, the factor x not), and SwiGLU with respect to the
// gate and the value.
TEST(NewerOpsetGradients, SwishAndSwiGlu) {
  testing::ModelBuilder swish(24);
  swish.input("X", TensorProto::DOUBLE, {"3", "5"});
  testing::add_float_attr(swish.node("Swish", {"X"}, {"Y"}, "swish"), "alpha", 0.7f);
  add_weighted_loss(swish, "Y", {"3", "5"});
  expect_onnx_gradients_match(swish, "^X$", 3);

  testing::ModelBuilder glu(28);
  glu.input("A", TensorProto::DOUBLE, {"2", "6"});
  glu.input("B", TensorProto::DOUBLE, {"2", "6"});
  testing::add_float_attr(glu.node("SwiGLU", {"A", "B"}, {"Y"}, "glu"), "alpha", 1.5f);
  add_weighted_loss(glu, "Y", {"2", "6"});
  expect_onnx_gradients_match(glu, "^[AB]$", 3);
}

// CumProd along an axis of 7 (the scan's last step is partial) in each direction, inclusive and
// exclusive.
TEST(NewerOpsetGradients, CumProdEveryDirection) {
  for (int64_t exclusive : {0, 1}) {
    for (int64_t reverse : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "exclusive " << exclusive << " reverse " << reverse);
      testing::ModelBuilder m(26);
      m.input("X", TensorProto::DOUBLE, {"2", "7", "3"});
      m.initializer_i64("axis", {}, {1});
      onnx::NodeProto& node = m.node("CumProd", {"X", "axis"}, {"Y"}, "cumprod");
      testing::add_int_attr(node, "exclusive", exclusive);
      testing::add_int_attr(node, "reverse", reverse);
      add_weighted_loss(m, "Y", {"2", "7", "3"});
      expect_onnx_gradients_match(m, "^X$", 3);
    }
  }
}

// A factor that is exactly zero still passes the gradient of every later product to itself
// (d y_j / d x_k = the product of the other factors up to j), which a product through logarithms
// would lose.
TEST(NewerOpsetGradients, CumProdThroughAZeroFactor) {
  testing::ModelBuilder m(26);
  m.input("X", TensorProto::DOUBLE, {"5"});
  m.initializer_i64("axis", {}, {0});
  m.node("CumProd", {"X", "axis"}, {"Y"}, "cumprod");
  testing::add_int_attr(m.node("ReduceSum", {"Y"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "m.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  ASSERT_TRUE(pipeline.run(**graph, PassContext{}).ok());
  const std::vector<double> x = {2, 3, 0, 5, 7};
  absl::StatusOr<testing::GradientCheck> check =
      testing::check_gradients(**graph, {Tensor::from_doubles(DType::kF64, {5}, x)}, "^X$");
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_LT(check->max_relative_error, 1e-6);
}

// Attention with a causal sliding window, and with an external cache's lengths (so the causal
// frontier moves per batch entry) and a window together.
TEST(NewerOpsetGradients, AttentionWindowsAndCacheLengths) {
  for (bool lengths : {false, true}) {
    SCOPED_TRACE(lengths ? "nonpad_kv_seqlen" : "window");
    testing::ModelBuilder m(25);
    const std::string q_len = lengths ? "2" : "4";
    m.input("Q", TensorProto::DOUBLE, {"2", "2", q_len, "3"});
    m.input("K", TensorProto::DOUBLE, {"2", "2", "4", "3"});
    m.input("V", TensorProto::DOUBLE, {"2", "2", "4", "3"});
    std::vector<std::string> inputs = {"Q", "K", "V"};
    if (lengths) {
      m.initializer_i64("lengths", {2}, {3, 4});
      inputs.insert(inputs.end(), {"", "", "", "lengths"});
    }
    onnx::NodeProto& node = m.node("Attention", inputs, {"Y"}, "attention");
    testing::add_int_attr(node, "is_causal", 1);
    testing::add_int_attr(node, "left_window_size", 1);
    add_weighted_loss(m, "Y", {"2", "2", q_len, "3"});
    expect_onnx_gradients_match(m, "^[QKV]$", 3);
  }
}

// An opset-28 model of the layers a Llama block is made of compiles as an fp16 mixed-precision
// training run; the exported model keeps opset 28 and imports again.
TEST(NewerOpsets, Opset28ModelCompilesForMixedPrecisionTraining) {
  testing::ModelBuilder m(28);
  m.input("x", TensorProto::FLOAT, {"4", "8"});
  m.initializer_f32("w_gate", {8, 8}, std::vector<float>(64, 0.05f));
  m.initializer_f32("w_up", {8, 8}, std::vector<float>(64, -0.03f));
  m.node("MatMul", {"x", "w_gate"}, {"gate"}, "gate_proj");
  m.node("MatMul", {"x", "w_up"}, {"up"}, "up_proj");
  m.node("SwiGLU", {"gate", "up"}, {"h"}, "swiglu");
  onnx::NodeProto& cast = m.node("Cast", {"h"}, {"h32"}, "cast");
  testing::add_int_attr(cast, "to", TensorProto::FLOAT);
  testing::add_string_attr(cast, "round_mode", "nearest");
  m.node("Swish", {"h32"}, {"s"}, "swish");
  m.node("Mul", {"s", "s"}, {"sq"}, "square");
  testing::add_int_attr(m.node("ReduceMean", {"sq"}, {"loss"}, "mean"), "keepdims", 0);
  m.output("loss");

  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low = DType::kF16;
  options.mixed_precision->policy.low_source = "test";
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "m.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(**graph, options, diagnostics).ok());
  int f16_matmuls = 0;
  for (const auto& node : (*graph)->training_step()->nodes()) {
    f16_matmuls += node->op_type() == "MatMul" && node->precision().compute == DType::kF16;
  }
  EXPECT_GE(f16_matmuls, 2);  // the two projections forward, and their gradients

  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(*bytes));
  int64_t opset = 0;
  for (const onnx::OperatorSetIdProto& id : exported.opset_import()) {
    if (id.domain().empty()) opset = id.version();
  }
  EXPECT_EQ(opset, 28);
  EXPECT_TRUE(import_onnx_bytes(*bytes, "exported.onnx").ok());
}

// PyTorch's exporter asked for an opset above 23 writes, when ONNX's version converter fails on
// one of its ops (Gelu, RMSNormalization, ...), its graph with opset 23's ops under opset 18.
TEST(NewerOpsets, AFileWhoseOpsetIsOlderThanItsOpsSaysHowItComesAbout) {
  for (const char* op : {"RMSNormalization", "Gelu"}) {
    testing::ModelBuilder m(18);
    m.input("x", TensorProto::FLOAT, {"2", "4"});
    m.node(op, {"x"}, {"y"}, "layer");
    m.output("y");
    expect_import_error(
        m, str_cat(op, " is not in ONNX before opset ", std::string_view(op) == "Gelu" ? 20 : 23,
                   ", so the file's opset_import does not fit its ops (PyTorch's "
                   "exporter writes such a file"));
  }
}

TEST(NewerOpsets, ErrorsNameTheNodeAndWhatIsWrong) {
  {  // The window is an attribute from opset 25.
    testing::ModelBuilder m(24);
    for (const char* name : {"Q", "K", "V"})
      m.input(name, TensorProto::FLOAT, {"1", "1", "2", "2"});
    testing::add_int_attr(m.node("Attention", {"Q", "K", "V"}, {"Y"}, "att"), "left_window_size",
                          1);
    m.output("Y");
    expect_import_error(m,
                        "node 'att' (Attention): attribute 'left_window_size' is an attribute "
                        "of Attention from opset 25; the model imports opset 24");
  }
  {  // A window bound below -1.
    testing::ModelBuilder m(25);
    for (const char* name : {"Q", "K", "V"})
      m.input(name, TensorProto::FLOAT, {"1", "1", "2", "2"});
    testing::add_int_attr(m.node("Attention", {"Q", "K", "V"}, {"Y"}, "att"), "right_window_size",
                          -2);
    m.output("Y");
    expect_import_error(m,
                        "attribute 'right_window_size' is -2; it must be -1 (unbounded) or >= 0");
  }
  {  // nonpad_kv_seqlen is input 6 from opset 24; before, Attention has 6 inputs.
    testing::ModelBuilder m(23);
    for (const char* name : {"Q", "K", "V"})
      m.input(name, TensorProto::FLOAT, {"1", "1", "2", "2"});
    m.input("n", TensorProto::INT64, {"1"});
    m.node("Attention", {"Q", "K", "V", "", "", "", "n"}, {"Y"}, "att");
    m.output("Y");
    expect_import_error(m, "node 'att' (Attention) has 7 inputs; Attention has 6 at opset 23");
  }
  {  // nonpad_kv_seqlen with a past cache, and of the wrong shape.
    for (bool past : {true, false}) {
      testing::ModelBuilder m(24);
      for (const char* name : {"Q", "K", "V", "pk", "pv"}) {
        m.input(name, TensorProto::FLOAT, {"2", "1", "2", "2"});
      }
      m.input("n", TensorProto::INT64, {past ? "2" : "3"});
      m.node("Attention",
             past ? std::vector<std::string>{"Q", "K", "V", "", "pk", "pv", "n"}
                  : std::vector<std::string>{"Q", "K", "V", "", "", "", "n"},
             {"Y"}, "att");
      m.output("Y");
      expect_import_error(m, past ? "nonpad_kv_seqlen (an external cache's lengths) cannot be "
                                    "combined with past_key and past_value"
                                  : "nonpad_kv_seqlen is i64[3]; it must be i64[2], one length "
                                    "per batch entry");
    }
  }
  {  // SwiGLU does not broadcast.
    testing::ModelBuilder m(28);
    m.input("A", TensorProto::FLOAT, {"2", "4"});
    m.input("B", TensorProto::FLOAT, {"1", "4"});
    m.node("SwiGLU", {"A", "B"}, {"Y"}, "glu");
    m.output("Y");
    expect_import_error(m,
                        "node 'glu' (SwiGLU): the gate A is f32[2,4] and the value B is "
                        "f32[1,4]; SwiGLU takes them of one type and shape");
  }
  {  // Swish needs opset 24.
    testing::ModelBuilder m(23);
    m.input("x", TensorProto::FLOAT, {"2"});
    m.node("Swish", {"x"}, {"y"}, "swish");
    m.output("y");
    expect_import_error(m, "ampc implements Swish from opset 24; the model imports opset 23");
  }
  {  // CumProd's axis must be known when compiling; bool data has no product.
    testing::ModelBuilder m(26);
    m.input("x", TensorProto::FLOAT, {"2", "3"});
    m.input("axis", TensorProto::INT64, {});
    m.node("CumProd", {"x", "axis"}, {"y"}, "cumprod");
    m.output("y");
    expect_import_error(m, "node 'cumprod' (CumProd): axis 'axis' must be known at compile time");

    testing::ModelBuilder b(26);
    b.input("x", TensorProto::BOOL, {"2", "3"});
    b.initializer_i64("axis", {}, {0});
    b.node("CumProd", {"x", "axis"}, {"y"}, "cumprod");
    b.output("y");
    expect_import_error(b, "input is bool; ampc takes CumProd of float, i64 and i32 data");
  }
  {  // SpaceToDepth takes a mode from opset 28.
    testing::ModelBuilder m(13);
    m.input("x", TensorProto::FLOAT, {"1", "1", "2", "2"});
    onnx::NodeProto& node = m.node("SpaceToDepth", {"x"}, {"y"}, "s2d");
    testing::add_int_attr(node, "blocksize", 2);
    testing::add_string_attr(node, "mode", "CRD");
    m.output("y");
    expect_import_error(m,
                        "SpaceToDepth has attribute 'mode' from opset 28; the model imports "
                        "opset 13");
  }
  {  // Cast's round_mode: from opset 24, and one of three.
    for (int64_t opset : {23, 24}) {
      testing::ModelBuilder m(opset);
      m.input("x", TensorProto::FLOAT, {"2"});
      onnx::NodeProto& node = m.node("Cast", {"x"}, {"y"}, "cast");
      testing::add_int_attr(node, "to", TensorProto::FLOAT16);
      testing::add_string_attr(node, "round_mode", "sideways");
      m.output("y");
      expect_import_error(m, opset == 23 ? "attribute 'round_mode' is an attribute of Cast from "
                                           "opset 24; the model imports opset 23"
                                         : "attribute 'round_mode' is \"sideways\"; it must be "
                                           "\"up\", \"down\" or \"nearest\"");
    }
  }
  {  // Range's stash_type: from opset 27, float or double.
    for (int64_t opset : {26, 27}) {
      testing::ModelBuilder m(opset);
      for (const char* name : {"a", "b", "c"}) m.initializer_f32(name, {}, {1.0f});
      testing::add_int_attr(m.node("Range", {"a", "b", "c"}, {"y"}, "range"), "stash_type", 10);
      m.output("y");
      expect_import_error(m, opset == 26 ? "attribute 'stash_type' is an attribute of Range from "
                                           "opset 27; the model imports opset 26"
                                         : "attribute 'stash_type' is 10; it must be 1 (float) or "
                                           "11 (double)");
    }
  }
}

}  // namespace
}  // namespace ampc
