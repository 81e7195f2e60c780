#include "runtime/training_session.h"

#include "compiler/strings.h"

namespace ampc::runtime {

absl::StatusOr<std::unique_ptr<TrainingSession>> TrainingSession::create(
    std::unique_ptr<Graph> graph, SessionOptions options, std::string loss) {
  if (graph->state_updates().empty()) {
    return absl::InvalidArgumentError(
        str_cat("graph '", graph->name(), "' is not a training graph: it updates no state"));
  }
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::create(std::move(graph), std::move(options)));
  return std::unique_ptr<TrainingSession>(new TrainingSession(std::move(session), std::move(loss)));
}

absl::StatusOr<StepStats> TrainingSession::step(const std::map<std::string, Tensor>& batch,
                                                float lr) {
  if (!(lr >= 0)) {
    return absl::InvalidArgumentError(str_cat("the learning rate must be >= 0, not ", lr));
  }
  for (const auto& [name, value] : batch) AMPC_RETURN_IF_ERROR(session_->set_input(name, value));
  AMPC_RETURN_IF_ERROR(session_->set_input("lr", Tensor::from_f32({}, {lr})));
  AMPC_RETURN_IF_ERROR(session_->run());
  for (const Graph::StateUpdate& update : session_->graph().state_updates()) {
    AMPC_RETURN_IF_ERROR(session_->copy_output_to_initializer(update.update, update.state));
  }
  ++steps_done_;
  StepStats stats{.step = steps_done_, .loss = 0, .grad_norm = 0, .lr = lr};
  AMPC_ASSIGN_OR_RETURN(Tensor loss, session_->output(loss_));
  stats.loss = loss.element_as_double(0);
  AMPC_ASSIGN_OR_RETURN(Tensor norm, session_->output("grad_norm"));
  stats.grad_norm = norm.element_as_double(0);
  return stats;
}

}  // namespace ampc::runtime
