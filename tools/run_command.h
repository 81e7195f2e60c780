// `ampc run MODEL.onnx --input NAME=FILE.npy ... [--device cpu|cuda]`: runs a model with inputs
// read from .npy / .npz files and writes each output as DIR/<name>.npy. docs/cli.md describes the
// flags.
#pragma once

#include <string>
#include <vector>

#include "tools/command_util.h"

namespace CLI {
class App;
}

namespace ampc {

struct RunFlags {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string inputs_npz;
  std::string output_dir;
  ShapeFlags shapes;
  std::string device = "cpu";
  bool allow_tf32 = false;
};

// Adds the `run` subcommand to `app`; its flags are parsed into `flags`.
CLI::App* add_run_command(CLI::App& app, RunFlags& flags);

// Runs the command: 0 on success, 1 (after printing `ampc: error: ...`) when the input is at fault.
int run_model_command(const RunFlags& flags);

}  // namespace ampc
