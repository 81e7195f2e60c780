// The forms ops had at old opsets, lowered at import to what ampc's definitions of those opsets
// hold, so that passes, gradients and kernels see one meaning per op:
//
// - Softmax and LogSoftmax before opset 13 coerce the input to 2-D at `axis` (default 1) and
//   normalize each row of the trailing dims taken together. Over the last axis that is opset 13's
//   op, which ampc registers for these opsets (ops/softmax.cc); over another axis it is
//   Flatten(axis), the op over the last axis of the matrix, and Reshape back to the input's
//   shape. PyTorch's exporter writes these below 13 for softmax(dim=-1).
// - BatchNormalization at opsets 9 to 13 has no training_mode: a node with outputs past Y (mean
//   and var, the updated running statistics; saved_mean and saved_var) is in training mode, and
//   Y is normalized with the batch's statistics, as PyTorch (whose TorchScript exporter writes
//   this form for a module in training) and onnxruntime compute it. The node keeps mean and var
//   as opset 14's running_mean and running_var and gets `training_mode` (ampc's record of the
//   form, written back as the outputs on export). saved_mean and saved_var are left undefined:
//   runtimes fill them differently (the batch variance or its inverse square root), and reading
//   one is an error that says so.
// - Slice before opset 10 takes starts, ends and axes as attributes, and ampc's Slice is opset
//   10's: each sliced axis becomes a Gather of its positions (the axis's length must be known).
// - Dropout before opset 12 has no training_mode either: PyTorch's exporter writes the mask output
//   for a module in training and no Dropout at all in eval, so a node with its mask output is in
//   training mode. It gets opset 12's training_mode operand (a constant true), which export
//   writes back as the mask output. Before opset 10 the mask had the data's type; ampc's is
//   bool, so there it is left undefined.
#include <algorithm>

#include "compiler/onnx_lowering.h"
#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

using lowering::Emitter;
using lowering::NodeAttributes;
using lowering::read_attributes;
using lowering::tensor_input;

// The node's attributes as read (`known` in read_attributes), for the node it lowers to.
Attributes as_attributes(const NodeAttributes& read) {
  Attributes attrs;
  for (const auto& [name, value] : read.floats) attrs.emplace(name, AttrValue(value));
  for (const auto& [name, value] : read.ints) attrs.emplace(name, AttrValue(value));
  return attrs;
}

absl::Status lower_coerced_softmax(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"axis", onnx::AttributeProto::INT}}));
  if (proto.output_size() > 1) {
    return invalid(
        str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(), " has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const Shape& shape = x->shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) return invalid(str_cat(label, ": input must have rank >= 1, got a scalar"));
  int64_t axis = attrs.i("axis", 1);
  if (axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for rank ", rank));
  }
  if (axis < 0) axis += rank;
  if (axis == rank - 1) {
    return sink.emit(proto.op_type(), {x}, {{"axis", AttrValue(axis)}}, {e.output(0)}, proto.name())
        .status();
  }
  AMPC_ASSIGN_OR_RETURN(Value * rows, e.op("Flatten", {x}, {{"axis", AttrValue(axis)}}));
  AMPC_ASSIGN_OR_RETURN(Value * normalized,
                        e.op(proto.op_type(), {rows}, {{"axis", AttrValue(int64_t{1})}}));
  return e.reshape(normalized, shape, e.output(0)).status();
}

absl::Status lower_batch_norm_v9(const onnx::NodeProto& proto, const std::string& label,
                                 ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"epsilon", onnx::AttributeProto::FLOAT},
                                         {"momentum", onnx::AttributeProto::FLOAT}}));
  if (proto.input_size() != 5) {
    return invalid(str_cat(label, " has ", proto.input_size(),
                           " inputs; BatchNormalization has 5 (X, scale, B, mean, var)"));
  }
  if (proto.output_size() > 5) {
    return invalid(str_cat(label, " has ", proto.output_size(),
                           " outputs; BatchNormalization has at most 5 at opsets 9 to 13"));
  }
  std::vector<Value*> operands;
  for (int i = 0; i < 5; ++i) {
    AMPC_ASSIGN_OR_RETURN(Value * operand, tensor_input(proto, i, label, sink));
    operands.push_back(operand);
  }
  bool training = false;
  std::vector<std::string> outputs;
  static constexpr const char* kSaved[] = {"saved_mean", "saved_var"};
  for (int i = 0; i < proto.output_size(); ++i) {
    if (i > 0 && !proto.output(i).empty()) training = true;
    if (i < 3) {
      outputs.push_back(proto.output(i));
    } else if (!proto.output(i).empty()) {
      sink.leave_undefined(proto.output(i),
                           str_cat("the ", kSaved[i - 3], " output of ", label,
                                   ", which ampc does not compute (runtimes fill it differently; "
                                   "PyTorch's exports do not read it)"));
    }
  }
  Attributes node_attrs = as_attributes(attrs);
  node_attrs.emplace("training_mode", AttrValue(int64_t{training ? 1 : 0}));
  return sink
      .emit("BatchNormalization", std::move(operands), std::move(node_attrs), outputs, proto.name())
      .status();
}

absl::Status lower_dropout_before_12(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"ratio", onnx::AttributeProto::FLOAT},
                                         {"seed", onnx::AttributeProto::INT}}));
  if (proto.input_size() != 1) {
    return invalid(str_cat(label, " has ", proto.input_size(),
                           " inputs; Dropout has one (data) before opset 12"));
  }
  if (proto.output_size() > 2) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; Dropout has 2"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * data, tensor_input(proto, 0, label, sink));
  Emitter e(proto, label, sink);
  const std::string mask = e.output(1);
  std::vector<Value*> operands = {data};
  std::vector<std::string> outputs = {e.output(0)};
  if (!mask.empty()) {
    AMPC_ASSIGN_OR_RETURN(Value * training,
                          e.constant(Tensor::from_doubles(DType::kBool, {}, {1})));
    operands = {data, nullptr, training};
    if (sink.opset() >= 10) {
      outputs.push_back(mask);
    } else {
      sink.leave_undefined(mask, str_cat("the mask output of ", label, ", which has the data's ",
                                         "type before opset 10 and which ampc does not compute"));
    }
  }
  // ratio, and ampc's seed (which its export writes).
  return sink.emit("Dropout", std::move(operands), as_attributes(attrs), outputs, proto.name())
      .status();
}

// Slice before opset 10 takes starts, ends and the optional axes as attributes, and ampc's Slice
// is opset 10's: each sliced axis becomes a Gather (opset 1) of the positions start .. end - 1,
// clamped to the axis as Slice clamps them (INT64_MAX, PyTorch's `x[a:]`, is the axis's end).
// Data movement both ways: the same values, and a gradient that adds into those positions.
absl::Status lower_slice_before_10(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"axes", onnx::AttributeProto::INTS},
                                         {"starts", onnx::AttributeProto::INTS},
                                         {"ends", onnx::AttributeProto::INTS}}));
  if (proto.input_size() != 1 || proto.output_size() != 1) {
    return invalid(str_cat(label, " has ", proto.input_size(), " inputs and ", proto.output_size(),
                           " outputs; Slice has one of each before opset 10"));
  }
  const auto starts = attrs.int_lists.find("starts");
  const auto ends = attrs.int_lists.find("ends");
  if (starts == attrs.int_lists.end() || ends == attrs.int_lists.end()) {
    return invalid(str_cat(label, " has no ", starts == attrs.int_lists.end() ? "starts" : "ends",
                           " attribute, which Slice requires before opset 10"));
  }
  const auto axes = attrs.int_lists.find("axes");
  const size_t n = starts->second.size();
  if (ends->second.size() != n || (axes != attrs.int_lists.end() && axes->second.size() != n)) {
    return invalid(str_cat(label, ": starts, ends and axes have ", n, ", ", ends->second.size(),
                           " and ", axes == attrs.int_lists.end() ? n : axes->second.size(),
                           " elements; Slice needs as many of each"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * data, tensor_input(proto, 0, label, sink));
  const Shape& shape = data->shape();
  const auto rank = static_cast<int64_t>(shape.size());
  Emitter e(proto, label, sink);
  for (size_t i = 0; i < n; ++i) {
    int64_t axis = axes == attrs.int_lists.end() ? static_cast<int64_t>(i) : axes->second[i];
    if (axis < -rank || axis >= rank) {
      return invalid(str_cat(label, ": axis ", axis, " is outside the data's ", rank, " axes"));
    }
    if (axis < 0) axis += rank;
    const int64_t length = shape[axis];
    if (length < 0) {
      return absl::UnimplementedError(
          str_cat(label, ": ampc needs the length of axis ", axis,
                  " to slice it at this opset (attributes before opset 10), and the data's is ",
                  "not known; export the model at opset 10 or later, or fix the input's shape"));
    }
    auto clamped = [length](int64_t at) {
      if (at < 0) at += length;
      return std::clamp<int64_t>(at, 0, length);
    };
    const int64_t from = clamped(starts->second[i]);
    const int64_t to = std::max(from, clamped(ends->second[i]));
    std::vector<double> positions;
    for (int64_t p = from; p < to; ++p) positions.push_back(static_cast<double>(p));
    AMPC_ASSIGN_OR_RETURN(Value * indices, e.constant(Tensor::from_doubles(DType::kI64, {to - from},
                                                                           std::move(positions))));
    AMPC_ASSIGN_OR_RETURN(data, e.op("Gather", {data, indices}, {{"axis", AttrValue(axis)}},
                                     i + 1 == n ? e.output(0) : std::string()));
  }
  if (n == 0) return e.op("Identity", {data}, {}, e.output(0)).status();
  return absl::OkStatus();
}

}  // namespace

bool legacy_form_lowered(std::string_view op_type, int64_t opset) {
  if (op_type == "Slice") return opset < 10;
  if (op_type == "Softmax" || op_type == "LogSoftmax") return opset < 13;
  if (op_type == "Dropout") return opset >= 7 && opset < 12;
  return op_type == "BatchNormalization" && opset >= 9 && opset < 14;
}

absl::Status lower_legacy_form(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink) {
  if (proto.op_type() == "BatchNormalization") return lower_batch_norm_v9(proto, label, sink);
  if (proto.op_type() == "Dropout") return lower_dropout_before_12(proto, label, sink);
  if (proto.op_type() == "Slice") return lower_slice_before_10(proto, label, sink);
  return lower_coerced_softmax(proto, label, sink);
}

}  // namespace ampc::onnx_io
