// TrainingSession: runs a training graph (forward, backward, optimizer update) step by step.
//
// A training graph is what the autodiff and optimizer passes make of a model with a loss: it
// takes the batch and the learning rate `lr` as inputs, outputs the loss, `grad_norm` and the
// new value of every piece of state, and says which output replaces which initializer
// (Graph::state_updates). After each step the session writes the updates over the state, so
// the next step sees the new parameters, moments and step counter.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compiler/ir.h"
#include "runtime/session.h"

namespace ampc::runtime {

struct StepStats {
  int64_t step = 0;  // steps completed, this one included
  double loss = 0;
  double grad_norm = 0;
  double lr = 0;
};

class TrainingSession {
 public:
  // `graph` must carry state updates and have the inputs `lr` and the loss output `loss`.
  static absl::StatusOr<std::unique_ptr<TrainingSession>> create(std::unique_ptr<Graph> graph,
                                                                 SessionOptions options = {},
                                                                 std::string loss = "loss");

  // One step on `batch` (every graph input but `lr`, by name) at learning rate `lr`.
  absl::StatusOr<StepStats> step(const std::map<std::string, Tensor>& batch, float lr);

  // A parameter or other piece of state, by initializer name.
  absl::StatusOr<Tensor> state(std::string_view name) const { return session_->initializer(name); }
  absl::Status set_state(std::string_view name, const Tensor& value) {
    return session_->set_initializer(name, value);
  }
  const Graph& graph() const { return session_->graph(); }
  int64_t steps_done() const { return steps_done_; }

 private:
  TrainingSession(std::unique_ptr<InferenceSession> session, std::string loss)
      : session_(std::move(session)), loss_(std::move(loss)) {}

  std::unique_ptr<InferenceSession> session_;
  std::string loss_;
  int64_t steps_done_ = 0;
};

}  // namespace ampc::runtime
