// MatMul and Gemm: output types against numpy.matmul rules and the ONNX spec, the ONNX node
// test models (expected shapes copied from their graph outputs), and the errors.
#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- MatMul ----------------------------------------------------------------------------------

TEST(MatMul, MultipliesMatricesAndBatches) {
  // test_matmul_2d, _3d, _4d.
  EXPECT_THAT(infer_ok({"MatMul", {f32({3, 4}), f32({4, 3})}, {}, {}, 13}),
              ElementsAre(f32({3, 3})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({2, 3, 4}), f32({2, 4, 3})}, {}, {}, 13}),
              ElementsAre(f32({2, 3, 3})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({1, 2, 3, 4}), f32({1, 2, 4, 3})}, {}, {}, 13}),
              ElementsAre(f32({1, 2, 3, 3})));
}

TEST(MatMul, BroadcastsBatchDimensions) {
  EXPECT_THAT(infer_ok({"MatMul", {f16({2, 1, 3, 4}), f16({5, 4, 6})}, {}, {}}),
              ElementsAre(f16({2, 5, 3, 6})));
  // A matrix against a batch of matrices.
  EXPECT_THAT(infer_ok({"MatMul", {f32({3, 4}), f32({7, 4, 2})}, {}, {}}),
              ElementsAre(f32({7, 3, 2})));
}

TEST(MatMul, OneDimensionalOperandsLoseTheirAddedDim) {
  // numpy: a 1-D A is [1,K] and a 1-D B is [K,1]; the added 1 is removed from the result.
  EXPECT_THAT(infer_ok({"MatMul", {f32({4}), f32({4})}, {}, {}}), ElementsAre(f32({})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({4}), f32({4, 5})}, {}, {}}), ElementsAre(f32({5})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({3, 4}), f32({4})}, {}, {}}), ElementsAre(f32({3})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({4}), f32({2, 4, 3})}, {}, {}}), ElementsAre(f32({2, 3})));
  EXPECT_THAT(infer_ok({"MatMul", {f32({2, 3, 4}), f32({4})}, {}, {}}), ElementsAre(f32({2, 3})));
}

TEST(MatMul, AcceptsIntegersAndEveryOpset) {
  const TensorType a{DType::kI64, {2, 3}};
  const TensorType b{DType::kI64, {3, 4}};
  for (int64_t opset : {1, 9, 13, 21}) {
    auto out = infer_op({"MatMul", {a, b}, {}, {}, opset});
    ASSERT_TRUE(out.ok()) << "opset " << opset << ": " << out.status();
    EXPECT_THAT(*out, ElementsAre(TensorType{DType::kI64, {2, 4}}));
  }
}

TEST(MatMul, InnerDimensionMismatchNamesBothShapes) {
  auto out = infer_op({"MatMul", {f32({3, 4}), f32({5, 3})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("inner dimensions"), HasSubstr("[3,4]"),
                                  HasSubstr("[5,3]"), HasSubstr("K=4"), HasSubstr("K=5")));
  EXPECT_FALSE(infer_op({"MatMul", {f32({4}), f32({3})}, {}, {}}).ok());
}

TEST(MatMul, BatchDimensionsThatDoNotBroadcastAreAnError) {
  auto out = infer_op({"MatMul", {f32({2, 3, 4}), f32({3, 4, 5})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out),
              AllOf(HasSubstr("batch dimensions"), HasSubstr("[2,3,4]"), HasSubstr("[3,4,5]")));
}

TEST(MatMul, ScalarsAndMixedTypesAreErrors) {
  auto out = infer_op({"MatMul", {f32({}), f32({3})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("scalars"));
  out = infer_op({"MatMul", {f32({2, 3}), f16({3, 2})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("f32"), HasSubstr("f16")));
  out = infer_op(
      {"MatMul", {TensorType{DType::kBool, {2, 2}}, TensorType{DType::kBool, {2, 2}}}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("does not accept"));
}

// ---- Gemm ------------------------------------------------------------------------------------

Attributes trans(int64_t a, int64_t b) { return {{"transA", a}, {"transB", b}}; }

TEST(Gemm, TransposesOperandsPerAttributes) {
  // test_gemm_transposeA, _transposeB, _all_attributes.
  EXPECT_THAT(infer_ok({"Gemm", {f32({6, 3}), f32({6, 4}), f32({1, 4})}, {}, trans(1, 0), 13}),
              ElementsAre(f32({3, 4})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({3, 6}), f32({4, 6}), f32({1, 4})}, {}, trans(0, 1), 13}),
              ElementsAre(f32({3, 4})));
  Attributes all = trans(1, 1);
  all["alpha"] = 0.25f;
  all["beta"] = 0.35f;
  EXPECT_THAT(infer_ok({"Gemm", {f32({4, 3}), f32({5, 4}), f32({1, 5})}, {}, all, 13}),
              ElementsAre(f32({3, 5})));
}

TEST(Gemm, BiasBroadcastsUnidirectionallyToMN) {
  // test_gemm_default_matrix_bias, _scalar_bias, _single_elem_vector_bias, _vector_bias.
  EXPECT_THAT(infer_ok({"Gemm", {f32({3, 6}), f32({6, 4}), f32({3, 4})}, {}, {}}),
              ElementsAre(f32({3, 4})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 3}), f32({3, 4}), f32({})}, {}, {}}),
              ElementsAre(f32({2, 4})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({3, 7}), f32({7, 3}), f32({1})}, {}, {}}),
              ElementsAre(f32({3, 3})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 7}), f32({7, 4}), f32({1, 4})}, {}, {}}),
              ElementsAre(f32({2, 4})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 7}), f32({7, 4}), f32({4})}, {}, {}}),
              ElementsAre(f32({2, 4})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 7}), f32({7, 4}), f32({2, 1})}, {}, {}}),
              ElementsAre(f32({2, 4})));
}

TEST(Gemm, BiasIsOptional) {
  // test_gemm_default_no_bias (opset 13); opset 7 is the first Gemm we implement.
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 10}), f32({10, 3})}, {}, {}, 13}),
              ElementsAre(f32({2, 3})));
  EXPECT_THAT(infer_ok({"Gemm", {f32({2, 10}), f32({10, 3}), f32({3})}, {}, {}, 7}),
              ElementsAre(f32({2, 3})));
  // Opset 6 broadcast C only when told to (`broadcast`): other semantics, not registered.
  EXPECT_FALSE(infer_op({"Gemm", {f32({2, 10}), f32({10, 3}), f32({3})}, {}, {}, 6}).ok());
}

TEST(Gemm, BiasThatDoesNotBroadcastToTheResultIsAnError) {
  auto out = infer_op({"Gemm", {f32({2, 7}), f32({7, 4}), f32({3})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("C [3]"), HasSubstr("[2,4]")));
  // C may not grow the result (unidirectional), nor have more dims than it.
  EXPECT_FALSE(infer_op({"Gemm", {f32({1, 7}), f32({7, 4}), f32({2, 4})}, {}, {}}).ok());
  EXPECT_FALSE(infer_op({"Gemm", {f32({2, 7}), f32({7, 4}), f32({1, 2, 4})}, {}, {}}).ok());
}

TEST(Gemm, RejectsNonMatricesAndMismatchedK) {
  auto out = infer_op({"Gemm", {f32({2, 3, 4}), f32({4, 5})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("2-D"), HasSubstr("[2,3,4]")));
  out = infer_op({"Gemm", {f32({3, 6}), f32({4, 6})}, {}, {}});  // forgot transB
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), AllOf(HasSubstr("inner dimensions"), HasSubstr("transB=0"),
                                  HasSubstr("K=6"), HasSubstr("K=4")));
  out = infer_op({"Gemm", {f32({3, 6}), f32({6, 4}), f16({4})}, {}, {}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(message(out), HasSubstr("same element type"));
}

// ---- Autocast spec and the ONNX node test models --------------------------------------------

TEST(MatMulFamily, IsOnTheAllowListWithFp32Accumulation) {
  for (const char* op : {"MatMul", "Gemm"}) {
    const OpDef* def = OpRegistry::global().find("", op, 17);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->autocast.category, AutocastCategory::kAllow) << op;
    EXPECT_EQ(def->autocast.accumulate, DType::kF32) << op;
    EXPECT_TRUE(def->autocast.fp32_operands.empty()) << op;
  }
}

TEST(MatMulFamily, ImportsOnnxNodeTestModelsWithTheirOutputShapes) {
  const std::pair<const char*, TensorType> cases[] = {
      {"test_matmul_2d", f32({3, 3})},
      {"test_matmul_3d", f32({2, 3, 3})},
      {"test_matmul_4d", f32({1, 2, 3, 3})},
      {"test_gemm_all_attributes", f32({3, 5})},
      {"test_gemm_alpha", f32({3, 4})},
      {"test_gemm_beta", f32({2, 4})},
      {"test_gemm_default_matrix_bias", f32({3, 4})},
      {"test_gemm_default_no_bias", f32({2, 3})},
      {"test_gemm_default_scalar_bias", f32({2, 4})},
      {"test_gemm_default_single_elem_vector_bias", f32({3, 3})},
      {"test_gemm_default_vector_bias", f32({2, 4})},
      {"test_gemm_default_zero_bias", f32({3, 4})},
      {"test_gemm_transposeA", f32({3, 4})},
      {"test_gemm_transposeB", f32({3, 4})},
  };
  for (const auto& [name, expected] : cases) {
    auto outputs = onnx_node_test_outputs(name);
    ASSERT_TRUE(outputs.ok()) << name << ": " << outputs.status();
    ASSERT_EQ(outputs->size(), 1u) << name;
    EXPECT_EQ(outputs->at(0), expected) << name;
  }
}

}  // namespace
}  // namespace ampc::op_testing
