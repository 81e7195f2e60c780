// CUDA kernels of the training step's optimizer and loss-scaling ops (ops/optimizer.cc,
// ops/loss_scale.cc): registration and launch; the kernels are in training_kernels.cu. The
// hyperparameters are read as the CPU kernels read them (decimal_attr), the per-step values
// (learning rate, step count, loss scale, the skip flag) on the device.
#include <memory>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"

namespace ampc::runtime::cuda {
namespace {

UpdateScalars update_scalars(const KernelContext& ctx, int lr_index) {
  UpdateScalars scalars;
  scalars.lr = ctx.input(lr_index).data;
  scalars.step = ctx.input(lr_index + 1).data;
  scalars.scalar_type = elem(ctx.input(lr_index));
  if (ctx.has_input(lr_index + 2)) {
    scalars.skip = static_cast<const uint8_t*>(ctx.input(lr_index + 2).data);
  }
  scalars.error = ctx.exec->error;
  return scalars;
}

absl::Status check_scalar_types(const KernelContext& ctx, int lr_index) {
  if (ctx.input(lr_index).dtype() != ctx.input(lr_index + 1).dtype()) {
    return absl::UnimplementedError(str_cat("the cuda kernel reads lr and step of one type, not ",
                                            dtype_name(ctx.input(lr_index).dtype()), " and ",
                                            dtype_name(ctx.input(lr_index + 1).dtype())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KernelState>> init_sgd(const KernelContext& ctx) {
  AMPC_RETURN_IF_ERROR(check_scalar_types(ctx, 3));
  return nullptr;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_adam(const KernelContext& ctx) {
  AMPC_RETURN_IF_ERROR(check_scalar_types(ctx, 4));
  return nullptr;
}

// Without momentum the buffer may be omitted: null, neither read nor written.
absl::Status sgd(const KernelContext& ctx) {
  const numeric::SgdHyper hyper = sgd_hyper(ctx.node);
  const bool buffered = ctx.has_input(2);
  return launched(launch_sgd(elem(ctx.input(0)), ctx.input(0).num_elements(), ctx.input(0).data,
                             ctx.input(1).data, buffered ? ctx.input(2).data : nullptr,
                             ctx.output(0).data, buffered ? ctx.output(1).data : nullptr, hyper,
                             update_scalars(ctx, 3), stream_of(ctx)),
                  ctx);
}

absl::Status adam(const KernelContext& ctx) {
  const numeric::AdamHyper hyper = adam_hyper(ctx.node);
  return launched(launch_adam(elem(ctx.input(0)), ctx.input(0).num_elements(), ctx.input(0).data,
                              ctx.input(1).data, ctx.input(2).data, ctx.input(3).data,
                              ctx.output(0).data, ctx.output(1).data, ctx.output(2).data, hyper,
                              update_scalars(ctx, 4), stream_of(ctx)),
                  ctx);
}

// Tensors `first`, `first + 1`, ... of `ctx`'s inputs (and, with `outputs_from`, the outputs
// from that index) in lists of at most kMaxTensorsPerLaunch. Made once, at load: the arenas
// never move.
struct TensorListsState : KernelState {
  std::vector<TensorList> lists;
};

std::vector<TensorList> tensor_lists(const KernelContext& ctx, int first, int outputs_from = -1) {
  std::vector<TensorList> lists;
  for (int i = first; i < static_cast<int>(ctx.inputs.size()); ++i) {
    if (lists.empty() || lists.back().count == kMaxTensorsPerLaunch) lists.emplace_back();
    TensorList& list = lists.back();
    list.data[list.count] = ctx.input(i).data;
    list.type[list.count] = elem(ctx.input(i));
    list.size[list.count] = ctx.input(i).num_elements();
    if (outputs_from >= 0) list.out[list.count] = ctx.output(outputs_from + i - first).data;
    ++list.count;
  }
  return lists;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_global_norm(const KernelContext& ctx) {
  auto state = std::make_unique<TensorListsState>();
  state->lists = tensor_lists(ctx, 0);
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_unscale(const KernelContext& ctx) {
  auto state = std::make_unique<TensorListsState>();
  state->lists = tensor_lists(ctx, 1, 1);
  return state;
}

const std::vector<TensorList>& lists_of(const KernelContext& ctx) {
  return static_cast<const TensorListsState&>(*ctx.state).lists;
}

// The norms of each input go to the workspace, after them each input's part sums
// (launch_tensor_norms), then the norms' norm to the output.
int64_t global_norm_workspace(const Node& node) {
  return static_cast<int64_t>(node.num_operands()) * (1 + kMaxNormParts) *
         dtype_size(node.operand(0)->dtype());
}

absl::Status global_norm(const KernelContext& ctx) {
  const Elem type = elem(ctx.input(0));
  std::byte* partials =
      ctx.workspace.data() + static_cast<int64_t>(ctx.node.num_operands()) * elem_size(type);
  int first = 0;
  for (const TensorList& list : lists_of(ctx)) {
    AMPC_RETURN_IF_ERROR(launched(
        launch_tensor_norms(type, list, ctx.workspace.data(), partials, first, stream_of(ctx)),
        ctx));
    first += list.count;
  }
  return launched(
      launch_norm_of_norms(type, ctx.workspace.data(), first, ctx.output(0).data, stream_of(ctx)),
      ctx);
}

absl::Status clip_coefficient(const KernelContext& ctx) {
  return launched(launch_clip_coefficient(elem(ctx.input(0)), ctx.input(0).data,
                                          decimal_attr(ctx.node, "max_norm"), ctx.output(0).data,
                                          stream_of(ctx)),
                  ctx);
}

absl::Status scale_loss(const KernelContext& ctx) {
  return launched(launch_scale_loss(elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data,
                                    ctx.output(0).data, stream_of(ctx)),
                  ctx);
}

// Input 0 the inverse scale, then the gradients; output 0 found_inf, then the unscaled ones.
absl::Status unscale_gradients(const KernelContext& ctx) {
  auto* found = static_cast<uint8_t*>(ctx.output(0).data);
  AMPC_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(found, 0, 1, stream_of(ctx)),
                                   "cudaMemsetAsync for UnscaleGradients"));
  for (const TensorList& list : lists_of(ctx)) {
    AMPC_RETURN_IF_ERROR(launched(
        launch_unscale(elem(ctx.input(0)), ctx.input(0).data, list, found, stream_of(ctx)), ctx));
  }
  return absl::OkStatus();
}

absl::Status loss_scale_update(const KernelContext& ctx) {
  const numeric::LossScaleRule rule = loss_scale_rule(ctx.node);
  const bool hysteresis = ctx.has_input(3);
  return launched(
      launch_loss_scale_update(
          rule, static_cast<const float*>(ctx.input(0).data),
          static_cast<const int64_t*>(ctx.input(1).data),
          static_cast<const uint8_t*>(ctx.input(2).data),
          hysteresis ? static_cast<const int64_t*>(ctx.input(3).data) : nullptr,
          static_cast<float*>(ctx.output(0).data), static_cast<int64_t*>(ctx.output(1).data),
          hysteresis ? static_cast<int64_t*>(ctx.output(2).data) : nullptr, ctx.exec->error,
          stream_of(ctx)),
      ctx);
}

KernelDef ampc_def(std::string op, std::vector<DType> dtypes, KernelFn fn,
                   std::vector<int> in_place_operands = {}) {
  KernelDef def = cuda_ampc_kernel_def(std::move(op), std::move(dtypes), fn);
  def.in_place_operands = std::move(in_place_operands);
  return def;
}

void register_cuda_training_kernels(KernelRegistry& r) {
  const std::vector<DType> state_types = {DType::kF32, DType::kF64};
  // As on the CPU: the updates may write over the parameter and its state (in place).
  KernelDef sgd_def = ampc_def("SGD", state_types, &sgd, {0, 2});
  sgd_def.init = &init_sgd;
  r.add(std::move(sgd_def));
  KernelDef adam_def = ampc_def("Adam", state_types, &adam, {0, 2, 3});
  adam_def.init = &init_adam;
  r.add(std::move(adam_def));
  KernelDef norm_def = ampc_def("GlobalNorm", state_types, &global_norm);
  norm_def.workspace_bytes = &global_norm_workspace;
  norm_def.init = &init_global_norm;
  r.add(std::move(norm_def));
  r.add(ampc_def("ClipCoefficient", state_types, &clip_coefficient));
  r.add(ampc_def("ScaleLoss", state_types, &scale_loss));
  KernelDef unscale_def = ampc_def("UnscaleGradients", state_types, &unscale_gradients);
  unscale_def.init = &init_unscale;
  r.add(std::move(unscale_def));
  r.add(ampc_def("LossScaleUpdate", {DType::kF32}, &loss_scale_update, {0, 1, 3}));
}

static KernelRegistration kCudaTrainingKernels(&register_cuda_training_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
