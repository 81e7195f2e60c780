// The gradients of the pooling ops (ampc domain, built by ops/conv_grad.cc): MaxPoolGrad(dY, X)
// and AveragePoolGrad(dY) -> dX, over 1, 2 and 3 spatial dims with strides, explicit pads,
// dilations and ceil_mode windows (whose sizes the shapes of X and dY carry).
//
// Both scatter each dY element back over its window. Windows overlap, so the work is split over
// (image, channel) planes: one thread owns a plane, sums into a compute-type buffer in output
// order (then window scan order), and rounds once on store. The bits do not depend on the thread
// count.
//
// MaxPoolGrad recomputes each window's maximum from X with the forward kernel's rule
// (runtime/cpu/pool.cc): taps inside X only, the first maximum in row-major scan order, a NaN
// wins (the first NaN). A window with no tap inside X passes nothing back.
// AveragePoolGrad adds dY / count to each tap inside X, with the forward's count: the taps inside
// X, or with count_include_pad the taps inside the padded input [-pad_begin, in + pad_end)
// (taps of a ceil_mode window beyond the end padding never count). dY / count is computed in the
// compute type, as the forward divides.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {
namespace {

// Runs body(plane, acc) for every (image, channel) plane in parallel, with acc a zeroed buffer of
// the plane's size, then rounds acc into the plane of dX.
template <typename T, typename Body>
void for_each_plane(const Window& w, T* dx, Body&& body) {
  using C = compute_t<T>;
  const int64_t work = w.out_size() * w.kernel_size() + w.in_size();
  parallel_for(w.batch * w.channels, std::max<int64_t>(1, 16384 / work),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> acc(w.in_size());
                 for (int64_t plane = begin; plane < end; ++plane) {
                   std::fill(acc.begin(), acc.end(), C(0));
                   body(plane, acc.data());
                   T* out = dx + plane * w.in_size();
                   for (int64_t i = 0; i < w.in_size(); ++i) out[i] = store<T>(acc[i]);
                 }
               });
}

template <typename T>
absl::Status max_pool_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Window w = resolve_window(ctx.node, ctx.input(1).shape(), ctx.input(0).shape(),
                                  ctx.node.ints_attr("kernel_shape"));
  const T* dy = ctx.input(0).in<T>().data();
  const T* x = ctx.input(1).in<T>().data();
  for_each_plane(w, ctx.output(0).out<T>().data(), [&](int64_t plane, C* acc) {
    const T* xp = x + plane * w.in_size();
    const T* dyp = dy + plane * w.out_size();
    int64_t out = 0;
    for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
      for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
        for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++out) {
          int64_t best_offset = -1;
          C best = C(0);
          for_each_tap(w, o0, o1, o2, [&](const Tap& tap) {
            if (tap.offset < 0) return;
            const C value = load(xp[tap.offset]);
            if (best_offset >= 0 && !replaces_max(value, best)) return;
            best = value;
            best_offset = tap.offset;
          });
          if (best_offset >= 0) acc[best_offset] += load(dyp[out]);
        }
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status average_pool_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Window w = resolve_window(ctx.node, ctx.output(0).shape(), ctx.input(0).shape(),
                                  ctx.node.ints_attr("kernel_shape"));
  const bool count_pad = ctx.node.int_attr("count_include_pad") != 0;
  const T* dy = ctx.input(0).in<T>().data();
  for_each_plane(w, ctx.output(0).out<T>().data(), [&](int64_t plane, C* acc) {
    const T* dyp = dy + plane * w.out_size();
    int64_t out = 0;
    for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
      for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
        for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++out) {
          int64_t count = 0;
          for_each_tap(w, o0, o1, o2, [&](const Tap& tap) {
            count += tap.offset >= 0 || (count_pad && tap.in_padded);
          });
          if (count == 0) continue;  // no tap inside X either
          const C share = load(dyp[out]) / static_cast<C>(count);
          for_each_tap(w, o0, o1, o2, [&](const Tap& tap) {
            if (tap.offset >= 0) acc[tap.offset] += share;
          });
        }
      }
    }
  });
  return absl::OkStatus();
}

void register_pool_grad_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(r, ampc_kernel_def("MaxPoolGrad"),
                                                []<typename T>() { return &max_pool_grad<T>; });
  add_kernels<float, double, Float16, BFloat16>(r, ampc_kernel_def("AveragePoolGrad"),
                                                []<typename T>() { return &average_pool_grad<T>; });
}

static KernelRegistration kPoolGradKernels(&register_pool_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
