// What PyTorch's reductions mean at their ties and zeros, which their ONNX form does not say,
// and what import keeps of them: max(dim) and min(dim) give their gradient to the first
// extremum (the element whose index they return) where amax and amin share it among ties (the
// dynamo exporter's FX node tells them apart); the 2-norm of zeros is 0 with gradient 0 (sqrt's
// would be NaN); a product or a minimum of parameters trains. The expected gradients are what
// PyTorch 2.15's autograd gives for the same inputs (measured; each is also the closed form).
#include <map>
#include <string>
#include <vector>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::from_aten;
using testing::ModelBuilder;

// Every graph output of the imported `bytes`: the loss, and d loss / d v as `v.grad` for its
// float graph inputs and initializers.
std::map<std::string, std::vector<double>> run_with_gradients(const std::string& bytes,
                                                              const std::vector<Tensor>& inputs) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(bytes, "torch.onnx");
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return {};
  auto values = testing::outputs_with_gradients(**graph, inputs);
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? *std::move(values) : std::map<std::string, std::vector<double>>{};
}

Tensor f32(std::vector<int64_t> shape, const std::vector<float>& values) {
  return Tensor::from_f32(std::move(shape), values);
}

// loss = sum(op(X, axis 1) * W) over X [2, 3], W [2], at opset 18; `aten` is the FX node's
// target ("" for none, as TorchScript writes it).
std::string weighted_reduction(const std::string& op, const std::string& aten) {
  ModelBuilder m(18);
  m.input("X", onnx::TensorProto::FLOAT, {"2", "3"});
  m.input("W", onnx::TensorProto::FLOAT, {"2"});
  m.initializer_i64("axes", {1}, {1});
  onnx::NodeProto& reduce = m.node(op, {"X", "axes"}, {"Y"}, "reduce");
  add_int_attr(reduce, "keepdims", 0);
  if (!aten.empty()) from_aten(reduce, "reduce", aten, "%x, 1");
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m.bytes();
}

TEST(TorchReductions, MaxAndMinAlongADimGiveTheFirstExtremumTheGradient) {
  struct Case {
    std::string op, aten;
    std::vector<float> x;
    std::vector<double> dx;
  };
  // W = {2, 5}; each row has a tie at its extremum but the second, whose extremum is alone.
  const std::vector<float> max_ties = {1, 3, 3, 0, 0, 2};
  const std::vector<float> min_ties = {1, 1, 3, 2, 0, 0};
  const Case cases[] = {
      {"ReduceMax", "max.dim", max_ties, {0, 2, 0, 0, 0, 5}},
      {"ReduceMax", "amax.default", max_ties, {0, 1, 1, 0, 0, 5}},
      {"ReduceMax", "", max_ties, {0, 1, 1, 0, 0, 5}},
      {"ReduceMin", "min.dim", min_ties, {2, 0, 0, 0, 5, 0}},
      {"ReduceMin", "amin.default", min_ties, {1, 1, 0, 0, 2.5, 2.5}},
      {"ReduceMin", "", min_ties, {1, 1, 0, 0, 2.5, 2.5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " from " + (c.aten.empty() ? "no FX node" : c.aten));
    auto values =
        run_with_gradients(weighted_reduction(c.op, c.aten), {f32({2, 3}, c.x), f32({2}, {2, 5})});
    EXPECT_EQ(values["X.grad"], c.dx);
  }
}

TEST(TorchReductions, TheNormOfZerosIsZeroWithNoGradient) {
  // PyTorch's norm backward is x / norm, masked to 0 where the norm is 0; the other row's is
  // the closed form, within an f32 rounding or two.
  auto values = run_with_gradients(weighted_reduction("ReduceL2", ""),
                                   {f32({2, 3}, {0, 0, 0, 1, 2, 2}), f32({2}, {1.5f, -2})});
  EXPECT_EQ(values["loss"], (std::vector<double>{-6}));
  EXPECT_EQ(values["W.grad"], (std::vector<double>{0, 3}));
  const std::vector<double> want = {0, 0, 0, -2.0 / 3, -4.0 / 3, -4.0 / 3};
  ASSERT_EQ(values["X.grad"].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(values["X.grad"][i], want[i], 3e-7) << i;
  }
}

TEST(TorchReductions, ProductsAndMinimaOfParametersTrain) {
  // loss = op(W) over a parameter W = {2, 3, 0.5}: its value is known at import, but folding
  // it into a constant would leave W without a gradient.
  struct Case {
    std::string op;
    double loss;
    std::vector<double> dw;
  };
  for (const Case& c : {Case{"ReduceProd", 3, {1.5, 1, 6}}, Case{"ReduceMin", 0.5, {0, 0, 1}}}) {
    SCOPED_TRACE(c.op);
    ModelBuilder m(18);
    m.initializer_f32("W", {3}, {2, 3, 0.5f});
    add_int_attr(m.node(c.op, {"W"}, {"loss"}, "reduce"), "keepdims", 0);
    m.output("loss");
    auto values = run_with_gradients(m.bytes(), {});
    EXPECT_EQ(values["loss"], (std::vector<double>{c.loss}));
    EXPECT_EQ(values["W.grad"], c.dw);
  }
}

}  // namespace
}  // namespace ampc
