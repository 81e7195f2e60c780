// Ragged slices and their reductions (compiler/onnx_ragged.h).
#include "compiler/onnx_ragged.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/onnx_lowering_internal.h"

namespace ampc::onnx_io {
namespace ragged_internal {

using lowering::Emitter;

absl::StatusOr<Value*> clamped_bound(Emitter& e, Value* bound, int64_t n, size_t rank) {
  AMPC_ASSIGN_OR_RETURN(Value * b, e.cast(bound, DType::kI64));
  if (b->type().num_elements() == 1) {
    AMPC_ASSIGN_OR_RETURN(b, e.reshape(b, Shape(rank, 1)));
  }
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * size, e.scalar(static_cast<double>(n), DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * negative, e.op("Less", {b, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * from_end, e.op("Add", {b, size}));
  AMPC_ASSIGN_OR_RETURN(b, e.op("Where", {negative, from_end, b}));
  AMPC_ASSIGN_OR_RETURN(b, e.op("Min", {b, size}));
  return e.op("Max", {b, zero});
}

double reduction_identity(std::string_view op) {
  if (op == "ReduceMax") return -std::numeric_limits<double>::infinity();
  if (op == "ReduceMin") return std::numeric_limits<double>::infinity();
  return 0;
}

absl::StatusOr<Value*> bag_lengths(Emitter& e, Value* start, Value* end, DType dtype) {
  AMPC_ASSIGN_OR_RETURN(Value * length, e.op("Sub", {end, start}));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(length, e.op("Max", {length, zero}));
  return e.cast(length, dtype);
}

}  // namespace ragged_internal

namespace {

using lowering::Emitter;
using lowering::has_input;
using lowering::tensor_input;
using ragged_internal::bag_lengths;
using ragged_internal::clamped_bound;
using ragged_internal::one_of;
using ragged_internal::reduction_identity;

constexpr std::string_view kBagReductions[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"};
// The element-wise ops a ragged slice may pass through (the same rows of every operand).
constexpr std::string_view kRowOps[] = {"Add", "Sub", "Mul", "Div"};
std::string ragged_why(const std::string& name, const RaggedSlice& slice) {
  return str_cat("a slice of '", slice.source->name(), "' whose bounds are computed at run time ('",
                 slice.start->name(), "' to '", slice.end->name(),
                 "'); ampc runs static graphs, so it supports such a slice only where a ",
                 "ReduceSum, ReduceMean, ReduceMax or ReduceMin over the sliced axis reads it ",
                 "(through Gather, Cast, Unsqueeze and element-wise arithmetic), as in ",
                 "nn.EmbeddingBag with offsets; '", name, "' is read otherwise");
}

// Defines `name` as `slice`: reads of it as a tensor fail, saying why.
absl::Status define_ragged(const std::string& name, const RaggedSlice& slice, ImportSink& sink) {
  sink.ragged().add_slice(name, slice);
  sink.leave_undefined(name, ragged_why(name, slice));
  return absl::OkStatus();
}

// `axis` of a rank-`rank` input counted from 0; an error naming the node when out of range.
absl::StatusOr<int64_t> axis_in(int64_t axis, int64_t rank, const std::string& label) {
  if (axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for data of rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// `op` of `operands` (the whole sources a slice was taken from), made once for every slice
// that asks (each iteration of a Loop asks again); `detail` tells its attributes apart.
absl::StatusOr<Value*> whole_rows(const onnx::NodeProto& proto, std::string_view op,
                                  std::vector<Value*> operands, Attributes attrs,
                                  const std::string& detail, ImportSink& sink) {
  Value*& whole = sink.ragged().made(op, operands, detail);
  if (whole == nullptr) {
    AMPC_ASSIGN_OR_RETURN(
        std::vector<Value*> made,
        sink.emit(op, std::move(operands), std::move(attrs),
                  {sink.fresh_name(str_cat(proto.output(0), "/all_rows"))}, proto.name()));
    whole = made[0];
  }
  return whole;
}

// One known integer of input `i`, or nullopt when it is computed at run time or absent.
std::optional<int64_t> known_scalar(const onnx::NodeProto& proto, int i, ImportSink& sink) {
  if (!has_input(proto, i)) return std::nullopt;
  Value* value = sink.tensor(proto.input(i));
  if (value == nullptr) return std::nullopt;
  const Tensor* known = sink.known_value(value);
  if (known == nullptr || !known->has_data() || value->type().num_elements() != 1) {
    return std::nullopt;
  }
  return known->element_as_i64(0);
}

// A Slice of a tensor along one known axis with step 1, whose start or end is one integer
// computed at run time.
bool makes_ragged(const onnx::NodeProto& proto, ImportSink& sink) {
  if (proto.op_type() != "Slice" || sink.opset() < 10 || proto.input_size() < 3) return false;
  Value* data = sink.tensor(proto.input(0));
  Value* start = sink.tensor(proto.input(1));
  Value* end = sink.tensor(proto.input(2));
  if (data == nullptr || start == nullptr || end == nullptr || data->shape().empty()) return false;
  for (const Value* bound : {start, end}) {
    if (bound->type().num_elements() != 1 || bound->shape().size() > 1 ||
        (bound->dtype() != DType::kI64 && bound->dtype() != DType::kI32)) {
      return false;
    }
  }
  if (sink.known_value(start) != nullptr && sink.known_value(end) != nullptr) return false;
  if (has_input(proto, 3) && !known_scalar(proto, 3, sink)) return false;
  if (has_input(proto, 4) && known_scalar(proto, 4, sink) != 1) return false;
  return true;
}

// The names of the inputs of `proto` that are ragged slices.
bool reads_ragged(const onnx::NodeProto& proto, ImportSink& sink) {
  return std::any_of(proto.input().begin(), proto.input().end(), [&](const std::string& name) {
    return !name.empty() && sink.ragged().slice(name) != nullptr;
  });
}

// One bag's reduction with the axis kept: the whole source reduced with the rows outside the
// bag set to the reduction's identity.
absl::StatusOr<Value*> masked_reduction(Emitter& e, std::string_view op, const RaggedSlice& bag) {
  const Shape& shape = bag.source->shape();
  const auto axis = static_cast<size_t>(bag.axis);
  const int64_t n = shape[axis];
  AMPC_ASSIGN_OR_RETURN(Value * start, clamped_bound(e, bag.start, n, shape.size()));
  AMPC_ASSIGN_OR_RETURN(Value * end, clamped_bound(e, bag.end, n, shape.size()));
  AMPC_ASSIGN_OR_RETURN(Value * rows, lowering::positions(e, n, axis, shape.size()));
  AMPC_ASSIGN_OR_RETURN(Value * after_start, e.op("GreaterOrEqual", {rows, start}));
  AMPC_ASSIGN_OR_RETURN(Value * before_end, e.op("Less", {rows, end}));
  AMPC_ASSIGN_OR_RETURN(Value * inside, e.op("And", {after_start, before_end}));
  AMPC_ASSIGN_OR_RETURN(Value * identity, e.scalar(reduction_identity(op), bag.source->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * masked, e.op("Where", {inside, bag.source, identity}));
  const std::string_view reduce = op == "ReduceMean" ? std::string_view("ReduceSum") : op;
  Attributes attrs = {{"axes", AttrValue(std::vector<int64_t>{bag.axis})},
                      {"keepdims", AttrValue(int64_t{1})}};
  AMPC_ASSIGN_OR_RETURN(Value * reduced, e.op(reduce, {masked}, std::move(attrs)));
  if (op != "ReduceMean") return reduced;
  AMPC_ASSIGN_OR_RETURN(Value * length, bag_lengths(e, start, end, bag.source->dtype()));
  return e.op("Div", {reduced, length});
}

absl::Status lower_slice(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Value * data, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * start, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * end, tensor_input(proto, 2, label, sink));
  AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                        axis_in(known_scalar(proto, 3, sink).value_or(0),
                                static_cast<int64_t>(data->shape().size()), label));
  return define_ragged(proto.output(0), RaggedSlice{data, axis, start, end}, sink);
}

absl::Status lower_gather(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(
      auto attrs, lowering::read_attributes(proto, label, {{"axis", onnx::AttributeProto::INT}}));
  if (const RaggedSlice* data = sink.ragged().slice(proto.input(0))) {
    return absl::UnimplementedError(str_cat(label, " reads ", ragged_why(proto.input(0), *data)));
  }
  const RaggedSlice* indices = sink.ragged().slice(proto.input(1));
  AMPC_ASSIGN_OR_RETURN(Value * table, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(
      const int64_t axis,
      axis_in(attrs.i("axis", 0), static_cast<int64_t>(table->shape().size()), label));
  AMPC_ASSIGN_OR_RETURN(Value * rows, whole_rows(proto, "Gather", {table, indices->source},
                                                 {{"axis", AttrValue(axis)}}, str_cat(axis), sink));
  return define_ragged(proto.output(0),
                       RaggedSlice{rows, axis + indices->axis, indices->start, indices->end}, sink);
}

// Cast, Unsqueeze and element-wise arithmetic: the same op on the whole source.
absl::Status lower_row_op(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  const RaggedSlice* first = nullptr;
  std::vector<Value*> operands;
  for (int i = 0; i < proto.input_size(); ++i) {
    const RaggedSlice* slice =
        proto.input(i).empty() ? nullptr : sink.ragged().slice(proto.input(i));
    if (slice == nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * value, tensor_input(proto, i, label, sink));
      operands.push_back(value);
      continue;
    }
    if (first != nullptr && (slice->start != first->start || slice->end != first->end)) {
      return absl::UnimplementedError(str_cat(
          label, " combines slices with different run-time bounds ('", first->start->name(),
          "' to '", first->end->name(), "' and '", slice->start->name(), "' to '",
          slice->end->name(), "'); ampc maps element-wise ops onto slices of the same rows"));
    }
    first = first == nullptr ? slice : first;
    operands.push_back(slice->source);
  }
  if (first == nullptr) return absl::InternalError(str_cat(label, " reads no ragged slice"));
  const std::string& op = proto.op_type();
  Attributes attrs;
  size_t out_rank = first->source->shape().size();
  int64_t axis = first->axis;
  if (op == "Cast") {
    AMPC_ASSIGN_OR_RETURN(auto read,
                          lowering::read_attributes(proto, label,
                                                    {{"to", onnx::AttributeProto::INT},
                                                     {"saturate", onnx::AttributeProto::INT}}));
    AMPC_ASSIGN_OR_RETURN(DType to,
                          lowering::element_type_attr(read.i("to", 1), str_cat(label, ": to")));
    attrs.emplace("to", AttrValue(to));
  } else if (op == "Unsqueeze") {
    std::vector<int64_t> axes;
    if (sink.opset() < 13) {
      AMPC_ASSIGN_OR_RETURN(auto read, lowering::read_attributes(
                                           proto, label, {{"axes", onnx::AttributeProto::INTS}}));
      axes = read.int_lists["axes"];
    } else {
      const Tensor* known = operands.size() > 1 ? sink.known_value(operands[1]) : nullptr;
      if (known == nullptr) {
        return absl::UnimplementedError(str_cat(label, ": axes must be known at compile time"));
      }
      axes = known->to_i64_vector();
      operands.resize(1);
    }
    out_rank += axes.size();
    for (int64_t& a : axes) {
      if (a < 0) a += static_cast<int64_t>(out_rank);
      if (a < 0 || a >= static_cast<int64_t>(out_rank)) {
        return invalid(str_cat(label, ": axis out of range"));
      }
    }
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes) axis += a <= axis ? 1 : 0;
    attrs.emplace("axes", AttrValue(axes));
  } else {
    // Broadcasting: every other operand must be constant along the sliced axis.
    for (Value* operand : operands) out_rank = std::max(out_rank, operand->shape().size());
    axis += static_cast<int64_t>(out_rank - first->source->shape().size());
    for (int i = 0; i < proto.input_size(); ++i) {
      if (sink.ragged().slice(proto.input(i)) != nullptr) {
        if (operands[i]->shape().size() != out_rank) {
          return absl::UnimplementedError(str_cat(
              label, ": input '", proto.input(i), "' has rank ", operands[i]->shape().size(),
              "; a slice with run-time bounds is broadcast only at the output's rank"));
        }
        continue;
      }
      const int64_t aligned = axis - static_cast<int64_t>(out_rank - operands[i]->shape().size());
      if (aligned >= 0 && operands[i]->shape()[static_cast<size_t>(aligned)] != 1) {
        return absl::UnimplementedError(
            str_cat(label, ": input '", proto.input(i),
                    "' varies along the axis sliced with run-time "
                    "bounds; it must be a slice of the same rows or constant along that axis"));
      }
    }
  }
  std::string detail;
  if (auto it = attrs.find("to"); it != attrs.end())
    detail = dtype_name(std::get<DType>(it->second));
  if (auto it = attrs.find("axes"); it != attrs.end()) {
    detail = shape_to_string(std::get<std::vector<int64_t>>(it->second));
  }
  AMPC_ASSIGN_OR_RETURN(Value * whole,
                        whole_rows(proto, op, std::move(operands), std::move(attrs), detail, sink));
  return define_ragged(proto.output(0), RaggedSlice{whole, axis, first->start, first->end}, sink);
}

absl::Status lower_bag_reduction(const onnx::NodeProto& proto, const std::string& label,
                                 ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(
      auto attrs, lowering::read_attributes(proto, label,
                                            {{"axes", onnx::AttributeProto::INTS},
                                             {"keepdims", onnx::AttributeProto::INT},
                                             {"noop_with_empty_axes", onnx::AttributeProto::INT}}));
  const RaggedSlice& slice = *sink.ragged().slice(proto.input(0));
  std::vector<int64_t> axes = attrs.int_lists["axes"];
  if (has_input(proto, 1)) {
    AMPC_ASSIGN_OR_RETURN(Value * value, tensor_input(proto, 1, label, sink));
    const Tensor* known = sink.known_value(value);
    if (known == nullptr) {
      return absl::UnimplementedError(str_cat(label, ": axes must be known at compile time"));
    }
    axes = known->to_i64_vector();
  }
  const auto rank = static_cast<int64_t>(slice.source->shape().size());
  for (int64_t& a : axes) a += a < 0 ? rank : 0;
  if (axes != std::vector<int64_t>{slice.axis}) {
    return absl::UnimplementedError(str_cat(label, " reduces ", ragged_why(proto.input(0), slice),
                                            " (it reduces axes ", shape_to_string(axes),
                                            ", the slice is along axis ", slice.axis, ")"));
  }
  const std::string& op = proto.op_type();
  if (op != "ReduceSum" && !is_arithmetic_float(slice.source->dtype())) {
    return absl::UnimplementedError(str_cat(label, ": ", op,
                                            " of a slice with run-time bounds "
                                            "needs float data; it is ",
                                            dtype_name(slice.source->dtype())));
  }
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * kept, masked_reduction(e, op, slice));
  sink.ragged().add_bag(kept, BagReduction{op, slice});
  if (attrs.i("keepdims", 1) != 0) {
    return sink.bind(proto.output(0), kept->name(), proto.name());
  }
  return e
      .op("Squeeze", {kept}, {{"axes", AttrValue(std::vector<int64_t>{slice.axis})}},
          proto.output(0))
      .status();
}

}  // namespace

const RaggedSlice* RaggedValues::slice(const std::string& name) const {
  auto it = slices_.find(name);
  return it == slices_.end() ? nullptr : &it->second;
}

const BagReduction* RaggedValues::bag(const Value* value) const {
  auto it = bags_.find(value);
  return it == bags_.end() ? nullptr : &it->second;
}

const MaskIndices* RaggedValues::mask_indices(const std::string& name) const {
  auto it = mask_indices_.find(name);
  return it == mask_indices_.end() ? nullptr : &it->second;
}

bool alias_ragged(const std::string& name, const std::string& existing, ImportSink& sink) {
  const RaggedSlice* slice = sink.ragged().slice(existing);
  if (slice == nullptr) return false;
  return define_ragged(name, *slice, sink).ok();
}

bool reads_or_makes_ragged(const onnx::NodeProto& proto, ImportSink& sink) {
  if (!proto.domain().empty() && proto.domain() != "ai.onnx") return false;
  if (reads_or_makes_masked_rows(proto, sink)) return true;
  if (proto.output_size() != 1 || proto.output(0).empty()) return false;
  const std::string& op = proto.op_type();
  if (!reads_ragged(proto, sink)) return makes_ragged(proto, sink);
  if (op == "Gather") return proto.input_size() == 2 && sink.ragged().slice(proto.input(1));
  if (one_of(op, kBagReductions))
    return proto.input_size() >= 1 && sink.ragged().slice(proto.input(0));
  return op == "Cast" || op == "Unsqueeze" || op == "Identity" || one_of(op, kRowOps);
}

absl::Status lower_ragged(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  if (reads_or_makes_masked_rows(proto, sink)) return lower_masked_rows(proto, label, sink);
  const std::string& op = proto.op_type();
  if (op == "Slice") return lower_slice(proto, label, sink);
  if (op == "Gather") return lower_gather(proto, label, sink);
  if (one_of(op, kBagReductions)) return lower_bag_reduction(proto, label, sink);
  return lower_row_op(proto, label, sink);
}

}  // namespace ampc::onnx_io
