// `ampc train MODEL --data DATA.npz --steps N`: trains a compiled training model on the CPU,
// with a learning-rate schedule, a JSON-lines log, checkpoints and resume. docs/cli.md describes
// the flags.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

namespace CLI {
class App;
}

namespace ampc {

struct TrainFlags {
  std::string model;
  std::string data;
  int64_t steps = 0;
  std::optional<double> lr;  // unset: the model's (ampc compile --lr)
  std::string schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0;
  std::string log;
  int64_t log_every = 10;  // read the step figures from the device every N steps
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string eval_data;
  std::string export_path;
  bool external_data = false;  // --export writes its weights to a .data file beside it
  bool export_loss = false;    // --export keeps the loss output and the labels
  std::string progress = "auto";
  bool check_numerics = false;
  std::string device = "cpu";
  bool allow_tf32 = false;
  // on: record the step as a CUDA graph and replay it; auto: on for --device cuda in one process
  std::string cuda_graph = "auto";
  int64_t nproc = 1;              // > 1: run that many data-parallel ranks on this machine
  int64_t comm_timeout = 300;     // seconds a rank waits for the others
  std::string comm = "auto";      // the communicator: gloo, nccl, or auto (nccl on cuda)
  bool local_batch_norm = false;  // BatchNorm statistics of each rank's shard alone
  bool shard_optimizer = false;   // ZeRO-1: each rank keeps a block of the moments
  std::set<std::string> given;    // the flags given on the command line, by name
};

// Adds the `train` subcommand to `app`; its flags are parsed into `flags`.
CLI::App* add_train_command(CLI::App& app, TrainFlags& flags);

// Runs the command: 0 on success, 1 (after `ampc: error: ...`) when the input is at fault, 130
// when interrupted (after saving a checkpoint if --checkpoint was given).
int run_train_command(const CLI::App& command, TrainFlags& flags);

}  // namespace ampc
