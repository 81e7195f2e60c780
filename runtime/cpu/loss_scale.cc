// CPU kernels for ampc.ScaleLoss, ampc.LossScaleUpdate and ampc.UnscaleGradients
// (ops/loss_scale.cc).
//
// LossScaleUpdate is numeric::LossScaleRule (runtime/numeric.h, shared with CUDA):
// torch._amp_update_scale_'s rule, its factors read as the decimal the float attributes spell.
#include <cmath>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

template <typename T>
absl::Status scale_loss(const KernelContext& ctx) {
  ctx.output(0).out<T>()[0] = ctx.input(0).in<T>()[0] * ctx.input(1).in<T>()[0];
  return absl::OkStatus();
}

absl::Status loss_scale_update(const KernelContext& ctx) {
  const numeric::LossScaleRule rule = loss_scale_rule(ctx.node);
  float scale = ctx.input(0).in<float>()[0];
  int64_t tracker = ctx.input(1).in<int64_t>()[0];
  const bool found_inf = ctx.input(2).in<uint8_t>()[0] != 0;
  const bool hysteresis = ctx.has_input(3);
  int64_t left = hysteresis ? ctx.input(3).in<int64_t>()[0] : 1;
  rule.update(found_inf, scale, tracker, left);
  ctx.output(0).out<float>()[0] = scale;
  ctx.output(1).out<int64_t>()[0] = tracker;
  if (hysteresis) ctx.output(2).out<int64_t>()[0] = left;
  return absl::OkStatus();
}

// u = C(g) * inverse_scale, rounded once to C (f32; f64 for the tests' references); found_inf
// if any u is not finite.
template <typename C, typename T>
bool unscale(const TensorArg& in, const TensorArg& out, C inverse) {
  const std::span<const T> g = in.in<T>();
  const std::span<C> u = out.out<C>();
  bool found = false;
  for (size_t i = 0; i < g.size(); ++i) {
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      u[i] = static_cast<C>(static_cast<float>(g[i])) * inverse;  // exact in float
    } else {
      u[i] = static_cast<C>(g[i]) * inverse;
    }
    found |= !std::isfinite(u[i]);
  }
  return found;
}

template <typename C>
absl::Status unscale_gradients(const KernelContext& ctx) {
  const C inverse = ctx.input(0).in<C>()[0];
  bool found = false;
  for (int t = 1; t < static_cast<int>(ctx.inputs.size()); ++t) {
    const TensorArg& in = ctx.input(t);
    const TensorArg& out = ctx.output(t);
    switch (in.dtype()) {
      case DType::kF16:
        found |= unscale<C, Float16>(in, out, inverse);
        break;
      case DType::kBF16:
        found |= unscale<C, BFloat16>(in, out, inverse);
        break;
      case DType::kF64:
        found |= unscale<C, double>(in, out, inverse);
        break;
      default:
        found |= unscale<C, float>(in, out, inverse);
    }
  }
  ctx.output(0).out<uint8_t>()[0] = found ? 1 : 0;
  return absl::OkStatus();
}

void register_loss_scale_kernels(KernelRegistry& r) {
  add_kernels<float, double>(r, ampc_kernel_def("ScaleLoss"),
                             []<typename T>() { return &scale_loss<T>; });
  // Scale, tracker and hysteresis count over theirs: all are read before any is written.
  add_kernels<float>(r, ampc_kernel_def("LossScaleUpdate", {.in_place_operands = {0, 1, 3}}),
                     []<typename T>() { return &loss_scale_update; });
  add_kernels<float, double>(r, ampc_kernel_def("UnscaleGradients"),
                             []<typename T>() { return &unscale_gradients<T>; });
}

static KernelRegistration kLossScaleKernels(&register_loss_scale_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
