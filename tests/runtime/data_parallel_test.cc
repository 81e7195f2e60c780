// Data-parallel training on Gloo (passes/data_parallel.h, SessionOptions::communicator), against
// its definition: N ranks, each training on its shard of every batch (rank r takes rows
// r * B / N ... (r + 1) * B / N - 1), take the steps one rank takes on the whole batch: the same
// losses and weights within f32 rounding in f32, and at fp16 with dynamic loss scaling the same
// skipped steps and scale sequence. Ranks are threads of this process, each with its own session
// and its own Gloo connections over the loopback.
#include "passes/data_parallel.h"

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/training_session.h"
#include "tests/runtime/comm/comm_test_util.h"
#include "tests/runtime/mlp_training_util.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

using testing::mlp_model;
using testing::relative_update_gap;
using testing::StoreDirectory;
using testing::uniform;

constexpr int kBatch = 16;  // the whole batch's rows
constexpr int kSteps = 20;

struct Recipe {
  bool fp16 = false;
  OptimizerOptions::Kind optimizer = OptimizerOptions::Kind::kSgd;
  std::optional<LossScaleOptions> loss_scale = std::nullopt;
  int64_t accumulate = 1;
};

absl::StatusOr<std::unique_ptr<TrainingSession>> open(const Recipe& recipe, int batch,
                                                      std::shared_ptr<comm::Communicator> group) {
  CompileOptions options;
  if (recipe.fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
  }
  options.training = TrainingOptions{};
  options.training->optimizer.kind = recipe.optimizer;
  options.training->optimizer.momentum = 0.9f;
  options.training->loss_scale = recipe.loss_scale;
  options.training->accumulate = recipe.accumulate;
  std::unique_ptr<Graph> graph = testing::parse_or_fail(mlp_model(batch));
  if (graph == nullptr) return absl::InvalidArgumentError("model did not parse");
  Diagnostics diagnostics;
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, options, diagnostics));
  SessionOptions session_options;
  session_options.communicator = std::move(group);
  return TrainingSession::create(std::move(graph), session_options);
}

using Batch = std::map<std::string, Tensor>;

// Step `step`'s whole batch, and rank r's shard of it.
Batch batch_rows(int step, int first, int rows) {
  std::mt19937 rng(1000 + step);
  const std::vector<float> x = uniform(rng, kBatch * 4, 1.0f);
  const std::vector<float> t = uniform(rng, kBatch * 3, 1.0f);
  return {{"x", Tensor::from_f32({rows, 4}, std::vector<float>(x.begin() + first * 4,
                                                               x.begin() + (first + rows) * 4))},
          {"t", Tensor::from_f32({rows, 3}, std::vector<float>(t.begin() + first * 3,
                                                               t.begin() + (first + rows) * 3))}};
}

// What a run reports and ends with.
struct RunLog {
  std::vector<StepStats> stats;
  std::map<std::string, std::vector<double>> state;
};

RunLog train(TrainingSession& session, int rank, int ranks, float lr) {
  RunLog run;
  const int rows = kBatch / ranks;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<StepStats> stats = session.step(batch_rows(step, rank * rows, rows), lr);
    EXPECT_TRUE(stats.ok()) << "rank " << rank << ": " << stats.status();
    if (!stats.ok()) break;
    run.stats.push_back(*stats);
  }
  for (const std::string& name : session.state_names()) {
    absl::StatusOr<Tensor> value = session.state(name);
    if (value.ok()) run.state[name] = value->to_double_vector();
  }
  return run;
}

// Runs body(rank, group) on `ranks` ranks at once, one thread each, joined in a Gloo group.
void on_ranks(int ranks,
              const std::function<void(int rank, std::shared_ptr<comm::Communicator>)>& body) {
  StoreDirectory store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      comm::GlooOptions options;
      options.rank = rank;
      options.size = ranks;
      options.store_directory = store.path();
      options.timeout = std::chrono::seconds(60);
      absl::StatusOr<std::unique_ptr<comm::Communicator>> group = comm::connect_gloo(options);
      ASSERT_TRUE(group.ok()) << group.status();
      body(rank, std::shared_ptr<comm::Communicator>(*std::move(group)));
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// Trains `ranks` ranks at once (threads) and returns each rank's run.
std::vector<RunLog> train_group(const Recipe& recipe, int ranks, float lr) {
  std::vector<RunLog> runs(ranks);
  on_ranks(ranks, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(recipe, kBatch / ranks, std::move(group));
    ASSERT_TRUE(session.ok()) << "rank " << rank << ": " << session.status();
    runs[rank] = train(**session, rank, ranks, lr);
  });
  return runs;
}

RunLog train_alone(const Recipe& recipe, float lr) {
  absl::StatusOr<std::unique_ptr<TrainingSession>> session = open(recipe, kBatch, nullptr);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? train(**session, 0, 1, lr) : RunLog{};
}

constexpr std::string_view kParameters[] = {"w1", "b1", "w2"};

void expect_same_training(const Recipe& recipe, int ranks, float lr, double tolerance) {
  const RunLog alone = train_alone(recipe, lr);
  const std::vector<RunLog> group = train_group(recipe, ranks, lr);
  ASSERT_EQ(alone.stats.size(), static_cast<size_t>(kSteps));
  absl::StatusOr<std::unique_ptr<TrainingSession>> fresh = open(recipe, kBatch, nullptr);
  ASSERT_TRUE(fresh.ok());
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE(str_cat("rank ", rank, " of ", ranks));
    const RunLog& run = group[rank];
    ASSERT_EQ(run.stats.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      const StepStats& a = run.stats[step];
      const StepStats& b = alone.stats[step];
      // The logged loss is the mean of the shards' mean losses: the whole batch's.
      EXPECT_NEAR(a.loss, b.loss, tolerance * std::abs(b.loss)) << "step " << step + 1;
      if (std::isfinite(b.grad_norm)) {
        EXPECT_NEAR(a.grad_norm, b.grad_norm, tolerance * b.grad_norm) << "step " << step + 1;
      } else {  // an overflowing step: the norm of unscaled infs or NaNs
        EXPECT_FALSE(std::isfinite(a.grad_norm)) << "step " << step + 1;
      }
      EXPECT_EQ(a.found_inf, b.found_inf) << "step " << step + 1;
      EXPECT_EQ(a.skipped_steps, b.skipped_steps) << "step " << step + 1;
      if (!std::isnan(b.loss_scale)) {
        EXPECT_EQ(a.loss_scale, b.loss_scale) << "step " << step + 1;
      }
    }
    for (std::string_view name : kParameters) {
      const std::vector<double> start = (*fresh)->state(name)->to_double_vector();
      EXPECT_LT(relative_update_gap(start, run.state.at(std::string(name)),
                                    alone.state.at(std::string(name))),
                tolerance)
          << name;
    }
  }
  // Every rank holds the same state, bit for bit.
  for (int rank = 1; rank < ranks; ++rank) EXPECT_EQ(group[rank].state, group[0].state);
}

TEST(DataParallel, TwoAndFourRanksTrainLikeOneRankWithTheWholeBatchInF32) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    for (int ranks : {2, 4}) {
      SCOPED_TRACE(
          str_cat(kind == OptimizerOptions::Kind::kSgd ? "sgd, " : "adamw, ", ranks, " ranks"));
      expect_same_training(Recipe{.optimizer = kind}, ranks, 0.05f, 1e-6);
    }
  }
}

// fp16 with a dynamic scale that starts too high (every early step overflows in some rank's
// shard or in the whole batch) and grows every 3 clean steps: the group skips exactly the steps
// the single rank skips and moves the scale the same way.
TEST(DataParallel, Fp16RanksSkipStepsAndMoveTheScaleLikeOneRank) {
  LossScaleOptions scale;
  scale.init = 0x1p20f;
  scale.growth_interval = 3;
  const Recipe recipe{.fp16 = true, .loss_scale = scale};
  const RunLog alone = train_alone(recipe, 0.05f);
  ASSERT_EQ(alone.stats.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(alone.stats.back().skipped_steps, 0);  // the test exercises skipping
  expect_same_training(recipe, 2, 0.05f, 5e-3);
}

TEST(DataParallel, TheStepAveragesEveryGradientInBucketsBeforeTheOptimizerReadsIt) {
  CompileOptions options;
  options.training = TrainingOptions{};
  std::unique_ptr<Graph> graph = testing::parse_or_fail(mlp_model(8));
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
  Graph& step = *graph->mutable_training_step();
  // 8-byte buckets: one gradient per bucket, in the order the backward produces them.
  absl::StatusOr<int> added = insert_gradient_all_reduce(step, {.ranks = 2, .bucket_bytes = 8});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(*added, 3 + 1);  // w2, b1, w1, and the loss
  std::vector<std::string> order;
  for (const auto& node : step.nodes()) {
    if (node->op_type() != "AllReduce") {
      // Nothing but the means reads a gradient now.
      for (const Value* operand : node->operands()) {
        if (operand == nullptr) continue;
        EXPECT_FALSE(operand->name().ends_with(".grad")) << operand->name();
      }
      continue;
    }
    order.push_back(node->operand(0)->name());
    // Right after the gradient's producer.
    const Node* producer = node->operand(0)->producer();
    ASSERT_NE(producer, nullptr);
    const Node* previous = nullptr;
    for (const auto& n : step.nodes()) {
      if (n.get() == node.get()) break;
      previous = n.get();
    }
    if (node->name() == "data_parallel/loss") continue;
    EXPECT_EQ(previous, producer) << node->name();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"w2.grad", "b1.grad", "w1.grad", "loss.local"}));
}

// Rank 1 compiled its model for another batch size: every rank fails at start-up naming it,
// before any collective of a step could hang.
TEST(DataParallel, RanksWithDifferentStepsFailAtStartUpNamingTheRank) {
  std::vector<absl::Status> statuses(3);
  on_ranks(3, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    statuses[rank] = open(Recipe{}, rank == 1 ? 4 : 8, std::move(group)).status();
  });
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("rank 1 loads a training step that differs from rank 0's"),
              std::string::npos)
        << status;
  }
}

TEST(DataParallel, AStepThatAccumulatesGradientsIsRefused) {
  std::vector<absl::Status> statuses(2);
  on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    statuses[rank] = open(Recipe{.accumulate = 2}, kBatch / 2, std::move(group)).status();
  });
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    EXPECT_NE(status.message().find("--accumulate"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace ampc::runtime
