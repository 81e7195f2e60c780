// Import-time lowering of the sequence ops (compiler/onnx_lowering.h): a sequence of static length
// is its tensors, kept by ImportLowering while the graph is read, so SequenceAt, SequenceInsert,
// SplitToSequence, ConcatFromSequence and the rest become the tensors they pick, Split or
// Concat, and graph inputs and outputs stay tensors.
#include <optional>
#include <string>
#include <vector>

#include "compiler/onnx_lowering.h"
#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_ragged.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

using lowering::has_input;
using lowering::int_attributes;
using lowering::tensor_input;

// A position operand's value: an integer scalar known at import.
absl::StatusOr<int64_t> position(const onnx::NodeProto& proto, int i, const std::string& label,
                                 ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Value * value, tensor_input(proto, i, label, sink));
  const std::string what = str_cat(label, ": position '", proto.input(i), "'");
  if ((value->dtype() != DType::kI64 && value->dtype() != DType::kI32) ||
      value->type().num_elements() != 1) {
    return invalid(
        str_cat(what, " must be an int32 or int64 scalar, got ", type_to_string(value->type())));
  }
  const Tensor* known = sink.known_value(value);
  if (known == nullptr) {
    return absl::UnimplementedError(
        str_cat(what,
                " is computed at run time; ampc lowers sequences to tensors at import, so "
                "positions must be known at compile time"));
  }
  return known->element_as_i64(0);
}

}  // namespace

absl::StatusOr<const ImportLowering::Sequence*> ImportLowering::sequence(
    const onnx::NodeProto& proto, int input, const std::string& label) const {
  if (input >= proto.input_size() || proto.input(input).empty()) {
    return invalid(str_cat(label, ": input ", input, " (a sequence) is missing"));
  }
  auto it = sequences_.find(proto.input(input));
  if (it == sequences_.end()) {
    return invalid(str_cat(label, " reads '", proto.input(input),
                           "' as a sequence, but it is not a sequence defined before it"));
  }
  return &it->second;
}

absl::Status ImportLowering::define(const onnx::NodeProto& proto, Sequence sequence,
                                    const std::string& label) {
  if (proto.output_size() < 1 || proto.output(0).empty()) return absl::OkStatus();
  sequence.definer = label;
  if (!sequences_.emplace(proto.output(0), std::move(sequence)).second) {
    return invalid(
        str_cat(label, " defines value '", proto.output(0), "', which is already defined"));
  }
  return absl::OkStatus();
}

absl::Status ImportLowering::alias(const std::string& name, const std::string& existing,
                                   const std::string& label) {
  auto it = sequences_.find(existing);
  if (it == sequences_.end()) {
    return invalid(str_cat(label, ": '", existing, "' is not a sequence defined before it"));
  }
  Sequence copy = it->second;
  if (!sequences_.emplace(name, std::move(copy)).second) {
    return invalid(str_cat(label, " defines value '", name, "', which is already defined"));
  }
  return absl::OkStatus();
}

absl::Status ImportLowering::lower_sequence(const onnx::NodeProto& proto, const std::string& label,
                                            ImportSink& sink) {
  const std::string& op = proto.op_type();
  const std::string out = proto.output_size() > 0 ? proto.output(0) : std::string();
  if (op == "SequenceEmpty") {
    AMPC_ASSIGN_OR_RETURN(auto attrs, int_attributes(proto, label, {{"dtype", 1}}));
    absl::StatusOr<DType> dtype = from_onnx_dtype(static_cast<int>(attrs.at("dtype")));
    if (!dtype.ok()) return invalid(str_cat(label, ": dtype: ", dtype.status().message()));
    return define(proto, Sequence{{}, *dtype, ""}, label);
  }

  if (op == "SequenceConstruct") {
    AMPC_RETURN_IF_ERROR(int_attributes(proto, label, {}).status());
    if (proto.input_size() == 0) return invalid(str_cat(label, " has no inputs"));
    Sequence seq;
    for (int i = 0; i < proto.input_size(); ++i) {
      AMPC_ASSIGN_OR_RETURN(Value * tensor, tensor_input(proto, i, label, sink));
      if (i > 0 && tensor->dtype() != seq.dtype) {
        return invalid(str_cat(label, ": input ", i, " ('", proto.input(i), "') is ",
                               dtype_name(tensor->dtype()), " but input 0 is ",
                               dtype_name(seq.dtype), "; a sequence holds one element type"));
      }
      seq.dtype = tensor->dtype();
      seq.tensors.push_back(tensor);
    }
    return define(proto, std::move(seq), label);
  }

  if (op == "SequenceInsert" || op == "SequenceErase" || op == "SequenceAt" ||
      op == "SequenceLength") {
    AMPC_RETURN_IF_ERROR(int_attributes(proto, label, {}).status());
    AMPC_ASSIGN_OR_RETURN(const Sequence* seq, sequence(proto, 0, label));
    const auto n = static_cast<int64_t>(seq->tensors.size());
    if (op == "SequenceLength") {
      if (out.empty()) return absl::OkStatus();
      return sink
          .emit("Constant", {}, {{"value", AttrValue(Tensor::from_i64({}, {n}))}}, {out},
                proto.name())
          .status();
    }
    const int position_input = op == "SequenceInsert" ? 2 : 1;
    std::optional<int64_t> at;
    if (has_input(proto, position_input)) {
      AMPC_ASSIGN_OR_RETURN(at, position(proto, position_input, label, sink));
    }
    // Insert accepts [-n, n]; Erase and At address an element, [-n, n-1].
    const int64_t limit = op == "SequenceInsert" ? n : n - 1;
    if (at && (*at < -n || *at > limit)) {
      return invalid(str_cat(label, ": position ", *at, " is out of range for a sequence of ", n,
                             " tensors (valid: ", -n, " to ", limit, ")"));
    }
    if (at && *at < 0) *at += n;
    if (op == "SequenceAt") {
      if (!at) return invalid(str_cat(label, ": input 1 (position) is missing"));
      if (out.empty()) return absl::OkStatus();
      return sink.emit("Identity", {seq->tensors[*at]}, {}, {out}, proto.name()).status();
    }
    Sequence result = *seq;
    if (op == "SequenceErase") {
      if (n == 0) return invalid(str_cat(label, " erases from an empty sequence"));
      result.tensors.erase(result.tensors.begin() + at.value_or(n - 1));
    } else {
      AMPC_ASSIGN_OR_RETURN(Value * tensor, tensor_input(proto, 1, label, sink));
      if (tensor->dtype() != seq->dtype) {
        return invalid(str_cat(label, ": inserts a ", dtype_name(tensor->dtype()),
                               " tensor into a sequence of ", dtype_name(seq->dtype)));
      }
      result.tensors.insert(result.tensors.begin() + at.value_or(n), tensor);
    }
    return define(proto, std::move(result), label);
  }

  if (op == "SplitToSequence") {
    AMPC_ASSIGN_OR_RETURN(auto attrs, int_attributes(proto, label, {{"axis", 0}, {"keepdims", 1}}));
    AMPC_ASSIGN_OR_RETURN(Value * input, tensor_input(proto, 0, label, sink));
    const Shape& shape = input->type().shape;
    const auto rank = static_cast<int64_t>(shape.size());
    int64_t axis = attrs.at("axis");
    if (axis < -rank || axis >= rank) {
      return invalid(str_cat(label, ": axis ", axis, " is out of range for input of rank ", rank));
    }
    if (axis < 0) axis += rank;
    const int64_t dim = shape[axis];
    std::vector<int64_t> sizes;
    const bool squeeze = !has_input(proto, 1) && attrs.at("keepdims") == 0;
    if (!has_input(proto, 1)) {
      sizes.assign(dim, 1);
    } else {
      AMPC_ASSIGN_OR_RETURN(Value * split, tensor_input(proto, 1, label, sink));
      const Tensor* known = sink.known_value(split);
      if (known == nullptr) {
        return absl::UnimplementedError(
            str_cat(label, ": split '", proto.input(1),
                    "' is computed at run time; ampc lowers sequences to tensors at import, so "
                    "the sizes must be known at compile time"));
      }
      if (split->dtype() != DType::kI64 && split->dtype() != DType::kI32) {
        return invalid(
            str_cat(label, ": split must be int32 or int64, got ", dtype_name(split->dtype())));
      }
      std::vector<int64_t> values = known->to_i64_vector();
      if (known->shape().empty()) {
        const int64_t chunk = values.at(0);
        if (chunk <= 0) {
          return invalid(str_cat(label, ": split ", chunk, " must be positive"));
        }
        for (int64_t begin = 0; begin < dim; begin += chunk) {
          sizes.push_back(std::min(chunk, dim - begin));
        }
      } else {
        int64_t total = 0;
        for (int64_t size : values) {
          if (size < 0) return invalid(str_cat(label, ": split has a negative size ", size));
          total += size;
        }
        if (known->shape().size() != 1 || total != dim) {
          return invalid(str_cat(label, ": split ", shape_to_string(values),
                                 " does not add up to dim ", axis, " of the input (", dim, ")"));
        }
        sizes = std::move(values);
      }
    }
    Sequence seq{{}, input->dtype(), ""};
    if (!sizes.empty()) {
      std::vector<std::string> names;
      const std::string hint = out.empty() ? proto.name() : out;
      for (size_t k = 0; k < sizes.size(); ++k) {
        names.push_back(sink.fresh_name(str_cat(hint, squeeze ? "/piece_" : "/", k)));
      }
      AMPC_ASSIGN_OR_RETURN(
          seq.tensors,
          sink.emit("Split", {input}, {{"axis", AttrValue(axis)}, {"split", AttrValue(sizes)}},
                    names, proto.name()));
      if (squeeze) {
        for (size_t k = 0; k < sizes.size(); ++k) {
          AMPC_ASSIGN_OR_RETURN(
              std::vector<Value*> squeezed,
              sink.emit("Squeeze", {seq.tensors[k]},
                        {{"axes", AttrValue(std::vector<int64_t>{axis})}},
                        {sink.fresh_name(str_cat(hint, "/", k))}, str_cat(proto.name(), "/", k)));
          seq.tensors[k] = squeezed[0];
        }
      }
    }
    return define(proto, std::move(seq), label);
  }

  if (op == "ConcatFromSequence") {
    AMPC_ASSIGN_OR_RETURN(auto attrs,
                          int_attributes(proto, label, {{"axis", std::nullopt}, {"new_axis", 0}}));
    AMPC_ASSIGN_OR_RETURN(const Sequence* seq, sequence(proto, 0, label));
    if (seq->tensors.empty()) {
      return invalid(str_cat(label, " concatenates an empty sequence, whose shape is unknown"));
    }
    const int64_t axis = attrs.at("axis");
    std::vector<Value*> parts = seq->tensors;
    if (attrs.at("new_axis") != 0) {
      // The axis is counted in the output, which has one dim more.
      const auto rank = static_cast<int64_t>(parts[0]->type().shape.size()) + 1;
      if (axis < -rank || axis >= rank) {
        return invalid(
            str_cat(label, ": axis ", axis, " is out of range for an output of rank ", rank));
      }
      const std::string hint = out.empty() ? proto.name() : out;
      for (size_t k = 0; k < parts.size(); ++k) {
        AMPC_ASSIGN_OR_RETURN(
            std::vector<Value*> unsqueezed,
            sink.emit("Unsqueeze", {parts[k]}, {{"axes", AttrValue(std::vector<int64_t>{axis})}},
                      {sink.fresh_name(str_cat(hint, "/", k))}, str_cat(proto.name(), "/", k)));
        parts[k] = unsqueezed[0];
      }
    }
    if (out.empty()) return absl::OkStatus();
    const auto rank = static_cast<int64_t>(parts[0]->shape().size());
    AMPC_ASSIGN_OR_RETURN(const bool merged, concat_bags(parts, axis < 0 ? axis + rank : axis, out,
                                                         proto.name(), sink));
    if (merged) return absl::OkStatus();
    return sink.emit("Concat", parts, {{"axis", AttrValue(axis)}}, {out}, proto.name()).status();
  }
  return absl::InternalError(str_cat(label, ": ", op, " is not a sequence op"));
}

}  // namespace ampc::onnx_io
