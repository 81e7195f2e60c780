// Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: output types for
// each axis / reduction mode and layout, and the errors, against shapes from the ONNX spec.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Attributes reduction(const char* mode) { return {{"reduction", std::string(mode)}}; }

// ---- Softmax, LogSoftmax ------------------------------------------------------------------

TEST(Softmax, KeepsTheInputTypeForAnyValidAxis) {
  const TensorType bf16{DType::kBF16, {2, 3, 4}};
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {-3, -1, 0, 2}) {
      auto out = infer(op, {bf16}, {{"axis", axis}}, 13);
      ASSERT_TRUE(out.ok()) << op << " axis " << axis << ": " << out.status();
      EXPECT_EQ(out->at(0), bf16) << op;
    }
  }
}

TEST(Softmax, AxisOutOfRangeIsAnError) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    auto out = infer(op, {f32({2, 3})}, {{"axis", int64_t{2}}});
    ASSERT_FALSE(out.ok()) << op;
    EXPECT_THAT(message(out), AllOf(HasSubstr("axis 2"), HasSubstr("rank 2"))) << op;
    out = infer(op, {f32({2, 3})}, {{"axis", int64_t{-3}}});
    EXPECT_FALSE(out.ok()) << op;
  }
}

TEST(Softmax, ScalarInputIsAnError) {
  auto out = infer("Softmax", {f32({})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("rank >= 1"));
}

TEST(Softmax, IntegerInputIsRejected) {
  auto out = infer("LogSoftmax", {i64({3})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("does not accept"));
}

TEST(Softmax, BeforeOpset13OnlyTheLastAxisOfTheTwoDCoercionIsRegistered) {
  // Before 13 the ops coerced the input to 2-D at `axis` (default 1); over the last axis that is
  // opset 13's function, and import writes any other axis as Flatten, op, Reshape.
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const OpDef* old = OpRegistry::global().find("", op, 12);
    ASSERT_NE(old, nullptr) << op;
    EXPECT_EQ(old->since_opset, 1);
    EXPECT_EQ(old->until_opset, 12);
    EXPECT_EQ(std::get<int64_t>(*old->find_attr("axis")->default_value), 1);
    EXPECT_EQ(old->autocast.category, AutocastCategory::kDeny);
    EXPECT_TRUE(infer(op, {f32({2, 3, 4})}, {{"axis", int64_t{2}}}, 12).ok());
    EXPECT_FALSE(infer(op, {f32({2, 3, 4})}, {{"axis", int64_t{1}}}, 12).ok());
    const OpDef* def = OpRegistry::global().find("", op, 13);
    ASSERT_NE(def, nullptr) << op;
    ASSERT_NE(def->find_attr("axis"), nullptr);
    EXPECT_EQ(std::get<int64_t>(*def->find_attr("axis")->default_value), -1);
    EXPECT_EQ(def->autocast.category, AutocastCategory::kDeny);
  }
}

// ---- SoftmaxCrossEntropyLoss --------------------------------------------------------------

TEST(SoftmaxCrossEntropyLoss, MeanAndSumGiveAScalar) {
  for (const char* mode : {"mean", "sum"}) {
    auto out = infer("SoftmaxCrossEntropyLoss", {f32({3, 5}), i64({3})}, reduction(mode));
    ASSERT_TRUE(out.ok()) << mode << ": " << out.status();
    EXPECT_THAT(*out, ElementsAre(f32({}))) << mode;
  }
  // mean is the default.
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({3, 5}), i64({3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(f32({})));
}

TEST(SoftmaxCrossEntropyLoss, NoneGivesPerSampleLossAndLogProbOfScoresShape) {
  // scores [N, C, d1, d2] = [2, 4, 3, 5]; labels [N, d1, d2].
  auto out =
      infer("SoftmaxCrossEntropyLoss", {f32({2, 4, 3, 5}), TensorType{DType::kI32, {2, 3, 5}}},
            reduction("none"), 13, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(f32({2, 3, 5}), f32({2, 4, 3, 5})));
}

TEST(SoftmaxCrossEntropyLoss, WeightsAndIgnoreIndexAreAccepted) {
  Attributes attrs = reduction("mean");
  attrs["ignore_index"] = int64_t{-1};
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({4, 3}), i64({4}), f32({3})}, attrs, 12, 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(f32({}), f32({4, 3})));
}

TEST(SoftmaxCrossEntropyLoss, LabelShapeMustDropTheClassDim) {
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({2, 4, 3}), i64({2, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("labels"), HasSubstr("[2,4]"), HasSubstr("[2,4,3]"),
                                  HasSubstr("[2,3]")));
}

TEST(SoftmaxCrossEntropyLoss, ScoresNeedABatchAndAClassDim) {
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({5}), i64({})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("scores"), HasSubstr("[N, C, ...]")));
}

TEST(SoftmaxCrossEntropyLoss, WeightsMustBeOnePerClassOfTheScoresType) {
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({4, 3}), i64({4}), f32({4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("weights"), HasSubstr("[C] = [3]")));
  out = infer("SoftmaxCrossEntropyLoss", {f32({4, 3}), i64({4}), TensorType{DType::kF64, {3}}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("same element type"));
}

TEST(SoftmaxCrossEntropyLoss, UnknownReductionIsAnError) {
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({4, 3}), i64({4})}, reduction("average"));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("'average'"), HasSubstr("'mean'")));
}

TEST(SoftmaxCrossEntropyLoss, FloatLabelsAreRejected) {
  auto out = infer("SoftmaxCrossEntropyLoss", {f32({4, 3}), f32({4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("labels"), HasSubstr("does not accept")));
}

TEST(SoftmaxCrossEntropyLoss, NotRegisteredBeforeOpset12) {
  EXPECT_EQ(OpRegistry::global().find("", "SoftmaxCrossEntropyLoss", 11), nullptr);
}

// ---- NegativeLogLikelihoodLoss ------------------------------------------------------------

TEST(NegativeLogLikelihoodLoss, ReductionModesGiveSpecShapes) {
  // The spec's example: N, C, d1 = 2, 3, 2.
  const std::vector<std::optional<TensorType>> inputs = {f32({2, 3, 2}), i64({2, 2})};
  auto out = infer("NegativeLogLikelihoodLoss", inputs, reduction("none"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(f32({2, 2})));
  for (const char* mode : {"sum", "mean"}) {
    out = infer("NegativeLogLikelihoodLoss", inputs, reduction(mode));
    ASSERT_TRUE(out.ok()) << mode << ": " << out.status();
    EXPECT_THAT(*out, ElementsAre(f32({}))) << mode;
  }
}

TEST(NegativeLogLikelihoodLoss, WeightedWithoutExtraDims) {
  auto out = infer("NegativeLogLikelihoodLoss",
                   {TensorType{DType::kF64, {5, 3}}, i64({5}), TensorType{DType::kF64, {3}}},
                   reduction("none"), 12);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*out, ElementsAre(TensorType{DType::kF64, {5}}));
}

TEST(NegativeLogLikelihoodLoss, TargetShapeMismatchNamesTheShapes) {
  auto out = infer("NegativeLogLikelihoodLoss", {f32({2, 3, 2}), i64({3, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("target"), HasSubstr("[3,2]"), HasSubstr("[2,2]")));
}

TEST(NegativeLogLikelihoodLoss, WeightOfWrongLengthIsAnError) {
  auto out = infer("NegativeLogLikelihoodLoss", {f32({2, 3}), i64({2}), f32({2})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("weight"), HasSubstr("[2]")));
}

TEST(Losses, AreDeniedLowPrecision) {
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"}) {
    const OpDef* def = OpRegistry::global().find("", op, 13);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->autocast.category, AutocastCategory::kDeny) << op;
    EXPECT_EQ(def->since_opset, 12) << op;
  }
}

}  // namespace
}  // namespace ampc::op_testing
