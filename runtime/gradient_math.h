// The per-element math of the gradient ops, written once for both backends on top of
// runtime/numeric.h: the CPU kernels (runtime/cpu/activation_grad.cc, softmax_loss_grad.cc,
// normalization_grad.cc, shape_grad.cc, which state the order of every sum) and the CUDA ones
// (runtime/cuda/gradient_kernels.cu) run these functions. X is the compute type (f32 for f16,
// bf16 and f32; f64 for f64). C++17, host and device.
#pragma once

#include "ampc/host_device.h"
#include "runtime/numeric.h"

namespace ampc::numeric {

// ---- Activations: dX from dY and the saved forward input x (or output y) -------------------

// y <= 0 ? 0 : dy (a NaN y passes dy, as in PyTorch).
struct ReluGrad {
  template <typename X>
  AMPC_HD X operator()(X dy, X y) const {
    return y <= X(0) ? X(0) : dy;
  }
};
// x > 0 ? dy : dy * alpha.
struct LeakyReluGrad {
  float alpha;
  template <typename X>
  AMPC_HD X operator()(X dy, X x) const {
    return x > X(0) ? dy : dy * static_cast<X>(alpha);
  }
};
// dy * (Phi + x * phi), Phi = 0.5 * erfc(-x / sqrt(2)) (1 + erf without its cancellation, as
// GeluErf), phi = exp(-x^2 / 2) / sqrt(2 pi).
struct GeluErfGrad {
  template <typename X>
  AMPC_HD X operator()(X dy, X x) const {
    const X inv_sqrt2 = static_cast<X>(0.70710678118654752440);
    const X inv_sqrt_2pi = static_cast<X>(0.39894228040143267794);
    const X cdf = X(0.5) * erfc(-x * inv_sqrt2);
    const X pdf = inv_sqrt_2pi * exp(X(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};
// dy * (0.5 * (1 + t) + 0.5 * x * (1 - t^2) * k * (1 + 3c * x^2)), t = tanh(k * (x + c * x^3)),
// k = sqrt(2 / pi), c = 0.044715 (3c one constant).
struct GeluTanhGrad {
  template <typename X>
  AMPC_HD X operator()(X dy, X x) const {
    const X sqrt_2_over_pi = static_cast<X>(0.79788456080286535588);
    const X cubic = static_cast<X>(0.044715);
    const X cubic_slope = static_cast<X>(3 * 0.044715);
    const X t = tanh(sqrt_2_over_pi * (x + cubic * x * x * x));
    const X inner_slope = sqrt_2_over_pi * (X(1) + cubic_slope * x * x);
    return dy * (X(0.5) * (X(1) + t) + X(0.5) * x * (X(1) - t * t) * inner_slope);
  }
};

// ---- Row gradients, given their row sums ---------------------------------------------------

// Softmax: dx = y * (dy - s), s = sum of dy * y over the row.
template <typename X>
AMPC_HD X softmax_grad(X dy, X y, X s) {
  return y * (dy - s);
}
// LogSoftmax: dx = dy - exp(y) * s, s = sum of dy over the row.
template <typename X>
AMPC_HD X log_softmax_grad(X dy, X y, X s) {
  return dy - exp(y) * s;
}
// LayerNormalization: dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale.
template <typename X>
AMPC_HD X layer_norm_grad(X g, X xhat, X inv_std, X g_mean, X g_xhat_mean) {
  return inv_std * (g - g_mean - xhat * g_xhat_mean);
}
// SoftmaxCrossEntropyLoss: dscore_c = factor * (exp(log_prob_c) - [c is the label]), factor the
// sample's loss gradient times its class weight.
template <typename X>
AMPC_HD X cross_entropy_grad(X factor, X log_prob, bool is_label) {
  return factor * (exp(log_prob) - (is_label ? X(1) : X(0)));
}

}  // namespace ampc::numeric
