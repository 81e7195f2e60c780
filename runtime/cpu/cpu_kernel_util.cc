#include "runtime/cpu/cpu_kernel_util.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <iterator>
#include <utility>
#include <variant>

namespace ampc::runtime::cpu {
namespace {

std::atomic<int> configured_threads{0};

}  // namespace

KernelDef kernel_def(std::string op, KernelOptions options) {
  KernelDef def;
  def.op = std::move(op);
  def.device = Device::kCpu;
  def.keyed_on = options.keyed_on;
  def.workspace_bytes = options.workspace_bytes;
  def.in_place_operand = options.in_place_operand;
  def.in_place_operands = std::move(options.in_place_operands);
  return def;
}

KernelDef ampc_kernel_def(std::string op, KernelOptions options) {
  KernelDef def = kernel_def(std::move(op), std::move(options));
  def.domain = std::string(kAmpcDomain);
  return def;
}

void add_kernel_for_all_dtypes(KernelRegistry& registry, KernelDef base, KernelFn fn) {
  base.device = Device::kCpu;
  base.dtypes.assign(std::begin(kAllDTypes), std::end(kAllDTypes));
  base.fn = fn;
  registry.add(std::move(base));
}

int cpu_threads() {
  const int configured = configured_threads.load();
  // omp_get_max_threads: OMP_NUM_THREADS when set, else one per core.
  return configured > 0 ? configured : std::max(1, omp_get_max_threads());
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
