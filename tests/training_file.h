// A training session on a compiled graph as `ampc train` loads it, and the compile options of
// the tests that train exported models.
#pragma once

#include <memory>
#include <string>

#include "compiler/compile.h"
#include "compiler/ir.h"
#include "compiler/onnx_io.h"
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

}  // namespace ampc::testing
