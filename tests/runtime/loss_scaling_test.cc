// Loss scaling, against its definitions: fp16 underflow with and without a scale; an overflow
// skips exactly one update; the dynamic scale follows PyTorch's GradScaler rule (a reference
// written here, over random overflow sequences) and never becomes inf; clipping acts on the
// unscaled gradients; a resumed run grows the scale at the same step; fp32 master weights keep
// updates that fp16 weights (O3) round away.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "runtime/training_session.h"
#include "tests/runtime/training_test_util.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

// loss = ReduceSum(MatMul(x, w) * c): d loss / d y = c, in f32 (ReduceSum and the loss stay
// fp32), cast to f16 for the MatMul's backward.
std::string model(float c) {
  return str_cat(R"(
    graph g(%x: f32[1,2]) opset(17) {
      init %w: f32[2,1] = [1.0, 1.0]
      init %c: f32[] = [)",
                 fmt::format("{}", c), R"(]
      %y = MatMul(%x, %w) {name="mm"} : f32[1,1]
      %z = Mul(%y, %c) {name="times_c"} : f32[1,1]
      %loss = ReduceSum<keepdims=0>(%z) {name="sum"} : f32[]
      return %loss
    })");
}

std::unique_ptr<TrainingSession> open(std::string_view text, std::optional<LossScaleOptions> scale,
                                      float clip = 0, bool fp16 = true) {
  CompileOptions options;
  if (fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
  }
  options.training = TrainingOptions{};
  options.training->optimizer.clip_grad_norm = clip;
  options.training->autodiff.freeze = "^c$";  // c is part of the loss, not a parameter
  if (scale) {
    options.training->loss_scale = scale;
  } else {
    options.training->loss_scale_off = true;
  }
  return testing::compile_training_session(text, options);
}

std::map<std::string, Tensor> batch(float x0, float x1) {
  return {{"x", Tensor::from_f32({1, 2}, {x0, x1})}};
}

std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

// (a) d loss / d y = 1e-8 is below fp16's smallest subnormal (6e-8): without scaling the weight
// gradient is 0 and SGD leaves w alone; with scale 65536 it survives and, unscaled, is 1e-8 * x.
TEST(LossScaling, SmallGradientsUnderflowWithoutAScaleAndSurviveWithOne) {
  const std::string text = model(1e-8f);
  std::unique_ptr<TrainingSession> plain = open(text, std::nullopt);
  std::unique_ptr<TrainingSession> scaled = open(text, LossScaleOptions{});
  ASSERT_TRUE(plain && scaled);
  // A large rate makes the 1e-8 step visible in f32 weights near 1.
  ASSERT_TRUE(plain->step(batch(1, 3), 1e6f).ok());
  absl::StatusOr<StepStats> stats = scaled->step(batch(1, 3), 1e6f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->found_inf);
  EXPECT_EQ(values(*plain->state("w")), (std::vector<double>{1.0, 1.0}));
  const std::vector<double> w = values(*scaled->state("w"));
  // w - lr * grad, grad = 1e-8 * x to fp16's relative precision (2^-11).
  EXPECT_NEAR(1.0 - w[0], 1e6 * 1e-8, 1e-5);
  EXPECT_NEAR(1.0 - w[1], 1e6 * 3e-8, 3e-5);
}

// (b) With c = 1 and the default scale 65536 the gradient reaching the MatMul, 65536, is past
// fp16's largest finite value (65504): the step overflows and is skipped entirely; the scale
// halves, and the next step applies (x = [1, 0.5] keeps its weight gradient, 32768 * x, finite).
TEST(LossScaling, AnOverflowSkipsExactlyOneUpdate) {
  std::unique_ptr<TrainingSession> session = open(model(1.0f), LossScaleOptions{});
  ASSERT_TRUE(session);
  std::map<std::string, Tensor> before;
  for (const std::string& name : session->state_names()) before[name] = *session->state(name);
  absl::StatusOr<StepStats> first = session->step(batch(1, 0.5f), 0.5f);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->found_inf);
  EXPECT_EQ(first->loss_scale, 65536.0);
  EXPECT_EQ(first->skipped_steps, 1);
  for (const char* name : {"w", "optimizer.step"}) {
    EXPECT_EQ(*session->state(name), before.at(name)) << name;
  }
  EXPECT_EQ(session->state("loss_scale")->element_as_double(0), 32768.0);
  EXPECT_EQ(session->state("loss_scale.growth_tracker")->element_as_i64(0), 0);

  absl::StatusOr<StepStats> second = session->step(batch(1, 0.5f), 0.5f);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->found_inf);
  EXPECT_EQ(second->loss_scale, 32768.0);
  EXPECT_EQ(second->skipped_steps, 1);
  // d loss / d w = x = [1, 0.5]: w = 1 - 0.5 * x.
  EXPECT_EQ(values(*session->state("w")), (std::vector<double>{0.5, 0.75}));
  EXPECT_EQ(session->state("optimizer.step")->element_as_double(0), 1.0);
  EXPECT_EQ(session->state("loss_scale.growth_tracker")->element_as_i64(0), 1);
}

// Runs ampc.LossScaleUpdate once.
class ScaleUpdate {
 public:
  ScaleUpdate(int64_t interval, float growth = 2.0f, float backoff = 0.5f) {
    auto graph = std::make_unique<Graph>("update");
    graph->set_opset(std::string(kAmpcDomain), 1);
    Value* scale = graph->add_input("scale", TensorType{DType::kF32, {}});
    Value* tracker = graph->add_input("tracker", TensorType{DType::kI64, {}});
    Value* found = graph->add_input("found", TensorType{DType::kBool, {}});
    Node* node = graph->create_node(
        kAmpcDomain, "LossScaleUpdate", {scale, tracker, found},
        {TensorType{DType::kF32, {}}, TensorType{DType::kI64, {}}},
        {{"growth_interval", interval}, {"growth_factor", growth}, {"backoff_factor", backoff}});
    node->output(0)->set_name("scale_out");
    node->output(1)->set_name("tracker_out");
    graph->add_output(node->output(0));
    graph->add_output(node->output(1));
    session_ = *InferenceSession::create(std::move(graph));
  }

  std::pair<float, int64_t> operator()(float scale, int64_t tracker, bool found) {
    absl::StatusOr<std::map<std::string, Tensor>> out =
        session_->run({{"scale", Tensor::from_f32({}, {scale})},
                       {"tracker", Tensor::from_i64({}, {tracker})},
                       {"found", Tensor::from_doubles(DType::kBool, {}, {found ? 1.0 : 0.0})}});
    EXPECT_TRUE(out.ok()) << out.status();
    return {static_cast<float>(out->at("scale_out").element_as_double(0)),
            out->at("tracker_out").element_as_i64(0)};
  }

 private:
  std::unique_ptr<InferenceSession> session_;
};

// (c) interval 3, init 1024: (1024,1), (1024,2), (2048,0), (2048,1), overflow -> (1024,0).
TEST(LossScaling, GrowthAndBackoffSequence) {
  ScaleUpdate update(3);
  std::pair<float, int64_t> state{1024.0f, 0};
  const std::pair<float, int64_t> want[] = {{1024, 1}, {1024, 2}, {2048, 0}, {2048, 1}, {1024, 0}};
  const bool found[] = {false, false, false, false, true};
  for (int i = 0; i < 5; ++i) {
    state = update(state.first, state.second, found[i]);
    EXPECT_EQ(state, want[i]) << "step " << i;
  }
}

// With hysteresis 2 (Megatron-LM's rule): the first overflow in a row only uses up the
// hysteresis, later ones back off; growth restores it.
TEST(LossScaling, HysteresisDelaysTheBackoff) {
  auto graph = std::make_unique<Graph>("update");
  graph->set_opset(std::string(kAmpcDomain), 1);
  const TensorType count{DType::kI64, {}};
  Value* scale = graph->add_input("scale", TensorType{DType::kF32, {}});
  Value* tracker = graph->add_input("tracker", count);
  Value* found = graph->add_input("found", TensorType{DType::kBool, {}});
  Value* left = graph->add_input("left", count);
  Node* node = graph->create_node(kAmpcDomain, "LossScaleUpdate", {scale, tracker, found, left},
                                  {TensorType{DType::kF32, {}}, count, count},
                                  {{"growth_interval", int64_t{3}}, {"hysteresis", int64_t{2}}});
  const char* names[] = {"scale_out", "tracker_out", "left_out"};
  for (int i = 0; i < 3; ++i) {
    node->output(i)->set_name(names[i]);
    graph->add_output(node->output(i));
  }
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  std::tuple<float, int64_t, int64_t> state{1024.0f, 0, 2};
  const bool overflow[] = {true, true, true, false, false, false, true};
  const std::tuple<float, int64_t, int64_t> want[] = {{1024, 0, 1}, {512, 0, 0},  {256, 0, -1},
                                                      {256, 1, -1}, {256, 2, -1}, {512, 0, 2},
                                                      {512, 0, 1}};
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<std::map<std::string, Tensor>> out = (*session)->run(
        {{"scale", Tensor::from_f32({}, {std::get<0>(state)})},
         {"tracker", Tensor::from_i64({}, {std::get<1>(state)})},
         {"found", Tensor::from_doubles(DType::kBool, {}, {overflow[i] ? 1.0 : 0.0})},
         {"left", Tensor::from_i64({}, {std::get<2>(state)})}});
    ASSERT_TRUE(out.ok()) << out.status();
    state = {static_cast<float>(out->at("scale_out").element_as_double(0)),
             out->at("tracker_out").element_as_i64(0), out->at("left_out").element_as_i64(0)};
    EXPECT_EQ(state, want[i]) << "step " << i;
  }
}

// GradScaler's rule (torch._amp_update_scale_), written from its definition: factors are
// Python floats, the scale an f32 tensor.
std::pair<float, int64_t> reference_update(float scale, int64_t tracker, bool found,
                                           int64_t interval, double growth, double backoff) {
  if (found) return {static_cast<float>(scale * backoff), 0};
  if (tracker + 1 == interval) {
    const float grown = static_cast<float>(scale * growth);
    return {std::isfinite(grown) ? grown : scale, 0};
  }
  return {scale, tracker + 1};
}

// (d) 10,000 random overflow sequences follow the reference; (e) the scale never becomes inf,
// even when growth starts near f32's largest value.
TEST(LossScaling, RandomOverflowSequencesFollowGradScaler) {
  std::mt19937 rng(20261123);
  const int64_t intervals[] = {1, 2, 3, 7};
  std::vector<std::unique_ptr<ScaleUpdate>> updates;
  for (int64_t interval : intervals) updates.push_back(std::make_unique<ScaleUpdate>(interval));
  int grew_to_the_top = 0;
  for (int sequence = 0; sequence < 10000; ++sequence) {
    const int which = static_cast<int>(rng() % 4);
    // Scales from 2^-10 to 2^127 (2^127 * 2 would overflow to inf).
    float scale = std::ldexp(1.0f, static_cast<int>(rng() % 138) - 10);
    float want_scale = scale;
    int64_t tracker = 0;
    int64_t want_tracker = 0;
    const double overflow_rate = (rng() % 4) / 8.0;
    for (int step = 0; step < 24; ++step) {
      const bool found = std::uniform_real_distribution<double>(0, 1)(rng) < overflow_rate;
      std::tie(scale, tracker) = (*updates[which])(scale, tracker, found);
      std::tie(want_scale, want_tracker) =
          reference_update(want_scale, want_tracker, found, intervals[which], 2.0, 0.5);
      ASSERT_EQ(scale, want_scale) << "sequence " << sequence << " step " << step;
      ASSERT_EQ(tracker, want_tracker) << "sequence " << sequence << " step " << step;
      ASSERT_TRUE(std::isfinite(scale));
      grew_to_the_top += scale == std::ldexp(1.0f, 127);
    }
  }
  EXPECT_GT(grew_to_the_top, 0);  // some sequences did try to grow past f32's range
}

// (h) Master weights: w = 1 and ten SGD updates of -1e-4 (gradient 1, lr 1e-4). fp16 holds
// no value between 1 - 2^-11 and 1, so 1 - 1e-4 rounds back to 1 each time: without master
// weights (O3: w itself is f16) w stays 1.0; with fp32 master weights (O1, O2) it reaches 0.999.
TEST(LossScaling, MasterWeightsKeepUpdatesThatFp16WeightsLose) {
  constexpr std::string_view kModel = R"(
    graph g(%x: f32[1,1]) opset(17) {
      init %w: f32[1,1] = [1.0]
      %y = MatMul(%x, %w) {name="mm"} : f32[1,1]
      %loss = ReduceSum<keepdims=0>(%y) {name="sum"} : f32[]
      return %loss
    })";
  for (OptLevel level : {OptLevel::kO1, OptLevel::kO2, OptLevel::kO3}) {
    SCOPED_TRACE(opt_level_name(level));
    CompileOptions options;
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
    options.mixed_precision->policy.level = level;
    options.training = TrainingOptions{};
    options.training->loss_scale_off = true;  // the gradient, 1, needs no scale
    std::unique_ptr<TrainingSession> session = testing::compile_training_session(kModel, options);
    ASSERT_TRUE(session);
    float expected = 1.0f;  // the same ten updates in f32
    for (int i = 0; i < 10; ++i) {
      absl::StatusOr<StepStats> stats =
          session->step({{"x", Tensor::from_f32({1, 1}, {1})}}, 1e-4f);
      ASSERT_TRUE(stats.ok()) << stats.status();
      ASSERT_EQ(stats->grad_norm, 1.0);
      expected -= 1e-4f;
    }
    absl::StatusOr<Tensor> w = session->state("w");
    ASSERT_TRUE(w.ok()) << w.status();
    if (level == OptLevel::kO3) {
      EXPECT_EQ(w->dtype(), DType::kF16);
      EXPECT_EQ(w->element_as_double(0), 1.0);
    } else {
      EXPECT_EQ(w->dtype(), DType::kF32);
      EXPECT_EQ(w->element_as_double(0), expected);
      EXPECT_NEAR(w->element_as_double(0), 0.999, 1e-6);
    }
  }
}

// (g) The true gradient [3, 4] (loss = sum(w * [3, 4])) clipped to norm 1 is [0.6, 0.8],
// whatever the static scale; SGD with lr 1 subtracts it from w.
TEST(LossScaling, ClippingActsOnTheUnscaledGradients) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[2]) opset(17) {
      init %w: f32[2] = [1.0, 1.0]
      init %c: f32[2] = [3.0, 4.0]
      %p = Mul(%w, %c) : f32[2]
      %q = Mul(%p, %x) : f32[2]
      %loss = ReduceSum<keepdims=0>(%q) : f32[]
      return %loss
    })";
  for (float scale : {1.0f, 1024.0f, 65536.0f}) {
    LossScaleOptions options;
    options.mode = LossScaleOptions::Mode::kStatic;
    options.init = scale;
    std::unique_ptr<TrainingSession> session = open(kText, options, /*clip=*/1.0f, /*fp16=*/false);
    ASSERT_TRUE(session);
    absl::StatusOr<StepStats> stats = session->step({{"x", Tensor::from_f32({2}, {1, 1})}}, 1.0f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->grad_norm, 5.0) << scale;
    const std::vector<double> w = values(*session->state("w"));
    EXPECT_NEAR(1.0 - w[0], 0.6, 1e-6) << scale;
    EXPECT_NEAR(1.0 - w[1], 0.8, 1e-6) << scale;
  }
}

// (i) A checkpoint taken in the middle of a growth interval resumes to the same scale history.
TEST(LossScaling, ResumeMidIntervalGrowsAtTheSameStep) {
  LossScaleOptions options;
  options.init = 1024.0f;
  options.growth_interval = 4;
  const std::string text = model(1e-3f);
  std::unique_ptr<TrainingSession> straight = open(text, options);
  ASSERT_TRUE(straight);
  std::vector<double> scales;
  for (int i = 0; i < 10; ++i) scales.push_back(straight->step(batch(1, 2), 0.01f)->loss_scale);
  EXPECT_EQ(scales[3], 1024.0);
  EXPECT_EQ(scales[4], 2048.0);
  EXPECT_EQ(scales[8], 4096.0);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ampc_loss_scale_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  std::unique_ptr<TrainingSession> first = open(text, options);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(first->step(batch(1, 2), 0.01f).ok());
  ASSERT_TRUE(first->save_checkpoint(path).ok());
  std::unique_ptr<TrainingSession> resumed = open(text, options);
  ASSERT_TRUE(resumed->load_checkpoint(path).ok());
  for (int i = 6; i < 10; ++i) {
    EXPECT_EQ(resumed->step(batch(1, 2), 0.01f)->loss_scale, scales[i]) << i;
  }
  for (const std::string& name : straight->state_names()) {
    EXPECT_EQ(*straight->state(name), *resumed->state(name)) << name;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ampc::runtime
