// Host side of the classification losses' CUDA kernels and their gradients: the [N, C, D] view
// of a loss node (runtime/cuda/reduce_kernels.h's ClassLoss), read at load from the scores'
// shape, the labels' type and the node's ignore_index and reduction, as the CPU reads them.
#pragma once

#include "ampc/status.h"
#include "runtime/cuda/reduce_kernels.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cuda {

// `scores` is [N, C, d1, ...]; operand `labels` of `ctx` holds i64 or i32 labels.
absl::StatusOr<ClassLoss> class_loss(const KernelContext& ctx, const Shape& scores, int labels);

}  // namespace ampc::runtime::cuda
