// Run and train compiled models: ampc's public runtime API.
//
//   #include <ampc/session.h>       // CMake: find_package(ampc CONFIG), ampc::runtime
//                                   // pkg-config: ampc
//
//   absl::StatusOr<std::unique_ptr<ampc::TrainingSession>> session =
//       ampc::TrainingSession::load("mlp.train.onnx");          // from `ampc compile`
//   absl::StatusOr<ampc::StepResult> result = (*session)->step(batch);
//   absl::Status saved = (*session)->save_checkpoint("run/checkpoint.safetensors");
//
// Every call that depends on input returns an absl::Status or absl::StatusOr whose message names
// what was wrong (the input, the node, the file); nothing throws and nothing exits. Tensors are
// ampc::Tensor (ampc/tensor.h): a dtype, a static shape and little-endian bytes. Inputs are
// lent for the call (ampc::TensorViews: a TensorMap, a map of TensorView over the caller's
// memory, or a braced list): on the CPU the kernels read them where they are, with no copy. The
// sessions are those `ampc run` and `ampc train` use (docs/runtime-api.md); this header keeps their
// graphs, plans and backends out of sight, so it includes nothing but the public headers.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/options.h"
#include "ampc/status.h"
#include "ampc/tensor.h"

namespace ampc {

namespace runtime {
class InferenceSession;
class TrainingSession;
}  // namespace runtime

// Tensors by graph input or output name.
using TensorMap = std::map<std::string, Tensor>;

// What crossed between the host and the session's device since the session was loaded (the
// CPU's "device" is host memory: an input read in place is no copy), and how often the host
// waited for the device.
struct TransferCounts {
  int64_t copies_to_device = 0;
  int64_t bytes_to_device = 0;
  int64_t copies_to_host = 0;
  int64_t bytes_to_host = 0;
  int64_t synchronizations = 0;
};

// Runs an ONNX model (any model whose ops ampc supports; a compiled training model's eval graph).
class InferenceSession {
 public:
  // Imports the ONNX file, compiles it for `options.device`, plans its memory and resolves every
  // node's kernel: a model that loads runs.
  static absl::StatusOr<std::unique_ptr<InferenceSession>> load(const std::string& path,
                                                                SessionOptions options = {});
  ~InferenceSession();
  InferenceSession(const InferenceSession&) = delete;
  InferenceSession& operator=(const InferenceSession&) = delete;

  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;
  // Runs on `inputs` (every graph input, each of its type) and returns every output by name.
  // Random ops (RandomNormalLike, Bernoulli, ...) draw anew on each run, as in PyTorch's forward:
  // the k-th successful run of a session draws what the k-th run of another session does.
  absl::StatusOr<TensorMap> run(const TensorViews& inputs);
  TransferCounts transfers() const;

 private:
  explicit InferenceSession(std::unique_ptr<runtime::InferenceSession> impl);
  std::unique_ptr<runtime::InferenceSession> impl_;
};

// What one training step did.
struct StepResult {
  int64_t step = 0;  // steps completed, this one included
  double loss = 0;
  double grad_norm = 0;  // of the unscaled gradients, before clipping
  double lr = 0;
  // With dynamic loss scaling: the scale this step used, whether its gradients overflowed (then
  // nothing was updated but the scale) and the skipped steps so far. NaN / false / 0 without.
  double loss_scale = std::numeric_limits<double>::quiet_NaN();
  bool skipped = false;
  int64_t skipped_steps = 0;
};

// Trains a compiled training model (`ampc compile --optimizer ...`) step by step.
class TrainingSession {
 public:
  static absl::StatusOr<std::unique_ptr<TrainingSession>> load(const std::string& path,
                                                               SessionOptions options = {});
  ~TrainingSession();
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  // What a batch must hold: the training step's inputs (the model's inputs and labels).
  std::vector<TensorInfo> batch_inputs() const;
  // One step on `batch` at learning rate `lr` (>= 0), or the one the model was compiled with.
  absl::StatusOr<StepResult> step(const TensorViews& batch, std::optional<float> lr = std::nullopt);
  // One step of a model compiled with --accumulate K: exactly K micro-batches, one update.
  absl::StatusOr<StepResult> step(const std::vector<TensorMap>& micro_batches,
                                  std::optional<float> lr = std::nullopt);
  // K for a model compiled with --accumulate K; 1 otherwise.
  int64_t accumulation_steps() const;
  int64_t steps_done() const;
  // The learning rate the model was compiled with (`ampc compile --lr`), if it says.
  std::optional<double> default_lr() const;

  // The eval graph (BatchNorm on running statistics, no dropout) on `batch`, with the current
  // weights: every output by name. Its random ops draw anew after each step (and the same after
  // a resume: the draw depends on the steps done), never what a step draws.
  absl::StatusOr<TensorMap> evaluate(const TensorViews& batch);
  std::vector<TensorInfo> eval_inputs() const;
  std::vector<TensorInfo> eval_outputs() const;

  // The state: parameters, optimizer moments, the step counter, running statistics, the loss
  // scale. Names are the model's initializer names.
  std::vector<std::string> state_names() const;
  absl::StatusOr<Tensor> state(std::string_view name) const;
  // Replaces a piece of state; `value` (a Tensor, or a view of the caller's memory) must have
  // its type.
  absl::Status set_state(std::string_view name, const TensorView& value);
  // The state an exported model holds, by name and type: the parameters and running statistics
  // the eval graph reads (no optimizer moment, counter or loss scale), in the eval graph's order.
  std::vector<TensorInfo> weight_infos() const;

  // Every piece of state and the step count, to a safetensors file (written through a temporary
  // file and a rename), and back: a resumed run continues bit for bit.
  absl::Status save_checkpoint(const std::string& path) const;
  absl::Status load_checkpoint(const std::string& path);
  // The eval graph with the current weights as an inference model; without the loss output and
  // the inputs only it reads, unless `keep_loss`.
  absl::Status export_inference_model(const std::string& path, bool keep_loss = false) const;
  // Of the training step and the eval graph together (they share one device).
  TransferCounts transfers() const;

 private:
  explicit TrainingSession(std::unique_ptr<runtime::TrainingSession> impl);
  std::unique_ptr<runtime::TrainingSession> impl_;
};

}  // namespace ampc
