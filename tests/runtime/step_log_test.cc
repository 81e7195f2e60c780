// Steps that run without the host waiting: TrainingSession::queue_step leaves each step's figures
// (loss, grad_norm, the loss scale it used, the overflow flag, the skipped-step count) in device
// memory, and take_stats reads every queued step's at once. Checked against step(), which waits
// after each step: the same figures and state, bit for bit; and by the backend's counters, which
// must show no wait for the device and no copy to the host between two reads.
#include <bit>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/batch_data.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using runtime::Backend;
using runtime::BatchData;
using runtime::StepStats;
using runtime::TrainingSession;

class StepLogTest : public testing::TempDirTest {
 protected:
  StepLogTest() : TempDirTest("ampc_step_log_") {}

  // models/NAME.onnx compiled with `flags` into the test's folder.
  std::string compile(const std::string& name, const std::string& flags) const {
    const std::string out = path(name + ".train.onnx");
    const testing::CliResult r = testing::run_ampc(
        "compile " + testing::source_path("models/" + name + ".onnx") + " -o " + out + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }

  static std::unique_ptr<TrainingSession> open(const std::string& model) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session = TrainingSession::load(model);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }

  static BatchData data(const std::string& name, const TrainingSession& session) {
    absl::StatusOr<BatchData> data = BatchData::load(
        testing::source_path("models/" + name + ".train.npz"), session.batch_inputs());
    EXPECT_TRUE(data.ok()) << data.status();
    return *std::move(data);
  }

  // The micro-batches of step `step` (from 0), as ampc train reads them.
  static std::vector<std::map<std::string, Tensor>> micro_batches(const BatchData& data,
                                                                  const TrainingSession& session,
                                                                  int64_t step) {
    const int64_t k = session.accumulation_steps();
    std::vector<std::map<std::string, Tensor>> batches;
    for (int64_t i = 0; i < k; ++i) {
      batches.push_back(data.batch((step % data.num_batches()) * k + i));
    }
    return batches;
  }
};

void expect_same(const StepStats& a, const StepStats& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(std::bit_cast<uint64_t>(a.loss), std::bit_cast<uint64_t>(b.loss)) << a.step;
  EXPECT_EQ(std::bit_cast<uint64_t>(a.grad_norm), std::bit_cast<uint64_t>(b.grad_norm)) << a.step;
  EXPECT_EQ(a.lr, b.lr) << a.step;
  EXPECT_EQ(std::bit_cast<uint64_t>(a.loss_scale), std::bit_cast<uint64_t>(b.loss_scale)) << a.step;
  EXPECT_EQ(a.found_inf, b.found_inf) << a.step;
  EXPECT_EQ(a.skipped_steps, b.skipped_steps) << a.step;
}

struct Case {
  std::string model;
  std::string flags;
  int steps;
  int read_every;  // take_stats after this many queued steps
};

// Queued in runs of `read_every` and read at once, the steps give the figures step() gives one
// by one, and leave every byte of state the same; between reads the backend neither waits nor
// copies to the host, and each read is one wait and one copy.
TEST_F(StepLogTest, QueuedStepsGiveWhatStepGivesWithoutWaitingBetweenReads) {
  const std::vector<Case> cases = {
      {"mlp", "--optimizer sgd --momentum 0.9", 7, 3},
      // A first scale far past f16's range: the first steps overflow and are skipped, so the
      // logged scales, flags and counts change from step to step.
      {"mlp", "--optimizer adam --precision fp16 --scale-init 1e30 --scale-backoff 0.001", 13, 5},
      // Two micro-batches per step: the logged loss is their mean.
      {"tiny_gpt", "--optimizer adamw --precision bf16 --accumulate 2", 4, 2},
      // More steps than the log has slots: queue_step reads the full log ahead, once.
      {"mlp", "--optimizer sgd", 70, 70},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.flags);
    const std::string model = compile(c.model, c.flags);
    std::unique_ptr<TrainingSession> waiting = open(model);
    std::unique_ptr<TrainingSession> queued = open(model);
    ASSERT_TRUE(waiting && queued);
    const BatchData batches = data(c.model, *waiting);
    std::vector<StepStats> expected;
    for (int step = 0; step < c.steps; ++step) {
      absl::StatusOr<StepStats> stats =
          waiting->step(micro_batches(batches, *waiting, step), 0.01f);
      ASSERT_TRUE(stats.ok()) << stats.status();
      expected.push_back(*stats);
    }
    const Backend::Counters& counters = queued->backend().counters();
    const Backend::Counters start = counters;
    std::vector<StepStats> got;
    for (int step = 0; step < c.steps; ++step) {
      const Backend::Counters before = counters;
      ASSERT_TRUE(queued->queue_step(micro_batches(batches, *queued, step), 0.01f).ok());
      // The exceptions: the 65th queued step reads the 64 before it (the log's slots), and the
      // first step of an accumulating model reads the micro-step counter (once).
      const bool reads_ahead = step > 0 && step % 64 == 0;
      const bool reads_counter = step == 0 && queued->accumulation_steps() > 1;
      if (!reads_ahead && !reads_counter) {
        EXPECT_EQ(counters.synchronizations, before.synchronizations) << "step " << step + 1;
        EXPECT_EQ(counters.copies_to_host, before.copies_to_host) << "step " << step + 1;
      }
      if ((step + 1) % c.read_every != 0 && step + 1 != c.steps) continue;
      const Backend::Counters before_read = counters;
      absl::StatusOr<std::vector<StepStats>> taken = queued->take_stats();
      ASSERT_TRUE(taken.ok()) << taken.status();
      got.insert(got.end(), taken->begin(), taken->end());
      EXPECT_EQ(counters.synchronizations, before_read.synchronizations + 1);
      EXPECT_EQ(counters.copies_to_host, before_read.copies_to_host + 1);
    }
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], expected[i]);
    if (c.flags.find("1e30") != std::string::npos) {
      EXPECT_TRUE(got.front().found_inf);
      EXPECT_FALSE(got.back().found_inf);
    }
    if (c.steps > 64) {
      // Two reads in all: the one ahead at the 65th step, and the last.
      EXPECT_EQ(counters.synchronizations - start.synchronizations, 2);
      EXPECT_EQ(counters.copies_to_host - start.copies_to_host, 2);
    }
    EXPECT_EQ(queued->untaken_steps(), 0);
    for (const std::string& name : queued->state_names()) {
      absl::StatusOr<Tensor> x = queued->state(name);
      absl::StatusOr<Tensor> y = waiting->state(name);
      ASSERT_TRUE(x.ok() && y.ok());
      EXPECT_TRUE(std::ranges::equal(x->bytes(), y->bytes())) << name;
    }
  }
}

// A step that fails while it is queued (on the CPU every data error does: a label out of range)
// returns its error, counts no step and changes no state; the steps queued before it keep their
// figures, and training goes on from where they left it.
TEST_F(StepLogTest, AStepThatFailsWhenQueuedLeavesTheQueuedStepsAndTheStateAsTheyWere) {
  const std::string model = compile("mlp", "--optimizer adamw");
  std::unique_ptr<TrainingSession> queued = open(model);
  std::unique_ptr<TrainingSession> waiting = open(model);
  ASSERT_TRUE(queued && waiting);
  const BatchData batches = data("mlp", *queued);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(queued->queue_step(batches.batch(step), 0.01f).ok());
    ASSERT_TRUE(waiting->step(batches.batch(step), 0.01f).ok());
  }
  std::map<std::string, Tensor> bad = batches.batch(2);
  bad.at("label").set_element_i64(3, 1000);
  const absl::Status failed = queued->queue_step(bad, 0.01f);
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("1000"), std::string_view::npos) << failed;
  EXPECT_EQ(queued->steps_done(), 2);
  EXPECT_EQ(queued->untaken_steps(), 2);
  ASSERT_TRUE(queued->queue_step(batches.batch(2), 0.01f).ok());
  ASSERT_TRUE(waiting->step(batches.batch(2), 0.01f).ok());
  absl::StatusOr<std::vector<StepStats>> taken = queued->take_stats();
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 3u);
  EXPECT_EQ(taken->back().step, 3);
  for (const std::string& name : queued->state_names()) {
    EXPECT_TRUE(std::ranges::equal(queued->state(name)->bytes(), waiting->state(name)->bytes()))
        << name;
  }
}

// Saving a checkpoint waits for the queued steps and keeps their figures for take_stats; the
// checkpoint is the one the waiting path writes. Loading one drops the figures of the steps it
// replaces.
TEST_F(StepLogTest, CheckpointsWaitForTheQueuedSteps) {
  const std::string model = compile("mlp", "--optimizer sgd --momentum 0.9");
  std::unique_ptr<TrainingSession> queued = open(model);
  std::unique_ptr<TrainingSession> waiting = open(model);
  ASSERT_TRUE(queued && waiting);
  const BatchData batches = data("mlp", *queued);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(queued->queue_step(batches.batch(step), 0.01f).ok());
    ASSERT_TRUE(waiting->step(batches.batch(step), 0.01f).ok());
  }
  ASSERT_TRUE(queued->save_checkpoint(path("queued.safetensors")).ok());
  ASSERT_TRUE(waiting->save_checkpoint(path("waiting.safetensors")).ok());
  EXPECT_EQ(testing::read_file(path("queued.safetensors")),
            testing::read_file(path("waiting.safetensors")));
  EXPECT_EQ(queued->untaken_steps(), 3);
  ASSERT_TRUE(queued->queue_step(batches.batch(3), 0.01f).ok());
  ASSERT_TRUE(queued->load_checkpoint(path("waiting.safetensors")).ok());
  EXPECT_EQ(queued->untaken_steps(), 0);
  EXPECT_EQ(queued->steps_done(), 3);
  absl::StatusOr<std::vector<StepStats>> taken = queued->take_stats();
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(taken->empty());
}

// The CPU backend has no graphs: a session that asks for one runs its kernels one by one, gives
// the same figures, and says why it did not record one.
TEST_F(StepLogTest, AGraphAskedForOnTheCpuRunsEagerlyAndSaysWhy) {
  const std::string model = compile("mlp", "--optimizer sgd --momentum 0.9");
  absl::StatusOr<std::unique_ptr<TrainingSession>> asked =
      TrainingSession::load(model, runtime::SessionOptions{.cuda_graph = true});
  ASSERT_TRUE(asked.ok()) << asked.status();
  std::unique_ptr<TrainingSession> plain = open(model);
  const BatchData batches = data("mlp", *plain);
  for (int step = 0; step < 3; ++step) {
    absl::StatusOr<StepStats> a = (*asked)->step(batches.batch(step), 0.01f);
    absl::StatusOr<StepStats> b = plain->step(batches.batch(step), 0.01f);
    ASSERT_TRUE(a.ok() && b.ok());
    expect_same(*a, *b);
  }
  EXPECT_FALSE((*asked)->uses_graph());
  EXPECT_EQ((*asked)->graph_status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE((*asked)->graph_status().message().find("cpu"), std::string_view::npos);
}

}  // namespace
}  // namespace ampc
