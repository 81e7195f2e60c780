// ampc.AllReduce on CUDA (ops/collective.cc), staged through host memory: the operands are
// copied to the host, reduced there by the execution context's communicator
// (runtime/comm/all_reduce.h, the CPU kernel's code) and the means copied back, with the
// stream synchronized around the reduction. So a step with this node cannot be recorded as a
// CUDA graph; a device-side path through NCCL on the stream is what replaces this.
#include <memory>
#include <vector>

#include "runtime/comm/all_reduce.h"
#include "runtime/cuda/cuda_util.h"

namespace ampc::runtime::cuda {
namespace {

// Host copies of the node's operands and outputs, and the bucket, made once at load.
struct HostStaging final : KernelState {
  std::vector<std::vector<std::byte>> operands;
  std::vector<std::vector<std::byte>> outputs;
  std::vector<double> bucket;  // doubles: aligned for either bucket type
};

absl::StatusOr<std::unique_ptr<KernelState>> init_all_reduce(const KernelContext& ctx) {
  auto staging = std::make_unique<HostStaging>();
  for (const TensorArg& arg : ctx.inputs) staging->operands.emplace_back(arg.byte_size());
  for (const TensorArg& arg : ctx.outputs) staging->outputs.emplace_back(arg.byte_size());
  const int64_t bytes = comm::all_reduce_bucket_bytes(ctx.node);
  staging->bucket.resize(static_cast<size_t>((bytes + 7) / 8));
  return staging;
}

absl::Status all_reduce(const KernelContext& ctx) {
  auto& staging = static_cast<HostStaging&>(*ctx.state);
  const cudaStream_t stream = stream_of(ctx);
  std::vector<TensorArg> operands = ctx.inputs, outputs = ctx.outputs;
  for (size_t i = 0; i < operands.size(); ++i) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.operands[i].data(), operands[i].data,
                                              operands[i].byte_size(), cudaMemcpyDeviceToHost,
                                              stream));
    operands[i].data = staging.operands[i].data();
  }
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].data = staging.outputs[i].data();
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  AMPC_RETURN_IF_ERROR(comm::all_reduce_on_host(
      operands, outputs, int_attr_or(ctx.node, "mean", 0) != 0,
      std::span<std::byte>(reinterpret_cast<std::byte*>(staging.bucket.data()),
                           staging.bucket.size() * sizeof(double)),
      ctx.exec->communicator));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ctx.output(static_cast<int>(i)).data,
                                              staging.outputs[i].data(), outputs[i].byte_size(),
                                              cudaMemcpyHostToDevice, stream));
  }
  // The host copies are read again next call.
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

void register_cuda_collective_kernels(KernelRegistry& r) {
  r.add(cuda_ampc_kernel_def("AllReduce", kCudaFloatTypes, &all_reduce, &init_all_reduce));
}

static KernelRegistration kRegistration(&register_cuda_collective_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
