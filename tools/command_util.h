// What the commands share: errors and warnings on stderr, --shape and --dim flags; and for those
// that train a model straight from its export (`ampc compare`, `ampc bench`), the training compile
// of a precision, optimizer and learning rate, and the device check that comes before any work.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/compile.h"
#include "runtime/backend.h"
#include "runtime/training_session.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace ampc {

// Prints `ampc: error: MESSAGE` on stderr; returns the exit status 1.
int report_error(const absl::Status& status);
// Prints each warning as `ampc: warning: ...` on stderr.
void print_warnings(const Diagnostics& diagnostics);
// The flags that make a model's dynamic input dims static: --shape NAME:DIMxDIM... (one input)
// and --dim NAME=SIZE (every input dim of that name).
struct ShapeFlags {
  std::vector<std::string> shapes;
  std::vector<std::string> dims;
};
// Adds --shape and --dim to `command`.
void add_shape_flags(CLI::App& command, ShapeFlags& flags);
// What they say, into the import options' `input_shapes` and `dims`; errors name the flag.
absl::Status parse_shape_flags(const ShapeFlags& flags,
                               std::map<std::string, Shape, std::less<>>& shapes,
                               std::map<std::string, int64_t, std::less<>>& dims);

// The training data of a command that compiles the model it trains (`--data`: arrays shaped
// [num_batches, ...batch], or one batch each), read once: the arrays (for
// runtime::BatchData::from_arrays) and their shapes, for the import (an export with dynamic dims
// trains on the data's).
struct TrainingData {
  std::map<std::string, Tensor> arrays;
  std::map<std::string, Shape, std::less<>> batch_shapes;  // ImportOptions::data_shapes
  std::map<std::string, Shape, std::less<>> array_shapes;  // ImportOptions::data_array_shapes
};
absl::StatusOr<TrainingData> read_training_data(const std::string& path);

// A training compile at `precision` (fp32, fp16 with dynamic loss scaling, bf16) with
// `optimizer` (sgd: momentum 0.9; adam; adamw) and `lr`, whose loss is the output named loss,
// else the model's only float scalar output; `flag` names the precision's flag in the policy's
// messages.
absl::StatusOr<CompileOptions> quick_training_options(std::string_view precision,
                                                      std::string_view optimizer, double lr,
                                                      std::string_view flag);

// A path a command reads or writes, with the flag that names it ("--log", "the model").
struct NamedPath {
  std::string flag;
  std::string path;
};
// An error naming both flags when an output is the same file as an input or as another output
// (one written over the other: the data, the model, a checkpoint lost); empty paths are skipped.
absl::Status check_distinct_paths(const std::vector<NamedPath>& outputs,
                                  const std::vector<NamedPath>& inputs);

// Whether the file `path`, which the flag `flag` names, can be written: what exists there is a
// regular file this process may write, else its folder exists and may be written into. The
// error names the flag and the path. Checked before any work, so that a typo costs none.
absl::Status check_output_file(std::string_view flag, const std::string& path);

// Whether a training step updates BatchNorm running statistics: a BatchNorm in training mode
// (or ampc.SyncBatchNormalization) outputs them beside Y. What --bn-running-var shapes and
// --local-batch-norm acts on.
bool updates_running_statistics(const Graph& step);

// CLI11 checks with messages that say what a flag takes: an integer >= `minimum`; a finite
// number > 0.
CLI::Validator at_least(int64_t minimum);
CLI::Validator positive_number();

// --lr must be a finite number > 0; the error names the flag.
absl::Status check_lr(double lr);

// The device `name` names, once a backend for it could be made; the error says why not.
absl::StatusOr<runtime::Device> usable_device(const std::string& name);

// With dynamic loss scaling, this many overflowing (skipped) steps in a row mean the loss or the
// gradients are not finite at any scale (NaN in the data, a diverged model): training stops. The
// scale has then been halved 50 times (from 65536 to below 6e-11), unless --scale-min stopped it.
inline constexpr int64_t kMaxSkippedStepsInARow = 50;

// Why training must stop after a step (empty: it goes on): a non-finite loss without loss
// scaling; with dynamic scaling, which skips such steps, an overflow with the scale already at
// its minimum (`min_scale`), or kMaxSkippedStepsInARow skipped steps in a row.
std::string divergence(const runtime::StepStats& stats, int64_t skipped_in_a_row,
                       std::optional<double> min_scale);

}  // namespace ampc
