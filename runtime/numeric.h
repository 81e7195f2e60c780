// The per-element math of the runtime, written once for every backend: the CPU kernels call
// these functions on the host, the CUDA kernels on the device (AMPC_HD). What is here is the
// numeric contract of docs/architecture.md made code:
//   - X is the compute type: f32 for f32, f16 and bf16 elements (each converted exactly on load
//     and rounded once on store), f64 for f64, the type itself for integers;
//   - every + - * / is its own IEEE operation, in the order written (the CUDA sources are built
//     with --fmad=false, so no product and sum are fused where the CPU rounds twice);
//   - transcendentals are the math library's function of X (glibc on the host, CUDA's libdevice
//     on the device, both within 2 ulp in f32; pow on the device through f64);
//   - integer arithmetic wraps (two's complement) without undefined behaviour.
// C++17, host and device; nothing from the IR.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ampc/host_device.h"

namespace ampc::numeric {

// ---- The math library of X -----------------------------------------------------------------

#if defined(__CUDA_ARCH__)
#define AMPC_MATH_FN(name)                             \
  AMPC_HD float name(float x) { return ::name##f(x); } \
  AMPC_HD double name(double x) { return ::name(x); }
#else
#define AMPC_MATH_FN(name)                             \
  AMPC_HD float name(float x) { return std::name(x); } \
  AMPC_HD double name(double x) { return std::name(x); }
#endif
AMPC_MATH_FN(exp)
AMPC_MATH_FN(expm1)
AMPC_MATH_FN(log)
AMPC_MATH_FN(log1p)
AMPC_MATH_FN(tanh)
AMPC_MATH_FN(erf)
AMPC_MATH_FN(sqrt)
AMPC_MATH_FN(floor)
AMPC_MATH_FN(ceil)
AMPC_MATH_FN(rint)
AMPC_MATH_FN(sin)
AMPC_MATH_FN(cos)
AMPC_MATH_FN(tan)
AMPC_MATH_FN(asin)
AMPC_MATH_FN(acos)
AMPC_MATH_FN(atan)
AMPC_MATH_FN(sinh)
AMPC_MATH_FN(cosh)
AMPC_MATH_FN(asinh)
AMPC_MATH_FN(acosh)
AMPC_MATH_FN(atanh)
AMPC_MATH_FN(fabs)
#undef AMPC_MATH_FN

// fmod is exact (the remainder is representable), so host and device agree bit for bit.
#if defined(__CUDA_ARCH__)
AMPC_HD float fmod(float x, float y) { return ::fmodf(x, y); }
AMPC_HD double fmod(double x, double y) { return ::fmod(x, y); }
AMPC_HD float copysign(float x, float y) { return ::copysignf(x, y); }
AMPC_HD double copysign(double x, double y) { return ::copysign(x, y); }
#else
AMPC_HD float fmod(float x, float y) { return std::fmod(x, y); }
AMPC_HD double fmod(double x, double y) { return std::fmod(x, y); }
AMPC_HD float copysign(float x, float y) { return std::copysign(x, y); }
AMPC_HD double copysign(double x, double y) { return std::copysign(x, y); }
#endif

#if defined(__CUDA_ARCH__)
// CUDA's powf may be 4 ulp off, past the contract's 2: f32 powers go through f64 (within 1 ulp
// of f64, so correctly rounded to f32 but for rare near-ties).
AMPC_HD float pow(float x, float y) {
  return static_cast<float>(::pow(static_cast<double>(x), static_cast<double>(y)));
}
AMPC_HD double pow(double x, double y) { return ::pow(x, y); }
#else
AMPC_HD float pow(float x, float y) { return std::pow(x, y); }
AMPC_HD double pow(double x, double y) { return std::pow(x, y); }
#endif

template <typename X>
AMPC_HD bool is_nan(X x) {
  if constexpr (std::is_floating_point_v<X>) {
    return x != x;
  } else {
    return false;
  }
}

template <typename X>
AMPC_HD bool is_finite(X x) {
  return x - x == x - x;  // inf - inf and NaN - NaN are NaN
}

template <typename X>
AMPC_HD bool is_inf(X x) {
  return !is_finite(x) && !is_nan(x);
}

// ---- Integer arithmetic that wraps ---------------------------------------------------------

// Narrow types were promoted to int, and converting back keeps the low bits.
template <typename X>
AMPC_HD X wrapping_add(X a, X b) {
  using U = std::make_unsigned_t<X>;
  return static_cast<X>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename X>
AMPC_HD X wrapping_sub(X a, X b) {
  using U = std::make_unsigned_t<X>;
  return static_cast<X>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <typename X>
AMPC_HD X wrapping_mul(X a, X b) {
  using U = std::make_unsigned_t<X>;
  return static_cast<X>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

// ---- Binary arithmetic ---------------------------------------------------------------------

struct Add {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    if constexpr (std::is_integral_v<X>) {
      return wrapping_add(a, b);
    } else {
      return a + b;
    }
  }
};
struct Sub {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    if constexpr (std::is_integral_v<X>) {
      return wrapping_sub(a, b);
    } else {
      return a - b;
    }
  }
};
struct Mul {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    if constexpr (std::is_integral_v<X>) {
      return wrapping_mul(a, b);
    } else {
      return a * b;
    }
  }
};
// The divisor is never zero for integers (the kernels check first); MIN / -1 wraps to MIN.
struct Div {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    if constexpr (std::is_integral_v<X> && std::is_signed_v<X>) {
      if (b == X(-1)) return wrapping_sub(X(0), a);
    }
    return static_cast<X>(a / b);
  }
};
// ONNX's Mod with fmod = 1: the remainder of truncated division, with the dividend's sign (C's
// fmod and %). An integer divisor is never zero (the kernels check first); MIN % -1 is 0.
struct Fmod {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    if constexpr (std::is_integral_v<X>) {
      if constexpr (std::is_signed_v<X>) {
        if (b == X(-1)) return X(0);
      }
      return static_cast<X>(a % b);
    } else {
      return fmod(a, b);
    }
  }
};
// Mod with fmod = 0: the remainder of floored division, with the divisor's sign (Python's and
// numpy's %, which ONNX's reference uses); a zero float remainder takes the divisor's sign too.
struct FloorMod {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    const X r = Fmod{}(a, b);
    if constexpr (std::is_integral_v<X>) {
      if constexpr (std::is_signed_v<X>) {
        if (r != 0 && ((r < 0) != (b < 0))) return wrapping_add(r, b);
      }
      return r;
    } else {
      if (r == 0) return copysign(X(0), b);
      return (r < 0) != (b < 0) ? r + b : r;
    }
  }
};
// NaN wins: `b` replaces the running extremum `a` when it is NaN or beyond it (numpy's minimum
// and maximum, which the ONNX reference uses).
struct Min {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    return (is_nan(b) || b < a) ? b : a;
  }
};
struct Max {
  template <typename X>
  AMPC_HD X operator()(X a, X b) const {
    return (is_nan(b) || b > a) ? b : a;
  }
};
// A float base in its compute type, the exponent converted to it.
struct FloatPow {
  template <typename X, typename Y>
  AMPC_HD X operator()(X x, Y y) const {
    return static_cast<X>(pow(x, static_cast<X>(y)));
  }
};
// An integer base to an integer power, wrapping; a negative exponent truncates 1 / base^n toward
// zero. 0 to a negative power is undefined: it sets `undefined` and gives 0.
struct IntegerPow {
  template <typename X>
  AMPC_HD X operator()(X base, int64_t exponent, bool& undefined) const {
    if (exponent < 0) {
      if (base == 0) undefined = true;
      if (base == 1) return 1;
      if constexpr (std::is_signed_v<X>) {
        if (base == -1) return exponent % 2 == 0 ? 1 : -1;
      }
      return 0;
    }
    X result = 1;
    X factor = base;
    for (uint64_t e = static_cast<uint64_t>(exponent); e != 0; e >>= 1) {
      if (e & 1) result = Mul{}(result, factor);
      factor = Mul{}(factor, factor);
    }
    return result;
  }
};

// ---- Comparisons and logic (bool results) --------------------------------------------------

struct Equal {
  template <typename X>
  AMPC_HD bool operator()(X a, X b) const {
    return a == b;
  }
};
struct Less {
  template <typename X>
  AMPC_HD bool operator()(X a, X b) const {
    return a < b;
  }
};
struct Greater {
  template <typename X>
  AMPC_HD bool operator()(X a, X b) const {
    return a > b;
  }
};
struct LessOrEqual {
  template <typename X>
  AMPC_HD bool operator()(X a, X b) const {
    return a <= b;
  }
};
struct GreaterOrEqual {
  template <typename X>
  AMPC_HD bool operator()(X a, X b) const {
    return a >= b;
  }
};
struct And {
  AMPC_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct Or {
  AMPC_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct Xor {
  AMPC_HD bool operator()(bool a, bool b) const { return a != b; }
};
struct Not {
  AMPC_HD bool operator()(bool a) const { return !a; }
};

// ---- Unary arithmetic ----------------------------------------------------------------------

struct Sqrt {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return sqrt(x);
  }
};
struct Exp {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return exp(x);
  }
};
struct Log {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return log(x);
  }
};
// Floor, Ceil and Round (halves to even: rint in the default rounding mode) are exact: their
// result is representable in the operand's type, and an integral, infinite or NaN x is itself.
struct Floor {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return floor(x);
  }
};
struct Ceil {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return ceil(x);
  }
};
struct Round {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return rint(x);
  }
};
struct Reciprocal {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return X(1) / x;
  }
};
struct Neg {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    if constexpr (std::is_integral_v<X>) {
      return wrapping_sub(X(0), x);
    } else {
      return -x;
    }
  }
};
struct Abs {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    if constexpr (std::is_floating_point_v<X>) {
      return fabs(x);
    } else if constexpr (std::is_signed_v<X>) {
      return x < X(0) ? wrapping_sub(X(0), x) : x;
    } else {
      return x;
    }
  }
};
// min(max(x, low), high): an absent bound does not clip, low > high gives high, NaN (in x or in a
// bound) gives NaN.
template <typename X>
struct Clip {
  X low;
  X high;
  bool has_low;
  bool has_high;
  AMPC_HD X operator()(X x) const {
    // A NaN bound gives NaN, as numpy's clip (ONNX's reference) and PyTorch's clamp do.
    if (has_low && (x < low || low != low)) x = low;
    if (has_high && (x > high || high != high)) x = high;
    return x;
  }
};

// ---- Activations ---------------------------------------------------------------------------
// Constants are rounded to the compute type.

// Relu keeps NaN a NaN.
struct Relu {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return x < X(0) ? X(0) : x;
  }
};
struct LeakyRelu {
  float alpha;
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return x < X(0) ? static_cast<X>(alpha) * x : x;
  }
};
// 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) otherwise: no overflow, and full relative
// precision far into the negative tail.
struct Sigmoid {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    if (x >= X(0)) return X(1) / (X(1) + exp(-x));
    const X e = exp(x);
    return e / (X(1) + e);
  }
};
struct Tanh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return tanh(x);
  }
};
struct Erf {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return erf(x);
  }
};
// 0.5 * x * (1 + erf(x / sqrt(2))), computed as 0.5 * x * erfc(-x / sqrt(2)): the same value,
// without the cancellation of 1 + erf for negative x (below about -5.4 the sum loses every bit).
struct GeluErf {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    const X inv_sqrt2 = static_cast<X>(0.70710678118654752440);
    return X(0.5) * x * erfc(-x * inv_sqrt2);
  }
};
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
struct GeluTanh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    const X sqrt_2_over_pi = static_cast<X>(0.79788456080286535588);
    const X cubic = static_cast<X>(0.044715);
    return X(0.5) * x * (X(1) + tanh(sqrt_2_over_pi * (x + cubic * x * x * x)));
  }
};
// max(x, 0) + log1p(exp(-|x|)): ln(exp(x) + 1) without overflow.
struct Softplus {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return (x > X(0) ? x : X(0)) + log1p(exp(-fabs(x)));
  }
};
// Clamps to [0, 1]; NaN stays NaN (neither comparison holds).
template <typename X>
AMPC_HD X clamp01(X t) {
  if (t < X(0)) return X(0);
  if (t > X(1)) return X(1);
  return t;
}
// max(0, min(1, alpha * x + beta))
struct HardSigmoid {
  float alpha;
  float beta;
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return clamp01(static_cast<X>(alpha) * x + static_cast<X>(beta));
  }
};
// x * max(0, min(1, x * (1/6) + 1/2))
struct HardSwish {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    const X sixth = static_cast<X>(1.0 / 6.0);
    return x * clamp01(x * sixth + X(0.5));
  }
};
// x > 0 ? x : alpha * expm1(x): expm1 keeps the relative precision of small negative x.
struct Elu {
  float alpha;
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return x > X(0) ? x : static_cast<X>(alpha) * expm1(x);
  }
};
// gamma * (x > 0 ? x : alpha * expm1(x))
struct Selu {
  float alpha;
  float gamma;
  template <typename X>
  AMPC_HD X operator()(X x) const {
    const X inner = x > X(0) ? x : static_cast<X>(alpha) * expm1(x);
    return static_cast<X>(gamma) * inner;
  }
};
// x > 0 ? x : alpha * expm1(x / alpha), which is max(0, x) + min(0, alpha * (exp(x/alpha) - 1)).
struct Celu {
  float alpha;
  template <typename X>
  AMPC_HD X operator()(X x) const {
    const X a = static_cast<X>(alpha);
    return x > X(0) ? x : a * expm1(x / a);
  }
};
// x * tanh(softplus(x)), with Softplus's overflow-free form.
struct Mish {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return x * tanh(Softplus{}(x));
  }
};
// x / (1 + |x|)
struct Softsign {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return x / (X(1) + fabs(x));
  }
};
// x < 0 ? slope * x : x, the slope broadcast to x; NaN stays NaN.
struct PRelu {
  template <typename X>
  AMPC_HD X operator()(X x, X slope) const {
    return x < X(0) ? slope * x : x;
  }
};
struct Sin {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return sin(x);
  }
};
struct Cos {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return cos(x);
  }
};
// The other trigonometric and hyperbolic functions and their inverses: the C library's (CUDA's
// device functions, within 2 ulp in f32), NaN outside the domain as there.
struct Tan {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return tan(x);
  }
};
struct Asin {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return asin(x);
  }
};
struct Acos {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return acos(x);
  }
};
struct Atan {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return atan(x);
  }
};
struct Sinh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return sinh(x);
  }
};
struct Cosh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return cosh(x);
  }
};
struct Asinh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return asinh(x);
  }
};
struct Acosh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return acosh(x);
  }
};
struct Atanh {
  template <typename X>
  AMPC_HD X operator()(X x) const {
    return atanh(x);
  }
};

// ---- Float classification (bool results) --------------------------------------------------

struct IsNaN {
  template <typename X>
  AMPC_HD bool operator()(X x) const {
    return is_nan(x);
  }
};
// An infinity of a sign the op detects.
struct IsInf {
  bool detect_positive;
  bool detect_negative;
  template <typename X>
  AMPC_HD bool operator()(X x) const {
    if (!is_inf(x)) return false;
    return x > X(0) ? detect_positive : detect_negative;
  }
};

// ---- Attention's probabilities in the backward ---------------------------------------------

// ampc.AttentionGrad recomputes P_ij = exp(s_ij - LSE_i) from the forward's LSE_i = max_i +
// log(sum_i), which holds log(sum_i) only to within half an ulp of LSE_i. Beyond |LSE_i| = 2^7
// in f32 (2^36 in f64) that ulp exceeds 2^-17 and P would be off by more than the forward's own
// rounding; such a row's scores are all huge (every key masked by a large finite bias: Hugging
// Face's eager attention adds finfo(float32).min, so a fully masked row has LSE -3.4e38, and
// max + log(S) rounds back to max: P would be 1 for every key, not 1/S). The backward then
// recomputes the row's max and the log of its sum from the scores (a NaN LSE, a row of -inf,
// goes that way too and stays NaN). Else its max is LSE and the log of its sum 0, so
// P = exp((s - max) - log_sum) is exp(s - LSE) exactly.
template <typename X>
AMPC_HD bool lse_holds_log_sum(X lse) {
  return fabs(lse) < (sizeof(X) == sizeof(float) ? X(128) : X(68719476736.0));
}

// Whether a row of scores whose maximum is `max` keeps no key (every score -inf): a safe
// attention (ampc.Attention's `safe`) gives it 0 and no gradient, where the softmax is NaN.
template <typename X>
AMPC_HD bool is_empty_row(X max) {
  return is_inf(max) && max < X(0);
}

// ---- Dynamic loss scaling ------------------------------------------------------------------

// torch._amp_update_scale_ (and, with hysteresis > 1, Megatron-LM's DynamicGradScaler): the
// factors are doubles (Python floats), the scale a float, so `scale * factor` is computed in
// double and rounded once; growth that gives inf is not applied.
struct LossScaleRule {
  double growth_factor;
  double backoff_factor;
  double min_scale;
  int64_t growth_interval;
  int64_t hysteresis;  // overflows in a row before backing off (1: every one, as PyTorch)

  // Updates (scale, growth tracker, hysteresis left) after a step that did or did not overflow.
  AMPC_HD void update(bool found_inf, float& scale, int64_t& tracker, int64_t& left) const {
    if (found_inf) {
      tracker = 0;
      if (--left <= 0) {
        scale = static_cast<float>(scale * backoff_factor);
        const float floor = static_cast<float>(min_scale);
        if (scale < floor) scale = floor;
      }
    } else if (tracker + 1 == growth_interval) {
      const float grown = static_cast<float>(scale * growth_factor);
      if (is_finite(grown)) scale = grown;
      tracker = 0;
      left = hysteresis;
    } else {
      tracker = tracker + 1;
    }
  }
};

}  // namespace ampc::numeric
