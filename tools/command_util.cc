#include "tools/command_util.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "compiler/strings.h"
#include "fmt/format.h"
#include "runtime/npy.h"

namespace ampc {

absl::StatusOr<CompileOptions> quick_training_options(std::string_view precision,
                                                      std::string_view optimizer, double lr,
                                                      std::string_view flag) {
  CompileOptions options;
  options.training = TrainingOptions{};
  AMPC_ASSIGN_OR_RETURN(const DType low, parse_precision(precision, flag));
  if (low != DType::kF32) {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = low;
    options.mixed_precision->policy.low_source = std::string(flag);
  }
  OptimizerOptions& o = options.training->optimizer;
  o.kind = optimizer == "sgd"    ? OptimizerOptions::Kind::kSgd
           : optimizer == "adam" ? OptimizerOptions::Kind::kAdam
                                 : OptimizerOptions::Kind::kAdamW;
  o.momentum = optimizer == "sgd" ? 0.9f : 0.0f;
  options.training->lr = static_cast<float>(lr);
  options.training->loss_named = false;  // the output named loss, else the only float scalar
  return options;
}

absl::StatusOr<TrainingData> read_training_data(const std::string& path) {
  // numpy saves bf16 as raw 2-byte void; BatchData's check names an array of another type.
  TrainingData data;
  AMPC_ASSIGN_OR_RETURN(data.arrays, runtime::read_npz(path, {.void2_as_bf16 = true}));
  for (const auto& [name, array] : data.arrays) {
    const Shape& shape = array.shape();
    if (!shape.empty()) data.batch_shapes[name] = Shape(shape.begin() + 1, shape.end());
    data.array_shapes[name] = shape;
  }
  return data;
}

absl::Status check_lr(double lr) {
  if (lr > 0 && std::isfinite(lr)) return absl::OkStatus();
  return absl::InvalidArgumentError(str_cat("--lr ", lr, " must be a finite number > 0"));
}

absl::StatusOr<runtime::Device> usable_device(const std::string& name) {
  AMPC_ASSIGN_OR_RETURN(const runtime::Device device, runtime::parse_device(name));
  AMPC_ASSIGN_OR_RETURN(const std::shared_ptr<runtime::Backend> backend,
                        runtime::create_backend(device));
  (void)backend;
  return device;
}

int report_error(const absl::Status& status) {
  // One write, so that the lines of ranks that fail together do not interleave.
  std::cerr << str_cat("ampc: error: ", status.message(), "\n");
  return 1;
}

void print_warnings(const Diagnostics& diagnostics) {
  for (const std::string& warning : diagnostics.warnings()) {
    std::cerr << "ampc: warning: " << warning << "\n";
  }
}

void add_shape_flags(CLI::App& command, ShapeFlags& flags) {
  command.add_option("--shape", flags.shapes,
                     "Fix an input's shape, NAME:DIMxDIMx... (e.g. x:8x3x32x32; a scalar is "
                     "NAME:); for inputs with dynamic dims. Repeatable.");
  command.add_option("--dim", flags.dims,
                     "Fix every input dim of a name, NAME=SIZE (e.g. batch=32): the names "
                     "PyTorch's dynamic_axes and dynamic_shapes give. Repeatable.");
}

absl::Status parse_shape_flags(const ShapeFlags& flags,
                               std::map<std::string, Shape, std::less<>>& shapes,
                               std::map<std::string, int64_t, std::less<>>& dims) {
  for (const std::string& flag : flags.shapes) AMPC_RETURN_IF_ERROR(parse_shape_flag(flag, shapes));
  for (const std::string& flag : flags.dims) AMPC_RETURN_IF_ERROR(parse_dim_flag(flag, dims));
  return absl::OkStatus();
}

std::string divergence(const runtime::StepStats& stats, int64_t skipped_in_a_row,
                       std::optional<double> min_scale) {
  constexpr std::string_view kCause = "NaN or inf in the data, or a diverged model";
  if (std::isnan(stats.loss_scale)) {
    if (std::isfinite(stats.loss)) return "";
    return str_cat("the loss is ", std::isnan(stats.loss) ? "NaN" : fmt::format("{}", stats.loss),
                   " (", kCause, ")");
  }
  if (!stats.found_inf) return "";
  if (min_scale && stats.loss_scale <= *min_scale) {
    return str_cat("it overflowed with the loss scale already at its minimum (--scale-min ",
                   *min_scale, "): its gradients are not finite at any allowed scale (", kCause,
                   ")");
  }
  if (skipped_in_a_row >= kMaxSkippedStepsInARow) {
    return str_cat("steps ", stats.step - kMaxSkippedStepsInARow + 1, " to ", stats.step,
                   " all overflowed and were skipped: the loss or its gradients are not finite "
                   "at any loss scale (",
                   kCause, ")");
  }
  return "";
}

namespace {

// Whether `a` and `b` name one file: the same file where both exist (hard links included), else
// the same absolute path once symbolic links and `.`/`..` are resolved (`out.onnx` and
// `./out.onnx`, which weakly_canonical alone leaves relative and apart while neither exists).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::exists(a, error) && std::filesystem::exists(b, error)) {
    return std::filesystem::equivalent(a, b, error);
  }
  auto normalized = [&](const std::string& path) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(path, error), error)
        .lexically_normal();
  };
  const std::filesystem::path canonical_a = normalized(a);
  if (error) return false;
  const std::filesystem::path canonical_b = normalized(b);
  return !error && canonical_a == canonical_b;
}

}  // namespace

absl::Status check_distinct_paths(const std::vector<NamedPath>& outputs,
                                  const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].path.empty()) continue;
    for (const NamedPath& input : inputs) {
      if (!input.path.empty() && same_file(outputs[i].path, input.path)) {
        return absl::InvalidArgumentError(
            str_cat(outputs[i].flag, " '", outputs[i].path, "' is ", input.flag, " '", input.path,
                    "': writing it would destroy what is read; choose another path"));
      }
    }
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      if (!outputs[j].path.empty() && same_file(outputs[i].path, outputs[j].path)) {
        return absl::InvalidArgumentError(str_cat(outputs[i].flag, " '", outputs[i].path, "' and ",
                                                  outputs[j].flag, " '", outputs[j].path,
                                                  "' are one file; choose two paths"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status check_output_file(std::string_view flag, const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_regular_file(status)) {
      const std::filesystem::file_type type = status.type();
      const std::string_view kind = type == std::filesystem::file_type::directory ? "a directory"
                                    : type == std::filesystem::file_type::fifo    ? "a pipe"
                                    : type == std::filesystem::file_type::socket  ? "a socket"
                                                                                  : "a device";
      return absl::InvalidArgumentError(
          str_cat(flag, " '", path, "' exists and is not a regular file: it is ", kind));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(
          str_cat("cannot write ", flag, " '", path, "': ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  const std::filesystem::path file(path);
  const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
  if (!std::filesystem::is_directory(folder, error) || ::access(folder.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(str_cat("cannot write ", flag, " '", path, "': its folder '",
                                              folder.string(),
                                              "' does not exist or is not writable"));
  }
  return absl::OkStatus();
}

bool updates_running_statistics(const Graph& step) {
  for (const auto& node : step.nodes()) {
    if (node->op_type().ends_with("BatchNormalization") && node->num_outputs() > 1) return true;
  }
  return false;
}

CLI::Validator at_least(int64_t minimum) {
  return CLI::Validator(
      [minimum](const std::string& text) -> std::string {
        int64_t value = 0;
        const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || ptr != text.data() + text.size() || value < minimum) {
          return str_cat("must be an integer >= ", minimum, ", not '", text, "'");
        }
        return "";
      },
      str_cat("INT>=", minimum));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !(value > 0) ||
            !std::isfinite(value)) {
          return str_cat("must be a finite number > 0, not '", text, "'");
        }
        return "";
      },
      "FLOAT>0");
}

}  // namespace ampc
