// Ops expanded at import into the ops ONNX defines them with: RMSNormalization (opset 23),
// GroupNormalization (18, and 21 with per-channel scale), InstanceNormalization,
// and LpNormalization, so that every backend runs them and autodiff differentiates them with no new
// kernels or gradient rules. Fused kernels for them belong to the optimizing passes, not to import.
#include <cmath>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {

// Y = X / sqrt(mean(X^2 over dims axis..r-1) + epsilon) * scale, stage one in stash_type.
absl::Status lower_rms_normalization(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"axis", onnx::AttributeProto::INT},
                                         {"epsilon", onnx::AttributeProto::FLOAT},
                                         {"stash_type", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * scale, tensor_input(proto, 1, label, sink));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(),
                           " outputs; RMSNormalization "
                           "has one"));
  }
  if (!is_arithmetic_float(x->dtype())) {
    return invalid(str_cat(label, ": X is ", dtype_name(x->dtype()), "; it must be float"));
  }
  const auto rank = static_cast<int64_t>(x->type().shape.size());
  int64_t axis = attrs.i("axis", -1);
  if (axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for X of rank ", rank));
  }
  if (axis < 0) axis += rank;
  AMPC_ASSIGN_OR_RETURN(DType stash,
                        float_type_attr(attrs.i("stash_type", 1), str_cat(label, ": stash_type")));
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);

  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * xs, e.cast(x, stash));
  AMPC_ASSIGN_OR_RETURN(Value * squared, e.op("Mul", {xs, xs}));
  AMPC_ASSIGN_OR_RETURN(Value * mean,
                        e.op("ReduceMean", {squared},
                             {{"axes", AttrValue(axes)}, {"keepdims", AttrValue(int64_t{1})}}));
  AMPC_ASSIGN_OR_RETURN(Value * epsilon, e.scalar(attrs.f("epsilon", 1e-5f), stash));
  AMPC_ASSIGN_OR_RETURN(Value * shifted, e.op("Add", {mean, epsilon}));
  AMPC_ASSIGN_OR_RETURN(Value * rms, e.op("Sqrt", {shifted}));
  AMPC_ASSIGN_OR_RETURN(Value * normalized, e.op("Div", {xs, rms}));
  AMPC_ASSIGN_OR_RETURN(normalized, e.cast(normalized, x->dtype()));
  if (e.output(0).empty()) return absl::OkStatus();
  return e.op("Mul", {normalized, scale}, {}, e.output(0)).status();
}

namespace {

// [C] -> [C, 1, ..., 1] with `trailing` ones: a per-channel operand of an N, C, D1, ... input.
absl::StatusOr<Value*> per_channel(Emitter& e, Value* v, int64_t trailing) {
  Shape shape = v->type().shape;
  shape.insert(shape.end(), trailing, 1);
  return e.reshape(v, shape);
}

// (x - mean) / sqrt(var + epsilon) over `axes` (population variance), in x's type.
absl::StatusOr<Value*> standardize(Emitter& e, Value* x, const std::vector<int64_t>& axes,
                                   float epsilon) {
  const Attributes reduce = {{"axes", AttrValue(axes)}, {"keepdims", AttrValue(int64_t{1})}};
  AMPC_ASSIGN_OR_RETURN(Value * mean, e.op("ReduceMean", {x}, reduce));
  AMPC_ASSIGN_OR_RETURN(Value * centered, e.op("Sub", {x, mean}));
  AMPC_ASSIGN_OR_RETURN(Value * squared, e.op("Mul", {centered, centered}));
  AMPC_ASSIGN_OR_RETURN(Value * variance, e.op("ReduceMean", {squared}, reduce));
  AMPC_ASSIGN_OR_RETURN(Value * eps, e.scalar(epsilon, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * shifted, e.op("Add", {variance, eps}));
  AMPC_ASSIGN_OR_RETURN(Value * deviation, e.op("Sqrt", {shifted}));
  return e.op("Div", {centered, deviation});
}

absl::Status check_channels(Value* x, Value* per_channel, const std::string& what, int64_t count,
                            const std::string& label) {
  if (per_channel->type().shape != Shape{count}) {
    return invalid(str_cat(label, ": ", what, " is ", type_to_string(per_channel->type()),
                           "; it must have shape [", count, "] for X ", type_to_string(x->type())));
  }
  return absl::OkStatus();
}

}  // namespace

// Y = scale * (X - mean) / sqrt(var + epsilon) + B, statistics over D1, ... per (n, c).
absl::Status lower_instance_normalization(const onnx::NodeProto& proto, const std::string& label,
                                          ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"epsilon", onnx::AttributeProto::FLOAT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * scale, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * bias, tensor_input(proto, 2, label, sink));
  const auto rank = static_cast<int64_t>(x->type().shape.size());
  if (!is_arithmetic_float(x->dtype()) || rank < 3) {
    return invalid(str_cat(label, ": X is ", type_to_string(x->type()),
                           "; it must be float of rank 3 or more (N, C, D1, ...)"));
  }
  const int64_t channels = x->type().shape[1];
  AMPC_RETURN_IF_ERROR(check_channels(x, scale, "scale", channels, label));
  AMPC_RETURN_IF_ERROR(check_channels(x, bias, "B", channels, label));
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * normalized, standardize(e, x, axes, attrs.f("epsilon", 1e-5f)));
  AMPC_ASSIGN_OR_RETURN(Value * s, per_channel(e, scale, rank - 2));
  AMPC_ASSIGN_OR_RETURN(Value * b, per_channel(e, bias, rank - 2));
  AMPC_ASSIGN_OR_RETURN(Value * scaled, e.op("Mul", {normalized, s}));
  if (e.output(0).empty()) return absl::OkStatus();
  return e.op("Add", {scaled, b}, {}, e.output(0)).status();
}

// Channels in num_groups groups, each standardized over its channels and D1, ...; then scale and
// bias per channel (opset 21) or per group (opset 18).
absl::Status lower_group_normalization(const onnx::NodeProto& proto, const std::string& label,
                                       ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"epsilon", onnx::AttributeProto::FLOAT},
                                         {"num_groups", onnx::AttributeProto::INT},
                                         {"stash_type", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * scale, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * bias, tensor_input(proto, 2, label, sink));
  const Shape& shape = x->type().shape;
  const auto rank = static_cast<int64_t>(shape.size());
  if (!is_arithmetic_float(x->dtype()) || rank < 3) {
    return invalid(str_cat(label, ": X is ", type_to_string(x->type()),
                           "; it must be float of rank 3 or more (N, C, D1, ...)"));
  }
  if (!attrs.has("num_groups")) {
    return invalid(str_cat(label, ": required attribute 'num_groups' is missing"));
  }
  const int64_t groups = attrs.i("num_groups", 1);
  const int64_t channels = shape[1];
  if (groups <= 0 || channels % groups != 0) {
    return invalid(str_cat(label, ": num_groups ", groups, " does not divide the ", channels,
                           " channels of X ", type_to_string(x->type())));
  }
  const bool per_group = sink.opset() < 21;
  AMPC_RETURN_IF_ERROR(check_channels(x, scale, "scale", per_group ? groups : channels, label));
  AMPC_RETURN_IF_ERROR(check_channels(x, bias, "bias", per_group ? groups : channels, label));
  DType stash = x->dtype();
  if (!per_group) {
    AMPC_ASSIGN_OR_RETURN(
        stash, float_type_attr(attrs.i("stash_type", 1), str_cat(label, ": stash_type")));
  }
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * wide, e.cast(x, stash));
  AMPC_ASSIGN_OR_RETURN(Value * grouped, e.reshape(wide, {shape[0], groups, -1}));
  AMPC_ASSIGN_OR_RETURN(Value * normalized,
                        standardize(e, grouped, {2}, attrs.f("epsilon", 1e-5f)));
  AMPC_ASSIGN_OR_RETURN(normalized, e.cast(normalized, x->dtype()));
  // Per group: scale and bias broadcast over [N, G, -1], then back to X's shape. Per channel:
  // back to X's shape first, then scale and bias broadcast over D1, ...
  if (!per_group) {
    AMPC_ASSIGN_OR_RETURN(normalized, e.reshape(normalized, shape));
  }
  const int64_t trailing = per_group ? 1 : rank - 2;
  AMPC_ASSIGN_OR_RETURN(Value * s, per_channel(e, scale, trailing));
  AMPC_ASSIGN_OR_RETURN(Value * b, per_channel(e, bias, trailing));
  AMPC_ASSIGN_OR_RETURN(Value * mul, e.op("Mul", {normalized, s}));
  if (e.output(0).empty()) return absl::OkStatus();
  if (!per_group) return e.op("Add", {mul, b}, {}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * added, e.op("Add", {mul, b}));
  AMPC_ASSIGN_OR_RETURN(Value * to, e.constant(Tensor::from_i64({rank}, shape)));
  return e.op("Reshape", {added, to}, {}, e.output(0)).status();
}

// Y = X / ||X||_p along `axis` (p = 1 or 2), with no epsilon, as ONNX defines it; a slice
// whose norm is 0 gives zeros (as ONNX's reference evaluator), not 0 / 0.
absl::Status lower_lp_normalization(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(proto, label,
                                                              {{"axis", onnx::AttributeProto::INT},
                                                               {"p", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  if (!is_arithmetic_float(x->dtype())) {
    return invalid(str_cat(label, ": input is ", dtype_name(x->dtype()), "; it must be float"));
  }
  const auto rank = static_cast<int64_t>(x->type().shape.size());
  const int64_t axis = attrs.i("axis", -1);
  if (rank == 0 || axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for input of rank ", rank));
  }
  const int64_t p = attrs.i("p", 2);
  if (p != 1 && p != 2) return invalid(str_cat(label, ": p is ", p, "; it must be 1 or 2"));
  Emitter e(proto, label, sink);
  const Attributes reduce = {{"axes", AttrValue(std::vector<int64_t>{axis})},
                             {"keepdims", AttrValue(int64_t{1})}};
  Value* norm = nullptr;
  if (p == 1) {
    AMPC_ASSIGN_OR_RETURN(Value * magnitude, e.op("Abs", {x}));
    AMPC_ASSIGN_OR_RETURN(norm, e.op("ReduceSum", {magnitude}, reduce));
  } else {
    AMPC_ASSIGN_OR_RETURN(Value * squared, e.op("Mul", {x, x}));
    AMPC_ASSIGN_OR_RETURN(Value * sum, e.op("ReduceSum", {squared}, reduce));
    AMPC_ASSIGN_OR_RETURN(norm, e.op("Sqrt", {sum}));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * vanishes, e.op("Equal", {norm, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * divided, e.op("Div", {x, norm}));
  return e.op("Where", {vanishes, zero, divided}, {}, e.output(0)).status();
}

// Sign(x) = (x > 0) - (x < 0) in x's dtype; NaN stays NaN. Its gradient is zero (the
// comparisons have none), as PyTorch's sign has.
absl::Status lower_sign(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_RETURN_IF_ERROR(read_attributes(proto, label, {}).status());
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  const DType dtype = x->dtype();
  if (!is_arithmetic_float(dtype) && dtype != DType::kI64 && dtype != DType::kI32 &&
      dtype != DType::kI8) {
    return invalid(str_cat(label, ": input is ", dtype_name(dtype),
                           "; ampc takes Sign of float, i64, i32 and i8 data"));
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, dtype));
  AMPC_ASSIGN_OR_RETURN(Value * above, e.op("Greater", {x, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * below, e.op("Less", {x, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * plus, e.cast(above, dtype));
  AMPC_ASSIGN_OR_RETURN(Value * minus, e.cast(below, dtype));
  if (!is_arithmetic_float(dtype)) return e.op("Sub", {plus, minus}, {}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * sign, e.op("Sub", {plus, minus}));
  AMPC_ASSIGN_OR_RETURN(Value * nan, e.op("IsNaN", {x}));
  return e.op("Where", {nan, x, sign}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering

namespace ampc::onnx_io {

namespace {

// What both cross-entropy lowerings read of a SoftmaxCrossEntropyLoss node.
struct CrossEntropyNode {
  lowering::NodeAttributes attrs;
  std::string reduction;
  Value* scores = nullptr;   // [N, C, ...]
  Value* targets = nullptr;  // class indices [N, ...] or probabilities shaped like the scores
  Value* weights = nullptr;  // [C], or null
};

absl::StatusOr<CrossEntropyNode> read_cross_entropy(const onnx::NodeProto& proto,
                                                    const std::string& label, ImportSink& sink) {
  CrossEntropyNode node;
  AMPC_ASSIGN_OR_RETURN(node.attrs,
                        lowering::read_attributes(proto, label,
                                                  {{"ignore_index", onnx::AttributeProto::INT},
                                                   {"reduction", onnx::AttributeProto::STRING}}));
  node.reduction = node.attrs.s("reduction", "mean");
  if (node.reduction != "mean" && node.reduction != "sum" && node.reduction != "none") {
    return invalid(str_cat(label, ": reduction is \"", node.reduction,
                           "\"; it must be \"mean\", \"sum\" or \"none\""));
  }
  AMPC_ASSIGN_OR_RETURN(node.scores, lowering::tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(node.targets, lowering::tensor_input(proto, 1, label, sink));
  const Shape& shape = node.scores->shape();
  if (shape.size() < 2 || !is_arithmetic_float(node.scores->dtype())) {
    return invalid(str_cat(label, ": scores are ", type_to_string(node.scores->type()),
                           "; they must be float [N, C, ...]"));
  }
  if (lowering::has_input(proto, 2)) {
    AMPC_ASSIGN_OR_RETURN(node.weights, lowering::tensor_input(proto, 2, label, sink));
    if (node.weights->shape() != Shape{shape[1]}) {
      return invalid(str_cat(label, ": weights are ", shape_to_string(node.weights->shape()),
                             "; they must be [", shape[1], "], one per class"));
    }
  }
  return node;
}

// -sum_c(weight_c * values_c) over the class axis (1) of `values`, shaped like the scores;
// `output` names it, or a fresh name is made.
absl::StatusOr<Value*> negated_class_sum(lowering::Emitter& e, const CrossEntropyNode& node,
                                         Value* values, std::string output = "") {
  if (node.weights != nullptr) {
    Shape per_class(values->shape().size(), 1);
    per_class[1] = values->shape()[1];
    AMPC_ASSIGN_OR_RETURN(Value * spread, e.reshape(node.weights, per_class));
    AMPC_ASSIGN_OR_RETURN(values, e.op("Mul", {values, spread}));
  }
  AMPC_ASSIGN_OR_RETURN(Value * summed, e.op("ReduceSum", {values},
                                             {{"axes", AttrValue(std::vector<int64_t>{1})},
                                              {"keepdims", AttrValue(int64_t{0})}}));
  return e.op("Neg", {summed}, {}, std::move(output));
}

}  // namespace

absl::Status lower_soft_target_cross_entropy(const onnx::NodeProto& proto, const std::string& label,
                                             ImportSink& sink, double smoothing) {
  AMPC_ASSIGN_OR_RETURN(const CrossEntropyNode node, read_cross_entropy(proto, label, sink));
  Value* labels = node.targets;
  const Shape& shape = node.scores->shape();
  if (labels->shape() != shape || labels->dtype() != node.scores->dtype()) {
    return invalid(str_cat(
        label, ": float labels are class probabilities and must match the scores' type ",
        type_to_string(node.scores->type()), "; they are ", type_to_string(labels->type())));
  }
  lowering::Emitter e(proto, label, sink);
  if (smoothing > 0) {
    // PyTorch's: labels * (1 - smoothing) + smoothing / C.
    AMPC_ASSIGN_OR_RETURN(Value * kept, e.scalar(1 - smoothing, labels->dtype()));
    AMPC_ASSIGN_OR_RETURN(Value * spread,
                          e.scalar(smoothing / static_cast<double>(shape[1]), labels->dtype()));
    AMPC_ASSIGN_OR_RETURN(Value * scaled, e.op("Mul", {labels, kept}));
    AMPC_ASSIGN_OR_RETURN(labels, e.op("Add", {scaled, spread}));
  }
  AMPC_ASSIGN_OR_RETURN(Value * log_prob, e.op("LogSoftmax", {node.scores},
                                               {{"axis", AttrValue(int64_t{1})}}, e.output(1)));
  AMPC_ASSIGN_OR_RETURN(Value * product, e.op("Mul", {log_prob, labels}));
  if (e.output(0).empty()) return absl::OkStatus();
  if (node.reduction == "none") return negated_class_sum(e, node, product, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * loss, negated_class_sum(e, node, product));
  return e
      .op(node.reduction == "mean" ? "ReduceMean" : "ReduceSum", {loss},
          {{"keepdims", AttrValue(int64_t{0})}}, e.output(0))
      .status();
}

absl::Status lower_label_smoothed_cross_entropy(const onnx::NodeProto& proto,
                                                const std::string& label, ImportSink& sink,
                                                double smoothing) {
  AMPC_ASSIGN_OR_RETURN(const CrossEntropyNode node, read_cross_entropy(proto, label, sink));
  const Shape& shape = node.scores->shape();
  const DType dtype = node.scores->dtype();
  lowering::Emitter e(proto, label, sink);
  std::vector<Value*> operands = {node.scores, node.targets};
  if (node.weights != nullptr) operands.push_back(node.weights);
  Attributes loss_attrs = {{"reduction", AttrValue(node.reduction)}};
  const bool ignores = node.attrs.has("ignore_index");
  if (ignores) loss_attrs.emplace("ignore_index", AttrValue(node.attrs.i("ignore_index", 0)));
  AMPC_ASSIGN_OR_RETURN(Value * nll, e.op("SoftmaxCrossEntropyLoss", operands, loss_attrs));
  // Each position's -sum_c(weight_c * log_softmax_c), zero where the target is ignored.
  AMPC_ASSIGN_OR_RETURN(Value * log_prob, e.op("LogSoftmax", {node.scores},
                                               {{"axis", AttrValue(int64_t{1})}}, e.output(1)));
  AMPC_ASSIGN_OR_RETURN(Value * smooth, negated_class_sum(e, node, log_prob));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, dtype));
  Value* kept = nullptr;  // the positions whose target is not ignored
  if (ignores) {
    AMPC_ASSIGN_OR_RETURN(
        Value * ignored,
        e.scalar(static_cast<double>(node.attrs.i("ignore_index", 0)), node.targets->dtype()));
    AMPC_ASSIGN_OR_RETURN(Value * equal, e.op("Equal", {node.targets, ignored}));
    AMPC_ASSIGN_OR_RETURN(kept, e.op("Not", {equal}));
    AMPC_ASSIGN_OR_RETURN(smooth, e.op("Where", {kept, smooth, zero}));
  }
  const Attributes all = {{"keepdims", AttrValue(int64_t{0})}};
  if (node.reduction != "none") {
    AMPC_ASSIGN_OR_RETURN(smooth, e.op("ReduceSum", {smooth}, all));
  }
  if (node.reduction == "mean") {
    // Divided as the loss is: by the summed weights of the kept targets' classes, or their count.
    Value* denominator = nullptr;
    if (node.weights == nullptr && kept == nullptr) {
      int64_t positions = shape[0];
      for (size_t d = 2; d < shape.size(); ++d) positions *= shape[d];
      AMPC_ASSIGN_OR_RETURN(denominator, e.scalar(static_cast<double>(positions), dtype));
    } else {
      Value* counted = nullptr;
      if (node.weights != nullptr) {
        Value* safe = node.targets;
        if (kept != nullptr) {
          AMPC_ASSIGN_OR_RETURN(Value * first, e.scalar(0, node.targets->dtype()));
          AMPC_ASSIGN_OR_RETURN(safe, e.op("Where", {kept, node.targets, first}));
        }
        AMPC_ASSIGN_OR_RETURN(counted, e.op("Gather", {node.weights, safe}));
        if (kept != nullptr) {
          AMPC_ASSIGN_OR_RETURN(counted, e.op("Where", {kept, counted, zero}));
        }
      } else {
        AMPC_ASSIGN_OR_RETURN(counted, e.cast(kept, dtype));
      }
      AMPC_ASSIGN_OR_RETURN(denominator, e.op("ReduceSum", {counted}, all));
    }
    AMPC_ASSIGN_OR_RETURN(smooth, e.op("Div", {smooth, denominator}));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  // (1 - smoothing) * loss + smoothing / C * smooth, as PyTorch's cross_entropy adds them.
  AMPC_ASSIGN_OR_RETURN(Value * keep, e.scalar(1 - smoothing, dtype));
  AMPC_ASSIGN_OR_RETURN(Value * spread, e.scalar(smoothing / static_cast<double>(shape[1]), dtype));
  AMPC_ASSIGN_OR_RETURN(Value * hard, e.op("Mul", {nll, keep}));
  AMPC_ASSIGN_OR_RETURN(Value * soft, e.op("Mul", {smooth, spread}));
  return e.op("Add", {hard, soft}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io
