// Shape, view and generator ops (ops/shape.cc, ops/constant.cc): inferred types, folded values
// and error messages, checked against the ONNX spec's definitions and hand-computed values; and
// compile-time value propagation through a PyTorch-style Shape -> ... -> Reshape chain.
#include <cmath>
#include <cstdint>
#include <vector>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

TEST(ShapeOps, SamplesInferTheirListedTypes) {
  for (std::string_view op :
       {"Shape", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Identity", "Cast",
        "Dropout", "Constant", "ConstantOfShape", "Range"}) {
    expect_samples_hold(op);
  }
}

// ---- Shape ------------------------------------------------------------------------------------

TEST(Shape, FoldsTheStaticShapeWithoutKnowingTheData) {
  const std::vector<Tensor> values = fold_op("Shape", {f32({2, 3, 4})});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({2, 3, 4}));
}

TEST(Shape, StartAndEndSelectDimsWithNegativesAndClamping) {
  auto shape_of = [](Attributes attrs) {
    const OpCase op_case = make_case("Shape", {f32({2, 3, 4, 5})}, {}, std::move(attrs), 15);
    std::vector<Tensor> values = fold_op(op_case);
    return values.empty() ? std::vector<int64_t>{-99} : values[0].to_i64_vector();
  };
  EXPECT_EQ(shape_of({{"start", int64_t{-2}}}), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(shape_of({{"start", int64_t{1}}, {"end", int64_t{-1}}}), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(shape_of({{"start", int64_t{-10}}, {"end", int64_t{10}}}),
            (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(shape_of({{"start", int64_t{3}}, {"end", int64_t{1}}}), (std::vector<int64_t>{}));
}

TEST(Shape, ExistsFromOpset1) { EXPECT_EQ(infer_one("Shape", {f32({7})}, {}, {}, 1), i64({1})); }

// ---- Reshape ----------------------------------------------------------------------------------

OpCase reshape(Shape in, std::vector<int64_t> target, Attributes attrs = {}) {
  const int64_t n = target.size();
  return make_case("Reshape", {f32(std::move(in)), i64({n})}, {{1, ints(std::move(target))}},
                   attrs);
}

TEST(Reshape, InfersMinusOneAndCopiesZeroDims) {
  EXPECT_EQ(infer_one(reshape({2, 3, 4}, {-1, 4})), f32({6, 4}));
  EXPECT_EQ(infer_one(reshape({2, 3, 4}, {0, -1})), f32({2, 12}));
  EXPECT_EQ(infer_one(reshape({2, 3, 4}, {4, 0, 2})), f32({4, 3, 2}));
}

TEST(Reshape, AllowZeroKeepsZeroAsADim) {
  // With allowzero=1 the 0 is a dim; without, it copies input dim 1 (3), so 9 != 0 elements.
  EXPECT_EQ(infer_one(reshape({0, 3}, {3, 0}, {{"allowzero", int64_t{1}}})), f32({3, 0}));
  EXPECT_TRUE(fails_with(infer_error(reshape({0, 3}, {3, 0})), "cannot reshape"));
  EXPECT_TRUE(fails_with(infer_error(reshape({0, 3}, {0, -1}, {{"allowzero", int64_t{1}}})),
                         "both 0 and -1"));
}

TEST(Reshape, FoldKeepsTheElementsInOrder) {
  OpCase op_case = reshape({2, 3}, {3, 2});
  op_case.input_types[0] = i64({2, 3});
  op_case.constant_inputs.push_back({0, Tensor::from_i64({2, 3}, {1, 2, 3, 4, 5, 6})});
  const std::vector<Tensor> values = fold_op(op_case);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({3, 2}, {1, 2, 3, 4, 5, 6}));
}

TEST(Reshape, RejectsBadShapes) {
  const absl::Status mismatch = infer_error(reshape({2, 3}, {4, 2}));
  EXPECT_TRUE(fails_with(mismatch, "[2,3] (6 elements) to [4,2] (8 elements)"));
  EXPECT_TRUE(fails_with(infer_error(reshape({2, 3}, {-1, -1})), "more than one -1"));
  EXPECT_TRUE(fails_with(infer_error(reshape({2, 3}, {-1, 4})), "cannot infer the -1"));
  EXPECT_TRUE(fails_with(infer_error(reshape({2, 3}, {6, 1, 0})), "copies dim 2"));
  EXPECT_TRUE(fails_with(infer_error(reshape({2, 3}, {-2, 3})), "invalid dim -2"));
}

TEST(Reshape, NeedsACompileTimeShape) {
  const absl::Status status = infer_error("Reshape", {f32({2, 3}), i64({2})});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fails_with(status, "input 1 ('shape') must be known at compile time"));
}

// ---- Squeeze, Unsqueeze, Flatten --------------------------------------------------------------

TEST(Squeeze, AttributeFormBefore13AndInputFormFrom13) {
  EXPECT_EQ(infer_one("Squeeze", {f32({1, 3, 1})}, {}, {{"axes", std::vector<int64_t>{0}}}, 11),
            f32({3, 1}));
  EXPECT_EQ(infer_one("Squeeze", {f32({1, 3, 1}), i64({1})}, {{1, ints({-1})}}, {}, 13),
            f32({1, 3}));
}

TEST(Squeeze, WithoutAxesDropsEveryOne) {
  EXPECT_EQ(infer_one("Squeeze", {f32({1, 3, 1, 2})}), f32({3, 2}));
  EXPECT_EQ(infer_one("Squeeze", {f32({1, 1})}), f32({}));
}

TEST(Squeeze, RejectsAxesThatAreNotOne) {
  const absl::Status status = infer_error("Squeeze", {f32({1, 3}), i64({1})}, {{1, ints({1})}});
  EXPECT_TRUE(fails_with(status, "cannot squeeze axis 1 of shape [1,3]"));
  EXPECT_TRUE(fails_with(infer_error("Squeeze", {f32({1, 3}), i64({1})}, {{1, ints({2})}}),
                         "axis 2 is out of range for rank 2"));
}

TEST(Unsqueeze, AxesCountInTheOutputRank) {
  // ONNX: [3,4] with axes [0, 3] -> [1,3,4,1]; negative axes count from the output's back.
  EXPECT_EQ(infer_one("Unsqueeze", {f32({3, 4}), i64({2})}, {{1, ints({0, 3})}}),
            f32({1, 3, 4, 1}));
  EXPECT_EQ(infer_one("Unsqueeze", {f32({3, 4}), i64({1})}, {{1, ints({-1})}}), f32({3, 4, 1}));
  EXPECT_EQ(infer_one("Unsqueeze", {f32({3, 4})}, {}, {{"axes", std::vector<int64_t>{1, -1}}}, 11),
            f32({3, 1, 4, 1}));
}

TEST(Unsqueeze, RejectsMissingRepeatedAndOutOfRangeAxes) {
  EXPECT_TRUE(fails_with(infer_error("Unsqueeze", {f32({3})}, {}, {}, 11), "needs axes"));
  EXPECT_TRUE(fails_with(infer_error("Unsqueeze", {f32({3}), i64({2})}, {{1, ints({0, -3})}}),
                         "is repeated"));
  EXPECT_TRUE(fails_with(infer_error("Unsqueeze", {f32({3}), i64({1})}, {{1, ints({2})}}),
                         "axis 2 is out of range for rank 2"));
  EXPECT_TRUE(
      fails_with(infer_error("Unsqueeze", {f32({3}), i64({1})}), "must be known at compile time"));
}

TEST(Flatten, SplitsTheDimsAtAxis) {
  EXPECT_EQ(infer_one("Flatten", {f32({2, 3, 4})}), f32({2, 12}));
  EXPECT_EQ(infer_one("Flatten", {f32({2, 3, 4})}, {}, {{"axis", int64_t{0}}}), f32({1, 24}));
  EXPECT_EQ(infer_one("Flatten", {f32({2, 3, 4})}, {}, {{"axis", int64_t{3}}}), f32({24, 1}));
  EXPECT_EQ(infer_one("Flatten", {f32({2, 3, 4})}, {}, {{"axis", int64_t{-2}}}), f32({2, 12}));
  EXPECT_TRUE(fails_with(infer_error("Flatten", {f32({2, 3})}, {}, {{"axis", int64_t{3}}}),
                         "axis 3 is out of range [-2, 2]"));
}

// ---- Expand, Identity -------------------------------------------------------------------------

TEST(Expand, BroadcastsBothWays) {
  // ONNX Expand example: [3,1] with shape [2,1,6] -> [2,3,6].
  EXPECT_EQ(infer_one("Expand", {f32({3, 1}), i64({3})}, {{1, ints({2, 1, 6})}}), f32({2, 3, 6}));
  EXPECT_EQ(infer_one("Expand", {f32({3, 4}), i64({1})}, {{1, ints({1})}}), f32({3, 4}));
  EXPECT_TRUE(fails_with(infer_error("Expand", {f32({3, 4}), i64({1})}, {{1, ints({5})}}),
                         "shapes [3,4] and [5] do not broadcast"));
  EXPECT_TRUE(
      fails_with(infer_error("Expand", {f32({3}), i64({1})}), "must be known at compile time"));
}

TEST(Expand, FoldRepeatsValues) {
  const std::vector<Tensor> values =
      fold_op("Expand", {i64({2, 1}), i64({2})},
              {{0, Tensor::from_i64({2, 1}, {7, 8})}, {1, ints({2, 3})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({2, 3}, {7, 7, 7, 8, 8, 8}));
}

TEST(Identity, PassesTypeAndValueThrough) {
  EXPECT_EQ(infer_one("Identity", {TensorType{DType::kBF16, {2}}}),
            (TensorType{DType::kBF16, {2}}));
  const std::vector<Tensor> values = fold_op("Identity", {i64({2})}, {{0, ints({4, -5})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({4, -5}));
}

// ---- Cast -------------------------------------------------------------------------------------

TEST(Cast, OutputTakesTheTargetTypeFromOpset6) {
  EXPECT_EQ(infer_one("Cast", {f32({2, 3})}, {}, {{"to", DType::kF16}}),
            (TensorType{DType::kF16, {2, 3}}));
  EXPECT_EQ(infer_one("Cast", {i64({4})}, {}, {{"to", DType::kF32}}, 6), f32({4}));
  EXPECT_EQ(OpRegistry::global().find("", "Cast", 5), nullptr);
}

TEST(Cast, FoldIsExactForIntegersAndTruncatesFloats) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable in double
  std::vector<Tensor> values =
      fold_op("Cast", {TensorType{DType::kI32, {2}}},
              {{0, Tensor::from_doubles(DType::kI32, {2}, {-3, 5})}}, {{"to", DType::kI64}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({-3, 5}));

  values = fold_op("Cast", {i64({2})}, {{0, ints({big, -1})}}, {{"to", DType::kI64}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({big, -1}));

  values = fold_op("Cast", {f32({3})}, {{0, Tensor::from_f32({3}, {-2.7f, 2.7f, 0.0f})}},
                   {{"to", DType::kI64}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({-2, 2, 0}));

  values = fold_op("Cast", {i64({3})}, {{0, ints({0, 3, -1})}}, {{"to", DType::kBool}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].to_i64_vector(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(values[0].dtype(), DType::kBool);
}

TEST(Cast, FoldRoundsToHalfPrecisionToNearestEven) {
  // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: ties go to even (1).
  const std::vector<Tensor> values =
      fold_op("Cast", {f32({2})}, {{0, Tensor::from_f32({2}, {1.0f + 0x1p-11f, 3.5f})}},
              {{"to", DType::kF16}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].to_double_vector(), (std::vector<double>{1.0, 3.5}));
}

// A Cast of a constant folds to the bits the kernel computes: rounded once from the exact source
// value. The expected bits are worked out by hand from the IEEE formats (f16: 11 significant bits,
// bf16: 8), each value a tie of the target format nudged by less than an f32 ulp, where rounding
// through f32 first lands on the tie and then on the even neighbour.
TEST(Cast, FoldRoundsOnceFromF64AndLargeIntegers) {
  const std::vector<double> f64_values = {
      1.0 + 0x1p-11 + 0x1p-40,     // above the f16 tie between 1 and 1 + 2^-10: 1 + 2^-10
      2049.0 + 0x1p-29,            // above the f16 tie between 2048 and 2050: 2050
      -(1.0 + 0x1p-11 + 0x1p-40),  // the same, negative
  };
  std::vector<Tensor> values =
      fold_op("Cast", {TensorType{DType::kF64, {3}}},
              {{0, Tensor::from_doubles(DType::kF64, {3}, f64_values)}}, {{"to", DType::kF16}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(testing::element_bits(values[0]), (std::vector<uint32_t>{0x3c01, 0x6801, 0xbc01}));

  values = fold_op("Cast", {TensorType{DType::kF64, {1}}},
                   {{0, Tensor::from_doubles(DType::kF64, {1}, {1.0 + 0x1p-8 + 0x1p-40})}},
                   {{"to", DType::kBF16}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(testing::element_bits(values[0]), (std::vector<uint32_t>{0x3f81}));  // 1 + 2^-7

  // 2^24 + 2^16 + 1 is above the bf16 tie 2^24 + 2^16 (f32 holds only the tie): 2^24 + 2^17.
  // 2^60 + 2^52 + 1 is above the tie 2^60 + 2^52 (so is neither f32 nor f64): 2^60 + 2^53.
  values = fold_op("Cast", {i64({2})},
                   {{0, ints({(int64_t{1} << 24) + (1 << 16) + 1,
                              (int64_t{1} << 60) + (int64_t{1} << 52) + 1})}},
                   {{"to", DType::kBF16}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(testing::element_bits(values[0]), (std::vector<uint32_t>{0x4b81, 0x5d81}));
}

// Float to a narrower integer: out of range saturates and NaN becomes 0, as the kernel does
// (ONNX leaves both undefined), so a constant and a computed input give the same integers.
TEST(Cast, FoldSaturatesFloatsOutOfTheIntegerRange) {
  const Tensor x = Tensor::from_f32({5}, {3e9f, 300.0f, -1.0f, 128.0f, NAN});
  auto fold_to = [&](DType to) {
    std::vector<Tensor> values = fold_op("Cast", {f32({5})}, {{0, x}}, {{"to", to}});
    return values.empty() ? std::vector<int64_t>{} : values[0].to_i64_vector();
  };
  EXPECT_EQ(fold_to(DType::kI32), (std::vector<int64_t>{2147483647, 300, -1, 128, 0}));
  EXPECT_EQ(fold_to(DType::kI8), (std::vector<int64_t>{127, 127, -1, 127, 0}));
  EXPECT_EQ(fold_to(DType::kU8), (std::vector<int64_t>{255, 255, 0, 128, 0}));
  EXPECT_EQ(fold_to(DType::kI64), (std::vector<int64_t>{3000000000, 300, -1, 128, 0}));
}

// ---- Dropout ----------------------------------------------------------------------------------

TEST(Dropout, Opset10RatioAttributeAndBoolMask) {
  const absl::StatusOr<std::vector<TensorType>> types =
      infer_op({"Dropout", {f32({3, 4})}, {}, {{"ratio", 0.2f}}, 10, 2});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(*types, (std::vector<TensorType>{f32({3, 4}), TensorType{DType::kBool, {3, 4}}}));
  // From 7 (before, is_test); the importer reads the training form before 12 from the mask.
  EXPECT_EQ(OpRegistry::global().find("", "Dropout", 6), nullptr);
  EXPECT_NE(OpRegistry::global().find("", "Dropout", 7), nullptr);
}

TEST(Dropout, Opset13RatioAndTrainingModeInputs) {
  const absl::StatusOr<std::vector<TensorType>> types =
      infer_op({"Dropout",
                {TensorType{DType::kF16, {5}}, f32({}), TensorType{DType::kBool, {}}},
                {{1, Tensor::from_f32({}, {0.3f})}},
                {},
                13,
                2});
  ASSERT_TRUE(types.ok()) << types.status();
  EXPECT_EQ(*types, (std::vector<TensorType>{{DType::kF16, {5}}, TensorType{DType::kBool, {5}}}));
}

TEST(Dropout, RejectsBadRatios) {
  EXPECT_TRUE(
      fails_with(infer_error("Dropout", {f32({2}), f32({})}, {{1, Tensor::from_f32({}, {1.0f})}}),
                 "ratio 1 is not in [0, 1)"));
  EXPECT_TRUE(fails_with(infer_error("Dropout", {f32({2}), f32({2})}),
                         "input 1 ('ratio') must be a scalar"));
}

// ---- Constant, ConstantOfShape, Range ---------------------------------------------------------

TEST(Constant, EachValueAttributeGivesItsTensor) {
  auto constant = [](Attributes attrs) {
    std::vector<Tensor> values = fold_op("Constant", {}, {}, std::move(attrs));
    return values.empty() ? Tensor() : values[0];
  };
  const Tensor matrix = Tensor::from_f32({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(constant({{"value", matrix}}), matrix);
  EXPECT_EQ(constant({{"value_float", 1.5f}}), Tensor::from_f32({}, {1.5f}));
  EXPECT_EQ(constant({{"value_floats", std::vector<float>{1, 2}}}), Tensor::from_f32({2}, {1, 2}));
  EXPECT_EQ(constant({{"value_int", int64_t{-4}}}), scalar(-4));
  EXPECT_EQ(constant({{"value_ints", std::vector<int64_t>{3, 5, 7}}}), ints({3, 5, 7}));
}

TEST(Constant, RejectsStringsAndAmbiguousValues) {
  const absl::Status strings =
      infer_error("Constant", {}, {}, {{"value_string", std::string("a")}});
  EXPECT_EQ(strings.code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(fails_with(strings, "'value_string': string tensors are not supported"));
  EXPECT_TRUE(fails_with(infer_error("Constant", {}, {}, {}), "got none"));
  EXPECT_TRUE(fails_with(
      infer_error("Constant", {}, {}, {{"value_int", int64_t{1}}, {"value_float", 1.0f}}),
      "got value_float, value_int"));
}

TEST(ConstantOfShape, FillsTheGivenShapeWithValue) {
  std::vector<Tensor> values = fold_op("ConstantOfShape", {i64({2})}, {{0, ints({2, 3})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_f32({2, 3}, {0, 0, 0, 0, 0, 0}));  // default: f32 zeros
  values = fold_op("ConstantOfShape", {i64({1})}, {{0, ints({3})}}, {{"value", ints({-1})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({-1, -1, -1}));
}

TEST(ConstantOfShape, RejectsUnknownOrNegativeShapes) {
  EXPECT_TRUE(
      fails_with(infer_error("ConstantOfShape", {i64({2})}), "must be known at compile time"));
  EXPECT_TRUE(fails_with(infer_error("ConstantOfShape", {i64({2})}, {{0, ints({2, -1})}}),
                         "negative dim -1"));
  EXPECT_TRUE(fails_with(
      infer_error("ConstantOfShape", {i64({1})}, {{0, ints({2})}}, {{"value", ints({1, 2})}}),
      "must hold one element"));
}

OpCase range(Tensor start, Tensor limit, Tensor delta) {
  const TensorType type = start.type();
  return make_case("Range", {type, type, type}, {{0, start}, {1, limit}, {2, delta}});
}

TEST(Range, MatchesTheSpecExamples) {
  std::vector<Tensor> values = fold_op(range(scalar(3), scalar(9), scalar(3)));
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({3, 6}));
  values = fold_op(range(scalar(10), scalar(4), scalar(-2)));
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({10, 8, 6}));
  EXPECT_EQ(infer_one(range(scalar(5), scalar(1), scalar(1))), i64({0}));
}

TEST(Range, IntegerRangesAreExactBeyond2To53) {
  const int64_t start = int64_t{1} << 53;
  std::vector<Tensor> values = fold_op(range(scalar(start), scalar(start + 3), scalar(1)));
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({start, start + 1, start + 2}));
  EXPECT_EQ(infer_one(range(scalar(INT64_MIN), scalar(INT64_MAX), scalar(INT64_MAX))), i64({3}));
}

TEST(Range, FloatLengthIsTheCeiling) {
  const Tensor start = Tensor::from_f32({}, {0.0f});
  std::vector<Tensor> values =
      fold_op(range(start, Tensor::from_f32({}, {1.0f}), Tensor::from_f32({}, {0.25f})));
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_f32({4}, {0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(infer_one(range(start, Tensor::from_f32({}, {1.1f}), Tensor::from_f32({}, {0.5f}))),
            f32({3}));
}

TEST(Range, RejectsZeroDeltaAndUnknownInputs) {
  EXPECT_TRUE(fails_with(infer_error(range(scalar(0), scalar(4), scalar(0))), "delta is 0"));
  EXPECT_TRUE(fails_with(
      infer_error("Range", {i64({}), i64({}), i64({})}, {{0, scalar(0)}, {2, scalar(1)}}),
      "input 1 ('limit') must be known at compile time"));
  EXPECT_TRUE(
      fails_with(infer_error("Range", {i64({}), f32({}), i64({})},
                             {{0, scalar(0)}, {1, Tensor::from_f32({}, {4})}, {2, scalar(1)}}),
                 "same element type"));
}

// ---- Value propagation through shape arithmetic -----------------------------------------------

// PyTorch's x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape. The Reshape's
// shape is only known by folding the chain, and the chain must fold to a static [2,12].
TEST(ShapeArithmetic, ShapeGatherUnsqueezeConcatReshapeInfersStatically) {
  Graph graph("view");
  graph.set_opset("", 13);
  Value* x = graph.add_input("x", f32({2, 3, 4}));
  Value* zero = graph.add_initializer("zero", scalar(0));
  Value* axes = graph.add_initializer("axes", ints({0}));
  Value* minus_one = graph.add_initializer("minus_one", ints({-1}));
  const TensorType unknown{};
  Node* shape = graph.create_node("", "Shape", {x}, {unknown});
  Node* gather = graph.create_node("", "Gather", {shape->output(0), zero}, {unknown});
  Node* unsqueeze = graph.create_node("", "Unsqueeze", {gather->output(0), axes}, {unknown});
  Node* concat = graph.create_node("", "Concat", {unsqueeze->output(0), minus_one}, {unknown},
                                   {{"axis", int64_t{0}}});
  Node* reshape = graph.create_node("", "Reshape", {x, concat->output(0)}, {unknown});
  graph.add_output(reshape->output(0));

  absl::StatusOr<bool> changed = infer_graph_types(graph);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(shape->output(0)->type(), i64({3}));
  EXPECT_EQ(gather->output(0)->type(), i64({}));
  EXPECT_EQ(unsqueeze->output(0)->type(), i64({1}));
  EXPECT_EQ(concat->output(0)->type(), i64({2}));
  EXPECT_EQ(reshape->output(0)->type(), f32({2, 12}));

  // The same walk with a propagator shows the values it carried.
  TypePropagator propagator;
  for (const auto& node : graph.nodes()) ASSERT_TRUE(propagator.visit(*node).ok());
  ASSERT_NE(propagator.known_value(concat->output(0)), nullptr);
  EXPECT_EQ(*propagator.known_value(concat->output(0)), ints({2, -1}));
  EXPECT_EQ(propagator.known_value(reshape->output(0)), nullptr);  // x's data is not known
}

// Values over kEagerFoldBytes (a transposed weight) are folded only when asked for, through
// chains of such nodes, and give the same data as folding at once would.
TEST(ShapeArithmetic, LargeValuesFoldWhenAskedFor) {
  Graph graph("lazy");
  std::vector<float> data(64 * 32);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) - 1000.0f;
  Value* w = graph.add_initializer("w", Tensor::from_f32({64, 32}, data));
  ASSERT_GT(w->type().byte_size(), kEagerFoldBytes);
  Node* transpose = graph.create_node("", "Transpose", {w}, {f32({32, 64})});
  Node* neg = graph.create_node("", "Neg", {transpose->output(0)}, {f32({32, 64})});
  // A small fold that reads a pending one's shape only.
  Node* shape = graph.create_node("", "Shape", {neg->output(0)}, {i64({2})});
  graph.add_output(neg->output(0));
  graph.add_output(shape->output(0));

  TypePropagator propagator;
  for (const auto& node : graph.nodes()) ASSERT_TRUE(propagator.visit(*node).ok());
  EXPECT_EQ(*propagator.known_value(shape->output(0)), ints({32, 64}));
  const Tensor* folded = propagator.known_value(neg->output(0));
  ASSERT_NE(folded, nullptr);
  ASSERT_EQ(folded->type(), f32({32, 64}));
  for (int i = 0; i < 32; ++i) {
    for (int j = 0; j < 64; ++j) {
      ASSERT_EQ(folded->data<float>()[i * 64 + j], -data[j * 32 + i]) << i << "," << j;
    }
  }
  EXPECT_NE(propagator.known_value(transpose->output(0)), nullptr);
}

}  // namespace
}  // namespace ampc::op_testing
