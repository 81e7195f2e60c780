// CUDA kernels of ReduceSum, ReduceMean, ReduceMax, GlobalAveragePool, ArgMax, ArgMin and
// CumSum: registration, and the layouts the launchers walk, computed once at load from the
// shapes and attributes exactly as runtime/cpu/reduce.cc and runtime/cpu/pool.cc read them.
//
// Operands the CPU reads at run time (Reduce*'s axes, CumSum's axis) are graph initializers here,
// read at load; a node whose axes are computed on the device is refused at init.
#include <algorithm>
#include <optional>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/reduce_kernels.h"

namespace ampc::runtime::cuda {
namespace {

absl::Status axis_out_of_range(int64_t axis, int64_t rank) {
  return absl::InvalidArgumentError(str_cat("axis ", axis, " is out of range for rank ", rank,
                                            " (expected [", -rank, ", ", rank - 1, "])"));
}

// The CPU's ReduceLayout for reducing `shape` over the sorted `axes`: size-1 dims dropped,
// neighbouring kept (or reduced) dims merged.
absl::StatusOr<ReduceLayout> reduce_layout(const Shape& shape, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  ReduceLayout layout;
  layout.outputs = 1;
  std::vector<int64_t> kept_sizes, kept_strides, reduced_sizes, reduced_strides;
  std::optional<bool> previous_reduced;
  for (int64_t d = 0; d < rank; ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    (reduced ? layout.count : layout.outputs) *= shape[d];
    if (shape[d] == 1) continue;
    std::vector<int64_t>& sizes = reduced ? reduced_sizes : kept_sizes;
    std::vector<int64_t>& dim_strides = reduced ? reduced_strides : kept_strides;
    if (previous_reduced == reduced) {
      sizes.back() *= shape[d];
      dim_strides.back() = strides[d];
    } else {
      sizes.push_back(shape[d]);
      dim_strides.push_back(strides[d]);
    }
    previous_reduced = reduced;
  }
  if (kept_sizes.size() > static_cast<size_t>(kMaxRank) ||
      reduced_sizes.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat("reducing ", shape_to_string(shape), " over axes [",
                                            str_join(axes, ", "), "] needs more than ", kMaxRank,
                                            " kept or reduced dims after merging"));
  }
  layout.kept_rank = static_cast<int>(kept_sizes.size());
  layout.reduced_rank = static_cast<int>(reduced_sizes.size());
  std::copy(kept_sizes.begin(), kept_sizes.end(), layout.kept_sizes);
  std::copy(kept_strides.begin(), kept_strides.end(), layout.kept_strides);
  std::copy(reduced_sizes.begin(), reduced_sizes.end(), layout.reduced_sizes);
  std::copy(reduced_strides.begin(), reduced_strides.end(), layout.reduced_strides);
  return layout;
}

// ---- ReduceSum, ReduceMean, ReduceMax, GlobalAveragePool -----------------------------------

struct ReduceState : KernelState {
  bool copy = false;  // noop_with_empty_axes with no axes: the identity
  ReduceLayout layout;
};

// The reduced axes as the CPU kernel reads them: the axes operand wins over the attribute;
// normalized, sorted and checked; nullopt when neither is given.
absl::StatusOr<std::optional<std::vector<int64_t>>> reduced_axes(const KernelContext& ctx,
                                                                 int64_t rank) {
  std::vector<int64_t> axes;
  if (ctx.has_input(1)) {
    if (ctx.input(1).dtype() != DType::kI64) {
      return absl::InvalidArgumentError(
          str_cat("axes must be i64, got ", dtype_name(ctx.input(1).dtype())));
    }
    AMPC_ASSIGN_OR_RETURN(const Tensor* value, constant_operand(ctx, 1, "axes"));
    axes = value->to_i64_vector();
  } else if (const AttrValue* attr = ctx.node.find_attr("axes")) {
    axes = std::get<std::vector<int64_t>>(*attr);
  } else {
    return std::nullopt;
  }
  for (int64_t& axis : axes) {
    if (axis < -rank || axis >= rank) return axis_out_of_range(axis, rank);
    if (axis < 0) axis += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return absl::InvalidArgumentError(str_cat("axes [", str_join(axes, ", "), "] repeat an axis"));
  }
  return axes;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_reduce(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, reduced_axes(ctx, rank));
  auto state = std::make_unique<ReduceState>();
  if (!axes || axes->empty()) {
    if (int_attr_or(ctx.node, "noop_with_empty_axes", 0) != 0) {
      state->copy = true;
      return state;
    }
    axes = std::vector<int64_t>(rank);
    for (int64_t d = 0; d < rank; ++d) (*axes)[d] = d;
  }
  AMPC_ASSIGN_OR_RETURN(state->layout, reduce_layout(shape, *axes));
  AMPC_CHECK(state->layout.outputs == ctx.output(0).num_elements());
  return state;
}

// [N, C, D1, ...] averaged over the spatial dims, divided by their element count.
absl::StatusOr<std::unique_ptr<KernelState>> init_global_average_pool(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < static_cast<int64_t>(shape.size()); ++d) axes.push_back(d);
  auto state = std::make_unique<ReduceState>();
  AMPC_ASSIGN_OR_RETURN(state->layout, reduce_layout(shape, axes));
  return state;
}

template <ReduceOp kOp>
absl::Status reduce(const KernelContext& ctx) {
  const auto& state = static_cast<const ReduceState&>(*ctx.state);
  if (state.copy) {
    if (ctx.output(0).data == ctx.input(0).data || ctx.output(0).byte_size() == 0) {
      return absl::OkStatus();
    }
    return cuda_status(
        cudaMemcpyAsync(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size(),
                        cudaMemcpyDeviceToDevice, stream_of(ctx)),
        str_cat("cudaMemcpyAsync for ", ctx.node.op_type()));
  }
  return launched(launch_reduce(kOp, elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                                state.layout, stream_of(ctx)),
                  ctx);
}

// ---- ArgMax, ArgMin ------------------------------------------------------------------------

struct ArgReduceState : KernelState {
  bool select_last = false;
  ReduceLayout layout;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_arg_reduce(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = ctx.node.int_attr("axis");
  if (axis < -rank || axis >= rank) return axis_out_of_range(axis, rank);
  if (axis < 0) axis += rank;
  auto state = std::make_unique<ArgReduceState>();
  state->select_last = int_attr_or(ctx.node, "select_last_index", 0) != 0;
  AMPC_ASSIGN_OR_RETURN(state->layout, reduce_layout(shape, {axis}));
  return state;
}

template <bool kMax>
absl::Status arg_reduce(const KernelContext& ctx) {
  const auto& state = static_cast<const ArgReduceState&>(*ctx.state);
  return launched(
      launch_arg_reduce(kMax, state.select_last, elem(ctx.input(0)), ctx.input(0).data,
                        static_cast<int64_t*>(ctx.output(0).data), state.layout, stream_of(ctx)),
      ctx);
}

// ---- CumSum --------------------------------------------------------------------------------

struct CumSumState : KernelState {
  AxisLines lines;
  bool exclusive = false;
  bool reverse = false;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_cumsum(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  AMPC_ASSIGN_OR_RETURN(const Tensor* axis_value, constant_operand(ctx, 1, "axis"));
  int64_t axis = axis_value->element_as_i64(0);
  if (axis < -rank || axis >= rank) return axis_out_of_range(axis, rank);
  if (axis < 0) axis += rank;
  auto state = std::make_unique<CumSumState>();
  state->lines.length = shape[axis];
  for (int64_t d = 0; d < axis; ++d) state->lines.outer *= shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) state->lines.inner *= shape[d];
  state->exclusive = int_attr_or(ctx.node, "exclusive", 0) != 0;
  state->reverse = int_attr_or(ctx.node, "reverse", 0) != 0;
  return state;
}

absl::Status cumsum(const KernelContext& ctx) {
  const auto& state = static_cast<const CumSumState&>(*ctx.state);
  return launched(launch_cumsum(elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                                state.lines, state.exclusive, state.reverse, stream_of(ctx)),
                  ctx);
}

// ---- Registration --------------------------------------------------------------------------

void add(KernelRegistry& r, std::string op, std::vector<DType> dtypes, KernelFn fn,
         KernelInitFn init) {
  KernelDef def = cuda_kernel_def(std::move(op), std::move(dtypes), fn);
  def.init = init;
  r.add(std::move(def));
}

void register_cuda_reduce_kernels(KernelRegistry& r) {
  add(r, "ReduceSum", kCudaNumericTypes, &reduce<ReduceOp::kSum>, &init_reduce);
  add(r, "ReduceMean", kCudaNumericTypes, &reduce<ReduceOp::kMean>, &init_reduce);
  add(r, "ReduceMax", kCudaNumericTypes, &reduce<ReduceOp::kMax>, &init_reduce);
  add(r, "GlobalAveragePool", kCudaFloatTypes, &reduce<ReduceOp::kMean>, &init_global_average_pool);
  add(r, "ArgMax", kCudaNumericTypes, &arg_reduce<true>, &init_arg_reduce);
  add(r, "ArgMin", kCudaNumericTypes, &arg_reduce<false>, &init_arg_reduce);
  add(r, "CumSum", kCudaNumericTypes, &cumsum, &init_cumsum);
}

static KernelRegistration kCudaReduceKernels(&register_cuda_reduce_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
