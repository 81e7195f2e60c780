// The window of a gradient node of Conv, MaxPool or AveragePool (ampc domain; ops/conv_grad.cc):
// these carry explicit strides, pads (begins, then ends) and dilations, never auto_pad, and the
// shapes of X and dY give the input and output sizes (ceil_mode included).
#pragma once

#include <vector>

#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {

// The window for X's shape `x`, dY's shape `y` and the spatial `kernel`.
inline Window explicit_window(const Node& node, const Shape& x, const Shape& y,
                              const std::vector<int64_t>& kernel) {
  const size_t n = kernel.size();
  const size_t lead = 3 - n;
  const std::vector<int64_t> strides = ints_attr_or(node, "strides", n, 1);
  const std::vector<int64_t> dilations = ints_attr_or(node, "dilations", n, 1);
  const std::vector<int64_t> pads = ints_attr_or(node, "pads", 2 * n, 0);
  Window w;
  w.batch = x[0];
  w.channels = x[1];
  for (size_t i = 0; i < n; ++i) {
    const size_t d = lead + i;
    w.in[d] = x[2 + i];
    w.out[d] = y[2 + i];
    w.kernel[d] = kernel[i];
    w.stride[d] = strides[i];
    w.dilation[d] = dilations[i];
    w.pad_begin[d] = pads[i];
    w.pad_end[d] = pads[n + i];
  }
  return w;
}

}  // namespace ampc::runtime::cpu
