// A training session on a compiled graph as `ampc train` loads it, and the compile options of
// the tests that train exported models.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "runtime/training_session.h"

namespace ampc::testing {

// A training compile with plain SGD at `lr` (no momentum, no mixed precision).
inline CompileOptions sgd_options(float lr) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kSgd;
  options.training->lr = lr;
  return options;
}

// The session on the training file of `compiled`: the graph written as ONNX and read back
// (`source` names it in errors).
inline absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session_from_file_bytes(
    const Graph& compiled, const std::string& source) {
  AMPC_ASSIGN_OR_RETURN(std::string bytes, export_onnx_bytes(compiled));
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> imported, import_onnx_bytes(bytes, source));
  return runtime::TrainingSession::create(std::move(imported));
}

// The batches `<prefix>.a.<input>`, `<prefix>.b.<input>`, ... of a fixture of PyTorch's figures,
// each keyed by input name.
inline std::vector<std::map<std::string, Tensor>> fixture_batches(
    const std::map<std::string, Tensor>& refs, const std::string& prefix) {
  std::vector<std::map<std::string, Tensor>> batches;
  for (char tag = 'a';; ++tag) {
    const std::string start = prefix + "." + tag + ".";
    std::map<std::string, Tensor> batch;
    for (const auto& [key, value] : refs) {
      if (key.starts_with(start)) batch[key.substr(start.size())] = value;
    }
    if (batch.empty()) return batches;
    batches.push_back(std::move(batch));
  }
}

// Steps `session` once per element of `losses` (PyTorch's f32 losses) at `lr`, on batch i mod
// the count, each loss within 1e-5 relative of PyTorch's (PyTorch's own f32 rounding).
inline void expect_losses_track(runtime::TrainingSession& session,
                                const std::vector<std::map<std::string, Tensor>>& batches,
                                const Tensor& losses, float lr) {
  ASSERT_FALSE(batches.empty());
  for (int64_t step = 0; step < losses.num_elements(); ++step) {
    absl::StatusOr<runtime::StepStats> stats =
        session.step(batches[static_cast<size_t>(step) % batches.size()], lr);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const double want = losses.element_as_double(step);
    EXPECT_LE(std::abs(stats->loss - want), 1e-5 * std::abs(want))
        << "step " << step << ": loss " << stats->loss << ", PyTorch " << want;
  }
}

}  // namespace ampc::testing
