// The per-element math of the optimizer updates, ampc.SGD and ampc.Adam (ops/optimizer.cc),
// written once for both backends on top of runtime/numeric.h: the CPU kernels
// (runtime/cpu/optimizer.cc, which states the order of operations and why) and the CUDA ones
// (runtime/cuda/training_kernels.cu) run these functions. C++17, host and device.
#pragma once

#include <cmath>

#include "ampc/host_device.h"
#include "runtime/numeric.h"

namespace ampc::numeric {

// ---- Optimizer updates (ops/optimizer.cc) --------------------------------------------------
// PyTorch's single-tensor SGD and Adam/AdamW for one element; runtime/cpu/optimizer.cc states the
// order of operations and why. Hyperparameters come in as doubles (the decimal each float
// attribute spells), the learning rate and step count as read from their tensors; the Python-
// float part is computed in double once per update, and each coefficient rounded once to T.
// fma is the fused multiply-add (one rounding) on both backends.

#if defined(__CUDA_ARCH__)
AMPC_HD float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
AMPC_HD double fma(double a, double b, double c) { return ::fma(a, b, c); }
AMPC_HD double pow_f64(double x, double y) { return ::pow(x, y); }
#else
AMPC_HD float fma(float a, float b, float c) { return std::fma(a, b, c); }
AMPC_HD double fma(double a, double b, double c) { return std::fma(a, b, c); }
AMPC_HD double pow_f64(double x, double y) { return std::pow(x, y); }
#endif

struct SgdHyper {
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// Which branches of an update the elements of one tensor take. An update's formula is written once,
// over a branch set: RuntimeBranches reads the hyperparameters (what operator() and the CUDA
// kernels use); FixedBranches makes each one a constant, so that a CPU loop instantiated per set
// has no branch in its body and vectorizes (runtime/cpu/optimizer.cc picks the set once per
// tensor). Both give the same bits.
template <bool kMaximize, bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
struct FixedSgdBranches {
  AMPC_HD constexpr bool maximize() const { return kMaximize; }
  AMPC_HD constexpr bool decay() const { return kDecay; }
  AMPC_HD constexpr bool momentum() const { return kMomentum; }
  AMPC_HD constexpr bool first() const { return kFirst; }
  AMPC_HD constexpr bool nesterov() const { return kNesterov; }
};

template <typename T>
struct SgdUpdate {
  SgdHyper hyper;
  T decay, mom, undamped, neg_lr;
  bool first_update;  // `step` == 0: the buffer starts at the gradient

  AMPC_HD SgdUpdate(const SgdHyper& h, double lr, bool first)
      : hyper(h),
        decay(T(h.weight_decay)),
        mom(T(h.momentum)),
        undamped(T(1 - h.dampening)),
        neg_lr(T(-lr)),
        first_update(first) {}

  struct RuntimeBranches {
    const SgdUpdate* u;
    AMPC_HD bool maximize() const { return u->hyper.maximize; }
    AMPC_HD bool decay() const { return u->hyper.weight_decay != 0; }
    AMPC_HD bool momentum() const { return u->hyper.momentum != 0; }
    AMPC_HD bool first() const { return u->first_update; }
    AMPC_HD bool nesterov() const { return u->hyper.nesterov; }
  };
  AMPC_HD RuntimeBranches branches() const { return RuntimeBranches{this}; }

  // param and buffer in, their new values out (each read before either is written), taking the
  // branches `b` says.
  template <typename Branches>
  AMPC_HD void apply(const Branches& b, T param, T grad, T buffer, T& param_out,
                     T& buffer_out) const {
    const T p = param;
    T g = b.maximize() ? -grad : grad;
    if (b.decay()) g = fma(p, decay, g);
    T buf = buffer;
    if (b.momentum()) {
      buf = b.first() ? g : fma(g, undamped, buf * mom);
      g = b.nesterov() ? fma(buf, mom, g) : buf;
    }
    buffer_out = buf;
    param_out = fma(g, neg_lr, p);
  }
  AMPC_HD void operator()(T param, T grad, T buffer, T& param_out, T& buffer_out) const {
    apply(branches(), param, grad, buffer, param_out, buffer_out);
  }
};

struct AdamHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW
  bool maximize = false;
};

// Adam's branch sets, as SGD's above. kDecoupled matters only with kDecay; kSmallWeight is which
// end torch.lerp computes the first moment from (|1 - beta1| < 0.5).
template <bool kMaximize, bool kDecay, bool kDecoupled, bool kSmallWeight>
struct FixedAdamBranches {
  AMPC_HD constexpr bool maximize() const { return kMaximize; }
  AMPC_HD constexpr bool decay() const { return kDecay; }
  AMPC_HD constexpr bool decoupled() const { return kDecoupled; }
  AMPC_HD constexpr bool small_weight() const { return kSmallWeight; }
};

template <typename T>
struct AdamUpdate {
  AdamHyper hyper;
  T decay_factor, decay, lerp_coefficient, b2, one_minus_b2, denom_divisor, eps, neg_step;
  bool small_weight;

  // `t`: the number of updates including this one (step + 1, added in step's type).
  AMPC_HD AdamUpdate(const AdamHyper& h, double lr, double t) : hyper(h) {
    const double bias_correction1 = 1 - pow_f64(h.beta1, t);
    const double bias_correction2 = 1 - pow_f64(h.beta2, t);
    const double step_size = lr / bias_correction1;
    const double bias_correction2_sqrt = pow_f64(bias_correction2, 0.5);
    decay_factor = T(1 - lr * h.weight_decay);
    decay = T(h.weight_decay);
    const T weight = T(1 - h.beta1);
    small_weight = (weight < T(0) ? -weight : weight) < T(0.5);
    lerp_coefficient = small_weight ? weight : weight - T(1);
    b2 = T(h.beta2);
    one_minus_b2 = T(1 - h.beta2);
    denom_divisor = T(bias_correction2_sqrt);
    eps = T(h.epsilon);
    neg_step = T(-step_size);
  }

  struct RuntimeBranches {
    const AdamUpdate* u;
    AMPC_HD bool maximize() const { return u->hyper.maximize; }
    AMPC_HD bool decay() const { return u->hyper.weight_decay != 0; }
    AMPC_HD bool decoupled() const { return u->hyper.decoupled; }
    AMPC_HD bool small_weight() const { return u->small_weight; }
  };
  AMPC_HD RuntimeBranches branches() const { return RuntimeBranches{this}; }

  // param and moments in, their new values out (each read before any is written), taking the
  // branches `b` says.
  template <typename Branches>
  AMPC_HD void apply(const Branches& b, T param, T grad, T exp_avg, T exp_avg_sq, T& param_out,
                     T& exp_avg_out, T& exp_avg_sq_out) const {
    T p = param;
    T g = b.maximize() ? -grad : grad;
    if (b.decay()) {
      if (b.decoupled()) {
        p = p * decay_factor;
      } else {
        g = fma(p, decay, g);
      }
    }
    const T m0 = exp_avg;
    const T m = fma(lerp_coefficient, g - m0, b.small_weight() ? m0 : g);
    const T v = fma(one_minus_b2 * g, g, exp_avg_sq * b2);
    const T denom = sqrt(v) / denom_divisor + eps;
    exp_avg_out = m;
    exp_avg_sq_out = v;
    param_out = p + neg_step * m / denom;
  }
  AMPC_HD void operator()(T param, T grad, T exp_avg, T exp_avg_sq, T& param_out, T& exp_avg_out,
                          T& exp_avg_sq_out) const {
    apply(branches(), param, grad, exp_avg, exp_avg_sq, param_out, exp_avg_out, exp_avg_sq_out);
  }
};

}  // namespace ampc::numeric
