// `ampc bench MODEL --data DATA.npz`: compiles the model for training, warms up, then times its
// steps and reports step time, throughput, matrix FLOPs, TFLOP/s and MFU, planned and measured
// memory, compile time and fused nodes. docs/cli.md describes it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ampc {

struct BenchFlags {
  std::string model;
  std::string data;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string optimizer = "adamw";
  std::string loss;  // the scalar graph output to differentiate; empty: as ampc compile
  double lr = 1e-3;
  int64_t steps = 50;
  int64_t warmup = 5;
  bool no_fuse = false;
  std::vector<std::string> disabled;  // --disable-pass NAME, as ampc compile
  std::string recompute = "none";     // cheap: --recompute cheap
  std::optional<double> peak_tflops;  // unset: the device's figure where ampc knows it
  std::string format = "text";
  std::string comm = "none";        // gloo or nccl: train through a data-parallel group of one rank
  std::string cuda_graph = "auto";  // as ampc train's
};

// Adds the `bench` subcommand to `app`; its flags are parsed into `flags`.
CLI::App* add_bench_command(CLI::App& app, BenchFlags& flags);

// Runs the command: 0 on success, 1 (after `ampc: error: ...`) when the input is at fault.
int run_bench_command(const BenchFlags& flags);

}  // namespace ampc
