// `ampc compare MODEL --data DATA.npz --steps N`: the same training at fp32, fp16 and bf16, side
// by side. docs/cli.md describes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ampc {

struct CompareFlags {
  std::string model;
  std::string data;
  int64_t steps = 0;
  std::string optimizer = "adamw";
  double lr = 1e-3;
  std::vector<std::string> precisions = {"fp32", "fp16", "bf16"};
  std::string device = "cpu";
};

// Adds the `compare` subcommand to `app`; its flags are parsed into `flags`.
CLI::App* add_compare_command(CLI::App& app, CompareFlags& flags);

// Runs the command: 0 on success, 1 (after `ampc: error: ...`) when the input is at fault.
int run_compare_command(const CompareFlags& flags);

}  // namespace ampc
