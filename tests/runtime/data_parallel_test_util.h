// Helpers of the data-parallel tests (data_parallel_test.cc, sharded_optimizer_test.cc): N
// ranks, each training on its shard of every batch (rank r takes rows r * B / N ...
// (r + 1) * B / N - 1), against one rank given the whole batch. Ranks are threads of the test
// process, each with its own session and its own Gloo connections over the loopback.
#pragma once

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
#include "passes/data_parallel.h"
#include "passes/passes.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/npy.h"
#include "runtime/training_session.h"
#include "tests/runtime/comm/comm_test_util.h"
#include "tests/runtime/mlp_training_util.h"
#include "tests/test_util.h"

namespace ampc::runtime::data_parallel_testing {

using testing::mlp_model;
using testing::relative_update_gap;
using testing::StoreDirectory;
using testing::uniform;

inline constexpr int kSteps = 20;

struct Recipe {
  // One of the example models (models/<example>.onnx), at twice its batch size for one rank;
  // empty: the perceptron of tests/runtime/mlp_training_util.h, at 16 rows.
  std::string example = {};
  bool fp16 = false;
  std::vector<std::string> fp32_nodes = {};  // with fp16: nodes pinned fp32 (--fp32-nodes)
  OptimizerOptions::Kind optimizer = OptimizerOptions::Kind::kSgd;
  float momentum = 0.9f;  // SGD's
  std::optional<LossScaleOptions> loss_scale = std::nullopt;
  int64_t accumulate = 1;
  bool batch_norm = false;  // mlp_batch_norm_model instead of mlp_model
  bool sync_batch_norm = true;
  bool shard_optimizer = false;
  Device device = Device::kCpu;
  bool cuda_graph = false;  // on CUDA: record the step as a CUDA graph and replay it
};

// `models/<name>.onnx` with every input's (and batch-sized output's) leading dim set to `batch`.
// The example models compute every other shape from their inputs.
inline absl::StatusOr<std::unique_ptr<Graph>> example_with_batch(const std::string& name,
                                                                 int64_t batch) {
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
inline const std::map<std::string, Tensor>& example_batches(const std::string& name) {
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
inline int whole_batch(const Recipe& recipe) {
  if (recipe.example.empty()) return 16;
  return 2 * static_cast<int>(example_batches(recipe.example).begin()->second.shape()[1]);
}

inline absl::StatusOr<std::unique_ptr<TrainingSession>> open(
    const Recipe& recipe, int batch, std::shared_ptr<comm::Communicator> group) {
  CompileOptions options;
  if (recipe.fp16) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low_source = "test";
    for (const std::string& regex : recipe.fp32_nodes) {
      options.mixed_precision->policy.fp32_nodes.push_back({regex, "--fp32-nodes"});
    }
  }
  options.training = TrainingOptions{};
  options.training->optimizer.kind = recipe.optimizer;
  options.training->optimizer.momentum = recipe.momentum;
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
  session_options.shard_optimizer = recipe.shard_optimizer;
  session_options.device = recipe.device;
  session_options.cuda_graph = recipe.cuda_graph;
  return TrainingSession::create(std::move(graph), session_options);
}

using Batch = std::map<std::string, Tensor>;

// Step `step`'s whole batch (batches 2 step and 2 step + 1 of models/<example>.train.npz for an
// example), rows first .. first + rows - 1 of it.
inline Batch batch_rows(const Recipe& recipe, int step, int first, int rows) {
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
inline RunLog train(const Recipe& recipe, TrainingSession& session, int rank, int ranks, float lr,
                    int first = 0, int count = kSteps) {
  RunLog run;
  const int rows = whole_batch(recipe) / ranks;
  const int64_t k = session.accumulation_steps();
  for (int step = first; step < first + count; ++step) {
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
  // Whole: sharded state gathered from every rank (each rank runs this at once).
  for (const std::string& name : session.state_names()) {
    absl::StatusOr<Tensor> value = session.whole_state(name);
    EXPECT_TRUE(value.ok()) << "rank " << rank << ": " << value.status();
    if (value.ok()) run.state[name] = value->to_double_vector();
  }
  return run;
}

// Runs body(rank, group) on `ranks` ranks at once, one thread each, joined in a Gloo group.
inline void on_ranks(
    int ranks, const std::function<void(int rank, std::shared_ptr<comm::Communicator>)>& body) {
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
inline std::vector<RunLog> train_group(const Recipe& recipe, int ranks, float lr) {
  std::vector<RunLog> runs(ranks);
  on_ranks(ranks, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(recipe, whole_batch(recipe) / ranks, std::move(group));
    ASSERT_TRUE(session.ok()) << "rank " << rank << ": " << session.status();
    runs[rank] = train(recipe, **session, rank, ranks, lr);
  });
  return runs;
}

inline RunLog train_alone(const Recipe& recipe, float lr) {
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      open(recipe, whole_batch(recipe), nullptr);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? train(recipe, **session, 0, 1, lr) : RunLog{};
}

// The state compared: parameters, and running statistics.
inline std::vector<std::string> compared_state(const Recipe& recipe,
                                               const TrainingSession& session) {
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
inline double relative_gap(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> gap(a.size());
  for (size_t i = 0; i < a.size(); ++i) gap[i] = a[i] - b[i];
  return testing::norm(gap) / testing::norm(b);
}

// Every step's loss and gradient norm within `tolerance` (relative), the final weights within
// `weight_tolerance` (negative: `tolerance`).
inline void expect_same_training(const Recipe& recipe, int ranks, float lr, double tolerance,
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
  // Every rank holds the same state, bit for bit (sharded state gathered whole).
  for (int rank = 1; rank < ranks; ++rank) {
    for (const auto& [name, value] : group[0].state) {
      EXPECT_EQ(group[rank].state.at(name), value) << name;
    }
  }
}

}  // namespace ampc::runtime::data_parallel_testing
