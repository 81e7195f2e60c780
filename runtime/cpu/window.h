// The sliding window of Conv, MaxPool and AveragePool, resolved for one node: per spatial dim
// the input and output sizes, kernel, stride, dilation and the pads that auto_pad or `pads`
// give. 1-D and 2-D windows are widened to 3-D with leading size-1 dims (kernel 1, stride 1,
// no pads), which keeps row-major offsets unchanged, so the kernels are written once.
//
// Output sizes come from the node's inferred output type (ops/conv.cc computes them, ceil_mode
// included). Window o along a dim reads input positions o * stride - pad_begin + j * dilation
// for j in [0, kernel); positions outside [0, in) are padding.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "compiler/ir.h"

namespace ampc::runtime::cpu {

struct Window {
  using Dims = std::array<int64_t, 3>;

  int64_t batch = 0;     // N of X
  int64_t channels = 0;  // C of X
  Dims in = {1, 1, 1};
  Dims out = {1, 1, 1};
  Dims kernel = {1, 1, 1};
  Dims stride = {1, 1, 1};
  Dims dilation = {1, 1, 1};
  Dims pad_begin = {0, 0, 0};
  Dims pad_end = {0, 0, 0};

  static int64_t product(const Dims& d) { return d[0] * d[1] * d[2]; }
  int64_t in_size() const { return product(in); }
  int64_t out_size() const { return product(out); }
  int64_t kernel_size() const { return product(kernel); }
};

// An INTS attribute of `node`, or `count` copies of `fill` when the node does not set it.
inline std::vector<int64_t> ints_attr_or(const Node& node, std::string_view name, size_t count,
                                         int64_t fill) {
  const AttrValue* value = node.find_attr(name);
  if (value == nullptr) return std::vector<int64_t>(count, fill);
  return std::get<std::vector<int64_t>>(*value);
}

// The window of `node` (X is operand 0, Y output 0) for the given spatial kernel.
//
// SAME_UPPER / SAME_LOWER pad (out - 1) * stride + dilated kernel - in in total, clamped at 0
// (TensorFlow's rule; a stride larger than the kernel could make it negative), with the odd one
// at the end (UPPER) or the beginning (LOWER). VALID pads nothing.
//
// `x` and `y` are the shapes of the input and output images; gradient nodes (ampc domain) pass
// them explicitly, with explicit pads and no auto_pad attribute.
inline Window resolve_window(const Node& node, const Shape& x, const Shape& y,
                             const std::vector<int64_t>& kernel) {
  const size_t n = kernel.size();
  const size_t lead = 3 - n;
  const std::vector<int64_t> strides = ints_attr_or(node, "strides", n, 1);
  const std::vector<int64_t> dilations = ints_attr_or(node, "dilations", n, 1);
  const std::vector<int64_t> pads = ints_attr_or(node, "pads", 2 * n, 0);
  const AttrValue* auto_pad_attr = node.find_attr("auto_pad");
  const std::string auto_pad =
      auto_pad_attr != nullptr ? std::get<std::string>(*auto_pad_attr) : "NOTSET";
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
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, (w.out[d] - 1) * strides[i] + extent - w.in[d]);
      w.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w.pad_end[d] = total - w.pad_begin[d];
    } else if (auto_pad != "VALID") {
      w.pad_begin[d] = pads[i];
      w.pad_end[d] = pads[n + i];
    }
  }
  return w;
}

// The window of a forward node: X is operand 0, Y output 0.
inline Window resolve_window(const Node& node, const std::vector<int64_t>& kernel) {
  return resolve_window(node, node.operand(0)->shape(), node.output(0)->shape(), kernel);
}

// One tap of a window: its input position along each dim, its offset within a plane of X (-1
// when it lies outside X), and whether it lies inside the padded input.
struct Tap {
  int64_t i0, i1, i2;
  int64_t offset;
  bool in_padded;
};

// Calls visit(tap) for every tap of the window at output position (o0, o1, o2), in row-major
// order (the order the pooling kernels and their gradients take the first of equal maxima in).
template <typename Visit>
void for_each_tap(const Window& w, int64_t o0, int64_t o1, int64_t o2, Visit&& visit) {
  const int64_t start[3] = {o0 * w.stride[0] - w.pad_begin[0], o1 * w.stride[1] - w.pad_begin[1],
                            o2 * w.stride[2] - w.pad_begin[2]};
  auto inside = [&](int d, int64_t i) { return i >= 0 && i < w.in[d]; };
  auto in_padded = [&](int d, int64_t i) {
    return i >= -w.pad_begin[d] && i < w.in[d] + w.pad_end[d];
  };
  for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
    const int64_t i0 = start[0] + k0 * w.dilation[0];
    for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
      const int64_t i1 = start[1] + k1 * w.dilation[1];
      for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
        const int64_t i2 = start[2] + k2 * w.dilation[2];
        const bool is_inside = inside(0, i0) && inside(1, i1) && inside(2, i2);
        visit(Tap{i0, i1, i2, is_inside ? (i0 * w.in[1] + i1) * w.in[2] + i2 : int64_t{-1},
                  in_padded(0, i0) && in_padded(1, i1) && in_padded(2, i2)});
      }
    }
  }
}

// Max pooling's rule, forward and backward: `value` replaces the maximum so far when it is
// larger, or when it is NaN and the maximum is not (NaN propagates; of equal values the first
// stays).
template <typename C>
bool replaces_max(C value, C best) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(value)) return !std::isnan(best);
  }
  return value > best;
}

}  // namespace ampc::runtime::cpu
