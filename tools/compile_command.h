// `ampc compile INPUT -o OUTPUT [flags]`: import, the pass pipeline (with --optimizer, the
// training step; with --precision, mixed precision) and export. docs/cli.md describes the flags.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tools/command_util.h"

namespace CLI {
class App;
}

namespace ampc {

struct CompileFlags {
  bool external_data = false;  // weights to OUTPUT.data
  std::string input;
  std::string output;
  ShapeFlags shapes;
  std::vector<std::string> dump_after;
  std::string dump_dir;
  std::vector<std::string> disabled;
  bool time_passes = false;
  // The training flags given on the command line (`--lr`, ...), to refuse those that would do
  // nothing.
  std::set<std::string> training_flags_given;
  // Training compile (--optimizer set).
  std::string optimizer;
  std::string loss;  // empty: the output named loss, else the only float scalar output
  std::string label_input;
  std::string logits;
  float lr = 0.01f;
  float momentum = 0;
  float dampening = 0;
  bool nesterov = false;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  float clip_grad_norm = 0;
  int64_t accumulate = 1;
  std::string trainable;
  std::string freeze;
  std::string running_var = "unbiased";
  std::string recompute = "none";
  std::string loss_scale;  // dynamic | static:S | none; empty: dynamic for fp16, else none
  float scale_init = 65536.0f;
  float scale_growth = 2.0f;
  float scale_backoff = 0.5f;
  int64_t scale_growth_interval = 2000;
  float scale_min = 0x1p-126f;  // the smallest normal f32
  int64_t scale_hysteresis = 1;
  // Mixed precision.
  std::string precision;
  std::string opt_level;
  std::vector<std::string> allow;
  std::vector<std::string> deny;
  std::vector<std::string> fp32_nodes;
  std::string policy;
  bool allow_excess_precision = false;
};

CLI::App* add_compile_command(CLI::App& app, CompileFlags& flags);
// `command` is the parsed subcommand, which says which training flags were given.
int run_compile_command(const CLI::App& command, CompileFlags& flags);

}  // namespace ampc
