// TrainingSession: trains a compiled training model step by step.
//
//   #include "runtime/training_session.h"
//
//   absl::StatusOr<std::unique_ptr<ampc::runtime::TrainingSession>> session =
//       ampc::runtime::TrainingSession::load("mlp.train.onnx");
//   absl::StatusOr<ampc::runtime::StepStats> stats = (*session)->step(batch, /*lr=*/0.05f);
//   absl::StatusOr<std::map<std::string, ampc::Tensor>> outputs = (*session)->evaluate(batch);
//   absl::Status saved = (*session)->save_checkpoint("run/checkpoint.safetensors");
//   absl::Status exported = (*session)->export_inference_model("mlp.trained.onnx");
//
// A training model (`ampc compile --optimizer ...`, docs/training-graph.md) is an eval graph with
// a training step beside it. The step takes the batch and the learning rate `lr` as inputs,
// outputs the loss, `grad_norm` and the new value of every piece of state, and says which output
// replaces which initializer (Graph::state_updates). The step writes the updates over the state
// (in place, where the planner can; else copied after the run), so the next step sees the new
// parameters, moments, step counter and running statistics. The eval graph reads the parameters
// and running statistics from the same memory: no copy of them is kept or made.
//
// Steps need not wait for the device: queue_step() leaves a step's figures (loss, norm, scale,
// overflow) in device memory and returns, and take_stats() reads those of every queued step at
// once (`ampc train --log-every N`). step() is both for one step.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "passes/data_parallel.h"
#include "runtime/session.h"

namespace ampc::runtime {

struct StepStats {
  int64_t step = 0;  // steps completed, this one included
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
  // With loss scaling: the scale this step used, whether its gradients overflowed (the update
  // was skipped), and the skipped steps so far. NaN / false / 0 without.
  double loss_scale = NAN;
  bool found_inf = false;
  int64_t skipped_steps = 0;
};

class TrainingSession {
 public:
  // Loads a training model file.
  static absl::StatusOr<std::unique_ptr<TrainingSession>> load(const std::string& path,
                                                               SessionOptions options = {});
  // `graph` is a training model (an eval graph with a training step), or a bare training step
  // (a graph with state updates; evaluate and export are then unavailable). The step must have
  // the input `lr` and the loss output: `loss`, or the name the model's metadata gives.
  static absl::StatusOr<std::unique_ptr<TrainingSession>> create(std::unique_ptr<Graph> graph,
                                                                 SessionOptions options = {});

  // One step on `batch` (every step input but `lr`, by name) at learning rate `lr` (>= 0): the
  // step queued and its stats taken (with those of steps queued before it, which are dropped).
  // The batch is lent for the call (InferenceSession::lend_input): the CPU reads it in place.
  absl::StatusOr<StepStats> step(const TensorViews& batch, float lr);
  // One step of a model that accumulates gradients (`ampc compile --accumulate K`): K calls of
  // the step graph, one per micro-batch, and one update with the mean of their gradients. The
  // stats give the mean loss of the K micro-batches; the norm, overflow and scale are the
  // update's. `micro_batches` must hold exactly accumulation_steps() batches.
  absl::StatusOr<StepStats> step(const std::vector<std::map<std::string, Tensor>>& micro_batches,
                                 float lr);
  // Queues a step like step() without waiting for the device: nothing is read back, its stats
  // wait in device memory for take_stats(). An error found while queuing (a bad batch, a kernel
  // that fails at launch, any data error on the CPU) returns here, leaves the state as it was
  // and counts no step. A data error a kernel records on the device (a label out of range on
  // CUDA) is found by take_stats(); by then later steps may have moved the state, so the session
  // refuses to go on, save or export until load_checkpoint() restores it.
  absl::Status queue_step(const TensorViews& batch, float lr);
  absl::Status queue_step(const std::vector<std::map<std::string, Tensor>>& micro_batches,
                          float lr);
  // Waits for the queued steps and returns their stats in step order: one wait for the device
  // and one copy to the host for all of them (every 64 steps, queue_step reads them ahead).
  absl::StatusOr<std::vector<StepStats>> take_stats();
  // Steps queued whose stats take_stats() has not returned.
  int64_t untaken_steps() const { return static_cast<int64_t>(queued_.size() + taken_.size()); }

  // K for a model compiled with --accumulate K; 1 otherwise.
  int64_t accumulation_steps() const { return accumulation_steps_; }

  // Runs the eval graph (BatchNorm on running statistics, no dropout) on `batch` with the
  // current parameters and returns every output by name.
  absl::StatusOr<std::map<std::string, Tensor>> evaluate(const TensorViews& batch);

  // The step's inputs other than `lr`: what a batch must hold.
  std::vector<TensorInfo> batch_inputs() const;
  // The eval graph's inputs and outputs (empty without an eval graph).
  std::vector<TensorInfo> eval_inputs() const;
  std::vector<TensorInfo> eval_outputs() const;
  // Every piece of state (parameters, optimizer moments, step counter, running statistics), in
  // the order of the step's state updates.
  std::vector<std::string> state_names() const;
  bool has_state(std::string_view name) const;

  // A piece of state, by initializer name: with SessionOptions::shard_optimizer, a moment or a
  // sharded master weight is this rank's block of it (sharded_state() names them).
  absl::StatusOr<Tensor> state(std::string_view name) const { return step_->initializer(name); }
  // A piece of state whole: a sharded one gathered from every rank's block, so in a
  // data-parallel group every rank must ask for it, in the same order.
  absl::StatusOr<Tensor> whole_state(const std::string& name) const;
  // The state each rank keeps one block of (the sharded optimizer's moments and master weights),
  // with whole shapes.
  const std::map<std::string, Shape, std::less<>>& sharded_state() const { return sharded_; }
  // The parameters whose f32 master weights are sharded, and the whole low-precision copies the
  // step and the eval graph read instead (passes/master_weights.h). A copy is state of the step
  // but not in state_names(): it is its parameter cast, rebuilt from the whole parameter
  // whenever that is restored.
  const std::vector<LowPrecisionCopy>& low_precision_copies() const { return copies_; }
  // Sets a piece of state (this rank's block of a sharded one). A value load_checkpoint() would
  // refuse (not finite; a negative counter, second moment or step counter; a loss scale not
  // above 0) is refused, as is a sharded master weight (its copy could not follow):
  // load_checkpoint() restores those.
  absl::Status set_state(std::string_view name, const TensorView& value);

  // Writes every piece of state and the step count to a safetensors file, through a temporary
  // file and a rename (a crash never leaves a half-written checkpoint). It waits for the queued
  // steps first and fails, writing nothing, when one of them met a data error or when a piece
  // of state is one load_checkpoint() would refuse (a NaN weight after a non-finite step). In a
  // data-parallel group every rank calls it (sharded state is gathered whole from every rank's
  // block) and rank 0 writes the file.
  absl::Status save_checkpoint(const std::string& path) const;
  // Whether save_checkpoint writes the file here: rank 0 of a data-parallel group, or alone.
  bool writes_checkpoints() const { return rank() == 0; }
  // Restores what save_checkpoint wrote. The file must hold exactly this model's state, each
  // tensor with its type (sharded state whole: each rank takes its block, whatever the number
  // of ranks that saved it); on any error the session is unchanged. Restoring clears a
  // data error found after its step (queue_step), and drops the stats of queued steps.
  absl::Status load_checkpoint(const std::string& path);

  // Writes the eval graph with the current parameters as an inference model: no training step,
  // and (kDropped) without the loss output and the inputs only it reads (labels) when other
  // outputs remain; kKept keeps them, so running the file evaluates the loss. `options` says
  // whether the weights go to a data file beside it. In a data-parallel group every rank calls
  // it (sharded master weights are gathered whole) and rank 0 writes the file.
  enum class ExportedLoss { kDropped, kKept };
  absl::Status export_inference_model(const std::string& path, const ExportOptions& options = {},
                                      ExportedLoss loss = ExportedLoss::kDropped) const;

  // The learning rate the model was compiled with (`ampc compile --lr`), if it says.
  std::optional<double> default_lr() const { return default_lr_; }
  // The smallest scale the model's dynamic loss scaling backs off to (ampc compile --scale-min),
  // or nullopt without dynamic scaling.
  std::optional<double> min_loss_scale() const;
  const std::string& loss_name() const { return loss_; }
  const Graph& graph() const { return step_->graph(); }
  // The eval graph (what --export writes), or null for a bare training step.
  const Graph* eval_graph() const { return eval_ ? &eval_->graph() : nullptr; }
  // The eval graph's plan, or null. Its parameters arena holds only what is not the step's
  // state: the eval graph reads the parameters and running statistics where the step keeps them.
  const Plan* eval_plan() const { return eval_ ? &eval_->plan() : nullptr; }
  int64_t steps_done() const { return steps_done_; }
  // Whether the step replays a recorded CUDA graph (SessionOptions::cuda_graph), and why not.
  bool uses_graph() const { return step_->uses_graph(); }
  const absl::Status& graph_status() const { return step_->graph_status(); }
  // The backend the step and the eval graph run on (its counters say when the host waited).
  const Backend& backend() const { return step_->backend(); }

 private:
  TrainingSession() = default;
  // What state may hold to be saved, loaded or set: finite floats; a positive loss scale;
  // counters, second moments and the step counter not below 0. Empty when `value` is fine, else
  // why not.
  static std::string implausible_state(std::string_view name, const Tensor& value);
  // Copies the state the eval graph holds a copy of (none, unless types differ) into it.
  absl::Status sync_eval();
  // The batch holds exactly the step's inputs but `lr`, each of its type.
  absl::Status check_batch(const TensorViews& batch) const;
  // queue_step over lent micro-batches.
  absl::Status queue_views(const std::vector<TensorViews>& micro_batches, float lr);
  // Waits for the queued steps and moves their stats from device memory to taken_; a data error
  // recorded on the device becomes failed_. Changes nothing the model computes, hence const.
  absl::Status settle() const;
  // Makes every rank's state rank `root`'s (data-parallel start-up).
  absl::Status broadcast_state(int root);
  // Sets each rank's block of the sharded master weights from rank 0's whole initial values, and
  // the low-precision copies from those (runtime/training_sharding.cc).
  absl::Status install_shards(std::vector<ShardedState> sharded);
  // The eval graph reads the low-precision copies instead of casting those parameters.
  void read_eval_through_copies(Graph& eval) const;
  // Clears the gradient sums and the micro-step counter of an accumulation window.
  absl::Status abandon_window();
  // One call of the step graph: sets the batch and `lr`, runs, writes the state updates.
  absl::Status run_step_graph(const TensorViews& batch, float lr, uint64_t random_stream);

  std::unique_ptr<InferenceSession> step_;
  std::unique_ptr<InferenceSession> eval_;  // null for a bare training step
  std::string loss_ = "loss";
  std::optional<double> default_lr_;
  int64_t accumulation_steps_ = 1;
  int64_t steps_done_ = 0;
  bool eval_stale_ = true;
  // State the eval graph reads from the step's memory (all of it, unless types differ).
  std::set<std::string, std::less<>> shared_with_eval_;
  // The sharded optimizer's state (one block per rank), with whole shapes.
  std::map<std::string, Shape, std::less<>> sharded_;
  std::vector<LowPrecisionCopy> copies_;
  // This rank's place in its group (rank 0 of 1 without one).
  int rank() const;
  int ranks() const;
  // Whether the micro-step counter may be non-zero (state set from outside since it was read):
  // read once before the next accumulating step, not every step.
  bool counter_unchecked_ = true;

  // The stats log: where each queued step's figures wait on the device. A slot holds the raw
  // bytes of the K micro-batch losses, grad_norm and, with loss scaling, found_inf, the scale
  // the step used and the skipped-step count after it, each at an offset a multiple of 8.
  struct StatsField {
    const Value* value = nullptr;  // the output or state logged; null: none
    std::byte* source = nullptr;   // its device memory (fixed: the arenas never move)
    int64_t offset = 0;            // in a slot
    int64_t bytes() const { return value->type().byte_size(); }
  };
  struct StatsLog {
    StatsField loss, grad_norm, found_inf, scale, skipped;
    int64_t slot_bytes = 0;
    DeviceMemory memory;  // kSlots slots
  };
  struct QueuedStep {
    int64_t step = 0;
    double lr = 0;
  };
  static constexpr int64_t kStatsSlots = 64;
  absl::Status make_stats_log();
  mutable std::vector<QueuedStep> queued_;  // in slot order
  mutable std::vector<StepStats> taken_;    // read from the device, not yet returned
  mutable absl::Status failed_;             // a data error found after its step
  StatsLog stats_log_;  // last: its memory is freed before the backend the sessions hold
};

}  // namespace ampc::runtime
