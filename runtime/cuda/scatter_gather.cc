// CUDA kernels of ops/scatter_gather.cc: GatherElements, ScatterElements (and Scatter), GatherND
// and ScatterND, and the gradients GatherElementsGrad and GatherNDGrad; registration and the
// host side.
//
// The index maps (ElementsMap, TupleMap) are made at load from the static shapes; the indices
// stay on the device and are checked there, into the device error word. The gathers move words
// of the element size (every dtype); the scatters copy the data into the output (unless they run
// in place), then apply the updates in the CPU's order (data_movement_kernels.h), so the results
// agree bit for bit with runtime/cpu/scatter_gather.cc.
#include "compiler/strings.h"
#include "runtime/cpu/slicing.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/data_movement_kernels.h"

namespace ampc::runtime::cuda {
namespace {

absl::Status check_rank(const KernelContext& ctx, size_t rank) {
  if (rank > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat("the cuda ", ctx.node.op_type(),
                                            " kernel handles rank ", kMaxRank,
                                            " or less, got rank ", rank));
  }
  return absl::OkStatus();
}

struct ElementsState : KernelState {
  ElementsMap map;
};

struct TupleState : KernelState {
  TupleMap map;
};

// The indices (input 1) against data of shape `data` (input 0's, or for the gradients their
// output's) along the `axis` attribute.
absl::StatusOr<std::unique_ptr<KernelState>> init_elements_against(const KernelContext& ctx,
                                                                   const Shape& data) {
  const Shape& indices = ctx.input(1).shape();
  AMPC_RETURN_IF_ERROR(check_rank(ctx, data.size()));
  auto state = std::make_unique<ElementsState>();
  ElementsMap& map = state->map;
  map.rank = static_cast<int>(data.size());
  map.axis = static_cast<int>(cpu::normalized_axis(ctx.node.int_attr("axis"), data.size()));
  map.axis_dim = data[map.axis];
  map.total = num_elements(indices);
  int64_t stride = 1;
  for (int d = map.rank - 1; d >= 0; --d) {
    map.dims[d] = indices[d];
    map.data_strides[d] = stride;
    stride *= data[d];
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_elements(const KernelContext& ctx) {
  return init_elements_against(ctx, ctx.input(0).shape());
}

// The tuples of indices [batch..., m..., k] into data [batch..., d_1..d_k, rest...].
absl::StatusOr<std::unique_ptr<KernelState>> init_tuples_against(const KernelContext& ctx,
                                                                 const Shape& data) {
  const Shape& indices = ctx.input(1).shape();
  AMPC_RETURN_IF_ERROR(check_rank(ctx, data.size()));
  const int64_t batch_dims =
      ctx.node.find_attr("batch_dims") ? ctx.node.int_attr("batch_dims") : int64_t{0};
  auto state = std::make_unique<TupleState>();
  TupleMap& map = state->map;
  map.k = static_cast<int>(indices.back());
  map.tuples = num_elements(indices) / map.k;
  for (size_t d = batch_dims; d + 1 < indices.size(); ++d) map.per_batch *= indices[d];
  std::vector<int64_t> strides(data.size(), 1);
  for (size_t d = data.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * data[d + 1];
  map.batch_stride = batch_dims == 0 ? 0 : strides[batch_dims - 1];
  for (int t = 0; t < map.k; ++t) {
    map.dims[t] = data[batch_dims + t];
    map.strides[t] = strides[batch_dims + t];
  }
  for (size_t d = batch_dims + map.k; d < data.size(); ++d) map.slice *= data[d];
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_tuples(const KernelContext& ctx) {
  return init_tuples_against(ctx, ctx.input(0).shape());
}

absl::Status gather_elements(const KernelContext& ctx) {
  const auto& state = static_cast<const ElementsState&>(*ctx.state);
  const TensorArg& indices = ctx.input(1);
  return launched(
      launch_gather_elements(dtype_size(ctx.input(0).dtype()), ctx.input(0).data, indices.data,
                             indices.dtype() == DType::kI64, ctx.output(0).data, state.map,
                             ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

absl::Status gather_nd(const KernelContext& ctx) {
  const auto& state = static_cast<const TupleState&>(*ctx.state);
  const TensorArg& indices = ctx.input(1);
  return launched(launch_gather_nd(dtype_size(ctx.input(0).dtype()), ctx.input(0).data,
                                   indices.data, indices.dtype() == DType::kI64, ctx.output(0).data,
                                   state.map, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

// The output starts as the data (nothing to copy when the node runs in place).
absl::Status copy_data(const KernelContext& ctx) {
  const TensorArg& out = ctx.output(0);
  if (out.data == ctx.input(0).data || out.byte_size() == 0) return absl::OkStatus();
  return cuda_status(cudaMemcpyAsync(out.data, ctx.input(0).data, out.byte_size(),
                                     cudaMemcpyDeviceToDevice, stream_of(ctx)),
                     str_cat("cudaMemcpyAsync for ", ctx.node.op_type()));
}

absl::Status scatter_elements(const KernelContext& ctx) {
  const auto& state = static_cast<const ElementsState&>(*ctx.state);
  AMPC_RETURN_IF_ERROR(copy_data(ctx));
  const TensorArg& indices = ctx.input(1);
  return launched(
      launch_scatter_elements(elem(ctx.input(0)), cpu::scatter_reduction(ctx.node), indices.data,
                              indices.dtype() == DType::kI64, ctx.input(2).data, ctx.output(0).data,
                              state.map, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

absl::Status scatter_nd(const KernelContext& ctx) {
  const auto& state = static_cast<const TupleState&>(*ctx.state);
  AMPC_RETURN_IF_ERROR(copy_data(ctx));
  const TensorArg& indices = ctx.input(1);
  return launched(
      launch_scatter_nd(elem(ctx.input(0)), cpu::scatter_reduction(ctx.node), indices.data,
                        indices.dtype() == DType::kI64, ctx.input(2).data, ctx.output(0).data,
                        state.map, ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

// ---- GatherElementsGrad, GatherNDGrad (ampc) --------------------------------------------------
//
// dX = zeros of the gathered data's shape, then dY added at the addressed elements in the order
// of the indices: the scatters' add reduction, which walks duplicates in the CPU's order. For
// f16 and bf16 dY is widened to f32 and added into an f32 workspace rounded once at the end, as
// the CPU sums them, so both backends agree bit for bit.

template <typename Init>
absl::StatusOr<std::unique_ptr<KernelState>> init_scatter_add(const KernelContext& ctx,
                                                              Init&& init) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<KernelState> state, init(ctx, ctx.output(0).shape()));
  const DType type = ctx.output(0).dtype();
  if (type == DType::kF16 || type == DType::kBF16) {
    // The f32 sums, then dY in f32.
    const int64_t sums = (ctx.output(0).num_elements() * 4 + 255) / 256 * 256;
    state->workspace_bytes = sums + ctx.input(0).num_elements() * 4;
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_gather_elements_grad(const KernelContext& ctx) {
  return init_scatter_add(ctx, &init_elements_against);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_gather_nd_grad(const KernelContext& ctx) {
  return init_scatter_add(ctx, &init_tuples_against);
}

// Runs scatter(type, updates, out) into zeros, through f32 for f16 and bf16.
template <typename Scatter>
absl::Status scatter_add_into_zeros(const KernelContext& ctx, Scatter&& scatter) {
  cudaStream_t stream = stream_of(ctx);
  const TensorArg& dx = ctx.output(0);
  const Elem type = elem(dx);
  const bool widened = type == Elem::kF16 || type == Elem::kBF16;
  void* sums = widened ? static_cast<void*>(ctx.workspace.data()) : dx.data;
  const size_t sum_bytes =
      static_cast<size_t>(dx.num_elements()) * (widened ? 4 : dtype_size(dx.dtype()));
  AMPC_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(sums, 0, sum_bytes, stream),
                                   str_cat("cudaMemsetAsync for ", ctx.node.op_type())));
  if (!widened) return launched(scatter(type, ctx.input(0).data, dx.data), ctx);
  void* dy32 = ctx.workspace.data() + (dx.num_elements() * 4 + 255) / 256 * 256;
  AMPC_RETURN_IF_ERROR(launched(launch_cast(type, Elem::kF32, ctx.input(0).data, dy32,
                                            ctx.input(0).num_elements(), false, stream),
                                ctx));
  AMPC_RETURN_IF_ERROR(launched(scatter(Elem::kF32, dy32, sums), ctx));
  return launched(launch_cast(Elem::kF32, type, sums, dx.data, dx.num_elements(), false, stream),
                  ctx);
}

absl::Status gather_elements_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const ElementsState&>(*ctx.state);
  const TensorArg& indices = ctx.input(1);
  return scatter_add_into_zeros(ctx, [&](Elem type, const void* updates, void* out) {
    return launch_scatter_elements(type, numeric::ScatterReduction::kAdd, indices.data,
                                   indices.dtype() == DType::kI64, updates, out, state.map,
                                   ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx));
  });
}

absl::Status gather_nd_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const TupleState&>(*ctx.state);
  const TensorArg& indices = ctx.input(1);
  return scatter_add_into_zeros(ctx, [&](Elem type, const void* updates, void* out) {
    return launch_scatter_nd(type, numeric::ScatterReduction::kAdd, indices.data,
                             indices.dtype() == DType::kI64, updates, out, state.map,
                             ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx));
  });
}

void add(KernelRegistry& r, std::string op, std::vector<DType> dtypes, KernelFn fn,
         KernelInitFn init, int in_place_operand = -1) {
  KernelDef def = cuda_kernel_def(std::move(op), std::move(dtypes), fn, in_place_operand);
  def.init = init;
  r.add(std::move(def));
}

void register_cuda_scatter_gather_kernels(KernelRegistry& r) {
  // The gathers move words of up to 8 bytes: every dtype.
  const std::vector<DType> all(std::begin(kAllDTypes), std::end(kAllDTypes));
  add(r, "GatherElements", all, &gather_elements, &init_elements);
  add(r, "GatherND", all, &gather_nd, &init_tuples);
  // The scatters combine values: the numeric types the CUDA arithmetic is instantiated for. Each
  // output element reads only itself, so they may run in place.
  add(r, "Scatter", kCudaNumericTypes, &scatter_elements, &init_elements, 0);
  add(r, "ScatterElements", kCudaNumericTypes, &scatter_elements, &init_elements, 0);
  add(r, "ScatterND", kCudaNumericTypes, &scatter_nd, &init_tuples, 0);
  r.add(cuda_ampc_kernel_def("GatherElementsGrad", kCudaFloatTypes, &gather_elements_grad,
                             &init_gather_elements_grad));
  r.add(
      cuda_ampc_kernel_def("GatherNDGrad", kCudaFloatTypes, &gather_nd_grad, &init_gather_nd_grad));
}

static KernelRegistration kCudaScatterGatherKernels(&register_cuda_scatter_gather_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
