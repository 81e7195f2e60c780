// The passes that make a training model: append-loss (values against the losses' definitions
// computed here in double), training-step (the eval graph's eval mode), batchnorm-state (running
// statistics as state, with PyTorch's unbiased or ONNX's biased variance), and the file format
// that stores the eval graph and the step together (ONNX training_info).
#include <cmath>
#include <functional>
#include <limits>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "onnx/onnx_pb.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

absl::StatusOr<bool> run_pass(Pass& pass, Graph& graph) {
  Diagnostics diagnostics;
  return pass.run(graph, PassContext{&diagnostics});
}

// Runs a graph on the CPU backend and returns output `name`.
Tensor run_graph(std::unique_ptr<Graph> graph, const std::map<std::string, Tensor>& inputs,
                 const std::string& name) {
  absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> session =
      runtime::InferenceSession::create(std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs->at(name);
}

constexpr std::string_view kLogitsModel = R"(
    graph g(%x: f32[3,2]) opset(17) {
      init %w: f32[4,2] = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 1.0]
      %logits = Gemm<transB=1>(%x, %w) : f32[3,4]
      return %logits
    })";

TEST(AppendLoss, CrossEntropyIsTheMeanNegativeLogSoftmaxOfTheLabel) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kLogitsModel);
  ASSERT_NE(graph, nullptr);
  LossOptions options;
  options.label_input = "label";
  auto pass = make_append_loss_pass(options);
  ASSERT_TRUE(run_pass(*pass, *graph).ok());
  ASSERT_EQ(graph->inputs().size(), 2u);
  EXPECT_EQ(graph->inputs()[1]->name(), "label");
  EXPECT_EQ(graph->inputs()[1]->type(), (TensorType{DType::kI64, {3}}));
  EXPECT_EQ(graph->outputs().back()->name(), "loss");

  const std::vector<float> x = {1, 2, -1, 0.5f, 0.25f, -2};
  const std::vector<int64_t> label = {3, 0, 2};
  const std::vector<float> w = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f, 1, 1};
  double want = 0;
  for (int n = 0; n < 3; ++n) {
    std::vector<double> z(4);
    double sum = 0;
    for (int c = 0; c < 4; ++c) {
      z[c] = double{x[n * 2]} * w[c * 2] + double{x[n * 2 + 1]} * w[c * 2 + 1];
      sum += std::exp(z[c]);
    }
    want += (std::log(sum) - z[label[n]]) / 3;
  }
  const Tensor loss = run_graph(
      std::move(graph),
      {{"x", Tensor::from_f32({3, 2}, x)}, {"label", Tensor::from_i64({3}, label)}}, "loss");
  EXPECT_NEAR(loss.element_as_double(0), want, 1e-6 * std::abs(want));
}

TEST(AppendLoss, MseIsTheMeanSquaredDifference) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kLogitsModel);
  ASSERT_NE(graph, nullptr);
  LossOptions mse;
  mse.kind = LossOptions::Kind::kMse;
  mse.label_input = "target";
  auto pass = make_append_loss_pass(mse);
  ASSERT_TRUE(run_pass(*pass, *graph).ok());
  EXPECT_EQ(graph->inputs()[1]->type(), (TensorType{DType::kF32, {3, 4}}));
  const std::vector<float> x = {1, 0, 0, 1, 1, 1};
  // logits rows: w's columns picked by x: [0.5, 2, -0.75, 1], [-1, 0.25, 1.5, 1], their sum.
  const std::vector<double> logits = {0.5, 2, -0.75, 1, -1, 0.25, 1.5, 1, -0.5, 2.25, 0.75, 2};
  std::vector<float> target(12);
  double want = 0;
  for (int i = 0; i < 12; ++i) {
    target[i] = 0.125f * static_cast<float>(i);
    want += (logits[i] - target[i]) * (logits[i] - target[i]) / 12;
  }
  const Tensor loss = run_graph(
      std::move(graph),
      {{"x", Tensor::from_f32({3, 2}, x)}, {"target", Tensor::from_f32({3, 4}, target)}}, "loss");
  EXPECT_NEAR(loss.element_as_double(0), want, 1e-6 * want);
}

TEST(AppendLoss, ErrorsNameTheOutputOrInput) {
  const struct {
    std::string_view model;
    std::string prediction;
    std::string label_input;
    std::string_view needle;
  } cases[] = {
      {kLogitsModel, "", "", "--label-input"},
      {kLogitsModel, "scores", "y", "'scores'"},
      {R"(graph g(%x: f32[3,2], %y: f32[3]) opset(17) {
            init %w: f32[4,2] = elided
            %logits = Gemm<transB=1>(%x, %w) : f32[3,4]
            return %logits
          })",
       "", "y", "label input 'y' is f32[3]"},
      {R"(graph g(%x: f32[3,2]) opset(17) {
            %a = Relu(%x) : f32[3,2]
            %b = Neg(%x) : f32[3,2]
            return %a, %b
          })",
       "", "y", "--logits"},
      {R"(graph g(%x: f32[3,2]) opset(17) {
            %loss = Relu(%x) : f32[3,2]
            return %loss
          })",
       "", "y", "already has an output 'loss'"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(c.model);
    ASSERT_TRUE(graph.ok()) << graph.status();
    LossOptions options;
    options.prediction = c.prediction;
    options.label_input = c.label_input;
    auto pass = make_append_loss_pass(options);
    absl::StatusOr<bool> result = run_pass(*pass, **graph);
    ASSERT_FALSE(result.ok()) << c.needle;
    EXPECT_NE(std::string(result.status().message()).find(c.needle), std::string_view::npos)
        << result.status();
  }
}

constexpr std::string_view kBatchNormModel = R"(
    graph g(%x: f32[2,2,1,3]) opset(17) {
      init %scale: f32[2] = [1.0, 2.0]
      init %bias: f32[2] = [0.0, 0.5]
      init %mean: f32[2] = [0.5, -1.0]
      init %var: f32[2] = [2.0, 0.5]
      %y, %m, %v = BatchNormalization<momentum=0.75, training_mode=1>(%x, %scale, %bias, %mean, %var) : f32[2,2,1,3], f32[2], f32[2]
      %d = Dropout(%y) : f32[2,2,1,3]
      %loss = ReduceSum<keepdims=0>(%d) : f32[]
      return %loss, %d
    })";

TEST(TrainingStep, TheEvalGraphUsesRunningStatisticsAndNoDropout) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kBatchNormModel);
  ASSERT_NE(graph, nullptr);
  auto pass = make_training_step_pass();
  ASSERT_TRUE(run_pass(*pass, *graph).ok());
  ASSERT_NE(graph->training_step(), nullptr);
  // The step is the model as it was, its Dropout given a seed.
  std::unique_ptr<Graph> step = graph->training_step()->clone();
  EXPECT_EQ(step->name(), "g.train_step");
  step->set_name("g");
  std::string seeded(kBatchNormModel);
  seeded.replace(seeded.find("Dropout("), 8, "Dropout<seed=0>(");
  EXPECT_EQ(print_graph(*step), testing::canonical_text(seeded));
  int batch_norms = 0;
  for (const auto& node : graph->nodes()) {
    EXPECT_NE(node->op_type(), "Dropout");
    if (node->op_type() != "BatchNormalization") continue;
    ++batch_norms;
    EXPECT_EQ(node->int_attr("training_mode"), 0);
    EXPECT_EQ(node->num_outputs(), 1);
  }
  EXPECT_EQ(batch_norms, 1);
  EXPECT_FALSE(run_pass(*pass, *graph).ok());  // already a training model
}

// A Dropout that writes a graph output keeps the output's name in the eval graph, whatever it
// reads: a node's output takes the name over; a graph input, an initializer or another graph
// output cannot, so an Identity writes it (the eval graph is what `ampc train --export` writes).
TEST(TrainingStep, AnOutputADropoutWroteKeepsItsNameInTheEvalGraph) {
  for (const std::string read : {"%x", "%w", "%y", "%loss"}) {
    SCOPED_TRACE(read);
    std::unique_ptr<Graph> graph = testing::parse_or_fail(str_cat(R"(
        graph g(%x: f32[]) opset(17) {
          init %w: f32[] = [2.0]
          %y = Mul(%x, %w) : f32[]
          %loss = Neg(%y) : f32[]
          %logits = Dropout()",
                                                                  read, R"() : f32[]
          return %loss, %logits
        })"));
    ASSERT_NE(graph, nullptr);
    ASSERT_TRUE(run_pass(*make_training_step_pass(), *graph).ok());
    ASSERT_EQ(graph->outputs().size(), 2u);
    EXPECT_EQ(graph->outputs()[0]->name(), "loss");
    EXPECT_EQ(graph->outputs()[1]->name(), "logits");
    const Node* writer = graph->outputs()[1]->producer();
    ASSERT_NE(writer, nullptr);
    if (read == "%y") {
      EXPECT_EQ(writer->op_type(), "Mul");  // its output renamed
    } else {
      EXPECT_EQ(writer->op_type(), "Identity");
      EXPECT_EQ(writer->operand(0)->name(), read.substr(1));
    }
    for (const auto& node : graph->nodes()) EXPECT_NE(node->op_type(), "Dropout");
  }
}

// The warnings of the training-step pass on the graph `text`.
std::vector<std::string> training_step_warnings(const std::string& text) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return {"the graph did not parse"};
  Diagnostics diagnostics;
  const absl::StatusOr<bool> ran =
      make_training_step_pass()->run(*graph, PassContext{&diagnostics});
  EXPECT_TRUE(ran.ok()) << ran.status();
  return diagnostics.warnings();
}

// A BatchNormalization the file keeps in inference mode stays so in the step, with a warning
// that names it and says how a training-mode export is marked; one in training mode gets none.
TEST(TrainingStep, AnInferenceModeBatchNormIsReported) {
  for (int64_t training_mode : {0, 1}) {
    const std::vector<std::string> warnings = training_step_warnings(
        str_cat(R"(
        graph g(%x: f32[4,2]) opset(17) {
          init %scale: f32[2] = [1.0, 2.0]
          init %bias: f32[2] = [0.0, 0.5]
          init %mean: f32[2] = [0.0, 0.0]
          init %var: f32[2] = [1.0, 1.0]
          %y = BatchNormalization<training_mode=)",
                training_mode, R"(>(%x, %scale, %bias, %mean, %var) : f32[4,2]
          %loss = ReduceSum<keepdims=0>(%y) : f32[]
          return %loss
        })"));
    if (training_mode == 1) {
      EXPECT_TRUE(warnings.empty()) << warnings[0];
      continue;
    }
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("BatchNormalization producing 'y': the file has it normalize with "
                               "its running statistics"),
              std::string::npos)
        << warnings[0];
  }
}

// A scatter without a reduction whose constant indices write an element twice (as PyTorch's
// exporters write index_add) is reported with the element; distinct indices, a reduction or
// computed indices are not.
TEST(TrainingStep, AScatterThatWritesAnElementTwiceIsReported) {
  struct Case {
    std::string scatter;
    std::string indices;
    std::string element;  // empty: no warning
  };
  const std::vector<Case> cases = {
      // Row 1 of the indices writes column -2 (that is 1) and column 1.
      {"ScatterElements<axis=1>", "i64[2,2] = [0, 2, -2, 1]", "[1,1]"},
      {"ScatterElements<axis=1>", "i64[2,2] = [0, 2, 1, 2]", ""},
      {"ScatterElements<axis=0>", "i64[2,2] = [1, 0, 1, 1]", "[1,0]"},
      {"ScatterElements<axis=1, reduction=\"add\">", "i64[2,2] = [0, 0, 1, 1]", ""},
      {"ScatterND", "i64[2,1] = [1, -1]", "[1]"},
      {"ScatterND", "i64[2,1] = [1, 0]", ""},
  };
  for (const Case& c : cases) {
    const bool nd = c.scatter == "ScatterND";
    const std::vector<std::string> warnings = training_step_warnings(
        str_cat(R"(
        graph g(%x: f32[2,3]) opset(18) {
          init %i: )",
                c.indices, R"(
          init %u: )",
                nd ? "f32[2,3] = [1, 2, 3, 4, 5, 6]" : "f32[2,2] = [1, 2, 3, 4]", R"(
          %y = )",
                c.scatter, R"((%x, %i, %u) : f32[2,3]
          %loss = ReduceSum<keepdims=0>(%y) : f32[]
          return %loss
        })"));
    if (c.element.empty()) {
      EXPECT_TRUE(warnings.empty()) << c.indices << warnings[0];
      continue;
    }
    ASSERT_EQ(warnings.size(), 1u) << c.indices;
    EXPECT_NE(warnings[0].find(str_cat("producing 'y': its indices write element ", c.element,
                                       " of 'x' more than once")),
              std::string::npos)
        << warnings[0];
  }
}

// Three Dropouts of the same data, the second seeded by the file.
constexpr std::string_view kDropoutsModel = R"(
    graph g(%x: f32[64,64]) opset(17) {
      init %half: f32[] = [0.5]
      init %yes: bool[] = [true]
      %a = Dropout(%x, %half, %yes) : f32[64,64]
      %b = Dropout<seed=1>(%x, %half, %yes) : f32[64,64]
      %c = Dropout(%x, %half, %yes) : f32[64,64]
      %ab = Add(%a, %b) : f32[64,64]
      %abc = Add(%ab, %c) : f32[64,64]
      %loss = ReduceSum<keepdims=0>(%abc) : f32[]
      return %loss, %a, %b, %c
    })";

TEST(TrainingStep, EachDropoutOfTheStepDrawsItsOwnMask) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kDropoutsModel);
  ASSERT_NE(graph, nullptr);
  auto pass = make_training_step_pass();
  ASSERT_TRUE(run_pass(*pass, *graph).ok());
  ASSERT_NE(graph->training_step(), nullptr);
  // Seeds in graph order, the smallest not taken; the file's seed kept.
  std::vector<int64_t> seeds;
  for (const auto& node : graph->training_step()->nodes()) {
    if (node->op_type() == "Dropout") seeds.push_back(node->int_attr("seed"));
  }
  EXPECT_EQ(seeds, (std::vector<int64_t>{0, 1, 2}));

  // The masks, read from which elements each output keeps (x is all ones): each pair of
  // Dropouts disagrees on about half of the 4096 elements, as independent draws with ratio 0.5
  // do (the same seed would agree on all of them).
  std::map<std::string, Tensor> inputs = {
      {"x", Tensor::from_f32({64, 64}, std::vector<float>(64 * 64, 1.0f))}};
  std::vector<std::vector<double>> kept;
  for (const char* name : {"a", "b", "c"}) {
    kept.push_back(run_graph(graph->training_step()->clone(), inputs, name).to_double_vector());
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    for (size_t j = i + 1; j < kept.size(); ++j) {
      int differ = 0;
      for (size_t k = 0; k < kept[i].size(); ++k) differ += kept[i][k] != kept[j][k];
      EXPECT_GT(differ, 1800) << "outputs " << i << " and " << j;
      EXPECT_LT(differ, 2300) << "outputs " << i << " and " << j;
    }
  }
}

// x's channel 0 holds {1, 2, 3, 4, 5, 6} (n = 6), channel 1 {0, 0, 0, 1, 1, 1}.
std::map<std::string, Tensor> batch_norm_input() {
  return {{"x", Tensor::from_f32({2, 2, 1, 3}, {1, 2, 3, 0, 0, 0, 4, 5, 6, 1, 1, 1})}};
}

void expect_running_statistics(RunningVariance variance) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kBatchNormModel);
  ASSERT_NE(graph, nullptr);
  auto pass = make_batchnorm_state_pass(variance);
  ASSERT_TRUE(*run_pass(*pass, *graph));
  const std::vector<Graph::StateUpdate> want_updates = {{"mean", "mean.next"}, {"var", "var.next"}};
  EXPECT_EQ(graph->state_updates(), want_updates);
  std::unique_ptr<Graph> copy = graph->clone();
  const Tensor mean = run_graph(std::move(graph), batch_norm_input(), "mean.next");
  const Tensor var = run_graph(std::move(copy), batch_norm_input(), "var.next");
  // Batch means 3.5 and 0.5; biased variances 17.5/6 and 1.5/6 (sums of squared deviations over
  // n = 6); momentum 0.75 keeps that much of the old statistic.
  const double bessel = variance == RunningVariance::kUnbiased ? 6.0 / 5.0 : 1.0;
  const double want_mean[] = {0.75 * 0.5 + 0.25 * 3.5, 0.75 * -1.0 + 0.25 * 0.5};
  const double want_var[] = {0.75 * 2.0 + 0.25 * 17.5 / 6 * bessel,
                             0.75 * 0.5 + 0.25 * 1.5 / 6 * bessel};
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(mean.element_as_double(c), want_mean[c], 1e-6) << c;
    EXPECT_NEAR(var.element_as_double(c), want_var[c], 1e-6) << c;
  }
}

TEST(BatchNormState, RunningVarianceFromTheUnbiasedBatchVarianceLikePyTorch) {
  expect_running_statistics(RunningVariance::kUnbiased);
}

TEST(BatchNormState, RunningVarianceFromTheBiasedBatchVarianceLikeOnnx) {
  expect_running_statistics(RunningVariance::kBiased);
}

// A batch whose statistics are not finite (a NaN in the data; an infinity, as from a forward
// that overflowed f16) leaves both running statistics as they were, bit for bit; PyTorch's
// would hold NaN from then on. A batch of large finite values moves them as any other does.
TEST(BatchNormState, ABatchWithNonFiniteStatisticsLeavesTheRunningStatistics) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (float bad : {kNan, kInf, -kInf}) {
    SCOPED_TRACE(bad);
    std::unique_ptr<Graph> graph = testing::parse_or_fail(kBatchNormModel);
    ASSERT_NE(graph, nullptr);
    auto pass = make_batchnorm_state_pass(RunningVariance::kUnbiased);
    ASSERT_TRUE(*run_pass(*pass, *graph));
    std::map<std::string, Tensor> inputs = {
        {"x", Tensor::from_f32({2, 2, 1, 3}, {1, 2, 3, 0, 0, 0, 4, bad, 6, 1, 1, 1})}};
    std::unique_ptr<Graph> copy = graph->clone();
    EXPECT_EQ(run_graph(std::move(graph), inputs, "mean.next").to_double_vector(),
              (std::vector<double>{0.5, -1.0}));
    EXPECT_EQ(run_graph(std::move(copy), inputs, "var.next").to_double_vector(),
              (std::vector<double>{2.0, 0.5}));
  }
  // Channel 0 all 1e18 (its square, 1e36, is finite in f32): the running mean moves to it.
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kBatchNormModel);
  ASSERT_NE(graph, nullptr);
  auto pass = make_batchnorm_state_pass(RunningVariance::kUnbiased);
  ASSERT_TRUE(*run_pass(*pass, *graph));
  const std::map<std::string, Tensor> inputs = {
      {"x", Tensor::from_f32({2, 2, 1, 3},
                             {1e18f, 1e18f, 1e18f, 0, 0, 0, 1e18f, 1e18f, 1e18f, 1, 1, 1})}};
  const Tensor mean = run_graph(std::move(graph), inputs, "mean.next");
  EXPECT_NEAR(mean.element_as_double(0), 0.75 * 0.5 + 0.25 * 1e18, 1e12);
  EXPECT_NEAR(mean.element_as_double(1), 0.75 * -1.0 + 0.25 * 0.5, 1e-6);
}

// One BatchNorm module applied to two inputs (a siamese net's shared layer) is two nodes reading
// the same running statistics. As in PyTorch, where each call moves the buffers in place, the
// second moves what the first left, and the step has one update per statistic: the second's.
TEST(BatchNormState, AModuleAppliedTwiceMovesItsStatisticsTwiceInOrder) {
  constexpr std::string_view kShared = R"(
    graph g(%x: f32[2,2,1,3], %z: f32[2,2,1,3]) opset(17) {
      init %scale: f32[2] = [1.0, 2.0]
      init %bias: f32[2] = [0.0, 0.5]
      init %mean: f32[2] = [0.5, -1.0]
      init %var: f32[2] = [2.0, 0.5]
      %y, %m, %v = BatchNormalization<momentum=0.75, training_mode=1>(%x, %scale, %bias, %mean, %var) : f32[2,2,1,3], f32[2], f32[2]
      %y2, %m2, %v2 = BatchNormalization<momentum=0.75, training_mode=1>(%z, %scale, %bias, %mean, %var) : f32[2,2,1,3], f32[2], f32[2]
      %s = Add(%y, %y2) : f32[2,2,1,3]
      %loss = ReduceSum<keepdims=0>(%s) : f32[]
      return %loss
    })";
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kShared);
  ASSERT_NE(graph, nullptr);
  auto pass = make_batchnorm_state_pass(RunningVariance::kUnbiased);
  ASSERT_TRUE(*run_pass(*pass, *graph));
  const std::vector<Graph::StateUpdate> want_updates = {{"mean", "mean.next"}, {"var", "var.next"}};
  EXPECT_EQ(graph->state_updates(), want_updates);
  std::map<std::string, Tensor> inputs = batch_norm_input();
  // z's channel 0 holds {2, 4, 6, 8, 10, 12}, channel 1 {-3, 0, 3, -3, 0, 3} (n = 6).
  inputs.emplace("z", Tensor::from_f32({2, 2, 1, 3}, {2, 4, 6, -3, 0, 3, 8, 10, 12, -3, 0, 3}));
  std::unique_ptr<Graph> copy = graph->clone();
  const Tensor mean = run_graph(std::move(graph), inputs, "mean.next");
  const Tensor var = run_graph(std::move(copy), inputs, "var.next");
  // x: batch means 3.5 and 0.5, biased variances 17.5/6 and 1.5/6; z: 7 and 0, 70/6 and 36/6.
  const double x_mean[] = {3.5, 0.5}, x_var[] = {17.5 / 6, 1.5 / 6};
  const double z_mean[] = {7.0, 0.0}, z_var[] = {70.0 / 6, 36.0 / 6};
  const double start_mean[] = {0.5, -1.0}, start_var[] = {2.0, 0.5};
  for (int c = 0; c < 2; ++c) {
    const double after_x_mean = 0.75 * start_mean[c] + 0.25 * x_mean[c];
    const double after_x_var = 0.75 * start_var[c] + 0.25 * x_var[c] * 6 / 5;
    EXPECT_NEAR(mean.element_as_double(c), 0.75 * after_x_mean + 0.25 * z_mean[c], 1e-6) << c;
    EXPECT_NEAR(var.element_as_double(c), 0.75 * after_x_var + 0.25 * z_var[c] * 6 / 5, 1e-6) << c;
  }
}

// A training model written and read back is the same model: both graphs, the state bindings,
// which initializers are program constants, and the metadata; shared parameters are stored once.
TEST(TrainingModelFile, RoundTripsThroughOnnx) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/tiny_gpt.onnx"), options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph* step = (*graph)->training_step();
  ASSERT_NE(step, nullptr);
  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Graph>> read = import_onnx_bytes(*bytes, "tiny_gpt.train");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_NE((*read)->training_step(), nullptr);
  // Export writes attributes that the opset takes as inputs (Split's `split`) as initializers;
  // canonicalization moves them back, as it does for every imported model.
  for (Graph* g : {read->get(), (*read)->mutable_training_step()}) {
    PassPipeline pipeline;
    add_canonicalize_pipeline(pipeline);
    ASSERT_TRUE(pipeline.run(*g, PassContext{}).ok());
  }
  // The eval graph comes back unchanged but for the file's one opset list, which names the
  // step's ampc domain too.
  std::unique_ptr<Graph> eval_before = (*graph)->clone();
  eval_before->take_training_step();
  eval_before->set_opset(std::string(kAmpcDomain), 1);
  std::unique_ptr<Graph> eval_after = (*read)->clone();
  eval_after->take_training_step();
  EXPECT_TRUE(testing::same_lines(print_graph(*eval_after), print_graph(*eval_before)));
  EXPECT_EQ((*read)->metadata(), (*graph)->metadata());
  EXPECT_EQ((*read)->metadata().at(std::string(kMetadataOptimizer)), "adamw");
  // The step: the same nodes and bindings; its initializers may come back in another order
  // (shared ones are copied in where first read), so they are compared by name.
  const Graph& step_after = *(*read)->training_step();
  EXPECT_EQ(step_after.state_updates(), step->state_updates());
  ASSERT_EQ(step_after.num_nodes(), step->num_nodes());
  for (auto a = step_after.nodes().begin(), b = step->nodes().begin();
       a != step_after.nodes().end(); ++a, ++b) {
    EXPECT_EQ((*a)->op_type(), (*b)->op_type());
    EXPECT_EQ((*a)->name(), (*b)->name());
    EXPECT_EQ((*a)->attrs(), (*b)->attrs()) << (*a)->describe();
  }
  std::map<std::string, const Value*> before;
  for (const Value* init : step->initializers()) before[init->name()] = init;
  EXPECT_EQ(step_after.initializers().size(), before.size());
  int constants = 0;
  for (const Value* init : step_after.initializers()) {
    ASSERT_TRUE(before.contains(init->name())) << init->name();
    EXPECT_EQ(*init->initializer(), *before[init->name()]->initializer()) << init->name();
    EXPECT_EQ(init->is_constant(), before[init->name()]->is_constant()) << init->name();
    constants += init->is_constant();
  }
  EXPECT_GT(constants, 0);  // the attention mask, folded shapes, the optimizer's constant 1

  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  ASSERT_EQ(model.training_info_size(), 1);
  for (const onnx::TensorProto& init : model.training_info(0).algorithm().initializer()) {
    EXPECT_NE(init.name(), "tok_emb.weight");  // shared: stored in the eval graph only
  }
  EXPECT_EQ(model.training_info(0).update_binding_size(),
            static_cast<int>(step->state_updates().size()));
}

TEST(TrainingModelFile, MalformedTrainingInfoIsAnError) {
  CompileOptions options;
  options.training = TrainingOptions{};
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/mlp.onnx"), options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto good;
  ASSERT_TRUE(good.ParseFromString(*bytes));

  const struct {
    std::string_view needle;
    std::function<void(onnx::ModelProto&)> damage;
  } cases[] = {
      {"no output 'nowhere'",
       [](onnx::ModelProto& m) {
         m.mutable_training_info(0)->mutable_update_binding(0)->set_value("nowhere");
       }},
      {"no initializer 'ghost'",
       [](onnx::ModelProto& m) {
         m.mutable_training_info(0)->mutable_update_binding(0)->set_key("ghost");
       }},
      // A binding's key must name an initializer and its value an output, not the other way.
      {"no initializer '",
       [](onnx::ModelProto& m) {
         onnx::StringStringEntryProto& binding =
             *m.mutable_training_info(0)->mutable_update_binding(0);
         binding.set_key(binding.value());
       }},
      {"no output '",
       [](onnx::ModelProto& m) {
         onnx::StringStringEntryProto& binding =
             *m.mutable_training_info(0)->mutable_update_binding(0);
         binding.set_value(binding.key());
       }},
      {"bound twice",
       [](onnx::ModelProto& m) {
         *m.mutable_training_info(0)->add_update_binding() = m.training_info(0).update_binding(0);
       }},
      {"initialization graph",
       [](onnx::ModelProto& m) { m.mutable_training_info(0)->mutable_initialization(); }},
      {"2 training_info", [](onnx::ModelProto& m) { *m.add_training_info() = m.training_info(0); }},
      {"shadows",
       [](onnx::ModelProto& m) {
         *m.mutable_training_info(0)->mutable_algorithm()->add_initializer() =
             m.graph().initializer(0);
       }},
  };
  for (const auto& c : cases) {
    onnx::ModelProto model = good;
    c.damage(model);
    absl::StatusOr<std::unique_ptr<Graph>> read =
        import_onnx_bytes(model.SerializeAsString(), "damaged.onnx");
    ASSERT_FALSE(read.ok()) << c.needle;
    EXPECT_NE(std::string(read.status().message()).find(c.needle), std::string_view::npos)
        << read.status();
    EXPECT_NE(std::string(read.status().message()).find("damaged.onnx"), std::string_view::npos);
  }
}

TEST(TrainingCompile, BadOptimizerSettingsNameTheFlag) {
  const struct {
    std::function<void(TrainingOptions&)> set;
    std::string_view flag;
  } cases[] = {
      {[](TrainingOptions& o) { o.lr = -0.1f; }, "--lr"},
      {[](TrainingOptions& o) { o.lr = 0; }, "--lr"},
      {[](TrainingOptions& o) { o.optimizer.beta1 = 1; }, "--beta1"},
      {[](TrainingOptions& o) { o.optimizer.beta2 = 1.5f; }, "--beta2"},
      {[](TrainingOptions& o) { o.optimizer.momentum = 1; }, "--momentum"},
      {[](TrainingOptions& o) { o.optimizer.weight_decay = -1; }, "--weight-decay"},
      {[](TrainingOptions& o) { o.optimizer.epsilon = 0; }, "--eps"},
      {[](TrainingOptions& o) { o.optimizer.clip_grad_norm = -1; }, "--clip-grad-norm"},
      {[](TrainingOptions& o) { o.optimizer.nesterov = true; }, "--nesterov"},
  };
  for (const auto& c : cases) {
    TrainingOptions options;
    c.set(options);
    absl::Status status = validate_training_options(options);
    ASSERT_FALSE(status.ok()) << c.flag;
    EXPECT_NE(std::string(status.message()).find(c.flag), std::string_view::npos) << status;
  }
  EXPECT_TRUE(validate_training_options(TrainingOptions{}).ok());
}

}  // namespace
}  // namespace ampc
