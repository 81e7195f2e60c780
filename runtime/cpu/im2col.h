// im2col and col2im for the CPU convolutions (runtime/cpu/conv.cc, conv_grad.cc).
//
// Row r of the col matrix [C * kernel_size, out_size] belongs to channel r / kernel_size and
// kernel offset r % kernel_size; its entry at output position o is the input element that kernel
// offset reads at o (0 in padding). Along the innermost dim the positions that read inside the
// image are one range [lo, hi) of each output line, found once per line, so the copy (and
// col2im's sum) runs over that range without a bounds test per element, and the padding at the
// line's ends is filled or skipped whole. col2im adds each channel's rows in row order and each
// row's entries in output order (no input element is read twice by one row), whatever the
// thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {

// The output positions o in [0, out) whose input position o * stride - pad + offset lies in
// [0, in), as [lo, hi) (empty: lo == hi).
inline std::pair<int64_t, int64_t> inside_range(int64_t out, int64_t in, int64_t stride,
                                                int64_t pad, int64_t offset) {
  // o * stride >= pad - offset  and  o * stride < in + pad - offset.
  const auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); };
  const int64_t lo = std::clamp<int64_t>(ceil_div(pad - offset, stride), 0, out);
  const int64_t hi = std::clamp<int64_t>(ceil_div(in + pad - offset, stride), lo, out);
  return {lo, hi};
}

// Calls line(out_index, in_lo, lo, hi) for every output line (o0, o1) of col row `r`, in order:
// out_index is the line's first output position; [lo, hi) the o2 that read inside the image
// (empty when the whole line is padding); in_lo the offset within the channel's image of the
// element o2 = lo reads (o2 reads in_lo + (o2 - lo) * stride[2]).
template <typename Line>
void for_each_col_line(const Window& w, int64_t r, Line&& line) {
  const int64_t offset = r % w.kernel_size();
  const int64_t k0 = offset / (w.kernel[1] * w.kernel[2]);
  const int64_t k1 = offset / w.kernel[2] % w.kernel[1];
  const int64_t k2 = offset % w.kernel[2];
  const auto [lo, hi] =
      inside_range(w.out[2], w.in[2], w.stride[2], w.pad_begin[2], k2 * w.dilation[2]);
  int64_t out_index = 0;
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0) {
    const int64_t i0 = o0 * w.stride[0] - w.pad_begin[0] + k0 * w.dilation[0];
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1, out_index += w.out[2]) {
      const int64_t i1 = o1 * w.stride[1] - w.pad_begin[1] + k1 * w.dilation[1];
      const bool inside = i0 >= 0 && i0 < w.in[0] && i1 >= 0 && i1 < w.in[1];
      const int64_t i2 = lo * w.stride[2] - w.pad_begin[2] + k2 * w.dilation[2];
      line(out_index, inside ? (i0 * w.in[1] + i1) * w.in[2] + i2 : 0, lo, inside ? hi : lo);
    }
  }
}

// Images [first, first + count) of `x` [N, C, in...] as `count` col matrices
// [C * kernel_size, out_size], one after the other, in the compute type.
template <typename T>
void im2col(const T* x, const Window& w, gemm_t<T>* col, int64_t first = 0, int64_t count = 1) {
  using C = gemm_t<T>;
  const int64_t out_size = w.out_size();
  const int64_t rows = w.channels * w.kernel_size();
  const int64_t stride = w.stride[2];
  parallel_for(count * rows, std::max<int64_t>(1, 16384 / out_size),
               [&](int64_t begin, int64_t end) {
                 for (int64_t job = begin; job < end; ++job) {
                   const int64_t r = job % rows;
                   const T* image = x + (first + job / rows) * w.channels * w.in_size() +
                                    r / w.kernel_size() * w.in_size();
                   C* row = col + job * out_size;
                   for_each_col_line(w, r, [&](int64_t o, int64_t in_lo, int64_t lo, int64_t hi) {
                     C* dst = row + o;
                     std::fill_n(dst, lo, C(0));
                     const T* src = image + in_lo;
                     if constexpr (std::is_same_v<T, C>) {
                       if (stride == 1) {
                         std::copy_n(src, hi - lo, dst + lo);  // a memmove
                         std::fill(dst + hi, dst + w.out[2], C(0));
                         return;
                       }
                     }
                     if (stride == 1) {
                       for (int64_t j = 0; j < hi - lo; ++j) dst[lo + j] = load(src[j]);
                     } else {
                       for (int64_t j = 0; j < hi - lo; ++j) dst[lo + j] = load(src[j * stride]);
                     }
                     std::fill(dst + hi, dst + w.out[2], C(0));
                   });
                 }
               });
}

// How many images a convolution kernel treats at once: their col matrices take at most
// kColBudgetBytes (at least one image). Fixed by the shapes, so a kernel's workspace function
// and the kernel agree; the bits do not depend on it (each image's products and sums are the
// same whichever images share a batch).
inline constexpr int64_t kColBudgetBytes = int64_t{8} << 20;
inline int64_t images_per_batch(const Window& w, int64_t element_bytes) {
  const int64_t col_bytes = w.channels * w.kernel_size() * w.out_size() * element_bytes;
  return std::clamp<int64_t>(kColBudgetBytes / std::max<int64_t>(col_bytes, 1), 1,
                             std::max<int64_t>(w.batch, 1));
}

// dx [C, in...] = the sum, over the col entries that read each element, of col
// [C * kernel_size, out_size], for `count` images one after the other (cols and dxs). Channels
// of all the images run in parallel.
template <typename C>
void col2im(const C* col, const Window& w, C* dx, int64_t count = 1) {
  const int64_t out_size = w.out_size();
  const int64_t work = w.kernel_size() * out_size;
  const int64_t stride = w.stride[2];
  parallel_for(count * w.channels, std::max<int64_t>(1, 16384 / work),
               [&](int64_t begin, int64_t end) {
                 for (int64_t job = begin; job < end; ++job) {
                   const int64_t image_index = job / w.channels;
                   const int64_t c = job % w.channels;
                   C* image = dx + image_index * w.channels * w.in_size() + c * w.in_size();
                   const C* image_col = col + image_index * w.channels * work;
                   std::fill_n(image, w.in_size(), C(0));
                   for (int64_t r = c * w.kernel_size(); r < (c + 1) * w.kernel_size(); ++r) {
                     const C* row = image_col + r * out_size;
                     for_each_col_line(w, r, [&](int64_t o, int64_t in_lo, int64_t lo, int64_t hi) {
                       const C* src = row + o + lo;
                       C* dst = image + in_lo;
                       if (stride == 1) {
                         for (int64_t j = 0; j < hi - lo; ++j) dst[j] += src[j];
                       } else {
                         for (int64_t j = 0; j < hi - lo; ++j) dst[j * stride] += src[j];
                       }
                     });
                   }
                 }
               });
}

}  // namespace ampc::runtime::cpu
