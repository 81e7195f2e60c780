// Gradient accumulation (`--accumulate K`), against its definition: K micro-batches of a
// mean-reduced loss update the weights as one batch K times as large does (exactly up to f32
// rounding in f32, within fp16 rounding at fp16); the loss scale holds across the K micro-steps;
// an overflow in any micro-step skips the whole update once and leaves nothing behind.
#include <cmath>
#include <random>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/training_session.h"
#include "tests/runtime/mlp_training_util.h"
#include "tests/runtime/training_test_util.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

using testing::mlp_model;
using testing::relative_update_gap;
using testing::uniform;

constexpr int kMicroBatch = 8;
constexpr int kAccumulate = 4;

struct RunSetup {
  int batch = kMicroBatch;
  int64_t accumulate = 1;
  bool fp16 = false;
  OptimizerOptions::Kind optimizer = OptimizerOptions::Kind::kSgd;
  std::optional<LossScaleOptions> loss_scale;  // with fp16; unset: GradScaler's defaults
};

RunSetup run_setup(int batch, int64_t accumulate, bool fp16,
                   OptimizerOptions::Kind optimizer = OptimizerOptions::Kind::kSgd) {
  RunSetup setup;
  setup.batch = batch;
  setup.accumulate = accumulate;
  setup.fp16 = fp16;
  setup.optimizer = optimizer;
  return setup;
}

std::unique_ptr<TrainingSession> open(const RunSetup& setup) {
  CompileOptions options;
  if (setup.fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
  }
  options.training = TrainingOptions{};
  options.training->optimizer.kind = setup.optimizer;
  options.training->accumulate = setup.accumulate;
  options.training->loss_scale = setup.loss_scale;
  return testing::compile_training_session(mlp_model(setup.batch), options);
}

using Batch = std::map<std::string, Tensor>;

// `count` micro-batches of kMicroBatch rows, and the same rows as one batch.
struct Data {
  std::vector<Batch> micro;
  Batch whole;
};

Data make_data(uint32_t seed, int count = kAccumulate) {
  std::mt19937 rng(seed);
  const std::vector<float> x = uniform(rng, static_cast<size_t>(count) * kMicroBatch * 4, 1.0f);
  const std::vector<float> t = uniform(rng, static_cast<size_t>(count) * kMicroBatch * 3, 1.0f);
  Data data;
  for (int i = 0; i < count; ++i) {
    const auto rows = [&](const std::vector<float>& all, int width) {
      return std::vector<float>(all.begin() + i * kMicroBatch * width,
                                all.begin() + (i + 1) * kMicroBatch * width);
    };
    data.micro.push_back({{"x", Tensor::from_f32({kMicroBatch, 4}, rows(x, 4))},
                          {"t", Tensor::from_f32({kMicroBatch, 3}, rows(t, 3))}});
  }
  const int64_t n = static_cast<int64_t>(count) * kMicroBatch;
  data.whole = {{"x", Tensor::from_f32({n, 4}, x)}, {"t", Tensor::from_f32({n, 3}, t)}};
  return data;
}

std::vector<double> state(const TrainingSession& session, std::string_view name) {
  absl::StatusOr<Tensor> value = session.state(name);
  EXPECT_TRUE(value.ok()) << name << ": " << value.status();
  return value.ok() ? value->to_double_vector() : std::vector<double>{};
}

constexpr std::string_view kParameters[] = {"w1", "b1", "w2"};

// Three steps of both sessions on the same rows; the weights' updates agree within `tolerance`.
void expect_same_training(const RunSetup& accumulating, const RunSetup& whole, float lr,
                          double tolerance) {
  std::unique_ptr<TrainingSession> a = open(accumulating);
  std::unique_ptr<TrainingSession> b = open(whole);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->accumulation_steps(), kAccumulate);
  ASSERT_EQ(b->accumulation_steps(), 1);
  std::map<std::string_view, std::vector<double>> start;
  for (std::string_view name : kParameters) start[name] = state(*b, name);
  for (uint32_t step = 0; step < 3; ++step) {
    const Data data = make_data(100 + step);
    absl::StatusOr<StepStats> sa = a->step(data.micro, lr);
    absl::StatusOr<StepStats> sb = b->step(data.whole, lr);
    ASSERT_TRUE(sa.ok() && sb.ok()) << sa.status() << sb.status();
    EXPECT_EQ(sa->step, step + 1);
    EXPECT_FALSE(sa->found_inf);
    // The mean of the micro-batches' mean losses is the whole batch's mean loss.
    EXPECT_NEAR(sa->loss, sb->loss, tolerance * sb->loss) << "step " << step + 1;
    EXPECT_NEAR(sa->grad_norm, sb->grad_norm, tolerance * sb->grad_norm) << "step " << step + 1;
  }
  for (std::string_view name : kParameters) {
    EXPECT_LT(relative_update_gap(start[name], state(*a, name), state(*b, name)), tolerance)
        << name;
  }
}

TEST(GradientAccumulation, FourMicroBatchesStepLikeOneBatchFourTimesAsLargeInF32) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    SCOPED_TRACE(kind == OptimizerOptions::Kind::kSgd ? "sgd" : "adamw");
    const RunSetup accumulating = run_setup(kMicroBatch, kAccumulate, false, kind);
    const RunSetup whole = run_setup(kMicroBatch * kAccumulate, 1, false, kind);
    expect_same_training(accumulating, whole, 0.05f, 1e-5);
  }
}

// At fp16 the MatMuls' batch reductions round to fp16 once per micro-batch instead of once:
// agreement within fp16's rounding (2^-11 relative), not bit for bit.
TEST(GradientAccumulation, FourMicroBatchesStepLikeOneBatchFourTimesAsLargeInFp16) {
  const RunSetup accumulating = run_setup(kMicroBatch, kAccumulate, true);
  const RunSetup whole = run_setup(kMicroBatch * kAccumulate, 1, true);
  expect_same_training(accumulating, whole, 0.05f, 5e-3);
}

// Overflow in micro-step 2 of 4: the update is skipped once (parameters, moments, step counter
// bit-identical), the scale backs off once, the skipped count is 1, the sums are cleared; the
// next window then updates exactly as a fresh run from the same state with the halved scale.
TEST(GradientAccumulation, AnOverflowInMicroStepTwoSkipsTheUpdateOnce) {
  const RunSetup setup = run_setup(kMicroBatch, kAccumulate, true, OptimizerOptions::Kind::kAdamW);
  std::unique_ptr<TrainingSession> session = open(setup);
  ASSERT_TRUE(session);
  const std::vector<std::string> names = session->state_names();
  std::map<std::string, std::vector<double>> before;
  for (const std::string& name : names) before[name] = state(*session, name);

  Data first = make_data(1);
  std::vector<float> big(kMicroBatch * 4, 1.0f);
  big[5] = 1e5f;  // past fp16's largest finite value (65504): inf once cast for fc1
  first.micro[1]["x"] = Tensor::from_f32({kMicroBatch, 4}, big);
  absl::StatusOr<StepStats> stats = session->step(first.micro, 1e-2f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->found_inf);
  EXPECT_EQ(stats->skipped_steps, 1);
  EXPECT_EQ(stats->loss_scale, 65536.0);
  for (const std::string& name : names) {
    if (name.starts_with("loss_scale")) continue;
    EXPECT_EQ(state(*session, name), before[name]) << name << " changed on a skipped update";
  }
  EXPECT_EQ(state(*session, "loss_scale"), std::vector<double>{32768.0});  // halved once, not K×
  EXPECT_EQ(state(*session, "loss_scale.growth_tracker"), std::vector<double>{0.0});
  EXPECT_EQ(state(*session, "loss_scale.skipped_steps"), std::vector<double>{1.0});

  // The next window applies, from state equal to a fresh run's with the scale halved.
  std::unique_ptr<TrainingSession> fresh = open(setup);
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(fresh->set_state("loss_scale", Tensor::from_f32({}, {32768.0f})).ok());
  const Data second = make_data(2);
  stats = session->step(second.micro, 1e-2f);
  absl::StatusOr<StepStats> fresh_stats = fresh->step(second.micro, 1e-2f);
  ASSERT_TRUE(stats.ok() && fresh_stats.ok()) << stats.status() << fresh_stats.status();
  EXPECT_FALSE(stats->found_inf);
  EXPECT_EQ(stats->skipped_steps, 1);
  EXPECT_NE(state(*session, "w1"), before["w1"]);
  for (std::string_view name : kParameters) {
    EXPECT_EQ(state(*session, name), state(*fresh, name)) << name;
  }
  EXPECT_EQ(state(*session, "optimizer.step"), std::vector<double>{1.0});
}

// Each micro-step's gradients are of the loss's share, loss / K, at the scale (PyTorch's recipe,
// `scaler.scale(loss / K).backward()`), so they overflow where PyTorch's do, not K times sooner.
// y = x w in fp16 (MatMul is on the allow list), loss = sum(y): the gradient reaching the fp16
// MatMul's output is S / K = 65536 / 4 = 16384 and w's is x times that, 32768, both below fp16's
// largest value (65504); the full loss's would be 65536, inf in fp16. IEEE figures: the window's
// mean gradient is x = 2 exactly, so SGD at lr 0.5 takes w from 1 to 0.
TEST(GradientAccumulation, MicroStepsScaleTheLossShareAsPyTorchsRecipeDoes) {
  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  options.training = TrainingOptions{};
  options.training->accumulate = kAccumulate;
  std::unique_ptr<TrainingSession> session = testing::compile_training_session(R"(
    graph g(%x: f32[1,1]) opset(17) {
      init %w: f32[1,1] = [1]
      %y = MatMul(%x, %w) {name="mm"} : f32[1,1]
      %loss = ReduceSum<keepdims=0>(%y) {name="sum"} : f32[]
      return %loss
    })",
                                                                               options);
  ASSERT_TRUE(session);
  const std::vector<Batch> micro(kAccumulate, Batch{{"x", Tensor::from_f32({1, 1}, {2.0f})}});
  absl::StatusOr<StepStats> stats = session->step(micro, 0.5f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->found_inf);
  EXPECT_EQ(stats->loss_scale, 65536.0);
  EXPECT_EQ(stats->grad_norm, 2.0);
  EXPECT_EQ(state(*session, "w"), std::vector<double>{0.0});
}

// The scale holds across the micro-steps: with a growth interval of 1 it doubles once per
// update, not once per micro-batch.
TEST(GradientAccumulation, TheScaleChangesOncePerUpdate) {
  LossScaleOptions scaling;
  scaling.init = 1024;
  scaling.growth_interval = 1;
  RunSetup setup = run_setup(kMicroBatch, kAccumulate, true);
  setup.loss_scale = scaling;
  std::unique_ptr<TrainingSession> session = open(setup);
  ASSERT_TRUE(session);
  for (double expected : {1024.0, 2048.0, 4096.0}) {
    absl::StatusOr<StepStats> stats = session->step(make_data(3).micro, 1e-2f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->loss_scale, expected);
    EXPECT_EQ(state(*session, "accumulate.micro_step"), std::vector<double>{0.0});
  }
  EXPECT_EQ(state(*session, "loss_scale"), std::vector<double>{8192.0});
}

TEST(GradientAccumulation, AStepTakesExactlyKMicroBatches) {
  std::unique_ptr<TrainingSession> session = open(run_setup(kMicroBatch, kAccumulate, false));
  ASSERT_TRUE(session);
  const Data data = make_data(4);
  absl::StatusOr<StepStats> one = session->step(data.micro[0], 0.1f);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(std::string(one.status().message()).find("accumulates gradients over 4"),
            std::string::npos)
      << one.status();
  absl::StatusOr<StepStats> three =
      session->step(std::vector<Batch>(data.micro.begin(), data.micro.begin() + 3), 0.1f);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(std::string(three.status().message()).find("takes 4 micro-batch(es), not 3"),
            std::string::npos)
      << three.status();
  EXPECT_EQ(session->steps_done(), 0);
}

// Every micro-batch is checked before any runs: a bad third one is an error naming it, and the
// session is as before, ready for the next step.
TEST(GradientAccumulation, ABadMicroBatchChangesNothing) {
  std::unique_ptr<TrainingSession> session = open(run_setup(kMicroBatch, kAccumulate, false));
  ASSERT_TRUE(session);
  std::map<std::string, std::vector<double>> before;
  for (const std::string& name : session->state_names()) before[name] = state(*session, name);
  Data data = make_data(5);
  data.micro[2]["x"] = Tensor::from_f32({kMicroBatch, 2}, std::vector<float>(kMicroBatch * 2));
  absl::StatusOr<StepStats> stats = session->step(data.micro, 0.1f);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(std::string(stats.status().message()).find("micro-batch 3 of 4: input 'x' must be"),
            std::string::npos)
      << stats.status();
  for (const std::string& name : session->state_names()) {
    EXPECT_EQ(state(*session, name), before[name]) << name;
  }
  EXPECT_EQ(session->steps_done(), 0);
  EXPECT_TRUE(session->step(make_data(5).micro, 0.1f).ok());
}

// A checkpoint falls between steps and belongs to one K: one saved mid-window, or by a model
// accumulating over another K, is refused and changes nothing.
TEST(GradientAccumulation, CheckpointsFromMidWindowOrAnotherKAreRefused) {
  const testing::ScopedTempDir folder("ampc_accumulation_");
  const std::string dir = folder.path.string();
  std::unique_ptr<TrainingSession> four = open(run_setup(kMicroBatch, kAccumulate, false));
  std::unique_ptr<TrainingSession> two = open(run_setup(kMicroBatch, 2, false));
  ASSERT_TRUE(four && two);
  const std::string other_k = dir + "/accumulate_two.safetensors";
  ASSERT_TRUE(two->save_checkpoint(other_k).ok());
  absl::Status loaded = four->load_checkpoint(other_k);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.message())
                .find("accumulates over 2 micro-batches per step; this "
                      "one takes 4"),
            std::string::npos)
      << loaded;

  ASSERT_TRUE(four->set_state("accumulate.micro_step", Tensor::from_i64({}, {2})).ok());
  const std::string mid_window = dir + "/mid_window.safetensors";
  ASSERT_TRUE(four->save_checkpoint(mid_window).ok());
  std::unique_ptr<TrainingSession> fresh = open(run_setup(kMicroBatch, kAccumulate, false));
  ASSERT_TRUE(fresh);
  loaded = fresh->load_checkpoint(mid_window);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.message()).find("middle of an accumulation window"),
            std::string::npos)
      << loaded;
  EXPECT_EQ(state(*fresh, "accumulate.micro_step"), std::vector<double>{0.0});
}

TEST(GradientAccumulation, KMustBeAtLeastOne) {
  TrainingOptions options;
  options.accumulate = 0;
  absl::Status status = validate_training_options(options);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("--accumulate"), std::string::npos) << status;
}

}  // namespace
}  // namespace ampc::runtime
