// ampc.AllReduce (ops/collective.cc) over host memory, for the CPU kernel and for the CUDA
// kernel's host-staged path: one bucket holds every operand converted to f32 (f64 for f64
// operands) in operand order, the communicator sums it over the ranks, and each output element
// is the sum (with `mean`, the sum times 1 / size rounded once).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "ampc/float_types.h"
#include "ampc/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernel.h"

namespace ampc::runtime::comm {

// Element i of a float operand (f16, bf16, f32 or f64), exactly, as C (float or double).
template <typename C>
C read_float_element(const TensorArg& arg, int64_t i) {
  switch (arg.dtype()) {
    case DType::kF16:
      return static_cast<C>(static_cast<float>(static_cast<const Float16*>(arg.data)[i]));
    case DType::kBF16:
      return static_cast<C>(static_cast<float>(static_cast<const BFloat16*>(arg.data)[i]));
    case DType::kF64:
      return static_cast<C>(static_cast<const double*>(arg.data)[i]);
    default:
      return static_cast<C>(static_cast<const float*>(arg.data)[i]);
  }
}

// Whether `ctx`'s node is a `window` collective (AllReduce, ReduceScatter, AllGather) on a run
// inside an accumulation window (ops/collective.cc): it then communicates nothing and gives each
// rank's own values (AllGather: its kept values).
inline bool keeps_own_values(const KernelContext& ctx) {
  return ctx.inside_window && int_attr_or(ctx.node, "window", 0) != 0;
}

// The bytes of the bucket for `node`'s operands.
int64_t all_reduce_bucket_bytes(const Node& node);

// `operands` and `outputs` in host memory; `bucket` of at least their elements, aligned for
// doubles. `comm` null: a group of one.
absl::Status all_reduce_on_host(const std::vector<TensorArg>& operands,
                                const std::vector<TensorArg>& outputs, bool mean,
                                std::span<std::byte> bucket, Communicator* comm);

}  // namespace ampc::runtime::comm
