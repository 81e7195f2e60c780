// ReduceMean, ReduceSum, ReduceMax: output shapes for keepdims, both axes forms (attribute
// before the opset that made axes an input, constant input after), noop_with_empty_axes, and
// the errors, against shapes worked out from the ONNX spec.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const char* const kReductions[] = {"ReduceMean", "ReduceSum", "ReduceMax"};

// A reduction of `input` with `axes` passed as a constant input.
OpCase with_axes_input(const char* op, TensorType input, std::vector<int64_t> axes, int64_t opset) {
  const int64_t count = static_cast<int64_t>(axes.size());
  return OpCase{op,
                {std::move(input), TensorType{DType::kI64, {count}}},
                {{1, Tensor::from_i64({count}, axes)}},
                {},
                opset};
}

TEST(Reduce, NoAxesReduceEverythingKeepingDims) {
  for (const char* op : kReductions) {
    auto out = infer(op, {f32({2, 3, 4})});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({1, 1, 1})) << op;
  }
}

TEST(Reduce, NoAxesWithoutKeepdimsGiveAScalar) {
  for (const char* op : kReductions) {
    auto out = infer(op, {f32({2, 3})}, {{"keepdims", int64_t{0}}});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({})) << op;
  }
}

TEST(Reduce, AxesAttributeFormBeforeTheInputForm) {
  // ReduceSum at 11, ReduceMean and ReduceMax at 13: axes is still an attribute.
  const std::vector<std::pair<const char*, int64_t>> cases = {
      {"ReduceSum", 11}, {"ReduceMean", 13}, {"ReduceMax", 13}};
  for (const auto& [op, opset] : cases) {
    auto out = infer(op, {f32({2, 3, 4})}, {{"axes", std::vector<int64_t>{1}}}, opset);
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({2, 1, 4})) << op;
    out = infer(op, {f32({2, 3, 4})},
                {{"axes", std::vector<int64_t>{-1, 0}}, {"keepdims", int64_t{0}}}, opset);
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({3})) << op;
  }
}

TEST(Reduce, AxesInputFormFromItsOpset) {
  const std::vector<std::pair<const char*, int64_t>> cases = {
      {"ReduceSum", 13}, {"ReduceMean", 18}, {"ReduceMax", 18}};
  for (const auto& [op, opset] : cases) {
    auto out = infer_op(with_axes_input(op, f32({2, 3, 4}), {0, 2}, opset));
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), f32({1, 3, 1})) << op;
  }
}

TEST(Reduce, DeclaresWhereAxesBecameAnInput) {
  const std::vector<std::pair<const char*, int>> expected = {
      {"ReduceSum", 13}, {"ReduceMean", 18}, {"ReduceMax", 18}};
  for (const auto& [op, since] : expected) {
    const OpDef* def = OpRegistry::global().find("", op, 18);
    ASSERT_NE(def, nullptr) << op;
    ASSERT_EQ(def->attrs_as_inputs.size(), 1u) << op;
    EXPECT_EQ(def->attrs_as_inputs[0].attr, "axes") << op;
    EXPECT_EQ(def->attrs_as_inputs[0].input, 1) << op;
    EXPECT_EQ(def->attrs_as_inputs[0].since_opset, since) << op;
  }
}

TEST(Reduce, EmptyAxesReduceAllUnlessNoop) {
  OpCase reduce_all = with_axes_input("ReduceSum", f32({2, 3}), {}, 13);
  auto out = infer_op(reduce_all);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({1, 1}));

  OpCase noop = reduce_all;
  noop.attrs = {{"noop_with_empty_axes", int64_t{1}}};
  out = infer_op(noop);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({2, 3}));

  // No axes input at all counts as empty too.
  out = infer("ReduceMean", {f32({2, 3})}, {{"noop_with_empty_axes", int64_t{1}}}, 18);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), f32({2, 3}));
}

TEST(Reduce, KeepsTheElementType) {
  const TensorType i32{DType::kI32, {4, 5}};
  for (const char* op : kReductions) {
    auto out = infer(op, {i32}, {{"axes", std::vector<int64_t>{0}}});
    ASSERT_TRUE(out.ok()) << op << ": " << out.status();
    EXPECT_EQ(out->at(0), (TensorType{DType::kI32, {1, 5}})) << op;
  }
}

TEST(Reduce, NonConstantAxesInputIsAnError) {
  auto out = infer("ReduceSum", {f32({2, 3}), TensorType{DType::kI64, {1}}}, {}, 13);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("axes"), HasSubstr("compile time")));
}

TEST(Reduce, OutOfRangeAndRepeatedAxesAreErrors) {
  auto out = infer("ReduceMean", {f32({2, 3})}, {{"axes", std::vector<int64_t>{2}}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("axis 2"), HasSubstr("rank 2")));
  out = infer_op(with_axes_input("ReduceMax", f32({2, 3}), {1, -1}, 18));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("repeated"));
}

TEST(Reduce, ReduceMaxTakesBoolFromOpset20) {
  const TensorType flags{DType::kBool, {3, 2}};
  auto out = infer("ReduceMax", {flags}, {{"axes", std::vector<int64_t>{0}}}, 18);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("opset 20"));
  out = infer_op(with_axes_input("ReduceMax", flags, {0}, 20));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at(0), (TensorType{DType::kBool, {1, 2}}));
  EXPECT_FALSE(infer("ReduceSum", {flags}).ok());
}

TEST(Reduce, AutocastSumsAndMeansInFp32ButMaxIsClear) {
  const OpRegistry& registry = OpRegistry::global();
  EXPECT_EQ(registry.find("", "ReduceMean", 17)->autocast.category, AutocastCategory::kDeny);
  EXPECT_EQ(registry.find("", "ReduceSum", 17)->autocast.category, AutocastCategory::kDeny);
  EXPECT_EQ(registry.find("", "ReduceMax", 17)->autocast.category, AutocastCategory::kClear);
}

}  // namespace
}  // namespace ampc::op_testing
