// The `ampc` command line: compile, inspect, run, train, compare, bench and ops.
//
// Every failure that depends on input prints `ampc: error: ...` and exits 1; bad flags exit 2.
#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "ampc/version.h"
#include "compiler/onnx_io.h"
#include "compiler/report.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"
#include "tools/bench_command.h"
#include "tools/command_util.h"
#include "tools/compare_command.h"
#include "tools/compile_command.h"
#include "tools/ops_command.h"
#include "tools/precision_report.h"
#include "tools/run_command.h"
#include "tools/train_command.h"

namespace ampc {
namespace {

constexpr int kExitUsage = 2;

struct InspectFlags {
  std::string input;
  std::string format = "text";
  bool precision = false;
  ShapeFlags shapes;
};

// inspect_json of a graph and, for a training model, its training step under "training_step":
// the same fields but "schema", and the state the step updates ("state_updates": each state
// initializer with the step output written over it after a run).
std::string inspect_json_with_step(const Graph& graph) {
  const Graph* step = graph.training_step();
  if (step == nullptr) return inspect_json(graph);
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(inspect_json(graph));
  nlohmann::ordered_json step_json = nlohmann::ordered_json::parse(inspect_json(*step));
  step_json.erase("schema");
  nlohmann::ordered_json updates = nlohmann::ordered_json::array();
  for (const Graph::StateUpdate& update : step->state_updates()) {
    updates.push_back({{"state", update.state}, {"update", update.update}});
  }
  step_json["state_updates"] = std::move(updates);
  json["training_step"] = std::move(step_json);
  return json.dump(2) + "\n";
}

int run_inspect(const InspectFlags& flags) {
  ImportOptions options;
  if (absl::Status status = parse_shape_flags(flags.shapes, options.input_shapes, options.dims);
      !status.ok()) {
    return report_error(status);
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(flags.input, options);
  if (!graph.ok()) return report_error(graph.status());
  if (flags.precision) {
    std::cout << (flags.format == "json"  ? precision_report_json(**graph)
                  : flags.format == "dot" ? precision_report_dot(**graph)
                                          : precision_report(**graph));
    return 0;
  }
  if (flags.format == "dot") {
    return report_error(absl::InvalidArgumentError("--format dot goes with --precision"));
  }
  std::cout << (flags.format == "json" ? inspect_json_with_step(**graph) : inspect_text(**graph));
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{
      "ampc: a mixed-precision compiler for ONNX training graphs.\n"
      "Run `ampc COMMAND --help` for the flags of one command."};
  app.set_version_flag("--version", "ampc " AMPC_VERSION_STRING);
  app.require_subcommand(1);
  // A usage error reads as every other error does (`ampc: error: ...`), then the way to the help.
  app.failure_message([](const CLI::App* /*app*/, const CLI::Error& e) {
    return str_cat("ampc: error: ", e.what(), "\nRun with --help for more information.\n");
  });

  CompileFlags compile_flags;
  CLI::App* compile = add_compile_command(app, compile_flags);

  InspectFlags inspect_flags;
  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "Show a model's graph in text IR with shapes and dtypes, and a summary: nodes "
      "per op, parameter count and bytes, counts per dtype.");
  inspect->add_option("input", inspect_flags.input, "The ONNX model to inspect")->required();
  inspect
      ->add_option("--format", inspect_flags.format,
                   "text (default), json (schema in docs/inspect-json.md), or dot (Graphviz; "
                   "with --precision)")
      ->check(CLI::IsMember({"text", "json", "dot"}));
  inspect->add_flag("--precision", inspect_flags.precision,
                    "Per node: operand dtypes, compute/accumulate/output dtype and the reason; "
                    "then casts and planned memory");
  add_shape_flags(*inspect, inspect_flags.shapes);

  RunFlags run_flags;
  CLI::App* run_command = add_run_command(app, run_flags);
  TrainFlags train_flags;
  CLI::App* train_command = add_train_command(app, train_flags);
  CompareFlags compare_flags;
  CLI::App* compare_command = add_compare_command(app, compare_flags);
  BenchFlags bench_flags;
  CLI::App* bench_command = add_bench_command(app, bench_flags);
  OpsFlags ops_flags;
  CLI::App* ops_command = add_ops_command(app, ops_flags);

  // CLI11 reads an unknown first word as a stray argument and says only that a subcommand is
  // required: name the word and the commands.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
      commands.push_back(command->get_name());
    }
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
      std::cerr << "ampc: error: unknown command '" << argv[1] << "'; the commands are "
                << str_join(commands, ", ") << " (ampc --help)\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (*compile) return run_compile_command(*compile, compile_flags);
  if (*inspect) return run_inspect(inspect_flags);
  if (*run_command) return run_model_command(run_flags);
  if (*train_command) return run_train_command(*train_command, train_flags);
  if (*compare_command) return run_compare_command(compare_flags);
  if (*bench_command) return run_bench_command(bench_flags);
  if (*ops_command) return run_ops_command(ops_flags);
  return kExitUsage;
}

}  // namespace
}  // namespace ampc

int main(int argc, char** argv) { return ampc::run(argc, argv); }
