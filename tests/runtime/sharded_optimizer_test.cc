// The sharded optimizer (ZeRO stage 1: SessionOptions::shard_optimizer, passes/data_parallel.h)
// on Gloo: each rank keeps one block of every optimizer moment, and the group trains as one rank
// with the whole batch would; its checkpoints hold the whole moments, so any number of ranks
// resumes them.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/data_parallel.h"
#include "tests/runtime/data_parallel_test_util.h"

namespace ampc::runtime::data_parallel_testing {
namespace {

// ZeRO stage 1: each rank keeps and updates one block of every moment, and the group trains as
// one rank with the whole batch (and as the unsharded group): 2 and 4 ranks, SGD with momentum
// and AdamW, f32 within 1e-6; fp16 with the same skipped steps and scales; the CNN example with
// its BatchNorms; accumulation over 2 micro-batches.
TEST(ShardedOptimizer, TheShardedOptimizerTrainsLikeOneRankWithTheWholeBatch) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    for (int ranks : {2, 4}) {
      SCOPED_TRACE(
          str_cat(kind == OptimizerOptions::Kind::kSgd ? "sgd, " : "adamw, ", ranks, " ranks"));
      expect_same_training(Recipe{.optimizer = kind, .shard_optimizer = true}, ranks, 0.05f, 1e-6);
    }
  }
  LossScaleOptions scale;
  scale.init = 0x1p20f;
  scale.growth_interval = 3;
  expect_same_training(Recipe{.fp16 = true, .loss_scale = scale, .shard_optimizer = true}, 2, 0.05f,
                       5e-3);
  expect_same_training(Recipe{.example = "cnn", .shard_optimizer = true}, 4, 0.05f, 1e-6, 1e-5);
  expect_same_training(Recipe{.accumulate = 2, .shard_optimizer = true}, 2, 0.05f, 1e-6);
}

// 3 ranks and a w1 of 4 x 8 = 32 elements: blocks of 11 (the last padded with one zero). The
// parameters stay whole on every rank.
TEST(ShardedOptimizer, EachRankKeepsOneBlockOfEveryMoment) {
  on_ranks(3, [&](int /*rank*/, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(Recipe{.optimizer = OptimizerOptions::Kind::kAdamW, .shard_optimizer = true}, 4,
             std::move(group));
    ASSERT_TRUE(session.ok()) << session.status();
    const auto& sharded = (*session)->sharded_state();
    EXPECT_EQ(sharded.size(), 6u);  // exp_avg and exp_avg_sq of w1, b1 and w2
    ASSERT_TRUE(sharded.contains("w1.exp_avg"));
    EXPECT_EQ(sharded.at("w1.exp_avg"), (Shape{4, 8}));
    EXPECT_EQ((*session)->state("w1.exp_avg")->shape(), (Shape{11}));
    EXPECT_EQ((*session)->state("w1.exp_avg_sq")->shape(), (Shape{11}));
    EXPECT_EQ((*session)->state("b1.exp_avg")->shape(), (Shape{3}));  // 8 / 3, rounded up
    EXPECT_EQ((*session)->state("w1")->shape(), (Shape{4, 8}));
  });
}

// A checkpoint of 2 sharded ranks after 10 steps holds the whole moments: 2 ranks resume it
// bit-identically, and 4 sharded ranks, or one rank with the whole batch, resume it and end where
// the 2 ranks end within 1e-6.
TEST(ShardedOptimizer, AShardedCheckpointResumesOnAnyNumberOfRanks) {
  const Recipe sharded{.optimizer = OptimizerOptions::Kind::kAdamW, .shard_optimizer = true};
  StoreDirectory dir;  // a fresh directory, removed at the end
  const std::string checkpoint = dir.path() + "/checkpoint.safetensors";
  std::vector<RunLog> through(2);
  on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(sharded, whole_batch(sharded) / 2, std::move(group));
    ASSERT_TRUE(session.ok()) << session.status();
    train(sharded, **session, rank, 2, 0.05f, 0, 10);
    ASSERT_TRUE((*session)->save_checkpoint(checkpoint).ok());
    through[rank] = train(sharded, **session, rank, 2, 0.05f, 10, 10);
  });
  ASSERT_TRUE(std::filesystem::exists(checkpoint));
  auto resume = [&](const Recipe& recipe, int ranks) {
    std::vector<RunLog> runs(ranks);
    on_ranks(ranks, [&](int rank, std::shared_ptr<comm::Communicator> group) {
      absl::StatusOr<std::unique_ptr<TrainingSession>> session =
          open(recipe, whole_batch(recipe) / ranks, ranks > 1 ? std::move(group) : nullptr);
      ASSERT_TRUE(session.ok()) << session.status();
      absl::Status loaded = (*session)->load_checkpoint(checkpoint);
      ASSERT_TRUE(loaded.ok()) << loaded;
      runs[rank] = train(recipe, **session, rank, ranks, 0.05f, 10, 10);
    });
    return runs;
  };
  const std::vector<RunLog> again = resume(sharded, 2);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(again[rank].state, through[rank].state);
  const std::vector<RunLog> four = resume(sharded, 4);
  const std::vector<RunLog> one = resume(Recipe{.optimizer = OptimizerOptions::Kind::kAdamW}, 1);
  for (const char* name : {"w1", "b1", "w2"}) {
    EXPECT_LT(relative_gap(four[0].state.at(name), through[0].state.at(name)), 1e-6) << name;
    EXPECT_LT(relative_gap(one[0].state.at(name), through[0].state.at(name)), 1e-6) << name;
  }
}

// The sharded step: the gradients are reduce-scattered, each update reads its parameter's
// block, one AllGather gathers every parameter; the overflow flag and the norm are summed.
TEST(ShardedOptimizer, TheShardedStepScattersGradientsAndGathersParameters) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  std::unique_ptr<Graph> graph = testing::parse_or_fail(mlp_model(8));
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
  Graph& step = *graph->mutable_training_step();
  absl::StatusOr<DataParallelRewrite> rewrite =
      insert_gradient_all_reduce(step, {.ranks = 4, .shard_optimizer = true});
  ASSERT_TRUE(rewrite.ok()) << rewrite.status();
  std::map<std::string, int> ops;
  for (const auto& node : step.nodes()) {
    ++ops[node->op_type()];
    if (node->op_type() == "Adam") {
      EXPECT_EQ(node->operand(0)->producer()->op_type(), "Shard") << node->describe();
      EXPECT_EQ(node->output(0)->type().num_elements(), node->operand(0)->type().num_elements());
    }
  }
  EXPECT_EQ(ops["ReduceScatter"], 1);  // one 25 MB bucket
  EXPECT_EQ(ops["Shard"], 3);
  EXPECT_EQ(ops["AllGather"], 1);
  EXPECT_EQ(ops["AllReduce"], 2);  // the norm's square and the loss (no loss scaling here)
  ASSERT_EQ(rewrite->sharded_state.size(), 6u);
  EXPECT_EQ(rewrite->sharded_state[0].shape, (Shape{4, 8}));
  // The step's outputs are whole: w1.next is the gathered w1.
  for (const Value* output : step.outputs()) {
    if (output->name() == "w1.next") {
      EXPECT_EQ(output->shape(), (Shape{4, 8}));
    }
  }
}

}  // namespace
}  // namespace ampc::runtime::data_parallel_testing
