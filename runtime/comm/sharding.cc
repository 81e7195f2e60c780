// The sharded optimizer's collectives over host memory; runtime/comm/sharding.h.
#include "runtime/comm/sharding.h"

#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "runtime/comm/all_reduce.h"

namespace ampc::runtime::comm {
namespace {

bool is_f64(const Node& node) {
  return node.num_operands() > 0 && node.operand(0)->dtype() == DType::kF64;
}

// The sum of the outputs' elements (each one rank's block).
int64_t block_elements(const Node& node) {
  int64_t elements = 0;
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i)) elements += node.output(i)->type().num_elements();
  }
  return elements;
}

// The send buffer holds `ranks` blocks of `block` elements; block r holds every operand's block
// r in operand order, so one reduce-scatter leaves this rank's blocks of every operand in order.
template <typename C>
absl::Status reduce_scatter(const std::vector<TensorArg>& operands,
                            const std::vector<TensorArg>& outputs, C* bucket, Communicator* group,
                            int ranks) {
  int64_t block = 0;
  for (const TensorArg& output : outputs) block += output.num_elements();
  C* send = bucket;
  C* received = bucket + block * ranks;
  int64_t offset = 0;
  for (size_t k = 0; k < operands.size(); ++k) {
    const int64_t n = operands[k].num_elements();
    const int64_t shard = outputs[k].num_elements();
    for (int r = 0; r < ranks; ++r) {
      C* to = send + r * block + offset;
      for (int64_t j = 0; j < shard; ++j) {
        const int64_t i = r * shard + j;
        to[j] = i < n ? read_float_element<C>(operands[k], i) : C(0);
      }
    }
    offset += shard;
  }
  const DType wire = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
  if (ranks > 1) {
    AMPC_RETURN_IF_ERROR(
        group->reduce_scatter(send, received, block, wire, ReduceOp::kSum)->wait());
  } else {
    std::copy(send, send + block, received);
  }
  offset = 0;
  for (const TensorArg& output : outputs) {
    std::copy(received + offset, received + offset + output.num_elements(),
              static_cast<C*>(output.data));
    offset += output.num_elements();
  }
  return absl::OkStatus();
}

template <typename C>
void own_blocks(const std::vector<TensorArg>& operands, const std::vector<TensorArg>& outputs,
                int rank) {
  for (size_t k = 0; k < operands.size(); ++k) {
    const int64_t n = operands[k].num_elements();
    const int64_t shard = outputs[k].num_elements();
    C* out = static_cast<C*>(outputs[k].data);
    for (int64_t j = 0; j < shard; ++j) {
      const int64_t i = rank * shard + j;
      out[j] = i < n ? read_float_element<C>(operands[k], i) : C(0);
    }
  }
}

}  // namespace

void own_blocks_on_host(const std::vector<TensorArg>& operands,
                        const std::vector<TensorArg>& outputs, int rank) {
  if (!outputs.empty() && outputs[0].dtype() == DType::kF64) {
    own_blocks<double>(operands, outputs, rank);
  } else {
    own_blocks<float>(operands, outputs, rank);
  }
}

absl::StatusOr<std::pair<int, int>> place_in_group(const Communicator* group, int64_t ranks,
                                                   const Node& node) {
  const int size = group == nullptr ? 1 : group->size();
  if (size != ranks) {
    return absl::FailedPreconditionError(
        str_cat(node.describe(), " was made for ", ranks, " ranks; this group has ", size));
  }
  return std::pair<int, int>(group == nullptr ? 0 : group->rank(), size);
}

int64_t reduce_scatter_bucket_bytes(const Node& node) {
  const int64_t ranks = node.int_attr("ranks");
  return block_elements(node) * (ranks + 1) *
         static_cast<int64_t>(is_f64(node) ? sizeof(double) : sizeof(float));
}

int64_t all_gather_bucket_bytes(const Node& node) {
  int64_t bytes = 0;
  for (int i = 0; i < node.num_outputs(); ++i) bytes += node.operand(i)->type().byte_size();
  return bytes * (node.int_attr("ranks") + 1);
}

int all_gather_kept_operand(const Node& node, int output) {
  return node.num_operands() == 2 * node.num_outputs() ? node.num_outputs() + output : -1;
}

void kept_values_on_host(const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs) {
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorArg& kept = operands[outputs.size() + k];
    if (kept.data != outputs[k].data) std::memcpy(outputs[k].data, kept.data, kept.byte_size());
  }
}

absl::Status reduce_scatter_on_host(const std::vector<TensorArg>& operands,
                                    const std::vector<TensorArg>& outputs,
                                    std::span<std::byte> bucket, Communicator* group, int ranks) {
  if (!operands.empty() && operands[0].dtype() == DType::kF64) {
    return reduce_scatter(operands, outputs, reinterpret_cast<double*>(bucket.data()), group,
                          ranks);
  }
  return reduce_scatter(operands, outputs, reinterpret_cast<float*>(bucket.data()), group, ranks);
}

void shard_on_host(const TensorArg& operand, const TensorArg& output, int rank) {
  const int64_t size = dtype_size(operand.dtype());
  const int64_t shard = output.num_elements();
  const int64_t first = std::min(operand.num_elements(), rank * shard);
  const int64_t copied = std::min(operand.num_elements() - first, shard);
  auto* out = static_cast<std::byte*>(output.data);
  std::memcpy(out, static_cast<const std::byte*>(operand.data) + first * size, copied * size);
  std::memset(out + copied * size, 0, (shard - copied) * size);
}

absl::Status all_gather_on_host(const std::vector<TensorArg>& operands,
                                const std::vector<TensorArg>& outputs, std::span<std::byte> bucket,
                                Communicator* group, int ranks) {
  // Each rank's blocks of every operand, in operand order, as bytes.
  const std::span<const TensorArg> blocks(operands.data(), outputs.size());
  int64_t block = 0;
  for (const TensorArg& operand : blocks) block += operand.byte_size();
  std::byte* send = bucket.data();
  std::byte* gathered = send + block;
  int64_t offset = 0;
  for (const TensorArg& operand : blocks) {
    std::memcpy(send + offset, operand.data, operand.byte_size());
    offset += operand.byte_size();
  }
  if (ranks > 1) {
    AMPC_RETURN_IF_ERROR(group->all_gather(send, gathered, block, DType::kU8)->wait());
  } else {
    std::memcpy(gathered, send, block);
  }
  offset = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const int64_t shard_bytes = blocks[k].byte_size();
    int64_t left = outputs[k].byte_size();
    auto* out = static_cast<std::byte*>(outputs[k].data);
    for (int r = 0; r < ranks && left > 0; ++r) {
      const int64_t take = std::min(shard_bytes, left);
      std::memcpy(out, gathered + r * block + offset, take);
      out += take;
      left -= take;
    }
    offset += shard_bytes;
  }
  return absl::OkStatus();
}

}  // namespace ampc::runtime::comm
