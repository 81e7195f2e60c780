// f32 training against PyTorch: each model in models/, 20 steps of SGD with momentum, of AdamW
// and of SGD with gradient clipping, on the fixed batches of <model>.train_ref.npz (recorded by
// models/export_models.py). Losses per step within 1e-4 relative; final parameters and
// BatchNorm running statistics within 1e-4 of their norm. The model goes the whole way a user's
// does: the training compile, export to a file's bytes, import, TrainingSession.
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/npy.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

struct Trajectory {
  std::string model;
  std::string optimizer;  // the fixture's key prefix
};

void PrintTo(const Trajectory& t, std::ostream* os) { *os << t.model << "/" << t.optimizer; }

// The hyperparameters the models script used (models/README.md).
struct Recipe {
  OptimizerOptions options;
  float lr;
};
Recipe recipe(const std::string& optimizer) {
  Recipe r{OptimizerOptions{}, 0.05f};  // torch.optim.SGD(lr=0.05, momentum=0.9, wd=1e-4)
  if (optimizer == "adamw") {
    r.options.kind = OptimizerOptions::Kind::kAdamW;
    r.options.weight_decay = 0.01f;
    r.lr = 2e-3f;
  } else {
    r.options.kind = OptimizerOptions::Kind::kSgd;
    r.options.momentum = 0.9f;
    r.options.weight_decay = 1e-4f;
    if (optimizer == "sgd_clip") r.options.clip_grad_norm = 0.5f;
  }
  return r;
}

class TrainingTrajectory : public ::testing::TestWithParam<Trajectory> {};

TEST_P(TrainingTrajectory, MatchesPyTorchInF32) {
  const Trajectory& t = GetParam();
  absl::StatusOr<std::map<std::string, Tensor>> ref =
      read_npz(testing::source_path("models/" + t.model + ".train_ref.npz"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Recipe r = recipe(t.optimizer);
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer = r.options;
  options.training->lr = r.lr;
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + t.model + ".onnx"), options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_TRUE(diagnostics.warnings().empty()) << str_join(diagnostics.warnings(), "\n");
  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Graph>> imported = import_onnx_bytes(*bytes, t.model);
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      TrainingSession::create(*std::move(imported));
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->default_lr().has_value());
  EXPECT_EQ(static_cast<float>(*(*session)->default_lr()), r.lr);

  // batch.<input>: [4, ...input shape]; step i uses batch i % 4.
  std::map<std::string, Tensor> batches;
  for (const auto& [name, tensor] : *ref) {
    if (name.starts_with("batch.")) batches[name.substr(6)] = tensor;
  }
  ASSERT_FALSE(batches.empty());
  const Tensor& losses = ref->at(t.optimizer + ".loss");
  for (int64_t step = 0; step < losses.num_elements(); ++step) {
    std::map<std::string, Tensor> batch;
    for (const auto& [name, all] : batches) {
      TensorType type{all.dtype(), Shape(all.shape().begin() + 1, all.shape().end())};
      const int64_t bytes = type.byte_size();
      const int64_t index = step % all.shape()[0];
      std::vector<uint8_t> slice(all.bytes().begin() + index * bytes,
                                 all.bytes().begin() + (index + 1) * bytes);
      batch[name] = Tensor(type, std::move(slice));
    }
    absl::StatusOr<StepStats> stats = (*session)->step(batch, r.lr);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const double want = losses.element_as_double(step);
    EXPECT_LT(std::abs(stats->loss - want), 1e-4 * std::abs(want))
        << "step " << step << ": loss " << stats->loss << ", PyTorch " << want;
  }
  // Adam divides each gradient by its own running RMS, so an element whose gradient is zero in
  // exact arithmetic (a conv bias feeding a training-mode BatchNorm; the key third of an
  // attention bias, which softmax ignores) turns f32 rounding noise into full-size steps whose
  // direction is noise. Under Adam those elements are not compared: the ones whose PyTorch
  // gradient at the reference point is below 1e-7 (real gradients there are above 1e-4).
  std::map<std::string, Tensor> reference_grads;
  absl::StatusOr<std::map<std::string, Tensor>> grads =
      read_npz(testing::source_path("models/" + t.model + ".ref.npz"));
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (auto& [name, grad] : *grads) {
    if (name.starts_with("grad.")) reference_grads[name.substr(5)] = grad;
  }
  const bool adam = r.options.kind != OptimizerOptions::Kind::kSgd;
  int compared = 0;
  const std::string prefix = t.optimizer + ".final.";
  for (const auto& [name, want] : *ref) {
    if (!name.starts_with(prefix)) continue;
    const std::string state = name.substr(prefix.size());
    // A BatchNorm running mean follows the batch means of the conv before it, bias included;
    // under Adam those biases are the rounding-noise elements above, so the running means are
    // not compared there (the running variances, which no bias moves, are).
    if (adam && state.ends_with("running_mean")) continue;
    absl::StatusOr<Tensor> got = (*session)->state(state);
    ASSERT_TRUE(got.ok()) << got.status();
    const auto grad = reference_grads.find(state);
    double diff = 0;
    double norm = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      if (adam && grad != reference_grads.end() &&
          std::abs(grad->second.element_as_double(i)) < 1e-7) {
        continue;
      }
      const double w = want.element_as_double(i);
      diff += (got->element_as_double(i) - w) * (got->element_as_double(i) - w);
      norm += w * w;
    }
    EXPECT_LE(std::sqrt(diff), 1e-4 * std::sqrt(norm)) << state;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, TrainingTrajectory,
                         ::testing::Values(Trajectory{"mlp", "sgd"}, Trajectory{"mlp", "adamw"},
                                           Trajectory{"mlp", "sgd_clip"}, Trajectory{"cnn", "sgd"},
                                           Trajectory{"cnn", "adamw"},
                                           Trajectory{"tiny_gpt", "sgd"},
                                           Trajectory{"tiny_gpt", "adamw"}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.optimizer;
                         });

}  // namespace
}  // namespace ampc::runtime
