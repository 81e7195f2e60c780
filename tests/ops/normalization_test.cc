// BatchNormalization and LayerNormalization: output types per mode and opset against the ONNX
// spec, the ONNX node test models (expected shapes copied from their graph outputs), the
// autocast spec, and the errors.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// X and four [C] parameters of the same dtype.
OpCase batch_norm(TensorType x, int64_t channels, Attributes attrs = {}, int num_outputs = 1,
                  int64_t opset = 15) {
  const TensorType param{x.dtype, {channels}};
  return {"BatchNormalization", {x, param, param, param, param}, {}, std::move(attrs), opset,
          num_outputs};
}

// ---- BatchNormalization ----------------------------------------------------------------------

TEST(BatchNormalization, InferenceModeKeepsXsType) {
  // test_batchnorm_example, test_batchnorm_epsilon.
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4, 5}), 3)), ElementsAre(f32({2, 3, 4, 5})));
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4, 5}), 3, {{"epsilon", 0.01f}})),
              ElementsAre(f32({2, 3, 4, 5})));
  // Rank 2 (N x C) and rank 1 (N, one channel).
  EXPECT_THAT(infer_ok(batch_norm(bf16({8, 16}), 16)), ElementsAre(bf16({8, 16})));
  EXPECT_THAT(infer_ok(batch_norm(f32({7}), 1)), ElementsAre(f32({7})));
}

TEST(BatchNormalization, TrainingModeAddsRunningStatisticsPerChannel) {
  // test_batchnorm_example_training_mode, test_batchnorm_epsilon_training_mode.
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4, 5}), 3, {{"training_mode", int64_t{1}}}, 3)),
              ElementsAre(f32({2, 3, 4, 5}), f32({3}), f32({3})));
  // The running statistics are optional even in training mode.
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4, 5}), 3, {{"training_mode", int64_t{1}}}, 1)),
              ElementsAre(f32({2, 3, 4, 5})));
}

TEST(BatchNormalization, StatisticsKeepTheirOwnTypeFromOpset15) {
  // T (X), T1 (scale, B) and T2 (mean, var) are separate type parameters: the autocast case of
  // f16 data with fp32 parameters. running_mean/var have T2.
  const OpCase op_case{"BatchNormalization",
                       {f16({4, 8, 2, 2}), f32({8}), f32({8}), f32({8}), f32({8})},
                       {},
                       {{"training_mode", int64_t{1}}},
                       15,
                       3};
  EXPECT_THAT(infer_ok(op_case), ElementsAre(f16({4, 8, 2, 2}), f32({8}), f32({8})));
}

TEST(BatchNormalization, Opset14AndInferenceFormOfOpset9AreAccepted) {
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4}), 3, {{"training_mode", int64_t{1}}}, 3, 14)),
              ElementsAre(f32({2, 3, 4}), f32({3}), f32({3})));
  for (int64_t opset : {9, 13}) {
    EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4}), 3, {}, 1, opset)), ElementsAre(f32({2, 3, 4})))
        << opset;
  }
  // Before 9 the op had `spatial` and other output semantics.
  EXPECT_FALSE(infer_op(batch_norm(f32({2, 3, 4}), 3, {}, 1, 8)).ok());
  // The training form of opsets 9-13 (mean and var outputs) is recorded in training_mode by the
  // importer; saved_mean and saved_var are not computed.
  EXPECT_THAT(infer_ok(batch_norm(f32({2, 3, 4}), 3, {{"training_mode", int64_t{1}}}, 3, 12)),
              ElementsAre(f32({2, 3, 4}), f32({3}), f32({3})));
  EXPECT_THAT(error_of(batch_norm(f32({2, 3, 4}), 3, {{"training_mode", int64_t{1}}}, 5, 12)),
              AllOf(HasSubstr("saved_mean"), HasSubstr("not computed")));
  EXPECT_THAT(error_of(batch_norm(f32({2, 3, 4}), 3, {}, 3, 12)), HasSubstr("training_mode=0"));
}

TEST(BatchNormalization, RunningStatisticsOutsideTrainingModeAreAnError) {
  EXPECT_THAT(error_of(batch_norm(f32({2, 3, 4, 5}), 3, {}, 3)),
              AllOf(HasSubstr("running_mean"), HasSubstr("training_mode=0")));
  EXPECT_THAT(error_of(batch_norm(f32({2, 3}), 3, {{"training_mode", int64_t{2}}})),
              HasSubstr("attribute training_mode = 2 is not one of the values BatchNormalization "
                        "defines (0 or 1)"));
}

TEST(BatchNormalization, ParametersMustBeOnePerChannel) {
  OpCase op_case = batch_norm(f32({2, 3, 4, 5}), 3);
  op_case.input_types[3] = f32({4});
  EXPECT_THAT(error_of(op_case),
              AllOf(HasSubstr("input_mean [4]"), HasSubstr("[3]"), HasSubstr("[2,3,4,5]")));
  op_case = batch_norm(f32({2, 3, 4, 5}), 3);
  op_case.input_types[1] = f32({1, 3});
  EXPECT_THAT(error_of(op_case), HasSubstr("scale [1,3]"));
  EXPECT_THAT(error_of(batch_norm(f32({}), 1)), HasSubstr("scalar"));
}

TEST(BatchNormalization, ParameterPairsShareATypeAndIntegersAreRejected) {
  OpCase op_case = batch_norm(f32({2, 3}), 3);
  op_case.input_types[2] = f16({3});  // B differs from scale
  EXPECT_THAT(error_of(op_case), HasSubstr("same element type"));
  op_case = batch_norm(f32({2, 3}), 3);
  op_case.input_types[4] = f16({3});  // var differs from mean
  EXPECT_THAT(error_of(op_case), HasSubstr("same element type"));
  EXPECT_THAT(error_of(batch_norm(TensorType{DType::kI32, {2, 3}}, 3)),
              HasSubstr("does not accept"));
}

// ---- LayerNormalization ----------------------------------------------------------------------

OpCase layer_norm(TensorType x, Shape scale, std::optional<int64_t> axis = std::nullopt,
                  int num_outputs = 3) {
  Attributes attrs;
  if (axis) attrs["axis"] = *axis;
  const TensorType param{x.dtype, std::move(scale)};
  return {"LayerNormalization", {x, param, param}, {}, std::move(attrs), 17, num_outputs};
}

TEST(LayerNormalization, StatisticsKeepDimsBeforeAxisAndOnesFromIt) {
  // test_layer_normalization_4d_axis*, default_axis, 2d_axis*, 3d_axis*_epsilon.
  const TensorType x = f32({2, 3, 4, 5});
  EXPECT_THAT(infer_ok(layer_norm(x, {5})),
              ElementsAre(x, f32({2, 3, 4, 1}), f32({2, 3, 4, 1})));  // default axis -1
  EXPECT_THAT(infer_ok(layer_norm(x, {2, 3, 4, 5}, 0)),
              ElementsAre(x, f32({1, 1, 1, 1}), f32({1, 1, 1, 1})));
  EXPECT_THAT(infer_ok(layer_norm(x, {3, 4, 5}, 1)),
              ElementsAre(x, f32({2, 1, 1, 1}), f32({2, 1, 1, 1})));
  EXPECT_THAT(infer_ok(layer_norm(x, {4, 5}, -2)),
              ElementsAre(x, f32({2, 3, 1, 1}), f32({2, 3, 1, 1})));
  EXPECT_THAT(infer_ok(layer_norm(x, {3, 4, 5}, -3)),
              ElementsAre(x, f32({2, 1, 1, 1}), f32({2, 1, 1, 1})));
  EXPECT_THAT(infer_ok(layer_norm(f32({3, 4}), {4}, 1)),
              ElementsAre(f32({3, 4}), f32({3, 1}), f32({3, 1})));
}

TEST(LayerNormalization, StatisticsHaveStashTypeAndYHasXsType) {
  EXPECT_THAT(infer_ok(layer_norm(f16({4, 6, 8}), {8})),
              ElementsAre(f16({4, 6, 8}), f32({4, 6, 1}), f32({4, 6, 1})));
  OpCase op_case = layer_norm(f16({4, 8}), {8});
  op_case.attrs["stash_type"] = DType::kBF16;
  EXPECT_THAT(infer_ok(op_case), ElementsAre(f16({4, 8}), bf16({4, 1}), bf16({4, 1})));
  op_case.attrs["stash_type"] = DType::kF16;
  EXPECT_THAT(error_of(op_case), HasSubstr("stash_type must be f32 or bf16, got f16"));
}

TEST(LayerNormalization, BiasAndStatisticsOutputsAreOptional) {
  const OpCase op_case{"LayerNormalization", {f32({2, 3}), f32({3})}, {}, {}, 17, 1};
  EXPECT_THAT(infer_ok(op_case), ElementsAre(f32({2, 3})));
  EXPECT_FALSE(infer_op({"LayerNormalization", {f32({2, 3}), f32({3})}, {}, {}, 16, 1}).ok());
}

TEST(LayerNormalization, ScaleAndBiasBroadcastUnidirectionallyToX) {
  // Size-1 dims broadcast; a scale that would grow X does not.
  EXPECT_THAT(infer_ok(layer_norm(f32({2, 3, 4}), {1, 4}, 1, 1)), ElementsAre(f32({2, 3, 4})));
  EXPECT_THAT(error_of(layer_norm(f32({2, 3, 4}), {5})),
              AllOf(HasSubstr("Scale [5]"), HasSubstr("X [2,3,4]")));
  EXPECT_THAT(error_of(layer_norm(f32({3, 4}), {2, 3, 4})), HasSubstr("does not broadcast"));
  OpCase op_case = layer_norm(f32({2, 4}), {4});
  op_case.input_types[2] = f32({3});
  EXPECT_THAT(error_of(op_case), HasSubstr("B [3]"));
}

TEST(LayerNormalization, AxisOutOfRangeAndMixedTypesAreErrors) {
  EXPECT_THAT(error_of(layer_norm(f32({2, 3}), {3}, 2)),
              AllOf(HasSubstr("axis 2"), HasSubstr("rank 2")));
  EXPECT_FALSE(infer_op(layer_norm(f32({2, 3}), {3}, -3)).ok());
  EXPECT_THAT(error_of(layer_norm(f32({}), {})), HasSubstr("scalar"));
  OpCase op_case = layer_norm(f16({2, 3}), {3});
  op_case.input_types[1] = f32({3});
  EXPECT_THAT(error_of(op_case), HasSubstr("same element type"));
}

// ---- Autocast spec and the ONNX node test models --------------------------------------------

TEST(NormalizationFamily, BatchNormFollowsWithFp32ParametersAndLayerNormIsDenied) {
  for (const OpDef* def : OpRegistry::global().find_all("", "BatchNormalization")) {
    EXPECT_EQ(def->autocast.category, AutocastCategory::kFollow) << def->since_opset;
    EXPECT_THAT(def->autocast.fp32_operands, ElementsAre(1, 2, 3, 4)) << def->since_opset;
  }
  const OpDef* layer_norm = OpRegistry::global().find("", "LayerNormalization", 17);
  ASSERT_NE(layer_norm, nullptr);
  EXPECT_EQ(layer_norm->autocast.category, AutocastCategory::kDeny);
  EXPECT_EQ(layer_norm->find_attr("stash_type")->kind, AttrKind::kDType);
}

TEST(NormalizationFamily, ImportsOnnxNodeTestModelsWithTheirOutputShapes) {
  const TensorType x4 = f32({2, 3, 4, 5});
  const TensorType x3 = f32({2, 3, 5});
  expect_onnx_node_outputs({
      {"test_batchnorm_epsilon", {x4}},
      {"test_batchnorm_example", {x4}},
      {"test_batchnorm_epsilon_training_mode", {x4, f32({3}), f32({3})}},
      {"test_batchnorm_example_training_mode", {x4, f32({3}), f32({3})}},
      {"test_layer_normalization_2d_axis0", {f32({3, 4}), f32({1, 1}), f32({1, 1})}},
      {"test_layer_normalization_2d_axis1", {f32({3, 4}), f32({3, 1}), f32({3, 1})}},
      {"test_layer_normalization_2d_axis_negative_1", {f32({3, 4}), f32({3, 1}), f32({3, 1})}},
      {"test_layer_normalization_2d_axis_negative_2", {f32({3, 4}), f32({1, 1}), f32({1, 1})}},
      {"test_layer_normalization_3d_axis0_epsilon", {x3, f32({1, 1, 1}), f32({1, 1, 1})}},
      {"test_layer_normalization_3d_axis1_epsilon", {x3, f32({2, 1, 1}), f32({2, 1, 1})}},
      {"test_layer_normalization_3d_axis2_epsilon", {x3, f32({2, 3, 1}), f32({2, 3, 1})}},
      {"test_layer_normalization_3d_axis_negative_1_epsilon", {x3, f32({2, 3, 1}), f32({2, 3, 1})}},
      {"test_layer_normalization_3d_axis_negative_2_epsilon", {x3, f32({2, 1, 1}), f32({2, 1, 1})}},
      {"test_layer_normalization_3d_axis_negative_3_epsilon", {x3, f32({1, 1, 1}), f32({1, 1, 1})}},
      {"test_layer_normalization_4d_axis0", {x4, f32({1, 1, 1, 1}), f32({1, 1, 1, 1})}},
      {"test_layer_normalization_4d_axis1", {x4, f32({2, 1, 1, 1}), f32({2, 1, 1, 1})}},
      {"test_layer_normalization_4d_axis2", {x4, f32({2, 3, 1, 1}), f32({2, 3, 1, 1})}},
      {"test_layer_normalization_4d_axis3", {x4, f32({2, 3, 4, 1}), f32({2, 3, 4, 1})}},
      {"test_layer_normalization_4d_axis_negative_1", {x4, f32({2, 3, 4, 1}), f32({2, 3, 4, 1})}},
      {"test_layer_normalization_4d_axis_negative_2", {x4, f32({2, 3, 1, 1}), f32({2, 3, 1, 1})}},
      {"test_layer_normalization_4d_axis_negative_3", {x4, f32({2, 1, 1, 1}), f32({2, 1, 1, 1})}},
      {"test_layer_normalization_4d_axis_negative_4", {x4, f32({1, 1, 1, 1}), f32({1, 1, 1, 1})}},
      {"test_layer_normalization_default_axis", {x4, f32({2, 3, 4, 1}), f32({2, 3, 4, 1})}},
  });
}

}  // namespace
}  // namespace ampc::op_testing
