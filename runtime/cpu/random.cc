// CPU kernels of the random ops (ops/random.cc): element i of a node's output is a function of
// (the node's seed, the run's random stream, i) alone (runtime/random_math.h), so the draws are
// the same on any thread count and on CUDA.
#include <atomic>
#include <cmath>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cast_math.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/random_math.h"

namespace ampc::runtime::cpu {
namespace {

// Draws per thread below which a kernel stays on one thread (a normal draw costs a log, a cosine
// and a square root).
constexpr int64_t kGrainDraws = 1 << 12;

// The node's draw key. A node without a seed draws from seed 0 (the training-step pass gives
// each random node of a step its own).
uint64_t key_of(const KernelContext& ctx) {
  return numeric::random_key(static_cast<uint64_t>(ops::random_seed(ctx.node).value_or(0)),
                             ctx.random_stream);
}

// out[i] = draw(i) (an f64) rounded once to T, for every element.
template <typename T, typename Draw>
void fill_draws(const KernelContext& ctx, Draw draw) {
  const std::span<T> out = ctx.output(0).out<T>();
  parallel_for(static_cast<int64_t>(out.size()), kGrainDraws, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = cast_math::convert<T>(draw(i), true);
  });
}

template <typename T>
absl::Status random_uniform_kernel(const KernelContext& ctx) {
  const double low = decimal_attr(ctx.node, "low");
  const double high = decimal_attr(ctx.node, "high");
  const uint64_t key = key_of(ctx);
  fill_draws<T>(ctx, [&](int64_t i) {
    return numeric::uniform_draw(key, i, numeric::digits_of<T>(), low, high);
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status random_normal_kernel(const KernelContext& ctx) {
  const double mean = decimal_attr(ctx.node, "mean");
  const double scale = decimal_attr(ctx.node, "scale");
  const uint64_t key = key_of(ctx);
  fill_draws<T>(ctx, [&](int64_t i) { return numeric::normal_draw(key, i, mean, scale); });
  return absl::OkStatus();
}

// Output T (any numeric type or bool), probabilities of any float type. A probability outside
// [0, 1] (or NaN) is an error naming the first such element.
template <typename T>
absl::Status bernoulli_kernel(const KernelContext& ctx) {
  const TensorArg& p = ctx.input(0);
  const uint64_t key = key_of(ctx);
  const std::span<T> out = ctx.output(0).out<T>();
  const int64_t n = static_cast<int64_t>(out.size());
  std::atomic<int64_t> first_bad{n};
  parallel_for(n, kGrainDraws, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double probability = read_as<double>(p, i);
      if (!(probability >= 0 && probability <= 1)) {
        int64_t seen = first_bad.load();
        while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
        }
      }
      out[i] =
          cast_math::convert<T>(numeric::bernoulli_draw(key, i, probability) ? 1.0 : 0.0, true);
    }
  });
  if (const int64_t bad = first_bad.load(); bad < n) {
    return absl::InvalidArgumentError(str_cat("probability ", read_as<double>(p, bad), " (element ",
                                              bad, " of input 0 'input') is not in [0, 1]"));
  }
  return absl::OkStatus();
}

void register_random_kernels(KernelRegistry& r) {
  // The draws' type is the output's; the Like forms read only their input's shape.
  const KernelOptions keyed_on_output{.keyed_on = {.output = true, .index = 0}};
  for (const char* op : {"RandomUniform", "RandomUniformLike"}) {
    add_kernels<float, double, Float16, BFloat16>(
        r, kernel_def(op, keyed_on_output), []<typename T>() { return &random_uniform_kernel<T>; });
  }
  for (const char* op : {"RandomNormal", "RandomNormalLike"}) {
    add_kernels<float, double, Float16, BFloat16>(
        r, kernel_def(op, keyed_on_output), []<typename T>() { return &random_normal_kernel<T>; });
  }
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t, bool>(
      r, kernel_def("Bernoulli", keyed_on_output),
      []<typename T>() { return &bernoulli_kernel<T>; });
}

static KernelRegistration kRandomKernels(&register_random_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
