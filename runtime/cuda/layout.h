// Host side of the element-wise launchers: the broadcast Layout of an op's operands, computed
// once at load from runtime/broadcast_dims.h's collapsed dims (the CPU's BroadcastWalk walks the
// same ones).
#pragma once

#include <array>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "compiler/strings.h"
#include "runtime/broadcast_dims.h"
#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {

template <int N>
absl::StatusOr<Layout<N>> broadcast_layout(const Shape& out,
                                           const std::array<const Shape*, N>& operands) {
  const BroadcastDims<N> collapsed = collapse_broadcast<N>(out, operands);
  const size_t rank = collapsed.dims.size();
  if (rank > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat("the broadcast of ", shape_to_string(out), " needs ",
                                            rank, " dims after merging; the cuda kernels take ",
                                            kMaxRank));
  }
  Layout<N> layout;
  layout.size = num_elements(out);
  layout.contiguous = true;
  for (const Shape* shape : operands) layout.contiguous &= *shape == out;
  layout.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    layout.dims[d] = collapsed.dims[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = collapsed.strides[d][k];
  }
  return layout;
}

}  // namespace ampc::runtime::cuda
