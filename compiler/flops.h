// The floating-point operations of the matrix work in a graph: what `ampc bench` divides by the
// step time for TFLOP/s and MFU. Counted as 2 per multiply-add of MatMul, Gemm, Conv,
// ConvTranspose, the convolution gradients (ampc.ConvGradData, ampc.ConvGradFilter) and fused
// attention (ampc.Attention, ampc.AttentionGrad: the products of the pattern they replace, not
// the scores the backward recomputes) from their static shapes; element-wise work, reductions and
// normalizations are not counted (the convention MFU figures use: what the matrix units could do).
#pragma once

#include <cstdint>

#include "compiler/ir.h"

namespace ampc {

// The node's matrix FLOPs; 0 for other ops and for shapes not known.
int64_t matrix_flops(const Node& node);

// The sum over the graph's nodes.
int64_t matrix_flops(const Graph& graph);

}  // namespace ampc
