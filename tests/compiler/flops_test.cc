// Matrix FLOPs (compiler/flops.h) against hand counts: 2 per multiply-add. And a property that
// does not rest on the formulas: in a training step every product of a forward convolution
// appears once in its data gradient and once in its filter gradient, so the three counts agree.
#include "compiler/flops.h"

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

int64_t flops_of(std::string_view text) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  return graph ? matrix_flops(*graph) : -1;
}

TEST(MatrixFlops, MatMulGemmAndConvCountTwoPerMultiplyAdd) {
  // [4,8] x [8,16]: 4 * 16 outputs of 8 products.
  EXPECT_EQ(flops_of(R"(graph g(%a: f32[4,8], %b: f32[8,16]) opset(17) {
      %y = MatMul(%a, %b) : f32[4,16]
      return %y })"),
            2 * 4 * 16 * 8);
  // Batched with a broadcast B: 3 * 2 * 5 * 7 outputs of 6 products.
  EXPECT_EQ(flops_of(R"(graph g(%a: f16[3,2,5,6], %b: f16[6,7]) opset(17) {
      %y = MatMul(%a, %b) : f16[3,2,5,7]
      return %y })"),
            2 * 3 * 2 * 5 * 7 * 6);
  // Gemm with transA: A is [K, M] = [9, 4]; the bias adds no products.
  EXPECT_EQ(flops_of(R"(graph g(%a: f32[9,4], %b: f32[9,3], %c: f32[3]) opset(17) {
      %y = Gemm<transA=1>(%a, %b, %c) : f32[4,3]
      return %y })"),
            2 * 4 * 3 * 9);
  // Conv with 2 groups: Y [2, 6, 5, 5], W [6, 2, 3, 3]: each output sums 2 * 9 taps.
  EXPECT_EQ(flops_of(R"(graph g(%x: f32[2,4,7,7], %w: f32[6,2,3,3]) opset(17) {
      %y = Conv<group=2, kernel_shape=[3, 3]>(%x, %w) : f32[2,6,5,5]
      return %y })"),
            2 * (2 * 6 * 5 * 5) * (2 * 9));
  // Element-wise work is not counted.
  EXPECT_EQ(flops_of(R"(graph g(%a: f32[4,8]) opset(17) {
      %y = Mul(%a, %a) : f32[4,8]
      return %y })"),
            0);
}

TEST(MatrixFlops, ConvolutionGradientsCountTheForwardProducts) {
  CompileOptions options;
  options.training = TrainingOptions{};
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/cnn.onnx"), options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::map<std::string, int64_t> by_op;
  for (const auto& node : (*graph)->training_step()->nodes()) {
    by_op[node->op_type()] += matrix_flops(*node);
  }
  EXPECT_GT(by_op["Conv"], 0);
  EXPECT_EQ(by_op["ConvGradFilter"], by_op["Conv"]);
  // The first convolution reads the input image, which needs no gradient: one ConvGradData
  // fewer. So the data gradients count the second convolution's products only.
  int64_t second_conv = 0;
  for (const auto& node : (*graph)->training_step()->nodes()) {
    if (node->op_type() == "Conv") second_conv = matrix_flops(*node);
  }
  EXPECT_EQ(by_op["ConvGradData"], second_conv);
}

}  // namespace
}  // namespace ampc
