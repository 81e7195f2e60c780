// ConvTranspose, Col2Im, Resize and GridSample, which the importer lowers onto ConvGradData and
// Gather/Mul/Add (their outputs are checked against recorded references by
// tests/function_ops_test.cc and against ONNX's test data by the conformance suites): gradients
// against central differences in f64, the precision GridSample's coordinates keep under autocast,
// and the errors that name the node and what is wrong.
#include <string>
#include <tuple>
#include <vector>

#include "compiler/onnx_io.h"
#include "compiler/precision_policy.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

void expect_gradients_match(const testing::ModelBuilder& m, const std::string& wrt) {
  testing::expect_onnx_gradients_match(m, wrt, 3);
}
TEST(SpatialOpGradients, ConvTransposeGroupedWithOutputPaddingAndBias) {
  testing::ModelBuilder m(17);
  m.input("X", onnx::TensorProto::DOUBLE, {"1", "4", "2", "3"});
  m.input("Wt", onnx::TensorProto::DOUBLE, {"4", "1", "3", "2"});
  m.input("B", onnx::TensorProto::DOUBLE, {"2"});
  m.input("W", onnx::TensorProto::DOUBLE, {"1", "2", "4", "6"});
  onnx::NodeProto& conv = m.node("ConvTranspose", {"X", "Wt", "B"}, {"Y"}, "up");
  testing::add_int_attr(conv, "group", 2);
  testing::add_ints_attr(conv, "strides", {2, 2});
  testing::add_ints_attr(conv, "pads", {1, 0, 1, 0});
  testing::add_ints_attr(conv, "output_padding", {1, 0});
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(X|Wt|B)$");
}

// Resize of a [1, 2, 3, 4] X to [1, 2, 5, 7] (sizes) in `mode`, weighted and summed.
testing::ModelBuilder resize_loss_model(const std::string& mode, const std::string& coordinates) {
  testing::ModelBuilder m(18);
  m.input("X", onnx::TensorProto::DOUBLE, {"1", "2", "3", "4"});
  m.input("W", onnx::TensorProto::DOUBLE, {"1", "2", "5", "7"});
  onnx::TensorProto& sizes = m.initializer("sizes", onnx::TensorProto::INT64, {2});
  sizes.add_int64_data(5);
  sizes.add_int64_data(7);
  onnx::NodeProto& resize = m.node("Resize", {"X", "", "", "sizes"}, {"Y"}, "resize");
  testing::add_string_attr(resize, "mode", mode);
  testing::add_string_attr(resize, "coordinate_transformation_mode", coordinates);
  testing::add_ints_attr(resize, "axes", {2, 3});
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m;
}

TEST(SpatialOpGradients, ResizeNearestLinearAndCubic) {
  expect_gradients_match(resize_loss_model("nearest", "asymmetric"), "^X$");
  expect_gradients_match(resize_loss_model("linear", "half_pixel"), "^X$");
  expect_gradients_match(resize_loss_model("linear", "align_corners"), "^X$");
  expect_gradients_match(resize_loss_model("cubic", "pytorch_half_pixel"), "^X$");
}

// nn.Fold's adjoint relation, checked through its gradient: Col2Im's input gradient is Im2Col.
TEST(SpatialOpGradients, Col2ImStridedDilatedPadded) {
  testing::ModelBuilder m(18);
  // Image 5 x 6, block 2 x 3: 4 x 3 blocks with these pads, strides and dilations.
  m.input("cols", onnx::TensorProto::DOUBLE, {"1", "12", "12"});
  m.input("W", onnx::TensorProto::DOUBLE, {"1", "2", "5", "6"});
  onnx::TensorProto& image = m.initializer("image", onnx::TensorProto::INT64, {2});
  image.add_int64_data(5);
  image.add_int64_data(6);
  onnx::TensorProto& block = m.initializer("block", onnx::TensorProto::INT64, {2});
  block.add_int64_data(2);
  block.add_int64_data(3);
  onnx::NodeProto& fold = m.node("Col2Im", {"cols", "image", "block"}, {"Y"}, "fold");
  testing::add_ints_attr(fold, "strides", {1, 2});
  testing::add_ints_attr(fold, "dilations", {2, 1});
  testing::add_ints_attr(fold, "pads", {1, 0, 0, 1});
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^cols$");
}

// GridSample of a [1, 2, 3, 4] X at a [1, 3, 5, 2] grid, weighted and summed. The inputs are
// drawn in [-1.5, 1.5], so about a third of the grid reaches beyond X (padded) and every tap kind
// is crossed; a grid point sits on a kink (an integer coordinate, a border) with probability 0.
testing::ModelBuilder grid_sample_loss_model(const std::string& mode, const std::string& padding,
                                             int64_t align_corners) {
  testing::ModelBuilder m(20);
  m.input("X", onnx::TensorProto::DOUBLE, {"1", "2", "3", "4"});
  m.input("grid", onnx::TensorProto::DOUBLE, {"1", "3", "5", "2"});
  m.input("W", onnx::TensorProto::DOUBLE, {"1", "2", "3", "5"});
  onnx::NodeProto& sample = m.node("GridSample", {"X", "grid"}, {"Y"}, "sample");
  testing::add_string_attr(sample, "mode", mode);
  testing::add_string_attr(sample, "padding_mode", padding);
  testing::add_int_attr(sample, "align_corners", align_corners);
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  return m;
}

TEST(SpatialOpGradients, GridSampleWithRespectToXAndTheGrid) {
  for (const auto& [mode, padding, align] :
       std::vector<std::tuple<std::string, std::string, int64_t>>{{"linear", "zeros", 0},
                                                                  {"linear", "border", 1},
                                                                  {"linear", "reflection", 0},
                                                                  {"cubic", "zeros", 1},
                                                                  {"cubic", "border", 0},
                                                                  {"cubic", "reflection", 1}}) {
    SCOPED_TRACE(str_cat(mode, " ", padding, " align_corners ", align));
    expect_gradients_match(grid_sample_loss_model(mode, padding, align), "^(X|grid)$");
  }
  // Nearest reads X at rounded coordinates: the grid gets no gradient (PyTorch's is zeros).
  expect_gradients_match(grid_sample_loss_model("nearest", "zeros", 0), "^X$");
}

TEST(SpatialOpGradients, GridSampleVolumetric) {
  testing::ModelBuilder m(20);
  m.input("X", onnx::TensorProto::DOUBLE, {"1", "2", "2", "3", "3"});
  m.input("grid", onnx::TensorProto::DOUBLE, {"1", "2", "2", "3", "3"});
  m.input("W", onnx::TensorProto::DOUBLE, {"1", "2", "2", "2", "3"});
  testing::add_string_attr(m.node("GridSample", {"X", "grid"}, {"Y"}, "sample"), "padding_mode",
                           "reflection");
  m.node("Mul", {"Y", "W"}, {"weighted"}, "weigh");
  testing::add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
  expect_gradients_match(m, "^(X|grid)$");
}

// Under fp16 autocast the arithmetic on the grid stays fp32 however the grid was computed (here
// by a MatMul, which runs in fp16), the Gathers of X follow X, and the weighted sum is fp32 (a
// layer after it runs in fp16 again; were the sample the last low node, the Gathers would be fp32).
TEST(SpatialOps, GridSampleCoordinatesStayFp32UnderAutocast) {
  testing::ModelBuilder m(20);
  m.input("A", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
  m.input("B", onnx::TensorProto::FLOAT, {"4", "4"});
  m.input("G", onnx::TensorProto::FLOAT, {"1", "3", "5", "4"});
  m.input("H", onnx::TensorProto::FLOAT, {"4", "2"});
  m.input("K", onnx::TensorProto::FLOAT, {"5", "5"});
  m.node("MatMul", {"A", "B"}, {"X"}, "features");
  m.node("MatMul", {"G", "H"}, {"grid"}, "flow");
  m.node("GridSample", {"X", "grid"}, {"Y"}, "sample");
  m.node("MatMul", {"Y", "K"}, {"Z"}, "next_layer");
  m.output("Z");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "sample.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  PrecisionPolicy policy;
  policy.low = DType::kF16;
  Diagnostics diagnostics;
  ASSERT_TRUE(make_autocast_pass(policy)->run(**graph, PassContext{&diagnostics}).ok());
  int pinned = 0;
  int gathers_of_x = 0;
  for (const auto& node : (*graph)->nodes()) {
    const PrecisionDecision& d = node->precision();
    if (node->op_type() == "Slice") {
      // The grid's components: fp32 though the grid is fp16.
      EXPECT_EQ(d.compute, DType::kF32) << node->describe();
      EXPECT_EQ(d.reason, "sampling coordinates of node 'sample' (GridSample) stay fp32");
    }
    if (d.reason.find("sampling coordinates") != std::string::npos) {
      EXPECT_EQ(d.compute, DType::kF32) << node->describe();
      ++pinned;
    }
    if (node->op_type() == "Gather" && is_arithmetic_float(node->output(0)->dtype())) {
      EXPECT_EQ(d.compute, DType::kF16) << node->describe() << ": " << d.reason;
      ++gathers_of_x;
    }
    if (node->op_type() == "Mul" && node->num_operands() == 2 &&
        node->operand(0)->producer() != nullptr &&
        node->operand(0)->producer()->op_type() == "Gather") {
      EXPECT_EQ(d.compute, DType::kF32) << node->describe() << ": " << d.reason;
    }
  }
  EXPECT_GT(pinned, 10);
  EXPECT_EQ(gathers_of_x, 4);  // bilinear: four taps
}

TEST(SpatialOps, Col2ImErrorsNameTheNodeAndWhatIsWrong) {
  auto import_error = [](const std::vector<std::string>& input, bool known_image) {
    testing::ModelBuilder m(18);
    m.input("cols", onnx::TensorProto::FLOAT, input);
    if (known_image) {
      onnx::TensorProto& image = m.initializer("image", onnx::TensorProto::INT64, {2});
      image.add_int64_data(4);
      image.add_int64_data(4);
    } else {
      m.input("image", onnx::TensorProto::INT64, {"2"});
    }
    onnx::TensorProto& block = m.initializer("block", onnx::TensorProto::INT64, {2});
    block.add_int64_data(2);
    block.add_int64_data(2);
    m.node("Col2Im", {"cols", "image", "block"}, {"Y"}, "fold");
    m.output("Y");
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "fold.onnx");
    return graph.ok() ? std::string("imported") : std::string(graph.status().message());
  };
  EXPECT_EQ(import_error({"1", "8", "9"}, true), "imported");
  EXPECT_EQ(import_error({"1", "8", "9"}, false),
            "fold.onnx: node 'fold' (Col2Im): input 1 ('image') must be known at compile time");
  EXPECT_EQ(import_error({"1", "8", "8"}, true),
            "fold.onnx: node 'fold' (Col2Im): input is [1,8,8]; for image [4,4] and block [2,2] it "
            "must be "
            "[N, C * 4, 9]");
  EXPECT_EQ(import_error({"1", "6", "9"}, true),
            "fold.onnx: node 'fold' (Col2Im): input is [1,6,9]; for image [4,4] and block [2,2] it "
            "must be "
            "[N, C * 4, 9]");
}

TEST(SpatialOps, GridSampleErrorsNameTheNodeAndWhatIsWrong) {
  auto import_error =
      [](int64_t opset, const std::vector<std::string>& x, const std::vector<std::string>& grid,
         const std::vector<std::pair<std::string, std::string>>& strings, int64_t align = 0) {
        testing::ModelBuilder m(opset);
        m.input("X", onnx::TensorProto::FLOAT, x);
        m.input("grid", onnx::TensorProto::FLOAT, grid);
        onnx::NodeProto& node = m.node("GridSample", {"X", "grid"}, {"Y"}, "gs");
        for (const auto& [name, value] : strings) testing::add_string_attr(node, name, value);
        if (align != 0) testing::add_int_attr(node, "align_corners", align);
        m.output("Y");
        absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "gs.onnx");
        return graph.ok() ? std::string("imported") : std::string(graph.status().message());
      };
  const std::vector<std::string> x = {"1", "2", "3", "4"};
  const std::vector<std::string> grid = {"1", "5", "6", "2"};
  EXPECT_EQ(import_error(20, x, grid, {}), "imported");
  EXPECT_EQ(import_error(16, x, grid, {{"mode", "bicubic"}}), "imported");
  EXPECT_EQ(import_error(20, x, grid, {{"mode", "bilinear"}}),
            "gs.onnx: node 'gs' (GridSample): mode 'bilinear' is not one of linear, nearest, cubic "
            "(opset 20)");
  EXPECT_EQ(
      import_error(16, x, grid, {{"mode", "linear"}}),
      "gs.onnx: node 'gs' (GridSample): mode 'linear' is not one of bilinear, nearest, bicubic "
      "(opset 16)");
  EXPECT_EQ(import_error(20, x, grid, {{"padding_mode", "edge"}}),
            "gs.onnx: node 'gs' (GridSample): padding_mode 'edge' is not one of zeros, border, "
            "reflection");
  EXPECT_EQ(import_error(20, x, grid, {}, 2),
            "gs.onnx: node 'gs' (GridSample): align_corners is 2; it must be 0 or 1");
  EXPECT_EQ(import_error(16, {"1", "2", "3", "4", "5"}, {"1", "2", "3", "4", "3"}, {}),
            "gs.onnx: node 'gs' (GridSample): X is [1,2,3,4,5]; GridSample at opset 16 needs [N, "
            "C, H, W]");
  EXPECT_EQ(import_error(20, x, {"1", "5", "6", "3"}, {}),
            "gs.onnx: node 'gs' (GridSample): the grid is [1,5,6,3]; for X [1,2,3,4] it must be "
            "[1, O1, O2, 2]");
  EXPECT_EQ(import_error(20, x, {"2", "5", "6", "2"}, {}),
            "gs.onnx: node 'gs' (GridSample): the grid is [2,5,6,2]; for X [1,2,3,4] it must be "
            "[1, O1, O2, 2]");
  EXPECT_EQ(import_error(15, x, grid, {}),
            "gs.onnx: node 'gs' (GridSample): ampc implements GridSample from opset 16; the model "
            "imports "
            "opset 15");
}

TEST(SpatialOps, ErrorsNameTheNodeAndTheAttribute) {
  auto import_error = [](const testing::ModelBuilder& m) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "spatial.onnx");
    return graph.ok() ? std::string("imported") : std::string(graph.status().message());
  };
  {
    testing::ModelBuilder m(18);
    m.input("X", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
    m.input("scales", onnx::TensorProto::FLOAT, {"4"});
    m.node("Resize", {"X", "", "scales"}, {"Y"}, "resize");
    m.output("Y");
    EXPECT_NE(import_error(m).find("node 'resize' (Resize): input 2 ('scales') must be known at "
                                   "compile time"),
              std::string::npos)
        << import_error(m);
  }
  {
    testing::ModelBuilder m(18);
    m.input("X", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
    m.initializer_f32("scales", {4}, {1, 1, 2, 2});
    testing::add_string_attr(m.node("Resize", {"X", "", "scales"}, {"Y"}, "resize"),
                             "coordinate_transformation_mode", "tf_crop_and_resize");
    m.output("Y");
    EXPECT_NE(import_error(m).find("node 'resize' (Resize): ampc does not implement "
                                   "coordinate_transformation_mode 'tf_crop_and_resize'"),
              std::string::npos)
        << import_error(m);
  }
  {
    testing::ModelBuilder m(18);
    m.input("X", onnx::TensorProto::FLOAT, {"1", "2", "3", "4"});
    m.initializer_f32("scales", {3}, {1, 2, 2});
    testing::add_string_attr(m.node("Resize", {"X", "", "scales"}, {"Y"}, "resize"), "mode",
                             "bilinear");
    m.output("Y");
    EXPECT_NE(import_error(m).find("node 'resize' (Resize): mode 'bilinear' is not one of "
                                   "nearest, linear, cubic"),
              std::string::npos)
        << import_error(m);
  }
  {
    testing::ModelBuilder m(17);
    m.input("X", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    m.input("W", onnx::TensorProto::FLOAT, {"3", "2", "3", "3"});
    m.node("ConvTranspose", {"X", "W"}, {"Y"}, "up");
    m.output("Y");
    EXPECT_NE(import_error(m).find("node 'up' (ConvTranspose): W [3,2,3,3] does not fit X "
                                   "[1,4,3,3] with group 1"),
              std::string::npos)
        << import_error(m);
  }
  {
    testing::ModelBuilder m(17);
    m.input("X", onnx::TensorProto::FLOAT, {"1", "4", "3", "3"});
    m.input("W", onnx::TensorProto::FLOAT, {"4", "2", "3", "3"});
    testing::add_ints_attr(m.node("ConvTranspose", {"X", "W"}, {"Y"}, "up"), "pads", {4, 4, 4, 4});
    m.output("Y");
    EXPECT_NE(import_error(m).find("node 'up' (ConvTranspose): spatial axis 0 has no output"),
              std::string::npos)
        << import_error(m);
  }
}

}  // namespace
}  // namespace ampc
