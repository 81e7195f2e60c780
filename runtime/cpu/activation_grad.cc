// CPU kernels for the ampc-domain activation gradients of ops/activation.cc: ReluGrad,
// LeakyReluGrad and GeluGrad (exact, and approximate="tanh").
//
// Numerics: f16 and bf16 are computed in f32 and rounded once on store, f32 in f32, f64 in f64,
// with the C library's functions for the compute type and the constants rounded to it. The
// formulas (runtime/gradient_math.h, which the CUDA kernels run too; x the forward input, y its
// output):
//   ReluGrad      = y <= 0 ? 0 : dy                 (a NaN y passes dy, as in PyTorch)
//   LeakyReluGrad = x > 0 ? dy : dy * alpha
//   GeluGrad      = dy * (Phi + x * phi), Phi = 0.5 * (1 + erf(x * (1/sqrt(2)))),
//                   phi = (1/sqrt(2*pi)) * exp(-0.5 * x * x)
//   GeluGrad tanh = dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x)),
//                   t = tanh(k * (x + c * x * x * x)), k = sqrt(2/pi), c = 0.044715 (3 * c
//                   is one constant)
#include <cmath>
#include <string>

#include "compiler/strings.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/gradient_math.h"

namespace ampc::runtime::cpu {
namespace {

// dX = fn(dY, S) over same-shaped tensors of type T.
template <typename T, typename Fn>
absl::Status activation_grad(const KernelContext& ctx, Fn fn) {
  map_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), fn);
  return absl::OkStatus();
}

template <typename T>
absl::Status relu_grad(const KernelContext& ctx) {
  return activation_grad<T>(ctx, numeric::ReluGrad{});
}

template <typename T>
absl::Status leaky_relu_grad(const KernelContext& ctx) {
  return activation_grad<T>(ctx, numeric::LeakyReluGrad{ctx.node.float_attr("alpha")});
}

template <typename T>
absl::Status gelu_grad(const KernelContext& ctx) {
  const std::string& approximate = ctx.node.string_attr("approximate");
  if (approximate == "none") return activation_grad<T>(ctx, numeric::GeluErfGrad{});
  if (approximate == "tanh") return activation_grad<T>(ctx, numeric::GeluTanhGrad{});
  return absl::InvalidArgumentError(
      str_cat("GeluGrad approximate=\"", approximate, "\": expected \"none\" or \"tanh\""));
}

template <typename Make>
void add_activation_grad(KernelRegistry& r, std::string op, Make make) {
  // Element by element over dY's shape: dX may take over dY's buffer.
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def(std::move(op), {.in_place_operand = 0}), make);
}

void register_activation_grad_kernels(KernelRegistry& r) {
  add_activation_grad(r, "ReluGrad", []<typename T>() { return &relu_grad<T>; });
  add_activation_grad(r, "LeakyReluGrad", []<typename T>() { return &leaky_relu_grad<T>; });
  add_activation_grad(r, "GeluGrad", []<typename T>() { return &gelu_grad<T>; });
}

static KernelRegistration kActivationGradKernels(&register_activation_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
