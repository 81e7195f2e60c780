#include "runtime/training_session.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "passes/data_parallel.h"
#include "passes/passes.h"
#include "runtime/checksum.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/group_check.h"
#include "runtime/safetensors.h"

namespace ampc::runtime {
namespace {

std::optional<double> parse_double(const std::string& text) {
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

const Value* find_output(const Graph& graph, std::string_view name) {
  for (const Value* output : graph.outputs()) {
    if (output->name() == name) return output;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::load(const std::string& path,
                                                                       SessionOptions options) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_file(path));
  if (graph->training_step() == nullptr) {
    return absl::InvalidArgumentError(
        str_cat(path,
                " is not a training model (it has no training step); compile it with "
                "`ampc compile MODEL -o OUT --optimizer sgd|adam|adamw`"));
  }
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      create(std::move(graph), std::move(options));
  if (!session.ok()) {
    return absl::Status(session.status().code(), str_cat(path, ": ", session.status().message()));
  }
  return session;
}

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::create(
    std::unique_ptr<Graph> graph, SessionOptions options) {
  std::unique_ptr<TrainingSession> session(new TrainingSession());
  const auto& metadata = graph->metadata();
  if (auto it = metadata.find(kMetadataLoss); it != metadata.end()) session->loss_ = it->second;
  if (auto it = metadata.find(kMetadataLr); it != metadata.end()) {
    session->default_lr_ = parse_double(it->second);
  }
  // The step and the eval graph run on one backend (one device, one stream).
  AMPC_ASSIGN_OR_RETURN(
      std::shared_ptr<Backend> backend,
      create_backend(options.device, BackendOptions{.device_index = options.device_index,
                                                    .allow_tf32 = options.allow_tf32}));
  std::unique_ptr<Graph> step = graph->take_training_step();
  if (step == nullptr) step = std::move(graph);  // a bare training step
  if (step->state_updates().empty()) {
    return absl::InvalidArgumentError(
        str_cat("graph '", step->name(), "' is not a training step: it updates no state"));
  }
  for (std::string_view name : {std::string_view(session->loss_), std::string_view("grad_norm")}) {
    const Value* output = find_output(*step, name);
    if (output == nullptr || output->type().num_elements() != 1) {
      return absl::InvalidArgumentError(
          str_cat("the training step has no scalar output '", name, "'"));
    }
  }
  const Tensor* steps = nullptr;
  bool has_counter = false;
  for (const Value* init : step->initializers()) {
    if (init->name() == kAccumulationStepsName) steps = init->initializer();
    if (init->name() == kMicroStepState) has_counter = true;
  }
  if (steps != nullptr) {
    const Tensor& k = *steps;
    if (k.dtype() != DType::kI64 || k.num_elements() != 1 || k.element_as_i64(0) < 1 ||
        k.element_as_i64(0) > kMaxAccumulationSteps || !has_counter) {
      return absl::InvalidArgumentError(str_cat("the training step's '", kAccumulationStepsName,
                                                "' must be an i64 count >= 1 beside the state '",
                                                kMicroStepState, "'"));
    }
    session->accumulation_steps_ = k.element_as_i64(0);
  }
  comm::Communicator* group = options.communicator.get();
  if (group != nullptr && group->engine() == "nccl" && options.device != Device::kCuda) {
    return absl::InvalidArgumentError(str_cat("the nccl communicator moves GPU memory; a ",
                                              device_name(options.device),
                                              " session's ranks communicate through gloo"));
  }
  // A session given a group trains data-parallel over it, even a group of one (whose sums are
  // its own values: the step is the single rank's, through the communicator).
  std::vector<ShardedState> sharded;
  if (group != nullptr) {
    AMPC_ASSIGN_OR_RETURN(DataParallelRewrite rewrite,
                          insert_gradient_all_reduce(
                              *step, DataParallelOptions{.ranks = group->size(),
                                                         .sync_batch_norm = options.sync_batch_norm,
                                                         .shard_optimizer = options.shard_optimizer,
                                                         .loss = session->loss_,
                                                         .eval = graph.get()}));
    for (const ShardedState& sharded : rewrite.sharded_state) {
      session->sharded_.emplace(sharded.name, sharded.shape);
    }
    sharded = std::move(rewrite.sharded_state);
    session->copies_ = std::move(rewrite.copies);
    if (options.device == Device::kCuda && options.sync_batch_norm) {
      for (const auto& node : step->nodes()) {
        if (node->op_type() != "SyncBatchNormalization") continue;
        return absl::UnimplementedError(str_cat(
            node->describe(),
            ": BatchNorm statistics over every rank (SyncBatchNorm) run on the CPU only so far; "
            "on cuda, normalize by each rank's shard (ampc train --local-batch-norm, "
            "SessionOptions::sync_batch_norm = false)"));
      }
    }
    AMPC_RETURN_IF_ERROR(comm::check_same_step(*step, *group));
  }
  backend->context().communicator = group;
  AMPC_ASSIGN_OR_RETURN(session->step_,
                        InferenceSession::create(std::move(step), options, backend));
  AMPC_RETURN_IF_ERROR(session->make_stats_log());
  AMPC_RETURN_IF_ERROR(session->install_shards(std::move(sharded)));
  if (group != nullptr && group->size() > 1) AMPC_RETURN_IF_ERROR(session->broadcast_state(0));
  if (graph != nullptr) {
    session->read_eval_through_copies(*graph);
    // The eval graph reads the step's state (parameters, running statistics) where the step
    // updates it: no second copy, and nothing to copy between a step and an evaluation.
    const Graph& step_graph = session->step_->graph();
    std::map<std::string_view, const Value*> state;  // the step's state initializers, by name
    for (const Graph::StateUpdate& update : step_graph.state_updates()) {
      state[update.state] = nullptr;
    }
    for (const Value* init : step_graph.initializers()) {
      if (auto it = state.find(init->name()); it != state.end()) it->second = init;
    }
    InferenceSession::SharedInitializers shared;
    for (const Value* init : graph->initializers()) {
      auto it = state.find(init->name());
      if (it == state.end() || it->second == nullptr || it->second->type() != init->type()) {
        continue;
      }
      AMPC_ASSIGN_OR_RETURN(shared[init->name()],
                            session->step_->initializer_address(init->name()));
      session->shared_with_eval_.insert(init->name());
    }
    AMPC_ASSIGN_OR_RETURN(session->eval_, InferenceSession::create(std::move(graph), options,
                                                                   backend, std::move(shared)));
  }
  return session;
}

absl::Status TrainingSession::broadcast_state(int root) {
  comm::Communicator& group = *step_->backend().context().communicator;
  for (const std::string& name : state_names()) {
    if (sharded_.contains(name)) continue;  // each rank's own block
    AMPC_ASSIGN_OR_RETURN(Tensor value, step_->initializer(name));
    // Bytes, whatever the type: a broadcast moves them unchanged.
    const std::span<uint8_t> bytes = value.mutable_bytes();
    AMPC_RETURN_IF_ERROR(
        group.broadcast_now(bytes.data(), static_cast<int64_t>(bytes.size()), DType::kU8, root));
    AMPC_RETURN_IF_ERROR(set_state(name, value));
  }
  return absl::OkStatus();
}

int TrainingSession::rank() const {
  const comm::Communicator* group = step_->backend().context().communicator;
  return group == nullptr ? 0 : group->rank();
}

int TrainingSession::ranks() const {
  const comm::Communicator* group = step_->backend().context().communicator;
  return group == nullptr ? 1 : group->size();
}

std::vector<TensorInfo> TrainingSession::batch_inputs() const {
  std::vector<TensorInfo> inputs = step_->inputs();
  std::erase_if(inputs, [](const TensorInfo& info) { return info.name == "lr"; });
  return inputs;
}

std::vector<TensorInfo> TrainingSession::eval_inputs() const {
  return eval_ ? eval_->inputs() : std::vector<TensorInfo>{};
}

std::vector<TensorInfo> TrainingSession::eval_outputs() const {
  return eval_ ? eval_->outputs() : std::vector<TensorInfo>{};
}

bool TrainingSession::has_state(std::string_view name) const {
  for (const LowPrecisionCopy& copy : copies_) {
    if (copy.copy == name) return false;  // as in state_names()
  }
  for (const Graph::StateUpdate& update : step_->graph().state_updates()) {
    if (update.state == name) return true;
  }
  return false;
}

std::vector<std::string> TrainingSession::state_names() const {
  std::set<std::string_view> copies;
  for (const LowPrecisionCopy& copy : copies_) copies.insert(copy.copy);
  std::vector<std::string> names;
  for (const Graph::StateUpdate& update : step_->graph().state_updates()) {
    if (!copies.contains(update.state)) names.push_back(update.state);
  }
  return names;
}

absl::Status TrainingSession::check_batch(const TensorViews& batch) const {
  const std::vector<TensorInfo> inputs = batch_inputs();
  for (const TensorInfo& input : inputs) {
    const auto it = batch.find(input.name);
    if (it == batch.end()) {
      return absl::InvalidArgumentError(
          str_cat("the batch has no '", input.name, "' (", type_to_string(input.type), ")"));
    }
    if (it->second.type != input.type) {
      return absl::InvalidArgumentError(str_cat("input '", input.name, "' must be ",
                                                type_to_string(input.type), ", not ",
                                                type_to_string(it->second.type)));
    }
  }
  for (const auto& [name, value] : batch) {
    if (name == "lr") {
      return absl::InvalidArgumentError("the batch must not hold 'lr'; pass the rate to step()");
    }
    if (std::none_of(inputs.begin(), inputs.end(),
                     [&](const TensorInfo& input) { return input.name == name; })) {
      std::vector<std::string> names;
      for (const TensorInfo& input : inputs) names.push_back(input.name);
      return absl::InvalidArgumentError(str_cat("the batch holds '", name,
                                                "', which is no input of the training step (",
                                                str_join(names, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::run_step_graph(const TensorViews& batch, float lr,
                                             uint64_t random_stream) {
  AMPC_RETURN_IF_ERROR(step_->set_input("lr", Tensor::from_f32({}, {lr})));
  AMPC_RETURN_IF_ERROR(step_->lend_inputs(batch));
  step_->set_random_stream(random_stream);  // new dropout masks each call
  AMPC_RETURN_IF_ERROR(step_->launch());    // data errors recorded on the device: settle()
  for (const Graph::StateUpdate& update : step_->graph().state_updates()) {
    AMPC_RETURN_IF_ERROR(step_->copy_output_to_initializer(update.update, update.state));
  }
  eval_stale_ = true;
  return absl::OkStatus();
}

absl::Status TrainingSession::abandon_window() {
  for (const std::string& name : state_names()) {
    if (name != kMicroStepState && !name.ends_with(str_cat(kGradSuffix, kSumSuffix))) continue;
    AMPC_ASSIGN_OR_RETURN(Tensor value, step_->initializer(name));
    AMPC_RETURN_IF_ERROR(step_->set_initializer(name, Tensor(value.type())));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepStats> TrainingSession::step(const TensorViews& batch, float lr) {
  AMPC_RETURN_IF_ERROR(queue_step(batch, lr));
  AMPC_ASSIGN_OR_RETURN(std::vector<StepStats> stats, take_stats());
  return stats.back();
}

absl::StatusOr<StepStats> TrainingSession::step(
    const std::vector<std::map<std::string, Tensor>>& micro_batches, float lr) {
  AMPC_RETURN_IF_ERROR(queue_step(micro_batches, lr));
  AMPC_ASSIGN_OR_RETURN(std::vector<StepStats> stats, take_stats());
  return stats.back();
}

absl::Status TrainingSession::queue_step(const TensorViews& batch, float lr) {
  if (accumulation_steps_ > 1) {
    return absl::InvalidArgumentError(
        str_cat("this model accumulates gradients over ", accumulation_steps_,
                " micro-batches (ampc compile --accumulate); a step takes that many batches"));
  }
  return queue_views({batch}, lr);
}

absl::Status TrainingSession::make_stats_log() {
  StatsLog& log = stats_log_;
  const Graph& graph = step_->graph();
  std::map<std::string_view, const Value*> initializers;
  for (const Value* init : graph.initializers()) initializers[init->name()] = init;
  auto output = [&](StatsField& field, std::string_view name, int64_t count) -> absl::Status {
    field.value = find_output(graph, name);
    AMPC_ASSIGN_OR_RETURN(field.source, step_->output_address(name));
    field.offset = log.slot_bytes;
    log.slot_bytes += (field.bytes() * count + 7) / 8 * 8;
    return absl::OkStatus();
  };
  auto state = [&](StatsField& field, std::string_view name) -> absl::Status {
    field.value = initializers.at(name);
    AMPC_ASSIGN_OR_RETURN(field.source, step_->initializer_address(name));
    field.offset = log.slot_bytes;
    log.slot_bytes += (field.bytes() + 7) / 8 * 8;
    return absl::OkStatus();
  };
  AMPC_RETURN_IF_ERROR(output(log.loss, loss_, accumulation_steps_));
  AMPC_RETURN_IF_ERROR(output(log.grad_norm, "grad_norm", 1));
  if (find_output(graph, "found_inf") != nullptr && initializers.contains("loss_scale") &&
      initializers.contains("loss_scale.skipped_steps")) {
    AMPC_RETURN_IF_ERROR(output(log.found_inf, "found_inf", 1));
    AMPC_RETURN_IF_ERROR(state(log.scale, "loss_scale"));
    AMPC_RETURN_IF_ERROR(state(log.skipped, "loss_scale.skipped_steps"));
  }
  AMPC_ASSIGN_OR_RETURN(
      log.memory, step_->backend().allocate(log.slot_bytes * kStatsSlots, "step statistics log"));
  return absl::OkStatus();
}

absl::Status TrainingSession::queue_step(
    const std::vector<std::map<std::string, Tensor>>& micro_batches, float lr) {
  return queue_views(std::vector<TensorViews>(micro_batches.begin(), micro_batches.end()), lr);
}

absl::Status TrainingSession::queue_views(const std::vector<TensorViews>& micro_batches, float lr) {
  AMPC_RETURN_IF_ERROR(failed_);
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(str_cat("the learning rate must be >= 0, not ", lr));
  }
  const int64_t k = accumulation_steps_;
  if (static_cast<int64_t>(micro_batches.size()) != k) {
    return absl::InvalidArgumentError(
        str_cat("a step of this model takes ", k, " micro-batch(es), not ", micro_batches.size()));
  }
  if (k > 1 && counter_unchecked_) {
    AMPC_ASSIGN_OR_RETURN(Tensor counter, step_->initializer(kMicroStepState));
    if (counter.element_as_i64(0) != 0) {
      return absl::FailedPreconditionError(
          str_cat("the model's state is in the middle of an accumulation window (", kMicroStepState,
                  " = ", counter.element_as_i64(0), "); a step starts one"));
    }
    counter_unchecked_ = false;
  }
  // Every micro-batch is checked before the first runs, so a bad one changes nothing.
  for (int64_t i = 0; i < k; ++i) {
    const absl::Status checked = check_batch(micro_batches[static_cast<size_t>(i)]);
    if (!checked.ok()) {
      if (k == 1) return checked;
      return absl::Status(checked.code(),
                          str_cat("micro-batch ", i + 1, " of ", k, ": ", checked.message()));
    }
  }
  if (static_cast<int64_t>(queued_.size()) == kStatsSlots) AMPC_RETURN_IF_ERROR(settle());
  Backend& backend = step_->backend();
  std::byte* slot =
      stats_log_.memory.data() + static_cast<int64_t>(queued_.size()) * stats_log_.slot_bytes;
  auto keep = [&](const StatsField& field, int64_t index = 0) {
    return backend.copy_on_device(slot + field.offset + index * field.bytes(), field.source,
                                  field.bytes());
  };
  // The scale this step uses: the state before the step updates it.
  if (stats_log_.scale.value != nullptr) AMPC_RETURN_IF_ERROR(keep(stats_log_.scale));
  for (int64_t i = 0; i < k; ++i) {
    // Dropout's stream per run of the step graph (wrapping is harmless: it only names a draw);
    // each rank of a data-parallel group draws its own (as each DDP rank has its own generator).
    const comm::Communicator* group = step_->backend().context().communicator;
    const uint64_t ranks = group == nullptr ? 1 : static_cast<uint64_t>(group->size());
    const uint64_t rank = group == nullptr ? 0 : static_cast<uint64_t>(group->rank());
    const uint64_t stream =
        (static_cast<uint64_t>(steps_done_) * static_cast<uint64_t>(k) + static_cast<uint64_t>(i)) *
            ranks +
        rank;
    // The window's sums are summed over the ranks on its last run only (ops/collective.cc).
    step_->set_inside_window(i + 1 < k);
    const absl::Status ran = run_step_graph(micro_batches[static_cast<size_t>(i)], lr, stream);
    if (!ran.ok()) {
      if (k == 1) return ran;
      // A data-dependent failure (a label out of range) after earlier micro-batches ran: their
      // gradient sums are dropped so the next step starts a window (the parameters and the
      // optimizer state held; BatchNorm running statistics keep what those batches moved).
      AMPC_RETURN_IF_ERROR(abandon_window());
      return absl::Status(ran.code(), str_cat("micro-batch ", i + 1, " of ", k, ": ", ran.message(),
                                              " (this step's update was not applied)"));
    }
    AMPC_RETURN_IF_ERROR(keep(stats_log_.loss, i));
  }
  AMPC_RETURN_IF_ERROR(keep(stats_log_.grad_norm));
  if (stats_log_.found_inf.value != nullptr) {
    AMPC_RETURN_IF_ERROR(keep(stats_log_.found_inf));
    AMPC_RETURN_IF_ERROR(keep(stats_log_.skipped));
  }
  ++steps_done_;
  queued_.push_back({.step = steps_done_, .lr = lr});
  return absl::OkStatus();
}

absl::Status TrainingSession::settle() const {
  if (queued_.empty()) return failed_;
  const int64_t first = queued_.front().step;
  const int64_t last = queued_.back().step;
  absl::Status finished = step_->finish();
  // A collective that failed on the device (a rank that stopped) leaves the stream done but its
  // results wrong: the communicator knows.
  if (const comm::Communicator* group = step_->backend().context().communicator;
      finished.ok() && group != nullptr) {
    finished = group->health();
  }
  if (!finished.ok()) {
    queued_.clear();
    failed_ = absl::Status(
        finished.code(),
        str_cat(
            first == last ? str_cat("step ", first) : str_cat("one of steps ", first, " to ", last),
            ": ", finished.message(),
            "; later steps ran on, so the state is no longer that of a finished step: load a "
            "checkpoint to go on"));
    return failed_;
  }
  const StatsLog& log = stats_log_;
  std::vector<std::byte> host(queued_.size() * static_cast<size_t>(log.slot_bytes));
  AMPC_RETURN_IF_ERROR(step_->backend().copy_to_host(host.data(), log.memory.data(),
                                                     static_cast<int64_t>(host.size())));
  for (size_t s = 0; s < queued_.size(); ++s) {
    const std::byte* slot = host.data() + s * static_cast<size_t>(log.slot_bytes);
    // A figure from its raw bytes, typed as the value it was copied from.
    auto figure = [&](const StatsField& field, int64_t index = 0) {
      Tensor tensor(field.value->type());
      std::memcpy(tensor.mutable_bytes().data(), slot + field.offset + index * field.bytes(),
                  static_cast<size_t>(field.bytes()));
      return tensor;
    };
    double loss_sum = 0;
    for (int64_t i = 0; i < accumulation_steps_; ++i) {
      loss_sum += figure(log.loss, i).element_as_double(0);
    }
    StepStats stats{.step = queued_[s].step,
                    .loss = loss_sum / static_cast<double>(accumulation_steps_),
                    .grad_norm = figure(log.grad_norm).element_as_double(0),
                    .lr = queued_[s].lr};
    if (log.found_inf.value != nullptr) {
      stats.loss_scale = figure(log.scale).element_as_double(0);
      stats.found_inf = figure(log.found_inf).element_as_double(0) != 0;
      stats.skipped_steps = figure(log.skipped).element_as_i64(0);
    }
    taken_.push_back(stats);
  }
  queued_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepStats>> TrainingSession::take_stats() {
  AMPC_RETURN_IF_ERROR(settle());
  return std::exchange(taken_, {});
}

absl::Status TrainingSession::sync_eval() {
  if (eval_ == nullptr) {
    return absl::FailedPreconditionError(
        "this session holds a bare training step, without an eval graph");
  }
  if (!eval_stale_) return absl::OkStatus();
  const std::vector<std::string> names = state_names();
  const std::set<std::string> state(names.begin(), names.end());
  for (const Value* init : eval_->graph().initializers()) {
    if (!state.contains(init->name()) || shared_with_eval_.contains(init->name())) continue;
    AMPC_ASSIGN_OR_RETURN(Tensor value, step_->initializer(init->name()));
    AMPC_RETURN_IF_ERROR(eval_->set_initializer(init->name(), value));
  }
  eval_stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> TrainingSession::evaluate(const TensorViews& batch) {
  // A data error of a queued step is reported as the step's, not as the eval graph's.
  AMPC_RETURN_IF_ERROR(settle());
  AMPC_RETURN_IF_ERROR(sync_eval());
  for (const TensorInfo& input : eval_->inputs()) {
    if (!batch.contains(input.name)) {
      return absl::InvalidArgumentError(
          str_cat("the batch has no '", input.name, "' (", type_to_string(input.type), ")"));
    }
  }
  // Random ops of the eval graph draw from a stream of their own for each number of steps
  // done: anew as training moves on, the same after a resume; none that a step draws from.
  eval_->set_random_stream((uint64_t{1} << 63) | static_cast<uint64_t>(steps_done_));
  return eval_->run(batch);
}

absl::Status TrainingSession::set_state(std::string_view name, const TensorView& value) {
  for (const LowPrecisionCopy& copy : copies_) {
    if (name == copy.parameter) {
      return absl::FailedPreconditionError(
          str_cat("'", name, "' is a master weight each rank keeps one block of (the sharded ",
                  "optimizer), read through its copy '", copy.copy,
                  "': it cannot be set alone; load_checkpoint restores it"));
    }
    if (name == copy.copy) {
      return absl::FailedPreconditionError(
          str_cat("'", name, "' is the low-precision copy of '", copy.parameter,
                  "' (the sharded optimizer's): it follows that parameter and cannot be set "
                  "alone; load_checkpoint restores it"));
    }
  }
  if (value.data != nullptr && has_state(name)) {
    const Tensor copy(value.type, std::vector<uint8_t>(value.bytes().begin(), value.bytes().end()));
    if (const std::string why = implausible_state(name, copy); !why.empty()) {
      return absl::InvalidArgumentError(str_cat("'", name, "' cannot be set to this value: ", why));
    }
  }
  AMPC_RETURN_IF_ERROR(step_->set_initializer(name, value));
  eval_stale_ = true;
  counter_unchecked_ = true;
  return absl::OkStatus();
}

std::optional<double> TrainingSession::min_loss_scale() const {
  for (const auto& node : step_->graph().nodes()) {
    if (node->domain() == kAmpcDomain && node->op_type() == "LossScaleUpdate") {
      return node->float_attr("min_scale");
    }
  }
  return std::nullopt;
}

absl::Status TrainingSession::export_inference_model(const std::string& path,
                                                     const ExportOptions& options,
                                                     ExportedLoss loss) const {
  if (eval_ == nullptr) {
    return absl::FailedPreconditionError(
        "this session holds a bare training step, without an eval graph to export");
  }
  AMPC_RETURN_IF_ERROR(settle());
  std::unique_ptr<Graph> graph = eval_->graph().clone();
  // The master weights of the parameters read through copies, whole again (every rank calls).
  std::set<std::string> restored;
  std::set<std::string_view> read;
  for (const Value* init : eval_->graph().initializers()) read.insert(init->name());
  for (const LowPrecisionCopy& copy : copies_) {
    // Every rank's eval graph reads the same copies, so every rank gathers the same ones.
    if (!read.contains(copy.copy)) continue;
    AMPC_ASSIGN_OR_RETURN(Tensor whole, whole_state(copy.parameter));
    AMPC_RETURN_IF_ERROR(restore_master_weights(*graph, copy, std::move(whole)));
    restored.insert(copy.parameter);
  }
  if (rank() != 0) return absl::OkStatus();  // rank 0 writes
  const std::vector<std::string> names = state_names();
  const std::set<std::string> state(names.begin(), names.end());
  for (Value* init : graph->initializers()) {
    if (!state.contains(init->name()) || restored.contains(init->name())) continue;
    AMPC_ASSIGN_OR_RETURN(Tensor value, step_->initializer(init->name()));
    graph->set_initializer_data(init, std::move(value));
  }
  // Without its loss the model needs no labels: drop the loss, then what only it read.
  if (loss == ExportedLoss::kDropped && graph->outputs().size() > 1) {
    for (int i = 0; i < static_cast<int>(graph->outputs().size()); ++i) {
      if (graph->outputs()[i]->name() == loss_) graph->erase_output(i--);
    }
    const std::vector<Node*> nodes = graph->node_list();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* node = *it;
      bool dead = true;
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (node->has_output(i) && !node->output(i)->is_dead()) dead = false;
      }
      if (dead) graph->erase_node(node);
    }
    for (Value* input : std::vector<Value*>(graph->inputs())) {
      if (input->is_dead()) graph->erase_graph_value(input);
    }
    for (Value* init : std::vector<Value*>(graph->initializers())) {
      if (init->is_dead()) graph->erase_graph_value(init);
    }
  }
  for (const std::string_view key :
       {kMetadataLoss, kMetadataLr, kMetadataOptimizer, kMetadataPrecisionBaseline}) {
    graph->erase_metadata(key);
  }
  return export_onnx_file(*graph, path, options);
}

}  // namespace ampc::runtime
