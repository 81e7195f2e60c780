// Training parity: each example model trained 200 AdamW steps on its example data in bf16 and
// in fp16 with dynamic loss scaling (O1) reaches, on the held-out data, a loss within 2% of the
// same run in f32 from the same initial weights, with every step's loss finite. (The rate, 1e-3,
// keeps all three runs in the stable regime: at 3e-3 tiny_gpt's f32 run itself turns chaotic
// around step 75, and any rounding difference then grows into a different trajectory.)
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/batch_data.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

constexpr int kSteps = 200;
constexpr float kLr = 1e-3f;

struct TrainingRun {
  double eval_loss = NAN;
  int low_precision_nodes = 0;  // nodes of the training step computing in the low dtype
};

TrainingRun train(const std::string& model, DType low) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  options.training->optimizer.weight_decay = 0.01f;
  if (low != DType::kF32) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = low;
    options.mixed_precision->policy.low_source = "test";
  }
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + model + ".onnx"), options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return {};
  TrainingRun run;
  for (const auto& node : (*graph)->training_step()->nodes()) {
    run.low_precision_nodes += low != DType::kF32 && node->precision().compute == low;
  }
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::create(*std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  absl::StatusOr<BatchData> data = BatchData::load(
      testing::source_path("models/" + model + ".train.npz"), (*session)->batch_inputs());
  absl::StatusOr<BatchData> eval = BatchData::load(
      testing::source_path("models/" + model + ".eval.npz"), (*session)->eval_inputs());
  EXPECT_TRUE(data.ok() && eval.ok());
  if (!data.ok() || !eval.ok()) return {};
  for (int64_t i = 0; i < kSteps; ++i) {
    absl::StatusOr<StepStats> stats = (*session)->step(data->batch(i), kLr);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (!stats.ok() || !std::isfinite(stats->loss)) {
      ADD_FAILURE() << model << " " << dtype_name(low) << ": step " << i << " loss "
                    << (stats.ok() ? stats->loss : NAN);
      return {};
    }
  }
  double sum = 0;
  for (int64_t i = 0; i < eval->num_batches(); ++i) {
    absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->evaluate(eval->batch(i));
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok()) return {};
    sum += outputs->at((*session)->loss_name()).element_as_double(0);
  }
  run.eval_loss = sum / static_cast<double>(eval->num_batches());
  return run;
}

class MixedPrecisionTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedPrecisionTraining, Bf16AndFp16ReachTheF32LossWithin2Percent) {
  const TrainingRun f32 = train(GetParam(), DType::kF32);
  ASSERT_TRUE(std::isfinite(f32.eval_loss));
  EXPECT_EQ(f32.low_precision_nodes, 0);
  for (DType low : {DType::kBF16, DType::kF16}) {
    const TrainingRun run = train(GetParam(), low);
    EXPECT_GT(run.low_precision_nodes, 0) << dtype_name(low);
    ASSERT_TRUE(std::isfinite(run.eval_loss)) << dtype_name(low);
    EXPECT_LT(std::abs(run.eval_loss - f32.eval_loss), 0.02 * f32.eval_loss)
        << dtype_name(low) << ": " << run.eval_loss << ", f32 " << f32.eval_loss;
  }
}

// The mlp's loss multiplied by 1e-8 (and the rate by 1e8, so exact arithmetic would take the same
// steps): in fp16 its gradients fall below fp16's smallest subnormal, so without loss scaling
// nothing trains; with a dynamic scale (starting at 2^24) the same model trains.
double mean_loss_of_last_steps(bool scaling) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_file(testing::source_path("models/mlp.onnx"));
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return NAN;
  Graph& g = **graph;
  Value* loss = nullptr;
  int index = 0;
  for (int i = 0; i < static_cast<int>(g.outputs().size()); ++i) {
    if (g.outputs()[i]->name() == "loss") std::tie(loss, index) = std::make_pair(g.outputs()[i], i);
  }
  EXPECT_NE(loss, nullptr);
  Value* tiny = g.add_initializer("tiny", Tensor::from_f32({}, {1e-8f}));
  tiny->set_constant(true);
  Node* scaled = g.create_node(kOnnxDomain, "Mul", {loss, tiny}, {loss->type()});
  loss->set_name("loss.unscaled");
  scaled->output(0)->set_name("loss");
  g.set_output(index, scaled->output(0));

  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  options.training = TrainingOptions{};
  options.training->optimizer.momentum = 0.9f;
  if (scaling) {
    options.training->loss_scale = LossScaleOptions{};
    options.training->loss_scale->init = 16777216.0f;  // 2^24
    options.training->loss_scale->growth_interval = 20;
  } else {
    options.training->loss_scale_off = true;
  }
  Diagnostics diagnostics;
  absl::Status compiled = compile_graph(g, options, diagnostics);
  EXPECT_TRUE(compiled.ok()) << compiled;
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::create(*std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return NAN;
  absl::StatusOr<BatchData> data =
      BatchData::load(testing::source_path("models/mlp.train.npz"), (*session)->batch_inputs());
  EXPECT_TRUE(data.ok()) << data.status();
  double sum = 0;
  for (int64_t i = 0; i < 200; ++i) {
    absl::StatusOr<StepStats> stats = (*session)->step(data->batch(i), 0.05f * 1e8f);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (i >= 180) sum += stats->loss * 1e8 / 20;  // the cross-entropy itself
  }
  return sum;
}

TEST(LossScalingTraining, AnUnderflowingLossTrainsOnlyWithLossScaling) {
  const double without = mean_loss_of_last_steps(false);
  const double with = mean_loss_of_last_steps(true);
  // ln 10 = 2.303 is the loss of a model that knows nothing.
  EXPECT_GT(without, 2.2) << "without loss scaling";
  EXPECT_LT(with, 1.0) << "with loss scaling";
}

INSTANTIATE_TEST_SUITE_P(Models, MixedPrecisionTraining,
                         ::testing::Values("mlp", "cnn", "tiny_gpt"));

// Trains `model` (input %x: f32[4,6], output the loss) for 20 steps at fp16 with dynamic loss
// scaling and at bf16: every decision is made, every step's loss is finite, and the first step's
// loss and gradient norm agree with f32 within the low dtype's rounding (the same weights, the
// same batch).
void expect_trains_in_low_precision(std::string_view model) {
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i));
  const std::map<std::string, Tensor> batch = {{"x", Tensor::from_f32({4, 6}, x)}};
  std::map<DType, StepStats> first;
  for (DType low : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(low));
    std::unique_ptr<Graph> graph = testing::parse_or_fail(model);
    ASSERT_NE(graph, nullptr);
    CompileOptions options;
    options.training = TrainingOptions{};
    if (low != DType::kF32) {
      options.mixed_precision = MixedPrecisionOptions{};
      options.mixed_precision->policy.low = low;
      options.mixed_precision->policy.low_source = "test";
    }
    if (low == DType::kF16) {
      // Gradients near 4 times GradScaler's 65536 would overflow fp16 and skip step 1.
      LossScaleOptions scaling;
      scaling.init = 1024;
      options.training->loss_scale = scaling;
    }
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
    EXPECT_TRUE(diagnostics.warnings().empty()) << diagnostics.warnings()[0];
    for (const auto& node : graph->training_step()->nodes()) {
      EXPECT_FALSE(node->precision().reason.empty() && low != DType::kF32) << node->describe();
    }
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::create(std::move(graph));
    ASSERT_TRUE(session.ok()) << session.status();
    for (int step = 0; step < 20; ++step) {
      absl::StatusOr<StepStats> stats = (*session)->step(batch, 0.05f);
      ASSERT_TRUE(stats.ok()) << stats.status();
      ASSERT_TRUE(std::isfinite(stats->loss)) << "step " << step + 1;
      EXPECT_FALSE(stats->found_inf) << "step " << step + 1;
      if (step == 0) first[low] = *stats;
    }
  }
  for (const auto& [low, tolerance] :
       {std::pair{DType::kF16, 1e-2}, std::pair{DType::kBF16, 5e-2}}) {
    EXPECT_NEAR(first[low].loss, first[DType::kF32].loss, tolerance * first[DType::kF32].loss)
        << dtype_name(low);
    EXPECT_NEAR(first[low].grad_norm, first[DType::kF32].grad_norm,
                tolerance * first[DType::kF32].grad_norm)
        << dtype_name(low);
  }
}

constexpr std::string_view kWeights8x5 =
    "[0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.1, -0.3, 0.25, 0.15, -0.05, 0.1, 0.2, -0.25, 0.3, 0.05, "
    "-0.15, 0.1, 0.2, -0.1, 0.3, 0.1, -0.2, 0.05, 0.15, -0.3, 0.25, 0.1, -0.05, 0.2, 0.1, 0.3, "
    "-0.1, 0.05, -0.2, 0.15, 0.25, -0.15, 0.1, 0.2]";

// The layer mix of other exports: reflect Pad, Sin, Tile, CumSum and HardSwish around a MatMul.
TEST(MixedPrecisionTraining, OtherLayerMixesTrainInLowPrecision) {
  expect_trains_in_low_precision(str_cat(R"(
    graph g(%x: f32[4,6]) opset(17) {
      init %w: f32[8,5] = )",
                                         kWeights8x5, R"(
      init %pads: i64[4] = [0, 1, 0, 1]
      init %repeats: i64[2] = [1, 2]
      init %axis: i64[] = [1]
      %p = Pad<mode="reflect">(%x, %pads) {name="pad"} : f32[4,8]
      %h = MatMul(%p, %w) {name="mm"} : f32[4,5]
      %s = Sin(%h) {name="sin"} : f32[4,5]
      %t = Tile(%s, %repeats) {name="tile"} : f32[4,10]
      %c = CumSum(%t, %axis) {name="cumsum"} : f32[4,10]
      %a = HardSwish(%c) {name="hardswish"} : f32[4,10]
      %sq = Mul(%a, %a) {name="square"} : f32[4,10]
      %loss = ReduceMean<keepdims=0>(%sq) {name="mean"} : f32[]
      return %loss
    })"));
}

// The ELU family, Mish, Softsign and a PRelu with a trained per-feature slope.
TEST(MixedPrecisionTraining, ExponentialActivationsAndPReluTrainInLowPrecision) {
  expect_trains_in_low_precision(str_cat(R"(
    graph g(%x: f32[4,6]) opset(18) {
      init %w: f32[8,5] = )",
                                         kWeights8x5, R"(
      init %slope: f32[5] = [0.25, 0.1, -0.1, 0.2, 0.3]
      init %pads: i64[4] = [0, 1, 0, 1]
      %p = Pad<mode="reflect">(%x, %pads) {name="pad"} : f32[4,8]
      %h = MatMul(%p, %w) {name="mm"} : f32[4,5]
      %r = PRelu(%h, %slope) {name="prelu"} : f32[4,5]
      %e = Elu<alpha=0.5>(%r) {name="elu"} : f32[4,5]
      %s = Selu(%e) {name="selu"} : f32[4,5]
      %c = Celu<alpha=2.0>(%s) {name="celu"} : f32[4,5]
      %m = Mish(%c) {name="mish"} : f32[4,5]
      %a = Softsign(%m) {name="softsign"} : f32[4,5]
      %sq = Mul(%a, %a) {name="square"} : f32[4,5]
      %loss = ReduceMean<keepdims=0>(%sq) {name="mean"} : f32[]
      return %loss
    })"));
}

// BCEWithLogitsLoss(pos_weight) as the dynamo exporter writes it, (1 - y) x - (1 + (pw - 1) y)
// log(sigmoid(x)), on logits that a bf16 Gemm computes exactly (small integers and halves). Its
// terms cancel where a prediction is confident and right (x = -6, y = 0: -6 + 6.0025): rounded
// to bf16, as the element-wise ops would be if they followed the Gemm's bf16, the loss and its
// gradient there would be lost. Nothing after the Gemm computes low, so they compute in fp32:
// the loss is the f64 formula's within f32 rounding, and the gradient norm within the one bf16
// rounding of the logits' gradient (the Cast's gradient) and that of the weight gradient's GEMM.
TEST(MixedPrecisionTraining, Bf16LossOfExactLogitsIsTheF64LossWithinF32Rounding) {
  constexpr std::string_view kModel = R"(
    graph g(%x: f32[4,2], %y: f32[4,3]) opset(18) {
      init %w: f32[3,2] = [-6.0, 5.0, 4.0, -7.0, 3.0, 3.0]
      init %b: f32[3] = [0.0, 0.5, -1.0]
      init %pw: f32[3] = [0.5, 1.0, 2.0]
      init %one: f32[] = [1.0]
      %logits = Gemm<transB=1>(%x, %w, %b) {name="linear"} : f32[4,3]
      %pw1 = Sub(%pw, %one) {name="sub"} : f32[3]
      %py = Mul(%pw1, %y) {name="mul"} : f32[4,3]
      %l = Add(%py, %one) {name="add"} : f32[4,3]
      %ny = Sub(%one, %y) {name="sub_1"} : f32[4,3]
      %lin = Mul(%ny, %logits) {name="mul_1"} : f32[4,3]
      %s = Sigmoid(%logits) {name="sigmoid"} : f32[4,3]
      %ls = Log(%s) {name="log_sigmoid"} : f32[4,3]
      %wls = Mul(%l, %ls) {name="mul_2"} : f32[4,3]
      %terms = Sub(%lin, %wls) {name="sub_2"} : f32[4,3]
      %loss = ReduceMean<keepdims=0>(%terms) {name="mean"} : f32[]
      return %loss
    })";
  const std::vector<float> x = {1, 0, 0, 1, 1, 1, 1, -1};
  const std::vector<float> w = {-6, 5, 4, -7, 3, 3};
  const std::vector<float> b = {0, 0.5f, -1};
  const std::vector<float> pw = {0.5f, 1, 2};
  // Right where the logit is positive: the confident ones (|x| >= 4) are most of them.
  const std::vector<float> y = {0, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 0};

  // The f64 reference: the loss, and the gradients of w and b (their norm).
  double loss = 0;
  std::vector<double> dw(6, 0.0);
  std::vector<double> db(3, 0.0);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      const double logit = x[2 * i] * w[2 * j] + x[2 * i + 1] * w[2 * j + 1] + b[j];
      const double target = y[3 * i + j];
      const double weight = 1 + (pw[j] - 1) * target;
      const double log_sigmoid = -(std::max(-logit, 0.0) + std::log1p(std::exp(-std::abs(logit))));
      loss += ((1 - target) * logit - weight * log_sigmoid) / 12;
      const double g = ((1 - target) - weight / (1 + std::exp(logit))) / 12;
      db[j] += g;
      dw[2 * j] += g * x[2 * i];
      dw[2 * j + 1] += g * x[2 * i + 1];
    }
  }
  double squares = 0;
  for (double d : dw) squares += d * d;
  for (double d : db) squares += d * d;
  const double grad_norm = std::sqrt(squares);

  std::unique_ptr<Graph> graph = testing::parse_or_fail(kModel);
  ASSERT_NE(graph, nullptr);
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->autodiff.freeze = "^(pw|one)$";
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low = DType::kBF16;
  options.mixed_precision->policy.low_source = "test";
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
  for (const auto& node : graph->nodes()) {
    if (node->op_type() == "Gemm") {
      EXPECT_EQ(node->precision().compute, DType::kBF16);
    }
  }
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<StepStats> stats = (*session)->step(
      {{"x", Tensor::from_f32({4, 2}, x)}, {"y", Tensor::from_f32({4, 3}, y)}}, 0.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->loss, loss, 1e-5 * loss);
  EXPECT_NEAR(stats->grad_norm, grad_norm, 0x1p-8 * grad_norm);
}

}  // namespace
}  // namespace ampc::runtime
