// `ampc run`: binds a model's inputs from .npy files (or the arrays of an .npz, by input name),
// runs it with the InferenceSession on the chosen device and writes every output as an .npy file.
#include "tools/run_command.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "compiler/compile.h"
#include "compiler/strings.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tools/command_util.h"

namespace ampc {
namespace {

std::string describe(const std::vector<runtime::TensorInfo>& infos) {
  std::vector<std::string> parts;
  for (const runtime::TensorInfo& info : infos) {
    parts.push_back(str_cat(info.name, ": ", type_to_string(info.type)));
  }
  return infos.empty() ? "none" : str_join(parts, ", ");
}

// An output's file name: every character but letters, digits, '.', '-' and '_' becomes '_' (so a
// name cannot leave the output folder or need quoting), and a name of only dots gets a leading '_'.
std::string output_file_stem(std::string_view name) {
  std::string stem;
  for (char c : name) {
    const bool plain =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    stem += plain ? c : '_';
  }
  if (stem.find_first_not_of('.') == std::string::npos) stem = "_" + stem;
  return stem;
}

// One array to bind: where it came from (for messages) and its value.
struct GivenInput {
  std::string source;
  Tensor value;
};

// The arrays --input and --inputs name, read before the model is loaded (their shapes fix the
// model's dynamic dims). --input wins over an .npz array of the same name. numpy saves bf16 as raw
// 2-byte void, which is read as bf16 here: the check against the model's inputs names any other
// type.
struct GivenInputs {
  std::map<std::string, GivenInput> arrays;
  std::set<std::string> from_flags;  // the names --input gives
};

absl::StatusOr<GivenInputs> read_given_inputs(const RunFlags& flags) {
  GivenInputs given;
  std::map<std::string, std::string> files;  // from --input
  for (const std::string& flag : flags.inputs) {
    const size_t eq = flag.find('=');  // CLI11 checked that there is one
    const std::string name = flag.substr(0, eq);
    if (!files.emplace(name, flag.substr(eq + 1)).second) {
      return absl::InvalidArgumentError(str_cat("--input '", name, "' is given twice"));
    }
    given.from_flags.insert(name);
  }
  if (!flags.inputs_npz.empty()) {
    AMPC_ASSIGN_OR_RETURN(auto arrays,
                          runtime::read_npz(flags.inputs_npz, {.void2_as_bf16 = true}));
    for (auto& [name, value] : arrays) {
      if (files.contains(name)) continue;
      given.arrays[name] = {str_cat(flags.inputs_npz, " (array '", name, "')"), std::move(value)};
    }
  }
  for (const auto& [name, file] : files) {
    AMPC_ASSIGN_OR_RETURN(Tensor value, runtime::read_npy(file, {.void2_as_bf16 = true}));
    given.arrays[name] = {file, std::move(value)};
  }
  return given;
}

// The given arrays checked against the model's inputs: --input names an input, every input is
// given, with its type; .npz arrays that are not inputs are skipped with a warning.
absl::StatusOr<std::map<std::string, GivenInput>> check_given_inputs(
    const RunFlags& flags, GivenInputs given, const std::vector<runtime::TensorInfo>& expected) {
  std::map<std::string, const TensorType*> types;
  for (const runtime::TensorInfo& info : expected) types[info.name] = &info.type;
  for (const std::string& name : given.from_flags) {
    if (!types.contains(name)) {
      return absl::InvalidArgumentError(str_cat("--input names '", name,
                                                "', which is not an input of ", flags.model,
                                                "; its inputs are ", describe(expected)));
    }
  }
  for (auto it = given.arrays.begin(); it != given.arrays.end();) {
    if (types.contains(it->first)) {
      ++it;
      continue;
    }
    std::cerr << "ampc: warning: " << flags.inputs_npz << ": array '" << it->first
              << "' is not an input of the model; ignored\n";
    it = given.arrays.erase(it);
  }
  std::map<std::string, GivenInput>& arrays = given.arrays;
  std::vector<std::string> missing;
  for (const runtime::TensorInfo& info : expected) {
    if (!arrays.contains(info.name)) {
      missing.push_back(str_cat("'", info.name, "' (", type_to_string(info.type), ")"));
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        str_cat("missing input ", str_join(missing, ", "), "; the inputs of ", flags.model, " are ",
                describe(expected), "; give each with --input NAME=FILE.npy or --inputs FILE.npz"));
  }
  for (const auto& [name, input] : arrays) {
    const TensorType& type = *types.at(name);
    if (input.value.type() != type) {
      return absl::InvalidArgumentError(str_cat("input '", name, "' from ", input.source,
                                                ": expected ", type_to_string(type), ", given ",
                                                type_to_string(input.value.type())));
    }
  }
  return std::move(arrays);
}

// Writes each output as DIR/<stem>.npy (a stem taken twice gets _2, _3, ...) and prints one line
// per output. On failure removes what it wrote, and the folders it made.
absl::Status write_outputs(const RunFlags& flags, const std::vector<runtime::TensorInfo>& outputs,
                           const std::map<std::string, Tensor>& values) {
  const std::filesystem::path dir(flags.output_dir);
  std::vector<std::filesystem::path> made;  // the folders made for --output-dir, deepest first
  if (!flags.output_dir.empty()) {
    std::error_code ec;
    for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec);
         p = p.parent_path()) {
      made.push_back(p);
      if (p == p.parent_path()) break;
    }
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          str_cat("cannot create --output-dir '", flags.output_dir, "': ", ec.message()));
    }
  }
  std::set<std::string> used;
  std::vector<std::string> written;
  std::vector<std::string> lines;
  for (const runtime::TensorInfo& info : outputs) {
    const std::string stem = output_file_stem(info.name);
    std::string file = stem + ".npy";
    for (int n = 2; !used.insert(file).second; ++n) file = str_cat(stem, "_", n, ".npy");
    const std::string path = (dir / file).string();
    const Tensor& value = values.at(info.name);
    if (absl::Status status = runtime::write_npy(path, value); !status.ok()) {
      std::error_code ignored;
      for (const std::string& done : written) std::filesystem::remove(done, ignored);
      // Only while empty: a folder something else wrote into meanwhile stays.
      for (const std::filesystem::path& folder : made) std::filesystem::remove(folder, ignored);
      return status;
    }
    written.push_back(path);
    lines.push_back(str_cat(info.name, " ", type_to_string(value.type()), " ", path));
  }
  for (const std::string& line : lines) std::cout << line << "\n";
  return absl::OkStatus();
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, RunFlags& flags) {
  CLI::App* run = app.add_subcommand(
      "run",
      "Run a model on the CPU (or a GPU) with inputs from .npy/.npz files; write each output "
      "as DIR/NAME.npy and print its name, type and path.");
  run->add_option("model", flags.model, "The ONNX model to run")->required();
  run->add_option("--input", flags.inputs,
                  "Bind input NAME to the array in FILE.npy, as NAME=FILE.npy. Repeatable.")
      ->check(
          [](const std::string& value) -> std::string {
            const size_t eq = value.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
              return "expected NAME=FILE.npy, got '" + value + "'";
            }
            return "";
          },
          "NAME=FILE.npy");
  run->add_option("--inputs", flags.inputs_npz,
                  "Bind inputs from the arrays of FILE.npz with the same names (--input wins)");
  run->add_option("--output-dir", flags.output_dir,
                  "Where to write the outputs (default: the current directory; created if "
                  "missing)");
  add_shape_flags(*run, flags.shapes);
  run->add_option("--device", flags.device,
                  "Where to run: cpu (the reference backend) or cuda (the first GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  run->add_flag("--allow-tf32", flags.allow_tf32,
                "Let f32 MatMul, Gemm and Conv use TF32 tensor cores on cuda (faster, 10-bit "
                "mantissa products; off by default, as in PyTorch)");
  return run;
}

int run_model_command(const RunFlags& flags) {
  runtime::SessionOptions options;
  absl::StatusOr<runtime::Device> device = runtime::parse_device(flags.device);
  if (!device.ok()) return report_error(device.status());
  if (flags.allow_tf32 && *device != runtime::Device::kCuda) {
    return report_error(absl::InvalidArgumentError(
        "--allow-tf32 has no effect on the cpu device (use it with --device cuda)"));
  }
  options.device = *device;
  options.allow_tf32 = flags.allow_tf32;
  if (absl::Status status = parse_shape_flags(flags.shapes, options.shapes, options.dims);
      !status.ok()) {
    return report_error(status);
  }
  absl::StatusOr<GivenInputs> given = read_given_inputs(flags);
  if (!given.ok()) return report_error(given.status());
  for (const auto& [name, input] : given->arrays) options.data_shapes[name] = input.value.shape();
  absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> session =
      runtime::InferenceSession::load(flags.model, std::move(options));
  if (!session.ok()) return report_error(session.status());
  absl::StatusOr<std::map<std::string, GivenInput>> checked =
      check_given_inputs(flags, *std::move(given), (*session)->inputs());
  if (!checked.ok()) return report_error(checked.status());
  std::map<std::string, Tensor> inputs;
  for (auto& [name, input] : *checked) inputs.emplace(name, std::move(input.value));
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(inputs);
  if (!outputs.ok()) return report_error(outputs.status());
  if (absl::Status status = write_outputs(flags, (*session)->outputs(), *outputs); !status.ok()) {
    return report_error(status);
  }
  return 0;
}

}  // namespace ampc
