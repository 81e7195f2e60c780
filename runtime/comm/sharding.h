// The sharded optimizer's collectives (ops/collective.cc: ampc.ReduceScatter, ampc.Shard,
// ampc.AllGather) over host memory, for the CPU kernels. A tensor of n elements is cut for N
// ranks into N blocks of ceil(n / N) elements of its flattened values, zero-padded at the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ampc/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernel.h"

namespace ampc::runtime::comm {

inline int64_t shard_elements(int64_t elements, int64_t ranks) {
  return (elements + ranks - 1) / ranks;
}

// This rank's place (rank, size) in `group` (null: a group of one), which must have `ranks`
// ranks (the node's attribute; `node` names it in the error).
absl::StatusOr<std::pair<int, int>> place_in_group(const Communicator* group, int64_t ranks,
                                                   const Node& node);

// Workspace bytes of a ReduceScatter and an AllGather node.
int64_t reduce_scatter_bucket_bytes(const Node& node);
int64_t all_gather_bucket_bytes(const Node& node);

absl::Status reduce_scatter_on_host(const std::vector<TensorArg>& operands,
                                    const std::vector<TensorArg>& outputs,
                                    std::span<std::byte> bucket, Communicator* group, int ranks);
// ReduceScatter with nothing communicated (a `window` node inside an accumulation window): each
// output is this rank's block of its own operand, in the outputs' dtype (f32, or f64).
void own_blocks_on_host(const std::vector<TensorArg>& operands,
                        const std::vector<TensorArg>& outputs, int rank);
void shard_on_host(const TensorArg& operand, const TensorArg& output, int rank);
// Reads the first outputs.size() operands (the blocks), not the kept values after them.
absl::Status all_gather_on_host(const std::vector<TensorArg>& operands,
                                const std::vector<TensorArg>& outputs, std::span<std::byte> bucket,
                                Communicator* group, int ranks);
// An AllGather's operand each output may be written over (KernelDef::in_place_operand_of): its
// kept value, when the node has them.
int all_gather_kept_operand(const Node& node, int output);
// AllGather with nothing communicated (a `window` node inside an accumulation window): each
// output is its kept value (nothing to copy where the output is stored over it).
void kept_values_on_host(const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs);

}  // namespace ampc::runtime::comm
