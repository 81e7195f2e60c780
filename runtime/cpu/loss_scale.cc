// CPU kernels for ampc.ScaleLoss and ampc.LossScaleUpdate (ops/loss_scale.cc).
//
// LossScaleUpdate follows torch._amp_update_scale_'s CPU kernel (and, with hysteresis,
// Megatron-LM's DynamicGradScaler.update): the factors are doubles
// (Python floats; float attributes read as the decimal they spell), the scale a float, so
// `scale * factor` is computed in double and rounded once to float; growth that gives inf is
// not applied.
#include <cmath>

#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

template <typename T>
absl::Status scale_loss(const KernelContext& ctx) {
  ctx.output(0).out<T>()[0] = ctx.input(0).in<T>()[0] * ctx.input(1).in<T>()[0];
  return absl::OkStatus();
}

absl::Status loss_scale_update(const KernelContext& ctx) {
  float scale = ctx.input(0).in<float>()[0];
  int64_t tracker = ctx.input(1).in<int64_t>()[0];
  const bool found_inf = ctx.input(2).in<uint8_t>()[0] != 0;
  const bool hysteresis = ctx.has_input(3);
  int64_t left = hysteresis ? ctx.input(3).in<int64_t>()[0] : 1;
  const int64_t interval = ctx.node.int_attr("growth_interval");
  if (found_inf) {
    tracker = 0;
    if (--left <= 0) {
      scale = static_cast<float>(scale * decimal_attr(ctx.node, "backoff_factor"));
      scale = std::max(scale, static_cast<float>(decimal_attr(ctx.node, "min_scale")));
    }
  } else if (tracker + 1 == interval) {
    const float grown = static_cast<float>(scale * decimal_attr(ctx.node, "growth_factor"));
    if (std::isfinite(grown)) scale = grown;
    tracker = 0;
    left = ctx.node.int_attr("hysteresis");
  } else {
    tracker = tracker + 1;
  }
  ctx.output(0).out<float>()[0] = scale;
  ctx.output(1).out<int64_t>()[0] = tracker;
  if (hysteresis) ctx.output(2).out<int64_t>()[0] = left;
  return absl::OkStatus();
}

void register_loss_scale_kernels(KernelRegistry& r) {
  add_kernels<float, double>(r, ampc_kernel_def("ScaleLoss"),
                             []<typename T>() { return &scale_loss<T>; });
  add_kernels<float>(r, ampc_kernel_def("LossScaleUpdate"),
                     []<typename T>() { return &loss_scale_update; });
}

static KernelRegistration kReg(&register_loss_scale_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
