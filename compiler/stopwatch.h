// Seconds since construction on a monotonic clock, for the timings the tools print
// (`ampc compile --time-passes`).
#pragma once

#include <chrono>

namespace ampc {

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ampc
