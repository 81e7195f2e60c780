// CPU kernels for the activations of ops/activation.cc: Relu, LeakyRelu, PRelu, Sigmoid, Tanh,
// Erf, Gelu (exact, and approximate="tanh"), Softplus, Softsign, HardSigmoid, HardSwish, Elu,
// Selu, Celu, Mish, Sin, Cos, and Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh.
//
// Numerics: f16 and bf16 are computed in f32 and rounded once on store, f32 in f32, f64 in f64.
// The formulas are runtime/numeric.h's, which the CUDA kernels share; transcendental results are
// those of the C library's function for the compute type (std::exp, std::tanh, std::erf on float
// for f32, f16 and bf16). The formulas, in the order they compute:
//   Sigmoid(x) = 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) otherwise (no overflow
//                and full relative precision far into the negative tail)
//   Gelu(x)    = 0.5 * x * (1 + erf(x * (1/sqrt(2))))
//   Gelu(x)    = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   with "tanh"
//   Softplus(x) = max(x, 0) + log1p(exp(-|x|))   (ln(exp(x) + 1) without overflow)
//   HardSigmoid(x) = max(0, min(1, alpha * x + beta))
//   HardSwish(x)   = x * max(0, min(1, x * (1/6) + 1/2))
//   Softsign(x)    = x / (1 + |x|)
//   Elu(x)  = x > 0 ? x : alpha * expm1(x)
//   Selu(x) = gamma * (x > 0 ? x : alpha * expm1(x))
//   Celu(x) = x > 0 ? x : alpha * expm1(x / alpha)
//   Mish(x) = x * tanh(Softplus(x))
//   PRelu(x, slope) = x < 0 ? slope * x : x   (slope broadcast to x)
//   Sin, Cos, Tan, Asin, ... = std::sin, std::cos, std::tan, std::asin, ... (NaN outside the
//                  domain)
// with the constants rounded to the compute type. Relu, LeakyRelu and PRelu keep NaN a NaN.
#include <cmath>
#include <string>
#include <type_traits>

#include "compiler/strings.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/vector_math.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

template <typename T, typename Fn>
absl::Status activation(const KernelContext& ctx, Fn fn) {
  map_unary<T, T>(ctx.input(0), ctx.output(0), fn);
  return absl::OkStatus();
}

template <typename T>
absl::Status relu(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Relu{});
}

template <typename T>
absl::Status leaky_relu(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::LeakyRelu{ctx.node.float_attr("alpha")});
}

template <typename T>
absl::Status sigmoid(const KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float>) {
    map_unary_arrays<float>(ctx.input(0), ctx.output(0),
                            [](const float* x, float* y, int64_t n) { sigmoid_array(x, y, n); });
    return absl::OkStatus();
  } else {
    return activation<T>(ctx, numeric::Sigmoid{});
  }
}

template <typename T>
absl::Status tanh_kernel(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Tanh{});
}

template <typename T>
absl::Status erf_kernel(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Erf{});
}

template <typename T>
absl::Status gelu(const KernelContext& ctx) {
  const std::string& approximate = ctx.node.string_attr("approximate");
  if (approximate == "none") return activation<T>(ctx, numeric::GeluErf{});
  if (approximate == "tanh") return activation<T>(ctx, numeric::GeluTanh{});
  return absl::InvalidArgumentError(
      str_cat("Gelu approximate=\"", approximate, "\": expected \"none\" or \"tanh\""));
}

template <typename T>
absl::Status softplus(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Softplus{});
}

template <typename T>
absl::Status hard_sigmoid(const KernelContext& ctx) {
  return activation<T>(
      ctx, numeric::HardSigmoid{ctx.node.float_attr("alpha"), ctx.node.float_attr("beta")});
}

template <typename T>
absl::Status hard_swish(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::HardSwish{});
}

template <typename T>
absl::Status softsign(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Softsign{});
}

template <typename T>
absl::Status elu(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Elu{ctx.node.float_attr("alpha")});
}

template <typename T>
absl::Status selu(const KernelContext& ctx) {
  return activation<T>(ctx,
                       numeric::Selu{ctx.node.float_attr("alpha"), ctx.node.float_attr("gamma")});
}

template <typename T>
absl::Status celu(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Celu{ctx.node.float_attr("alpha")});
}

template <typename T>
absl::Status mish(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Mish{});
}

template <typename T>
absl::Status prelu(const KernelContext& ctx) {
  map_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), numeric::PRelu{});
  return absl::OkStatus();
}

template <typename T>
absl::Status sin_kernel(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Sin{});
}

template <typename T>
absl::Status cos_kernel(const KernelContext& ctx) {
  return activation<T>(ctx, numeric::Cos{});
}

template <typename T, typename Fn>
absl::Status math_kernel(const KernelContext& ctx) {
  return activation<T>(ctx, Fn{});
}

template <typename Make>
void add_activation(KernelRegistry& r, std::string op, Make make) {
  // Shape-preserving and element by element: the output may take over the input's buffer.
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def(std::move(op), {.in_place_operand = 0}), make);
}

void register_activation_kernels(KernelRegistry& r) {
  add_activation(r, "Relu", []<typename T>() { return &relu<T>; });
  add_activation(r, "LeakyRelu", []<typename T>() { return &leaky_relu<T>; });
  add_activation(r, "Sigmoid", []<typename T>() { return &sigmoid<T>; });
  add_activation(r, "Tanh", []<typename T>() { return &tanh_kernel<T>; });
  add_activation(r, "Erf", []<typename T>() { return &erf_kernel<T>; });
  add_activation(r, "Gelu", []<typename T>() { return &gelu<T>; });
  add_activation(r, "Softplus", []<typename T>() { return &softplus<T>; });
  add_activation(r, "HardSigmoid", []<typename T>() { return &hard_sigmoid<T>; });
  add_activation(r, "HardSwish", []<typename T>() { return &hard_swish<T>; });
  add_activation(r, "Softsign", []<typename T>() { return &softsign<T>; });
  add_activation(r, "Elu", []<typename T>() { return &elu<T>; });
  add_activation(r, "Selu", []<typename T>() { return &selu<T>; });
  add_activation(r, "Celu", []<typename T>() { return &celu<T>; });
  add_activation(r, "Mish", []<typename T>() { return &mish<T>; });
  // Y has X's shape, so it may take over X's buffer; the slope is read where it lies.
  add_activation(r, "PRelu", []<typename T>() { return &prelu<T>; });
  add_activation(r, "Sin", []<typename T>() { return &sin_kernel<T>; });
  add_activation(r, "Cos", []<typename T>() { return &cos_kernel<T>; });
  add_activation(r, "Tan", []<typename T>() { return &math_kernel<T, numeric::Tan>; });
  add_activation(r, "Asin", []<typename T>() { return &math_kernel<T, numeric::Asin>; });
  add_activation(r, "Acos", []<typename T>() { return &math_kernel<T, numeric::Acos>; });
  add_activation(r, "Atan", []<typename T>() { return &math_kernel<T, numeric::Atan>; });
  add_activation(r, "Sinh", []<typename T>() { return &math_kernel<T, numeric::Sinh>; });
  add_activation(r, "Cosh", []<typename T>() { return &math_kernel<T, numeric::Cosh>; });
  add_activation(r, "Asinh", []<typename T>() { return &math_kernel<T, numeric::Asinh>; });
  add_activation(r, "Acosh", []<typename T>() { return &math_kernel<T, numeric::Acosh>; });
  add_activation(r, "Atanh", []<typename T>() { return &math_kernel<T, numeric::Atanh>; });
}

static KernelRegistration kActivationKernels(&register_activation_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
