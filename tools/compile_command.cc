// `ampc compile`: import, the pass pipeline (with --optimizer, the training step; with
// --precision, mixed precision) and export, with the flags that choose each.
#include "tools/compile_command.h"

#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <system_error>

#include "CLI/CLI.hpp"
#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/precision_policy.h"
#include "compiler/stopwatch.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "tools/command_util.h"
#include "tools/compile_training_flags.h"
#include "tools/precision_report.h"

namespace ampc {
namespace {

// Where --dump-after sends text IR: files DIR/NN-PASS.txt, or stderr when no --dump-dir. A file
// that cannot be written stops the compile.
std::function<absl::Status(std::string_view, const Graph&)> make_dumper(
    const std::string& dump_dir) {
  auto counter = std::make_shared<int>(0);
  return [dump_dir, counter](std::string_view pass_name, const Graph& graph) -> absl::Status {
    const std::string text = print_graph(graph, PrintOptions{.max_constant_elements = 16});
    if (dump_dir.empty()) {
      std::cerr << "// ----- IR after " << pass_name << " -----\n" << text;
      return absl::OkStatus();
    }
    const std::string file =
        fmt::format("{}/{:02}-{}.txt", dump_dir, ++*counter, std::string(pass_name));
    std::ofstream out(file);
    out << text;
    out.flush();
    if (!out) return absl::UnavailableError(str_cat("--dump-dir: cannot write '", file, "'"));
    return absl::OkStatus();
  };
}

// "`why`, so A, B do nothing: drop them, `instead`": the policy entries `given` that `why` makes
// do nothing, or OK when there are none.
absl::Status refuse_doing_nothing(std::string_view why, const std::vector<std::string>& given,
                                  std::string_view instead) {
  if (given.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(str_cat(why, ", so ", str_join(given, ", "),
                                            given.size() == 1 ? " does" : " do", " nothing: drop ",
                                            given.size() == 1 ? "it" : "them", ", ", instead));
}

// fp32 turns mixed precision off: an error naming what would shape it, which does nothing then.
absl::Status check_fp32_policy_is_bare(const PrecisionPolicy& policy, bool allow_excess_precision) {
  if (policy.low != DType::kF32) return absl::OkStatus();
  std::vector<std::string> given;
  if (!policy.level_source.empty()) {
    given.push_back(policy.level_source == "--opt-level"
                        ? str_cat("--opt-level ", opt_level_name(policy.level))
                        : str_cat(policy.level_source, ": opt_level"));
  }
  for (const auto& [op, entry] : policy.ops) given.push_back(entry.source);
  for (const PrecisionPolicy::NodePin& pin : policy.fp32_nodes) given.push_back(pin.source);
  if (allow_excess_precision) given.push_back("--allow-excess-precision");
  return refuse_doing_nothing(
      str_cat("precision fp32 (", policy.low_source, ") turns mixed precision off"), given,
      "or choose fp16 or bf16");
}

// The levels but O1 decide every node by the level (O0: fp32; O2 and O3: low but for their own
// exceptions): an op list entry does nothing there, and at O0 neither does a node pin. An error
// naming each, as at fp32.
absl::Status check_level_policy_is_bare(const PrecisionPolicy& policy) {
  if (policy.low == DType::kF32 || policy.level == OptLevel::kO1) return absl::OkStatus();
  std::vector<std::string> given;
  for (const auto& [op, entry] : policy.ops) given.push_back(entry.source);
  if (policy.level == OptLevel::kO0) {
    for (const PrecisionPolicy::NodePin& pin : policy.fp32_nodes) given.push_back(pin.source);
  }
  const std::string level =
      policy.level_source.empty() || policy.level_source == "--opt-level"
          ? str_cat("--opt-level ", opt_level_name(policy.level))
          : str_cat(policy.level_source, ": opt_level ", opt_level_name(policy.level));
  return refuse_doing_nothing(
      str_cat(level, " decides every node by its level"), given,
      "or use opt level O1 (the default), where the op lists and node pins apply");
}

// The mixed-precision options the flags ask for; unset when they ask for none.
absl::StatusOr<std::optional<MixedPrecisionOptions>> mixed_precision_options(
    const CompileFlags& flags) {
  MixedPrecisionOptions options;
  PrecisionPolicy& policy = options.policy;
  if (!flags.policy.empty()) AMPC_RETURN_IF_ERROR(read_policy_file(flags.policy, policy));
  // A flag that says otherwise than the file is a conflict; one that says the same is not.
  if (!flags.precision.empty()) {
    AMPC_ASSIGN_OR_RETURN(const DType low, parse_precision(flags.precision));
    if (!policy.low_source.empty() && low != policy.low) {
      return absl::InvalidArgumentError(
          str_cat("--precision ", flags.precision, " conflicts with ", policy.low_source,
                  ": precision ", precision_name(policy.low), "; say it in one place"));
    }
    policy.low = low;
    policy.low_source = "--precision";
  }
  if (!flags.opt_level.empty()) {
    AMPC_ASSIGN_OR_RETURN(const OptLevel level, parse_opt_level(flags.opt_level));
    if (!policy.level_source.empty() && level != policy.level) {
      return absl::InvalidArgumentError(
          str_cat("--opt-level ", flags.opt_level, " conflicts with ", policy.level_source,
                  ": opt_level ", opt_level_name(policy.level), "; say it in one place"));
    }
    policy.level = level;
    policy.level_source = "--opt-level";
  }
  for (const std::string& op : flags.allow) {
    AMPC_RETURN_IF_ERROR(add_op_entry(policy, op, AutocastCategory::kAllow, "--allow " + op));
  }
  for (const std::string& op : flags.deny) {
    AMPC_RETURN_IF_ERROR(add_op_entry(policy, op, AutocastCategory::kDeny, "--deny " + op));
  }
  for (const std::string& regex : flags.fp32_nodes) {
    policy.fp32_nodes.push_back({regex, "--fp32-nodes"});
  }
  options.allow_excess_precision = flags.allow_excess_precision;
  const bool other_flags = !flags.opt_level.empty() || !flags.allow.empty() ||
                           !flags.deny.empty() || !flags.fp32_nodes.empty() ||
                           flags.allow_excess_precision || !flags.policy.empty();
  if (policy.low_source.empty()) {
    if (other_flags) {
      return absl::InvalidArgumentError(
          "--opt-level, --allow, --deny, --fp32-nodes, --policy and --allow-excess-precision "
          "shape mixed precision: add --precision fp16|bf16 (or \"precision\" in the policy "
          "file)");
    }
    return std::nullopt;
  }
  AMPC_RETURN_IF_ERROR(check_fp32_policy_is_bare(policy, flags.allow_excess_precision));
  AMPC_RETURN_IF_ERROR(check_level_policy_is_bare(policy));
  return options;
}

// The memory of the model compiled again with every node f32 (O0), for `ampc inspect
// --precision` to compare with (kMetadataPrecisionBaseline), measured on that compile as its
// file would hold it, as inspect measures the file it reads (precision_baseline). Best effort: the
// mixed-precision compile is what counts, so a failure here only means no comparison (nullopt).
std::optional<std::string> o0_baseline(const std::string& input, CompileOptions options) {
  options.mixed_precision.reset();
  options.pipeline.dump_after.clear();
  options.pipeline.dump = nullptr;
  options.pipeline.timings = nullptr;
  // The same passes are verified on the compile that counts.
  options.pipeline.verify_each = false;
  Diagnostics ignored;  // the compile that counts reports the model's warnings
  absl::StatusOr<std::unique_ptr<Graph>> o0 = compile_file(input, options, ignored);
  if (!o0.ok()) return std::nullopt;
  return precision_baseline(**o0);
}

// Runs o0_baseline on a thread of its own, beside the compile that counts (it needs only the
// input file and the options), or when it is asked for where no thread can be started.
std::future<std::optional<std::string>> start_o0_baseline(const std::string& input,
                                                          const CompileOptions& options) {
  try {
    return std::async(std::launch::async, o0_baseline, input, options);
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, o0_baseline, input, options);
  }
}

// --dump-dir needs --dump-after to write anything, and must name a folder that exists or can be
// made: both checked before the compile starts.
absl::Status check_dump_dir(const CompileFlags& flags) {
  if (flags.dump_dir.empty()) return absl::OkStatus();
  if (flags.dump_after.empty()) {
    return absl::InvalidArgumentError(
        "--dump-dir does nothing without --dump-after PASS|all (which passes to dump)");
  }
  std::error_code error;
  std::filesystem::create_directories(flags.dump_dir, error);
  if (!error && !std::filesystem::is_directory(flags.dump_dir, error)) {
    error = std::make_error_code(std::errc::not_a_directory);
  }
  if (error) {
    return absl::InvalidArgumentError(
        str_cat("--dump-dir '", flags.dump_dir, "' cannot be used: ", error.message()));
  }
  return absl::OkStatus();
}

// --time-passes: one line per step of the compile, on stderr.
void print_timings(const std::vector<PassTiming>& timings) {
  std::string out = fmt::format("{:<28} {:>9} {:>9} {:>8} {:>10}\n", "ampc: compile step",
                                "seconds", "verify s", "nodes", "step nodes");
  double total = 0;
  for (const PassTiming& t : timings) {
    out +=
        fmt::format("{:<28} {:>9.3f} {:>9.3f} {:>8} {:>10}\n", t.name, t.seconds, t.verify_seconds,
                    t.nodes, t.step_nodes < 0 ? std::string("-") : std::to_string(t.step_nodes));
    total += t.seconds + t.verify_seconds;
  }
  out += fmt::format("{:<28} {:>9.3f}\n", "total", total);
  std::cerr << out;
}

// Where the compile writes, checked before any pass runs or any dump is written: the output and
// its external data can be written, and the dump folder is neither.
absl::Status check_output_paths(const CompileFlags& flags) {
  const std::string external_data = flags.external_data ? flags.output + ".data" : "";
  AMPC_RETURN_IF_ERROR(check_distinct_paths(
      {{"-o", flags.output}, {"-o's external data", external_data}, {"--dump-dir", flags.dump_dir}},
      {}));
  AMPC_RETURN_IF_ERROR(check_output_file("-o", flags.output));
  if (flags.external_data)
    AMPC_RETURN_IF_ERROR(check_output_file("-o's external data", external_data));
  return absl::OkStatus();
}

int run_compile(const CompileFlags& flags) {
  if (absl::Status status = check_output_paths(flags); !status.ok()) return report_error(status);
  if (absl::Status dump_dir = check_dump_dir(flags); !dump_dir.ok()) return report_error(dump_dir);
  CompileOptions options;
  absl::StatusOr<std::optional<TrainingOptions>> training = training_options(flags);
  if (!training.ok()) return report_error(training.status());
  options.training = *std::move(training);
  absl::StatusOr<std::optional<MixedPrecisionOptions>> mixed = mixed_precision_options(flags);
  if (!mixed.ok()) return report_error(mixed.status());
  options.mixed_precision = *std::move(mixed);
  if (options.training && flags.loss_scale.empty() &&
      !(options.mixed_precision && options.mixed_precision->policy.low == DType::kF16 &&
        options.mixed_precision->policy.level != OptLevel::kO0)) {
    // Without --loss-scale, scaling comes only with fp16 mixed precision.
    if (absl::Status status = refuse_flags_without_effect(
            flags, kScaleFlags,
            "here: this compile has no loss scaling (fp16 mixed precision has it by default; "
            "ask for it in other precisions with --loss-scale dynamic)");
        !status.ok()) {
      return report_error(status);
    }
  }
  if (absl::Status status =
          parse_shape_flags(flags.shapes, options.import.input_shapes, options.import.dims);
      !status.ok()) {
    return report_error(status);
  }
  options.pipeline.disabled.insert(flags.disabled.begin(), flags.disabled.end());
  options.pipeline.dump_after.insert(flags.dump_after.begin(), flags.dump_after.end());
  options.pipeline.dump = make_dumper(flags.dump_dir);
  std::vector<PassTiming> timings;
  if (flags.time_passes) options.pipeline.timings = &timings;

  std::future<std::optional<std::string>> baseline;
  if (options.mixed_precision) baseline = start_o0_baseline(flags.input, options);
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph = compile_file(flags.input, options, diagnostics);
  print_warnings(diagnostics);
  if (!graph.ok()) return report_error(graph.status());
  // As `ampc run` and the sessions refuse it: a model with no outputs computes nothing.
  if ((*graph)->outputs().empty()) {
    return report_error(absl::InvalidArgumentError(
        str_cat(flags.input, ": graph '", (*graph)->name(), "' has no outputs")));
  }
  if (absl::Status status = check_model_flags_had_effect(flags, **graph); !status.ok()) {
    return report_error(status);
  }
  const int nodes = (*graph)->num_nodes();
  const int step_nodes = (*graph)->training_step() ? (*graph)->training_step()->num_nodes() : -1;
  if (baseline.valid()) {
    const Stopwatch wait;  // the O0 compile's time beyond this one's
    if (std::optional<std::string> figures = baseline.get()) {
      (*graph)->set_metadata(std::string(kMetadataPrecisionBaseline), *std::move(figures));
    }
    timings.push_back({"o0-baseline", wait.seconds(), 0, nodes, step_nodes});
  }
  ExportOptions export_options;
  if (flags.external_data) export_options.external_data = ExportOptions::ExternalData::kAlways;
  const Stopwatch export_time;
  if (absl::Status status = export_onnx_file(**graph, flags.output, export_options); !status.ok()) {
    return report_error(status);
  }
  timings.push_back({"export", export_time.seconds(), 0, nodes, step_nodes});
  if (flags.time_passes) print_timings(timings);
  if (const Graph* step = (*graph)->training_step()) {
    std::cerr << "ampc: wrote " << flags.output << " (eval graph " << (*graph)->num_nodes()
              << " nodes, training step " << step->num_nodes() << " nodes, "
              << step->state_updates().size() << " state tensors)\n";
  } else {
    std::cerr << "ampc: wrote " << flags.output << " (" << (*graph)->num_nodes() << " nodes)\n";
  }
  return 0;
}

void add_precision_flags(CLI::App& compile, CompileFlags& flags) {
  const std::string group = "Mixed precision (docs/precision-policy.md)";
  compile
      .add_option("--precision", flags.precision,
                  "Low-precision dtype: fp16, bf16, or fp32 (off). Without it the model keeps "
                  "its dtypes")
      ->group(group);
  compile
      .add_option("--opt-level", flags.opt_level, "O0 (all fp32), O1 (the lists, default), O2, O3")
      ->group(group);
  compile.add_option("--allow", flags.allow, "Put op type OP on the allow list. Repeatable.")
      ->group(group);
  compile.add_option("--deny", flags.deny, "Put op type OP on the deny list (fp32). Repeatable.")
      ->group(group);
  compile
      .add_option("--fp32-nodes", flags.fp32_nodes,
                  "Pin the nodes whose name matches REGEX to fp32. Repeatable.")
      ->group(group);
  compile
      .add_option("--policy", flags.policy,
                  "A JSON policy file: precision, opt_level, allow, clear, follow, deny, "
                  "fp32_nodes")
      ->group(group);
  compile
      .add_flag("--allow-excess-precision", flags.allow_excess_precision,
                "Let eliminate-casts drop casts that round (f32 -> f16 -> f32 read as f32)")
      ->group(group);
}

}  // namespace

CLI::App* add_compile_command(CLI::App& app, CompileFlags& flags) {
  CLI::App* compile =
      app.add_subcommand("compile",
                         "Import an ONNX model, canonicalize it, infer static shapes "
                         "and write the result as ONNX. With --optimizer, also build the "
                         "training step (backward pass and optimizer update) beside the "
                         "eval graph (docs/training-graph.md).");
  compile->add_option("input", flags.input, "The ONNX model to compile")->required();
  compile->add_option("-o,--output", flags.output, "Where to write the compiled model")->required();
  compile->add_flag("--external-data", flags.external_data,
                    "Write the weights to OUTPUT.data beside the model (ONNX external data, as "
                    "PyTorch does; automatic over 1.75 GiB of weights)");
  add_shape_flags(*compile, flags.shapes);
  compile->add_option("--dump-after", flags.dump_after,
                      "Print the text IR after this pass (or `all`). Repeatable. Passes: " +
                          str_join(compile_pass_names(/*training=*/true), ", "));
  compile->add_option("--dump-dir", flags.dump_dir,
                      "Write --dump-after output to DIR/NN-PASS.txt instead of stderr");
  compile->add_option("--disable-pass", flags.disabled, "Skip this pass. Repeatable.");
  compile->add_flag("--time-passes", flags.time_passes,
                    "Print each step's time (import, every pass and the verifier after it, the "
                    "wait for the O0 baseline of --precision, which compiles on a second thread, "
                    "export) and the graph's size after it, on stderr");
  add_training_flags(*compile, flags);
  add_precision_flags(*compile, flags);
  return compile;
}

int run_compile_command(const CLI::App& command, CompileFlags& flags) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_group() == kTrainingGroup && option->count() > 0 &&
        option->get_name() != "--optimizer") {
      flags.training_flags_given.insert(option->get_name());
    }
  }
  return run_compile(flags);
}

}  // namespace ampc
