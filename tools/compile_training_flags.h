// The training flags of `ampc compile` (the help group "Training (with --optimizer)"): their
// definitions, the TrainingOptions they make, and the checks that refuse a training flag that
// would do nothing.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/compile.h"
#include "compiler/ir.h"
#include "tools/compile_command.h"

namespace CLI {
class App;
}

namespace ampc {

// The help group of the training flags; every flag in it needs --optimizer.
inline constexpr std::string_view kTrainingGroup = "Training (with --optimizer)";

// The dynamic loss scaling's flags (--scale-*).
extern const std::vector<std::string_view> kScaleFlags;

void add_training_flags(CLI::App& compile, CompileFlags& flags);

// Fails naming the given flags among `names` that `reason` makes do nothing.
absl::Status refuse_flags_without_effect(const CompileFlags& flags,
                                         const std::vector<std::string_view>& names,
                                         std::string_view reason);

// The training options the flags ask for; unset without --optimizer (where a training flag is an
// error). Refuses flags that do nothing with the optimizer and loss scaling asked for.
absl::StatusOr<std::optional<TrainingOptions>> training_options(const CompileFlags& flags);

// The flags of a compile that succeeded which did nothing to the model: --bn-running-var without
// a BatchNorm that trains, --freeze matching no initializer.
absl::Status check_model_flags_had_effect(const CompileFlags& flags, const Graph& graph);

}  // namespace ampc
