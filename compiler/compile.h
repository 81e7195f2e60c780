// The compile driver behind `ampc compile`: import -> canonicalize -> infer shapes -> export, and
// for a training compile then [append-loss] -> training-step -> autodiff -> batchnorm-state ->
// optimizer -> dce on the step.
#pragma once

#include <memory>
#include <string>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "compiler/pass.h"
#include "passes/passes.h"

namespace ampc {

// What a training compile adds: the loss, what trains, the optimizer and its learning rate.
struct TrainingOptions {
  std::optional<LossOptions> append_loss;  // unset: the model outputs its loss already
  AutodiffOptions autodiff;                // autodiff.loss names the loss output
  // Whether the user named the loss. When not, and no output has autodiff.loss's name, the loss
  // is the model's only float scalar output (an exporter's name for it: `cross_entropy_loss`,
  // `add_3`), with a warning saying so.
  bool loss_named = true;
  OptimizerOptions optimizer;
  // Gradient accumulation: > 1 sums the gradients of this many runs of the step (micro-batches)
  // in f32 and updates once, on the last, with their mean; the loss scale holds across them.
  int64_t accumulate = 1;
  RunningVariance running_variance = RunningVariance::kUnbiased;
  float lr = 0.01f;  // stored in the file as the default learning rate
  // Loss scaling (fp16). Unset: dynamic for an fp16 mixed-precision compile, none otherwise;
  // `loss_scale_off` forces none.
  std::optional<LossScaleOptions> loss_scale;
  bool loss_scale_off = false;
  // `--recompute cheap`: fused backward groups recompute element-wise forward activations from
  // values they read anyway instead of keeping them (passes/fuse_elementwise.h).
  bool recompute_cheap = false;
};

// Checks the ranges (lr > 0, 0 <= momentum, dampening < 1, betas in [0, 1), eps > 0, ...); the
// message names the flag.
absl::Status validate_training_options(const TrainingOptions& options);

// Mixed precision: autocast -> insert-casts -> eliminate-casts after shape inference (and the
// appended loss), before the training step is built.
struct MixedPrecisionOptions {
  PrecisionPolicy policy;
  bool allow_excess_precision = false;  // eliminate-casts may drop value-changing round trips
};

struct CompileOptions {
  ImportOptions import;
  PipelineOptions pipeline;
  std::optional<MixedPrecisionOptions> mixed_precision;  // unset: everything stays as imported
  std::optional<TrainingOptions> training;               // unset: an inference compile
};

// Keys of the training recipe in a training model's metadata (Graph::metadata).
inline constexpr std::string_view kMetadataLoss = "ampc.training.loss";
inline constexpr std::string_view kMetadataLr = "ampc.training.lr";
inline constexpr std::string_view kMetadataOptimizer = "ampc.training.optimizer";
// The memory of the same model compiled at O0, which `ampc compile --precision` records for
// `ampc inspect --precision` to compare with (tools/precision_report.h).
inline constexpr std::string_view kMetadataPrecisionBaseline = "ampc.precision.o0";

// Imports `input_path` and runs the compile pipeline on it. Warnings go to `diagnostics`.
absl::StatusOr<std::unique_ptr<Graph>> compile_file(const std::string& input_path,
                                                    const CompileOptions& options,
                                                    Diagnostics& diagnostics);

// Runs the compile pipeline on an imported graph.
absl::Status compile_graph(Graph& graph, const CompileOptions& options, Diagnostics& diagnostics);

// The passes a compile runs, in order (for --help and for checking pass names).
std::vector<std::string> compile_pass_names(bool training);

// Parses one `--shape NAME:8x3x32x32` value (a scalar is `NAME:`) into `shapes`.
absl::Status parse_shape_flag(const std::string& flag_value,
                              std::map<std::string, Shape, std::less<>>& shapes);
// Parses one `--dim NAME=SIZE` value (every graph-input dim named NAME) into `dims`.
absl::Status parse_dim_flag(const std::string& flag_value,
                            std::map<std::string, int64_t, std::less<>>& dims);

}  // namespace ampc
