// ampc.AllReduce, ReduceScatter, Shard and AllGather on the CPU (ops/collective.cc): through the
// execution context's communicator, with the buckets in the workspace (runtime/comm/all_reduce.h,
// runtime/comm/sharding.h).
#include "runtime/comm/all_reduce.h"
#include "runtime/comm/sharding.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

absl::Status all_reduce(const KernelContext& ctx) {
  comm::Communicator* communicator = ctx.exec != nullptr ? ctx.exec->communicator : nullptr;
  if (comm::keeps_own_values(ctx)) communicator = nullptr;  // a group of one's sum
  return comm::all_reduce_on_host(ctx.inputs, ctx.outputs, int_attr_or(ctx.node, "mean", 0) != 0,
                                  ctx.workspace, communicator);
}

comm::Communicator* group_of(const KernelContext& ctx) {
  return ctx.exec != nullptr ? ctx.exec->communicator : nullptr;
}

absl::Status reduce_scatter(const KernelContext& ctx) {
  comm::Communicator* group = group_of(ctx);
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  if (comm::keeps_own_values(ctx)) {
    comm::own_blocks_on_host(ctx.inputs, ctx.outputs, place.first);
    return absl::OkStatus();
  }
  return comm::reduce_scatter_on_host(ctx.inputs, ctx.outputs, ctx.workspace, group, place.second);
}

absl::Status shard(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group_of(ctx), ctx.node.int_attr("ranks"), ctx.node));
  comm::shard_on_host(ctx.input(0), ctx.output(0), place.first);
  return absl::OkStatus();
}

absl::Status all_gather(const KernelContext& ctx) {
  comm::Communicator* group = group_of(ctx);
  AMPC_ASSIGN_OR_RETURN(auto place,
                        comm::place_in_group(group, ctx.node.int_attr("ranks"), ctx.node));
  if (comm::keeps_own_values(ctx)) {
    comm::kept_values_on_host(ctx.inputs, ctx.outputs);
    return absl::OkStatus();
  }
  return comm::all_gather_on_host(ctx.inputs, ctx.outputs, ctx.workspace, group, place.second);
}

void add(KernelRegistry& r, std::string_view op, KernelFn fn, WorkspaceFn workspace,
         int (*in_place_operand_of)(const Node&, int) = nullptr) {
  KernelDef def = ampc_kernel_def(std::string(op), {.workspace_bytes = workspace});
  def.device = Device::kCpu;
  def.dtypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
  def.fn = fn;
  def.in_place_operand_of = in_place_operand_of;
  r.add(std::move(def));
}

void register_collective_kernels(KernelRegistry& r) {
  add(r, "AllReduce", &all_reduce, &comm::all_reduce_bucket_bytes);
  add(r, "ReduceScatter", &reduce_scatter, &comm::reduce_scatter_bucket_bytes);
  add(r, "Shard", &shard, nullptr);
  add(r, "AllGather", &all_gather, &comm::all_gather_bucket_bytes, &comm::all_gather_kept_operand);
}

static KernelRegistration kCollectiveKernels(&register_collective_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
