// ampc.AllReduce over host memory; runtime/comm/all_reduce.h.
#include "runtime/comm/all_reduce.h"

#include "ampc/float_types.h"
#include "compiler/strings.h"

namespace ampc::runtime::comm {
namespace {

template <typename C>
absl::Status reduce(const std::vector<TensorArg>& operands, const std::vector<TensorArg>& outputs,
                    bool mean, C* bucket, Communicator* comm) {
  int64_t total = 0;
  for (const TensorArg& operand : operands) {
    for (int64_t i = 0; i < operand.num_elements(); ++i)
      bucket[total + i] = read_float_element<C>(operand, i);
    total += operand.num_elements();
  }
  const int size = comm == nullptr ? 1 : comm->size();
  if (size > 1) {
    AMPC_RETURN_IF_ERROR(comm->all_reduce_now(
        bucket, total, std::is_same_v<C, double> ? DType::kF64 : DType::kF32, ReduceOp::kSum));
  }
  const C inverse = static_cast<C>(1.0 / size);
  int64_t at = 0;
  for (const TensorArg& output : outputs) {
    C* out = static_cast<C*>(output.data);
    for (int64_t i = 0; i < output.num_elements(); ++i) {
      out[i] = mean ? bucket[at + i] * inverse : bucket[at + i];
    }
    at += output.num_elements();
  }
  return absl::OkStatus();
}

}  // namespace

int64_t all_reduce_bucket_bytes(const Node& node) {
  int64_t elements = 0;
  for (const Value* operand : node.operands()) elements += operand->type().num_elements();
  const bool f64 = node.num_operands() > 0 && node.operand(0)->dtype() == DType::kF64;
  return elements * static_cast<int64_t>(f64 ? sizeof(double) : sizeof(float));
}

absl::Status all_reduce_on_host(const std::vector<TensorArg>& operands,
                                const std::vector<TensorArg>& outputs, bool mean,
                                std::span<std::byte> bucket, Communicator* comm) {
  int64_t elements = 0;
  for (const TensorArg& operand : operands) elements += operand.num_elements();
  const bool f64 = !operands.empty() && operands[0].dtype() == DType::kF64;
  AMPC_CHECK(static_cast<int64_t>(bucket.size()) >=
             elements * static_cast<int64_t>(f64 ? sizeof(double) : sizeof(float)));
  if (f64) {
    return reduce(operands, outputs, mean, reinterpret_cast<double*>(bucket.data()), comm);
  }
  return reduce(operands, outputs, mean, reinterpret_cast<float*>(bucket.data()), comm);
}

}  // namespace ampc::runtime::comm
