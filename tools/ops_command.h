// `ampc ops [--device cpu|cuda] [--format text|json]`: every op ampc knows, with its domain, the
// opsets it implements and the element types each device has a kernel for. docs/cli.md
// describes the output.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace ampc {

struct OpsFlags {
  std::string device;  // empty: every device
  std::string format = "text";
};

CLI::App* add_ops_command(CLI::App& app, OpsFlags& flags);
int run_ops_command(const OpsFlags& flags);

}  // namespace ampc
