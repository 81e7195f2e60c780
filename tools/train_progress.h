// `ampc train`'s progress on stderr: a bar redrawn in place on a terminal, plain lines
// otherwise (docs/cli.md).
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/training_session.h"

namespace ampc {

class Progress {
 public:
  Progress(bool bar, int64_t first_step, int64_t total)
      : bar_(bar), first_step_(first_step), total_(total), start_(Clock::now()) {}

  // `stats` of one step; `done` the steps run so far, which may be past it: the figures of the
  // steps between two reads come together, and the rate counts every step run by now.
  void update(const runtime::StepStats& stats, int64_t done);
  // Ends the bar's line before other output.
  void finish_line();

 private:
  using Clock = std::chrono::steady_clock;
  bool bar_;
  int64_t first_step_;
  int64_t total_;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
  int64_t rate_done_ = -1;  // the steps done when rate_ was measured
  double rate_ = 0;
};

}  // namespace ampc
