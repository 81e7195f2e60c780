// The public sessions (ampc/session.h): each forwards to the runtime's session it owns.
#include <utility>

#include "ampc/session.h"
#include "runtime/session.h"
#include "runtime/training_session.h"

namespace ampc {
namespace {

StepResult to_result(const runtime::StepStats& stats) {
  return StepResult{.step = stats.step,
                    .loss = stats.loss,
                    .grad_norm = stats.grad_norm,
                    .lr = stats.lr,
                    .loss_scale = stats.loss_scale,
                    .skipped = stats.found_inf,
                    .skipped_steps = stats.skipped_steps};
}

TransferCounts to_counts(const runtime::Backend::Counters& counters) {
  return TransferCounts{.copies_to_device = counters.copies_to_device,
                        .bytes_to_device = counters.bytes_to_device,
                        .copies_to_host = counters.copies_to_host,
                        .bytes_to_host = counters.bytes_to_host,
                        .synchronizations = counters.synchronizations};
}

}  // namespace

InferenceSession::InferenceSession(std::unique_ptr<runtime::InferenceSession> impl)
    : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::load(const std::string& path,
                                                                         SessionOptions options) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::InferenceSession> impl,
                        runtime::InferenceSession::load(path, std::move(options)));
  return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
}

std::vector<TensorInfo> InferenceSession::inputs() const { return impl_->inputs(); }
std::vector<TensorInfo> InferenceSession::outputs() const { return impl_->outputs(); }

// Random ops draw anew on each run, as PyTorch's do on each forward: the k-th run that succeeds
// draws from random stream k, so a new session repeats the sequence.
absl::StatusOr<TensorMap> InferenceSession::run(const TensorViews& inputs) {
  absl::StatusOr<TensorMap> outputs = impl_->run(inputs);
  if (outputs.ok()) impl_->set_random_stream(impl_->random_stream() + 1);
  return outputs;
}

TransferCounts InferenceSession::transfers() const {
  return to_counts(impl_->backend().counters());
}

TrainingSession::TrainingSession(std::unique_ptr<runtime::TrainingSession> impl)
    : impl_(std::move(impl)) {}
TrainingSession::~TrainingSession() = default;

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::load(const std::string& path,
                                                                       SessionOptions options) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TrainingSession> impl,
                        runtime::TrainingSession::load(path, std::move(options)));
  return std::unique_ptr<TrainingSession>(new TrainingSession(std::move(impl)));
}

std::vector<TensorInfo> TrainingSession::batch_inputs() const { return impl_->batch_inputs(); }

namespace {

// The learning rate a step uses: the caller's, else the model's.
absl::StatusOr<float> step_lr(std::optional<float> lr, std::optional<double> model_lr) {
  if (lr.has_value()) return *lr;
  if (model_lr.has_value()) return static_cast<float>(*model_lr);
  return absl::InvalidArgumentError(
      "no learning rate: the model was compiled without --lr, so step() needs one");
}

}  // namespace

absl::StatusOr<StepResult> TrainingSession::step(const TensorViews& batch,
                                                 std::optional<float> lr) {
  AMPC_ASSIGN_OR_RETURN(const float rate, step_lr(lr, impl_->default_lr()));
  AMPC_ASSIGN_OR_RETURN(const runtime::StepStats stats, impl_->step(batch, rate));
  return to_result(stats);
}

absl::StatusOr<StepResult> TrainingSession::step(const std::vector<TensorMap>& micro_batches,
                                                 std::optional<float> lr) {
  AMPC_ASSIGN_OR_RETURN(const float rate, step_lr(lr, impl_->default_lr()));
  AMPC_ASSIGN_OR_RETURN(const runtime::StepStats stats, impl_->step(micro_batches, rate));
  return to_result(stats);
}

int64_t TrainingSession::accumulation_steps() const { return impl_->accumulation_steps(); }
int64_t TrainingSession::steps_done() const { return impl_->steps_done(); }
std::optional<double> TrainingSession::default_lr() const { return impl_->default_lr(); }

absl::StatusOr<TensorMap> TrainingSession::evaluate(const TensorViews& batch) {
  return impl_->evaluate(batch);
}
std::vector<TensorInfo> TrainingSession::eval_inputs() const { return impl_->eval_inputs(); }
std::vector<TensorInfo> TrainingSession::eval_outputs() const { return impl_->eval_outputs(); }

std::vector<std::string> TrainingSession::state_names() const { return impl_->state_names(); }
absl::StatusOr<Tensor> TrainingSession::state(std::string_view name) const {
  return impl_->state(name);
}
absl::Status TrainingSession::set_state(std::string_view name, const TensorView& value) {
  return impl_->set_state(name, value);
}

std::vector<TensorInfo> TrainingSession::weight_infos() const {
  std::vector<TensorInfo> infos;
  if (const Graph* eval = impl_->eval_graph(); eval != nullptr) {
    for (const Value* init : eval->initializers()) {
      if (impl_->has_state(init->name())) infos.push_back({init->name(), init->type()});
      // A copy the eval graph reads for sharded master weights: those are the weight.
      for (const LowPrecisionCopy& copy : impl_->low_precision_copies()) {
        if (copy.copy != init->name()) continue;
        infos.push_back(
            {copy.parameter, TensorType{DType::kF32, impl_->sharded_state().at(copy.parameter)}});
      }
    }
  }
  return infos;
}

absl::Status TrainingSession::save_checkpoint(const std::string& path) const {
  return impl_->save_checkpoint(path);
}
absl::Status TrainingSession::load_checkpoint(const std::string& path) {
  return impl_->load_checkpoint(path);
}

absl::Status TrainingSession::export_inference_model(const std::string& path,
                                                     bool keep_loss) const {
  return impl_->export_inference_model(path, ExportOptions{},
                                       keep_loss
                                           ? runtime::TrainingSession::ExportedLoss::kKept
                                           : runtime::TrainingSession::ExportedLoss::kDropped);
}

TransferCounts TrainingSession::transfers() const { return to_counts(impl_->backend().counters()); }

}  // namespace ampc
