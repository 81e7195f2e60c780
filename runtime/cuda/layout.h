// Host side of the element-wise launchers: the broadcast Layout of an op's operands, computed
// once at load. Dims are collapsed as the CPU's BroadcastWalk does (size-1 output dims dropped,
// neighbours merged where every operand is contiguous across them), so equal shapes become one
// contiguous run and most broadcasts two or three dims.
#pragma once

#include <array>

#include "compiler/dtype.h"
#include "compiler/status.h"
#include "compiler/strings.h"
#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {

template <int N>
absl::StatusOr<Layout<N>> broadcast_layout(const Shape& out,
                                           const std::array<const Shape*, N>& operands) {
  Layout<N> layout;
  layout.size = num_elements(out);
  layout.contiguous = true;
  for (const Shape* shape : operands) layout.contiguous &= *shape == out;
  std::array<Shape, N> contiguous;
  for (int k = 0; k < N; ++k) {
    const Shape& shape = *operands[k];
    AMPC_CHECK(shape.size() <= out.size());
    contiguous[k].assign(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) contiguous[k][d - 1] = contiguous[k][d] * shape[d];
  }
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    std::array<int64_t, N> stride{};
    for (int k = 0; k < N; ++k) {
      const Shape& shape = *operands[k];
      const size_t lead = out.size() - shape.size();
      stride[k] = (d < lead || shape[d - lead] == 1) ? 0 : contiguous[k][d - lead];
    }
    bool mergeable = !dims.empty();
    for (int k = 0; mergeable && k < N; ++k) mergeable = strides.back()[k] == stride[k] * out[d];
    if (mergeable) {
      dims.back() *= out[d];
      strides.back() = stride;
    } else {
      dims.push_back(out[d]);
      strides.push_back(stride);
    }
  }
  if (dims.empty()) {  // a single element
    dims.push_back(1);
    strides.push_back({});
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(
        str_cat("the broadcast of ", shape_to_string(out), " needs ", dims.size(),
                " dims after merging; the cuda kernels take ", kMaxRank));
  }
  layout.rank = static_cast<int>(dims.size());
  for (int d = 0; d < layout.rank; ++d) {
    layout.dims[d] = dims[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = strides[d][k];
  }
  return layout;
}

}  // namespace ampc::runtime::cuda
