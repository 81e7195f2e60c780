// NonZero and the forms of its indices, up to the GatherND (or Gather) that selects the rows
// they index (compiler/onnx_masked_rows.cc): the NonZero of a mask [d0, ..., dk] is kept as the
// mask (Form::kNonZero), its transpose as coordinates (kCoordinates); the dynamo exporter's
// chain for a mask of rank 1 (Squeeze to a vector, Shape, Expand, Unsqueeze back) moves
// between the forms. A mask known at compile time has indices known too: a constant.
#include <algorithm>

#include "compiler/onnx_masked_rows_internal.h"

namespace ampc::onnx_io::masked_rows_internal {
namespace {

using ragged_internal::one_of;

constexpr std::string_view kSingleOperandIdentities[] = {"Max", "Min", "Sum", "Mean"};

// `data`'s rows where `indices`' mask is true: its leading mask dimensions flattened into rows.
absl::Status select_rows(const onnx::NodeProto& proto, const std::string& label, Value* data,
                         const MaskIndices& indices, ImportSink& sink) {
  const Shape& mask_shape = indices.mask->shape();
  const Shape& shape = data->shape();
  if (shape.size() < mask_shape.size() ||
      !std::equal(mask_shape.begin(), mask_shape.end(), shape.begin())) {
    return invalid(str_cat(label, ": the mask '", indices.mask->name(), "' has shape ",
                           shape_to_string(mask_shape), ", which does not lead data '",
                           data->name(), "' of shape ", shape_to_string(shape)));
  }
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * mask, flat_mask(e, indices.mask, sink));
  Shape rows_shape{indices.mask->type().num_elements()};
  rows_shape.insert(rows_shape.end(), shape.begin() + static_cast<int64_t>(mask_shape.size()),
                    shape.end());
  Value* source = data;
  if (rows_shape != shape) {
    AMPC_ASSIGN_OR_RETURN(source, e.reshape(data, rows_shape));
  }
  if (is_arithmetic_float(source->dtype())) {
    AMPC_ASSIGN_OR_RETURN(Value * keep, row_mask(e, mask, rows_shape.size()));
    AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, source->dtype()));
    AMPC_ASSIGN_OR_RETURN(source, e.op("Where", {keep, source, zero}));
  }
  return define_rows(
      proto.output(0),
      RaggedSlice{.source = source,
                  .mask = mask,
                  .selected = str_cat("'", proto.input(0), "'['", indices.mask->name(), "']")},
      sink);
}

}  // namespace

// NonZero: the indices of a mask known at compile time as a constant; else the mask, whose
// indices stay symbolic until they select rows.

absl::Status lower_nonzero(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Value * mask, tensor_input(proto, 0, label, sink));
  const Tensor* known = sink.known_value(mask);
  if (known != nullptr && known->has_data()) {
    // A mask known at compile time (old opsets' arange: NonZero of ConstantOfShape) has
    // indices known too: [rank, count], row-major order.
    const Shape& shape = mask->shape();
    std::vector<int64_t> coordinates(shape.size());
    std::vector<std::vector<int64_t>> per_axis(shape.size());
    for (int64_t i = 0; i < known->num_elements(); ++i) {
      if (known->element_as_double(i) != 0) {
        for (size_t d = 0; d < shape.size(); ++d) per_axis[d].push_back(coordinates[d]);
      }
      for (size_t d = shape.size(); d-- > 0;) {
        if (++coordinates[d] < shape[d]) break;
        coordinates[d] = 0;
      }
    }
    std::vector<int64_t> flat;
    for (const std::vector<int64_t>& axis : per_axis)
      flat.insert(flat.end(), axis.begin(), axis.end());
    const auto count = static_cast<int64_t>(per_axis.empty() ? 0 : per_axis[0].size());
    Emitter e(proto, label, sink);
    return e
        .op("Constant", {},
            {{"value",
              AttrValue(Tensor::from_i64({static_cast<int64_t>(shape.size()), count}, flat))}},
            proto.output(0))
        .status();
  }
  if (mask->shape().empty()) {
    return absl::UnimplementedError(str_cat(label, ": NonZero of a scalar"));
  }
  return define_indices(proto.output(0), MaskIndices{mask, Form::kNonZero}, sink);
}

// An op reading indices: the next form, or the rows they select.
absl::Status lower_indices_op(const onnx::NodeProto& proto, const std::string& label,
                              ImportSink& sink) {
  const std::string& op = proto.op_type();
  const std::string& out = proto.output(0);
  if (op == "GatherND" || op == "Gather") {
    const MaskIndices* at = indices_of(proto, 1, sink);
    if (const MaskIndices* data = indices_of(proto, 0, sink)) {
      return unsupported(label, indices_why(proto.input(0), *data));
    }
    if (const RaggedSlice* rows = rows_of(proto, 0, sink)) {  // rows picked from rows
      return unsupported(label, selection_why(proto.input(0), *rows));
    }
    if (at == nullptr) return absl::InternalError(str_cat(label, " reads no mask's indices"));
    const bool gather_nd =
        op == "GatherND" && at->form == Form::kCoordinates && int_attr(proto, "batch_dims", 0) == 0;
    const bool gather =
        op == "Gather" && at->form == Form::kVector && int_attr(proto, "axis", 0) == 0;
    if (!gather_nd && !gather) return unsupported(label, indices_why(proto.input(1), *at));
    AMPC_ASSIGN_OR_RETURN(Value * data, tensor_input(proto, 0, label, sink));
    return select_rows(proto, label, data, *at, sink);
  }
  const MaskIndices& in = *indices_of(proto, 0, sink);
  const auto rank = static_cast<int64_t>(in.mask->shape().size());
  const auto next = [&](Form form) {
    return define_indices(out, MaskIndices{in.mask, form}, sink);
  };
  if (op == "Identity" || op == "Cast" ||
      (one_of(op, kSingleOperandIdentities) && proto.input_size() == 1)) {
    return next(in.form);
  }
  if (op == "Transpose" && in.form == Form::kNonZero &&
      ints_attr(proto, "perm").value_or(std::vector<int64_t>{1, 0}) == std::vector<int64_t>{1, 0}) {
    return next(Form::kCoordinates);
  }
  if (op == "Squeeze" && in.form == Form::kCoordinates && rank == 1) {
    AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                          axes_of(proto, 13, label, sink));
    if (axes && normalized(*axes, 2) == std::vector<int64_t>{1}) return next(Form::kVector);
  }
  if (op == "Unsqueeze" && in.form == Form::kVector) {
    AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                          axes_of(proto, 13, label, sink));
    if (axes && normalized(*axes, 2) == std::vector<int64_t>{1}) return next(Form::kCoordinates);
  }
  if (op == "Concat" && in.form == Form::kCoordinates && proto.input_size() == 1) {
    return next(Form::kCoordinates);
  }
  if (op == "Shape" && in.form == Form::kVector && int_attr(proto, "start", 0) == 0 &&
      int_attr(proto, "end", 1) >= 1) {
    return next(Form::kShape);
  }
  if (op == "Expand" && in.form == Form::kVector) {
    const MaskIndices* shape = indices_of(proto, 1, sink);
    if (shape != nullptr && same_mask(shape->mask, in.mask, sink) && shape->form == Form::kShape) {
      return next(Form::kVector);
    }
  }
  return unsupported(label, indices_why(proto.input(0), in));
}

bool reads_indices(const onnx::NodeProto& proto, ImportSink& sink) {
  for (int i = 0; i < proto.input_size(); ++i) {
    if (indices_of(proto, i, sink) != nullptr) return true;
  }
  return false;
}

}  // namespace ampc::onnx_io::masked_rows_internal
