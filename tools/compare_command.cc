// `ampc compare MODEL --data DATA.npz --steps N`: compiles the model for training at each
// precision (fp32, fp16 with dynamic loss scaling, bf16), trains each from the same initial
// weights on the same batches, and prints one table: planned memory, step time, skipped steps,
// final loss scale, final loss and its gap to fp32 — what a user looks at before switching. Each
// trains the model as its compiled file would hold it, so its planned memory is the figure `ampc
// inspect --precision` gives that file.
#include "tools/compare_command.h"

#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "compiler/compile.h"
#include "compiler/strings.h"
#include "runtime/batch_data.h"
#include "runtime/plan.h"
#include "runtime/training_session.h"
#include "tools/command_util.h"
#include "tools/precision_report.h"

namespace ampc {
namespace {

struct Row {
  std::string precision;
  int64_t planned_bytes = 0;
  double step_ms = 0;
  int64_t skipped = 0;
  double loss_scale = NAN;
  double final_loss = NAN;
  std::vector<std::string> warnings;  // the compile's
};

std::string grouped(int64_t n) {
  std::string digits = str_cat(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

absl::StatusOr<Row> run_one(const CompareFlags& flags, const std::string& precision,
                            const TrainingData& data) {
  AMPC_ASSIGN_OR_RETURN(CompileOptions options, quick_training_options(precision, flags.optimizer,
                                                                       flags.lr, "--precisions"));
  options.import.data_shapes = data.batch_shapes;
  options.import.data_array_shapes = data.array_shapes;
  Diagnostics diagnostics;
  AMPC_ASSIGN_OR_RETURN(const std::unique_ptr<Graph> compiled,
                        compile_file(flags.model, options, diagnostics));
  // What trains is the model as `ampc compile` would write it, so the memory planned for it is
  // the figure `ampc inspect --precision` gives that file (on the CPU).
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, as_written(*compiled));
  Row row;
  row.precision = precision;
  row.warnings = diagnostics.warnings();
  AMPC_ASSIGN_OR_RETURN(const runtime::Device device, runtime::parse_device(flags.device));
  AMPC_ASSIGN_OR_RETURN(const auto arenas, planned_arenas(*graph->training_step(), device));
  for (int64_t bytes : arenas) row.planned_bytes += bytes;
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::TrainingSession> session,
                        runtime::TrainingSession::create(
                            std::move(graph), runtime::SessionOptions{.device = device}));
  AMPC_ASSIGN_OR_RETURN(
      const runtime::BatchData batches,
      runtime::BatchData::from_arrays(data.arrays, session->batch_inputs(), flags.data));
  // The first step is not timed: it pays for first-touch memory and thread start-up. The others
  // are queued without waiting for the device, as ampc train runs them, and read at the end.
  AMPC_ASSIGN_OR_RETURN(const runtime::StepStats first,
                        session->step(batches.batch(0), static_cast<float>(flags.lr)));
  std::vector<runtime::StepStats> stats = {first};
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 1; i < flags.steps; ++i) {
    AMPC_RETURN_IF_ERROR(session->queue_step(batches.batch(i), static_cast<float>(flags.lr)));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<runtime::StepStats> rest, session->take_stats());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.insert(stats.end(), rest.begin(), rest.end());
  // A diverged run is an error, as in ampc train: its figures would compare nothing.
  int64_t skipped_in_a_row = 0;
  const std::optional<double> min_scale = session->min_loss_scale();
  for (const runtime::StepStats& step : stats) {
    skipped_in_a_row = step.found_inf ? skipped_in_a_row + 1 : 0;
    if (const std::string why = divergence(step, skipped_in_a_row, min_scale); !why.empty()) {
      return absl::InvalidArgumentError(str_cat("training stopped at step ", step.step, ": ", why));
    }
  }
  // The final loss: the mean over the last tenth of the steps (at least one) that were not
  // skipped for an overflow, which smooths batch-to-batch noise.
  const int64_t tail = std::max<int64_t>(1, flags.steps / 10);
  double tail_sum = 0;
  int64_t tail_count = 0;
  for (int64_t i = flags.steps - tail; i < flags.steps; ++i) {
    if (stats[i].found_inf) continue;
    tail_sum += stats[i].loss;
    ++tail_count;
  }
  row.skipped = stats.back().skipped_steps;
  row.loss_scale = stats.back().loss_scale;  // NaN without loss scaling
  // The first step is not timed: with one step, there is no step time.
  row.step_ms = flags.steps > 1 ? 1e3 * seconds / static_cast<double>(flags.steps - 1) : NAN;
  row.final_loss = tail_count > 0 ? tail_sum / static_cast<double>(tail_count) : NAN;
  if (!std::isnan(row.loss_scale)) {
    AMPC_ASSIGN_OR_RETURN(Tensor scale, session->state("loss_scale"));
    row.loss_scale = scale.element_as_double(0);
  }
  return row;
}

}  // namespace

CLI::App* add_compare_command(CLI::App& app, CompareFlags& flags) {
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Train the model at fp32, fp16 (dynamic loss scaling) and bf16 from the same initial "
      "weights on the same batches, and print memory, step time, skipped steps, loss scale and "
      "final loss side by side.");
  compare
      ->add_option("model", flags.model,
                   "The ONNX model with its loss: the output `loss`, else its only float "
                   "scalar output")
      ->required();
  compare->add_option("--data", flags.data, "Training data, as for ampc train")->required();
  compare->add_option("--steps", flags.steps, "Steps per precision")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  compare->add_option("--optimizer", flags.optimizer, "sgd (momentum 0.9), adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  compare->add_option("--lr", flags.lr, "Learning rate")->capture_default_str();
  compare->add_option("--precisions", flags.precisions, "Which precisions, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  compare
      ->add_option("--device", flags.device,
                   "Where to train: cpu or cuda (memory planned and steps timed there)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  return compare;
}

int run_compare_command(const CompareFlags& flags) {
  if (const absl::Status lr = check_lr(flags.lr); !lr.ok()) {
    return report_error(lr);
  }
  // Every precision before any is trained: a bad one found after the first run wastes it.
  for (const std::string& precision : flags.precisions) {
    const absl::StatusOr<CompileOptions> options =
        quick_training_options(precision, flags.optimizer, flags.lr, "--precisions");
    if (!options.ok()) return report_error(options.status());
  }
  // The device first: without it nothing below can run.
  const absl::StatusOr<runtime::Device> device = usable_device(flags.device);
  if (!device.ok()) {
    return report_error(device.status());
  }
  const absl::StatusOr<TrainingData> data = read_training_data(flags.data);
  if (!data.ok()) {
    return report_error(data.status());
  }
  std::vector<Row> rows;
  std::set<std::string> warned;
  for (const std::string& precision : flags.precisions) {
    absl::StatusOr<Row> row = run_one(flags, precision, *data);
    if (!row.ok()) {
      std::cerr << "ampc: error: " << precision << ": " << row.status().message() << "\n";
      return 1;
    }
    for (const std::string& warning : row->warnings) {  // each once, not once per precision
      if (warned.insert(warning).second) std::cerr << "ampc: warning: " << warning << "\n";
    }
    std::cerr << "ampc: trained " << precision << "\n";
    rows.push_back(*std::move(row));
  }
  const Row* reference = nullptr;
  for (const Row& row : rows) {
    if (row.precision == "fp32") reference = &row;
  }
  std::cout << fmt::format("{:<10} {:>16} {:>12} {:>8} {:>11} {:>11} {:>12}\n", "precision",
                           "planned memory", "step time", "skipped", "loss scale", "final loss",
                           "gap vs fp32");
  for (const Row& row : rows) {
    const std::string gap =
        reference == nullptr || std::isnan(row.final_loss) || std::isnan(reference->final_loss)
            ? "-"
            : fmt::format("{:+.2f}%",
                          100 * (row.final_loss - reference->final_loss) / reference->final_loss);
    const std::string scale =
        std::isnan(row.loss_scale) ? "-" : fmt::format("{:g}", row.loss_scale);
    const std::string step = std::isnan(row.step_ms) ? "-" : fmt::format("{:.3f} ms", row.step_ms);
    const std::string loss =
        std::isnan(row.final_loss) ? "-" : fmt::format("{:.5f}", row.final_loss);
    std::cout << fmt::format("{:<10} {:>10} bytes {:>12} {:>8} {:>11} {:>11} {:>12}\n",
                             row.precision, grouped(row.planned_bytes), step, row.skipped, scale,
                             loss, gap);
  }
  return 0;
}

}  // namespace ampc
