// Squares and products under fp16 autocast: f16's largest value is 65504, so the square of
// anything from 256 on overflows to inf. Each model below squares the f16 output of a MatMul (300
// and 400, which f16 holds exactly) before an fp32 sum, as norms, mean squared errors and RMSNorm
// do; compiled at fp16 (O1) and run, each gives the IEEE result PyTorch's autocast gives (its pow,
// norm, mse_loss and rms_norm are fp32), not inf or 0.
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"

namespace ampc {
namespace {

using onnx::TensorProto;

// h = x @ I (an allow-list MatMul: h is f16) for x = [[300, 400]], then `finish` reads h.
testing::ModelBuilder after_matmul(int64_t opset = 17) {
  testing::ModelBuilder m(opset);
  m.input("x", TensorProto::FLOAT, {"1", "2"});
  m.initializer_f32("eye", {2, 2}, {1, 0, 0, 1});
  m.node("MatMul", {"x", "eye"}, {"h"}, "project");
  return m;
}

// The model imported and compiled at fp16 (O1), or null.
std::unique_ptr<Graph> compile_at_fp16(const testing::ModelBuilder& m) {
  std::unique_ptr<Graph> graph = testing::import_ok(m);
  if (graph == nullptr) return nullptr;
  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  Diagnostics diagnostics;
  const absl::Status compiled = compile_graph(*graph, options, diagnostics);
  EXPECT_TRUE(compiled.ok()) << compiled;
  return compiled.ok() ? std::move(graph) : nullptr;
}

// The model's outputs at fp16 on x (by default [[300, 400]]).
std::vector<Tensor> run_at_fp16(const testing::ModelBuilder& m, std::vector<float> x = {300, 400}) {
  std::unique_ptr<Graph> graph = compile_at_fp16(m);
  if (graph == nullptr) return {};
  EXPECT_EQ(testing::first_node(*graph, "MatMul")->precision().compute, DType::kF16);
  return testing::run_graph(*graph, {Tensor::from_f32({1, 2}, std::move(x))});
}

TEST(Fp16Squares, TheL2NormOfAnF16ValueIsExact) {
  testing::ModelBuilder m = after_matmul();
  testing::add_int_attr(m.node("ReduceL2", {"h"}, {"norm"}, "norm"), "keepdims", 0);
  m.output("norm");
  const std::vector<Tensor> out = run_at_fp16(m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].element_as_double(0), 500.0);  // sqrt(90000 + 160000), exact
}

// mse_loss of two f16 values as both exporters write it: Sub, then Mul of the difference by
// itself, ReduceMean.
TEST(Fp16Squares, AMeanSquaredErrorIsExact) {
  testing::ModelBuilder m = after_matmul();
  m.initializer_f32("none", {2, 2}, {0, 0, 0, 0});
  m.node("MatMul", {"x", "none"}, {"target"}, "predict_zeros");  // f16 zeros
  m.node("Sub", {"h", "target"}, {"d"}, "difference");
  m.node("Mul", {"d", "d"}, {"squared"}, "square");
  testing::add_int_attr(m.node("ReduceMean", {"squared"}, {"mse"}, "mean"), "keepdims", 0);
  m.output("mse");
  const std::vector<Tensor> out = run_at_fp16(m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].element_as_double(0), 125000.0);  // (90000 + 160000) / 2, exact in f32
}

// A dot product written element-wise (cosine_similarity as TorchScript writes it): Mul of two
// f16 values, then ReduceSum. Its products are computed in fp32, as a GEMM's are.
TEST(Fp16Squares, ADotProductsProductsAreExact) {
  testing::ModelBuilder m = after_matmul();
  m.initializer_f32("swap", {2, 2}, {0, 1, 1, 0});
  m.node("MatMul", {"x", "swap"}, {"swapped"}, "swap");  // [400, 300], f16
  m.node("Mul", {"h", "swapped"}, {"products"}, "products");
  testing::add_int_attr(m.node("ReduceSum", {"products"}, {"dot"}, "sum"), "keepdims", 0);
  m.output("dot");
  const std::vector<Tensor> out = run_at_fp16(m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].element_as_double(0), 240000.0);  // 120000 + 120000, exact in f32
}

// A Mul by a constant before the sum scales (0.5 * tanh(h), then a mean): no product of two
// values, so it follows its input in f16, where x * 0.5 cannot overflow (a low node comes
// after the mean: were the mean the loss, the Mul would be fp32 as the last low node before it).
TEST(Fp16Squares, AScalingBeforeASumFollowsItsInput) {
  testing::ModelBuilder m = after_matmul();
  testing::add_float_attr(m.node("Constant", {}, {"half"}, "half"), "value_float", 0.5f);
  m.node("Tanh", {"h"}, {"t"}, "tanh");
  m.node("Mul", {"t", "half"}, {"scaled"}, "scale");
  testing::add_ints_attr(m.node("ReduceMean", {"scaled"}, {"mean"}, "mean"), "axes", {0});
  m.node("MatMul", {"mean", "eye"}, {"next"}, "next_layer");
  m.output("next");
  std::unique_ptr<Graph> graph = compile_at_fp16(m);
  ASSERT_NE(graph, nullptr);
  const PrecisionDecision& scale = testing::first_node(*graph, "Mul")->precision();
  EXPECT_EQ(scale.compute, DType::kF16) << scale.reason;
  EXPECT_EQ(scale.reason.find("summed"), std::string::npos) << scale.reason;
}

// RMSNormalization (opset 23) computes its statistics in stash_type, f32 by default.
TEST(Fp16Squares, RmsNormalizationComputesItsStatisticsInF32) {
  testing::ModelBuilder m = after_matmul(23);
  m.initializer_f32("scale", {2}, {1, 1});
  testing::add_float_attr(m.node("RMSNormalization", {"h", "scale"}, {"y"}, "rms"), "epsilon",
                          0.0f);
  m.output("y");
  const std::vector<Tensor> out = run_at_fp16(m);
  ASSERT_EQ(out.size(), 1u);
  // x / sqrt(125000): 0.8485281 and 1.1313709 in f32, within f16's rounding of the result.
  const double rms = std::sqrt(125000.0);
  EXPECT_NEAR(out[0].element_as_double(0), 300 / rms, std::ldexp(300 / rms, -10));
  EXPECT_NEAR(out[0].element_as_double(1), 400 / rms, std::ldexp(400 / rms, -10));
}

// A constant divided by an f16 value (how the TorchScript exporter writes the divisions it
// does not write as Reciprocal) is the reciprocal PyTorch's autocast computes in fp32: 1 / x
// overflows f16 for x below 2^-16.
TEST(Fp16Reciprocals, AConstantDividedByAnF16ValueIsExact) {
  testing::ModelBuilder m = after_matmul();
  testing::add_float_attr(m.node("Constant", {}, {"one"}, "one"), "value_float", 1.0f);
  m.node("Div", {"one", "h"}, {"y"}, "reciprocal");
  m.output("y");
  const std::vector<Tensor> out = run_at_fp16(m, {std::ldexp(1.0f, -20), std::ldexp(1.0f, -18)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].element_as_double(0), std::ldexp(1.0, 20));  // f16 would give inf
  EXPECT_EQ(out[0].element_as_double(1), std::ldexp(1.0, 18));
}

// torch.rsqrt as the TorchScript exporter writes it, Div(1, Sqrt(h)), is fp32 from the f16 input
// on, root included, as PyTorch's rsqrt under autocast: the IEEE f32 results of 1 / sqrt(300)
// and 1 / sqrt(400), where an f16 root (17.328125 for 17.320508) would move the first by 4e-4.
TEST(Fp16Reciprocals, RsqrtAsTorchScriptWritesItIsF32) {
  testing::ModelBuilder m = after_matmul();
  testing::add_float_attr(m.node("Constant", {}, {"one"}, "one"), "value_float", 1.0f);
  m.node("Sqrt", {"h"}, {"root"}, "root");
  m.node("Div", {"one", "root"}, {"y"}, "rsqrt");
  m.output("y");
  const std::vector<Tensor> out = run_at_fp16(m);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].element_as_double(0), 1.0f / std::sqrt(300.0f));
  EXPECT_EQ(out[0].element_as_double(1), 0.05f);
}

// A root read by anything but such a division follows its input, as PyTorch's sqrt does.
TEST(Fp16Reciprocals, ARootReadOtherwiseFollowsItsInput) {
  testing::ModelBuilder m = after_matmul();
  testing::add_float_attr(m.node("Constant", {}, {"one"}, "one"), "value_float", 1.0f);
  m.node("Sqrt", {"h"}, {"root"}, "root");
  m.node("Div", {"one", "root"}, {"y"}, "rsqrt");
  m.node("Add", {"root", "root"}, {"z"}, "twice");
  m.output("y");
  m.output("z");
  std::unique_ptr<Graph> graph = compile_at_fp16(m);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(testing::first_node(*graph, "Sqrt")->precision().compute, DType::kF16);
  EXPECT_EQ(testing::first_node(*graph, "Div")->precision().compute, DType::kF32);
}

}  // namespace
}  // namespace ampc
