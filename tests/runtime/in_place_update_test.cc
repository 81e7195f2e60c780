// State updated in place: the planner stores each optimizer update (parameters, moments, the loss
// scale and its tracker) over the state it replaces, so a step needs no second copy of the
// state and no copy after the run. Checked against the copying path (every update an output of
// its own, copied over its state after the run: the path the training tests verified against
// PyTorch), bit for bit, over steps that update and steps the loss scaler skips; and by the
// memory the plan saves.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/batch_data.h"
#include "runtime/plan.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;
using runtime::BatchData;
using runtime::SessionOptions;
using runtime::TrainingSession;

class InPlaceUpdateTest : public testing::TempDirTest {
 protected:
  InPlaceUpdateTest() : TempDirTest("ampc_in_place_") {}

  // models/NAME.onnx compiled with `flags` into the test's folder.
  std::string compile(const std::string& name, const std::string& flags) const {
    const std::string out = path(name + ".train.onnx");
    const testing::CliResult r = testing::run_ampc(
        "compile " + testing::source_path("models/" + name + ".onnx") + " -o " + out + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }

  static std::unique_ptr<TrainingSession> open(const std::string& model, bool in_place) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        TrainingSession::load(model, SessionOptions{.update_state_in_place = in_place});
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }
};

struct Case {
  std::string model;
  std::string flags;
  int steps;
};

// Losses, norms, scales and every byte of state agree after each step, whether the state is
// updated in place or through copies.
TEST_F(InPlaceUpdateTest, TrainsBitForBitAsTheCopyingPath) {
  const std::vector<Case> cases = {
      {"mlp", "--optimizer sgd --momentum 0.9 --weight-decay 0.01", 6},
      {"mlp", "--optimizer adamw --weight-decay 0.01 --clip-grad-norm 1", 6},
      // A first scale far past f16's range: the first steps overflow and are skipped.
      {"mlp", "--optimizer adam --precision fp16 --scale-init 1e30 --scale-backoff 0.001", 8},
      {"cnn", "--optimizer adamw --precision bf16", 3},
      {"tiny_gpt", "--optimizer adamw --precision fp16 --accumulate 2", 3},
      {"mlp", "--optimizer sgd --precision fp16 --opt-level O3 --loss-scale dynamic", 6},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.flags);
    const std::string model = compile(c.model, c.flags);
    std::unique_ptr<TrainingSession> in_place = open(model, true);
    std::unique_ptr<TrainingSession> copying = open(model, false);
    ASSERT_TRUE(in_place && copying);
    absl::StatusOr<BatchData> data = BatchData::load(
        testing::source_path("models/" + c.model + ".train.npz"), in_place->batch_inputs());
    ASSERT_TRUE(data.ok()) << data.status();
    const int64_t k = in_place->accumulation_steps();
    int skipped = 0;
    for (int step = 0; step < c.steps; ++step) {
      std::vector<std::map<std::string, Tensor>> micro_batches;
      for (int64_t i = 0; i < k; ++i) micro_batches.push_back(data->batch(step * k + i));
      absl::StatusOr<runtime::StepStats> a = in_place->step(micro_batches, 0.01f);
      absl::StatusOr<runtime::StepStats> b = copying->step(micro_batches, 0.01f);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      EXPECT_EQ(std::bit_cast<uint64_t>(a->loss), std::bit_cast<uint64_t>(b->loss)) << step;
      EXPECT_EQ(std::bit_cast<uint64_t>(a->grad_norm), std::bit_cast<uint64_t>(b->grad_norm));
      EXPECT_EQ(a->found_inf, b->found_inf);
      EXPECT_EQ(a->skipped_steps, b->skipped_steps);
      skipped += a->found_inf;
      for (const std::string& name : in_place->state_names()) {
        absl::StatusOr<Tensor> x = in_place->state(name);
        absl::StatusOr<Tensor> y = copying->state(name);
        ASSERT_TRUE(x.ok() && y.ok());
        EXPECT_TRUE(std::ranges::equal(x->bytes(), y->bytes()))
            << name << " after step " << step + 1;
      }
    }
    if (c.flags.find("1e30") != std::string::npos) {
      EXPECT_GT(skipped, 0);
    }
  }
}

// The plan of an AdamW step stores every update of the optimizer and the loss scaler
// (parameters, moments, step counter, scale, tracker, skipped-step count) over its state; state
// that other ops update (BatchNorm's running statistics, from the forward pass) may keep an
// output of its own. The activation arena never grows, and where the update is the step's
// peak (the MLP: 26,914 parameters, a batch of 8) it shrinks by more than half the state's bytes
// (the `.next` outputs, live to the end of the run, and the update ops' results before the
// overflow select are gone). In the CNN and the GPT the peak is in the backward pass, which
// this does not change.
TEST_F(InPlaceUpdateTest, AnAdamWStepNeedsNoSecondCopyOfItsState) {
  for (const std::string name : {"mlp", "cnn", "tiny_gpt"}) {
    SCOPED_TRACE(name);
    const std::string model = compile(name, "--optimizer adamw --precision fp16");
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(model);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const Graph& step = *(*graph)->training_step();
    absl::StatusOr<std::unique_ptr<runtime::Plan>> in_place =
        runtime::Plan::build(step, runtime::Device::kCpu);
    absl::StatusOr<std::unique_ptr<runtime::Plan>> copying = runtime::Plan::build(
        step, runtime::Device::kCpu, runtime::PlanOptions{.update_state_in_place = false});
    ASSERT_TRUE(in_place.ok() && copying.ok());
    int64_t state_bytes = 0;
    int64_t optimizer_bytes = 0;
    for (const Graph::StateUpdate& update : step.state_updates()) {
      const Value* next = nullptr;
      for (const Value* output : step.outputs()) {
        if (output->name() == update.update) next = output;
      }
      ASSERT_NE(next, nullptr) << update.update;
      state_bytes += next->type().byte_size();
      EXPECT_FALSE((*copying)->updates_in_place(next)) << update.state;
      // The optimizer's and the loss scaler's state: parameters (those with moments), moments,
      // the step counter, the scale and its counters.
      const std::string& state = update.state;
      const bool parameter = std::any_of(
          step.state_updates().begin(), step.state_updates().end(),
          [&](const Graph::StateUpdate& other) { return other.state == state + ".exp_avg"; });
      if (!parameter && !state.ends_with(".exp_avg") && !state.ends_with(".exp_avg_sq") &&
          !state.starts_with("optimizer.") && !state.starts_with("loss_scale")) {
        continue;
      }
      optimizer_bytes += next->type().byte_size();
      EXPECT_TRUE((*in_place)->updates_in_place(next))
          << state << " from " << next->producer()->op_type();
    }
    EXPECT_GE((*in_place)->in_place_state_bytes(), optimizer_bytes);
    const int64_t before = (*copying)->arena_bytes(runtime::ArenaKind::kActivations);
    const int64_t after = (*in_place)->arena_bytes(runtime::ArenaKind::kActivations);
    EXPECT_LE(after, before);
    if (name == "mlp") {
      EXPECT_GE(before - after, state_bytes / 2);
    }
    // What `ampc inspect --precision` reports is this plan's figure.
    const testing::CliResult r = testing::run_ampc("inspect --precision --format json " + model);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json json = nlohmann::json::parse(r.out);
    EXPECT_EQ(json["graphs"][1]["kind"], "training_step");
    EXPECT_EQ(json["graphs"][1]["summary"]["planned_memory"]["activations"].get<int64_t>(), after);
    std::printf("%s: AdamW state %lld bytes, %lld updated in place; activations %lld -> %lld\n",
                name.c_str(), static_cast<long long>(state_bytes),
                static_cast<long long>((*in_place)->in_place_state_bytes()),
                static_cast<long long>(before), static_cast<long long>(after));
  }
}

// The eval graph reads the parameters and running statistics where the step updates them: its
// own plan keeps no copy (the parameters arena holds only its constants), and evaluate() after
// each step gives what the exported model (written from the step's state) gives when run on its
// own, bit for bit.
TEST_F(InPlaceUpdateTest, TheEvalGraphReadsTheStepsState) {
  for (const std::string name : {"mlp", "cnn"}) {
    SCOPED_TRACE(name);
    const std::string model = compile(name, "--optimizer adamw --precision bf16");
    std::unique_ptr<TrainingSession> session = open(model, true);
    ASSERT_TRUE(session);
    ASSERT_NE(session->eval_plan(), nullptr);
    int64_t state_bytes = 0;
    int64_t eval_initializer_bytes = 0;
    for (const Value* init : session->eval_graph()->initializers()) {
      eval_initializer_bytes += init->type().byte_size();
      if (session->has_state(init->name())) state_bytes += init->type().byte_size();
    }
    EXPECT_GT(state_bytes, 0);
    EXPECT_LE(session->eval_plan()->arena_bytes(runtime::ArenaKind::kParameters),
              eval_initializer_bytes - state_bytes +
                  64 * static_cast<int64_t>(session->eval_graph()->initializers().size()));
    absl::StatusOr<BatchData> data = BatchData::load(
        testing::source_path("models/" + name + ".train.npz"), session->batch_inputs());
    ASSERT_TRUE(data.ok()) << data.status();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(session->step(data->batch(step), 0.01f).ok());
      absl::StatusOr<std::map<std::string, Tensor>> evaluated = session->evaluate(data->batch(0));
      ASSERT_TRUE(evaluated.ok()) << evaluated.status();
      const std::string exported = path("exported.onnx");
      ASSERT_TRUE(session
                      ->export_inference_model(exported, ExportOptions{},
                                               TrainingSession::ExportedLoss::kKept)
                      .ok());
      absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> alone =
          runtime::InferenceSession::load(exported);
      ASSERT_TRUE(alone.ok()) << alone.status();
      absl::StatusOr<std::map<std::string, Tensor>> ran = (*alone)->run(data->batch(0));
      ASSERT_TRUE(ran.ok()) << ran.status();
      for (const auto& [output, value] : *ran) {
        ASSERT_TRUE(evaluated->contains(output)) << output;
        EXPECT_TRUE(std::ranges::equal(evaluated->at(output).bytes(), value.bytes()))
            << output << " after step " << step + 1;
      }
    }
  }
}

}  // namespace
}  // namespace ampc
