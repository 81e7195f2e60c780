// `ampc ops`: the op registry beside the kernel registries, so a user can check before exporting
// a model whether every op it uses runs on the device they want, and in which element types.
#include "tools/ops_command.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "CLI/CLI.hpp"
#include "compiler/onnx_io.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"
#include "runtime/backend.h"
#include "runtime/kernel.h"

namespace ampc {
namespace {

struct OpRow {
  std::string domain;
  std::string name;
  std::vector<std::pair<int, int>> opsets;  // [since, until] of each definition, oldest first
  std::map<runtime::Device, std::vector<std::string>> dtypes;  // per device, in kAllDTypes order
};

std::vector<OpRow> collect(const std::vector<runtime::Device>& devices) {
  std::vector<OpRow> rows;
  for (const OpDef* def : OpRegistry::global().all()) {  // sorted by domain, name, opset
    if (rows.empty() || rows.back().domain != def->domain || rows.back().name != def->name) {
      rows.push_back(OpRow{def->domain, def->name, {}, {}});
    }
    rows.back().opsets.emplace_back(def->since_opset, def->until_opset);
  }
  const runtime::KernelRegistry& kernels = runtime::KernelRegistry::global();
  for (OpRow& row : rows) {
    for (runtime::Device device : devices) {
      const std::vector<DType> found = kernels.dtypes(row.domain, row.name, device);
      const std::set<DType> have(found.begin(), found.end());
      std::vector<std::string>& names = row.dtypes[device];
      for (DType dtype : kAllDTypes) {
        if (have.contains(dtype)) names.emplace_back(dtype_name(dtype));
      }
    }
  }
  return rows;
}

std::string trim_right(std::string text) {
  text.erase(text.find_last_not_of(' ') + 1);
  return text;
}

std::string opset_text(const std::vector<std::pair<int, int>>& opsets) {
  std::vector<std::string> parts;
  for (const auto& [since, until] : opsets) {
    parts.push_back(until >= kLatestOpset ? str_cat(since, "+") : str_cat(since, "-", until));
  }
  return str_join(parts, ", ");
}

// A device's element types, or "all" when it covers every one (the byte-moving ops), or "-".
std::string dtype_cell(const std::vector<std::string>& names) {
  if (names.empty()) return "-";
  if (names.size() == std::size(kAllDTypes)) return "all";
  return str_join(names, " ");
}

void print_text(const std::vector<OpRow>& rows, const std::vector<runtime::Device>& devices) {
  size_t name_width = 2;
  size_t opset_width = 6;
  std::map<runtime::Device, size_t> cell_width;
  for (const OpRow& row : rows) {
    const std::string qualified = row.domain.empty() ? row.name : row.domain + "." + row.name;
    name_width = std::max(name_width, qualified.size());
    opset_width = std::max(opset_width, opset_text(row.opsets).size());
    for (runtime::Device device : devices) {
      cell_width[device] = std::max({cell_width[device], dtype_cell(row.dtypes.at(device)).size(),
                                     runtime::device_name(device).size()});
    }
  }
  std::string header = fmt::format("{:<{}}  {:<{}}", "op", name_width, "opsets", opset_width);
  for (runtime::Device device : devices) {
    header += fmt::format("  {:<{}}", runtime::device_name(device), cell_width[device]);
  }
  std::cout << trim_right(header) << "\n";
  for (const OpRow& row : rows) {
    const std::string qualified = row.domain.empty() ? row.name : row.domain + "." + row.name;
    std::string line =
        fmt::format("{:<{}}  {:<{}}", qualified, name_width, opset_text(row.opsets), opset_width);
    for (runtime::Device device : devices) {
      line += fmt::format("  {:<{}}", dtype_cell(row.dtypes.at(device)), cell_width[device]);
    }
    std::cout << trim_right(line) << "\n";
  }
  std::cout << "\nrewritten at import into the ops above (no kernels of their own): "
            << str_join(onnx_io::ops_lowered_at_import(), ", ") << "\n";
}

void print_json(const std::vector<OpRow>& rows) {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const OpRow& row : rows) {
    nlohmann::ordered_json op;
    op["domain"] = row.domain;
    op["op"] = row.name;
    nlohmann::ordered_json opsets = nlohmann::ordered_json::array();
    for (const auto& [since, until] : row.opsets) {
      // A definition still current has no last opset: null, not kLatestOpset's sentinel.
      opsets.push_back({{"since", since},
                        {"until", until >= kLatestOpset ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(until)}});
    }
    op["opsets"] = opsets;
    nlohmann::ordered_json kernels = nlohmann::ordered_json::object();
    for (const auto& [device, names] : row.dtypes) {
      kernels[std::string(runtime::device_name(device))] = names;
    }
    op["kernels"] = kernels;
    ops.push_back(std::move(op));
  }
  nlohmann::ordered_json document;
  document["schema"] = "ampc.ops/1";
  document["ops"] = std::move(ops);
  document["lowered_at_import"] = onnx_io::ops_lowered_at_import();
  std::cout << document.dump(2) << "\n";
}

}  // namespace

CLI::App* add_ops_command(CLI::App& app, OpsFlags& flags) {
  CLI::App* ops = app.add_subcommand(
      "ops",
      "List every op ampc supports: its domain, the opsets it implements and the element types "
      "each device has a kernel for.");
  ops->add_option("--device", flags.device, "Show only this device's kernels: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  ops->add_option("--format", flags.format, "text (a table) or json (schema ampc.ops/1)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  return ops;
}

int run_ops_command(const OpsFlags& flags) {
  std::vector<runtime::Device> devices = {runtime::Device::kCpu, runtime::Device::kCuda};
  if (!flags.device.empty()) devices = {*runtime::parse_device(flags.device)};
  if (std::find(devices.begin(), devices.end(), runtime::Device::kCuda) != devices.end()) {
    if (const absl::Status loaded = runtime::load_kernels(runtime::Device::kCuda); !loaded.ok()) {
      std::cerr << "ampc: warning: no cuda kernels are listed: " << loaded.message() << "\n";
    }
  }
  const std::vector<OpRow> rows = collect(devices);
  if (flags.format == "json") {
    print_json(rows);
  } else {
    print_text(rows, devices);
  }
  return 0;
}

}  // namespace ampc
