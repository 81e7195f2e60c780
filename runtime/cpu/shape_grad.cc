// CPU kernels for the gradients of ops/dropout.cc: DropoutGrad (ampc domain).
//
// DropoutGrad computes as the Dropout kernel (runtime/cpu/shape.cc) does: in training, each
// element of dY times (mask ? 1/(1-ratio) : 0) in the compute type (f32 for f16/bf16), rounded
// once; so a gradient through a kept element is scaled by exactly the factor the forward used.
// Outside training (no training_mode, or false, or ratio 0) dX is dY, bit for bit.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

// dX = dY * (mask ? 1/(1-ratio) : 0) in training, else dY. Operands: dY, mask, ratio (optional,
// else the `ratio` attribute), training_mode (optional, absent means false).
template <typename T>
absl::Status dropout_grad_kernel(const KernelContext& ctx) {
  const double ratio =
      ctx.has_input(2) ? read_as<double>(ctx.input(2), 0) : ctx.node.float_attr("ratio");
  const bool training = ctx.has_input(3) && ctx.input(3).in<uint8_t>()[0] != 0;
  const int64_t n = ctx.input(0).num_elements();
  const T* dy = ctx.input(0).in<T>().data();
  T* dx = ctx.output(0).out<T>().data();
  if (!training || ratio == 0) {
    if (dx != dy) std::memcpy(dx, dy, ctx.output(0).byte_size());
    return absl::OkStatus();
  }
  if (!(ratio > 0 && ratio < 1)) {
    return absl::InvalidArgumentError(str_cat("ratio ", ratio, " is not in [0, 1)"));
  }
  const compute_t<T> scale = static_cast<compute_t<T>>(1.0 / (1.0 - ratio));
  const uint8_t* mask = ctx.input(1).in<uint8_t>().data();
  parallel_for(n, kGrainElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      dx[i] = store<T>(load(dy[i]) * (mask[i] != 0 ? scale : compute_t<T>(0)));
    }
  });
  return absl::OkStatus();
}

void register_shape_grad_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("DropoutGrad", {.in_place_operand = 0}),
      []<typename T>() { return &dropout_grad_kernel<T>; });
}

static KernelRegistration kShapeGradKernels(&register_shape_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
