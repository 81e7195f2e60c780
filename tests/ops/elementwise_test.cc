// Element-wise ops: inference (broadcasting, element types, opset forms, errors) and the folds
// used by shape arithmetic, against hand-computed values. Integer folds must be exact in int64.
#include <cmath>

#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor bools(Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kBool, std::move(shape), values);
}

constexpr int64_t k2To53 = int64_t{1} << 53;

// Runs inference and folding on a node whose inputs are all constants; returns output 0's value.
absl::StatusOr<Tensor> fold(std::string_view op, const std::vector<Tensor>& inputs,
                            int64_t opset = kDefaultOnnxOpset) {
  Constants constants;
  for (size_t i = 0; i < inputs.size(); ++i) constants.emplace_back(static_cast<int>(i), inputs[i]);
  AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<Tensor>> values,
                        fold_outputs(make_case(std::string(op), Inputs(inputs.size()),
                                               std::move(constants), {}, opset)));
  if (!values.at(0)) return absl::NotFoundError("not folded");
  return *values[0];
}

std::vector<int64_t> fold_i64(std::string_view op, const std::vector<Tensor>& inputs) {
  absl::StatusOr<Tensor> out = fold(op, inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? out->to_i64_vector() : std::vector<int64_t>{};
}

// ---- Inference ----------------------------------------------------------------------------

TEST(ElementwiseInference, AddBroadcastsBothOperands) {
  auto out = infer("Add", {f32({4, 1, 5}), f32({3, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({4, 3, 5}));
}

TEST(ElementwiseInference, ArithmeticKeepsIntegerType) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    auto out = infer(op, {i64({}), i64({2, 3})});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), i64({2, 3})) << op;
  }
}

TEST(ElementwiseInference, IncompatibleShapesNameBothShapes) {
  auto out = infer("Mul", {f32({2, 3}), f32({4})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("[2,3]"), HasSubstr("[4]"), HasSubstr("broadcast")));
}

TEST(ElementwiseInference, MixedElementTypesAreRejected) {
  auto out = infer("Sub", {f32({3}), i64({3})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out),
              AllOf(HasSubstr("same element type"), HasSubstr("f32"), HasSubstr("i64")));
}

TEST(ElementwiseInference, UnaryOpsPreserveTheType) {
  const TensorType f16{DType::kF16, {2, 3}};
  for (const char* op : {"Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal"}) {
    auto out = infer(op, {f16});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f16) << op;
  }
}

TEST(ElementwiseInference, FloatOnlyUnaryOpsRejectIntegers) {
  for (const char* op : {"Sqrt", "Exp", "Log", "Reciprocal"}) {
    auto out = infer(op, {i64({3})});
    ASSERT_FALSE(out.ok()) << op;
    EXPECT_THAT(message(out), AllOf(HasSubstr("i64"), HasSubstr("does not accept"))) << op;
  }
}

TEST(ElementwiseInference, NegRejectsUnsignedButAbsAcceptsIt) {
  const TensorType u8{DType::kU8, {3}};
  EXPECT_FALSE(infer("Neg", {u8}).ok());
  auto abs = infer("Abs", {u8});
  ASSERT_TRUE(abs.ok()) << abs.status();
  EXPECT_EQ(abs->at(0), u8);
}

TEST(ElementwiseInference, PowKeepsTheBaseTypeForAnotherExponentType) {
  auto out = infer("Pow", {i64({2, 1}), f32({3})}, {}, 15);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), i64({2, 3}));
  out = infer("Pow", {f32({4}), i64({})}, {}, 13);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({4}));
}

TEST(ElementwiseInference, PowBeforeOpset12NeedsOneType) {
  auto out = infer("Pow", {f32({4}), i64({})}, {}, 11);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("same element type"));
  EXPECT_TRUE(infer("Pow", {f32({4}), f32({})}, {}, 11).ok());
}

TEST(ElementwiseInference, MinAndMaxBroadcastAllInputs) {
  for (const char* op : {"Min", "Max"}) {
    auto out = infer(op, {f32({2, 1}), f32({3}), f32({})});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({2, 3})) << op;
    out = infer(op, {i64({5})});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), i64({5})) << op;
  }
}

TEST(ElementwiseInference, MaxRejectsMixedTypes) {
  auto out = infer("Max", {f32({2}), f32({2}), i64({2})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("inputs 0 and 2"));
}

TEST(ElementwiseInference, ClipBoundsAreOptionalScalars) {
  auto out = infer("Clip", {f32({2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({2, 3}));
  out = infer("Clip", {f32({2, 3}), std::nullopt, f32({})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({2, 3}));
  // A one-element vector is taken as a scalar (as ONNX Runtime does).
  out = infer("Clip", {f32({4}), f32({1}), f32({})}, {}, 11);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({4}));
}

TEST(ElementwiseInference, ClipRejectsVectorBoundsAndOtherTypes) {
  auto out = infer("Clip", {f32({4}), f32({2})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("'min'"), HasSubstr("scalar"), HasSubstr("[2]")));
  out = infer("Clip", {f32({4}), std::nullopt, i64({})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("same element type"));
}

TEST(ElementwiseInference, ClipWithAttributesBeforeOpset11IsNotRegistered) {
  auto out = infer("Clip", {f32({4})}, {}, 10);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kNotFound);
}

TEST(ElementwiseInference, WhereBroadcastsConditionAndBranches) {
  auto out = infer("Where", {boolean({3, 1}), i64({1, 4}), i64({})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), i64({3, 4}));
}

TEST(ElementwiseInference, WhereRejectsNonBoolConditionAndMixedBranches) {
  auto out = infer("Where", {f32({3}), f32({3}), f32({3})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("condition"), HasSubstr("f32")));
  out = infer("Where", {boolean({3}), f32({3}), i64({3})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("inputs 1 and 2"));
}

TEST(ElementwiseInference, ComparisonsGiveBoolOfTheBroadcastShape) {
  for (const char* op : {"Equal", "Less", "Greater"}) {
    auto out = infer(op, {f32({2, 3}), f32({3})});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), boolean({2, 3})) << op;
  }
}

TEST(ElementwiseInference, ComparisonTypesFollowTheOpset) {
  // Equal took floats from opset 11; Less and Greater took integers from opset 9.
  auto out = infer("Equal", {f32({2}), f32({2})}, {}, 10);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("f32"), HasSubstr("opset 11")));
  EXPECT_TRUE(infer("Equal", {i64({2}), i64({2})}, {}, 10).ok());
  EXPECT_TRUE(infer("Equal", {f32({2}), f32({2})}, {}, 11).ok());
  out = infer("Less", {i64({2}), i64({2})}, {}, 8);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("opset 9"));
  EXPECT_TRUE(infer("Greater", {i64({2}), i64({2})}, {}, 9).ok());
}

TEST(ElementwiseInference, NotTakesOnlyBool) {
  auto out = infer("Not", {boolean({2, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), boolean({2, 2}));
  EXPECT_FALSE(infer("Not", {i64({2})}).ok());
}

TEST(ElementwiseInference, IsNaNAndIsInfGiveBoolOfXsShape) {
  for (const char* op : {"IsNaN", "IsInf"}) {
    for (const TensorType& x : {f32({2, 3}), f16({4}), bf16({}), TensorType{DType::kF64, {1}}}) {
      auto out = infer(op, {x});
      ASSERT_TRUE(out.ok()) << op << ": " << out.status();
      EXPECT_EQ(out->at(0), boolean(x.shape)) << op;
    }
    EXPECT_FALSE(infer(op, {i64({2})}).ok()) << op;
  }
  EXPECT_TRUE(infer("IsInf", {f32({2})}, {{"detect_negative", int64_t{0}}}).ok());
  // IsNaN came with opset 9, IsInf with opset 10.
  EXPECT_EQ(OpRegistry::global().find("", "IsNaN", 8), nullptr);
  EXPECT_NE(OpRegistry::global().find("", "IsNaN", 9), nullptr);
  EXPECT_EQ(OpRegistry::global().find("", "IsInf", 9), nullptr);
  EXPECT_NE(OpRegistry::global().find("", "IsInf", 10), nullptr);
}

// ---- Folding ------------------------------------------------------------------------------

TEST(ElementwiseFold, IntegerArithmeticIsExactBeyond2To53) {
  EXPECT_THAT(fold_i64("Add", {Tensor::from_i64({1}, {k2To53}), Tensor::from_i64({}, {1})}),
              ElementsAre(k2To53 + 1));
  EXPECT_THAT(fold_i64("Sub", {Tensor::from_i64({}, {k2To53 + 3}), Tensor::from_i64({}, {1})}),
              ElementsAre(k2To53 + 2));
  EXPECT_THAT(
      fold_i64("Mul", {Tensor::from_i64({}, {3037000499}), Tensor::from_i64({}, {3037000499})}),
      ElementsAre(int64_t{9223372030926249001}));
}

TEST(ElementwiseFold, SubBroadcastsRowsAgainstColumns) {
  EXPECT_THAT(
      fold_i64("Sub", {Tensor::from_i64({2, 1}, {10, 20}), Tensor::from_i64({3}, {1, 2, 3})}),
      ElementsAre(9, 8, 7, 19, 18, 17));
}

TEST(ElementwiseFold, IntegerDivTruncatesTowardZero) {
  EXPECT_THAT(
      fold_i64("Div", {Tensor::from_i64({3}, {-7, 7, -8}), Tensor::from_i64({3}, {2, -2, 3})}),
      ElementsAre(-3, -3, -2));
}

TEST(ElementwiseFold, IntegerDivisionByZeroIsAnError) {
  auto out = fold("Div", {Tensor::from_i64({2}, {4, 5}), Tensor::from_i64({2}, {1, 0})});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("division by zero"));
}

TEST(ElementwiseFold, FloatDivRoundsToF32) {
  auto out = fold("Div", {Tensor::from_f32({}, {1.0f}), Tensor::from_f32({}, {3.0f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->data<float>()[0], 1.0f / 3.0f);
}

TEST(ElementwiseFold, F16AddRoundsOnceToNearestEven) {
  // Near 2048 f16 values are 2 apart: 2049 ties down to 2048, 2051 ties up to 2052.
  auto out = fold("Add", {Tensor::from_doubles(DType::kF16, {2}, {2048, 2048}),
                          Tensor::from_doubles(DType::kF16, {2}, {1, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DType::kF16);
  EXPECT_THAT(out->to_double_vector(), ElementsAre(2048.0, 2052.0));
}

TEST(ElementwiseFold, IntegerPowIsExact) {
  EXPECT_THAT(fold_i64("Pow", {Tensor::from_i64({2}, {3, -2}), Tensor::from_i64({2}, {39, 3})}),
              ElementsAre(int64_t{4052555153018976267}, -8));
  // Negative exponents truncate 1 / base^n toward zero.
  EXPECT_THAT(fold_i64("Pow", {Tensor::from_i64({3}, {2, 1, -1}), Tensor::from_i64({}, {-3})}),
              ElementsAre(0, 1, -1));
}

TEST(ElementwiseFold, PowOfIntegerBaseByFloatExponentTruncates) {
  auto out = fold("Pow", {Tensor::from_i64({2}, {2, 9}), Tensor::from_f32({}, {0.5f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DType::kI64);
  EXPECT_THAT(out->to_i64_vector(), ElementsAre(1, 3));
}

TEST(ElementwiseFold, NegAndAbsAreExactInInt64) {
  EXPECT_THAT(fold_i64("Neg", {Tensor::from_i64({2}, {k2To53 + 1, -5})}),
              ElementsAre(-(k2To53 + 1), 5));
  EXPECT_THAT(fold_i64("Abs", {Tensor::from_i64({2}, {-(k2To53 + 1), 4})}),
              ElementsAre(k2To53 + 1, 4));
}

TEST(ElementwiseFold, MinAndMaxAreExactAndVariadic) {
  EXPECT_THAT(fold_i64("Max", {Tensor::from_i64({}, {k2To53}), Tensor::from_i64({}, {k2To53 + 1})}),
              ElementsAre(k2To53 + 1));
  EXPECT_THAT(fold_i64("Min", {Tensor::from_i64({2}, {5, -1}), Tensor::from_i64({}, {3}),
                               Tensor::from_i64({2}, {4, 0})}),
              ElementsAre(3, -1));
}

TEST(ElementwiseFold, SqrtAndReciprocalFoldFloats) {
  auto out = fold("Sqrt", {Tensor::from_f32({2}, {4.0f, 2.0f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->data<float>(), ElementsAre(2.0f, std::sqrt(2.0f)));
  out = fold("Reciprocal", {Tensor::from_f32({2}, {4.0f, -0.5f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(out->data<float>(), ElementsAre(0.25f, -2.0f));
}

TEST(ElementwiseFold, ExpIsNotFolded) {
  EXPECT_EQ(fold("Exp", {Tensor::from_f32({1}, {0.0f})}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ElementwiseFold, ComparisonsAreExactBeyond2To53) {
  const Tensor a = Tensor::from_i64({2}, {k2To53, 3});
  const Tensor b = Tensor::from_i64({2}, {k2To53 + 1, 3});
  auto equal = fold("Equal", {a, b});
  ASSERT_TRUE(equal.ok()) << equal.status();
  EXPECT_EQ(equal->dtype(), DType::kBool);
  EXPECT_THAT(equal->to_i64_vector(), ElementsAre(0, 1));
  EXPECT_THAT(fold_i64("Less", {a, b}), ElementsAre(1, 0));
  EXPECT_THAT(fold_i64("Greater", {b, a}), ElementsAre(1, 0));
}

TEST(ElementwiseFold, FloatComparisonsBroadcast) {
  EXPECT_THAT(
      fold_i64("Less", {Tensor::from_f32({3}, {1.0f, 2.0f, 3.0f}), Tensor::from_f32({}, {2.0f})}),
      ElementsAre(1, 0, 0));
}

TEST(ElementwiseFold, WhereSelectsExactElementsWithBroadcast) {
  EXPECT_THAT(fold_i64("Where", {bools({2, 1}, {1, 0}), Tensor::from_i64({2}, {k2To53 + 1, 7}),
                                 Tensor::from_i64({}, {-1})}),
              ElementsAre(k2To53 + 1, 7, -1, -1));
}

TEST(ElementwiseFold, NotInvertsBools) {
  auto out = fold("Not", {bools({3}, {1, 0, 1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DType::kBool);
  EXPECT_THAT(out->to_i64_vector(), ElementsAre(0, 1, 0));
}

// ---- Registration -------------------------------------------------------------------------

TEST(ElementwiseRegistry, AutocastCategoriesFollowTheDesign) {
  const std::vector<std::pair<const char*, AutocastCategory>> expected = {
      {"Add", AutocastCategory::kFollow},      {"Sub", AutocastCategory::kFollow},
      {"Mul", AutocastCategory::kFollow},      {"Div", AutocastCategory::kFollow},
      {"Sqrt", AutocastCategory::kFollow},     {"Pow", AutocastCategory::kDeny},
      {"Exp", AutocastCategory::kDeny},        {"Log", AutocastCategory::kDeny},
      {"Reciprocal", AutocastCategory::kDeny}, {"Min", AutocastCategory::kClear},
      {"Max", AutocastCategory::kClear},       {"Where", AutocastCategory::kClear},
      {"Equal", AutocastCategory::kClear},     {"Not", AutocastCategory::kClear},
      {"IsNaN", AutocastCategory::kClear},     {"IsInf", AutocastCategory::kClear},
  };
  for (const auto& [op, category] : expected) {
    const OpDef* def = OpRegistry::global().find("", op, 17);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->autocast.category, category) << op;
  }
}

}  // namespace
}  // namespace ampc::op_testing
