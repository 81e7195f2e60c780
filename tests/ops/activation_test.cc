// Activations (ops/activation.cc): the inference rules beyond "same type as X", the opsets each
// op starts at, and the autocast categories.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ActivationInference, PReluSlopeBroadcastsUnidirectionallyToX) {
  for (const Shape& slope : std::vector<Shape>{{}, {1}, {4}, {3, 1}, {2, 3, 4}}) {
    auto out = infer("PRelu", {f32({2, 3, 4}), f32(slope)});
    ASSERT_TRUE(out.ok()) << shape_to_string(slope) << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({2, 3, 4}));
  }
  // X never takes the slope's shape: a slope larger than X is an error, not a broadcast.
  auto out = infer("PRelu", {f32({3, 1}), f32({3, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("[3,4]"), HasSubstr("[3,1]"), HasSubstr("broadcast")));
  out = infer("PRelu", {f32({2, 3}), f32({2})});
  EXPECT_FALSE(out.ok());
  out = infer("PRelu", {f32({2, 3}), f16({3})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("same element type"));
}

TEST(ActivationInference, CeluRejectsAZeroAlpha) {
  EXPECT_TRUE(infer("Celu", {f32({4})}, {{"alpha", 2.0f}}).ok());
  auto out = infer("Celu", {f32({4})}, {{"alpha", 0.0f}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("alpha"));
}

TEST(ActivationInference, ExponentialFamilyKeepsTheTypeAndRejectsIntegers) {
  for (const char* op : {"Elu", "Selu", "Celu", "Mish", "Softsign"}) {
    auto out = infer(op, {bf16({2, 3})}, {}, 18);
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), bf16({2, 3})) << op;
    EXPECT_FALSE(infer(op, {i64({2})}, {}, 18).ok()) << op;
  }
}

TEST(ActivationRegistry, EachOpStartsAtItsOnnxOpset) {
  const std::vector<std::pair<const char*, int>> first = {
      {"Elu", 6}, {"Selu", 6}, {"Celu", 12}, {"Mish", 18}, {"Softsign", 1}, {"PRelu", 7}};
  for (const auto& [op, opset] : first) {
    EXPECT_NE(OpRegistry::global().find("", op, opset), nullptr) << op << " at " << opset;
    EXPECT_NE(OpRegistry::global().find("", op, 21), nullptr) << op << " at 21";
    if (opset > 1) {
      EXPECT_EQ(OpRegistry::global().find("", op, opset - 1), nullptr) << op << " before";
    }
  }
}

TEST(ActivationRegistry, AutocastCategoriesFollowTheDesign) {
  // Softplus's exp overflows fp16 (PyTorch autocasts it to fp32); the others are bounded below
  // and grow at most like x, so they follow their input like Gelu.
  const std::vector<std::pair<const char*, AutocastCategory>> expected = {
      {"Relu", AutocastCategory::kClear},      {"LeakyRelu", AutocastCategory::kFollow},
      {"PRelu", AutocastCategory::kFollow},    {"Softplus", AutocastCategory::kDeny},
      {"Softsign", AutocastCategory::kFollow}, {"Elu", AutocastCategory::kFollow},
      {"Selu", AutocastCategory::kFollow},     {"Celu", AutocastCategory::kFollow},
      {"Mish", AutocastCategory::kFollow},     {"Gelu", AutocastCategory::kFollow},
  };
  for (const auto& [op, category] : expected) {
    const OpDef* def = OpRegistry::global().find("", op, 20);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->autocast.category, category) << op;
  }
}

}  // namespace
}  // namespace ampc::op_testing
