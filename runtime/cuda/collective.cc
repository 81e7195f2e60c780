// ampc.AllReduce, ReduceScatter, Shard and AllGather on CUDA (ops/collective.cc).
//
// With an NCCL communicator (runtime/cuda/nccl_communicator.h) nothing waits on the host, and a
// CUDA graph can record the step. The operands are converted into one f32 bucket (the layout of
// the CPU kernels', runtime/comm/all_reduce.h and runtime/comm/sharding.h), NCCL reduces,
// gathers or scatters it in place, and the outputs are read out of it. AllReduce (the gradient
// buckets) runs on the communicator's stream, forked from the backend's once its operands are in
// its bucket and joined back before the first reader of its outputs (KernelState::join), so the
// backward's later kernels overlap it; ReduceScatter and AllGather run there too, and the
// backend's stream waits for them at once. (Every NCCL collective on one stream: the GPU runs
// them in the order all ranks queued them.) With another communicator (Gloo) they are staged
// through host memory: the operands are copied to the host, the CPU kernels' code runs there with
// the communicator, and the results are copied back, with the stream synchronized around it (so
// such a step cannot be recorded as a CUDA graph). Shard moves this rank's block on the device
// either way.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "runtime/comm/all_reduce.h"
#include "runtime/comm/sharding.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/nccl_communicator.h"

namespace ampc::runtime::cuda {
namespace {

// The node's NCCL communicator, or null (another engine, or none).
NcclCommunicator* nccl_of(const KernelContext& ctx) {
  return ctx.exec == nullptr ? nullptr : dynamic_cast<NcclCommunicator*>(ctx.exec->communicator);
}

// What init made. For NCCL: 1 / ranks in device memory (AllReduce's mean), the events that fork
// the communication stream from the backend's and join it back (every NCCL collective runs on
// the communication stream, so the GPU runs them in the order every rank queued them), and for
// AllReduce, which overlaps the kernels after it, its own bucket. Else the host copies of the
// node's operands and outputs and the host bucket.
struct CollectiveState final : KernelState {
  ~CollectiveState() override {
    if (inverse != nullptr) (void)cudaFree(inverse);
    if (bucket != nullptr) (void)cudaFree(bucket);
    if (ready != nullptr) (void)cudaEventDestroy(ready);
    if (done != nullptr) (void)cudaEventDestroy(done);
  }
  bool asynchronous() const override { return overlaps; }
  absl::Status join(const ExecutionContext& exec) override {
    return cuda_status(cudaStreamWaitEvent(static_cast<cudaStream_t>(exec.stream), done, 0),
                       "cudaStreamWaitEvent");
  }

  bool overlaps = false;
  float* inverse = nullptr;
  float* bucket = nullptr;
  cudaEvent_t ready = nullptr;  // the operands are in the bucket
  cudaEvent_t done = nullptr;   // the outputs are written
  std::vector<std::vector<std::byte>> operands;
  std::vector<std::vector<std::byte>> outputs;
  std::vector<double> host_bucket;  // doubles: aligned for either bucket type
  std::span<std::byte> host_bucket_bytes() {
    return {reinterpret_cast<std::byte*>(host_bucket.data()), host_bucket.size() * sizeof(double)};
  }
};

template <WorkspaceFn bucket_bytes, bool overlaps>
absl::StatusOr<std::unique_ptr<KernelState>> init_collective(const KernelContext& ctx) {
  auto state = std::make_unique<CollectiveState>();
  if (NcclCommunicator* nccl = nccl_of(ctx); nccl != nullptr) {
    const float inverse = static_cast<float>(1.0 / nccl->size());
    AMPC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&state->inverse), sizeof(float)));
    AMPC_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(state->inverse, &inverse, sizeof(float), cudaMemcpyHostToDevice));
    AMPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&state->ready, cudaEventDisableTiming));
    AMPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming));
    if (overlaps) {
      state->overlaps = true;
      AMPC_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&state->bucket),
                                           std::max<int64_t>(bucket_bytes(ctx.node), 4)));
    }
    return state;
  }
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    state->operands.emplace_back(ctx.inputs[i].byte_size());  // what staged() copies
  }
  for (const TensorArg& arg : ctx.outputs) state->outputs.emplace_back(arg.byte_size());
  const int64_t bytes = bucket_bytes(ctx.node);
  state->host_bucket.resize(static_cast<size_t>((bytes + 7) / 8));
  return state;
}

// Copies the operands to the host, runs `collective` on the host copies, copies the outputs
// back; the stream is synchronized around it. One operand per output is copied: an AllGather's
// kept values after its blocks are not read.
template <typename Collective>
absl::Status staged(const KernelContext& ctx, Collective&& collective) {
  auto& staging = static_cast<CollectiveState&>(*ctx.state);
  const cudaStream_t stream = stream_of(ctx);
  std::vector<TensorArg> operands = ctx.inputs, outputs = ctx.outputs;
  operands.resize(outputs.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging.operands[i].data(), operands[i].data,
                                              operands[i].byte_size(), cudaMemcpyDeviceToHost,
                                              stream));
    operands[i].data = staging.operands[i].data();
  }
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i].data = staging.outputs[i].data();
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  AMPC_RETURN_IF_ERROR(collective(operands, outputs, staging.host_bucket_bytes()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ctx.output(static_cast<int>(i)).data,
                                              staging.outputs[i].data(), outputs[i].byte_size(),
                                              cudaMemcpyHostToDevice, stream));
  }
  // The host copies are read again next call.
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

// `n` elements of `from` (any float type) into f32 at `to`, exactly, on `stream`.
absl::Status to_f32(const KernelContext& ctx, cudaStream_t stream, DType dtype, const void* from,
                    float* to, int64_t n) {
  if (n == 0) return absl::OkStatus();
  if (dtype == DType::kF32) {
    return cuda_status(cudaMemcpyAsync(to, from, static_cast<size_t>(n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpyAsync");
  }
  return launched(launch_cast(*elem_of(dtype), Elem::kF32, from, to, n, /*saturate=*/false, stream),
                  ctx);
}

absl::Status copy_on_device(cudaStream_t stream, void* to, const void* from, int64_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return cuda_status(
      cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream),
      "cudaMemcpyAsync");
}

// A `window` collective on a run inside an accumulation window (ops/collective.cc): nothing is
// communicated, and each output is this rank's block `rank` of its own operand in f32 (AllReduce:
// rank 0 of one block, the whole operand), on the backend's stream. An overlapping node's `done`
// is recorded there, so the executor's join finds this run's work.
absl::Status own_values_on_device(const KernelContext& ctx, int rank) {
  const cudaStream_t stream = stream_of(ctx);
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const TensorArg& operand = ctx.inputs[k];
    const TensorArg& output = ctx.outputs[k];
    const int64_t shard = output.num_elements();
    const int64_t first = std::min<int64_t>(operand.num_elements(), rank * shard);
    const int64_t copied = std::min(operand.num_elements() - first, shard);
    auto* to = static_cast<float*>(output.data);
    AMPC_RETURN_IF_ERROR(
        to_f32(ctx, stream, operand.dtype(),
               static_cast<const std::byte*>(operand.data) + first * dtype_size(operand.dtype()),
               to, copied));
    if (copied < shard) {
      AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          to + copied, 0, static_cast<size_t>(shard - copied) * sizeof(float), stream));
    }
  }
  auto& state = static_cast<CollectiveState&>(*ctx.state);
  if (state.overlaps) AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(state.done, stream));
  return absl::OkStatus();
}

// On the backend's stream, the operands go into the node's bucket (every operand in f32, in
// operand order); the communication stream waits for that, NCCL sums the bucket there, and each
// output becomes its slice (times 1 / ranks rounded once with `mean`). The kernels queued after
// this node run meanwhile; the executor joins the communication stream back (CollectiveState::
// join) before the first step that reads an output.
absl::Status all_reduce_on_device(const KernelContext& ctx, NcclCommunicator& nccl) {
  auto& state = static_cast<CollectiveState&>(*ctx.state);
  const cudaStream_t stream = stream_of(ctx);
  const auto side = static_cast<cudaStream_t>(nccl.communication_stream());
  int64_t total = 0;
  for (const TensorArg& operand : ctx.inputs) {
    AMPC_RETURN_IF_ERROR(to_f32(ctx, stream, operand.dtype(), operand.data, state.bucket + total,
                                operand.num_elements()));
    total += operand.num_elements();
  }
  AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(state.ready, stream));
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, state.ready, 0));
  AMPC_RETURN_IF_ERROR(
      nccl.all_reduce_on(side, state.bucket, total, DType::kF32, comm::ReduceOp::kSum));
  const bool mean = int_attr_or(ctx.node, "mean", 0) != 0;
  int64_t at = 0;
  for (const TensorArg& output : ctx.outputs) {
    const int64_t n = output.num_elements();
    if (!mean) {
      AMPC_RETURN_IF_ERROR(copy_on_device(side, output.data, state.bucket + at, n * 4));
    } else if (n > 0) {
      Layout<2> layout;  // bucket slice * the one-element inverse
      layout.rank = 1;
      layout.size = n;
      layout.dims[0] = n;
      layout.strides[0][0] = 1;
      layout.strides[1][0] = 0;
      AMPC_RETURN_IF_ERROR(launched(
          launch_binary(BinaryOp::kMul, Elem::kF32, Elem::kF32, state.bucket + at, state.inverse,
                        output.data, layout, ErrorSink{ctx.exec->error, ctx.step}, side),
          ctx));
    }
    at += n;
  }
  AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(state.done, side));
  return absl::OkStatus();
}

absl::Status all_reduce(const KernelContext& ctx) {
  if (comm::keeps_own_values(ctx)) return own_values_on_device(ctx, 0);
  if (NcclCommunicator* nccl = nccl_of(ctx); nccl != nullptr) {
    return all_reduce_on_device(ctx, *nccl);
  }
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::all_reduce_on_host(operands, outputs, int_attr_or(ctx.node, "mean", 0) != 0,
                                    bucket, ctx.exec->communicator);
  });
}

// Queues `collective(stream)` on the communication stream, in order with the backend's stream
// on both sides: the communication stream waits for what is queued so far, and the backend's
// waits for the collective.
template <typename Collective>
absl::Status in_stream_order(const KernelContext& ctx, NcclCommunicator& nccl,
                             Collective&& collective) {
  auto& state = static_cast<CollectiveState&>(*ctx.state);
  const cudaStream_t stream = stream_of(ctx);
  const auto side = static_cast<cudaStream_t>(nccl.communication_stream());
  AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(state.ready, stream));
  AMPC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, state.ready, 0));
  AMPC_RETURN_IF_ERROR(collective(side));
  AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(state.done, side));
  return cuda_status(cudaStreamWaitEvent(stream, state.done, 0), "cudaStreamWaitEvent");
}

// runtime/comm/sharding.cc's reduce-scatter on the device: the send buffer holds `ranks` blocks,
// block r holding every operand's block r (zero-padded) in operand order.
absl::Status reduce_scatter_on_device(const KernelContext& ctx, NcclCommunicator& nccl, int ranks) {
  int64_t block = 0;
  for (const TensorArg& output : ctx.outputs) block += output.num_elements();
  auto* send = reinterpret_cast<float*>(ctx.workspace.data());
  float* received = send + block * ranks;
  int64_t offset = 0;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const TensorArg& operand = ctx.inputs[k];
    const int64_t n = operand.num_elements();
    const int64_t shard = ctx.outputs[k].num_elements();
    const int64_t element = dtype_size(operand.dtype());
    for (int r = 0; r < ranks; ++r) {
      float* to = send + r * block + offset;
      const int64_t first = std::min<int64_t>(n, r * shard);
      const int64_t copied = std::min(n - first, shard);
      AMPC_RETURN_IF_ERROR(to_f32(ctx, stream_of(ctx), operand.dtype(),
                                  static_cast<const std::byte*>(operand.data) + first * element, to,
                                  copied));
      if (copied < shard) {
        AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
            to + copied, 0, static_cast<size_t>(shard - copied) * sizeof(float), stream_of(ctx)));
      }
    }
    offset += shard;
  }
  AMPC_RETURN_IF_ERROR(in_stream_order(ctx, nccl, [&](cudaStream_t side) {
    return nccl.reduce_scatter_on(side, send, received, block, DType::kF32, comm::ReduceOp::kSum);
  }));
  offset = 0;
  for (const TensorArg& output : ctx.outputs) {
    AMPC_RETURN_IF_ERROR(
        copy_on_device(stream_of(ctx), output.data, received + offset, output.num_elements() * 4));
    offset += output.num_elements();
  }
  return absl::OkStatus();
}

absl::Status reduce_scatter(const KernelContext& ctx) {
  comm::Communicator* group = ctx.exec->communicator;
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  if (comm::keeps_own_values(ctx)) return own_values_on_device(ctx, place.first);
  if (NcclCommunicator* nccl = nccl_of(ctx); nccl != nullptr) {
    return reduce_scatter_on_device(ctx, *nccl, place.second);
  }
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::reduce_scatter_on_host(operands, outputs, bucket, group, place.second);
  });
}

// This rank's block of the operand (zero-padded past its end): no communication.
absl::Status shard(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(auto place, comm::place_in_group(ctx.exec->communicator,
                                                         ctx.node.int_attr("ranks"), ctx.node));
  const TensorArg& operand = ctx.input(0);
  const TensorArg& output = ctx.output(0);
  const int64_t element = dtype_size(operand.dtype());
  const int64_t shard = output.num_elements();
  const int64_t first = std::min(operand.num_elements(), place.first * shard);
  const int64_t copied = std::min(operand.num_elements() - first, shard);
  auto* out = static_cast<std::byte*>(output.data);
  AMPC_RETURN_IF_ERROR(copy_on_device(stream_of(ctx), out,
                                      static_cast<const std::byte*>(operand.data) + first * element,
                                      copied * element));
  if (copied < shard) {
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out + copied * element, 0,
                                              static_cast<size_t>((shard - copied) * element),
                                              stream_of(ctx)));
  }
  return absl::OkStatus();
}

// runtime/comm/sharding.cc's all-gather on the device: every operand's bytes in operand order
// are one rank's block; output k takes operand k's part of each rank's block, in rank order.
absl::Status all_gather_on_device(const KernelContext& ctx, NcclCommunicator& nccl, int ranks) {
  const std::span<const TensorArg> blocks(ctx.inputs.data(), ctx.outputs.size());
  int64_t block = 0;
  for (const TensorArg& operand : blocks) block += operand.byte_size();
  std::byte* send = ctx.workspace.data();
  std::byte* gathered = send + block;
  int64_t offset = 0;
  for (const TensorArg& operand : blocks) {
    AMPC_RETURN_IF_ERROR(
        copy_on_device(stream_of(ctx), send + offset, operand.data, operand.byte_size()));
    offset += operand.byte_size();
  }
  AMPC_RETURN_IF_ERROR(in_stream_order(ctx, nccl, [&](cudaStream_t side) {
    return nccl.all_gather_on(side, send, gathered, block, DType::kU8);
  }));
  offset = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    const int64_t shard_bytes = blocks[k].byte_size();
    int64_t left = ctx.outputs[k].byte_size();
    auto* out = static_cast<std::byte*>(ctx.outputs[k].data);
    for (int r = 0; r < ranks && left > 0; ++r) {
      const int64_t take = std::min(shard_bytes, left);
      AMPC_RETURN_IF_ERROR(
          copy_on_device(stream_of(ctx), out, gathered + r * block + offset, take));
      out += take;
      left -= take;
    }
    offset += shard_bytes;
  }
  return absl::OkStatus();
}

absl::Status all_gather(const KernelContext& ctx) {
  comm::Communicator* group = ctx.exec->communicator;
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  if (comm::keeps_own_values(ctx)) {
    // Each output is its kept value: nothing to do where the output is stored over it.
    for (size_t k = 0; k < ctx.outputs.size(); ++k) {
      const TensorArg& kept = ctx.inputs[ctx.outputs.size() + k];
      if (kept.data == ctx.outputs[k].data) continue;
      AMPC_RETURN_IF_ERROR(
          copy_on_device(stream_of(ctx), ctx.outputs[k].data, kept.data, kept.byte_size()));
    }
    return absl::OkStatus();
  }
  if (NcclCommunicator* nccl = nccl_of(ctx); nccl != nullptr) {
    return all_gather_on_device(ctx, *nccl, place.second);
  }
  return staged(ctx, [&](const std::vector<TensorArg>& operands,
                         const std::vector<TensorArg>& outputs, std::span<std::byte> bucket) {
    return comm::all_gather_on_host(operands, outputs, bucket, group, place.second);
  });
}

// ReduceScatter's and AllGather's KernelDef: their buffers in the workspace for the NCCL path
// (the host path's are in its state). AllReduce has its own bucket (it overlaps later kernels,
// which use the workspace).
KernelDef collective_def(std::string op, KernelFn fn, KernelInitFn init, WorkspaceFn bucket) {
  KernelDef def = cuda_ampc_kernel_def(std::move(op), kCudaFloatTypes, fn, init);
  def.workspace_bytes = bucket;
  return def;
}

void register_cuda_collective_kernels(KernelRegistry& r) {
  r.add(cuda_ampc_kernel_def("AllReduce", kCudaFloatTypes, &all_reduce,
                             &init_collective<&comm::all_reduce_bucket_bytes, true>));
  r.add(collective_def("ReduceScatter", &reduce_scatter,
                       &init_collective<&comm::reduce_scatter_bucket_bytes, false>,
                       &comm::reduce_scatter_bucket_bytes));
  r.add(cuda_ampc_kernel_def("Shard", kCudaFloatTypes, &shard));
  KernelDef gather = collective_def("AllGather", &all_gather,
                                    &init_collective<&comm::all_gather_bucket_bytes, false>,
                                    &comm::all_gather_bucket_bytes);
  gather.in_place_operand_of = &comm::all_gather_kept_operand;
  r.add(std::move(gather));
}

static KernelRegistration kCudaCollectiveKernels(&register_cuda_collective_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
