// What PyTorch's dynamo exporter writes for a convolution without bias, and what import makes of
// it: for a Conv3d (optimize=False, PyTorch 2.15) a bias of zeros computed as
// Expand(CastLike(0, X), Concat(Shape(W)[0:1], [2])), of shape [M, 2], which ONNX's Conv does not
// allow (ONNX Runtime refuses the file). A bias of zeros computed from constants adds nothing, so
// import drops it; one that is, or is read from, an initializer (a parameter) stays, and is
// checked. Reference: the convolution worked out by hand (a 1x1x1 kernel over two positions).
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
using testing::add_ints_attr;
using testing::ModelBuilder;

enum class Bias { kTorchZeros, kZeroParameter, kFromZeroParameter, kComputedOnes };

// loss = sum(Conv(X, W, B) * G) for X [1, 1, 1, 1, 2], W [2, 1, 1, 1, 1] = {2, -3} and G
// [1, 2, 1, 1, 2]; B [2, 2] as `bias` says.
std::string conv3d_model(Bias bias) {
  ModelBuilder m(18);
  m.input("X", onnx::TensorProto::FLOAT, {"1", "1", "1", "1", "2"});
  m.input("G", onnx::TensorProto::FLOAT, {"1", "2", "1", "1", "2"});
  m.initializer_f32("W", {2, 1, 1, 1, 1}, {2, -3});
  onnx::NodeProto& shape = m.node("Shape", {"W"}, {"out_channels"}, "shape");
  add_int_attr(shape, "start", 0);
  add_int_attr(shape, "end", 1);
  m.initializer_i64("two", {1}, {2});
  add_int_attr(m.node("Concat", {"out_channels", "two"}, {"bias_shape"}, "concat"), "axis", 0);
  switch (bias) {
    case Bias::kTorchZeros:
    case Bias::kComputedOnes: {
      onnx::NodeProto& value = m.node("Constant", {}, {"scalar"}, "scalar");
      onnx::AttributeProto* attr = value.add_attribute();
      attr->set_name("value_float");
      attr->set_type(onnx::AttributeProto::FLOAT);
      attr->set_f(bias == Bias::kTorchZeros ? 0.0f : 1.0f);
      m.node("CastLike", {"scalar", "X"}, {"typed"}, "cast_like");
      m.node("Expand", {"typed", "bias_shape"}, {"B"}, "expand");
      break;
    }
    case Bias::kZeroParameter:
      m.initializer_f32("B", {2, 2}, {0, 0, 0, 0});
      break;
    case Bias::kFromZeroParameter:
      m.initializer_f32("b", {2, 1}, {0, 0});
      m.node("Expand", {"b", "bias_shape"}, {"B"}, "expand");
      break;
  }
  onnx::NodeProto& conv = m.node("Conv", {"X", "W", "B"}, {"Y"}, "node_conv3d");
  add_ints_attr(conv, "kernel_shape", {1, 1, 1});
  m.node("Mul", {"Y", "G"}, {"weighted"}, "weigh");
  add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m.bytes();
}

TEST(TorchConvolution, AZeroBiasOfAnyShapeComputedFromConstantsIsDropped) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_bytes(conv3d_model(Bias::kTorchZeros), "conv3d.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (const auto& node : (*graph)->nodes()) {
    if (node->op_type() == "Conv") {
      EXPECT_EQ(node->num_operands(), 2);
    }
  }
  // Y = {2 x, -3 x} for x = {1.5, -0.5}: {3, -1, -4.5, 1.5}; weighted by G = {1, 2, 3, 4}.
  auto values =
      testing::outputs_with_gradients(**graph, {Tensor::from_f32({1, 1, 1, 1, 2}, {1.5f, -0.5f}),
                                                Tensor::from_f32({1, 2, 1, 1, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)["loss"], (std::vector<double>{-6.5}));
  EXPECT_EQ((*values)["X.grad"], (std::vector<double>{2 * 1 - 3 * 3, 2 * 2 - 3 * 4}));
  EXPECT_EQ((*values)["W.grad"], (std::vector<double>{1.5 * 1 - 0.5 * 2, 1.5 * 3 - 0.5 * 4}));
}

TEST(TorchConvolution, ABiasOfTheWrongShapeThatIsNotZerosFromConstantsIsAnError) {
  for (Bias bias : {Bias::kZeroParameter, Bias::kFromZeroParameter, Bias::kComputedOnes}) {
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_bytes(conv3d_model(bias), "conv3d.onnx");
    ASSERT_FALSE(graph.ok()) << static_cast<int>(bias);
    EXPECT_NE(graph.status().message().find(
                  "node 'node_conv3d' (Conv): B [2,2] must be [2], one value per output channel"),
              std::string::npos)
        << graph.status();
  }
}

}  // namespace
}  // namespace ampc
