// ampc.AllReduce, ReduceScatter, Shard and AllGather on CUDA (ops/collective.cc), staged through
// host memory: the operands are copied to the host, the CPU kernels' code runs there with the
// execution context's communicator (runtime/comm/all_reduce.h, runtime/comm/sharding.h) and the
// results are copied back, with the stream synchronized around it. So a step with this node cannot
// be recorded as a CUDA graph; a device-side path through NCCL on the stream is what replaces this.
#include <memory>
#include <span>
#include <vector>

#include "runtime/comm/all_reduce.h"
#include "runtime/comm/sharding.h"
#include "runtime/cuda/cuda_util.h"

namespace ampc::runtime::cuda {
namespace {

// Host copies of the node's operands and outputs, and the bucket, made once at load.
struct HostStaging final : KernelState {
  std::vector<std::vector<std::byte>> operands;
  std::vector<std::vector<std::byte>> outputs;
  std::vector<double> bucket;  // doubles: aligned for either bucket type
  std::span<std::byte> bucket_bytes() {
    return {reinterpret_cast<std::byte*>(bucket.data()), bucket.size() * sizeof(double)};
  }
};

template <WorkspaceFn bucket_bytes>
absl::StatusOr<std::unique_ptr<KernelState>> init_staging(const KernelContext& ctx) {
  auto staging = std::make_unique<HostStaging>();
  for (const TensorArg& arg : ctx.inputs) staging->operands.emplace_back(arg.byte_size());
  for (const TensorArg& arg : ctx.outputs) staging->outputs.emplace_back(arg.byte_size());
  const int64_t bytes = bucket_bytes(ctx.node);
  staging->bucket.resize(static_cast<size_t>((bytes + 7) / 8));
  return staging;
}

int64_t no_bucket(const Node& /*node*/) { return 0; }

// Copies the operands to the host, runs `collective` on the host copies, copies the outputs
// back; the stream is synchronized around it.
template <typename Collective>
absl::Status staged(const KernelContext& ctx, Collective&& collective) {
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
  AMPC_RETURN_IF_ERROR(collective(operands, outputs, staging.bucket_bytes()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ctx.output(static_cast<int>(i)).data,
                                              staging.outputs[i].data(), outputs[i].byte_size(),
                                              cudaMemcpyHostToDevice, stream));
  }
  // The host copies are read again next call.
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status all_reduce(const KernelContext& ctx) {
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::all_reduce_on_host(operands, outputs, int_attr_or(ctx.node, "mean", 0) != 0,
                                    bucket, ctx.exec->communicator);
  });
}

absl::Status reduce_scatter(const KernelContext& ctx) {
  comm::Communicator* group = ctx.exec->communicator;
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::reduce_scatter_on_host(operands, outputs, bucket, group, place.second);
  });
}

absl::Status shard(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(auto place, comm::place_in_group(ctx.exec->communicator,
                                                         ctx.node.int_attr("ranks"), ctx.node));
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte>) {
    comm::shard_on_host(operands[0], outputs[0], place.first);
    return absl::OkStatus();
  });
}

absl::Status all_gather(const KernelContext& ctx) {
  comm::Communicator* group = ctx.exec->communicator;
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::all_gather_on_host(operands, outputs, bucket, group, place.second);
  });
}

void register_cuda_collective_kernels(KernelRegistry& r) {
  r.add(cuda_ampc_kernel_def("AllReduce", kCudaFloatTypes, &all_reduce,
                             &init_staging<&comm::all_reduce_bucket_bytes>));
  r.add(cuda_ampc_kernel_def("ReduceScatter", kCudaFloatTypes, &reduce_scatter,
                             &init_staging<&comm::reduce_scatter_bucket_bytes>));
  r.add(cuda_ampc_kernel_def("Shard", kCudaFloatTypes, &shard, &init_staging<&no_bucket>));
  r.add(cuda_ampc_kernel_def("AllGather", kCudaFloatTypes, &all_gather,
                             &init_staging<&comm::all_gather_bucket_bytes>));
}

static KernelRegistration kRegistration(&register_cuda_collective_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
