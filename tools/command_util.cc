#include "tools/command_util.h"

#include <cmath>
#include <iostream>

#include "compiler/strings.h"

namespace ampc {

absl::StatusOr<CompileOptions> quick_training_options(std::string_view precision,
                                                      std::string_view optimizer, double lr,
                                                      std::string_view flag) {
  CompileOptions options;
  options.training = TrainingOptions{};
  AMPC_ASSIGN_OR_RETURN(const DType low, parse_precision(precision));
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
  return options;
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
  std::cerr << "ampc: error: " << status.message() << "\n";
  return 1;
}

void print_warnings(const Diagnostics& diagnostics) {
  for (const std::string& warning : diagnostics.warnings()) {
    std::cerr << "ampc: warning: " << warning << "\n";
  }
}

absl::StatusOr<std::map<std::string, Shape, std::less<>>> parse_shapes(
    const std::vector<std::string>& flags) {
  std::map<std::string, Shape, std::less<>> shapes;
  for (const std::string& flag : flags) AMPC_RETURN_IF_ERROR(parse_shape_flag(flag, shapes));
  return shapes;
}

}  // namespace ampc
