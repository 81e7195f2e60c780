// tools/train_progress.h.
#include "tools/train_progress.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "compiler/strings.h"
#include "fmt/format.h"

namespace ampc {
namespace {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return str_cat(s, "s");
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

// A skipped step's norm: it has none (the log's null).
std::string norm_text(const runtime::StepStats& stats) {
  if (stats.found_inf) return "overflow";
  if (std::isfinite(stats.grad_norm)) return fmt::format("{:.3g}", stats.grad_norm);
  return std::isnan(stats.grad_norm) ? "nan" : "inf";
}

}  // namespace

void Progress::update(const runtime::StepStats& stats, int64_t done) {
  const auto now = Clock::now();
  const bool last = stats.step == total_;
  const int64_t every = std::max<int64_t>(1, total_ / 20);
  if (bar_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  if (!bar_ && !last && stats.step % every != 0) return;
  last_draw_ = now;
  if (done != rate_done_) {  // the steps read together share one rate
    rate_done_ = done;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    rate_ = elapsed > 0 ? static_cast<double>(done - first_step_) / elapsed : 0;
  }
  const double eta = rate_ > 0 ? static_cast<double>(total_ - done) / rate_ : NAN;
  // A NaN loss prints as "nan", whatever its sign bit ("-nan" read as a negative loss).
  const double loss =
      std::isnan(stats.loss) ? std::numeric_limits<double>::quiet_NaN() : stats.loss;
  std::string numbers = fmt::format("step {}/{}  loss {:.4f}  grad_norm {}  lr {:.3g}", stats.step,
                                    total_, loss, norm_text(stats), stats.lr);
  if (!std::isnan(stats.loss_scale)) {
    numbers += fmt::format("  scale {:g}  skipped {}", stats.loss_scale, stats.skipped_steps);
  }
  numbers += fmt::format("  {:.1f} steps/s  ETA {}", rate_, format_duration(eta));
  if (bar_) {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * stats.step / std::max<int64_t>(total_, 1));
    std::cerr << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
              << numbers << "\x1b[K" << (last ? "\n" : "") << std::flush;
  } else {
    std::cerr << numbers << "\n";
  }
}

void Progress::finish_line() {
  if (bar_) std::cerr << "\n";
}

}  // namespace ampc
