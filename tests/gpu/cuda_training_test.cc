// The training step on CUDA against the CPU reference (label `gpu`; skipped without a GPU): the
// three example models train 20 steps at fp32, fp16 and bf16 with AdamW and track the CPU run; two
// CUDA runs are bit-identical; steps queued on CUDA make no host wait between reads; a checkpoint
// written on one device resumes on the other; a data error recorded on the device is found at the
// next read and stops the session until a checkpoint is loaded.
#include <bit>
#include <cmath>
#include <filesystem>

#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/batch_data.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc::runtime {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device"

class CudaTrainingTest : public testing::TempDirTest {
 protected:
  CudaTrainingTest() : TempDirTest("ampc_cuda_training_") {}

  // models/<model>.onnx compiled for training with `flags`.
  std::string compile(const std::string& flags, const std::string& model = "mlp") const {
    const std::string out = path(model + ".train.onnx");
    const testing::CliResult r =
        testing::run_ampc("compile " + testing::source_path("models/" + model + ".onnx") + " -o " +
                          out + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }

  static std::unique_ptr<TrainingSession> open(const std::string& model, Device device) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::load(model, SessionOptions{.device = device});
    EXPECT_TRUE(session.ok()) << device_name(device) << ": " << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  static BatchData data(const TrainingSession& session, const std::string& model = "mlp") {
    absl::StatusOr<BatchData> data = BatchData::load(
        testing::source_path("models/" + model + ".train.npz"), session.batch_inputs());
    EXPECT_TRUE(data.ok()) << data.status();
    return *std::move(data);
  }

  static std::vector<StepStats> train(TrainingSession& session, int steps, int first = 0,
                                      const std::string& model = "mlp") {
    const BatchData batches = data(session, model);
    std::vector<StepStats> stats;
    for (int step = first; step < first + steps; ++step) {
      absl::StatusOr<StepStats> s =
          session.step(batches.batch(step % batches.num_batches()), 0.01f);
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) break;
      stats.push_back(*s);
    }
    return stats;
  }
};

// The losses of 20 AdamW steps on CUDA track the CPU's: within 1e-5 relative at fp32; within
// the low-precision type's rounding at fp16 and bf16 (GEMMs accumulate in another order, and
// each rounded activation may differ by one unit).
TEST_F(CudaTrainingTest, TheExampleModelsTrainOnCudaAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    for (const auto& [precision, tolerance] : std::vector<std::pair<std::string, double>>{
             {"fp32", 1e-5}, {"fp16", 1e-2}, {"bf16", 3e-2}}) {
      SCOPED_TRACE(model + " " + precision);
      const std::string trained =
          compile("--optimizer adamw --precision " + precision + " --clip-grad-norm 1", model);
      std::unique_ptr<TrainingSession> cpu = open(trained, Device::kCpu);
      std::unique_ptr<TrainingSession> cuda = open(trained, Device::kCuda);
      ASSERT_TRUE(cpu && cuda);
      const std::vector<StepStats> want = train(*cpu, 20, 0, model);
      const std::vector<StepStats> got = train(*cuda, 20, 0, model);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i].loss, want[i].loss, tolerance * std::abs(want[i].loss)) << "step " << i;
        EXPECT_EQ(got[i].found_inf, want[i].found_inf) << "step " << i;
        EXPECT_EQ(got[i].skipped_steps, want[i].skipped_steps) << "step " << i;
      }
    }
  }
}

// SGD without momentum keeps no buffer: its CUDA update reads and writes only the parameter, and
// 20 steps track the CPU's (fp32 within 1e-5 relative; fp16 with dynamic loss scaling, whose
// skipped steps leave the parameter as it was, within fp16's rounding).
TEST_F(CudaTrainingTest, SgdWithoutMomentumTrainsOnCudaAsOnTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [flags, tolerance] : std::vector<std::pair<std::string, double>>{
           {"--precision fp32", 1e-5}, {"--precision fp16 --scale-init 1e30", 1e-2}}) {
    SCOPED_TRACE(flags);
    const std::string trained = compile("--optimizer sgd " + flags);
    std::unique_ptr<TrainingSession> cpu = open(trained, Device::kCpu);
    std::unique_ptr<TrainingSession> cuda = open(trained, Device::kCuda);
    ASSERT_TRUE(cpu && cuda);
    for (const std::string& name : cuda->state_names()) {
      EXPECT_FALSE(name.ends_with(".momentum_buffer")) << name;
    }
    const std::vector<StepStats> want = train(*cpu, 20);
    const std::vector<StepStats> got = train(*cuda, 20);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i].loss, want[i].loss, tolerance * std::abs(want[i].loss)) << "step " << i;
      EXPECT_EQ(got[i].skipped_steps, want[i].skipped_steps) << "step " << i;
    }
  }
}

// Deterministic kernels: two runs give the same bits, loss and state.
TEST_F(CudaTrainingTest, TwoCudaRunsAreBitIdentical) {
  SKIP_WITHOUT_GPU();
  const std::string model = compile("--optimizer adamw --precision fp16");
  std::unique_ptr<TrainingSession> a = open(model, Device::kCuda);
  std::unique_ptr<TrainingSession> b = open(model, Device::kCuda);
  ASSERT_TRUE(a && b);
  const std::vector<StepStats> x = train(*a, 10);
  const std::vector<StepStats> y = train(*b, 10);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(x[i].loss), std::bit_cast<uint64_t>(y[i].loss)) << i;
  }
  for (const std::string& name : a->state_names()) {
    EXPECT_TRUE(std::ranges::equal(a->state(name)->bytes(), b->state(name)->bytes())) << name;
  }
}

// A step recorded as a CUDA graph and replayed gives, bit for bit, what launching its kernels one
// by one gives: losses and every byte of state, for the three example models.
TEST_F(CudaTrainingTest, TheCudaGraphChangesNoBit) {
  SKIP_WITHOUT_GPU();
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    SCOPED_TRACE(model);
    const std::string trained = compile("--optimizer adamw --precision bf16", model);
    absl::StatusOr<std::unique_ptr<TrainingSession>> graphed =
        TrainingSession::load(trained, SessionOptions{.device = Device::kCuda, .cuda_graph = true});
    ASSERT_TRUE(graphed.ok()) << graphed.status();
    std::unique_ptr<TrainingSession> eager = open(trained, Device::kCuda);
    ASSERT_TRUE(eager);
    const std::vector<StepStats> x = train(**graphed, 8, 0, model);
    EXPECT_TRUE((*graphed)->uses_graph()) << (*graphed)->graph_status();
    const std::vector<StepStats> y = train(*eager, 8, 0, model);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(std::bit_cast<uint64_t>(x[i].loss), std::bit_cast<uint64_t>(y[i].loss)) << i;
    }
    for (const std::string& name : eager->state_names()) {
      EXPECT_TRUE(std::ranges::equal((*graphed)->state(name)->bytes(), eager->state(name)->bytes()))
          << name;
    }
  }
}

// Between two reads of the step figures the host never waits for the GPU nor copies from it.
TEST_F(CudaTrainingTest, QueuedStepsMakeNoHostWaitBetweenReads) {
  SKIP_WITHOUT_GPU();
  const std::string model = compile("--optimizer adamw --precision bf16");
  std::unique_ptr<TrainingSession> session = open(model, Device::kCuda);
  ASSERT_TRUE(session);
  const BatchData batches = data(*session);
  const Backend::Counters before = session->backend().counters();
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(session->queue_step(batches.batch(step % batches.num_batches()), 0.01f).ok());
  }
  EXPECT_EQ(session->backend().counters().synchronizations, before.synchronizations);
  EXPECT_EQ(session->backend().counters().copies_to_host, before.copies_to_host);
  absl::StatusOr<std::vector<StepStats>> taken = session->take_stats();
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->size(), 10u);
  EXPECT_EQ(session->backend().counters().synchronizations, before.synchronizations + 1);
  EXPECT_EQ(session->backend().counters().copies_to_host, before.copies_to_host + 1);
}

// A checkpoint does not depend on the device: 5 steps on one device, saved, resumed on the
// other for 5 more, ends where 10 steps on the second device end (fp32: within 1e-5).
TEST_F(CudaTrainingTest, CheckpointsMoveBetweenCpuAndCuda) {
  SKIP_WITHOUT_GPU();
  const std::string model = compile("--optimizer sgd --momentum 0.9");
  for (const auto& [first, second] : std::vector<std::pair<Device, Device>>{
           {Device::kCpu, Device::kCuda}, {Device::kCuda, Device::kCpu}}) {
    SCOPED_TRACE(str_cat(device_name(first), " -> ", device_name(second)));
    std::unique_ptr<TrainingSession> a = open(model, first);
    ASSERT_TRUE(a);
    train(*a, 5);
    const std::string checkpoint = path("ckpt.safetensors");
    ASSERT_TRUE(a->save_checkpoint(checkpoint).ok());
    std::unique_ptr<TrainingSession> b = open(model, second);
    ASSERT_TRUE(b);
    ASSERT_TRUE(b->load_checkpoint(checkpoint).ok());
    EXPECT_EQ(b->steps_done(), 5);
    const std::vector<StepStats> resumed = train(*b, 5, 5);
    std::unique_ptr<TrainingSession> c = open(model, second);
    ASSERT_TRUE(c);
    const std::vector<StepStats> straight = train(*c, 10);
    ASSERT_EQ(resumed.size(), 5u);
    ASSERT_EQ(straight.size(), 10u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(resumed[i].loss, straight[5 + i].loss, 1e-5 * std::abs(straight[5 + i].loss));
    }
  }
}

// A label out of range on CUDA is recorded on the device and found at the next read, naming the
// steps; the session then refuses to step or save until a checkpoint is loaded.
TEST_F(CudaTrainingTest, ADataErrorFoundAfterItsStepStopsTheSessionUntilACheckpointIsLoaded) {
  SKIP_WITHOUT_GPU();
  const std::string model = compile("--optimizer adamw");
  std::unique_ptr<TrainingSession> session = open(model, Device::kCuda);
  ASSERT_TRUE(session);
  const BatchData batches = data(*session);
  ASSERT_TRUE(session->save_checkpoint(path("start.safetensors")).ok());
  std::map<std::string, Tensor> bad = batches.batch(1);
  bad.at("label").set_element_i64(0, 1000);
  ASSERT_TRUE(session->queue_step(batches.batch(0), 0.01f).ok());
  ASSERT_TRUE(session->queue_step(bad, 0.01f).ok());  // found later, on the device
  ASSERT_TRUE(session->queue_step(batches.batch(2), 0.01f).ok());
  absl::StatusOr<std::vector<StepStats>> taken = session->take_stats();
  ASSERT_FALSE(taken.ok());
  EXPECT_THAT(taken.status().message(), ::testing::HasSubstr("one of steps 1 to 3"));
  EXPECT_THAT(taken.status().message(), ::testing::HasSubstr("1000"));
  EXPECT_FALSE(session->queue_step(batches.batch(0), 0.01f).ok());
  EXPECT_FALSE(session->save_checkpoint(path("after.safetensors")).ok());
  EXPECT_FALSE(std::filesystem::exists(path("after.safetensors")));
  ASSERT_TRUE(session->load_checkpoint(path("start.safetensors")).ok());
  EXPECT_TRUE(session->step(batches.batch(0), 0.01f).ok());
}

}  // namespace
}  // namespace ampc::runtime
