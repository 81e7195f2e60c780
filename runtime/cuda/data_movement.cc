// CUDA kernels of the data-movement and constant ops: Transpose, Concat, Split, Slice, Gather,
// Expand, Pad, Tile, Trilu, Shape, ConstantOfShape, Range and Constant; registration and the
// host side.
//
// Every output element is an input element moved (or a pad value, a zero, a constant), so the
// kernels move words of the element size and are bit-exact against runtime/cpu for every dtype.
// Transpose, Slice, Expand, Tile, Pad, Concat (one move per input into its slab of the output)
// and Split (one per output) are each an index map (MoveMap) made at load from the static shapes
// and the values inference needed: Slice's starts/ends/axes/steps, Pad's pads/axes and, for an
// omitted Split output, the `split` input must be initializers. Values the kernels read per run
// stay on the device: Gather's indices (checked there, into the device error word), Pad's
// constant value, Trilu's k, Range's start and delta. Shape and Constant copy bytes made at load
// from pinned host memory; ConstantOfShape fills.
#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cpu/slicing.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/data_movement_kernels.h"

namespace ampc::runtime::cuda {
namespace {

using cpu::normalized_axis;
using ops::dims_product;
using ops::strides_of;

// `ctx` with the `operands` (index, name; absent ones skipped) reading their initializers' host
// bytes: the index operands that place elements, read once at load by the CPU's own helpers
// (runtime/cpu/slicing.h). A value computed on the device would not be known at load.
absl::StatusOr<KernelContext> host_context(
    const KernelContext& ctx, std::initializer_list<std::pair<int, std::string_view>> operands) {
  KernelContext host{ctx.node, ctx.inputs, ctx.outputs, {}};
  for (const auto& [i, name] : operands) {
    if (ctx.has_input(i)) {
      const Tensor* value = ctx.node.operand(i)->initializer();
      if (value == nullptr) {
        return absl::UnimplementedError(str_cat("the cuda ", ctx.node.op_type(),
                                                " kernel needs input ", i, " ('", name,
                                                "') as an initializer (a constant known at load)"));
      }
      if (!value->has_data()) {
        return absl::FailedPreconditionError(
            str_cat("input ", i, " ('", name,
                    "') has elided data (text IR printed without large constants)"));
      }
      host.inputs[i].data = const_cast<uint8_t*>(value->bytes().data());
    }
  }
  return host;
}

// ---- Index maps ------------------------------------------------------------------------------

// One output dim of a move before merging.
struct MoveDim {
  int64_t size = 1;
  int64_t in_stride = 0;
  int64_t out_stride = 0;
  DimRule rule = DimRule::kStride;
  int64_t in_dim = 0;
  int64_t pad_begin = 0;
};

// The MoveMap of `dims`: stride dims of size 1 dropped (their index is always 0), neighbouring
// stride dims merged where both sides are contiguous across them.
absl::StatusOr<MoveMap> make_map(const std::vector<MoveDim>& dims, int64_t in_offset,
                                 int64_t out_offset) {
  MoveMap map;
  map.in_offset = in_offset;
  map.out_offset = out_offset;
  map.size = 1;
  std::vector<MoveDim> kept;
  for (const MoveDim& dim : dims) {
    map.size *= dim.size;
    if (dim.rule == DimRule::kStride && dim.size == 1) continue;
    if (!kept.empty() && dim.rule == DimRule::kStride && kept.back().rule == DimRule::kStride &&
        kept.back().in_stride == dim.in_stride * dim.size &&
        kept.back().out_stride == dim.out_stride * dim.size) {
      kept.back().size *= dim.size;
      kept.back().in_stride = dim.in_stride;
      kept.back().out_stride = dim.out_stride;
    } else {
      kept.push_back(dim);
    }
  }
  if (map.size == 0) return map;
  if (kept.empty()) kept.push_back({.size = 1, .in_stride = 1, .out_stride = 1});  // one element
  if (kept.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat(
        "the move needs ", kept.size(), " dims after merging; the cuda kernels take ", kMaxRank));
  }
  map.rank = static_cast<int>(kept.size());
  for (int d = 0; d < map.rank; ++d) {
    map.dims[d] = kept[d].size;
    map.in_strides[d] = kept[d].in_stride;
    map.out_strides[d] = kept[d].out_stride;
    map.rules[d] = kept[d].rule;
    map.in_dims[d] = kept[d].in_dim;
    map.pad_begin[d] = kept[d].pad_begin;
  }
  return map;
}

// Plain stride dims over `out_shape`, written row-major, read with `in_strides`.
std::vector<MoveDim> strided_dims(const Shape& out_shape, const std::vector<int64_t>& in_strides) {
  const std::vector<int64_t> out_strides = strides_of(out_shape);
  std::vector<MoveDim> dims(out_shape.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    dims[d] = {.size = out_shape[d], .in_stride = in_strides[d], .out_stride = out_strides[d]};
  }
  return dims;
}

// Moves from input `input` to output `output` along `map`.
struct Move {
  int input = 0;
  int output = 0;
  MoveMap map;
};

struct MoveState : KernelState {
  std::vector<Move> moves;
  // Pad: operand 2 (the constant value) when the node has it.
  int pad_value_operand = -1;
  // SliceGrad: output 0 is zeroed before the moves write part of it.
  bool zero_output = false;
};

absl::StatusOr<std::unique_ptr<KernelState>> one_move(const std::vector<MoveDim>& dims,
                                                      int64_t in_offset = 0) {
  AMPC_ASSIGN_OR_RETURN(MoveMap map, make_map(dims, in_offset, 0));
  auto state = std::make_unique<MoveState>();
  state->moves.push_back({.input = 0, .output = 0, .map = map});
  return state;
}

absl::Status run_moves(const KernelContext& ctx) {
  const auto& state = static_cast<const MoveState&>(*ctx.state);
  const void* pad_value = state.pad_value_operand >= 0 && ctx.has_input(state.pad_value_operand)
                              ? ctx.input(state.pad_value_operand).data
                              : nullptr;
  if (state.zero_output) {
    AMPC_RETURN_IF_ERROR(cuda_status(
        cudaMemsetAsync(ctx.output(0).data, 0, ctx.output(0).byte_size(), stream_of(ctx)),
        str_cat("cudaMemsetAsync for ", ctx.node.op_type())));
  }
  for (const Move& move : state.moves) {
    const TensorArg& in = ctx.input(move.input);
    AMPC_RETURN_IF_ERROR(
        launched(launch_move(move.map, dtype_size(in.dtype()), in.data,
                             ctx.output(move.output).data, pad_value, stream_of(ctx)),
                 ctx));
  }
  return absl::OkStatus();
}

// ---- Transpose, Slice, Expand, Tile, Pad ------------------------------------------------------

// Output dim d walks input dim perm[d] (ops::permutation: default the dims reversed).
absl::StatusOr<std::unique_ptr<KernelState>> init_transpose(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const int rank = static_cast<int>(in_shape.size());
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> perm, ops::permutation(ctx.node, rank));
  const std::vector<int64_t> strides = strides_of(in_shape);
  std::vector<int64_t> in_strides(rank);
  for (int d = 0; d < rank; ++d) in_strides[d] = strides[perm[d]];
  return one_move(strided_dims(ctx.output(0).shape(), in_strides));
}

// Slice's starts/ends/axes/steps (initializers) resolved by runtime/cpu/slicing.h, which checks
// them against the inferred output shape.
absl::StatusOr<std::unique_ptr<KernelState>> init_slice(const KernelContext& ctx) {
  const Shape& full = ctx.input(0).shape();
  const Shape& sliced = ctx.output(0).shape();
  const int64_t rank = full.size();
  AMPC_ASSIGN_OR_RETURN(const KernelContext host,
                        host_context(ctx, {{1, "starts"}, {2, "ends"}, {3, "axes"}, {4, "steps"}}));
  AMPC_ASSIGN_OR_RETURN(const std::vector<cpu::DimSlice> slices,
                        cpu::resolve_slices(host, full, sliced));
  const std::vector<int64_t> strides = strides_of(full);
  int64_t base = 0;
  std::vector<int64_t> in_strides(rank, 0);
  for (int64_t d = 0; d < rank; ++d) {
    if (slices[d].size == 0) return one_move(strided_dims(sliced, in_strides));  // empty
    base += slices[d].start * strides[d];
    // A dim of output size 1 never moves, so its step (maybe INT64_MAX) is never multiplied.
    if (slices[d].size > 1) in_strides[d] = slices[d].step * strides[d];
  }
  return one_move(strided_dims(sliced, in_strides), base);
}

// SliceGrad (ampc): zeros of the sliced data's shape with dY written where the Slice read: the
// Slice's move the other way round (dY read row-major, written at the slice's strides). Its
// starts/ends/axes/steps are operands 1 to 4, as Slice's.
absl::StatusOr<std::unique_ptr<KernelState>> init_slice_grad(const KernelContext& ctx) {
  const Shape& full = ctx.output(0).shape();
  const Shape& sliced = ctx.input(0).shape();
  const int64_t rank = full.size();
  AMPC_ASSIGN_OR_RETURN(const KernelContext host,
                        host_context(ctx, {{1, "starts"}, {2, "ends"}, {3, "axes"}, {4, "steps"}}));
  AMPC_ASSIGN_OR_RETURN(const std::vector<cpu::DimSlice> slices,
                        cpu::resolve_slices(host, full, sliced));
  const std::vector<int64_t> full_strides = strides_of(full);
  const std::vector<int64_t> sliced_strides = strides_of(sliced);
  int64_t base = 0;
  std::vector<MoveDim> dims(rank);
  for (int64_t d = 0; d < rank; ++d) {
    base += slices[d].start * full_strides[d];
    dims[d] = {.size = sliced[d],
               .in_stride = sliced_strides[d],
               .out_stride = slices[d].size > 1 ? slices[d].step * full_strides[d] : 0};
  }
  auto state = std::make_unique<MoveState>();
  state->zero_output = true;
  if (num_elements(sliced) > 0) {
    AMPC_ASSIGN_OR_RETURN(MoveMap map, make_map(dims, 0, base));
    state->moves.push_back({.input = 0, .output = 0, .map = map});
  }
  return state;
}

// Input dims of size 1 (and missing leading dims) are read with stride 0.
absl::StatusOr<std::unique_ptr<KernelState>> init_expand(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const size_t lead = out_shape.size() - in_shape.size();
  std::vector<int64_t> in_strides(out_shape.size(), 0);
  int64_t stride = 1;
  for (size_t d = in_shape.size(); d-- > 0;) {
    if (in_shape[d] != 1) in_strides[lead + d] = stride;
    stride *= in_shape[d];
  }
  return one_move(strided_dims(out_shape, in_strides));
}

// Output dim d of size repeats * n reads index o mod n: as two dims, the repeat (input stride 0)
// over the input's n, so the map stays plain strides.
absl::StatusOr<std::unique_ptr<KernelState>> init_tile(const KernelContext& ctx) {
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const std::vector<int64_t> in_strides = strides_of(in_shape);
  const std::vector<int64_t> out_strides = strides_of(out_shape);
  std::vector<MoveDim> dims;
  for (size_t d = 0; d < in_shape.size(); ++d) {
    const int64_t n = in_shape[d];
    const int64_t repeats = n == 0 ? 0 : out_shape[d] / n;
    dims.push_back({.size = repeats, .in_stride = 0, .out_stride = n * out_strides[d]});
    dims.push_back({.size = n, .in_stride = in_strides[d], .out_stride = out_strides[d]});
  }
  return one_move(dims);
}

// Pads [begin..., end...] over every axis from the pads and axes initializers, as
// runtime/cpu/pad.cc's full_pads spreads them; each padded axis gets its mode's rule.
absl::StatusOr<std::unique_ptr<KernelState>> init_pad(const KernelContext& ctx) {
  const std::string& mode_name = ctx.node.string_attr("mode");
  DimRule mode = DimRule::kPadConstant;
  if (mode_name == "reflect") {
    mode = DimRule::kPadReflect;
  } else if (mode_name == "edge") {
    mode = DimRule::kPadEdge;
  } else if (mode_name == "wrap") {
    mode = DimRule::kPadWrap;
  } else if (mode_name != "constant") {
    return absl::InvalidArgumentError(
        str_cat("mode \"", mode_name, "\" is not supported (constant, reflect, edge, wrap)"));
  }
  const Shape& in_shape = ctx.input(0).shape();
  const Shape& out_shape = ctx.output(0).shape();
  const int64_t rank = in_shape.size();
  AMPC_ASSIGN_OR_RETURN(const KernelContext host, host_context(ctx, {{1, "pads"}, {3, "axes"}}));
  const std::vector<int64_t> pads = cpu::index_values(host.input(1));
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    axes = cpu::index_values(host.input(3));
    for (int64_t& axis : axes) axis = normalized_axis(axis, rank);
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t n = axes.size();
  bool valid = pads.size() == 2 * n;
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t k = 0; valid && k < n; ++k) {
    valid = axes[k] >= 0 && axes[k] < rank;
    if (valid) {
      full[axes[k]] = pads[k];
      full[rank + axes[k]] = pads[n + k];
    }
  }
  for (int64_t d = 0; valid && d < rank; ++d) {
    valid = in_shape[d] + full[d] + full[rank + d] == out_shape[d];
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        str_cat("pads ", shape_to_string(pads), " over axes ", shape_to_string(axes),
                " do not pad ", shape_to_string(in_shape), " to ", shape_to_string(out_shape)));
  }
  const std::vector<int64_t> in_strides = strides_of(in_shape);
  std::vector<MoveDim> dims = strided_dims(out_shape, in_strides);
  for (int64_t d = 0; d < rank; ++d) {
    if (full[d] == 0 && full[rank + d] == 0) continue;
    dims[d].rule = mode;
    dims[d].in_dim = in_shape[d];
    dims[d].pad_begin = full[d];
  }
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<KernelState> state, one_move(dims));
  static_cast<MoveState&>(*state).pad_value_operand = 2;
  return state;
}

// ---- Concat, Split ---------------------------------------------------------------------------

// The output is `outer` blocks; block o holds block o of each input in turn.
absl::StatusOr<std::unique_ptr<KernelState>> init_concat(const KernelContext& ctx) {
  const Shape& out_shape = ctx.output(0).shape();
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), out_shape.size());
  const int64_t outer = dims_product(out_shape, 0, axis);
  const int64_t out_block = dims_product(out_shape, axis, out_shape.size());
  auto state = std::make_unique<MoveState>();
  int64_t offset = 0;
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const Shape& in_shape = ctx.inputs[k].shape();
    const int64_t block = dims_product(in_shape, axis, in_shape.size());
    AMPC_ASSIGN_OR_RETURN(MoveMap map,
                          make_map({{.size = outer, .in_stride = block, .out_stride = out_block},
                                    {.size = block, .in_stride = 1, .out_stride = 1}},
                                   0, offset));
    state->moves.push_back({.input = static_cast<int>(k), .output = 0, .map = map});
    offset += block;
  }
  return state;
}

// The size along the axis of each output, omitted ones included, as the CPU's split_sizes:
// the `split` input (an initializer, or the output shapes when every output is present) or
// attribute, else equal chunks of ceil(dim / n) with a smaller last one.
absl::StatusOr<std::vector<int64_t>> split_sizes(const KernelContext& ctx, size_t axis) {
  const int64_t dim = ctx.input(0).shape()[axis];
  if (ctx.has_input(1)) {
    const bool all_present = std::all_of(ctx.outputs.begin(), ctx.outputs.end(),
                                         [](const TensorArg& out) { return out.present(); });
    if (ctx.node.operand(1)->initializer() != nullptr || !all_present) {
      AMPC_ASSIGN_OR_RETURN(const KernelContext host, host_context(ctx, {{1, "split"}}));
      return cpu::index_values(host.input(1));
    }
    std::vector<int64_t> sizes;
    for (const TensorArg& out : ctx.outputs) sizes.push_back(out.shape()[axis]);
    return sizes;
  }
  if (ctx.node.find_attr("split")) return ctx.node.ints_attr("split");
  const int64_t count = ctx.outputs.size();
  const int64_t chunk = (dim + count - 1) / count;
  std::vector<int64_t> sizes(count, chunk);
  sizes.back() = dim - chunk * (count - 1);
  return sizes;
}

// The inverse of Concat: output k takes the next sizes[k] slices along the axis of each block.
absl::StatusOr<std::unique_ptr<KernelState>> init_split(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), shape.size());
  const int64_t outer = dims_product(shape, 0, axis);
  const int64_t slice = dims_product(shape, axis + 1, shape.size());
  const int64_t in_block = shape[axis] * slice;
  AMPC_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, split_sizes(ctx, axis));
  int64_t total = 0;
  bool valid = sizes.size() == ctx.outputs.size();
  for (size_t k = 0; valid && k < sizes.size(); ++k) {
    valid = sizes[k] >= 0 && (!ctx.outputs[k].present() ||
                              ctx.outputs[k].num_elements() == outer * sizes[k] * slice);
    total += sizes[k];
  }
  if (!valid || total != shape[axis]) {
    return absl::InvalidArgumentError(
        str_cat("split ", shape_to_string(sizes), " does not give the inferred output shapes"));
  }
  auto state = std::make_unique<MoveState>();
  int64_t offset = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t block = sizes[k] * slice;
    if (ctx.outputs[k].present()) {
      AMPC_ASSIGN_OR_RETURN(MoveMap map,
                            make_map({{.size = outer, .in_stride = in_block, .out_stride = block},
                                      {.size = block, .in_stride = 1, .out_stride = 1}},
                                     offset, 0));
      state->moves.push_back({.input = 0, .output = static_cast<int>(k), .map = map});
    }
    offset += block;
  }
  return state;
}

// ---- Gather, Trilu, Range --------------------------------------------------------------------

struct GatherState : KernelState {
  int64_t outer = 0;
  int64_t dim = 0;
  int64_t inner = 0;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_gather(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const size_t axis = normalized_axis(ctx.node.int_attr("axis"), shape.size());
  auto state = std::make_unique<GatherState>();
  state->outer = dims_product(shape, 0, axis);
  state->dim = shape[axis];
  state->inner = dims_product(shape, axis + 1, shape.size());
  return state;
}

absl::Status gather(const KernelContext& ctx) {
  const auto& state = static_cast<const GatherState&>(*ctx.state);
  const TensorArg& indices = ctx.input(1);
  return launched(launch_gather(dtype_size(ctx.input(0).dtype()), ctx.input(0).data, indices.data,
                                indices.dtype() == DType::kI64, ctx.output(0).data, state.outer,
                                indices.num_elements(), state.dim, state.inner,
                                ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

// k (an i64 scalar, read on the device) defaults to 0.
absl::Status trilu(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const int64_t rows = shape[shape.size() - 2];
  const int64_t cols = shape[shape.size() - 1];
  const auto* k = ctx.has_input(1) ? static_cast<const int64_t*>(ctx.input(1).data) : nullptr;
  return launched(launch_trilu(dtype_size(ctx.input(0).dtype()), ctx.input(0).data,
                               ctx.output(0).data, ctx.output(0).num_elements(), rows, cols, k,
                               ctx.node.int_attr("upper") != 0, stream_of(ctx)),
                  ctx);
}

// The length was inferred at load; start and delta are read on the device.
absl::Status range(const KernelContext& ctx) {
  return launched(
      launch_range(*elem_of(ctx.output(0).dtype()), ctx.input(0).data, ctx.input(2).data,
                   ctx.output(0).data, ctx.output(0).num_elements(), stream_of(ctx)),
      ctx);
}

// ---- Shape, Constant, ConstantOfShape --------------------------------------------------------

// Output bytes known at load, kept in pinned host memory and copied on the stream each run.
struct HostBytesState : KernelState {
  void* pinned = nullptr;
  int64_t bytes = 0;
  ~HostBytesState() override {
    if (pinned != nullptr) cudaFreeHost(pinned);
  }
};

absl::StatusOr<std::unique_ptr<KernelState>> host_bytes_state(const void* bytes, int64_t size) {
  auto state = std::make_unique<HostBytesState>();
  state->bytes = size;
  if (size == 0) return state;
  AMPC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&state->pinned, size));
  std::memcpy(state->pinned, bytes, size);
  return state;
}

absl::Status copy_host_bytes(const KernelContext& ctx) {
  const auto& state = static_cast<const HostBytesState&>(*ctx.state);
  if (state.bytes == 0) return absl::OkStatus();
  return cuda_status(cudaMemcpyAsync(ctx.output(0).data, state.pinned, state.bytes,
                                     cudaMemcpyHostToDevice, stream_of(ctx)),
                     str_cat("cudaMemcpyAsync for ", ctx.node.op_type()));
}

// Dims [start, end) of the input's static shape, as inference reads them (ops::shape_range).
absl::StatusOr<std::unique_ptr<KernelState>> init_shape(const KernelContext& ctx) {
  const Shape& shape = ctx.input(0).shape();
  const auto [start, end] = ops::shape_range(ctx.node, static_cast<int64_t>(shape.size()));
  const std::vector<int64_t> dims(shape.begin() + start, shape.begin() + end);
  AMPC_CHECK(static_cast<int64_t>(dims.size()) == ctx.output(0).num_elements());
  return host_bytes_state(dims.data(), ctx.output(0).byte_size());
}

using ops::constant_value;

absl::StatusOr<std::unique_ptr<KernelState>> init_constant(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const Tensor value, constant_value(ctx.node));
  if (!value.has_data()) {
    return absl::FailedPreconditionError(
        "the value's data was elided (text IR printed without large constants); it cannot run");
  }
  AMPC_CHECK(value.type() == *ctx.output(0).type);
  return host_bytes_state(value.bytes().data(), static_cast<int64_t>(value.bytes().size()));
}

// ConstantOfShape: every element is the word of the `value` attribute's one element.
struct FillState : KernelState {
  uint64_t word = 0;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_constant_of_shape(const KernelContext& ctx) {
  const Tensor& value = ctx.node.tensor_attr("value");
  if (!value.has_data()) {
    return absl::FailedPreconditionError(
        "attribute 'value' has elided data (text IR printed without large constants)");
  }
  const int size = dtype_size(ctx.output(0).dtype());
  AMPC_CHECK(value.dtype() == ctx.output(0).dtype() && value.num_elements() >= 1);
  auto state = std::make_unique<FillState>();
  std::memcpy(&state->word, value.bytes().data(), size);  // little-endian: the low bytes
  return state;
}

absl::Status constant_of_shape(const KernelContext& ctx) {
  const auto& state = static_cast<const FillState&>(*ctx.state);
  const TensorArg& out = ctx.output(0);
  return launched(launch_fill(out.data, out.num_elements(), dtype_size(out.dtype()), state.word,
                              stream_of(ctx)),
                  ctx);
}

// ---- Registration ----------------------------------------------------------------------------

void add(KernelRegistry& r, std::string op, std::vector<DType> dtypes, KernelFn fn,
         KernelInitFn init, KeyedOn keyed_on = {}, int in_place_operand = -1) {
  KernelDef def = cuda_kernel_def(std::move(op), std::move(dtypes), fn, in_place_operand);
  def.init = init;
  def.keyed_on = keyed_on;
  r.add(std::move(def));
}

void register_cuda_data_movement_kernels(KernelRegistry& r) {
  // Byte movers serve every dtype, as on the CPU; none runs in place but Trilu, whose elements
  // each read only themselves.
  const std::vector<DType> all(std::begin(kAllDTypes), std::end(kAllDTypes));
  add(r, "Transpose", all, &run_moves, &init_transpose);
  add(r, "Slice", all, &run_moves, &init_slice);
  add(r, "Expand", all, &run_moves, &init_expand);
  add(r, "Tile", all, &run_moves, &init_tile);
  add(r, "Pad", all, &run_moves, &init_pad);
  add(r, "Concat", all, &run_moves, &init_concat);
  add(r, "Split", all, &run_moves, &init_split);
  add(r, "Gather", all, &gather, &init_gather);
  r.add(cuda_ampc_kernel_def("SliceGrad", kCudaFloatTypes, &run_moves, &init_slice_grad));
  add(r, "Trilu", all, &trilu, nullptr, {}, 0);
  add(r, "Shape", all, &copy_host_bytes, &init_shape);
  // Constant and ConstantOfShape have no data operand: their key is output 0.
  const KeyedOn output_0{.output = true, .index = 0};
  add(r, "Constant", all, &copy_host_bytes, &init_constant, output_0);
  add(r, "ConstantOfShape", all, &constant_of_shape, &init_constant_of_shape, output_0);
  // The element types Range's OpDef admits.
  add(r, "Range", {DType::kF32, DType::kF64, DType::kI32, DType::kI64}, &range, nullptr);
}

static KernelRegistration kCudaDataMovementKernels(&register_cuda_data_movement_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
