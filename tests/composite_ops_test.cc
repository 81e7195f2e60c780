// The ops lowered at import onto a few ops ampc has: Sum, Mean, Shrink, ThresholdedRelu, Hardmax,
// GlobalMaxPool, LRN, EyeLike, MaxUnpool, ReverseSequence (compiler/onnx_composite_ops.cc), and
// DFT, STFT, MelWeightMatrix and the windows (compiler/onnx_spectral_ops.cc: a MatMul by a
// transform matrix, constants). Their values are checked against ONNX's node tests (the
// conformance suites) and the references of tests/data/function_ops (PyTorch's and ONNX's
// definitions, by FunctionOpReference); here, their gradients against central differences in
// f64, the transforms' autocast pin, and their errors.
#include <random>

#include "compiler/onnx_io.h"
#include "compiler/precision_policy.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"

namespace ampc {
namespace {

using onnx::TensorProto;

using testing::add_weighted_loss;
using testing::expect_import_error;

// Gradients with respect to the inputs matching `wrt` against central differences.
void expect_gradients_match(const testing::ModelBuilder& m, const std::string& wrt) {
  testing::expect_onnx_gradients_match(m, wrt, 5);
}

void add_i64_initializer(testing::ModelBuilder& m, const std::string& name,
                         const std::vector<int64_t>& values) {
  m.initializer_i64(name, {static_cast<int64_t>(values.size())}, values);
}

void add_scalar(testing::ModelBuilder& m, const std::string& name, int64_t value) {
  m.initializer_i64(name, {}, {value});
}

// LRN with ONNX's window for an even size (1 channel before, 2 after, for size 4) at rank 3, and an
// odd size at rank 4 with the default alpha, beta and bias.
TEST(CompositeOpGradients, LocalResponseNormalization) {
  testing::ModelBuilder even(13);
  even.input("X", TensorProto::DOUBLE, {"2", "5", "3"});
  onnx::NodeProto& lrn = even.node("LRN", {"X"}, {"Y"}, "lrn");
  testing::add_int_attr(lrn, "size", 4);
  testing::add_float_attr(lrn, "alpha", 0.5f);
  testing::add_float_attr(lrn, "beta", 0.6f);
  testing::add_float_attr(lrn, "bias", 1.5f);
  add_weighted_loss(even, "Y", {"2", "5", "3"});
  expect_gradients_match(even, "^X$");

  testing::ModelBuilder odd(13);
  odd.input("X", TensorProto::DOUBLE, {"1", "4", "2", "3"});
  testing::add_int_attr(odd.node("LRN", {"X"}, {"Y"}, "lrn"), "size", 3);
  add_weighted_loss(odd, "Y", {"1", "4", "2", "3"});
  expect_gradients_match(odd, "^X$");
}

// MaxUnpool's input gradient reads dY at the positions written, through the unpooled layout
// and through the zeros an output_shape appends.
TEST(CompositeOpGradients, MaxUnpoolWithAndWithoutOutputShape) {
  for (bool grown : {false, true}) {
    testing::ModelBuilder m(11);
    m.input("X", TensorProto::DOUBLE, {"1", "2", "2", "3"});
    // Unpooled [1, 2, 4, 6]: one position in each 2 x 2 window of each plane (24 per plane).
    TensorProto& indices = m.initializer("I", TensorProto::INT64, {1, 2, 2, 3});
    for (int64_t v : {0, 3, 5, 13, 14, 23, 24, 27, 28, 43, 44, 47}) indices.add_int64_data(v);
    std::vector<std::string> inputs = {"X", "I"};
    if (grown) {
      add_i64_initializer(m, "output_shape", {1, 2, 5, 7});
      inputs.push_back("output_shape");
    }
    onnx::NodeProto& unpool = m.node("MaxUnpool", inputs, {"Y"}, "unpool");
    testing::add_ints_attr(unpool, "kernel_shape", {2, 2});
    testing::add_ints_attr(unpool, "strides", {2, 2});
    add_weighted_loss(m, "Y",
                      grown ? std::vector<std::string>{"1", "2", "5", "7"}
                            : std::vector<std::string>{"1", "2", "4", "6"});
    expect_gradients_match(m, "^X$");
  }
}

// ReverseSequence with lengths 4 (the whole axis), 0 and 2: every input position is read once.
TEST(CompositeOpGradients, ReverseSequence) {
  testing::ModelBuilder m(10);
  m.input("X", TensorProto::DOUBLE, {"4", "3", "2"});
  add_i64_initializer(m, "lens", {4, 0, 2});
  m.node("ReverseSequence", {"X", "lens"}, {"Y"}, "reverse");
  add_weighted_loss(m, "Y", {"4", "3", "2"});
  expect_gradients_match(m, "^X$");
}

// Shrink (softshrink: the gradient is 1 outside [-lambd, lambd], 0 inside), ThresholdedRelu,
// and a Mean of three broadcast inputs, whose gradients sum over the broadcast axes.
TEST(CompositeOpGradients, ShrinkThresholdedReluAndMean) {
  testing::ModelBuilder shrink(13);
  shrink.input("X", TensorProto::DOUBLE, {"3", "7"});
  onnx::NodeProto& node = shrink.node("Shrink", {"X"}, {"Y"}, "shrink");
  testing::add_float_attr(node, "lambd", 0.5f);
  testing::add_float_attr(node, "bias", 0.5f);
  add_weighted_loss(shrink, "Y", {"3", "7"});
  expect_gradients_match(shrink, "^X$");

  testing::ModelBuilder relu(13);
  relu.input("X", TensorProto::DOUBLE, {"3", "7"});
  testing::add_float_attr(relu.node("ThresholdedRelu", {"X"}, {"Y"}, "relu"), "alpha", 0.25f);
  add_weighted_loss(relu, "Y", {"3", "7"});
  expect_gradients_match(relu, "^X$");

  testing::ModelBuilder mean(13);
  mean.input("a", TensorProto::DOUBLE, {"3", "1"});
  mean.input("b", TensorProto::DOUBLE, {"1", "4"});
  mean.input("c", TensorProto::DOUBLE, {"4"});
  mean.node("Mean", {"a", "b", "c"}, {"Y"}, "mean");
  add_weighted_loss(mean, "Y", {"3", "4"});
  expect_gradients_match(mean, "^[abc]$");
}

// GlobalMaxPool's gradient goes to each plane's maximum; Hardmax gives none (its output is
// piecewise constant), so Hardmax(X) * X differentiates as a mask times X.
TEST(CompositeOpGradients, GlobalMaxPoolAndHardmax) {
  testing::ModelBuilder pool(13);
  pool.input("X", TensorProto::DOUBLE, {"2", "3", "2", "3"});
  pool.node("GlobalMaxPool", {"X"}, {"Y"}, "pool");
  add_weighted_loss(pool, "Y", {"2", "3", "1", "1"});
  expect_gradients_match(pool, "^X$");

  testing::ModelBuilder hardmax(13);
  hardmax.input("X", TensorProto::DOUBLE, {"3", "4"});
  hardmax.node("Hardmax", {"X"}, {"H"}, "hardmax");
  hardmax.node("Mul", {"H", "X"}, {"Y"}, "mask");
  add_weighted_loss(hardmax, "Y", {"3", "4"});
  expect_gradients_match(hardmax, "^X$");
}

TEST(CompositeOps, EyeLikeIsAConstantOfTheRequestedType) {
  testing::ModelBuilder m(13);
  m.input("X", TensorProto::FLOAT, {"3", "4"});
  onnx::NodeProto& eye = m.node("EyeLike", {"X"}, {"Y"}, "eye");
  testing::add_int_attr(eye, "k", -1);
  testing::add_int_attr(eye, "dtype", TensorProto::INT64);
  m.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "eye.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::vector<Tensor>> y =
      runtime::interpret_graph(**graph, {Tensor::from_f32({3, 4}, std::vector<float>(12, 7.0f))});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->at(0).dtype(), DType::kI64);
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t col = 0; col < 4; ++col) {
      EXPECT_EQ(y->at(0).element_as_i64(row * 4 + col), col == row - 1 ? 1 : 0) << row << col;
    }
  }
}

TEST(CompositeOps, ErrorsNameTheNodeAndWhatIsWrong) {
  testing::ModelBuilder no_size(13);
  no_size.input("X", TensorProto::FLOAT, {"1", "4", "3"});
  no_size.node("LRN", {"X"}, {"Y"}, "lrn");
  no_size.output("Y");
  expect_import_error(no_size, "node 'lrn' (LRN): attribute 'size' is missing");

  testing::ModelBuilder small(11);
  small.input("X", TensorProto::FLOAT, {"1", "1", "2", "2"});
  small.input("I", TensorProto::INT64, {"1", "1", "2", "2"});
  add_i64_initializer(small, "shape", {1, 1, 3, 2});
  testing::add_ints_attr(small.node("MaxUnpool", {"X", "I", "shape"}, {"Y"}, "unpool"),
                         "kernel_shape", {2, 2});
  small.output("Y");
  expect_import_error(small,
                      "node 'unpool' (MaxUnpool): output_shape is [1,1,3,2]; it must "
                      "keep N and C and hold the unpooled shape [1,1,3,3]");

  testing::ModelBuilder run_time(11);
  run_time.input("X", TensorProto::FLOAT, {"1", "1", "2", "2"});
  run_time.input("I", TensorProto::INT64, {"1", "1", "2", "2"});
  run_time.input("shape", TensorProto::INT64, {"4"});
  testing::add_ints_attr(run_time.node("MaxUnpool", {"X", "I", "shape"}, {"Y"}, "unpool"),
                         "kernel_shape", {2, 2});
  run_time.output("Y");
  expect_import_error(run_time,
                      "node 'unpool' (MaxUnpool): input 2 ('shape') must be known at "
                      "compile time");

  testing::ModelBuilder axes(10);
  axes.input("X", TensorProto::FLOAT, {"4", "3"});
  axes.input("lens", TensorProto::INT64, {"3"});
  onnx::NodeProto& reverse = axes.node("ReverseSequence", {"X", "lens"}, {"Y"}, "reverse");
  testing::add_int_attr(reverse, "batch_axis", 0);
  axes.output("Y");
  expect_import_error(axes, "node 'reverse' (ReverseSequence): batch_axis 0 and time_axis 0");

  testing::ModelBuilder mixed(13);
  mixed.input("a", TensorProto::FLOAT, {"2"});
  mixed.input("b", TensorProto::DOUBLE, {"2"});
  mixed.node("Sum", {"a", "b"}, {"Y"}, "total");
  mixed.output("Y");
  expect_import_error(mixed, "node 'total' (Sum): input 1 is f64 and input 0 is f32");

  // Sum before opset 6 (with consumed_inputs) is read through ONNX's version converter.
  testing::ModelBuilder old(5);
  old.input("a", TensorProto::FLOAT, {"2"});
  old.node("Sum", {"a", "a"}, {"Y"}, "total");
  old.output("Y");
  absl::StatusOr<std::unique_ptr<Graph>> converted = import_onnx_bytes(old.bytes(), "old.onnx");
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ((*converted)->metadata().at("ampc.converted_from_opset"), "5");

  testing::ModelBuilder hardmax(13);
  hardmax.input("X", TensorProto::FLOAT, {"2", "3"});
  testing::add_int_attr(hardmax.node("Hardmax", {"X"}, {"Y"}, "hardmax"), "axis", 2);
  hardmax.output("Y");
  expect_import_error(hardmax,
                      "node 'hardmax' (Hardmax): axis 2 is out of range for input of "
                      "rank 2");

  testing::ModelBuilder eye(13);
  eye.input("X", TensorProto::FLOAT, {"2", "3", "4"});
  eye.node("EyeLike", {"X"}, {"Y"}, "eye");
  eye.output("Y");
  expect_import_error(eye, "node 'eye' (EyeLike): input is [2,3,4]; it must be 2-D");

  testing::ModelBuilder ints(13);
  ints.input("X", TensorProto::INT64, {"2", "3"});
  ints.node("Shrink", {"X"}, {"Y"}, "shrink");
  ints.output("Y");
  expect_import_error(ints, "node 'shrink' (Shrink): input is i64; it must be float");
}

// The one-sided spectrum of a real signal padded from 6 to 8 positions along a middle axis, and
// the real inverse of a one-sided spectrum (bins 1 .. N/2-1 counted twice).
TEST(SpectralOpGradients, RfftPaddedAndIrfft) {
  testing::ModelBuilder rfft(20);
  rfft.input("x", TensorProto::DOUBLE, {"2", "6", "3", "1"});
  add_scalar(rfft, "n", 8);
  add_scalar(rfft, "axis", 1);
  testing::add_int_attr(rfft.node("DFT", {"x", "n", "axis"}, {"y"}, "rfft"), "onesided", 1);
  add_weighted_loss(rfft, "y", {"2", "5", "3", "2"});
  expect_gradients_match(rfft, "^x$");

  testing::ModelBuilder irfft(20);
  irfft.input("x", TensorProto::DOUBLE, {"2", "5", "2"});
  add_scalar(irfft, "n", 8);
  add_scalar(irfft, "axis", 1);
  onnx::NodeProto& node = irfft.node("DFT", {"x", "n", "axis"}, {"y"}, "irfft");
  testing::add_int_attr(node, "inverse", 1);
  testing::add_int_attr(node, "onesided", 1);
  add_weighted_loss(irfft, "y", {"2", "8", "1"});
  expect_gradients_match(irfft, "^x$");
}

// An STFT whose window is a graph input (a trained window gets a gradient too).
TEST(SpectralOpGradients, StftWithRespectToSignalAndWindow) {
  testing::ModelBuilder m(17);
  m.input("signal", TensorProto::DOUBLE, {"1", "12", "1"});
  m.input("window", TensorProto::DOUBLE, {"6"});
  add_scalar(m, "step", 3);
  m.node("STFT", {"signal", "step", "window"}, {"y"}, "stft");
  add_weighted_loss(m, "y", {"1", "3", "4", "2"});
  expect_gradients_match(m, "^(signal|window)$");
}

// Under autocast to fp16 the transform stays fp32 (PyTorch runs torch.fft in fp32), and says why.
TEST(SpectralOps, TransformStaysFp32UnderAutocast) {
  testing::ModelBuilder m(20);
  m.input("x", TensorProto::FLOAT, {"4", "16", "1"});
  testing::add_int_attr(m.node("DFT", {"x"}, {"y"}, "spectrum"), "onesided", 1);
  m.output("y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "dft.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  PrecisionPolicy policy;
  policy.low = DType::kF16;
  Diagnostics diagnostics;
  ASSERT_TRUE(make_autocast_pass(policy)->run(**graph, PassContext{&diagnostics}).ok());
  int matmuls = 0;
  for (const auto& node : (*graph)->nodes()) {
    if (node->op_type() != "MatMul") continue;
    ++matmuls;
    EXPECT_EQ(node->precision().compute, DType::kF32);
    EXPECT_EQ(node->precision().reason,
              "the Fourier transform of node 'spectrum' (DFT) stays fp32");
  }
  EXPECT_EQ(matmuls, 1);
}

TEST(SpectralOps, ErrorsNameTheNodeAndWhatIsWrong) {
  testing::ModelBuilder axis(17);
  axis.input("x", TensorProto::FLOAT, {"4", "8", "2"});
  testing::add_int_attr(axis.node("DFT", {"x"}, {"y"}, "dft"), "axis", 2);
  axis.output("y");
  expect_import_error(axis, "node 'dft' (DFT): axis 2 is out of range for a signal of rank 3");

  testing::ModelBuilder parts(17);
  parts.input("x", TensorProto::FLOAT, {"4", "8", "3"});
  parts.node("DFT", {"x"}, {"y"}, "dft");
  parts.output("y");
  expect_import_error(parts,
                      "node 'dft' (DFT): the signal is f32[4,8,3]; it must be float with 2 "
                      "or more axes, the last 1 (real) or 2 (complex)");

  testing::ModelBuilder length(20);
  length.input("x", TensorProto::FLOAT, {"4", "8", "1"});
  length.input("n", TensorProto::INT64, {});
  length.node("DFT", {"x", "n"}, {"y"}, "dft");
  length.output("y");
  expect_import_error(length, "node 'dft' (DFT): input 1 ('n') must be known at compile time");

  testing::ModelBuilder huge(20);
  huge.input("x", TensorProto::FLOAT, {"1", "16384", "2"});
  huge.node("DFT", {"x"}, {"y"}, "dft");
  huge.output("y");
  expect_import_error(huge,
                      "node 'dft' (DFT): a transform of length 16384 over 16384 positions "
                      "needs a 32768 x 32768 matrix (4096 MiB); ampc makes them up to "
                      "256 MiB");

  testing::ModelBuilder frames(17);
  frames.input("signal", TensorProto::FLOAT, {"1", "10", "1"});
  add_scalar(frames, "step", 2);
  add_scalar(frames, "frame", 16);
  frames.node("STFT", {"signal", "step", "", "frame"}, {"y"}, "stft");
  frames.output("y");
  expect_import_error(frames,
                      "node 'stft' (STFT): frames of 16 samples every 2 do not fit a "
                      "signal of 10");
}

}  // namespace
}  // namespace ampc
