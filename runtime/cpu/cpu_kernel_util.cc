#include "runtime/cpu/cpu_kernel_util.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace ampc::runtime::cpu {
namespace {

std::atomic<int> configured_threads{0};

}  // namespace

int cpu_threads() {
  const int configured = configured_threads.load();
  return configured > 0 ? configured : std::max(1, omp_get_num_procs());
}

void set_cpu_threads(int threads) { configured_threads.store(std::max(0, threads)); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  const int64_t per_thread = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::clamp<int64_t>(n / per_thread, 1, cpu_threads());
  if (chunks == 1) {
    body(0, n);
    return;
  }
  const int threads = static_cast<int>(chunks);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    body(n * chunk / chunks, n * (chunk + 1) / chunks);
  }
}

}  // namespace ampc::runtime::cpu
