// Learning-rate schedules: the training step takes its learning rate as the input `lr`, so the
// schedule lives here, in the runtime, and changing it never needs a recompile.
//
// For step index s (0-based: the first step is 0), peak rate `lr`, W = warmup_steps,
// T = total_steps:
//   constant  lr
//   warmup    lr * (s + 1) / W while s < W, then lr (linear warmup, no step at zero)
//   cosine    the warmup above, then min_lr + (lr - min_lr) * (1 + cos(pi * (s - W) / (T - W))) / 2
//             while s < T, then min_lr
#pragma once

#include <cstdint>
#include <string_view>

#include "ampc/status.h"

namespace ampc::runtime {

struct LrSchedule {
  enum class Kind { kConstant, kWarmup, kCosine };
  Kind kind = Kind::kConstant;
  double lr = 0.01;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0;

  // The learning rate of step `step`.
  double at(int64_t step) const;
  // lr > 0 and finite, 0 <= min_lr <= lr, warmup_steps >= 0 (> 0 for kWarmup), and for kCosine
  // total_steps > warmup_steps. Messages name the `ampc train` flag.
  absl::Status validate() const;
};

// "constant", "warmup", "cosine".
absl::StatusOr<LrSchedule::Kind> parse_lr_schedule_kind(std::string_view name);

}  // namespace ampc::runtime
