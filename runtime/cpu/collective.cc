// ampc.AllReduce on the CPU (ops/collective.cc): through the execution context's
// communicator, with the bucket in the workspace (runtime/comm/all_reduce.h).
#include "runtime/comm/all_reduce.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {
namespace {

absl::Status all_reduce(const KernelContext& ctx) {
  comm::Communicator* communicator = ctx.exec != nullptr ? ctx.exec->communicator : nullptr;
  return comm::all_reduce_on_host(ctx.inputs, ctx.outputs, int_attr_or(ctx.node, "mean", 0) != 0,
                                  ctx.workspace, communicator);
}

void register_collective_kernels(KernelRegistry& r) {
  KernelDef def = ampc_kernel_def("AllReduce", {.workspace_bytes = &comm::all_reduce_bucket_bytes});
  def.device = Device::kCpu;
  def.dtypes = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
  def.fn = &all_reduce;
  r.add(std::move(def));
}

static KernelRegistration kReg(&register_collective_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
