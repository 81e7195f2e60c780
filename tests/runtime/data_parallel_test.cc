// Data-parallel training on Gloo (passes/data_parallel.h, SessionOptions::communicator), against
// its definition: N ranks, each training on its shard of every batch (rank r takes rows
// r * B / N ... (r + 1) * B / N - 1), take the steps one rank takes on the whole batch: the same
// losses and weights within f32 rounding in f32, and at fp16 with dynamic loss scaling the same
// skipped steps and scale sequence. Ranks are threads of this process, each with its own session
// and its own Gloo connections over the loopback.
#include "passes/data_parallel.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tests/runtime/data_parallel_test_util.h"

namespace ampc::runtime::data_parallel_testing {
namespace {

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
// A session given a group of one trains data-parallel over it (the rewrite runs: its sums are
// its own values, the seed is 1/1, the mean multiplies by 1): every step's loss and norm and the
// final state are those of a session without a group, bit for bit. One NCCL rank on one GPU
// (tests/gpu/nccl_communicator_test.cc) measures the communicator's cost this way.
TEST(DataParallel, AGroupOfOneTrainsBitForBitAsNoGroup) {
  LossScaleOptions scale;  // skips steps (Fp16RanksSkipStepsAndMoveTheScaleLikeOneRank)
  scale.init = 0x1p20f;
  scale.growth_interval = 3;
  for (const Recipe& recipe :
       {Recipe{.optimizer = OptimizerOptions::Kind::kAdamW},
        Recipe{.fp16 = true, .loss_scale = scale},
        Recipe{.optimizer = OptimizerOptions::Kind::kAdamW, .shard_optimizer = true},
        Recipe{.optimizer = OptimizerOptions::Kind::kAdamW, .batch_norm = true}}) {
    SCOPED_TRACE(str_cat(recipe.fp16 ? "fp16" : "f32", recipe.shard_optimizer ? ", sharded" : "",
                         recipe.batch_norm ? ", batch norm" : ""));
    const RunLog alone = train_alone(recipe, 0.05f);
    RunLog grouped;
    on_ranks(1, [&](int rank, std::shared_ptr<comm::Communicator> group) {
      absl::StatusOr<std::unique_ptr<TrainingSession>> session =
          open(recipe, whole_batch(recipe), std::move(group));
      ASSERT_TRUE(session.ok()) << session.status();
      // The rewrite ran: the moments are sharded (in one block).
      if (recipe.shard_optimizer) {
        EXPECT_FALSE((*session)->sharded_state().empty());
      }
      grouped = train(recipe, **session, rank, 1, 0.05f);
    });
    ASSERT_EQ(grouped.stats.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(alone.stats.size(), static_cast<size_t>(kSteps));
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(grouped.stats[step].loss, alone.stats[step].loss) << "step " << step + 1;
      if (std::isfinite(alone.stats[step].grad_norm)) {
        EXPECT_EQ(grouped.stats[step].grad_norm, alone.stats[step].grad_norm)
            << "step " << step + 1;
      }
      EXPECT_EQ(grouped.stats[step].skipped_steps, alone.stats[step].skipped_steps);
    }
    for (const auto& [name, value] : alone.state) EXPECT_EQ(grouped.state.at(name), value) << name;
  }
}

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

// Each example model (models/: the MLP, the CNN with two BatchNorms, the GPT) on 2 and 4 ranks
// for 20 steps of SGD with momentum, against one rank with the whole batch (twice the example's
// batch; the model imported at that size): every step's loss and gradient norm within 1e-6, the
// weights after 20 steps within 1e-5 (the rounding of sums taken in another order, 20 times:
// a BatchNorm's statistics over 1024 elements per channel differ by ~1e-7 between the orders).
TEST(DataParallel, EveryExampleModelTrainsOnTwoAndFourRanksLikeOneRank) {
  for (const char* example : {"mlp", "cnn", "tiny_gpt"}) {
    for (int ranks : {2, 4}) {
      SCOPED_TRACE(str_cat(example, ", ", ranks, " ranks"));
      expect_same_training(Recipe{.example = example}, ranks, 0.05f, 1e-6, 1e-5);
    }
  }
}

// The MLP and CNN examples at fp16 with a dynamic loss scale that starts at 2^24 (and does not
// grow within the run), on 2 and 4 ranks: the steps one rank skips while the scale backs off,
// and its scale sequence, exactly. Every gradient of theirs is one f16 sum over the batch (a
// Gemm's or Conv's weight or bias gradient), which the ranks sum in f32 and round to f16 once,
// so it overflows where one rank's does. The losses drift apart by f16 rounding (BatchNorm's
// statistics summed in another order), within 3% over the 20 steps.
// Not the GPT: its tied embedding's gradient adds two f16 sums over the batch in f32, and its
// position embedding's is gathered from one; the ranks sum the result, whose f16 parts can
// overflow on one rank with the whole batch and not on the ranks (docs/distributed.md).
TEST(DataParallel, TheMlpAndCnnExamplesSkipStepsAndMoveTheScaleLikeOneRankInFp16) {
  LossScaleOptions scale;
  scale.init = 0x1p24f;
  scale.growth_interval = 1000;
  for (const char* example : {"mlp", "cnn"}) {
    SCOPED_TRACE(example);
    const Recipe recipe{.example = example, .fp16 = true, .loss_scale = scale};
    const RunLog alone = train_alone(recipe, 0.05f);
    ASSERT_EQ(alone.stats.size(), static_cast<size_t>(kSteps));
    EXPECT_GT(alone.stats.back().skipped_steps, 0);  // the test exercises skipping
    for (int ranks : {2, 4}) expect_same_training(recipe, ranks, 0.05f, 3e-2, 1e-1);
  }
}

// y = x w^T over rows of ones (w transposed as PyTorch exports a Linear layer), loss = mean(y),
// at fp16 with the loss scale 98304: each row's f16 gradient of w^T is 98304 / 16 = 6144 and one
// rank's sum over 16 rows, 98304, overflows f16 (step 1 is skipped, and at 49152 step 2 is not).
// Each of 2 ranks sums 8 rows to a finite 49152: the ranks' f16 sums are summed in f32 and
// rounded to f16 once, before the f32 conversion and the transpose, as one rank's is, and
// overflow alike.
TEST(DataParallel, AGradientBeyondF16OnlyOverTheWholeBatchSkipsTheStepOnEveryRank) {
  auto open_model = [](int batch, std::shared_ptr<comm::Communicator> group) {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(fmt::format(R"(
      graph ones(%x: f32[{0},4]) opset(17) {{
        init %w: f32[1,4] = [0.5, 0.25, -0.25, 0.125]
        %wt = Transpose<perm=[1, 0]>(%w) {{name="fc/Transpose"}} : f32[4,1]
        %y = MatMul(%x, %wt) {{name="fc"}} : f32[{0},1]
        %loss = ReduceMean<keepdims=0>(%y) {{name="mean"}} : f32[]
        return %loss
      }})",
                                                                      batch));
    CompileOptions options;
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
    options.training = TrainingOptions{};
    LossScaleOptions scale;
    scale.init = 98304.0f;
    scale.growth_interval = 1000;
    options.training->loss_scale = scale;
    Diagnostics diagnostics;
    EXPECT_TRUE(compile_graph(*graph, options, diagnostics).ok());
    SessionOptions session_options;
    session_options.communicator = std::move(group);
    return TrainingSession::create(std::move(graph), session_options);
  };
  auto ones = [](int rows) {
    return Batch{{"x", Tensor::from_f32({rows, 4}, std::vector<float>(rows * 4, 1.0f))}};
  };
  auto two_steps = [&](TrainingSession& session, int rows) {
    std::vector<StepStats> stats;
    for (int step = 0; step < 2; ++step) {
      absl::StatusOr<StepStats> s = session.step(ones(rows), 0.01f);
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) stats.push_back(*s);
    }
    return stats;
  };
  absl::StatusOr<std::unique_ptr<TrainingSession>> alone = open_model(16, nullptr);
  ASSERT_TRUE(alone.ok()) << alone.status();
  const std::vector<StepStats> one = two_steps(**alone, 16);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_TRUE(one[0].found_inf);
  EXPECT_FALSE(one[1].found_inf);
  std::vector<std::vector<StepStats>> ranks(2);
  on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session = open_model(8, std::move(group));
    ASSERT_TRUE(session.ok()) << session.status();
    ranks[rank] = two_steps(**session, 8);
  });
  for (const std::vector<StepStats>& run : ranks) {
    ASSERT_EQ(run.size(), 2u);
    for (int step = 0; step < 2; ++step) {
      EXPECT_EQ(run[step].found_inf, one[step].found_inf) << "step " << step + 1;
      EXPECT_EQ(run[step].loss_scale, one[step].loss_scale) << "step " << step + 1;
    }
  }
}

// The perceptron of 8 rows compiled for training (SGD), in fp16 or f32; null (after a failure)
// when it does not compile.
std::unique_ptr<Graph> compiled_perceptron(bool fp16) {
  CompileOptions options;
  if (fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
  }
  options.training = TrainingOptions{};
  std::unique_ptr<Graph> graph = testing::parse_or_fail(mlp_model(8));
  Diagnostics diagnostics;
  if (graph == nullptr) return nullptr;
  const absl::Status compiled = compile_graph(*graph, options, diagnostics);
  EXPECT_TRUE(compiled.ok()) << compiled;
  return compiled.ok() ? std::move(graph) : nullptr;
}

// Nothing in the backward waits for a bucket's sum: every reader of a summed gradient (the cast
// back to f16, the widening Cast moved after the sum, the optimizer) comes after the last
// bucket's AllReduce, so on a GPU each all-reduce overlaps the rest of the backward.
TEST(DataParallel, NoNodeBeforeTheLastBucketReadsASummedGradient) {
  for (bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "fp16" : "f32");
    std::unique_ptr<Graph> graph = compiled_perceptron(fp16);
    ASSERT_NE(graph, nullptr);
    Graph& step = *graph->mutable_training_step();
    ASSERT_TRUE(insert_gradient_all_reduce(step, {.ranks = 2, .bucket_bytes = 8}).ok());
    std::map<const Node*, size_t> position;
    size_t last_sum = 0;
    int casts_back = 0;
    for (const auto& node : step.nodes()) {
      position[node.get()] = position.size();
      if (node->op_type() == "AllReduce" && node->name() != "data_parallel/loss") {
        last_sum = position[node.get()];
      }
    }
    for (const auto& node : step.nodes()) {
      if (node->op_type() != "AllReduce" || node->name() == "data_parallel/loss") continue;
      for (int i = 0; i < node->num_outputs(); ++i) {
        for (const Use& use : node->output(i)->uses()) {
          EXPECT_GT(position.at(use.user), last_sum)
              << use.user->describe() << " reads " << node->output(i)->name();
          if (use.user->op_type() == "Cast") ++casts_back;
        }
      }
    }
    // With fp16, the f16 weights' gradients are cast back to f16 after their sums.
    if (fp16) {
      EXPECT_GT(casts_back, 0);
    }
  }
}

TEST(DataParallel, TheStepAveragesEveryGradientInBucketsBeforeTheOptimizerReadsIt) {
  std::unique_ptr<Graph> graph = compiled_perceptron(/*fp16=*/false);
  ASSERT_NE(graph, nullptr);
  Graph& step = *graph->mutable_training_step();
  // 8-byte buckets: one gradient per bucket, in the order the backward produces them.
  absl::StatusOr<DataParallelRewrite> added =
      insert_gradient_all_reduce(step, {.ranks = 2, .bucket_bytes = 8});
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->collectives, 3 + 1);  // w2, b1, w1, and the loss
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

// Each rank accumulates its shards of K = 2 micro-batches; the group steps like one rank
// accumulating the whole micro-batches (the window's sums are what the ranks average).
TEST(DataParallel, RanksThatAccumulateGradientsTrainLikeOneRankAccumulatingTheWholeBatches) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    SCOPED_TRACE(kind == OptimizerOptions::Kind::kSgd ? "sgd" : "adamw");
    expect_same_training(Recipe{.optimizer = kind, .accumulate = 2}, 2, 0.05f, 1e-6);
  }
}

// A rank's group, counting the elements each kind of collective moves.
class CountingGroup final : public comm::Communicator {
 public:
  explicit CountingGroup(std::shared_ptr<comm::Communicator> group)
      : Communicator(group->rank(), group->size()), group_(std::move(group)) {}
  std::string_view engine() const override { return group_->engine(); }
  bool supports(DType dtype) const override { return group_->supports(dtype); }
  std::unique_ptr<comm::Work> all_reduce(void* data, int64_t count, DType dtype,
                                         comm::ReduceOp op) override {
    (count > 1 ? bucket_elements : scalar_sums) += count > 1 ? count : 1;
    return group_->all_reduce(data, count, dtype, op);
  }
  std::unique_ptr<comm::Work> broadcast(void* data, int64_t count, DType dtype, int root) override {
    return group_->broadcast(data, count, dtype, root);
  }
  std::unique_ptr<comm::Work> all_gather(const void* send, void* gathered, int64_t count,
                                         DType dtype) override {
    ++gathers;
    return group_->all_gather(send, gathered, count, dtype);
  }
  std::unique_ptr<comm::Work> reduce_scatter(const void* send, void* received, int64_t count,
                                             DType dtype, comm::ReduceOp op) override {
    scattered_elements += count;
    return group_->reduce_scatter(send, received, count, dtype, op);
  }

  std::atomic<int64_t> bucket_elements = 0;     // all-reduced in calls of more than one element
  std::atomic<int64_t> scalar_sums = 0;         // all-reduce calls of one element
  std::atomic<int64_t> scattered_elements = 0;  // each rank's block, per reduce-scatter
  std::atomic<int64_t> gathers = 0;             // all-gather calls

 private:
  std::shared_ptr<comm::Communicator> group_;
};

// Accumulating K = 4 micro-batches on 2 ranks, the gradients are summed once per step, on the
// window's last run (the perceptron's w1 [4, 8], b1 [8], w2 [8, 3]: 64 elements, one bucket),
// not on every run; only the loss's mean (for the log) is reduced on each of the 4 runs. With
// the sharded optimizer, the gradients are reduce-scattered once per step, the overflow flag's
// and norm's sums follow them, and the updated parameters are gathered once per step.
TEST(DataParallel, AccumulatingRanksSumTheirGradientsOnlyOnTheWindowsLastRun) {
  constexpr int kCounted = 3;
  LossScaleOptions scale;
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded optimizer" : "plain");
    const Recipe recipe{.fp16 = sharded,
                        .loss_scale = sharded ? std::optional(scale) : std::nullopt,
                        .accumulate = 4,
                        .shard_optimizer = sharded};
    std::vector<int64_t> buckets(2), scalars(2), scattered(2), gathers(2);
    on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> gloo) {
      auto counting = std::make_shared<CountingGroup>(std::move(gloo));
      absl::StatusOr<std::unique_ptr<TrainingSession>> session =
          open(recipe, whole_batch(recipe) / 2, counting);
      ASSERT_TRUE(session.ok()) << session.status();
      ASSERT_EQ((*session)->accumulation_steps(), 4);
      counting->bucket_elements = 0;  // after the start-up's checks and broadcasts
      counting->scalar_sums = 0;
      counting->scattered_elements = 0;
      counting->gathers = 0;
      const RunLog run = train(recipe, **session, rank, 2, 0.05f, 0, kCounted);
      EXPECT_EQ(run.stats.size(), static_cast<size_t>(kCounted));
      buckets[rank] = counting->bucket_elements;
      scalars[rank] = counting->scalar_sums;
      scattered[rank] = counting->scattered_elements;
      // Less the gathers of train()'s whole_state reads at the end, counted again here.
      gathers[rank] = counting->gathers;
      counting->gathers = 0;
      for (const std::string& name : (*session)->state_names()) {
        ASSERT_TRUE((*session)->whole_state(name).ok()) << name;
      }
      gathers[rank] -= counting->gathers;
    });
    constexpr int64_t kGradientElements = 4 * 8 + 8 + 8 * 3;
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(str_cat("rank ", rank));
      if (sharded) {
        // Blocks of 16, 4 and 12 elements; the overflow flag and the norm once per step.
        EXPECT_EQ(scattered[rank], kCounted * kGradientElements / 2);
        EXPECT_EQ(scalars[rank], kCounted * (4 + 2));
        EXPECT_EQ(gathers[rank], kCounted);
      } else {
        EXPECT_EQ(buckets[rank], kCounted * kGradientElements);
        EXPECT_EQ(scalars[rank], kCounted * 4);
      }
    }
  }
}

// BatchNorm over [batch, 4, 2]: with its statistics over every rank's shard (SyncBatchNorm, the
// default), 2 and 4 ranks normalize, train and update the running statistics (with the unbiased
// running variance's Bessel correction of the whole batch's count) like one rank.
TEST(DataParallel, RanksWithBatchNormTrainLikeOneRankWithTheWholeBatch) {
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(str_cat(ranks, " ranks"));
    expect_same_training(Recipe{.optimizer = OptimizerOptions::Kind::kAdamW, .batch_norm = true},
                         ranks, 0.05f, 1e-6);
  }
}

// With each rank's own statistics, the shards normalize differently from the whole batch: the
// losses leave the single rank's trajectory (the option changes the computation); the ranks
// still agree on every parameter, while each keeps the running statistics of its own shards.
TEST(DataParallel, LocalBatchNormUsesEachShardsStatistics) {
  const Recipe recipe{.batch_norm = true, .sync_batch_norm = false};
  const RunLog alone = train_alone(recipe, 0.05f);
  const std::vector<RunLog> group = train_group(recipe, 2, 0.05f);
  ASSERT_EQ(group[0].stats.size(), static_cast<size_t>(kSteps));
  EXPECT_GT(std::abs(group[0].stats[0].loss - alone.stats[0].loss), 1e-4 * alone.stats[0].loss);
  for (const char* name : {"w1", "w2", "bn_scale", "bn_bias"}) {
    EXPECT_EQ(group[1].state.at(name), group[0].state.at(name)) << name;
  }
  EXPECT_NE(group[1].state.at("bn_mean"), group[0].state.at("bn_mean"));
}

TEST(DataParallel, TheRewriteSynchronizesTrainingBatchNormAndItsGradient) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "local");
    CompileOptions options;
    options.training = TrainingOptions{};
    std::unique_ptr<Graph> graph = testing::parse_or_fail(testing::mlp_batch_norm_model(8));
    ASSERT_NE(graph, nullptr);
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
    Graph& step = *graph->mutable_training_step();
    ASSERT_TRUE(insert_gradient_all_reduce(step, {.ranks = 4, .sync_batch_norm = sync}).ok());
    int onnx_batch_norm = 0, sync_batch_norm = 0, all_ranks_grads = 0;
    const Value* bessel = nullptr;
    for (const auto& node : step.nodes()) {
      if (node->op_type() == "BatchNormalization") ++onnx_batch_norm;
      if (node->op_type() == "SyncBatchNormalization") {
        ++sync_batch_norm;
        EXPECT_EQ(node->name(), "bn");
        EXPECT_FLOAT_EQ(node->float_attr("momentum"), 0.75f);
      }
      if (node->op_type() == "BatchNormalizationGrad" && node->find_attr("all_ranks") != nullptr &&
          node->int_attr("all_ranks") == 1) {
        ++all_ranks_grads;
      }
      for (const Value* operand : node->operands()) {
        if (operand != nullptr && operand->name().find(".bessel") != std::string::npos) {
          bessel = operand;
        }
      }
    }
    EXPECT_EQ(onnx_batch_norm, sync ? 0 : 1);
    EXPECT_EQ(sync_batch_norm, sync ? 1 : 0);
    EXPECT_EQ(all_ranks_grads, sync ? 1 : 0);
    // n / (n - 1) for the running variance: n = 8 rows x 2 positions per channel on each rank,
    // times 4 ranks with synchronized statistics.
    ASSERT_NE(bessel, nullptr);
    const double n = sync ? 64 : 16;
    EXPECT_FLOAT_EQ(static_cast<float>(bessel->initializer()->element_as_double(0)),
                    static_cast<float>(n / (n - 1)));
  }
}

}  // namespace
}  // namespace ampc::runtime::data_parallel_testing
