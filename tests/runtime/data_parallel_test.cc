// Data-parallel training on Gloo (passes/data_parallel.h, SessionOptions::communicator), against
// its definition: N ranks, each training on its shard of every batch (rank r takes rows
// r * B / N ... (r + 1) * B / N - 1), take the steps one rank takes on the whole batch: the same
// losses and weights within f32 rounding in f32, and at fp16 with dynamic loss scaling the same
// skipped steps and scale sequence. Ranks are threads of this process, each with its own session
// and its own Gloo connections over the loopback.
#include "passes/data_parallel.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "passes/passes.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/npy.h"
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

constexpr int kSteps = 20;

struct Recipe {
  // One of the example models (models/<example>.onnx), at twice its batch size for one rank;
  // empty: the perceptron of tests/runtime/mlp_training_util.h, at 16 rows.
  std::string example;
  bool fp16 = false;
  OptimizerOptions::Kind optimizer = OptimizerOptions::Kind::kSgd;
  std::optional<LossScaleOptions> loss_scale = std::nullopt;
  int64_t accumulate = 1;
  bool batch_norm = false;  // mlp_batch_norm_model instead of mlp_model
  bool sync_batch_norm = true;
};

// `models/<name>.onnx` with every input's (and batch-sized output's) leading dim set to `batch`.
// The example models compute every other shape from their inputs.
absl::StatusOr<std::unique_ptr<Graph>> example_with_batch(const std::string& name, int64_t batch) {
  std::ifstream file(testing::source_path("models/" + name + ".onnx"), std::ios::binary);
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&file)) return absl::NotFoundError("models/" + name + ".onnx");
  onnx::GraphProto& graph = *model.mutable_graph();
  const int64_t old = graph.input(0).type().tensor_type().shape().dim(0).dim_value();
  auto resize = [&](onnx::ValueInfoProto& value) {
    onnx::TensorShapeProto* shape = value.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() > 0 && shape->dim(0).dim_value() == old) {
      shape->mutable_dim(0)->set_dim_value(batch);
    }
  };
  for (onnx::ValueInfoProto& input : *graph.mutable_input()) resize(input);
  for (onnx::ValueInfoProto& output : *graph.mutable_output()) resize(output);
  graph.clear_value_info();
  return import_onnx_bytes(model.SerializeAsString(), name);
}

// models/<name>.train.npz, read once (ranks are threads that ask at once).
const std::map<std::string, Tensor>& example_batches(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::map<std::string, Tensor>> loaded;
  std::lock_guard lock(mutex);
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    absl::StatusOr<std::map<std::string, Tensor>> arrays =
        read_npz(testing::source_path("models/" + name + ".train.npz"));
    EXPECT_TRUE(arrays.ok()) << arrays.status();
    it = loaded.emplace(name, arrays.ok() ? *std::move(arrays) : std::map<std::string, Tensor>{})
             .first;
  }
  return it->second;
}

// The rows of the whole batch (one rank's model).
int whole_batch(const Recipe& recipe) {
  if (recipe.example.empty()) return 16;
  return 2 * static_cast<int>(example_batches(recipe.example).begin()->second.shape()[1]);
}

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
  std::unique_ptr<Graph> graph;
  if (recipe.example.empty()) {
    graph = testing::parse_or_fail(recipe.batch_norm ? testing::mlp_batch_norm_model(batch)
                                                     : mlp_model(batch));
    if (graph == nullptr) return absl::InvalidArgumentError("model did not parse");
  } else {
    AMPC_ASSIGN_OR_RETURN(graph, example_with_batch(recipe.example, batch));
  }
  Diagnostics diagnostics;
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, options, diagnostics));
  SessionOptions session_options;
  session_options.communicator = std::move(group);
  session_options.sync_batch_norm = recipe.sync_batch_norm;
  return TrainingSession::create(std::move(graph), session_options);
}

using Batch = std::map<std::string, Tensor>;

// Step `step`'s whole batch (batches 2 step and 2 step + 1 of models/<example>.train.npz for an
// example), rows first .. first + rows - 1 of it.
Batch batch_rows(const Recipe& recipe, int step, int first, int rows) {
  if (!recipe.example.empty()) {
    Batch batch;
    for (const auto& [name, array] : example_batches(recipe.example)) {
      // [batches, B, ...]: whole batch `step` is 2B rows from row 2B * step of the flattened
      // array.
      const int64_t batches = array.shape()[0];
      const int64_t row_bytes =
          static_cast<int64_t>(array.bytes().size()) / (batches * array.shape()[1]);
      const int64_t start = (2 * array.shape()[1] * step) % (batches * array.shape()[1]) + first;
      Shape shape(array.shape().begin() + 1, array.shape().end());
      shape[0] = rows;
      const auto bytes = array.bytes().subspan(start * row_bytes, rows * row_bytes);
      batch.emplace(name, Tensor(TensorType{array.dtype(), shape},
                                 std::vector<uint8_t>(bytes.begin(), bytes.end())));
    }
    return batch;
  }
  constexpr int kBatch = 16;
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

// kSteps steps; a model that accumulates over K micro-batches takes batches sK .. sK+K-1 in step s.
RunLog train(const Recipe& recipe, TrainingSession& session, int rank, int ranks, float lr) {
  RunLog run;
  const int rows = whole_batch(recipe) / ranks;
  const int64_t k = session.accumulation_steps();
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Batch> micro_batches;
    for (int64_t j = 0; j < k; ++j) {
      micro_batches.push_back(
          batch_rows(recipe, static_cast<int>(step * k + j), rank * rows, rows));
    }
    absl::StatusOr<StepStats> stats =
        k == 1 ? session.step(micro_batches[0], lr) : session.step(micro_batches, lr);
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
        open(recipe, whole_batch(recipe) / ranks, std::move(group));
    ASSERT_TRUE(session.ok()) << "rank " << rank << ": " << session.status();
    runs[rank] = train(recipe, **session, rank, ranks, lr);
  });
  return runs;
}

RunLog train_alone(const Recipe& recipe, float lr) {
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      open(recipe, whole_batch(recipe), nullptr);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? train(recipe, **session, 0, 1, lr) : RunLog{};
}

// The state compared: parameters, and running statistics.
std::vector<std::string> compared_state(const Recipe& recipe, const TrainingSession& session) {
  if (recipe.example.empty() && recipe.batch_norm) {
    return {"w1", "w2", "bn_scale", "bn_bias", "bn_mean", "bn_var"};
  }
  if (recipe.example.empty()) return {"w1", "b1", "w2"};
  // An example trains with SGD and momentum: a parameter is a state with a momentum buffer.
  std::vector<std::string> names;
  for (const std::string& name : session.state_names()) {
    if (session.has_state(name + ".momentum_buffer") ||
        name.find("running_") != std::string::npos) {
      names.push_back(name);
    }
  }
  return names;
}

// |a - b| / |b|.
double relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> gap(a.size());
  for (size_t i = 0; i < a.size(); ++i) gap[i] = a[i] - b[i];
  return testing::norm(gap) / testing::norm(b);
}

// Every step's loss and gradient norm within `tolerance` (relative), the final weights within
// `weight_tolerance` (negative: `tolerance`).
void expect_same_training(const Recipe& recipe, int ranks, float lr, double tolerance,
                          double weight_tolerance = -1) {
  if (weight_tolerance < 0) weight_tolerance = tolerance;
  const RunLog alone = train_alone(recipe, lr);
  const std::vector<RunLog> group = train_group(recipe, ranks, lr);
  ASSERT_EQ(alone.stats.size(), static_cast<size_t>(kSteps));
  absl::StatusOr<std::unique_ptr<TrainingSession>> fresh =
      open(recipe, whole_batch(recipe), nullptr);
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
    // The perceptrons' weights: the gap relative to the 20 updates' size. The examples'
    // relative to the weights (some of their updates are rounding noise: a bias before a
    // BatchNorm has a zero gradient).
    for (const std::string& name : compared_state(recipe, **fresh)) {
      const std::vector<double>& a = run.state.at(name);
      const std::vector<double>& b = alone.state.at(name);
      if (recipe.example.empty()) {
        const std::vector<double> start = (*fresh)->state(name)->to_double_vector();
        EXPECT_LT(relative_update_gap(start, a, b), weight_tolerance) << name;
      } else {
        EXPECT_LT(relative_gap(a, b), weight_tolerance) << name;
      }
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

// Each rank accumulates its shards of K = 2 micro-batches; the group steps like one rank
// accumulating the whole micro-batches (the window's sums are what the ranks average).
TEST(DataParallel, RanksThatAccumulateGradientsTrainLikeOneRankAccumulatingTheWholeBatches) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    SCOPED_TRACE(kind == OptimizerOptions::Kind::kSgd ? "sgd" : "adamw");
    expect_same_training(Recipe{.optimizer = kind, .accumulate = 2}, 2, 0.05f, 1e-6);
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
}  // namespace ampc::runtime
