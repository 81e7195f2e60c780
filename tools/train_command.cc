// `ampc train`: loads a training model, checks the data and every flag before writing anything,
// then runs the steps. Step i (0-based) uses batch i mod num_batches (batches iK .. iK + K - 1
// for a model that accumulates over K micro-batches) and the schedule's rate for step i, so a
// resumed run continues exactly where the checkpoint left off.
#include "tools/train_command.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "CLI/CLI.hpp"
#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "runtime/batch_data.h"
#include "runtime/comm/communicator.h"
#include "runtime/lr_schedule.h"
#include "runtime/training_session.h"
#include "tools/command_util.h"
#include "tools/data_parallel.h"
#include "tools/evaluation.h"
#include "tools/train_outputs.h"
#include "tools/train_progress.h"

namespace ampc {
namespace {

// The signal that asked training to stop (SIGINT, SIGTERM or SIGHUP), 0 while none has.
std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int signal) { stop_signal.store(signal); }

// An f32 figure as a JSON number (the shortest text that reads back as the same f32), or null for
// NaN and infinities (JSON has neither).
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{}", static_cast<float>(value)) : "null";
}

// The flags given that do nothing with the others: an error naming them and why.
absl::Status check_flags_have_effect(const TrainFlags& flags) {
  const auto given = [&](const char* name) { return flags.given.contains(name); };
  if (flags.resume && flags.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint DIR");
  }
  if (given("--checkpoint-every") && flags.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--checkpoint-every needs --checkpoint DIR");
  }
  if (flags.schedule == "constant") {
    for (const char* flag : {"--warmup-steps", "--min-lr"}) {
      if (given(flag)) {
        return absl::InvalidArgumentError(
            str_cat(flag, " does nothing with --schedule constant (the default): add --schedule ",
                    std::string_view(flag) == "--min-lr" ? "cosine" : "warmup or cosine"));
      }
    }
  }
  if (flags.schedule == "warmup" && given("--min-lr")) {
    return absl::InvalidArgumentError(
        "--min-lr does nothing with --schedule warmup (the rate stays at --lr after the warmup): "
        "use --schedule cosine");
  }
  return absl::OkStatus();
}

// --nproc's bound: ranks per online CPU. Each local rank is a whole process with its own copy of
// the model, the data and the backend's threads, so ranks beyond a few per core only take turns
// on the cores (slower than fewer ranks), and a typo (--nproc 100000) would start processes until
// the machine stalls. 4 per CPU keeps small experiments within it: 4 ranks on a 1-core machine.
constexpr int64_t kRanksPerCpu = 4;

absl::Status check_nproc(int64_t nproc) {
  const int64_t cpus = std::max<int64_t>(sysconf(_SC_NPROCESSORS_ONLN), 1);
  if (nproc <= kRanksPerCpu * cpus) return absl::OkStatus();
  return absl::InvalidArgumentError(
      str_cat("--nproc ", nproc, " is out of range: at most ", kRanksPerCpu * cpus,
              " ranks on this machine (", kRanksPerCpu, " per online CPU, ", cpus,
              " online; each rank is a process with its own copy of the model)"));
}

// What training loads and checks before its first step.
struct Prepared {
  std::unique_ptr<runtime::TrainingSession> session;
  runtime::LrSchedule schedule;
  std::optional<runtime::BatchData> data;
  std::optional<runtime::BatchData> eval_data;  // read now, evaluated after the last step
  std::string checkpoint;                       // DIR/checkpoint.safetensors, or empty
};

// Loads the model with `options` for a group of `ranks` and checks the flags, the data, a
// resumed checkpoint and every path training writes, so that a bad one fails before any step.
// `writer`: this process writes the outputs (rank 0, or the --nproc launcher checking once for
// every rank before they start); `announce`: it says that it resumed.
absl::StatusOr<Prepared> prepare(const TrainFlags& flags, const runtime::SessionOptions& options,
                                 int ranks, bool writer, bool announce) {
  Prepared prepared;
  AMPC_ASSIGN_OR_RETURN(prepared.session, runtime::TrainingSession::load(flags.model, options));
  runtime::TrainingSession& session = *prepared.session;
  if (flags.local_batch_norm && !updates_running_statistics(session.graph())) {
    return absl::InvalidArgumentError(str_cat("--local-batch-norm does nothing: ", flags.model,
                                              " has no BatchNormalization in its training step"));
  }
  runtime::LrSchedule& schedule = prepared.schedule;
  AMPC_ASSIGN_OR_RETURN(schedule.kind, runtime::parse_lr_schedule_kind(flags.schedule));
  if (flags.lr && !(*flags.lr > 0 && std::isfinite(*flags.lr))) {
    return absl::InvalidArgumentError(str_cat("--lr ", *flags.lr, " must be a finite number > 0"));
  }
  // The step takes its learning rate in f32: one that rounds to 0 there would change nothing.
  if (flags.lr && static_cast<float>(*flags.lr) == 0) {
    return absl::InvalidArgumentError(
        str_cat("--lr ", *flags.lr,
                " rounds to 0 in f32, the step's learning rate: it would "
                "change nothing"));
  }
  schedule.lr = flags.lr.value_or(session.default_lr().value_or(0));
  if (schedule.lr <= 0) {
    return absl::InvalidArgumentError(
        str_cat(flags.model, " stores no learning rate; give one with --lr"));
  }
  schedule.warmup_steps = flags.warmup_steps;
  schedule.total_steps = flags.steps;
  schedule.min_lr = flags.min_lr;
  AMPC_RETURN_IF_ERROR(schedule.validate());

  // With N ranks, each batch of --data is the global batch, of which rank r takes its shard.
  AMPC_ASSIGN_OR_RETURN(prepared.data,
                        ranks > 1 ? load_global_batches(flags.data, session.batch_inputs(), ranks)
                                  : runtime::BatchData::load(flags.data, session.batch_inputs()));
  if (!flags.eval_data.empty()) {
    AMPC_ASSIGN_OR_RETURN(prepared.eval_data,
                          runtime::BatchData::load(flags.eval_data, session.eval_inputs()));
  }
  const std::string& checkpoint = prepared.checkpoint =
      flags.checkpoint_dir.empty()
          ? ""
          : (std::filesystem::path(flags.checkpoint_dir) / kCheckpointFile).string();
  if (flags.resume) {
    if (!std::filesystem::exists(checkpoint)) {
      return absl::NotFoundError(
          str_cat("--resume: there is no checkpoint ", checkpoint, " to resume from"));
    }
    AMPC_RETURN_IF_ERROR(session.load_checkpoint(checkpoint));
    if (session.steps_done() > flags.steps) {
      return absl::InvalidArgumentError(
          str_cat("--resume: ", checkpoint, " is at step ", session.steps_done(), ", past --steps ",
                  flags.steps, " (--steps counts from the first step, not from the checkpoint)"));
    }
    if (announce) {
      std::cerr << "ampc: resumed from " << checkpoint << " after step " << session.steps_done()
                << "\n";
    }
  }

  const std::string export_data = flags.export_path.empty() ? "" : flags.export_path + ".data";
  AMPC_RETURN_IF_ERROR(check_distinct_paths(
      {{"--log", flags.log},
       {"--export", flags.export_path},
       {"--export's external data", export_data},
       {"--checkpoint's file", checkpoint}},
      {{"the model", flags.model}, {"--data", flags.data}, {"--eval-data", flags.eval_data}}));
  if (!flags.log.empty() && writer) AMPC_RETURN_IF_ERROR(check_output_file("--log", flags.log));
  AMPC_RETURN_IF_ERROR(
      check_outputs(session, flags.checkpoint_dir, flags.export_path, flags.external_data, writer));
  return prepared;
}

int train(const TrainFlags& flags) {
  if (absl::Status status = check_flags_have_effect(flags); !status.ok()) {
    return report_error(status);
  }
  absl::StatusOr<runtime::Device> device = runtime::parse_device(flags.device);
  if (!device.ok()) return report_error(device.status());
  // The communicator: NCCL between GPUs, Gloo between CPU processes.
  const bool on_gpu = *device == runtime::Device::kCuda;
  const std::string engine = flags.comm != "auto" ? flags.comm : on_gpu ? "nccl" : "gloo";
  if (engine == "nccl" && !on_gpu) {
    return report_error(absl::InvalidArgumentError(
        "--comm nccl communicates between GPUs: use it with --device cuda (the cpu device's "
        "ranks communicate through gloo)"));
  }
  if (flags.allow_tf32 && !on_gpu) {
    return report_error(absl::InvalidArgumentError(
        "--allow-tf32 has no effect on the cpu device (use it with --device cuda)"));
  }
  if (flags.cuda_graph == "on" && !on_gpu) {
    return report_error(absl::InvalidArgumentError(
        "--cuda-graph on has no effect on the cpu device (use it with --device cuda)"));
  }
  runtime::SessionOptions session_options;
  session_options.sync_batch_norm = !flags.local_batch_norm;
  session_options.shard_optimizer = flags.shard_optimizer;
  if (flags.nproc > 1) {
    if (absl::Status status = check_nproc(flags.nproc); !status.ok()) return report_error(status);
    // What every rank would check alike (the model, the data, the flags, the paths) is checked
    // once, here, before any rank starts, so that an error is printed once and costs no
    // processes. On the CPU, whatever --device says: the checks do not depend on it, and the
    // launcher keeps no GPU context while its ranks run.
    if (absl::StatusOr<Prepared> checked =
            prepare(flags, session_options, static_cast<int>(flags.nproc), /*writer=*/true,
                    /*announce=*/false);
        !checked.ok()) {
      return report_error(checked.status());
    }
    return run_local_ranks(static_cast<int>(flags.nproc));
  }
  // A rank of a data-parallel group (started by --nproc, torchrun or mpirun), or nullopt.
  absl::StatusOr<std::optional<RankGroup>> group = join_launched_group(flags.comm_timeout, engine);
  if (!group.ok()) return report_error(group.status());
  const int rank = *group ? (*group)->rank : 0;
  const int ranks = *group ? (*group)->size : 1;
  if (ranks == 1 && flags.given.contains("--comm-timeout")) {
    return report_error(absl::InvalidArgumentError(
        "--comm-timeout applies to data-parallel training only (--nproc N, torchrun or mpirun "
        "with more than one rank)"));
  }
  if (ranks == 1 && flags.comm != "auto") {
    return report_error(absl::InvalidArgumentError(
        str_cat("--comm ", flags.comm,
                " applies to data-parallel training only (--nproc N, torchrun or mpirun with "
                "more than one rank)")));
  }
  // Rank 0 alone writes the log, checkpoints and the exported model, and shows progress.
  const bool writer = rank == 0;
  for (const auto& [flag, given] : {std::pair{"--local-batch-norm", flags.local_batch_norm},
                                    std::pair{"--shard-optimizer", flags.shard_optimizer}}) {
    if (ranks == 1 && given) {
      return report_error(absl::InvalidArgumentError(
          str_cat(flag,
                  " applies to data-parallel training only (--nproc N, torchrun or mpirun with "
                  "more than one rank)")));
    }
  }
  if (*group) session_options.communicator = (*group)->communicator;
  session_options.check_numerics = flags.check_numerics;
  session_options.device = *device;
  // One GPU per rank on each machine: the LOCAL_RANK-th.
  if (*group && *device == runtime::Device::kCuda) {
    session_options.device_index = (*group)->local_rank;
  }
  session_options.allow_tf32 = flags.allow_tf32;
  // auto: one process's step on a GPU (a data-parallel step's collectives stay outside graphs
  // unless asked for).
  session_options.cuda_graph =
      flags.cuda_graph == "on" || (flags.cuda_graph == "auto" && on_gpu && !*group);
  absl::StatusOr<Prepared> prepared = prepare(flags, session_options, ranks, writer, writer);
  if (!prepared.ok()) return report_error(prepared.status());
  runtime::TrainingSession& session = *prepared->session;
  const runtime::LrSchedule& schedule = prepared->schedule;
  const std::optional<runtime::BatchData>& data = prepared->data;
  const std::optional<runtime::BatchData>& eval_data = prepared->eval_data;
  const std::string& checkpoint = prepared->checkpoint;
  // Who writes checkpoints: rank 0; with a sharded optimizer every rank takes part (the moments
  // are gathered from every rank's block) and rank 0 writes.
  const bool saves = writer || !session.sharded_state().empty();
  std::ofstream log;
  if (!flags.log.empty() && writer) {
    if (flags.resume) {
      if (absl::Status status = cut_log_to_step(flags.log, session.steps_done()); !status.ok()) {
        return report_error(status);
      }
    }
    log.open(flags.log, flags.resume ? std::ios::app : std::ios::trunc);
    if (!log) {
      return report_error(absl::InvalidArgumentError(
          str_cat("cannot write --log '", flags.log, "': ", std::strerror(errno))));
    }
  }
  const bool bar = flags.progress == "bar" || (flags.progress == "auto" && isatty(STDERR_FILENO));
  Progress progress(bar && flags.progress != "none" && writer, session.steps_done(), flags.steps);
  const bool show = flags.progress != "none" && writer;
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, on_stop_signal);

  std::optional<runtime::StepStats> last_stats;
  int64_t skipped_in_a_row = 0;
  const std::optional<double> min_scale = session.min_loss_scale();
  const int64_t k = session.accumulation_steps();
  // Step i (from 0) reads batches iK .. iK + K - 1 (mod N), computed mod N first so nothing
  // overflows.
  auto first_batch = [&](int64_t index) { return (index % data->num_batches()) * k; };
  // Step `index`'s batches, in words.
  auto batches_of = [&](int64_t index) {
    const int64_t first = first_batch(index);
    return k == 1 ? str_cat("batch ", first % data->num_batches())
                  : str_cat("batches ", first, " to ", first + k - 1, " (mod ", data->num_batches(),
                            ")");
  };
  // Reads the figures of the steps queued since the last call (one wait for the device), logs
  // and shows them, and stops at the first diverged step: the exit code, or nullopt to go on.
  auto take_stats = [&]() -> std::optional<int> {
    absl::StatusOr<std::vector<runtime::StepStats>> taken = session.take_stats();
    if (!taken.ok()) {
      if (show) progress.finish_line();
      return report_error(taken.status());
    }
    for (const runtime::StepStats& stats : *taken) {
      last_stats = stats;
      if (log.is_open()) {
        std::string line = fmt::format(R"({{"step": {}, "loss": {}, "grad_norm": {}, "lr": {})",
                                       stats.step, json_number(stats.loss),
                                       json_number(stats.grad_norm), json_number(stats.lr));
        if (!std::isnan(stats.loss_scale)) {
          line += fmt::format(R"(, "loss_scale": {}, "found_inf": {}, "skipped": {})",
                              json_number(stats.loss_scale), stats.found_inf, stats.skipped_steps);
        }
        log << line << "}\n";
        log.flush();
        if (!log) {
          if (show) progress.finish_line();
          return report_error(absl::UnavailableError(
              str_cat("writing --log '", flags.log, "' failed at step ", stats.step, ": ",
                      std::strerror(errno),
                      checkpoint.empty() || !std::filesystem::exists(checkpoint)
                          ? ""
                          : " (the last checkpoint is kept)")));
        }
      }
      if (show) progress.update(stats, taken->back().step);
      // A diverged step ends training before anything saves the weights it (or a step after
      // it, queued before its figures were read) made.
      skipped_in_a_row = stats.found_inf ? skipped_in_a_row + 1 : 0;
      if (const std::string why = divergence(stats, skipped_in_a_row, min_scale); !why.empty()) {
        if (show) progress.finish_line();
        return report_error(absl::InvalidArgumentError(str_cat(
            "step ", stats.step, " (", batches_of(stats.step - 1), "): ", why, "; training stops",
            checkpoint.empty() || !std::filesystem::exists(checkpoint)
                ? ""
                : str_cat("; ", checkpoint, " is kept as it was"))));
      }
    }
    return std::nullopt;
  };
  while (session.steps_done() < flags.steps && stop_signal.load() == 0) {
    const int64_t index = session.steps_done();
    const double lr = schedule.at(index);
    std::vector<std::map<std::string, Tensor>> micro_batches;
    for (int64_t i = 0; i < k; ++i) {
      std::map<std::string, Tensor> batch = data->batch(first_batch(index) + i);
      micro_batches.push_back(ranks > 1 ? shard(batch, rank, ranks) : std::move(batch));
    }
    // Queued without waiting for the device; the figures are read every --log-every steps.
    if (absl::Status queued = session.queue_step(micro_batches, static_cast<float>(lr));
        !queued.ok()) {
      if (std::optional<int> code = take_stats()) return *code;  // the steps before it first
      if (show) progress.finish_line();
      return report_error(absl::Status(
          queued.code(),
          str_cat("step ", index + 1, " (", batches_of(index), "): ", queued.message())));
    }
    // A graph asked for and not recorded would make the flag do nothing: an error, at once.
    if (flags.cuda_graph == "on" && !session.uses_graph()) {
      if (show) progress.finish_line();
      return report_error(absl::Status(
          session.graph_status().ok() ? absl::StatusCode::kInternal : session.graph_status().code(),
          str_cat("--cuda-graph on: the training step could not be recorded as a CUDA graph: ",
                  session.graph_status().message())));
    }
    const int64_t done = session.steps_done();
    const bool save = saves && !checkpoint.empty() && flags.checkpoint_every > 0 &&
                      done % flags.checkpoint_every == 0 && done < flags.steps;
    if (done % flags.log_every == 0 || save || done == flags.steps) {
      if (std::optional<int> code = take_stats()) return *code;
    }
    if (save) {
      if (absl::Status status = save_checkpoint(session, flags.checkpoint_dir); !status.ok()) {
        return report_error(status);
      }
    }
  }
  // Interrupted: the steps queued before the signal are logged and checked like the others.
  if (std::optional<int> code = take_stats()) return *code;
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, SIG_DFL);
  if (!writer) {
    if (saves && !checkpoint.empty()) {
      if (absl::Status status = save_checkpoint(session, flags.checkpoint_dir); !status.ok()) {
        return report_error(status);
      }
    }
    if (stop_signal.load() != 0) return 128 + stop_signal.load();
    // Sharded master weights are gathered from every rank for the export; rank 0 writes it.
    if (!flags.export_path.empty()) {
      if (absl::Status status = session.export_inference_model(flags.export_path); !status.ok()) {
        return report_error(status);
      }
    }
    // The other ranks evaluate their share of --eval-data; rank 0 reports.
    if (eval_data.has_value()) {
      if (absl::Status status = report_evaluation(session, *eval_data, flags.eval_data,
                                                  session_options.communicator.get());
          !status.ok()) {
        return report_error(status);
      }
    }
    return 0;
  }
  if (!checkpoint.empty()) {
    if (absl::Status status = save_checkpoint(session, flags.checkpoint_dir); !status.ok()) {
      return report_error(status);
    }
  }
  if (const int signal = stop_signal.load(); signal != 0) {
    if (show) progress.finish_line();
    std::cerr << "ampc: interrupted by SIG" << sigabbrev_np(signal) << " after step "
              << session.steps_done()
              << (checkpoint.empty() ? " (no --checkpoint: nothing saved)"
                                     : str_cat("; saved ", checkpoint, " (continue with --resume)"))
              << "\n";
    return 128 + signal;  // the shell's convention for a process ended by a signal
  }
  if (!checkpoint.empty()) std::cerr << "ampc: saved " << checkpoint << "\n";
  if (last_stats && !std::isnan(last_stats->loss_scale)) {
    std::cerr << "ampc: " << last_stats->skipped_steps
              << " steps skipped on overflow; loss scale now "
              << session.state("loss_scale")->element_as_double(0) << "\n";
  }
  // The trained model first: an evaluation that fails does not lose it.
  if (!flags.export_path.empty()) {
    ExportOptions export_options;
    if (flags.external_data) export_options.external_data = ExportOptions::ExternalData::kAlways;
    const auto loss = flags.export_loss ? runtime::TrainingSession::ExportedLoss::kKept
                                        : runtime::TrainingSession::ExportedLoss::kDropped;
    if (absl::Status status =
            session.export_inference_model(flags.export_path, export_options, loss);
        !status.ok()) {
      return report_error(status);
    }
    if (session.writes_checkpoints()) {  // rank 0 writes it
      std::cerr << "ampc: wrote the trained inference model " << flags.export_path << "\n";
    }
  }
  if (eval_data.has_value()) {
    if (absl::Status status = report_evaluation(session, *eval_data, flags.eval_data,
                                                session_options.communicator.get());
        !status.ok()) {
      return report_error(status);
    }
  }
  return 0;
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainFlags& flags) {
  CLI::App* train = app.add_subcommand(
      "train",
      "Train a compiled training model (ampc compile --optimizer ...) on the CPU or a GPU "
      "(--device). Step i uses "
      "batch i mod N of --data (batches iK .. iK+K-1 for a model compiled with --accumulate "
      "K).");
  train->add_option("model", flags.model, "The training model")->required();
  train
      ->add_option("--data", flags.data,
                   "Training data: an .npz with one array per model input, named after it and "
                   "shaped [N, ...input shape] (N batches)")
      ->required();
  train->add_option("--steps", flags.steps, "Train until this many steps are done")
      ->required()
      ->check(at_least(1));
  train->add_option("--lr", flags.lr,
                    "Peak learning rate (default: the one the model was compiled with)");
  train->add_option("--schedule", flags.schedule, "Learning-rate schedule")
      ->check(CLI::IsMember({"constant", "warmup", "cosine"}))
      ->capture_default_str();
  train->add_option("--warmup-steps", flags.warmup_steps,
                    "Linear warmup over this many steps (warmup, cosine)");
  train->add_option("--min-lr", flags.min_lr, "The rate cosine decays to (default 0)");
  train->add_option("--log", flags.log,
                    "Write one JSON object per step (step, loss, grad_norm, lr) to this file, "
                    "the records of --log-every steps at a time (appended to with --resume)");
  train
      ->add_option("--log-every", flags.log_every,
                   "Read the loss, grad_norm and loss scale from the device every N steps and at "
                   "the end (steps run on without waiting between): the --log records, the "
                   "progress line and the checks that stop a diverged run see them then")
      ->check(at_least(1))
      ->capture_default_str();
  train->add_option("--checkpoint", flags.checkpoint_dir,
                    "Save the training state to DIR/checkpoint.safetensors at the end, every "
                    "--checkpoint-every steps and on Ctrl-C");
  train
      ->add_option("--checkpoint-every", flags.checkpoint_every,
                   "Also save a checkpoint every K steps")
      ->check(at_least(1));
  train->add_flag("--resume", flags.resume,
                  "Continue from DIR/checkpoint.safetensors (--checkpoint DIR) up to --steps");
  train->add_option("--eval-data", flags.eval_data,
                    "After training, report the eval graph's mean scalar outputs (the loss) over "
                    "the batches of this .npz (same layout as --data)");
  CLI::Option* export_option =
      train->add_option("--export", flags.export_path,
                        "After training, write the trained model as an inference ONNX file");
  train
      ->add_flag("--external-data", flags.external_data,
                 "Write the --export model's weights to FILE.data beside it (ONNX external "
                 "data, as PyTorch does; automatic over 1.75 GiB of weights)")
      ->needs(export_option);
  train
      ->add_flag("--export-loss", flags.export_loss,
                 "Keep the loss output and the label inputs in the --export model, so that "
                 "`ampc run` evaluates the trained model's loss")
      ->needs(export_option);
  train->add_flag("--check-numerics", flags.check_numerics,
                  "Check every node's outputs for inf and NaN; stop at the first with the node, "
                  "its op, the output's dtype and its inputs' ranges");
  train
      ->add_option("--device", flags.device,
                   "Where to train: cpu (the reference backend) or cuda (the first GPU); "
                   "checkpoints and --export files are the same on both")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  train
      ->add_option("--cuda-graph", flags.cuda_graph,
                   "on: record the first step as a CUDA graph and replay it (one launch per step; "
                   "needs --device cuda, and a step that cannot be recorded is an error); auto "
                   "(the default): on with --device cuda in one process, where a step that "
                   "cannot be recorded runs as it is; off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  train->add_flag("--allow-tf32", flags.allow_tf32,
                  "Let f32 MatMul, Gemm and Conv use TF32 tensor cores on cuda (faster, 10-bit "
                  "mantissa products; off by default, as in PyTorch)");
  train
      ->add_option("--progress", flags.progress,
                   "auto: a bar on a terminal, plain lines otherwise; bar; lines; none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  train
      ->add_option(
          "--nproc", flags.nproc,
          "Train data-parallel on N ranks (processes) on this machine: each batch of "
          "--data holds N times the model's rows and rank r takes rows r*B/N .. "
          "(r+1)*B/N-1; the gradients are averaged over the ranks (docs/distributed.md); at "
          "most 4 per online CPU")
      ->check(at_least(1))
      ->capture_default_str();
  train
      ->add_option("--comm-timeout", flags.comm_timeout,
                   "Seconds a rank waits for the others (to join, or in a collective) before it "
                   "fails")
      ->check(at_least(1))
      ->capture_default_str();
  train
      ->add_option("--comm", flags.comm,
                   "With more than one rank, how the ranks communicate: nccl (between GPUs, "
                   "--device cuda), gloo (TCP between processes; with --device cuda the "
                   "collectives are staged through host memory), or auto: nccl on cuda, gloo "
                   "on cpu")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  train->add_flag("--shard-optimizer", flags.shard_optimizer,
                  "With more than one rank, ZeRO stage 1: each rank keeps and updates one block of "
                  "every optimizer moment (momentum, Adam's moments) and, at fp16/bf16, of the f32 "
                  "master weights the forward reads only in low precision (read through an f16 or "
                  "bf16 copy); 1/N of their memory. The training is the unsharded one's, and "
                  "checkpoints hold the whole state, so --resume may use another number of ranks");
  train->add_flag("--local-batch-norm", flags.local_batch_norm,
                  "With more than one rank, normalize BatchNorm by each rank's shard alone (as "
                  "PyTorch's DDP without SyncBatchNorm) instead of by the whole batch's "
                  "statistics, gathered from every rank (the default)");
  return train;
}

int run_train_command(const CLI::App& command, TrainFlags& flags) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() > 0) flags.given.insert(option->get_name());
  }
  return train(flags);
}

}  // namespace ampc
