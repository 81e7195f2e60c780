// Trains a compiled model through ampc's public C++ API, as an application that embeds ampc
// would:
//   embed_train MODEL.train.onnx [STEPS [LR]]
// MODEL.train.onnx comes from `ampc compile MODEL.onnx -o MODEL.train.onnx --optimizer sgd`.
// The program makes one batch of the types the training step takes (float inputs spread over
// [-1, 1), integer inputs such as class labels or token ids cycling through 0 and 1), trains
// STEPS steps on it (20 by default) at LR (by default the rate the model was compiled with) and
// prints each loss. It exits non-zero when the model does not load, a step fails, or the loss
// on the batch did not go down.
#include <ampc/ampc.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

// A batch for `inputs`: deterministic values that any classifier or language model accepts.
ampc::TensorMap make_batch(const std::vector<ampc::TensorInfo>& inputs) {
  ampc::TensorMap batch;
  for (const ampc::TensorInfo& input : inputs) {
    ampc::Tensor tensor(input.type);
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (ampc::is_float(input.type.dtype)) {
        tensor.set_element(i, static_cast<double>((i * 37) % 101) / 50.5 - 1.0);
      } else {
        tensor.set_element_i64(i, i % 2);
      }
    }
    batch.emplace(input.name, std::move(tensor));
  }
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s MODEL.train.onnx [STEPS [LR]]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  std::optional<float> lr;
  if (argc > 3) lr = std::strtof(argv[3], nullptr);
  if (steps < 2) {
    std::fprintf(stderr, "error: STEPS must be at least 2\n");
    return 2;
  }

  absl::StatusOr<std::unique_ptr<ampc::TrainingSession>> session =
      ampc::TrainingSession::load(argv[1]);
  if (!session.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  const ampc::TensorMap batch = make_batch((*session)->batch_inputs());
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    absl::StatusOr<ampc::StepResult> result = (*session)->step(batch, lr);
    if (!result.ok()) {
      std::fprintf(stderr, "error: step %d: %s\n", step + 1,
                   std::string(result.status().message()).c_str());
      return 1;
    }
    std::printf("step %lld loss %.6f\n", static_cast<long long>(result->step), result->loss);
    if (step == 0) first = result->loss;
    last = result->loss;
  }
  std::printf("ampc %s: loss %.6f -> %.6f\n", AMPC_VERSION_STRING, first, last);
  if (!(last < first)) {
    std::fprintf(stderr, "error: the loss did not go down\n");
    return 1;
  }
  return 0;
}
