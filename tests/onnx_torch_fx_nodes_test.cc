// What ampc reads from the FX node PyTorch's dynamo exporter records in each ONNX node's
// metadata_props (compiler/onnx_metadata.h; tests/onnx_torch_metadata_test.cc has the graph
// signature and the embedding's padding_idx): the detach() calls its optimizer removed, a batch
// norm's training mode and cross-entropy's label smoothing. The models are built by hand with
// those fields written as ONNX defines them. References: one SGD step's update worked out in f64
// from PyTorch's gradient formulas, and PyTorch's documented label-smoothing formula computed
// here in f64.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "runtime/training_session.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::add_metadata;
using testing::first_node;
using testing::fx_node;
using testing::import_ok;
using testing::kNodeMetadataField;
using testing::ModelBuilder;

// ---- detach() ---------------------------------------------------------------------------------

// x and w of the detach models.
constexpr float kX[] = {1.5f, 0.25f, -0.75f};
constexpr float kW[] = {0.5f, -1.0f, 2.0f};

// loss = sum(y * exp(detach(y))), y = x * w, as the dynamo exporter writes it: optimized, the
// Exp reads y itself and only its FX node names the detach; unoptimized, an Identity made from
// aten.detach stands between. `exp_args` is the Exp's FX arguments.
std::string detach_model(bool optimized, const std::string& exp_args = "%detach") {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"3"});
  b.initializer_f32("w", {3}, std::vector<float>(std::begin(kW), std::end(kW)));
  add_metadata(b.node("Mul", {"x", "w"}, {"mul"}, "mul"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("mul", "mul.Tensor", "%x, %p_w"));
  if (!optimized) {
    add_metadata(b.node("Identity", {"mul"}, {"detach"}, "detach"), kNodeMetadataField,
                 "pkg.torch.onnx.fx_node", fx_node("detach", "detach.default", "%mul"));
  }
  add_metadata(b.node("Exp", {optimized ? "mul" : "detach"}, {"exp"}, "exp"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("exp", "exp.default", exp_args));
  add_metadata(b.node("Mul", {"mul", "exp"}, {"prod"}, "prod"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("mul_1", "mul.Tensor", "%mul, %exp"));
  add_int_attr(b.node("ReduceSum", {"prod"}, {"loss"}, "sum"), "keepdims", 0);
  b.output("loss");
  return b.bytes();
}

// Compiles `graph` (input x [3], parameter w [3] = kW) for SGD at lr 1, runs one step on x = kX
// and expects each w[i] to move by minus grad(x[i], y[i] = x[i] * w[i]), computed in f64, within
// a few f32 ulps.
void expect_one_sgd_step(std::unique_ptr<Graph> graph,
                         const std::function<double(double x, double y)>& grad) {
  ASSERT_NE(graph, nullptr);
  CompileOptions options = testing::sgd_options(1.0f);
  options.training->autodiff.trainable = "^w$";
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<runtime::StepStats> stats = (*session)->step(
      {{"x", Tensor::from_f32({3}, std::vector<float>(std::begin(kX), std::end(kX)))}}, 1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<Tensor> after = (*session)->state("w");
  ASSERT_TRUE(after.ok()) << after.status();
  for (int i = 0; i < 3; ++i) {
    const double want = kW[i] - grad(kX[i], double(kX[i]) * kW[i]);
    EXPECT_NEAR(after->element_as_double(i), want, 4e-7 * std::max(1.0, std::abs(want)))
        << "w[" << i << "]";
  }
}

// PyTorch's gradient of sum(y * exp(detach(y))) by w is x * exp(x * w) (the detached factor is a
// constant); through the detach it would be x * exp(x * w) * (1 + x * w). One SGD step at lr 1
// moves w by minus the first, in f32 within a few ulps of the f64 figure.
TEST(TorchDetach, AnOptimizedAwayOrKeptDetachStopsTheGradient) {
  for (const bool optimized : {true, false}) {
    SCOPED_TRACE(optimized ? "optimized export" : "unoptimized export");
    expect_one_sgd_step(import_ok(detach_model(optimized)),
                        [](double x, double y) { return x * std::exp(y); });
  }
}

// A node of an aten call's decomposition: loss = sum(y * (y - x * x)) with y = x * w detached
// in the difference, which the exporter wrote as two nodes of one call rsub(%sq, %detach):
// t = Neg(sq), then d = Add(y, t), whose inputs are not the call's arguments in order (y is
// not %sq, t is the call's own). y, from outside the call and none of its other arguments, is
// what the detach took. d loss / d w = x * (y - x * x) (through the detach it would be
// x * (2y - x * x)).
TEST(TorchDetach, ADecomposedCallFindsTheDetachedInputAmongItsInputs) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"3"});
  b.initializer_f32("w", {3}, std::vector<float>(std::begin(kW), std::end(kW)));
  add_metadata(b.node("Mul", {"x", "w"}, {"mul"}, "mul"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("mul", "mul.Tensor", "%x, %p_w"));
  add_metadata(b.node("Mul", {"x", "x"}, {"sq"}, "sq"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("sq", "mul.Tensor", "%x, %x"));
  const std::string rsub = fx_node("rsub", "rsub.Tensor", "%sq, %detach");
  add_metadata(b.node("Neg", {"sq"}, {"neg"}, "neg"), kNodeMetadataField, "pkg.torch.onnx.fx_node",
               rsub);
  add_metadata(b.node("Add", {"mul", "neg"}, {"rsub"}, "add"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", rsub);
  add_metadata(b.node("Mul", {"mul", "rsub"}, {"prod"}, "prod"), kNodeMetadataField,
               "pkg.torch.onnx.fx_node", fx_node("mul_1", "mul.Tensor", "%mul, %rsub"));
  add_int_attr(b.node("ReduceSum", {"prod"}, {"loss"}, "sum"), "keepdims", 0);
  b.output("loss");
  expect_one_sgd_step(import_ok(b.bytes()), [](double x, double y) { return x * (y - x * x); });
}

// ---- BatchNormalization's training mode ---------------------------------------------------

// The dynamo exporter writes a batch norm that ran in training mode in its inference form (Y
// alone, no training_mode), normalizing by the running statistics; its FX node says training.
TEST(TorchBatchNorm, TrainingModeIsReadFromTheFxNode) {
  struct Case {
    std::string call;
    int64_t training_mode;
  };
  const std::string args =
      "(%conv, %p_bn_weight, %p_bn_bias, %b_bn_running_mean, "
      "%b_bn_running_var, ";
  for (const Case& c :
       {Case{"_native_batch_norm_legit_functional.default](args = " + args + "True, 0.1, 1e-05)",
             1},
        Case{"_native_batch_norm_legit_functional.default](args = " + args + "False, 0.1, 1e-05)",
             0},
        Case{"native_batch_norm.default](args = " + args + "True, 0.1, 1e-05)", 1},
        Case{"_native_batch_norm_legit_no_training.default](args = " + args + "0.1, 1e-05)", 0},
        Case{"", 0}}) {
    SCOPED_TRACE(c.call);
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
    for (const char* name : {"scale", "bias", "mean", "var"}) {
      b.initializer_f32(name, {3}, {1, 1, 1});
    }
    onnx::NodeProto& bn =
        b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn");
    if (!c.call.empty()) {
      add_metadata(bn, kNodeMetadataField, "pkg.torch.onnx.fx_node",
                   "%_native_batch_norm_legit_functional : [num_users=3] = call_function[target="
                   "torch.ops.aten." +
                       c.call + ", kwargs = {})");
    }
    b.output("y");
    std::unique_ptr<Graph> graph = import_ok(b.bytes());
    ASSERT_NE(graph, nullptr);
    EXPECT_EQ(first_node(*graph, "BatchNormalization")->int_attr("training_mode"), c.training_mode);
  }
}

// Written back, such a node is ONNX's training form from opset 14: training_mode 1 and exactly
// three outputs, Y and the running statistics (nothing reads those); one output would fail ONNX's
// checker and onnxruntime. References: the linked ONNX checker with strict shape inference (at
// opset 17, the newest it knows), and the re-imported node's Y on a batch, worked out in f64.
TEST(TorchBatchNorm, ATrainingModeNodeIsWrittenWithItsRunningStatisticsAsOutputs) {
  ModelBuilder b(17);
  b.input("x", onnx::TensorProto::FLOAT, {"2", "3", "2"});
  b.initializer_f32("scale", {3}, {1.0f, 2.0f, 0.5f});
  b.initializer_f32("bias", {3}, {0.0f, 1.0f, -1.0f});
  b.initializer_f32("mean", {3}, {5.0f, 5.0f, 5.0f});
  b.initializer_f32("var", {3}, {9.0f, 9.0f, 9.0f});
  add_metadata(b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn"),
               kNodeMetadataField, "pkg.torch.onnx.fx_node",
               "%_native_batch_norm_legit_functional : [num_users=3] = call_function[target="
               "torch.ops.aten._native_batch_norm_legit_functional.default](args = (%x, "
               "%p_bn_weight, %p_bn_bias, %b_bn_running_mean, %b_bn_running_var, True, 0.1, "
               "1e-05), kwargs = {})");
  b.output("y");
  std::unique_ptr<Graph> graph = import_ok(b.bytes());
  ASSERT_NE(graph, nullptr);
  const testing::Exported written = testing::export_and_find(*graph, "BatchNormalization");
  const onnx::NodeProto& bn = written.node;
  ASSERT_EQ(bn.output_size(), 3);
  EXPECT_EQ(bn.output(0), "y");
  EXPECT_FALSE(bn.output(1).empty());
  EXPECT_FALSE(bn.output(2).empty());
  EXPECT_NE(bn.output(1), bn.output(2));
  EXPECT_EQ(testing::onnx_checker_errors(written.bytes), "");

  std::unique_ptr<Graph> again = import_ok(written.bytes);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(first_node(*again, "BatchNormalization")->int_attr("training_mode"), 1);
  // x[n][c][s] = n + 2 s + c: per channel the batch is {c, c + 2, c + 1, c + 3}, mean c + 1.5,
  // population variance 1.25; Y normalizes with those, not the running mean 5 and variance 9.
  std::vector<float> x(12);
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      for (int s = 0; s < 2; ++s) x[(n * 3 + c) * 2 + s] = static_cast<float>(n + 2 * s + c);
    }
  }
  const std::vector<Tensor> y = testing::run_graph(*again, {Tensor::from_f32({2, 3, 2}, x)});
  ASSERT_EQ(y.size(), 1u);
  const double scale[] = {1.0, 2.0, 0.5}, bias[] = {0.0, 1.0, -1.0};
  for (int i = 0; i < 12; ++i) {
    const int c = (i / 2) % 3;
    const double want = (x[i] - (c + 1.5)) / std::sqrt(1.25 + 1e-5) * scale[c] + bias[c];
    EXPECT_NEAR(y[0].element_as_double(i), want, 1e-5 * (1 + std::abs(want))) << i;
  }
}

// ---- Cross-entropy's label smoothing -------------------------------------------------------

// PyTorch's cross_entropy with label_smoothing e, class-index targets, in f64: (1 - e) * the
// weighted NLL + e / C * the same reduction of -sum_c(w_c * log_softmax_c), both zero at ignored
// targets, a mean dividing both by the summed weights of the kept targets' classes.
std::vector<double> smoothed_cross_entropy(const std::vector<double>& x, int64_t classes,
                                           const std::vector<int64_t>& y,
                                           const std::vector<double>& w, double e,
                                           const std::string& reduction) {
  const auto n = static_cast<int64_t>(y.size());
  std::vector<double> nll(n, 0.0), smooth(n, 0.0);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] == -100) continue;
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < classes; ++c) max = std::max(max, x[i * classes + c]);
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(x[i * classes + c] - max);
    for (int64_t c = 0; c < classes; ++c) {
      const double log_prob = x[i * classes + c] - max - std::log(sum);
      smooth[i] -= w[c] * log_prob;
      if (c == y[i]) nll[i] = -w[c] * log_prob;
    }
    total += w[y[i]];
  }
  std::vector<double> loss;
  if (reduction == "none") {
    for (int64_t i = 0; i < n; ++i) loss.push_back((1 - e) * nll[i] + e / classes * smooth[i]);
    return loss;
  }
  double a = 0, b = 0;
  for (int64_t i = 0; i < n; ++i) a += nll[i], b += smooth[i];
  if (reduction == "mean") a /= total, b /= total;
  return {(1 - e) * a + e / classes * b};
}

// A SoftmaxCrossEntropyLoss node "ce" of `inputs` with output "loss", and the FX node the dynamo
// exporter records for it: aten.cross_entropy_loss called with `args`.
onnx::NodeProto& recorded_cross_entropy(ModelBuilder& b, const std::vector<std::string>& inputs,
                                        const std::string& args) {
  onnx::NodeProto& loss = b.node("SoftmaxCrossEntropyLoss", inputs, {"loss"}, "ce");
  add_metadata(loss, kNodeMetadataField, "pkg.torch.onnx.fx_node",
               "%cross_entropy_loss : [num_users=1] = call_function[target=torch.ops.aten."
               "cross_entropy_loss.default](args = (" +
                   args + "), kwargs = {})");
  b.output("loss");
  return loss;
}

TEST(TorchCrossEntropy, LabelSmoothingIsReadFromTheFxNodeAndComputedAsPyTorchDoes) {
  const int64_t classes = 4;
  const std::vector<double> x = {0.5, -1.0, 2.0, 0.25, 1.5, 1.5, -0.5, 0.0, -2.0, 0.75, 1.0, 3.0};
  const std::vector<int64_t> y = {2, -100, 3};
  for (const std::string reduction : {"mean", "sum", "none"}) {
    for (const bool weighted : {false, true}) {
      SCOPED_TRACE(str_cat(reduction, weighted ? ", class weights" : ""));
      const std::vector<double> w =
          weighted ? std::vector<double>{0.5, 1.0, 1.5, 2.0} : std::vector<double>(4, 1.0);
      ModelBuilder b;
      b.input("x", onnx::TensorProto::DOUBLE, {"3", "4"});
      b.input("y", onnx::TensorProto::INT64, {"3"});
      std::vector<std::string> inputs = {"x", "y"};
      std::string weight_arg = "None";
      if (weighted) {
        onnx::TensorProto& init = b.initializer("w", onnx::TensorProto::DOUBLE, {4});
        for (double v : w) init.add_double_data(v);
        inputs.push_back("w");
        weight_arg = "%b_w";
      }
      onnx::NodeProto& loss =
          recorded_cross_entropy(b, inputs, "%x, %y, " + weight_arg + ", 1, -100, 0.1");
      add_int_attr(loss, "ignore_index", -100);
      testing::add_string_attr(loss, "reduction", reduction);
      std::unique_ptr<Graph> graph = import_ok(b.bytes());
      ASSERT_NE(graph, nullptr);
      absl::StatusOr<std::vector<Tensor>> out = runtime::interpret_graph(
          *graph, {Tensor::from_doubles(DType::kF64, {3, 4}, x), Tensor::from_i64({3}, y)});
      ASSERT_TRUE(out.ok()) << out.status();
      const std::vector<double> want = smoothed_cross_entropy(x, classes, y, w, 0.1, reduction);
      ASSERT_EQ((*out)[0].num_elements(), static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i) {
        // f64 sums of 4 and 3 terms in another order.
        EXPECT_NEAR((*out)[0].element_as_double(static_cast<int64_t>(i)), want[i], 1e-14)
            << "element " << i;
      }
    }
  }
}

// Without ignore_index the mean divides by the number of positions; scores [N, C, d] put the
// class axis in the middle.
TEST(TorchCrossEntropy, LabelSmoothingWithoutIgnoredTargetsOverASpatialAxis) {
  const std::vector<double> x = {0.5, -1.0, 2.0, 0.25, 1.5, 1.5, -0.5, 0.0, -2.0, 0.75, 1.0, 3.0};
  const std::vector<int64_t> y = {2, 0};  // [N=1, d=2]; scores [1, 6, 2]: 6 classes
  ModelBuilder b;
  b.input("x", onnx::TensorProto::DOUBLE, {"1", "6", "2"});
  b.input("y", onnx::TensorProto::INT64, {"1", "2"});
  recorded_cross_entropy(b, {"x", "y"}, "%x, %y, None, 1, -100, 0.25");
  std::unique_ptr<Graph> graph = import_ok(b.bytes());
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::vector<Tensor>> out = runtime::interpret_graph(
      *graph, {Tensor::from_doubles(DType::kF64, {1, 6, 2}, x), Tensor::from_i64({1, 2}, y)});
  ASSERT_TRUE(out.ok()) << out.status();
  // The positions as rows of 6 classes: element (c, d) of the scores is x[c * 2 + d].
  std::vector<double> rows(12);
  for (int64_t d = 0; d < 2; ++d) {
    for (int64_t c = 0; c < 6; ++c) rows[d * 6 + c] = x[c * 2 + d];
  }
  const std::vector<double> want =
      smoothed_cross_entropy(rows, 6, y, std::vector<double>(6, 1.0), 0.25, "mean");
  EXPECT_NEAR((*out)[0].element_as_double(0), want[0], 1e-14);
}

// Class probabilities: PyTorch mixes them with the uniform distribution first, then takes the
// mean over the batch of -sum_c(w_c * q_c * log_softmax_c).
TEST(TorchCrossEntropy, LabelSmoothingOfClassProbabilities) {
  const std::vector<double> x = {0.5, -1.0, 2.0, 0.25, 1.5, 1.5, -0.5, 0.0};
  const std::vector<double> p = {0.5, 0.25, 0.25, 0.0, 0.0, 0.0, 1.0, 0.0};
  const std::vector<double> w = {0.5, 1.0, 1.5, 2.0};
  ModelBuilder b;
  b.input("x", onnx::TensorProto::DOUBLE, {"2", "4"});
  b.input("p", onnx::TensorProto::DOUBLE, {"2", "4"});
  onnx::TensorProto& init = b.initializer("w", onnx::TensorProto::DOUBLE, {4});
  for (double v : w) init.add_double_data(v);
  recorded_cross_entropy(b, {"x", "p", "w"}, "%x, %p, %b_w, 1, -100, 0.2");
  std::unique_ptr<Graph> graph = import_ok(b.bytes());
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::vector<Tensor>> out = runtime::interpret_graph(
      *graph,
      {Tensor::from_doubles(DType::kF64, {2, 4}, x), Tensor::from_doubles(DType::kF64, {2, 4}, p)});
  ASSERT_TRUE(out.ok()) << out.status();
  double want = 0;
  for (int64_t i = 0; i < 2; ++i) {
    double max = -INFINITY, sum = 0;
    for (int64_t c = 0; c < 4; ++c) max = std::max(max, x[i * 4 + c]);
    for (int64_t c = 0; c < 4; ++c) sum += std::exp(x[i * 4 + c] - max);
    for (int64_t c = 0; c < 4; ++c) {
      const double q = p[i * 4 + c] * (1 - 0.2) + 0.2 / 4;
      want -= w[c] * q * (x[i * 4 + c] - max - std::log(sum)) / 2;
    }
  }
  EXPECT_NEAR((*out)[0].element_as_double(0), want, 1e-14);
}

TEST(TorchCrossEntropy, WithoutLabelSmoothingTheOpStaysOneNode) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
  b.input("y", onnx::TensorProto::INT64, {"3"});
  recorded_cross_entropy(b, {"x", "y"}, "%x, %y, None, 1, -100, 0.0");
  std::unique_ptr<Graph> graph = import_ok(b.bytes());
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->num_nodes(), 1);
}

}  // namespace
}  // namespace ampc
