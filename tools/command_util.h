// What the commands share: errors and warnings on stderr, --shape flags; and for those that
// train a model straight from its export (`ampc compare`, `ampc bench`), the training compile of
// a precision, optimizer and learning rate, and the device check that comes before any work.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/compile.h"
#include "runtime/backend.h"

namespace ampc {

// Prints `ampc: error: MESSAGE` on stderr; returns the exit status 1.
int report_error(const absl::Status& status);
// Prints each warning as `ampc: warning: ...` on stderr.
void print_warnings(const Diagnostics& diagnostics);
// The input shapes that --shape NAME:DIMxDIM... flags give.
absl::StatusOr<std::map<std::string, Shape, std::less<>>> parse_shapes(
    const std::vector<std::string>& flags);

// A training compile at `precision` (fp32, fp16 with dynamic loss scaling, bf16) with
// `optimizer` (sgd: momentum 0.9; adam; adamw) and `lr`; `flag` names the precision's flag in
// the policy's messages.
absl::StatusOr<CompileOptions> quick_training_options(std::string_view precision,
                                                      std::string_view optimizer, double lr,
                                                      std::string_view flag);

// --lr must be a finite number > 0; the error names the flag.
absl::Status check_lr(double lr);

// The device `name` names, once a backend for it could be made; the error says why not.
absl::StatusOr<runtime::Device> usable_device(const std::string& name);

}  // namespace ampc
