#include "runtime/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "compiler/strings.h"

namespace ampc::runtime {

double LrSchedule::at(int64_t step) const {
  if (kind == Kind::kConstant) return lr;
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == Kind::kWarmup) return lr;
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

absl::Status LrSchedule::validate() const {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(str_cat("--lr ", lr, " must be a finite number > 0"));
  }
  if (!(min_lr >= 0 && min_lr <= lr)) {
    return absl::InvalidArgumentError(str_cat("--min-lr ", min_lr, " must be in [0, --lr]"));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(str_cat("--warmup-steps ", warmup_steps, " is negative"));
  }
  if (kind == Kind::kWarmup && warmup_steps == 0) {
    return absl::InvalidArgumentError("--schedule warmup needs --warmup-steps > 0");
  }
  if (kind == Kind::kCosine && total_steps <= warmup_steps) {
    return absl::InvalidArgumentError(str_cat("--schedule cosine decays over the steps after the ",
                                              warmup_steps, " warmup steps, but there are only ",
                                              total_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LrSchedule::Kind> parse_lr_schedule_kind(std::string_view name) {
  if (name == "constant") return LrSchedule::Kind::kConstant;
  if (name == "warmup") return LrSchedule::Kind::kWarmup;
  if (name == "cosine") return LrSchedule::Kind::kCosine;
  return absl::InvalidArgumentError(
      str_cat("unknown --schedule '", name, "' (constant, warmup or cosine)"));
}

}  // namespace ampc::runtime
