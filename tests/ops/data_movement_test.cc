// Data movement ops (ops/data_movement.cc): Transpose, Concat, Split, Slice, Gather, Trilu.
// Inferred types, folded values and error messages, against the ONNX spec's examples and
// hand-computed values.
#include <cstdint>

#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

// 0, 1, 2, ... in an i64 tensor of `shape`: positions are easy to read back from values.
Tensor iota(Shape shape) {
  std::vector<int64_t> values(num_elements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = i;
  return Tensor::from_i64(std::move(shape), values);
}

TEST(DataMovementOps, SamplesInferTheirListedTypes) {
  for (std::string_view op : {"Transpose", "Concat", "Split", "Slice", "Gather", "Trilu"}) {
    expect_samples_hold(op);
  }
}

// ---- Transpose --------------------------------------------------------------------------------

TEST(Transpose, DefaultReversesDimsAndPermPermutes) {
  EXPECT_EQ(infer_one("Transpose", {f32({2, 3, 4})}), f32({4, 3, 2}));
  EXPECT_EQ(infer_one("Transpose", {f32({2, 3, 4})}, {}, {{"perm", std::vector<int64_t>{1, 2, 0}}}),
            f32({3, 4, 2}));
}

TEST(Transpose, FoldMovesElements) {
  // [[0,1,2],[3,4,5]] transposed is [[0,3],[1,4],[2,5]].
  const std::vector<Tensor> values = fold_op("Transpose", {i64({2, 3})}, {{0, iota({2, 3})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({3, 2}, {0, 3, 1, 4, 2, 5}));
}

TEST(Transpose, RejectsPermsThatAreNotPermutations) {
  EXPECT_TRUE(fails_with(
      infer_error("Transpose", {f32({2, 3})}, {}, {{"perm", std::vector<int64_t>{0, 0}}}),
      "perm [0,0] is not a permutation of the 2 input dims"));
  EXPECT_TRUE(fails_with(
      infer_error("Transpose", {f32({2, 3})}, {}, {{"perm", std::vector<int64_t>{1, 0, 2}}}),
      "is not a permutation"));
}

// ---- Concat -----------------------------------------------------------------------------------

TEST(Concat, AddsSizesAlongAxis) {
  EXPECT_EQ(infer_one("Concat", {f32({2, 3}), f32({2, 5})}, {}, {{"axis", int64_t{1}}}),
            f32({2, 8}));
  EXPECT_EQ(infer_one("Concat", {f32({2, 3}), f32({4, 3})}, {}, {{"axis", int64_t{-2}}}),
            f32({6, 3}));
}

TEST(Concat, FoldJoinsValuesAlongAxis) {
  std::vector<Tensor> values = fold_op(
      "Concat", {i64({2}), i64({1})}, {{0, ints({2, 3})}, {1, ints({-1})}}, {{"axis", int64_t{0}}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], ints({2, 3, -1}));
  // Axis 1 interleaves rows: [[0,1],[2,3]] ++ [[0],[1]] = [[0,1,0],[2,3,1]].
  values = fold_op("Concat", {i64({2, 2}), i64({2, 1})}, {{0, iota({2, 2})}, {1, iota({2, 1})}},
                   {{"axis", int64_t{1}}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({2, 3}, {0, 1, 0, 2, 3, 1}));
}

TEST(Concat, RejectsMismatchedShapesAndTypes) {
  EXPECT_TRUE(
      fails_with(infer_error("Concat", {f32({2, 3}), f32({3, 3})}, {}, {{"axis", int64_t{1}}}),
                 "input 1 has shape [3,3], which does not match input 0's [2,3] outside axis 1"));
  EXPECT_TRUE(fails_with(infer_error("Concat", {f32({2}), i64({2})}, {}, {{"axis", int64_t{0}}}),
                         "same element type"));
  EXPECT_TRUE(fails_with(infer_error("Concat", {f32({2})}, {}, {{"axis", int64_t{1}}}),
                         "axis 1 is out of range for rank 1"));
  EXPECT_TRUE(fails_with(infer_error("Concat", {f32({})}, {}, {{"axis", int64_t{0}}}), "rank 1"));
}

// ---- Split ------------------------------------------------------------------------------------

std::vector<TensorType> split_types(Inputs inputs, Constants constants, Attributes attrs,
                                    int64_t opset, int outputs) {
  absl::StatusOr<std::vector<TensorType>> types = infer_op(make_case(
      "Split", std::move(inputs), std::move(constants), std::move(attrs), opset, outputs));
  EXPECT_TRUE(types.ok()) << types.status();
  return types.value_or(std::vector<TensorType>{});
}

TEST(Split, SplitAttributeBefore13) {
  EXPECT_EQ(split_types({f32({6, 2})}, {}, {{"split", std::vector<int64_t>{1, 5}}}, 11, 2),
            (std::vector<TensorType>{f32({1, 2}), f32({5, 2})}));
}

TEST(Split, SplitInputFrom13) {
  EXPECT_EQ(
      split_types({f32({2, 6}), i64({3})}, {{1, ints({1, 2, 3})}}, {{"axis", int64_t{-1}}}, 13, 3),
      (std::vector<TensorType>{f32({2, 1}), f32({2, 2}), f32({2, 3})}));
}

TEST(Split, EqualPartsWithoutSplit) {
  EXPECT_EQ(split_types({f32({6})}, {}, {}, 13, 3),
            (std::vector<TensorType>{f32({2}), f32({2}), f32({2})}));
}

TEST(Split, NumOutputsFrom18LeavesTheLastChunkSmaller) {
  // ONNX Split-18: 7 into 3 gives chunks of ceil(7/3) = 3 and a last one of 1.
  EXPECT_EQ(split_types({f32({7, 2})}, {}, {{"num_outputs", int64_t{3}}}, 18, 3),
            (std::vector<TensorType>{f32({3, 2}), f32({3, 2}), f32({1, 2})}));
}

TEST(Split, FoldCutsValues) {
  const std::vector<Tensor> values =
      fold_op("Split", {i64({2, 3}), i64({2})}, {{0, iota({2, 3})}, {1, ints({1, 2})}},
              {{"axis", int64_t{1}}}, 13, 2);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0], Tensor::from_i64({2, 1}, {0, 3}));
  EXPECT_EQ(values[1], Tensor::from_i64({2, 2}, {1, 2, 4, 5}));
}

TEST(Split, RejectsInconsistentSizes) {
  auto error = [](Inputs inputs, Constants constants, Attributes attrs, int outputs) {
    return infer_op(make_case("Split", std::move(inputs), std::move(constants), std::move(attrs),
                              18, outputs))
        .status();
  };
  EXPECT_TRUE(fails_with(error({f32({6}), i64({2})}, {{1, ints({2, 3})}}, {}, 2),
                         "split [2,3] does not cut dim 6 into the node's 2 outputs"));
  EXPECT_TRUE(
      fails_with(error({f32({6}), i64({2})}, {{1, ints({-1, 7})}}, {}, 2), "does not cut dim 6"));
  EXPECT_TRUE(fails_with(error({f32({6})}, {}, {{"num_outputs", int64_t{3}}}, 2),
                         "num_outputs is 3 but the node has 2 outputs"));
  EXPECT_TRUE(
      fails_with(error({f32({6}), i64({2})}, {{1, ints({3, 3})}}, {{"num_outputs", int64_t{2}}}, 2),
                 "both given"));
  EXPECT_TRUE(fails_with(error({f32({5})}, {}, {}, 4), "cannot be split into 4 chunks of 2"));
}

// ---- Slice ------------------------------------------------------------------------------------

// Slice of `data` (i64 iota of `shape`) with the given starts, ends and optional axes, steps.
OpCase slice(Shape shape, std::vector<int64_t> starts, std::vector<int64_t> ends,
             std::optional<std::vector<int64_t>> axes = {},
             std::optional<std::vector<int64_t>> steps = {}) {
  const int64_t n = starts.size();
  OpCase op_case = make_case("Slice", {i64(shape), i64({n}), i64({n})},
                             {{0, iota(shape)}, {1, ints(starts)}, {2, ints(ends)}});
  op_case.input_types.push_back(std::optional<TensorType>());
  op_case.input_types.push_back(std::optional<TensorType>());
  if (axes) {
    op_case.input_types[3] = i64({static_cast<int64_t>(axes->size())});
    op_case.constant_inputs.push_back({3, ints(*axes)});
  }
  if (steps) {
    op_case.input_types[4] = i64({static_cast<int64_t>(steps->size())});
    op_case.constant_inputs.push_back({4, ints(*steps)});
  }
  if (!steps) op_case.input_types.pop_back();
  if (!steps && !axes) op_case.input_types.pop_back();
  return op_case;
}

Tensor sliced(const OpCase& op_case) {
  std::vector<Tensor> values = fold_op(op_case);
  return values.empty() ? Tensor() : values[0];
}

TEST(Slice, MatchesTheSpecExamples) {
  // data = [[1,2,3,4],[5,6,7,8]] is iota + 1; the spec's results are [[5,7]] and [[2,3,4]].
  EXPECT_EQ(
      sliced(slice({2, 4}, {1, 0}, {2, 3}, std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, 2})),
      Tensor::from_i64({1, 2}, {4, 6}));
  EXPECT_EQ(sliced(slice({2, 4}, {0, 1}, {-1, 1000})), Tensor::from_i64({1, 3}, {1, 2, 3}));
}

TEST(Slice, NegativeStepsWalkBackward) {
  // ONNX test_slice_neg_steps: [20,10,5] with starts [20,10,4], ends [0,0,1], axes [0,1,2],
  // steps [-1,-3,-2] gives [19,3,2].
  EXPECT_EQ(infer_one(slice({20, 10, 5}, {20, 10, 4}, {0, 0, 1}, std::vector<int64_t>{0, 1, 2},
                            std::vector<int64_t>{-1, -3, -2})),
            i64({19, 3, 2}));
  // Reversing a vector entirely: start -1, end INT64_MIN, step -1.
  EXPECT_EQ(
      sliced(slice({4}, {-1}, {INT64_MIN}, std::vector<int64_t>{0}, std::vector<int64_t>{-1})),
      ints({3, 2, 1, 0}));
  // Every other element backward from the end: 4, 2, 0.
  EXPECT_EQ(sliced(slice({5}, {INT64_MAX}, {INT64_MIN}, std::vector<int64_t>{0},
                         std::vector<int64_t>{-2})),
            ints({4, 2, 0}));
}

TEST(Slice, ClampsOutOfRangeBounds) {
  EXPECT_EQ(infer_one(slice({5, 3}, {1}, {INT64_MAX}, std::vector<int64_t>{0})), i64({4, 3}));
  EXPECT_EQ(infer_one(slice({5, 3}, {7}, {9}, std::vector<int64_t>{0})), i64({0, 3}));
  EXPECT_EQ(infer_one(slice({5, 3}, {-100}, {2}, std::vector<int64_t>{-1})), i64({5, 2}));
  // A huge step takes one element.
  EXPECT_EQ(
      infer_one(slice({5}, {1}, {5}, std::vector<int64_t>{0}, std::vector<int64_t>{INT64_MAX})),
      i64({1}));
}

TEST(Slice, ScalarArgumentsCountAsOneElement) {
  // ONNX asks for 1-D starts and ends; ONNX Runtime reads a scalar as one element, and PyTorch's
  // TorchScript exporter writes scalars when it slices by a Loop's iteration (tensor_split).
  OpCase op_case = make_case("Slice", {i64({3, 4}), i64({}), i64({}), i64({})},
                             {{0, iota({3, 4})},
                              {1, Tensor::from_i64({}, {1})},
                              {2, Tensor::from_i64({}, {3})},
                              {3, Tensor::from_i64({}, {-1})}});
  EXPECT_EQ(infer_one(op_case), i64({3, 2}));
  EXPECT_EQ(sliced(op_case), Tensor::from_i64({3, 2}, {1, 2, 5, 6, 9, 10}));
}

TEST(Slice, RejectsBadArguments) {
  EXPECT_TRUE(fails_with(
      infer_error(slice({4}, {0}, {4}, std::vector<int64_t>{0}, std::vector<int64_t>{0})),
      "steps[0] is 0"));
  EXPECT_TRUE(fails_with(infer_error(slice({4, 4}, {0, 0}, {1, 1}, std::vector<int64_t>{0, -2})),
                         "is repeated"));
  EXPECT_TRUE(fails_with(infer_error(slice({4}, {0}, {1}, std::vector<int64_t>{1})),
                         "axis 1 is out of range for rank 1"));
  EXPECT_TRUE(fails_with(
      infer_error("Slice", {f32({4}), i64({1}), i64({2})}, {{1, ints({0})}, {2, ints({1, 2})}}),
      "starts, ends, axes and steps have 1, 2, 1 and 1 elements"));
  EXPECT_TRUE(fails_with(infer_error("Slice", {f32({4}), i64({1}), i64({1})}, {{2, ints({1})}}),
                         "input 1 ('starts') must be known at compile time"));
  EXPECT_TRUE(fails_with(infer_error("Slice", {f32({4}), i64({1, 1}), i64({1})},
                                     {{1, Tensor::from_i64({1, 1}, {0})}, {2, ints({1})}}),
                         "input 1 ('starts') must be 1-D (or a scalar), got shape [1,1]"));
}

// ---- Gather -----------------------------------------------------------------------------------

TEST(Gather, OutputReplacesTheAxisWithTheIndicesShape) {
  EXPECT_EQ(infer_one("Gather", {f32({10, 4}), i64({2, 3})}), f32({2, 3, 4}));
  EXPECT_EQ(infer_one("Gather", {f32({2, 5, 3}), i64({})}, {}, {{"axis", int64_t{1}}}),
            f32({2, 3}));
  EXPECT_EQ(infer_one("Gather", {f32({2, 5, 3}), i64({4})}, {}, {{"axis", int64_t{-1}}}),
            f32({2, 5, 4}));
}

TEST(Gather, FoldReadsNegativeIndicesFromTheBack) {
  // data [[0,1,2],[3,4,5]], axis 1, indices [-1, 0] -> [[2,0],[5,3]].
  std::vector<Tensor> values =
      fold_op("Gather", {i64({2, 3}), i64({2})}, {{0, iota({2, 3})}, {1, ints({-1, 0})}},
              {{"axis", int64_t{1}}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({2, 2}, {2, 0, 5, 3}));
  // A scalar index on axis 0 of a shape vector: the first dim.
  values = fold_op("Gather", {i64({3}), i64({})}, {{0, ints({8, 3, 5})}, {1, scalar(0)}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], scalar(8));
  // i32 indices, 2-D.
  values = fold_op(
      "Gather", {i64({3}), TensorType{DType::kI32, {2, 2}}},
      {{0, ints({8, 3, 5})}, {1, Tensor::from_doubles(DType::kI32, {2, 2}, {2, 1, 0, -3})}});
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0], Tensor::from_i64({2, 2}, {5, 3, 8, 8}));
}

TEST(Gather, RejectsOutOfRangeIndicesAndAxes) {
  EXPECT_TRUE(
      fails_with(infer_error("Gather", {i64({3}), i64({})}, {{0, ints({8, 3, 5})}, {1, scalar(3)}}),
                 "index 3 is out of range for axis 0 of size 3"));
  EXPECT_TRUE(fails_with(infer_error("Gather", {f32({3}), i64({})}, {}, {{"axis", int64_t{1}}}),
                         "axis 1 is out of range for rank 1"));
  EXPECT_TRUE(fails_with(infer_error("Gather", {f32({3}), f32({})}), "does not accept"));
}

// ---- Trilu ------------------------------------------------------------------------------------

TEST(Trilu, KeepsTheInputTypeAndNeedsAMatrix) {
  EXPECT_EQ(infer_one("Trilu", {f32({2, 3, 4})}), f32({2, 3, 4}));
  EXPECT_EQ(
      infer_one("Trilu", {f32({3, 3}), i64({})}, {{1, scalar(1)}}, {{"upper", int64_t{0}}}, 14),
      f32({3, 3}));
  EXPECT_TRUE(fails_with(infer_error("Trilu", {f32({4})}), "rank 2 or more"));
  EXPECT_TRUE(fails_with(infer_error("Trilu", {f32({3, 3}), i64({2})}), "('k') must be a scalar"));
  EXPECT_EQ(OpRegistry::global().find("", "Trilu", 13), nullptr);
}

}  // namespace
}  // namespace ampc::op_testing
