// TrainingSession beyond single steps: checkpoints (resume gives the uninterrupted trajectory bit
// for bit), evaluate on the eval graph, the exported inference model, bad batches and bad
// checkpoints, and the learning-rate schedules.
#include "runtime/training_session.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "runtime/batch_data.h"
#include "runtime/checksum.h"
#include "runtime/lr_schedule.h"
#include "runtime/safetensors.h"
#include "tests/runtime/training_test_util.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

std::unique_ptr<TrainingSession> compile_and_open(const std::string& model,
                                                  OptimizerOptions optimizer, float lr) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer = optimizer;
  options.training->lr = lr;
  return testing::compile_training_file(testing::source_path("models/" + model + ".onnx"), options);
}

BatchData load_data(const std::string& file, const std::vector<TensorInfo>& inputs) {
  absl::StatusOr<BatchData> data = BatchData::load(testing::source_path("models/" + file), inputs);
  EXPECT_TRUE(data.ok()) << data.status();
  return *std::move(data);
}

// The mlp with SGD and momentum (parameters and momentum buffers as state).
std::unique_ptr<TrainingSession> mlp_with_sgd_momentum() {
  OptimizerOptions sgd;
  sgd.momentum = 0.9f;
  return compile_and_open("mlp", sgd, 0.05f);
}

OptimizerOptions adamw() {
  OptimizerOptions o;
  o.kind = OptimizerOptions::Kind::kAdamW;
  o.weight_decay = 0.01f;
  return o;
}

class TrainingSessionTest : public testing::TempDirTest {
 protected:
  TrainingSessionTest() : TempDirTest("ampc_training_session_") {}
};

// The cnn carries every kind of state: parameters, Adam moments, the step counter and BatchNorm
// running statistics.
TEST_F(TrainingSessionTest, ResumingFromACheckpointGivesTheSameTrajectoryBitForBit) {
  std::unique_ptr<TrainingSession> straight = compile_and_open("cnn", adamw(), 2e-3f);
  std::unique_ptr<TrainingSession> first = compile_and_open("cnn", adamw(), 2e-3f);
  ASSERT_TRUE(straight && first);
  const BatchData data = load_data("cnn.train.npz", straight->batch_inputs());
  std::vector<double> losses;
  for (int64_t i = 0; i < 8; ++i) {
    absl::StatusOr<StepStats> stats = straight->step(data.batch(i), 2e-3f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    losses.push_back(stats->loss);
  }
  for (int64_t i = 0; i < 3; ++i) ASSERT_TRUE(first->step(data.batch(i), 2e-3f).ok());
  ASSERT_TRUE(first->save_checkpoint(path("ck.safetensors")).ok());

  std::unique_ptr<TrainingSession> resumed = compile_and_open("cnn", adamw(), 2e-3f);
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(resumed->load_checkpoint(path("ck.safetensors")).ok());
  EXPECT_EQ(resumed->steps_done(), 3);
  for (int64_t i = 3; i < 8; ++i) {
    absl::StatusOr<StepStats> stats = resumed->step(data.batch(i), 2e-3f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->loss, losses[i]) << "step " << i;
    EXPECT_EQ(stats->step, i + 1);
  }
  int running_stats = 0;
  for (const std::string& name : straight->state_names()) {
    EXPECT_EQ(*straight->state(name), *resumed->state(name)) << name;
    running_stats += name.find("running_") != std::string::npos;
  }
  EXPECT_EQ(running_stats, 4);
}

TEST_F(TrainingSessionTest, ExportedInferenceModelGivesTheOutputsOfEvaluate) {
  OptimizerOptions sgd;
  sgd.momentum = 0.9f;
  std::unique_ptr<TrainingSession> session = compile_and_open("mlp", sgd, 0.05f);
  ASSERT_TRUE(session);
  const BatchData data = load_data("mlp.train.npz", session->batch_inputs());
  for (int64_t i = 0; i < 10; ++i) ASSERT_TRUE(session->step(data.batch(i), 0.05f).ok());
  const std::map<std::string, Tensor> batch = data.batch(3);
  absl::StatusOr<std::map<std::string, Tensor>> evaluated = session->evaluate(batch);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  ASSERT_TRUE(session->export_inference_model(path("trained.onnx")).ok());
  // Plain ONNX: the checker accepts it.
  onnx::ModelProto proto;
  {
    std::ifstream in(path("trained.onnx"), std::ios::binary);
    ASSERT_TRUE(proto.ParseFromIstream(&in));
  }
  EXPECT_EQ(proto.training_info_size(), 0);
  EXPECT_NO_THROW(onnx::checker::check_model(proto));

  absl::StatusOr<std::unique_ptr<InferenceSession>> exported =
      InferenceSession::load(path("trained.onnx"));
  ASSERT_TRUE(exported.ok()) << exported.status();
  // The loss went, and with it the labels.
  ASSERT_EQ((*exported)->inputs().size(), 1u);
  EXPECT_EQ((*exported)->inputs()[0].name, "x");
  ASSERT_EQ((*exported)->outputs().size(), 1u);
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*exported)->run({{"x", batch.at("x")}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->at("logits"), evaluated->at("logits"));
  // Trained, not the initial weights: the exported logits differ from an untrained model's.
  std::unique_ptr<TrainingSession> untrained = compile_and_open("mlp", sgd, 0.05f);
  ASSERT_TRUE(untrained);
  EXPECT_FALSE(untrained->evaluate(batch)->at("logits") == outputs->at("logits"));
}

// The eval graph normalizes with the running statistics, which only the training steps move: a
// step at lr 0 changes them (and nothing else that the eval graph reads but the moments), so the
// eval outputs change; putting back the initial statistics restores them bit for bit.
TEST_F(TrainingSessionTest, EvaluateReadsTheRunningStatisticsTheStepsUpdated) {
  std::unique_ptr<TrainingSession> session = compile_and_open("cnn", adamw(), 2e-3f);
  ASSERT_TRUE(session);
  const BatchData data = load_data("cnn.train.npz", session->batch_inputs());
  const std::map<std::string, Tensor> batch = data.batch(0);
  absl::StatusOr<std::map<std::string, Tensor>> before = session->evaluate(batch);
  ASSERT_TRUE(before.ok()) << before.status();
  const Tensor mean_before = *session->state("bn1.running_mean");
  ASSERT_TRUE(session->step(batch, 0).ok());  // lr 0: only the running statistics move
  EXPECT_FALSE(*session->state("bn1.running_mean") == mean_before);
  absl::StatusOr<std::map<std::string, Tensor>> after = session->evaluate(batch);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(before->at("logits") == after->at("logits"));
  // Setting the statistics back restores the eval outputs exactly.
  std::unique_ptr<TrainingSession> fresh = compile_and_open("cnn", adamw(), 2e-3f);
  ASSERT_TRUE(fresh);
  for (const char* name :
       {"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"}) {
    ASSERT_TRUE(session->set_state(name, *fresh->state(name)).ok());
  }
  EXPECT_EQ(session->evaluate(batch)->at("logits"), before->at("logits"));
}

// fp16 with loss scaling, a batch with one NaN pixel: the step is skipped, and everything it
// would have changed stays as it was, bit for bit: the weights, the moments, the step counter
// and the BatchNorm running statistics (PyTorch's would hold NaN from then on). The next batch
// trains, and the eval graph's outputs stay finite.
TEST_F(TrainingSessionTest, ANanInTheDataLeavesTheRunningStatisticsOfASkippedStep) {
  CompileOptions options;
  options.mixed_precision = MixedPrecisionOptions{};
  options.mixed_precision->policy.low_source = "test";
  options.training = TrainingOptions{};
  options.training->optimizer = adamw();
  options.training->lr = 2e-3f;
  std::unique_ptr<TrainingSession> session =
      testing::compile_training_file(testing::source_path("models/cnn.onnx"), options);
  ASSERT_TRUE(session);
  const BatchData data = load_data("cnn.train.npz", session->batch_inputs());
  std::map<std::string, Tensor> poisoned = data.batch(0);
  poisoned.at("x").mutable_data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, Tensor> before;
  for (const std::string& name : session->state_names())
    before.emplace(name, *session->state(name));
  absl::StatusOr<StepStats> skipped = session->step(poisoned, 2e-3f);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_TRUE(skipped->found_inf);
  for (const auto& [name, value] : before) {
    if (name == "loss_scale" || name.starts_with("loss_scale.")) continue;  // halves
    EXPECT_EQ(*session->state(name), value) << name;
  }
  EXPECT_TRUE(before.contains("bn1.running_mean"));
  absl::StatusOr<StepStats> next = session->step(data.batch(1), 2e-3f);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->found_inf);
  EXPECT_FALSE(*session->state("bn1.running_mean") == before.at("bn1.running_mean"));
  absl::StatusOr<std::map<std::string, Tensor>> eval = session->evaluate(data.batch(2));
  ASSERT_TRUE(eval.ok()) << eval.status();
  for (double v : eval->at("logits").to_double_vector()) ASSERT_TRUE(std::isfinite(v));
}

// Dropout draws a new mask each step (as PyTorch does), from the step index, so a resumed run
// draws the masks the uninterrupted one did.
TEST_F(TrainingSessionTest, DropoutMasksChangePerStepAndResumeReproducesThem) {
  constexpr std::string_view kModel = R"(
    graph g(%x: f32[4,16]) opset(17) {
      init %w: f32[16] = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 1.0, 0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 1.0, 1.0]
      init %ratio: f32[] = [0.5]
      init %train: bool[] = [true]
      %h = Mul(%x, %w) : f32[4,16]
      %d = Dropout(%h, %ratio, %train) : f32[4,16]
      %sq = Mul(%d, %d) : f32[4,16]
      %loss = ReduceSum<keepdims=0>(%sq) : f32[]
      return %loss
    })";
  auto open = [&] {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(kModel);
    EXPECT_NE(graph, nullptr);
    CompileOptions options;
    options.training = TrainingOptions{};
    options.training->lr = 0.1f;
    Diagnostics diagnostics;
    EXPECT_TRUE(compile_graph(*graph, options, diagnostics).ok());
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::create(std::move(graph));
    EXPECT_TRUE(session.ok()) << session.status();
    return *std::move(session);
  };
  std::vector<float> ones(64, 1.0f);
  const std::map<std::string, Tensor> batch = {{"x", Tensor::from_f32({4, 16}, ones)}};
  std::unique_ptr<TrainingSession> straight = open();
  std::vector<double> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(straight->step(batch, 0)->loss);  // lr 0: same w
  EXPECT_NE(losses[0], losses[1]);
  EXPECT_NE(losses[1], losses[2]);
  std::unique_ptr<TrainingSession> first = open();
  ASSERT_TRUE(first->step(batch, 0).ok());
  ASSERT_TRUE(first->step(batch, 0).ok());
  ASSERT_TRUE(first->save_checkpoint(path("ck.safetensors")).ok());
  std::unique_ptr<TrainingSession> resumed = open();
  ASSERT_TRUE(resumed->load_checkpoint(path("ck.safetensors")).ok());
  EXPECT_EQ(resumed->step(batch, 0)->loss, losses[2]);
  EXPECT_EQ(resumed->step(batch, 0)->loss, losses[3]);
}

TEST_F(TrainingSessionTest, BadCheckpointsAreErrorsThatChangeNothing) {
  std::unique_ptr<TrainingSession> session = mlp_with_sgd_momentum();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->save_checkpoint(path("good.safetensors")).ok());
  absl::StatusOr<SafetensorsFile> good = read_safetensors(path("good.safetensors"));
  ASSERT_TRUE(good.ok()) << good.status();
  const Tensor weight = *session->state("fc1.weight");

  auto expect_rejected = [&](const SafetensorsFile& file, std::string_view needle) {
    ASSERT_TRUE(write_safetensors(path("bad.safetensors"), file.tensors, file.metadata).ok());
    absl::Status status = session->load_checkpoint(path("bad.safetensors"));
    EXPECT_FALSE(status.ok());
    EXPECT_NE(std::string(status.message()).find(needle), std::string_view::npos) << status;
    EXPECT_EQ(*session->state("fc1.weight"), weight);
    EXPECT_EQ(session->steps_done(), 0);
  };
  SafetensorsFile missing = *good;
  missing.tensors.erase("fc2.bias");
  missing.tensors["fc1.weight"] = Tensor(missing.tensors["fc1.weight"].type());  // zeros
  expect_rejected(missing, "fc2.bias");
  SafetensorsFile extra = *good;
  extra.tensors["fc9.weight"] = Tensor::from_f32({1}, {1});
  expect_rejected(extra, "fc9.weight");
  SafetensorsFile wrong_type = *good;
  wrong_type.tensors["fc2.bias"] = Tensor::from_f32({3}, {1, 2, 3});
  expect_rejected(wrong_type, "fc2.bias");
  SafetensorsFile not_ours = *good;
  not_ours.metadata.clear();
  expect_rejected(not_ours, "not an ampc checkpoint");
  EXPECT_FALSE(session->load_checkpoint(path("absent.safetensors")).ok());

  // A NaN weight, with a checksum that matches it: refused by the value checks.
  SafetensorsFile nan_weight = *good;
  nan_weight.tensors["fc1.weight"].set_element(7, std::nan(""));
  nan_weight.metadata["ampc.crc32.fc1.weight"] =
      fmt::format("{:08x}", crc32_of(nan_weight.tensors["fc1.weight"].bytes()));
  expect_rejected(nan_weight, "'fc1.weight' cannot be resumed from: element 7 is nan");
  SafetensorsFile no_checksum = *good;
  no_checksum.metadata.erase("ampc.crc32.fc2.bias");
  expect_rejected(no_checksum, "it has no checksum for 'fc2.bias'");
  // A checkpoint of format 1 (before checksums) still loads.
  SafetensorsFile version1 = *good;
  for (auto it = version1.metadata.begin(); it != version1.metadata.end();) {
    it = it->first.starts_with("ampc.crc32.") ? version1.metadata.erase(it) : std::next(it);
  }
  version1.metadata["ampc.checkpoint"] = "1";
  ASSERT_TRUE(write_safetensors(path("v1.safetensors"), version1.tensors, version1.metadata).ok());
  EXPECT_TRUE(session->load_checkpoint(path("v1.safetensors")).ok());
}

// SGD without momentum keeps no buffer (PyTorch's momentum_buffer is None): the state is the
// parameters and the step counter. A checkpoint of an earlier build, which kept all-zero buffers
// for it, resumes; one whose buffer holds anything else is refused, naming it.
TEST_F(TrainingSessionTest, PlainSgdKeepsNoMomentumBuffer) {
  std::unique_ptr<TrainingSession> session = compile_and_open("mlp", OptimizerOptions{}, 0.05f);
  ASSERT_TRUE(session);
  for (const std::string& name : session->state_names()) {
    EXPECT_FALSE(name.ends_with(".momentum_buffer")) << name;
  }
  ASSERT_TRUE(session->has_state("fc1.weight"));
  ASSERT_TRUE(session->save_checkpoint(path("plain.safetensors")).ok());
  absl::StatusOr<SafetensorsFile> plain = read_safetensors(path("plain.safetensors"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  SafetensorsFile earlier = *plain;
  for (const std::string& name : session->state_names()) {
    if (name.find('.') == std::string::npos || name.starts_with("optimizer.")) continue;
    earlier.tensors[name + ".momentum_buffer"] = Tensor(plain->tensors.at(name).type());
  }
  ASSERT_TRUE(earlier.tensors.contains("fc1.weight.momentum_buffer"));
  ASSERT_TRUE(
      write_safetensors(path("earlier.safetensors"), earlier.tensors, earlier.metadata).ok());
  const absl::Status loaded = session->load_checkpoint(path("earlier.safetensors"));
  EXPECT_TRUE(loaded.ok()) << loaded;

  earlier.tensors["fc1.weight.momentum_buffer"].set_element(0, 0.5);
  ASSERT_TRUE(write_safetensors(path("moved.safetensors"), earlier.tensors, earlier.metadata).ok());
  const absl::Status refused = session->load_checkpoint(path("moved.safetensors"));
  EXPECT_NE(std::string(refused.message())
                .find("it holds 'fc1.weight.momentum_buffer', which is not state"),
            std::string::npos)
      << refused;
}

// The eval graph's random ops (a VAE's sampling) draw from a stream of the steps done: the same
// draw for every evaluate between two steps, a new one after a step, and after a resume what the
// uninterrupted session drew at that step.
TEST_F(TrainingSessionTest, EvaluateDrawsAnewAfterEachStepAndAlikeAfterAResume) {
  constexpr std::string_view kVae = R"(
      graph g(%x: f32[6]) opset(17) {
        init %w: f32[6] = [0.5, -0.5, 0.25, 1.0, -1.0, 2.0]
        %mu = Mul(%x, %w) : f32[6]
        %eps = RandomNormalLike(%mu) : f32[6]
        %z = Add(%mu, %eps) : f32[6]
        %square = Mul(%z, %z) : f32[6]
        %loss = ReduceSum<keepdims=0>(%square) : f32[]
        return %loss, %eps
      })";
  CompileOptions options;
  options.training = TrainingOptions{};
  std::unique_ptr<TrainingSession> session = testing::compile_training_session(kVae, options);
  std::unique_ptr<TrainingSession> resumed = testing::compile_training_session(kVae, options);
  ASSERT_TRUE(session && resumed);
  const std::map<std::string, Tensor> batch = {{"x", Tensor::from_f32({6}, {1, 2, 3, 4, 5, 6})}};
  auto eps = [&](TrainingSession& s) {
    absl::StatusOr<std::map<std::string, Tensor>> outputs = s.evaluate(batch);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    return outputs.ok() ? outputs->at("eps") : Tensor();
  };
  const Tensor first = eps(*session);
  EXPECT_EQ(eps(*session), first);
  ASSERT_TRUE(session->step(batch, 0.01f).ok());
  ASSERT_TRUE(session->save_checkpoint(path("one.safetensors")).ok());
  const Tensor second = eps(*session);
  EXPECT_FALSE(second == first);
  ASSERT_TRUE(resumed->load_checkpoint(path("one.safetensors")).ok());
  EXPECT_EQ(eps(*resumed), second);
}

// set_state refuses what load_checkpoint refuses (the value checks of the test above) and a view
// without data, changing nothing; save_checkpoint refuses to write such state (after a step on a
// NaN batch, without loss scaling, the weights are NaN), so every checkpoint written resumes.
TEST_F(TrainingSessionTest, StateThatCannotBeResumedIsNeitherSetNorSaved) {
  std::unique_ptr<TrainingSession> session = compile_and_open("mlp", adamw(), 1e-3f);
  ASSERT_TRUE(session);
  const Tensor weight = *session->state("fc1.weight");
  const Tensor counter = *session->state("optimizer.step");
  auto expect_refused = [&](std::string_view name, const TensorView& value,
                            std::string_view needle) {
    const absl::Status status = session->set_state(name, value);
    EXPECT_FALSE(status.ok()) << name;
    EXPECT_NE(std::string(status.message()).find(needle), std::string::npos) << status;
    EXPECT_EQ(*session->state("fc1.weight"), weight);
    EXPECT_EQ(*session->state("optimizer.step"), counter);
  };
  Tensor nan_weight = weight;
  nan_weight.set_element(3, std::nan(""));
  expect_refused("fc1.weight", nan_weight, "element 3 is nan");
  Tensor negative = counter;
  negative.set_element(0, -1);
  expect_refused("optimizer.step", negative, "below 0");
  expect_refused("optimizer.step", TensorView(counter.type(), nullptr), "has no data");
  Tensor moved = weight;
  moved.set_element(3, 0.25);
  ASSERT_TRUE(session->set_state("fc1.weight", moved).ok());
  EXPECT_EQ(*session->state("fc1.weight"), moved);

  const BatchData data = load_data("mlp.train.npz", session->batch_inputs());
  std::map<std::string, Tensor> poisoned = data.batch(0);
  poisoned.at("x").set_element(0, std::nan(""));
  absl::StatusOr<StepStats> stats = session->step(poisoned, 1e-3f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_TRUE(std::isnan(stats->loss));
  const absl::Status saved = session->save_checkpoint(path("nan.safetensors"));
  EXPECT_EQ(saved.code(), absl::StatusCode::kFailedPrecondition) << saved;
  EXPECT_NE(std::string(saved.message()).find("is nan"), std::string::npos) << saved;
  EXPECT_FALSE(std::filesystem::exists(path("nan.safetensors")));
}

// A flipped bit anywhere in a checkpoint is refused with an error that changes nothing, or, where
// it hits nothing that matters (a space in the JSON header), loads the very same state; in the
// tensor data every flip is refused by the checksum of the tensor it hits.
TEST_F(TrainingSessionTest, CorruptCheckpointBytesAreRefusedOrChangeNothing) {
  std::unique_ptr<TrainingSession> session = mlp_with_sgd_momentum();
  ASSERT_TRUE(session);
  ASSERT_TRUE(session->save_checkpoint(path("good.safetensors")).ok());
  std::ifstream in(path("good.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, Tensor> state;
  for (const std::string& name : session->state_names()) state[name] = *session->state(name);
  // The tensor data follows the 8-byte header length and the JSON header.
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), sizeof header);
  const size_t data_start = 8 + header;
  ASSERT_LT(data_start, bytes.size());
  std::mt19937 rng(20261126);
  int data_flips = 0;
  int caught_by_checksum = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Half the flips in the header, half in the data.
    const size_t at =
        trial % 2 == 0 ? rng() % data_start : data_start + rng() % (bytes.size() - data_start);
    std::string corrupt = bytes;
    corrupt[at] = static_cast<char>(corrupt[at] ^ (1 << (rng() % 8)));
    std::ofstream(path("bad.safetensors"), std::ios::binary) << corrupt;
    const absl::Status status = session->load_checkpoint(path("bad.safetensors"));
    if (at >= data_start) {
      ++data_flips;
      caught_by_checksum +=
          std::string(status.message()).find("does not match its checksum") != std::string::npos;
    }
    EXPECT_EQ(session->steps_done(), 0) << "byte " << at;
    for (const auto& [name, value] : state) {
      EXPECT_EQ(*session->state(name), value) << name << " after a flip of byte " << at;
    }
  }
  EXPECT_EQ(caught_by_checksum, data_flips);
}

TEST_F(TrainingSessionTest, BadBatchesNameTheInput) {
  std::unique_ptr<TrainingSession> session = compile_and_open("mlp", OptimizerOptions{}, 0.05f);
  ASSERT_TRUE(session);
  const BatchData data = load_data("mlp.train.npz", session->batch_inputs());
  std::map<std::string, Tensor> batch = data.batch(0);
  batch.erase("label");
  absl::StatusOr<StepStats> stats = session->step(batch, 0.05f);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(std::string(stats.status().message()).find("label"), std::string_view::npos);
  batch = data.batch(0);
  batch["x"] = Tensor::from_f32({8, 63}, std::vector<float>(8 * 63));
  stats = session->step(batch, 0.05f);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(std::string(stats.status().message()).find("x"), std::string_view::npos);
  EXPECT_FALSE(session->step(data.batch(0), -1).ok());
  EXPECT_FALSE(session->step(data.batch(0), NAN).ok());
  EXPECT_EQ(session->steps_done(), 0);
}

TEST(BatchData, ChecksNamesDtypesAndShapes) {
  const std::vector<TensorInfo> inputs = {{"x", TensorType{DType::kF32, {2}}},
                                          {"y", TensorType{DType::kI64, {}}}};
  auto load = [&](std::map<std::string, Tensor> arrays) {
    return BatchData::from_arrays(std::move(arrays), inputs, "data.npz");
  };
  const Tensor x = Tensor::from_f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor y = Tensor::from_i64({3}, {7, 8, 9});
  absl::StatusOr<BatchData> good = load({{"x", x}, {"y", y}});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->num_batches(), 3);
  EXPECT_EQ(good->batch(4).at("x"), Tensor::from_f32({2}, {3, 4}));  // 4 mod 3
  EXPECT_EQ(good->batch(2).at("y"), Tensor::from_i64({}, {9}));

  // Arrays shaped like the inputs themselves are one batch.
  absl::StatusOr<BatchData> one =
      load({{"x", Tensor::from_f32({2}, {5, 6})}, {"y", Tensor::from_i64({}, {4})}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->num_batches(), 1);
  EXPECT_EQ(one->batch(3).at("x"), Tensor::from_f32({2}, {5, 6}));
  EXPECT_EQ(one->batch(3).at("y"), Tensor::from_i64({}, {4}));

  const struct {
    std::map<std::string, Tensor> arrays;
    std::string_view needle;
  } bad[] = {
      {{{"x", x}, {"y", y}, {"z", y}}, "array 'z' is not an input"},
      {{{"x", x}}, "no array 'y'"},
      {{{"x", Tensor::from_doubles(DType::kF64, {3, 2}, {1, 2, 3, 4, 5, 6})}, {"y", y}},
       "array 'x' is f64[3,2]"},
      {{{"x", Tensor::from_f32({6}, {1, 2, 3, 4, 5, 6})}, {"y", y}}, "array 'x' is f32[6]"},
      {{{"x", x}, {"y", Tensor::from_i64({2}, {7, 8})}}, "'y' holds 2 batches but 'x' holds 3"},
      {{{"x", x}, {"y", Tensor::from_i64({}, {7})}},
       "'y' holds 1 batch but 'x' holds 3 batches; an array shaped like its input is one batch: "
       "'y' (i64[])"},
      {{{"x", Tensor::from_f32({1, 1, 2}, {1, 2})}, {"y", y}}, "or f32[2] for one batch"},
      {{{"x", Tensor::from_f32({0, 2}, {})}, {"y", Tensor::from_i64({0}, {})}}, "N >= 1"},
  };
  for (const auto& c : bad) {
    absl::StatusOr<BatchData> data = load(c.arrays);
    ASSERT_FALSE(data.ok()) << c.needle;
    EXPECT_NE(std::string(data.status().message()).find(c.needle), std::string_view::npos)
        << data.status();
    EXPECT_NE(std::string(data.status().message()).find("data.npz"), std::string_view::npos);
  }
}

// Expected values computed by hand from the definitions in lr_schedule.h.
TEST(LrSchedule, FollowsItsDefinitions) {
  LrSchedule constant{.kind = LrSchedule::Kind::kConstant, .lr = 0.1};
  EXPECT_EQ(constant.at(0), 0.1);
  EXPECT_EQ(constant.at(1000), 0.1);

  LrSchedule warmup{.kind = LrSchedule::Kind::kWarmup, .lr = 0.4, .warmup_steps = 4};
  EXPECT_DOUBLE_EQ(warmup.at(0), 0.1);
  EXPECT_DOUBLE_EQ(warmup.at(1), 0.2);
  EXPECT_DOUBLE_EQ(warmup.at(3), 0.4);
  EXPECT_DOUBLE_EQ(warmup.at(4), 0.4);
  EXPECT_DOUBLE_EQ(warmup.at(99), 0.4);

  LrSchedule cosine{.kind = LrSchedule::Kind::kCosine,
                    .lr = 1.0,
                    .warmup_steps = 2,
                    .total_steps = 6,
                    .min_lr = 0.2};
  EXPECT_DOUBLE_EQ(cosine.at(0), 0.5);
  EXPECT_DOUBLE_EQ(cosine.at(1), 1.0);
  EXPECT_DOUBLE_EQ(cosine.at(2), 1.0);                                     // cos(0)
  EXPECT_NEAR(cosine.at(3), 0.2 + 0.8 * (1 + std::sqrt(0.5)) / 2, 1e-15);  // cos(pi/4)
  EXPECT_NEAR(cosine.at(4), 0.6, 1e-15);                                   // cos(pi/2)
  EXPECT_NEAR(cosine.at(5), 0.2 + 0.8 * (1 - std::sqrt(0.5)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(cosine.at(6), 0.2);
  EXPECT_DOUBLE_EQ(cosine.at(60), 0.2);
}

TEST(LrSchedule, RejectsBadSettingsNamingTheFlag) {
  const struct {
    LrSchedule schedule;
    std::string_view flag;
  } bad[] = {
      {{.lr = -1}, "--lr"},
      {{.lr = 0}, "--lr"},
      {{.lr = 0.1, .min_lr = 0.2}, "--min-lr"},
      {{.kind = LrSchedule::Kind::kWarmup, .lr = 0.1}, "--warmup-steps"},
      {{.lr = 0.1, .warmup_steps = -1}, "--warmup-steps"},
      {{.kind = LrSchedule::Kind::kCosine, .lr = 0.1, .warmup_steps = 5, .total_steps = 5},
       "cosine"},
  };
  for (const auto& c : bad) {
    absl::Status status = c.schedule.validate();
    ASSERT_FALSE(status.ok()) << c.flag;
    EXPECT_NE(std::string(status.message()).find(c.flag), std::string_view::npos) << status;
  }
  EXPECT_TRUE(parse_lr_schedule_kind("cosine").ok());
  EXPECT_FALSE(parse_lr_schedule_kind("step").ok());
}

}  // namespace
}  // namespace ampc::runtime
