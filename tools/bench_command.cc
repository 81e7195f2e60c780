// `ampc bench MODEL --data DATA.npz [--device cpu|cuda] [--precision P] [--steps N]`: compiles
// the model for training (timed), builds its plan (the planned memory), runs --warmup steps, then
// times --steps steps one by one, each to completion (step() waits for the device), and prints
// the median step time, the throughput (samples/s, or tokens/s when the first batch input is a
// matrix of token ids), the matrix FLOPs of one step (compiler/flops.h), the TFLOP/s they make
// at the median and the MFU against the device's peak, the planned and the measured memory
// (CPU: the growth of the resident set's high-water mark from before the session to the end;
// CUDA: device memory in use after the steps less before the session), and the fused nodes.
#include "tools/bench_command.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "CLI/CLI.hpp"
#include "compiler/compile.h"
#include "compiler/flops.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"
#include "runtime/batch_data.h"
#include "runtime/comm/launch.h"
#include "runtime/cuda_library.h"
#include "runtime/plan.h"
#include "runtime/training_session.h"
#include "tools/command_util.h"

namespace ampc {
namespace {

using Clock = std::chrono::steady_clock;

struct Figures {
  double compile_seconds = 0;
  int64_t step_nodes = 0;
  int64_t fused_nodes = 0;
  std::vector<double> step_ms;  // the timed steps, sorted
  int64_t samples = 0;          // per step
  int64_t tokens = 0;           // per step, 0 unless the input is token ids
  int64_t flops = 0;
  std::optional<double> peak_tflops;
  int64_t planned_bytes = 0;
  std::optional<int64_t> measured_bytes;
  double final_loss = NAN;
  bool cuda_graph = false;  // the steps replayed a recorded CUDA graph
};

// The process's resident-set high-water mark in bytes, after resetting it to the current
// resident set when `reset` (Linux's /proc/self/clear_refs "5"); nullopt when unreadable.
std::optional<int64_t> resident_high_water(bool reset) {
  if (reset) std::ofstream("/proc/self/clear_refs") << "5";
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return std::nullopt;
}

absl::StatusOr<int64_t> device_memory(runtime::Device device) {
  if (device != runtime::Device::kCuda) {
    return absl::UnimplementedError("no device memory reading on this device");
  }
  AMPC_ASSIGN_OR_RETURN(const runtime::CudaLibrary* cuda, runtime::cuda_library());
  return cuda->device_memory_in_use(0);
}

absl::StatusOr<CompileOptions> compile_options(const BenchFlags& flags) {
  AMPC_ASSIGN_OR_RETURN(
      CompileOptions options,
      quick_training_options(flags.precision, flags.optimizer, flags.lr, "--precision"));
  if (flags.no_fuse) {
    options.pipeline.disabled.insert("fuse-elementwise");
    options.pipeline.disabled.insert("fuse-attention");
  }
  options.pipeline.disabled.insert(flags.disabled.begin(), flags.disabled.end());
  if (!flags.loss.empty()) {
    options.training->autodiff.loss = flags.loss;
    options.training->loss_named = true;
  }
  options.training->recompute_cheap = flags.recompute == "cheap";
  if (options.training->recompute_cheap && options.pipeline.disabled.contains("fuse-elementwise")) {
    return absl::InvalidArgumentError(
        str_cat("--recompute cheap does nothing with ",
                flags.no_fuse ? "--no-fuse" : "--disable-pass fuse-elementwise",
                " (the fused kernels are what recompute)"));
  }
  return options;
}

absl::StatusOr<Figures> measure(const BenchFlags& flags, runtime::Device device) {
  Figures figures;
  AMPC_ASSIGN_OR_RETURN(CompileOptions options, compile_options(flags));
  AMPC_ASSIGN_OR_RETURN(TrainingData data, read_training_data(flags.data));
  options.import.data_shapes = std::move(data.batch_shapes);
  options.import.data_array_shapes = std::move(data.array_shapes);
  Diagnostics diagnostics;
  const Clock::time_point compile_start = Clock::now();
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph,
                        compile_file(flags.model, options, diagnostics));
  figures.compile_seconds = std::chrono::duration<double>(Clock::now() - compile_start).count();
  print_warnings(diagnostics);
  const Graph& step = *graph->training_step();
  figures.step_nodes = step.num_nodes();
  for (const auto& node : step.nodes()) {
    const std::string& op = node->op_type();
    figures.fused_nodes += node->domain() == kAmpcDomain &&
                           (op == "FusedElementwise" || op == "Attention" || op == "AttentionGrad");
  }
  figures.flops = matrix_flops(step);
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Plan> plan, runtime::Plan::build(step, device));
  for (int a = 0; a < runtime::kNumArenas; ++a) {
    figures.planned_bytes += plan->arena_bytes(static_cast<runtime::ArenaKind>(a));
  }
  plan.reset();
  const std::optional<int64_t> rss_before = resident_high_water(/*reset=*/true);
  const absl::StatusOr<int64_t> device_before = device_memory(device);
  // --comm: a data-parallel group of one rank through that communicator.
  std::shared_ptr<runtime::comm::Communicator> group;
  if (flags.comm != "none") {
    AMPC_ASSIGN_OR_RETURN(group, runtime::comm::connect_alone(flags.comm, std::chrono::minutes(1)));
  }
  AMPC_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::TrainingSession> session,
      runtime::TrainingSession::create(
          std::move(graph),
          // One rank's BatchNorm statistics are its own either way (and synchronized BatchNorm
          // is built for the CPU only).
          runtime::SessionOptions{
              .device = device,
              .cuda_graph = flags.cuda_graph == "on" ||
                            (flags.cuda_graph == "auto" && device == runtime::Device::kCuda &&
                             group == nullptr),
              .communicator = group,
              .sync_batch_norm = false}));
  AMPC_ASSIGN_OR_RETURN(
      const runtime::BatchData batches,
      runtime::BatchData::from_arrays(std::move(data.arrays), session->batch_inputs(), flags.data));
  const runtime::TensorInfo first = session->batch_inputs().front();
  figures.samples = first.type.shape.empty() ? 1 : first.type.shape[0];
  if (!is_float(first.type.dtype) && first.type.shape.size() >= 2) {
    figures.tokens = first.type.num_elements();
  }
  const float lr = static_cast<float>(flags.lr);
  for (int64_t i = 0; i < flags.warmup; ++i) {
    AMPC_ASSIGN_OR_RETURN(const runtime::StepStats stats, session->step(batches.batch(i), lr));
    (void)stats;
  }

  for (int64_t i = 0; i < flags.steps; ++i) {
    const Clock::time_point start = Clock::now();
    AMPC_ASSIGN_OR_RETURN(const runtime::StepStats stats,
                          session->step(batches.batch(flags.warmup + i), lr));
    figures.step_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    if (!std::isfinite(stats.loss)) {
      return absl::InvalidArgumentError(
          str_cat("step ", flags.warmup + i + 1, " gave a non-finite loss (", stats.loss,
                  "); the timings of a diverged run mean nothing (lower --lr)"));
    }
    figures.final_loss = stats.loss;
  }
  figures.cuda_graph = session->uses_graph();
  if (flags.cuda_graph == "on" && !figures.cuda_graph) {
    return absl::FailedPreconditionError(
        str_cat("--cuda-graph on: the training step could not be recorded as a CUDA graph: ",
                session->graph_status().message()));
  }
  std::sort(figures.step_ms.begin(), figures.step_ms.end());
  if (device == runtime::Device::kCpu) {
    if (const std::optional<int64_t> rss_after = resident_high_water(/*reset=*/false);
        rss_before && rss_after) {
      figures.measured_bytes = *rss_after - *rss_before;
    }
  } else if (device_before.ok()) {
    if (const absl::StatusOr<int64_t> after = device_memory(device); after.ok()) {
      figures.measured_bytes = *after - *device_before;
    }
  }
  figures.peak_tflops = flags.peak_tflops;
  if (!figures.peak_tflops && device == runtime::Device::kCuda) {
    AMPC_ASSIGN_OR_RETURN(const DType low, parse_precision(flags.precision));
    AMPC_ASSIGN_OR_RETURN(const runtime::CudaLibrary* cuda, runtime::cuda_library());
    figures.peak_tflops = cuda->peak_matrix_tflops(0, low);
  }
  return figures;
}

double median(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

void print(const BenchFlags& flags, const Figures& f) {
  const double step_ms = median(f.step_ms);
  const double tflops = static_cast<double>(f.flops) / (step_ms * 1e-3) / 1e12;
  if (flags.format == "json") {
    nlohmann::ordered_json json;
    json["model"] = flags.model;
    json["device"] = flags.device;
    json["comm"] = flags.comm;
    json["cuda_graph"] = f.cuda_graph;
    json["precision"] = flags.precision;
    json["optimizer"] = flags.optimizer;
    json["fusion"] = !flags.no_fuse;
    json["disabled_passes"] = flags.disabled;
    json["recompute"] = flags.recompute;
    json["steps"] = flags.steps;
    json["warmup"] = flags.warmup;
    json["compile_seconds"] = f.compile_seconds;
    json["step_nodes"] = f.step_nodes;
    json["fused_nodes"] = f.fused_nodes;
    json["step_ms"] = {{"median", step_ms}, {"min", f.step_ms.front()}, {"max", f.step_ms.back()}};
    json["samples_per_second"] = f.samples / (step_ms * 1e-3);
    json["tokens_per_second"] =
        f.tokens > 0 ? nlohmann::ordered_json(f.tokens / (step_ms * 1e-3)) : nullptr;
    json["matrix_flops_per_step"] = f.flops;
    json["tflops_per_second"] = tflops;
    json["peak_tflops"] = f.peak_tflops ? nlohmann::ordered_json(*f.peak_tflops) : nullptr;
    json["mfu"] = f.peak_tflops ? nlohmann::ordered_json(tflops / *f.peak_tflops) : nullptr;
    json["planned_bytes"] = f.planned_bytes;
    json["measured_bytes"] = f.measured_bytes ? nlohmann::ordered_json(*f.measured_bytes) : nullptr;
    json["final_loss"] = f.final_loss;
    std::cout << json.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format(
      "ampc bench {} on {}, {}, {}{}{}{}: {} steps after {} warm-up\n", flags.model, flags.device,
      flags.precision, flags.optimizer,
      str_cat(f.cuda_graph ? ", CUDA graph" : "", flags.no_fuse ? ", no fusion" : ""),
      flags.disabled.empty() ? "" : str_cat(", without ", str_join(flags.disabled, ", ")),
      str_cat(flags.recompute == "cheap" ? ", recompute cheap" : "",
              flags.comm == "none" ? "" : str_cat(", through ", flags.comm, " (one rank)")),
      flags.steps, flags.warmup);
  std::cout << fmt::format("  compile          {:.3f} s (training step {} nodes, {} fused)\n",
                           f.compile_seconds, f.step_nodes, f.fused_nodes);
  std::cout << fmt::format("  step time        {:.3f} ms median (min {:.3f}, max {:.3f})\n",
                           step_ms, f.step_ms.front(), f.step_ms.back());
  if (f.tokens > 0) {
    std::cout << fmt::format("  throughput       {:.0f} tokens/s ({} tokens a step)\n",
                             f.tokens / (step_ms * 1e-3), f.tokens);
  } else {
    std::cout << fmt::format("  throughput       {:.1f} samples/s ({} a step)\n",
                             f.samples / (step_ms * 1e-3), f.samples);
  }
  std::cout << fmt::format(
      "  matrix FLOPs     {:.4g} GFLOP a step (MatMul, Gemm, Conv, gradients)\n", f.flops / 1e9);
  std::cout << fmt::format("  achieved         {:.4g} TFLOP/s\n", tflops);
  if (f.peak_tflops) {
    std::cout << fmt::format("  MFU              {:.1f}% of {:.1f} TFLOP/s\n",
                             100 * tflops / *f.peak_tflops, *f.peak_tflops);
  } else {
    std::cout << "  MFU              - (no peak figure for this device; give --peak-tflops)\n";
  }
  std::cout << fmt::format("  memory planned   {}\n", mib(f.planned_bytes));
  std::cout << fmt::format("  memory measured  {}\n",
                           f.measured_bytes ? mib(*f.measured_bytes) : std::string("-"));
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchFlags& flags) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Compile the model for training, warm up, then time its steps: step time, throughput, "
      "matrix FLOPs, TFLOP/s and MFU, planned and measured memory, compile time, fused nodes.");
  bench
      ->add_option("model", flags.model,
                   "The ONNX model, its loss a scalar graph output (see --loss)")
      ->required();
  bench->add_option("--data", flags.data, "Training data, as for ampc train")->required();
  bench->add_option("--device", flags.device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  bench->add_option("--precision", flags.precision, "fp32, fp16 (dynamic loss scaling) or bf16")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->capture_default_str();
  bench->add_option("--optimizer", flags.optimizer, "sgd (momentum 0.9), adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  bench->add_option("--lr", flags.lr, "Learning rate")->capture_default_str();
  bench->add_option("--loss", flags.loss,
                    "The loss: the name of the scalar graph output to train (default: the output "
                    "named loss, else the model's only float scalar output)");
  bench->add_option("--steps", flags.steps, "Timed steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  bench->add_option("--warmup", flags.warmup, "Steps run before the timed ones")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  bench->add_flag("--no-fuse", flags.no_fuse,
                  "Compile without fusion (neither fuse-elementwise nor fuse-attention)");
  bench->add_option("--disable-pass", flags.disabled,
                    "Skip this compile pass, as ampc compile --disable-pass. Repeatable.");
  bench
      ->add_option("--recompute", flags.recompute,
                   "cheap: fused backward kernels recompute element-wise activations (as ampc "
                   "compile --recompute cheap)")
      ->check(CLI::IsMember({"none", "cheap"}))
      ->capture_default_str();
  bench
      ->add_option("--peak-tflops", flags.peak_tflops,
                   "The device's peak for MFU (default: ampc's figure for the GPU; none on the "
                   "CPU)")
      ->check(positive_number());
  bench
      ->add_option("--comm", flags.comm,
                   "gloo or nccl: train as a data-parallel group of one rank through this "
                   "communicator (the step's gradients go through its all-reduce), to measure "
                   "what it costs beside none; nccl needs --device cuda")
      ->check(CLI::IsMember({"none", "gloo", "nccl"}))
      ->capture_default_str();
  bench
      ->add_option("--cuda-graph", flags.cuda_graph,
                   "on: replay the step as a CUDA graph (--device cuda; an error if it cannot be "
                   "recorded); auto (the default): on with --device cuda and no --comm, where a "
                   "step that cannot be recorded runs as it is; off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  bench->add_option("--format", flags.format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  return bench;
}

int run_bench_command(const BenchFlags& flags) {
  if (const absl::Status lr = check_lr(flags.lr); !lr.ok()) {
    return report_error(lr);
  }
  if (flags.cuda_graph == "on" && flags.device != "cuda") {
    std::cerr << "ampc: error: --cuda-graph on has no effect on the cpu device (use it with "
                 "--device cuda)\n";
    return 1;
  }
  if (flags.comm == "nccl" && flags.device != "cuda") {
    std::cerr << "ampc: error: --comm nccl communicates between GPUs: use it with --device cuda\n";
    return 1;
  }
  const absl::StatusOr<runtime::Device> device = usable_device(flags.device);
  if (!device.ok()) {
    return report_error(device.status());
  }
  absl::StatusOr<Figures> figures = measure(flags, *device);
  if (!figures.ok()) {
    return report_error(figures.status());
  }
  print(flags, *figures);
  return std::cout.good() ? 0 : 1;
}

}  // namespace ampc
