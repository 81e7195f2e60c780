// CPU kernels for the optimizer ops: ampc.SGD, ampc.Adam, ampc.GlobalNorm, ampc.ClipCoefficient.
//
// Each kernel repeats, operation for operation, what PyTorch's CPU kernels compute for
// torch.optim.SGD / Adam / AdamW (foreach=False, capturable=False: the `_single_tensor_*`
// functions) and torch.nn.utils.clip_grad_norm_, so an f32 run gives PyTorch's bits. Three kinds
// of arithmetic appear, and each is written here the way PyTorch does it:
//   - Python-float arithmetic on hyperparameters (1 - beta1, beta1 ** t, lr / bc1): double.
//     Float attributes are read as the decimal they spell (0.999f reads as 0.999, Python's
//     value: 1 - 0.999f would be 1.3e-5 away from 1 - 0.999); lr and step are read exactly.
//   - Such a value passed to a tensor op is rounded once to the tensor's type: [w] below.
//   - Tensor ops compute in the tensor's type. PyTorch's `a.add(b, alpha=w)`, `lerp` and
//     `addcmul` fuse their multiply-add (AVX2 fmadd, or a contracted a + w * b): fma below.
//     `addcdiv`, `mul`, `div` and `sqrt` round each operation.
//
// SGD (g = grad, negated when maximize; `step` == 0 marks the first update):
//   g   = fma(param, [weight_decay], g)                          if weight_decay != 0
//   buf = step == 0 ? g : fma(g, [1 - dampening], buf * [momentum])    if momentum != 0
//   g   = nesterov ? fma(buf, [momentum], g) : buf                     if momentum != 0
//   param = fma(g, [-lr], param);  with momentum 0 the buffer passes through unchanged.
// Adam (t = step + 1, computed in step's type as PyTorch's step tensor does, then as double):
//   param = param * [1 - lr * weight_decay]       if weight_decay != 0 and decoupled (AdamW)
//   g     = fma(param, [weight_decay], g)         if weight_decay != 0 and not decoupled
//   m     = fma([w], g - m, m), w = [1 - beta1]   torch.lerp for |w| < 0.5; else
//         = fma([w] - 1, g - m, g)                 its other branch
//   v     = fma([1 - beta2] * g, g, v * [beta2])
//   bc1 = 1 - beta1 ** t, bc2 = 1 - beta2 ** t, step_size = lr / bc1 (all double, std::pow as
//   CPython's float ** float), bc2_sqrt = bc2 ** 0.5 (std::pow, as Python's ** 0.5)
//   denom = sqrt(v) / [bc2_sqrt] + [epsilon]
//   param = param + [-step_size] * m / denom       (left to right: the product, then the quotient)
// PyTorch's CPU sqrt comes from MKL's vector library, up to 0.75 ulp off in about one element
// in six; ours rounds correctly (as CUDA's does), so denom may differ from PyTorch CPU's by an
// ulp, which rarely reaches param's last bit. m and v match bit for bit.
// GlobalNorm, as clip_grad_norm_ (torch.linalg.vector_norm per tensor, then of the stacked
// norms), each norm as PyTorch's AVX2 kernel sums it: eight lane sums s_j += x * x (rounded
// product, rounded sum) over the first n - n % 8 elements, lane j taking elements j, j + 8, ...;
// then s = s_0 + s_1 + ... + s_7 left to right; then the r = n % 8 remaining elements in order,
// the first 4 * (r / 4) as s += x * x (rounded product) and the last r % 4 as s = fma(x, x, s)
// (what GCC made of PyTorch's scalar remainder loop; found by comparing with PyTorch 2.15 bit
// for bit); norm = sqrt(s). This needs the compiler not to contract s += x * x into an fma
// (the build says -ffp-contract=off). f64 inputs follow the same scheme.
// ClipCoefficient: min((1 / (total_norm + [1e-6])) * [max_norm], 1), NaN kept (Python's
// max_norm / t is t.reciprocal() * max_norm; torch.clamp(max=1) keeps NaN).
//
// The per-element update is numeric::SgdUpdate and numeric::AdamUpdate (runtime/optimizer_math.h),
// which the CUDA kernels run too. The update kernels are element-wise: each output element is
// written after its own operands are read, so the outputs may share the parameter's and the state's
// buffers (the planner puts them there: an update in place), and threads split elements without
// changing any bit. With `skip` set, the outputs are the parameter and state as they came (nothing
// to do in place). GlobalNorm computes each tensor's norm on one thread (tensors spread over
// threads).
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <span>
#include <system_error>
#include <type_traits>
#include <vector>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/optimizer_math.h"

namespace ampc::runtime::cpu {
namespace {

constexpr int64_t kUpdateGrain = 1 << 14;

// The update loops, compiled twice on x86-64: the build targets baseline x86-64, where each
// fma is a call into libm, and a copy with AVX2 and the FMA instruction runs where the CPU has
// them. Each loop is instantiated per branch set (numeric::FixedSgdBranches), so its body has no
// branch, and is an `omp simd` loop: each element is read before it is written and no element
// reads another, so the in-place outputs are no dependence. An fma rounds once, scalar or vector,
// with or without the instruction, and sqrt is correctly rounded either way (the file is built
// with -fno-math-errno, so that it vectorizes): every copy gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
template <typename Loop>
__attribute__((target("avx2,fma"))) void run_with_fma_instructions(const Loop& loop, int64_t begin,
                                                                   int64_t end) {
  loop(begin, end);
}

template <typename Loop>
void update_elements(int64_t count, const Loop& loop) {
  static const bool has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  parallel_for(count, kUpdateGrain, [&](int64_t begin, int64_t end) {
    if (has_fma) {
      run_with_fma_instructions(loop, begin, end);
    } else {
      loop(begin, end);
    }
  });
}
#else
template <typename Loop>
void update_elements(int64_t count, const Loop& loop) {
  parallel_for(count, kUpdateGrain, loop);
}
#endif

// Calls fn(branches) with the numeric::FixedSgdBranches / FixedAdamBranches set whose constants
// are the values `b` (the update's RuntimeBranches) reads.
template <typename Branches, typename Fn>
void with_sgd_branches(const Branches& b, const Fn& fn) {
  auto pick = [&](auto maximize, auto decay) {
    if (!b.momentum())
      return fn(numeric::FixedSgdBranches<decltype(maximize)::value, decltype(decay)::value, false,
                                          false, false>());
    if (b.first()) {
      if (b.nesterov())
        return fn(numeric::FixedSgdBranches<decltype(maximize)::value, decltype(decay)::value, true,
                                            true, true>());
      return fn(numeric::FixedSgdBranches<decltype(maximize)::value, decltype(decay)::value, true,
                                          true, false>());
    }
    if (b.nesterov())
      return fn(numeric::FixedSgdBranches<decltype(maximize)::value, decltype(decay)::value, true,
                                          false, true>());
    return fn(numeric::FixedSgdBranches<decltype(maximize)::value, decltype(decay)::value, true,
                                        false, false>());
  };
  using True = std::true_type;
  using False = std::false_type;
  if (b.maximize()) {
    b.decay() ? pick(True(), True()) : pick(True(), False());
  } else {
    b.decay() ? pick(False(), True()) : pick(False(), False());
  }
}

template <typename Branches, typename Fn>
void with_adam_branches(const Branches& b, const Fn& fn) {
  auto pick = [&](auto maximize, auto small_weight) {
    constexpr bool kMaximize = decltype(maximize)::value;
    constexpr bool kSmall = decltype(small_weight)::value;
    if (!b.decay()) return fn(numeric::FixedAdamBranches<kMaximize, false, false, kSmall>());
    if (b.decoupled()) return fn(numeric::FixedAdamBranches<kMaximize, true, true, kSmall>());
    return fn(numeric::FixedAdamBranches<kMaximize, true, false, kSmall>());
  };
  using True = std::true_type;
  using False = std::false_type;
  if (b.maximize()) {
    b.small_weight() ? pick(True(), True()) : pick(True(), False());
  } else {
    b.small_weight() ? pick(False(), True()) : pick(False(), False());
  }
}

// The one element of an f32 or f64 scalar operand, exactly.
double read_scalar(const TensorArg& arg) {
  return arg.dtype() == DType::kF32 ? arg.in<float>()[0] : arg.in<double>()[0];
}

// step + 1, added in step's own type as PyTorch's `step_t += 1` does on its f32 step tensor.
double updates_including_this_one(const TensorArg& step) {
  if (step.dtype() == DType::kF32) return step.in<float>()[0] + 1.0f;
  return step.in<double>()[0] + 1.0;
}

// With the optional `skip` operand (at `index`) set, copies param and each state to its output
// (nothing moves when the update is in place) and returns true.
template <typename T>
bool skipped(const KernelContext& ctx, int index, std::initializer_list<std::pair<int, int>> io) {
  if (!ctx.has_input(index) || ctx.input(index).in<uint8_t>()[0] == 0) return false;
  for (const std::pair<int, int>& pair : io) {
    const std::span<const T> from = ctx.input(pair.first).in<T>();
    const std::span<T> to = ctx.output(pair.second).out<T>();
    if (from.data() != to.data()) std::copy(from.begin(), from.end(), to.begin());
  }
  return true;
}

// Without momentum the buffer is optional (the op's inference requires it otherwise), and the
// update neither reads nor writes one.
template <typename T>
absl::Status sgd(const KernelContext& ctx) {
  const bool buffered = ctx.has_input(2);
  if (buffered ? skipped<T>(ctx, 5, {{0, 0}, {2, 1}}) : skipped<T>(ctx, 5, {{0, 0}})) {
    return absl::OkStatus();
  }
  const numeric::SgdUpdate<T> update(sgd_hyper(ctx.node), read_scalar(ctx.input(3)),
                                     read_scalar(ctx.input(4)) == 0);
  const T* p = ctx.input(0).in<T>().data();
  const T* g = ctx.input(1).in<T>().data();
  T* p_out = ctx.output(0).out<T>().data();
  const int64_t n = ctx.input(0).num_elements();
  if (!buffered) {
    with_sgd_branches(update.branches(), [&](auto branches) {
      update_elements(
          n, [&](int64_t begin, int64_t end) __attribute__((always_inline)) {
#pragma omp simd
            for (int64_t i = begin; i < end; ++i) {
              T unused;
              update.apply(branches, p[i], g[i], T(0), p_out[i], unused);
            }
          });
    });
    return absl::OkStatus();
  }
  const T* b = ctx.input(2).in<T>().data();
  T* b_out = ctx.output(1).out<T>().data();
  with_sgd_branches(update.branches(), [&](auto branches) {
    update_elements(
        n, [&](int64_t begin, int64_t end) __attribute__((always_inline)) {
#pragma omp simd
          for (int64_t i = begin; i < end; ++i) {
            update.apply(branches, p[i], g[i], b[i], p_out[i], b_out[i]);
          }
        });
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status adam(const KernelContext& ctx) {
  if (skipped<T>(ctx, 6, {{0, 0}, {2, 1}, {3, 2}})) return absl::OkStatus();
  const numeric::AdamUpdate<T> update(adam_hyper(ctx.node), read_scalar(ctx.input(4)),
                                      updates_including_this_one(ctx.input(5)));
  std::span<const T> param = ctx.input(0).in<T>(), grad = ctx.input(1).in<T>(),
                     exp_avg = ctx.input(2).in<T>(), exp_avg_sq = ctx.input(3).in<T>();
  std::span<T> param_out = ctx.output(0).out<T>(), exp_avg_out = ctx.output(1).out<T>(),
               exp_avg_sq_out = ctx.output(2).out<T>();
  const T* p = param.data();
  const T* g = grad.data();
  const T* m = exp_avg.data();
  const T* v = exp_avg_sq.data();
  T* p_out = param_out.data();
  T* m_out = exp_avg_out.data();
  T* v_out = exp_avg_sq_out.data();
  with_adam_branches(update.branches(), [&](auto branches) {
    update_elements(
        ctx.input(0).num_elements(), [&](int64_t begin,
                                         int64_t end) __attribute__((always_inline)) {
#pragma omp simd
          for (int64_t i = begin; i < end; ++i) {
            update.apply(branches, p[i], g[i], m[i], v[i], p_out[i], m_out[i], v_out[i]);
          }
        });
  });
  return absl::OkStatus();
}

// sqrt(sum of x * x) in PyTorch's AVX2 order (see the header).
template <typename T>
T torch_l2_norm(std::span<const T> x) {
  constexpr int64_t kLanes = 8;
  const int64_t n = static_cast<int64_t>(x.size());
  std::array<T, kLanes> lanes{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const T square = x[i + j] * x[i + j];
      lanes[j] += square;
    }
  }
  T sum = lanes[0];
  for (int64_t j = 1; j < kLanes; ++j) sum += lanes[j];
  for (const int64_t rounded_end = i + (n - i) / 4 * 4; i < rounded_end; ++i) {
    const T square = x[i] * x[i];
    sum += square;
  }
  for (; i < n; ++i) sum = std::fma(x[i], x[i], sum);
  return std::sqrt(sum);
}

template <typename T>
absl::Status global_norm(const KernelContext& ctx) {
  std::vector<T> norms(ctx.inputs.size());
  parallel_for(static_cast<int64_t>(norms.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) norms[k] = torch_l2_norm(ctx.input(k).in<T>());
  });
  ctx.output(0).out<T>()[0] = torch_l2_norm(std::span<const T>(norms));
  return absl::OkStatus();
}

template <typename T>
absl::Status clip_coefficient(const KernelContext& ctx) {
  const T norm = ctx.input(0).in<T>()[0];
  const T max_norm = T(decimal_attr(ctx.node, "max_norm"));
  const T coefficient = (T(1) / (norm + T(1e-6))) * max_norm;
  ctx.output(0).out<T>()[0] = std::isnan(coefficient) ? coefficient : std::min(coefficient, T(1));
  return absl::OkStatus();
}

void register_optimizer_kernels(KernelRegistry& r) {
  // Parameter and buffer over theirs (operands 0 and 2); parameter, exp_avg and exp_avg_sq over
  // theirs (0, 2, 3).
  add_kernels<float, double>(r, ampc_kernel_def("SGD", {.in_place_operands = {0, 2}}),
                             []<typename T>() { return &sgd<T>; });
  add_kernels<float, double>(r, ampc_kernel_def("Adam", {.in_place_operands = {0, 2, 3}}),
                             []<typename T>() { return &adam<T>; });
  add_kernels<float, double>(r, ampc_kernel_def("GlobalNorm"),
                             []<typename T>() { return &global_norm<T>; });
  add_kernels<float, double>(r, ampc_kernel_def("ClipCoefficient"),
                             []<typename T>() { return &clip_coefficient<T>; });
}

static KernelRegistration kOptimizerKernels(&register_optimizer_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
