// The sharded optimizer (ZeRO stage 1: SessionOptions::shard_optimizer, passes/data_parallel.h)
// on Gloo: each rank keeps one block of every optimizer moment, and of the f32 master weights the
// forward reads only in low precision, and the group trains as one rank with the whole batch
// would; its checkpoints hold the whole state, so any number of ranks resumes them.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "passes/data_parallel.h"
#include "runtime/plan.h"
#include "tests/runtime/data_parallel_test_util.h"

namespace ampc::runtime::data_parallel_testing {
namespace {

// ZeRO stage 1: each rank keeps and updates one block of every moment, and the group trains as
// one rank with the whole batch (and as the unsharded group): 2 and 4 ranks, SGD with momentum
// and AdamW, f32 within 1e-6; SGD without momentum (no moments: each rank updates its block of
// the parameters); fp16 with the same skipped steps and scales; the CNN example with its
// BatchNorms; accumulation over 2 micro-batches, at f32 and at fp16.
TEST(ShardedOptimizer, TheShardedOptimizerTrainsLikeOneRankWithTheWholeBatch) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdamW}) {
    for (int ranks : {2, 4}) {
      SCOPED_TRACE(
          str_cat(kind == OptimizerOptions::Kind::kSgd ? "sgd, " : "adamw, ", ranks, " ranks"));
      expect_same_training(Recipe{.optimizer = kind, .shard_optimizer = true}, ranks, 0.05f, 1e-6);
    }
  }
  expect_same_training(Recipe{.momentum = 0, .shard_optimizer = true}, 2, 0.05f, 1e-6);
  LossScaleOptions scale;
  scale.init = 0x1p20f;
  scale.growth_interval = 3;
  expect_same_training(Recipe{.fp16 = true, .loss_scale = scale, .shard_optimizer = true}, 2, 0.05f,
                       5e-3);
  expect_same_training(Recipe{.example = "cnn", .shard_optimizer = true}, 4, 0.05f, 1e-6, 1e-5);
  expect_same_training(Recipe{.accumulate = 2, .shard_optimizer = true}, 2, 0.05f, 1e-6);
  // Sharded master weights (fp16) over an accumulation window: gathered after every run.
  expect_same_training(Recipe{.fp16 = true, .accumulate = 2, .shard_optimizer = true}, 2, 0.05f,
                       5e-3);
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
    EXPECT_TRUE((*session)->low_precision_copies().empty());  // f32: the forward reads w1
  });
}

// At fp16 the perceptron's forward reads w1 and w2 only through Casts to f16: each is read
// through a whole f16 copy instead, and each rank keeps only its block of their f32 master
// weights (3 ranks: 11 of w1's 32 elements). b1, added in f32 (its Add pinned fp32: it would
// be nn.Linear's bias add in f16), stays whole. The copies are
// not in state_names(), and a master weight cannot be set alone.
TEST(ShardedOptimizer, MasterWeightsReadOnlyInLowPrecisionKeepOneBlockPerRank) {
  on_ranks(3, [&](int /*rank*/, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(Recipe{.fp16 = true,
                    .fp32_nodes = {"^bias1$"},
                    .optimizer = OptimizerOptions::Kind::kAdamW,
                    .shard_optimizer = true},
             4, std::move(group));
    ASSERT_TRUE(session.ok()) << session.status();
    const TrainingSession& trainer = **session;
    std::map<std::string, std::string> copies;
    for (const LowPrecisionCopy& copy : trainer.low_precision_copies()) {
      EXPECT_EQ(copy.dtype, DType::kF16) << copy.parameter;
      copies[copy.parameter] = copy.copy;
    }
    ASSERT_EQ(copies.size(), 2u);
    ASSERT_TRUE(copies.contains("w1"));
    ASSERT_TRUE(copies.contains("w2"));
    EXPECT_EQ(trainer.sharded_state().size(), 8u);  // 6 moments, w1 and w2
    EXPECT_EQ(trainer.sharded_state().at("w1"), (Shape{4, 8}));
    EXPECT_EQ(trainer.state("w1")->type(), (TensorType{DType::kF32, {11}}));
    EXPECT_EQ(trainer.state("w2")->type(), (TensorType{DType::kF32, {8}}));
    EXPECT_EQ(trainer.state("b1")->type(), (TensorType{DType::kF32, {8}}));  // whole
    EXPECT_EQ(trainer.state(copies.at("w1"))->type(), (TensorType{DType::kF16, {4, 8}}));
    const std::vector<std::string> names = trainer.state_names();
    for (const auto& [parameter, copy] : copies) {
      EXPECT_EQ(std::count(names.begin(), names.end(), copy), 0) << copy;
      EXPECT_EQ(std::count(names.begin(), names.end(), parameter), 1) << parameter;
    }
    // The f32 master weights' bytes on a rank: 4 (11 + 8), not 4 (32 + 24).
    int64_t master_bytes = 0;
    for (const auto& [parameter, copy] : copies) {
      master_bytes += static_cast<int64_t>(trainer.state(parameter)->bytes().size());
    }
    EXPECT_EQ(master_bytes, 4 * (11 + 8));
    Tensor block(TensorType{DType::kF32, {11}});
    const absl::Status refused = (*session)->set_state("w1", TensorView(block));
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("'w1'"));
  });
}

// Sharding the f32 master weights changes no bit: 2 ranks at fp16 with dynamic loss scaling
// (overflowing, so steps are skipped) train, evaluate and export exactly as the unsharded group
// does. A rank's gradient block is the same f32 sum rounded once, its update the same elementwise
// operations, and the copy is the Cast the forward did. The GPT example has its LayerNorm weights
// read in f32, the CNN its BatchNorm weights: those stay whole, the others are read through
// copies.
TEST(ShardedOptimizer, ShardedMasterWeightsTrainEvaluateAndExportAsTheUnshardedGroup) {
  LossScaleOptions scale;
  scale.init = 0x1p24f;
  scale.growth_interval = 3;
  for (const Recipe& sharded :
       {Recipe{.fp16 = true,
       .optimizer = OptimizerOptions::Kind::kAdamW,
       .loss_scale = scale,
       .shard_optimizer = true},
        Recipe{.example = "tiny_gpt", .fp16 = true, .loss_scale = scale, .shard_optimizer = true},
        Recipe{.example = "cnn", .fp16 = true, .loss_scale = scale, .shard_optimizer = true}}) {
    SCOPED_TRACE(sharded.example.empty() ? "perceptron" : sharded.example);
    Recipe whole = sharded;
    whole.shard_optimizer = false;
    StoreDirectory dir;
    struct Run {
      RunLog log;
      std::map<std::string, Tensor> evaluated;
      size_t copies = 0;
      size_t parameters = 0;
    };
    auto run = [&](const Recipe& recipe, const std::string& exported) {
      std::vector<Run> runs(2);
      on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
        absl::StatusOr<std::unique_ptr<TrainingSession>> session =
            open(recipe, whole_batch(recipe) / 2, std::move(group));
        ASSERT_TRUE(session.ok()) << session.status();
        runs[rank].copies = (*session)->low_precision_copies().size();
        runs[rank].parameters = compared_state(recipe, **session).size();
        runs[rank].log = train(recipe, **session, rank, 2, 0.05f, 0, 8);
        const int rows = whole_batch(recipe) / 2;
        const Batch batch = batch_rows(recipe, 9, rank * rows, rows);
        TensorViews views;
        for (const TensorInfo& input : (*session)->eval_inputs()) {
          views.set(input.name, TensorView(batch.at(input.name)));
        }
        absl::StatusOr<std::map<std::string, Tensor>> evaluated = (*session)->evaluate(views);
        ASSERT_TRUE(evaluated.ok()) << evaluated.status();
        runs[rank].evaluated = *std::move(evaluated);
        const absl::Status written = (*session)->export_inference_model(exported);
        ASSERT_TRUE(written.ok()) << written;
      });
      return runs;
    };
    const std::vector<Run> a = run(sharded, dir.path() + "/sharded.onnx");
    const std::vector<Run> b = run(whole, dir.path() + "/whole.onnx");
    EXPECT_GT(a[0].copies, 0u);
    if (!sharded.example.empty()) {
      EXPECT_LT(a[0].copies, a[0].parameters);
    }
    int skipped = 0;
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(a[rank].log.stats.size(), b[rank].log.stats.size());
      for (size_t step = 0; step < a[rank].log.stats.size(); ++step) {
        const StepStats& x = a[rank].log.stats[step];
        const StepStats& y = b[rank].log.stats[step];
        EXPECT_EQ(x.loss, y.loss) << "step " << step + 1;
        EXPECT_EQ(x.found_inf, y.found_inf) << "step " << step + 1;
        EXPECT_EQ(x.loss_scale, y.loss_scale) << "step " << step + 1;
        skipped += x.found_inf ? 1 : 0;
      }
      EXPECT_EQ(a[rank].log.state, b[rank].log.state) << "rank " << rank;
      ASSERT_EQ(a[rank].evaluated.size(), b[rank].evaluated.size());
      for (const auto& [name, value] : b[rank].evaluated) {
        EXPECT_EQ(a[rank].evaluated.at(name).to_double_vector(), value.to_double_vector()) << name;
      }
    }
    EXPECT_GT(skipped, 0);  // 2^24 overflows f16 at first
    // Rank 0 wrote both exports: the same initializers, the master weights whole in f32.
    absl::StatusOr<std::unique_ptr<Graph>> x = import_onnx_file(dir.path() + "/sharded.onnx");
    absl::StatusOr<std::unique_ptr<Graph>> y = import_onnx_file(dir.path() + "/whole.onnx");
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    std::map<std::string, std::vector<uint8_t>> initializers;
    for (const Value* init : (*x)->initializers()) {
      initializers[init->name()].assign(init->initializer()->bytes().begin(),
                                        init->initializer()->bytes().end());
    }
    EXPECT_EQ(initializers.size(), (*y)->initializers().size());
    for (const Value* init : (*y)->initializers()) {
      ASSERT_TRUE(initializers.contains(init->name())) << init->name();
      EXPECT_TRUE(std::ranges::equal(initializers.at(init->name()), init->initializer()->bytes()))
          << init->name();
    }
    EXPECT_EQ((*x)->num_nodes(), (*y)->num_nodes());
  }
}

// 2 sharded ranks train 10 steps and save a checkpoint, then 10 more: 2 ranks resume it
// bit-identically; 4 sharded ranks, and one rank with the whole batch, resume it and end where
// the 2 ranks end within 1e-6 (f32) or 1e-3 (fp16: f16 gradients summed in another order).
void expect_resumes_on_any_number_of_ranks(bool fp16) {
  const Recipe sharded{
      .fp16 = fp16, .optimizer = OptimizerOptions::Kind::kAdamW, .shard_optimizer = true};
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
  const std::vector<RunLog> one =
      resume(Recipe{.fp16 = fp16, .optimizer = OptimizerOptions::Kind::kAdamW}, 1);
  // f16 gradients summed in another order round differently (by up to 2^-11 of each).
  const double tolerance = fp16 ? 1e-3 : 1e-6;
  for (const char* name : {"w1", "b1", "w2"}) {
    EXPECT_LT(relative_gap(four[0].state.at(name), through[0].state.at(name)), tolerance) << name;
    EXPECT_LT(relative_gap(one[0].state.at(name), through[0].state.at(name)), tolerance) << name;
  }
}

// A checkpoint of sharded ranks holds the whole moments and master weights, so any number of
// ranks resumes it, sharded or not; at f32 and at fp16 (master weights sharded).
TEST(ShardedOptimizer, AShardedCheckpointResumesOnAnyNumberOfRanks) {
  for (const bool fp16 : {false, true}) {
    SCOPED_TRACE(fp16 ? "fp16: sharded master weights" : "f32");
    expect_resumes_on_any_number_of_ranks(fp16);
  }
}

// The perceptron of 8 rows compiled with AdamW, at fp16 or f32, accumulating `accumulate`
// micro-batches; null when that fails.
// The perceptron compiled with AdamW; at fp16 its bias Add pinned fp32, so that b1 is a master
// weight the forward reads in f32 beside two it reads through f16 copies.
std::unique_ptr<Graph> compiled_perceptron(bool fp16, int64_t accumulate = 1) {
  CompileOptions options;
  if (fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
    options.mixed_precision->policy.fp32_nodes.push_back({"^bias1$", "--fp32-nodes"});
  }
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kAdamW;
  options.training->accumulate = accumulate;
  std::unique_ptr<Graph> graph = testing::parse_or_fail(mlp_model(8));
  Diagnostics diagnostics;
  if (graph == nullptr || !compile_graph(*graph, options, diagnostics).ok()) return nullptr;
  return graph;
}

// The sharded step: the gradients are reduce-scattered, each update reads its parameter's
// block, one AllGather gathers every parameter; the overflow flag and the norm are summed.
TEST(ShardedOptimizer, TheShardedStepScattersGradientsAndGathersParameters) {
  std::unique_ptr<Graph> graph = compiled_perceptron(/*fp16=*/false);
  ASSERT_NE(graph, nullptr);
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

// At fp16 the step reads w1 and w2 through f16 copies: no Cast of them is left, each of their
// updates reads and writes its parameter's block (the initializer itself), and the one AllGather
// gathers their updated blocks cast to f16 into the copies' next values, new state. b1, added in
// f32 (pinned), is still cut by a Shard and gathered whole in f32.
TEST(ShardedOptimizer, TheStepGathersLowPrecisionCopiesOfShardedMasterWeights) {
  std::unique_ptr<Graph> graph = compiled_perceptron(/*fp16=*/true);
  ASSERT_NE(graph, nullptr);
  Graph& step = *graph->mutable_training_step();
  absl::StatusOr<DataParallelRewrite> rewrite =
      insert_gradient_all_reduce(step, {.ranks = 4, .shard_optimizer = true, .eval = graph.get()});
  ASSERT_TRUE(rewrite.ok()) << rewrite.status();
  std::map<std::string, std::string> copies;  // copy -> parameter
  for (const LowPrecisionCopy& copy : rewrite->copies) copies[copy.copy] = copy.parameter;
  ASSERT_EQ(rewrite->copies.size(), 2u) << print_graph(step);
  std::map<std::string, int> ops;
  for (const auto& node : step.nodes()) {
    ++ops[node->op_type()];
    if (node->op_type() == "Cast") {
      EXPECT_FALSE(copies.contains(node->output(0)->name())) << node->describe();
    }
    if (node->op_type() == "Adam") {
      const bool copied = node->operand(0)->name() != "b1.rank_block";
      EXPECT_EQ(node->operand(0)->kind(),
                copied ? Value::Kind::kInitializer : Value::Kind::kNodeOutput)
          << node->describe();
      EXPECT_EQ(node->operand(0)->shape().size(), 1u) << node->describe();  // a block
    }
    if (node->op_type() == "AllGather") {
      ASSERT_EQ(node->num_outputs(), 3);
      for (int i = 0; i < node->num_outputs(); ++i) {
        const bool copied = node->output(i)->name() != "b1.next";
        EXPECT_EQ(node->output(i)->dtype(), copied ? DType::kF16 : DType::kF32)
            << node->output(i)->name();
      }
    }
  }
  EXPECT_EQ(ops["Shard"], 1);  // b1
  EXPECT_EQ(ops["AllGather"], 1);
  ASSERT_EQ(rewrite->sharded_state.size(), 8u);
  int copy_updates = 0;
  for (const Graph::StateUpdate& update : step.state_updates()) {
    if (!copies.contains(update.state)) continue;
    ++copy_updates;
    for (const Value* output : step.outputs()) {
      if (output->name() == update.update) {
        EXPECT_EQ(output->dtype(), DType::kF16);
        EXPECT_EQ(output->producer()->op_type(), "AllGather");
      }
    }
  }
  EXPECT_EQ(copy_updates, 2);
  for (const Value* init : step.initializers()) {
    if (init->name() == "w1") {
      EXPECT_EQ(init->type(), (TensorType{DType::kF32, {8}}));
    }
    if (copies.contains(init->name())) {
      EXPECT_EQ(init->dtype(), DType::kF16);
    }
  }
}

// The gather also reads the state each of its outputs replaces (w1's and w2's f16 copies, the
// whole b1), so the plan stores every gathered parameter over its state: no second copy of the
// parameters at the end of the step, and nothing to gather inside an accumulation window.
TEST(ShardedOptimizer, TheGatherWritesEachParameterOverTheStateItReplaces) {
  for (int64_t accumulate : {1, 4}) {
    SCOPED_TRACE(str_cat("accumulate ", accumulate));
    std::unique_ptr<Graph> graph = compiled_perceptron(/*fp16=*/true, accumulate);
    ASSERT_NE(graph, nullptr);
    Graph& step = *graph->mutable_training_step();
    ASSERT_TRUE(
        insert_gradient_all_reduce(step, {.ranks = 4, .shard_optimizer = true, .eval = graph.get()})
            .ok());
    std::map<std::string, std::string> state_of;  // update -> state
    for (const Graph::StateUpdate& update : step.state_updates()) {
      state_of[update.update] = update.state;
    }
    const Node* gather = nullptr;
    for (const auto& node : step.nodes()) {
      if (node->op_type() == "AllGather") gather = node.get();
    }
    ASSERT_NE(gather, nullptr);
    const int blocks = gather->num_outputs();
    ASSERT_EQ(blocks, 3);
    ASSERT_EQ(gather->num_operands(), 2 * blocks);
    EXPECT_EQ(gather->int_attr("window"), accumulate > 1 ? 1 : 0);
    absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::build(step, Device::kCpu);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (int i = 0; i < blocks; ++i) {
      const Value* gathered = gather->output(i);
      const Value* kept = gather->operand(blocks + i);
      ASSERT_TRUE(state_of.contains(gathered->name())) << gathered->name();
      EXPECT_EQ(kept->name(), state_of.at(gathered->name()));
      EXPECT_EQ(kept->kind(), Value::Kind::kInitializer);
      EXPECT_TRUE((*plan)->updates_in_place(gathered)) << gathered->name();
    }
  }
}

}  // namespace
}  // namespace ampc::runtime::data_parallel_testing
