// Models of old opsets whose ops ampc implements only in a newer form (Pad, Slice and Clip with
// attributes, Upsample 7, AveragePool before 11, BatchNormalization's `spatial`, Reshape's
// attribute, ...): import converts them with ONNX's version converter to opset 13
// (compiler/onnx_import.cc). The outputs are checked against the old forms' definitions computed
// by hand here (data movement and IEEE operations: exact; BatchNormalization within 1e-6), on
// models laid out as exporters write them (IR 7: initializers not listed as inputs).
#include <cmath>

#include "compiler/onnx_io.h"
#include "compiler/report.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"

namespace ampc {
namespace {

using onnx::TensorProto;
using testing::ModelBuilder;

// Imports `m` (one input X [shape] of f32) and runs it on `x`; the output's values.
std::vector<float> run_single(const ModelBuilder& m, const Tensor& x, int64_t* converted_from) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return {};
  const auto& metadata = (*graph)->metadata();
  auto from = metadata.find("ampc.converted_from_opset");
  *converted_from = from == metadata.end() ? 0 : std::stoll(from->second);
  absl::StatusOr<std::vector<Tensor>> y = runtime::interpret_graph(**graph, {x});
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return {};
  std::vector<float> values;
  for (int64_t i = 0; i < y->at(0).num_elements(); ++i) {
    values.push_back(static_cast<float>(y->at(0).element_as_double(i)));
  }
  return values;
}

ModelBuilder old_model(int64_t opset, const std::vector<std::string>& x_shape) {
  ModelBuilder m(opset);
  m.model().set_ir_version(7);
  m.input("X", TensorProto::FLOAT, x_shape);
  m.output("Y");
  return m;
}

TEST(OpsetConversion, AttributeFormsOfPadSliceClipAndReshape) {
  const Tensor row = Tensor::from_f32({2, 4}, {0, 1, 2, 3, -4, 5, 9, 7});
  int64_t from = 0;

  ModelBuilder pad = old_model(2, {"2", "4"});  // pads [0, 1, 0, 2], value 0 left unwritten
  testing::add_ints_attr(pad.node("Pad", {"X"}, {"Y"}, "pad"), "pads", {0, 1, 0, 2});
  EXPECT_EQ(run_single(pad, row, &from),
            (std::vector<float>{0, 0, 1, 2, 3, 0, 0, 0, -4, 5, 9, 7, 0, 0}));
  EXPECT_EQ(from, 2);

  ModelBuilder reflect = old_model(9, {"2", "4"});  // conv padding_mode="reflect" before 11
  onnx::NodeProto& r = reflect.node("Pad", {"X"}, {"Y"}, "reflect");
  testing::add_ints_attr(r, "pads", {0, 1, 0, 1});
  testing::add_string_attr(r, "mode", "reflect");
  EXPECT_EQ(run_single(reflect, row, &from),
            (std::vector<float>{1, 0, 1, 2, 3, 2, 5, -4, 5, 9, 7, 9}));

  ModelBuilder slice = old_model(9, {"2", "4"});
  onnx::NodeProto& s = slice.node("Slice", {"X"}, {"Y"}, "slice");
  testing::add_ints_attr(s, "starts", {1});
  testing::add_ints_attr(s, "ends", {3});
  testing::add_ints_attr(s, "axes", {1});
  EXPECT_EQ(run_single(slice, row, &from), (std::vector<float>{1, 2, 5, 9}));
  EXPECT_EQ(from, 9);

  ModelBuilder clip = old_model(9, {"2", "4"});  // PyTorch's ReLU6 before opset 11
  onnx::NodeProto& c = clip.node("Clip", {"X"}, {"Y"}, "relu6");
  testing::add_float_attr(c, "min", 0.0f);
  testing::add_float_attr(c, "max", 6.0f);
  EXPECT_EQ(run_single(clip, row, &from), (std::vector<float>{0, 1, 2, 3, 0, 5, 6, 6}));

  ModelBuilder reshape = old_model(1, {"2", "4"});
  testing::add_ints_attr(reshape.node("Reshape", {"X"}, {"Y"}, "reshape"), "shape", {4, 2});
  EXPECT_EQ(run_single(reshape, row, &from), (std::vector<float>{0, 1, 2, 3, -4, 5, 9, 7}));
  EXPECT_EQ(from, 1);
}

TEST(OpsetConversion, PoolingUpsamplingAndBatchNormalization) {
  int64_t from = 0;
  const Tensor signal = Tensor::from_f32({1, 1, 3}, {1, 2, 3});
  ModelBuilder average = old_model(7, {"1", "1", "3"});
  onnx::NodeProto& pool = average.node("AveragePool", {"X"}, {"Y"}, "pool");
  testing::add_ints_attr(pool, "kernel_shape", {2});
  testing::add_ints_attr(pool, "pads", {1, 1});
  testing::add_int_attr(pool, "count_include_pad", 1);
  // [0, 1, 2, 3, 0] in windows of 2.
  EXPECT_EQ(run_single(average, signal, &from), (std::vector<float>{0.5f, 1.5f, 2.5f, 1.5f}));
  EXPECT_EQ(from, 7);

  ModelBuilder upsample = old_model(7, {"1", "1", "3"});
  onnx::NodeProto& up = upsample.node("Upsample", {"X"}, {"Y"}, "up");
  testing::add_string_attr(up, "mode", "nearest");
  testing::add_floats_attr(up, "scales", {1, 1, 2});
  EXPECT_EQ(run_single(upsample, signal, &from), (std::vector<float>{1, 1, 2, 2, 3, 3}));

  ModelBuilder norm = old_model(7, {"1", "2", "2"});
  norm.initializer_f32("scale", {2}, {2.0f, 0.5f});
  norm.initializer_f32("bias", {2}, {1.0f, -1.0f});
  norm.initializer_f32("mean", {2}, {0.5f, 2.0f});
  norm.initializer_f32("var", {2}, {4.0f, 0.25f});
  onnx::NodeProto& bn =
      norm.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"Y"}, "bn");
  testing::add_int_attr(bn, "spatial", 1);
  testing::add_float_attr(bn, "epsilon", 0.0f);
  const std::vector<float> got =
      run_single(norm, Tensor::from_f32({1, 2, 2}, {1.5f, -0.5f, 3.0f, 1.0f}), &from);
  // (x - mean) / sqrt(var) * scale + bias per channel.
  const std::vector<float> want = {2.0f, 0.0f, 0.0f, -2.0f};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  EXPECT_EQ(from, 7);
}

// Upsample (7 to 9) and Resize-10 map output position o to input coordinate o / scale, and
// their nearest mode takes the floor when enlarging, the ceiling when shrinking (ONNX's operator
// definitions; onnxruntime computes the same). The converter's opset-13 Resize would default to
// half-pixel coordinates: linear x2 of [1, 2, 3] would give [1, 1.25, 1.75, ...]. By hand from
// the definitions: linear x2 reads 0, 0.5, 1, ..., 2.5 (the last clamped to 3); nearest x0.75 of
// [1, 2, 3, 4] reads ceil(0), ceil(4/3), ceil(8/3) = 0, 2, 3.
TEST(OpsetConversion, OldUpsamplingKeepsItsCoordinates) {
  int64_t from = 0;
  const Tensor signal = Tensor::from_f32({1, 1, 3}, {1, 2, 3});
  const std::vector<float> linear_x2 = {1, 1.5f, 2, 2.5f, 3, 3};

  ModelBuilder upsample7 = old_model(7, {"1", "1", "3"});
  onnx::NodeProto& up7 = upsample7.node("Upsample", {"X"}, {"Y"}, "up");
  testing::add_string_attr(up7, "mode", "linear");
  testing::add_floats_attr(up7, "scales", {1, 1, 2});
  EXPECT_EQ(run_single(upsample7, signal, &from), linear_x2);
  EXPECT_EQ(from, 7);

  ModelBuilder upsample9 = old_model(9, {"1", "1", "3"});
  upsample9.initializer_f32("scales", {3}, {1, 1, 2});
  testing::add_string_attr(upsample9.node("Upsample", {"X", "scales"}, {"Y"}, "up"), "mode",
                           "linear");
  EXPECT_EQ(run_single(upsample9, signal, &from), linear_x2);
  EXPECT_EQ(from, 9);

  ModelBuilder resize10 = old_model(10, {"1", "1", "3"});
  resize10.initializer_f32("scales", {3}, {1, 1, 2});
  testing::add_string_attr(resize10.node("Resize", {"X", "scales"}, {"Y"}, "resize"), "mode",
                           "linear");
  EXPECT_EQ(run_single(resize10, signal, &from), linear_x2);
  EXPECT_EQ(from, 10);

  ModelBuilder shrink = old_model(10, {"1", "1", "4"});
  shrink.initializer_f32("scales", {3}, {1, 1, 0.75f});
  shrink.node("Resize", {"X", "scales"}, {"Y"}, "resize");  // nearest, the default
  EXPECT_EQ(run_single(shrink, Tensor::from_f32({1, 1, 4}, {1, 2, 3, 4}), &from),
            (std::vector<float>{1, 3, 4}));
  EXPECT_EQ(from, 10);

  // Scales that enlarge one axis and shrink another have no opset-13 nearest mode: the model is
  // imported in its own opset's form (ampc has Upsample-9), floor on one axis, ceiling on the
  // other: rows 0, 0, 1, 1 of [[1, 2, 3, 4], [5, 6, 7, 8]], columns ceil(0), ceil(2) = 0, 2.
  ModelBuilder mixed = old_model(9, {"1", "2", "4"});
  mixed.initializer_f32("scales", {3}, {1, 2, 0.5f});
  mixed.node("Upsample", {"X", "scales"}, {"Y"}, "up");
  EXPECT_EQ(run_single(mixed, Tensor::from_f32({1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), &from),
            (std::vector<float>{1, 3, 1, 3, 5, 7, 5, 7}));
  EXPECT_EQ(from, 0);
}

TEST(OpsetConversion, InspectSaysTheModelWasConverted) {
  ModelBuilder m = old_model(9, {"2", "4"});
  testing::add_ints_attr(m.node("Pad", {"X"}, {"Y"}, "pad"), "pads", {0, 1, 0, 1});
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_NE(inspect_text(**graph).find("converted: the file's opset 9 to 13 by ONNX's version "
                                       "converter"),
            std::string::npos);
}

TEST(OpsetConversion, ModelsOfOpset11AndLaterThatImportAsTheyAreAreNotConverted) {
  ModelBuilder m = old_model(11, {"2", "4"});
  m.node("Relu", {"X"}, {"Y"}, "relu");
  int64_t from = -1;
  run_single(m, Tensor::from_f32({2, 4}, std::vector<float>(8, 1.0f)), &from);
  EXPECT_EQ(from, 0);
}

// Below opset 11 a model is converted though every op it has exists at its opset: the training
// step's gradient rules write opset-13 forms (ReduceMax's gradient compares floats with Equal,
// which opset 9 does not define for floats).
TEST(OpsetConversion, ModelsBeforeOpset11AreConvertedSoTheirGradientsCanBeBuilt) {
  ModelBuilder m(9);
  m.model().set_ir_version(7);
  m.input("X", TensorProto::DOUBLE, {"3", "4"});
  m.input("W", TensorProto::DOUBLE, {"3"});
  onnx::NodeProto& max = m.node("ReduceMax", {"X"}, {"Y"}, "max");
  testing::add_ints_attr(max, "axes", {1});
  testing::add_int_attr(max, "keepdims", 0);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  absl::StatusOr<testing::GradientCheck> check = testing::check_onnx_gradients(m.bytes(), "^X$", 1);
  ASSERT_TRUE(check.ok()) << check.status().message();
  EXPECT_LT(check->max_relative_error, 1e-6) << check->worst_input;
}

TEST(OpsetConversion, AModelTheConverterCannotConvertKeepsItsErrorAndSaysWhy) {
  ModelBuilder m = old_model(6, {"2", "3", "4"});
  m.initializer_f32("b", {3}, {1, 2, 3});
  onnx::NodeProto& add = m.node("Add", {"X", "b"}, {"Y"}, "add");
  testing::add_int_attr(add, "broadcast", 1);
  testing::add_int_attr(add, "axis", 1);
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'add' (Add): op 'Add' (domain 'ai.onnx', opset 6) "
                                          "is not supported by ampc"),
            std::string::npos)
      << graph.status();
  EXPECT_NE(graph.status().message().find("(converted to opset 13 by ONNX's version converter, "
                                          "the model does not convert: "),
            std::string::npos)
      << graph.status();
}

// ONNX's converter trusts its input (a node without outputs crashed it): a model ONNX's checker
// rejects is not converted, and the error says why.
TEST(OpsetConversion, AMalformedModelIsNotGivenToTheConverter) {
  ModelBuilder m = old_model(9, {"1", "1", "4", "4"});
  testing::add_ints_attr(m.node("AveragePool", {"X"}, {}, "pool"), "kernel_shape", {2, 2});
  m.node("Relu", {"X"}, {"Y"}, "relu");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'pool' (AveragePool)"), std::string::npos)
      << graph.status();
  EXPECT_NE(graph.status().message().find("the model does not convert: ONNX's checker rejects "
                                          "the model"),
            std::string::npos)
      << graph.status();
}

// A Dropout with its mask output is PyTorch's training mode before opset 12, which the converter
// would turn into an inference Dropout: such a model is never converted, and an op it needs
// converted for says why.
TEST(OpsetConversion, ATrainingDropoutBeforeOpset12KeepsTheModelUnconverted) {
  ModelBuilder m = old_model(10, {"2", "4"});
  testing::add_ints_attr(m.node("Pad", {"X"}, {"padded"}, "pad"), "pads", {0, 1, 0, 1});
  m.node("Dropout", {"padded"}, {"Y", "mask"}, "drop");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "old.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("node 'pad' (Pad): op 'Pad' (domain 'ai.onnx', opset "
                                          "10) is not supported by ampc"),
            std::string::npos)
      << graph.status();
  EXPECT_NE(graph.status().message().find("its Dropout with a mask output, PyTorch's training "
                                          "mode before opset 12, would become an inference "
                                          "Dropout; export the model at opset 12 or later"),
            std::string::npos)
      << graph.status();
}

}  // namespace
}  // namespace ampc
