// The index space of an element-wise op over broadcast operands, collapsed for walking: size-1
// output dims dropped, and neighbouring dims merged where every operand is contiguous across
// them, so equal shapes become one dim and most broadcasts two or three. Each operand's element
// stride per collapsed dim is 0 where it is broadcast. The CPU's BroadcastWalk and the CUDA
// launchers' Layout are both made from it.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"

namespace ampc::runtime {

template <size_t N>
struct BroadcastDims {
  std::vector<int64_t> dims;                    // collapsed output dims, outermost first
  std::vector<std::array<int64_t, N>> strides;  // per collapsed dim, each operand's stride
};

// `operands` broadcast to `out` (validated by shape inference). A single element is one dim of
// size 1.
template <size_t N>
BroadcastDims<N> collapse_broadcast(const Shape& out, const std::array<const Shape*, N>& operands) {
  std::array<std::vector<int64_t>, N> contiguous;
  for (size_t k = 0; k < N; ++k) {
    const Shape& shape = *operands[k];
    AMPC_CHECK(shape.size() <= out.size());
    contiguous[k].assign(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) contiguous[k][d - 1] = contiguous[k][d] * shape[d];
  }
  BroadcastDims<N> result;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    std::array<int64_t, N> strides{};
    for (size_t k = 0; k < N; ++k) {
      const Shape& shape = *operands[k];
      const size_t lead = out.size() - shape.size();
      strides[k] = (d < lead || shape[d - lead] == 1) ? 0 : contiguous[k][d - lead];
    }
    // Index (i, j) of neighbours (previous, this) is i * out[d] + j of the merged dimension
    // when every operand's previous stride is out[d] times this one.
    bool mergeable = !result.dims.empty();
    for (size_t k = 0; mergeable && k < N; ++k) {
      mergeable = result.strides.back()[k] == strides[k] * out[d];
    }
    if (mergeable) {
      result.dims.back() *= out[d];
      result.strides.back() = strides;
    } else {
      result.dims.push_back(out[d]);
      result.strides.push_back(strides);
    }
  }
  if (result.dims.empty()) {
    result.dims.push_back(1);
    result.strides.push_back(std::array<int64_t, N>{});
  }
  return result;
}

}  // namespace ampc::runtime
