// CUDA kernels of MaxPool (with the optional Indices output) and AveragePool, and of their
// gradients MaxPoolGrad and AveragePoolGrad: registration and launch. cuDNN's pooling cannot
// express ONNX's dilations, asymmetric pads or Indices, so both run the own kernels of
// pool_kernels.cu, one thread per output element walking its window in runtime/cpu/pool.cc's order:
// MaxPool's values and indices and AveragePool's f32 sums are the CPU's bit for bit. The window
// (auto_pad, pads, strides, dilations; ceil_mode through the inferred output shape) is resolved
// once at load by the CPU kernels' own resolve_window.
#include "compiler/strings.h"
#include "runtime/cpu/window.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/pool_kernels.h"

namespace ampc::runtime::cuda {
namespace {

struct PoolState : KernelState {
  PoolWindow window;
  bool column_major = false;       // MaxPool storage_order=1
  bool count_include_pad = false;  // AveragePool
};

PoolWindow pool_window(const cpu::Window& w) {
  PoolWindow window;
  window.planes = w.batch * w.channels;
  for (int d = 0; d < 3; ++d) {
    window.in[d] = w.in[d];
    window.out[d] = w.out[d];
    window.kernel[d] = w.kernel[d];
    window.stride[d] = w.stride[d];
    window.dilation[d] = w.dilation[d];
    window.pad_begin[d] = w.pad_begin[d];
    window.pad_end[d] = w.pad_end[d];
  }
  return window;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_max_pool(const KernelContext& ctx) {
  auto state = std::make_unique<PoolState>();
  state->window = pool_window(cpu::resolve_window(ctx.node, ctx.node.ints_attr("kernel_shape")));
  state->column_major = ctx.node.int_attr("storage_order") == 1;
  if (ctx.has_output(1) && ctx.output(1).dtype() != DType::kI64) {
    return absl::InvalidArgumentError(
        str_cat("MaxPool's Indices must be i64, got ", dtype_name(ctx.output(1).dtype())));
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_average_pool(const KernelContext& ctx) {
  auto state = std::make_unique<PoolState>();
  state->window = pool_window(cpu::resolve_window(ctx.node, ctx.node.ints_attr("kernel_shape")));
  state->count_include_pad = ctx.node.int_attr("count_include_pad") != 0;
  return state;
}

absl::Status max_pool(const KernelContext& ctx) {
  const auto& state = static_cast<const PoolState&>(*ctx.state);
  int64_t* indices = ctx.has_output(1) ? static_cast<int64_t*>(ctx.output(1).data) : nullptr;
  return launched(
      launch_max_pool(*elem_of(ctx.input(0).dtype()), ctx.input(0).data, ctx.output(0).data,
                      indices, state.window, state.column_major, stream_of(ctx)),
      ctx);
}

absl::Status average_pool(const KernelContext& ctx) {
  const auto& state = static_cast<const PoolState&>(*ctx.state);
  return launched(
      launch_average_pool(*elem_of(ctx.input(0).dtype()), ctx.input(0).data, ctx.output(0).data,
                          state.window, state.count_include_pad, stream_of(ctx)),
      ctx);
}

// The gradients (ampc): X's shape is MaxPoolGrad's operand 1 and AveragePoolGrad's output, dY's
// the output shape of the forward window.
absl::StatusOr<std::unique_ptr<KernelState>> init_max_pool_grad(const KernelContext& ctx) {
  auto state = std::make_unique<PoolState>();
  state->window = pool_window(cpu::resolve_window(
      ctx.node, ctx.input(1).shape(), ctx.input(0).shape(), ctx.node.ints_attr("kernel_shape")));
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_average_pool_grad(const KernelContext& ctx) {
  auto state = std::make_unique<PoolState>();
  state->window = pool_window(cpu::resolve_window(
      ctx.node, ctx.output(0).shape(), ctx.input(0).shape(), ctx.node.ints_attr("kernel_shape")));
  state->count_include_pad = ctx.node.int_attr("count_include_pad") != 0;
  return state;
}

absl::Status max_pool_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const PoolState&>(*ctx.state);
  return launched(launch_max_pool_grad(elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data,
                                       ctx.output(0).data, state.window, stream_of(ctx)),
                  ctx);
}

absl::Status average_pool_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const PoolState&>(*ctx.state);
  return launched(
      launch_average_pool_grad(elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                               state.window, state.count_include_pad, stream_of(ctx)),
      ctx);
}

void register_cuda_pool_kernels(KernelRegistry& r) {
  KernelDef max_pool_def = cuda_kernel_def(
      "MaxPool", {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kU8}, &max_pool);
  max_pool_def.init = &init_max_pool;
  r.add(std::move(max_pool_def));
  KernelDef average_pool_def = cuda_kernel_def("AveragePool", kCudaFloatTypes, &average_pool);
  average_pool_def.init = &init_average_pool;
  r.add(std::move(average_pool_def));
  r.add(cuda_ampc_kernel_def("MaxPoolGrad", kCudaFloatTypes, &max_pool_grad, &init_max_pool_grad));
  r.add(cuda_ampc_kernel_def("AveragePoolGrad", kCudaFloatTypes, &average_pool_grad,
                             &init_average_pool_grad));
}

static KernelRegistration kCudaPoolKernels(&register_cuda_pool_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
