// MaxPool (with the optional Indices output), AveragePool and GlobalAveragePool over 1, 2 and 3
// spatial dims. Parallel over the output rows of each (image, channel) plane; every output
// element is computed by one thread, scanning its window in row-major order.
//
// MaxPool: the max over the window's taps inside X (padding never wins); the first maximum in
// scan order is taken, and a NaN propagates (the first NaN wins), as in PyTorch. The value is
// copied, so it is exact in every dtype. Indices are flat offsets into X, row-major, or with
// storage_order=1 column-major within each (image, channel) plane, as the ONNX reference does.
// A window with no tap inside X (pads at least the kernel extent) gives the lowest value, -1.
//
// AveragePool: the taps inside X are summed in scan order in the compute type (f32 for
// f16/bf16), then divided once by the count: the taps inside X, or with count_include_pad the
// taps inside the padded input [-pad_begin, in + pad_end). Taps of a ceil_mode window that fall
// beyond the end padding are never counted (PyTorch's rule). f16/bf16 round once.
//
// GlobalAveragePool: the plane summed in order in the compute type, divided by its size.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {
namespace {

// The identity of max: -inf for floats, the smallest value for integers.
template <typename T>
T lowest_value() {
  if constexpr (is_float_v<T>) {
    return store<T>(-std::numeric_limits<compute_t<T>>::infinity());
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

// Runs body(plane, o0) for every output row of every (image, channel) plane, in parallel.
template <typename Body>
void for_each_output_row(const Window& w, Body&& body) {
  const int64_t row_work = w.out[1] * w.out[2] * w.kernel_size();
  parallel_for(w.batch * w.channels * w.out[0], std::max<int64_t>(1, 8192 / (row_work + 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t item = begin; item < end; ++item) {
                   body(item / w.out[0], item % w.out[0]);
                 }
               });
}

template <typename T>
absl::Status max_pool(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Window w = resolve_window(ctx.node, ctx.node.ints_attr("kernel_shape"));
  const bool column_major = ctx.node.int_attr("storage_order") == 1;
  const T* x = ctx.input(0).in<T>().data();
  T* y = ctx.output(0).out<T>().data();
  int64_t* indices = ctx.has_output(1) ? ctx.output(1).out<int64_t>().data() : nullptr;
  const T lowest = lowest_value<T>();
  for_each_output_row(w, [&](int64_t plane, int64_t o0) {
    const T* xp = x + plane * w.in_size();
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        bool found = false;
        C best = C(0);
        int64_t best_offset = -1, best_index = -1;
        for_each_tap(w, o0, o1, o2, [&](const Tap& tap) {
          if (tap.offset < 0) return;
          const C value = load(xp[tap.offset]);
          if (found && !replaces_max(value, best)) return;
          found = true;
          best = value;
          best_offset = tap.offset;
          best_index =
              column_major ? tap.i0 + tap.i1 * w.in[0] + tap.i2 * w.in[0] * w.in[1] : tap.offset;
        });
        const int64_t out = (plane * w.out[0] + o0) * w.out[1] * w.out[2] + o1 * w.out[2] + o2;
        y[out] = found ? xp[best_offset] : lowest;
        if (indices) indices[out] = found ? plane * w.in_size() + best_index : -1;
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status average_pool(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Window w = resolve_window(ctx.node, ctx.node.ints_attr("kernel_shape"));
  const bool count_pad = ctx.node.int_attr("count_include_pad") != 0;
  const T* x = ctx.input(0).in<T>().data();
  T* y = ctx.output(0).out<T>().data();
  for_each_output_row(w, [&](int64_t plane, int64_t o0) {
    const T* xp = x + plane * w.in_size();
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        C sum = C(0);
        int64_t count = 0;
        for_each_tap(w, o0, o1, o2, [&](const Tap& tap) {
          if (tap.offset >= 0) {
            sum += load(xp[tap.offset]);
            ++count;
          } else if (count_pad && tap.in_padded) {
            ++count;
          }
        });
        const int64_t out = (plane * w.out[0] + o0) * w.out[1] * w.out[2] + o1 * w.out[2] + o2;
        y[out] =
            store<T>(count > 0 ? sum / static_cast<C>(count) : std::numeric_limits<C>::quiet_NaN());
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status global_average_pool(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Shape& shape = ctx.input(0).shape();
  const int64_t planes = shape[0] * shape[1];
  const int64_t plane_size = ctx.input(0).num_elements() / std::max<int64_t>(planes, 1);
  const T* x = ctx.input(0).in<T>().data();
  T* y = ctx.output(0).out<T>().data();
  parallel_for(planes, std::max<int64_t>(1, 16384 / (plane_size + 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t p = begin; p < end; ++p) {
                   C sum = C(0);
                   for (int64_t i = 0; i < plane_size; ++i) sum += load(x[p * plane_size + i]);
                   y[p] = store<T>(sum / static_cast<C>(plane_size));
                 }
               });
  return absl::OkStatus();
}

void register_pool_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16, int8_t, uint8_t>(
      r, kernel_def("MaxPool"), []<typename T>() { return &max_pool<T>; });
  add_kernels<float, double, Float16, BFloat16>(r, kernel_def("AveragePool"),
                                                []<typename T>() { return &average_pool<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("GlobalAveragePool"), []<typename T>() { return &global_average_pool<T>; });
}

static KernelRegistration kPoolKernels(&register_pool_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
