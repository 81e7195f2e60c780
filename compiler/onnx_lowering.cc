// Import-time lowering of CastLike, Size and the expanded ops (compiler/onnx_lowering.h);
// sequences are compiler/onnx_sequence_ops.cc's; model-local functions are inlined by
// compiler/onnx_inliner.cc.
#include "compiler/onnx_lowering.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_set>

#include "compiler/onnx_io.h"
#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_op_lookup.h"
#include "compiler/onnx_ragged.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {

using lowering::has_input;
using lowering::int_attributes;
using lowering::tensor_input;
using LowerFn = absl::Status (*)(const onnx::NodeProto&, const std::string&, ImportSink&);

namespace {

// ---- Lowered ops ---------------------------------------------------------------------------

// clang-format off
constexpr std::string_view kLoweredOps[] = {
    "Attention",
    "BlackmanWindow",
    "CastLike",
    "Col2Im",
    "ConcatFromSequence",
    "ConvTranspose",
    "CumProd",
    "DFT",
    "DepthToSpace",
    "Einsum",
    "EyeLike",
    "GRU",
    "GlobalMaxPool",
    "GridSample",
    "GroupNormalization",
    "HammingWindow",
    "HannWindow",
    "Hardmax",
    "If",
    "InstanceNormalization",
    "LRN",
    "LSTM",
    "Loop",
    "LpNormalization",
    "MaxUnpool",
    "Mean",
    "MelWeightMatrix",
    "OneHot",
    "RMSNormalization",
    "RNN",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
    "Resize",
    "ReverseSequence",
    "RotaryEmbedding",
    "STFT",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "Shrink",
    "Sign",
    "Size",
    "SpaceToDepth",
    "SplitToSequence",
    "Sum",
    "SwiGLU",
    "Swish",
    "ThresholdedRelu",
    "TopK",
    "Upsample",
};
// clang-format on

}  // namespace

bool reads_float_initializer(const Value* value, ImportSink& sink) {
  std::vector<const Value*> stack = {value};
  std::unordered_set<const Value*> seen;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v == nullptr || !seen.insert(v).second) continue;
    if (v->kind() == Value::Kind::kInitializer) {
      if (is_float(v->dtype()) && !v->is_constant()) return true;
      continue;
    }
    const Node* producer = v->producer();
    if (producer == nullptr || producer->def() == nullptr || !producer->def()->fold_needs_values) {
      continue;
    }
    for (const Value* operand : producer->operands()) {
      if (operand != nullptr && sink.known_value(operand) != nullptr) stack.push_back(operand);
    }
  }
  return false;
}

namespace lowering {

// The node's int attributes, each known to the op (`known`: name and default; nullopt when the
// attribute is required).
absl::StatusOr<std::map<std::string, int64_t, std::less<>>> int_attributes(
    const onnx::NodeProto& proto, const std::string& label,
    const std::vector<std::pair<std::string, std::optional<int64_t>>>& known) {
  std::map<std::string, int64_t, std::less<>> values;
  for (const onnx::AttributeProto& attr : proto.attribute()) {
    const std::string where = str_cat(label, ": attribute '", attr.name(), "'");
    auto spec = std::find_if(known.begin(), known.end(),
                             [&](const auto& k) { return k.first == attr.name(); });
    if (spec == known.end()) {
      std::vector<std::string> names;
      for (const auto& k : known) names.push_back(k.first);
      return invalid(str_cat(where, " is not an attribute of ", proto.op_type(), " (it has ",
                             names.empty() ? "none" : str_join(names, ", "), ")"));
    }
    if (!attr.ref_attr_name().empty()) {
      return absl::UnimplementedError(
          str_cat(where, " refers to an attribute of a function that is not the model's"));
    }
    if (attr.type() != onnx::AttributeProto::INT &&
        !(attr.type() == onnx::AttributeProto::UNDEFINED && attr.has_i())) {
      return invalid(str_cat(where, " is ", onnx::AttributeProto::AttributeType_Name(attr.type()),
                             "; the op takes INT"));
    }
    if (!values.emplace(attr.name(), attr.i()).second) {
      return invalid(str_cat(where, " is set twice"));
    }
  }
  for (const auto& [name, default_value] : known) {
    if (values.contains(name)) continue;
    if (!default_value)
      return invalid(str_cat(label, ": required attribute '", name, "' is missing"));
    values.emplace(name, *default_value);
  }
  return values;
}

absl::StatusOr<Value*> tensor_input(const onnx::NodeProto& proto, int i, const std::string& label,
                                    ImportSink& sink) {
  if (i >= proto.input_size() || proto.input(i).empty()) {
    return invalid(str_cat(label, ": input ", i, " is missing"));
  }
  Value* value = sink.tensor(proto.input(i));
  if (const std::string* why = sink.why_undefined(proto.input(i)); value == nullptr && why) {
    return absl::UnimplementedError(str_cat(label, " reads '", proto.input(i), "', ", *why));
  }
  if (value == nullptr) {
    return invalid(str_cat(label, " reads value '", proto.input(i),
                           "', which is not a tensor defined before it"));
  }
  return value;
}

bool has_input(const onnx::NodeProto& proto, int i) {
  return i < proto.input_size() && !proto.input(i).empty();
}

absl::StatusOr<std::vector<double>> known_floats(const onnx::NodeProto& proto, int i,
                                                 const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Value * value, tensor_input(proto, i, label, sink));
  const Tensor* known = sink.known_value(value);
  if (known == nullptr) {
    return absl::UnimplementedError(
        str_cat(label, ": input ", i, " ('", proto.input(i), "') must be known at compile time"));
  }
  return known->to_double_vector();
}

absl::StatusOr<DType> element_type_attr(int64_t code, const std::string& what) {
  absl::StatusOr<DType> dtype = from_onnx_dtype(static_cast<int>(code));
  if (dtype.ok()) return dtype;
  return invalid(str_cat(what, " is ", onnx_dtype_name(static_cast<int>(code)),
                         ", which is not an ampc element type"));
}

absl::StatusOr<DType> float_type_attr(int64_t code, const std::string& what) {
  absl::StatusOr<DType> dtype = from_onnx_dtype(static_cast<int>(code));
  if (dtype.ok() && is_arithmetic_float(*dtype)) return *dtype;
  return invalid(
      str_cat(what, " is ", onnx_dtype_name(static_cast<int>(code)), "; it must be a float type"));
}

absl::StatusOr<Value*> positions(Emitter& e, int64_t n, size_t axis, size_t rank) {
  std::vector<int64_t> iota(static_cast<size_t>(n));
  std::iota(iota.begin(), iota.end(), int64_t{0});
  Shape shape(rank, 1);
  shape[axis] = n;
  return e.constant(Tensor::from_i64(std::move(shape), iota));
}

absl::StatusOr<std::vector<int64_t>> per_axis(const NodeAttributes& attrs, std::string_view name,
                                              size_t count, int64_t fill, int64_t min,
                                              const std::string& label) {
  auto it = attrs.int_lists.find(name);
  if (it == attrs.int_lists.end()) return std::vector<int64_t>(count, fill);
  if (it->second.size() != count) {
    return invalid(str_cat(label, ": attribute '", name, "' has ", it->second.size(),
                           " values; X's spatial axes need ", count));
  }
  for (int64_t v : it->second) {
    if (v < min) {
      return invalid(
          str_cat(label, ": attribute '", name, "' holds ", v, "; each must be >= ", min));
    }
  }
  return it->second;
}

int64_t NodeAttributes::i(std::string_view name, int64_t fallback) const {
  auto it = ints.find(name);
  return it == ints.end() ? fallback : it->second;
}

float NodeAttributes::f(std::string_view name, float fallback) const {
  auto it = floats.find(name);
  return it == floats.end() ? fallback : it->second;
}

std::string NodeAttributes::s(std::string_view name, std::string_view fallback) const {
  auto it = strings.find(name);
  return it == strings.end() ? std::string(fallback) : it->second;
}

absl::StatusOr<NodeAttributes> read_attributes(
    const onnx::NodeProto& proto, const std::string& label,
    const std::map<std::string, onnx::AttributeProto::AttributeType, std::less<>>& known) {
  NodeAttributes attrs;
  for (const onnx::AttributeProto& attr : proto.attribute()) {
    const std::string where = str_cat(label, ": attribute '", attr.name(), "'");
    auto spec = known.find(attr.name());
    if (spec == known.end()) {
      std::vector<std::string> names;
      for (const auto& [name, type] : known) names.push_back(name);
      return invalid(str_cat(where, " is not an attribute of ", proto.op_type(), " (it has ",
                             names.empty() ? "none" : str_join(names, ", "), ")"));
    }
    const bool is_int = attr.type() == onnx::AttributeProto::INT ||
                        (attr.type() == onnx::AttributeProto::UNDEFINED && attr.has_i());
    const bool is_float = attr.type() == onnx::AttributeProto::FLOAT ||
                          (attr.type() == onnx::AttributeProto::UNDEFINED && attr.has_f());
    const bool is_ints = attr.type() == onnx::AttributeProto::INTS ||
                         (attr.type() == onnx::AttributeProto::UNDEFINED && attr.ints_size() > 0);
    const bool is_string = attr.type() == onnx::AttributeProto::STRING ||
                           (attr.type() == onnx::AttributeProto::UNDEFINED && attr.has_s());
    if ((spec->second == onnx::AttributeProto::INT && !is_int) ||
        (spec->second == onnx::AttributeProto::FLOAT && !is_float) ||
        (spec->second == onnx::AttributeProto::INTS && !is_ints) ||
        (spec->second == onnx::AttributeProto::STRING && !is_string)) {
      return invalid(str_cat(where, " is ", onnx::AttributeProto::AttributeType_Name(attr.type()),
                             "; the op takes ",
                             onnx::AttributeProto::AttributeType_Name(spec->second)));
    }
    if (attrs.has(attr.name())) return invalid(str_cat(where, " is set twice"));
    if (spec->second == onnx::AttributeProto::STRING) {
      attrs.strings.emplace(attr.name(), attr.s());
    } else if (spec->second == onnx::AttributeProto::INTS) {
      attrs.int_lists.emplace(attr.name(),
                              std::vector<int64_t>(attr.ints().begin(), attr.ints().end()));
    } else if (is_int) {
      attrs.ints.emplace(attr.name(), attr.i());
    } else {
      attrs.floats.emplace(attr.name(), attr.f());
    }
  }
  return attrs;
}

}  // namespace lowering

bool lowered_at_import(std::string_view domain, std::string_view op_type) {
  return (domain.empty() || domain == "ai.onnx") &&
         std::find(std::begin(kLoweredOps), std::end(kLoweredOps), op_type) !=
             std::end(kLoweredOps);
}

std::vector<std::string> ops_lowered_at_import() {
  return {std::begin(kLoweredOps), std::end(kLoweredOps)};
}

absl::Status ImportLowering::lower(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink) {
  const std::string& op = proto.op_type();
  const std::string out = proto.output_size() > 0 ? proto.output(0) : std::string();
  // The ops expanded into their definitions, and the opsets from which ampc expands them: those
  // of the definitions, 12 for Einsum (its first), 7 for InstanceNormalization (its expansion's
  // Sub, Mul and Div broadcast from 7; before, only by the legacy `broadcast` attribute), 6 for
  // Sum and Mean (before, they carry the legacy `consumed_inputs`), and 1 for the reductions
  // (whose opset-1 forms ampc has).
  static const std::map<std::string_view, std::pair<int64_t, LowerFn>, std::less<>> kExpanded = {
      {"Attention", {23, &lowering::lower_attention}},
      {"BlackmanWindow", {17, &lowering::lower_window}},
      {"Col2Im", {18, &lowering::lower_col2im}},
      {"ConvTranspose", {1, &lowering::lower_conv_transpose}},
      {"CumProd", {26, &lowering::lower_cum_prod}},
      {"DFT", {17, &lowering::lower_dft}},
      {"DepthToSpace", {11, &lowering::lower_depth_space}},
      {"Einsum", {12, &lowering::lower_einsum}},
      {"EyeLike", {9, &lowering::lower_eye_like}},
      {"GRU", {11, &lowering::lower_recurrent}},
      {"GlobalMaxPool", {1, &lowering::lower_global_max_pool}},
      {"GridSample", {16, &lowering::lower_grid_sample}},
      {"GroupNormalization", {18, &lowering::lower_group_normalization}},
      {"HammingWindow", {17, &lowering::lower_window}},
      {"HannWindow", {17, &lowering::lower_window}},
      {"Hardmax", {1, &lowering::lower_hardmax}},
      {"If", {1, &lower_static_if}},
      {"InstanceNormalization", {7, &lowering::lower_instance_normalization}},
      {"LRN", {1, &lowering::lower_lrn}},
      {"LSTM", {11, &lowering::lower_recurrent}},
      {"Loop", {1, &unroll_static_loop}},
      {"LpNormalization", {1, &lowering::lower_lp_normalization}},
      {"MaxUnpool", {9, &lowering::lower_max_unpool}},
      {"Mean", {6, &lowering::lower_sum_or_mean}},
      {"MelWeightMatrix", {17, &lowering::lower_mel_weight_matrix}},
      {"OneHot", {9, &lowering::lower_one_hot}},
      {"RMSNormalization", {23, &lowering::lower_rms_normalization}},
      {"RNN", {11, &lowering::lower_recurrent}},
      {"ReduceL1", {1, &lowering::lower_reduce_via_sum}},
      {"ReduceL2", {1, &lowering::lower_reduce_via_sum}},
      {"ReduceLogSum", {1, &lowering::lower_reduce_via_sum}},
      {"ReduceLogSumExp", {1, &lowering::lower_reduce_log_sum_exp}},
      {"ReduceMin", {1, &lowering::lower_reduce_min_or_prod}},
      {"ReduceProd", {1, &lowering::lower_reduce_min_or_prod}},
      {"ReduceSumSquare", {1, &lowering::lower_reduce_via_sum}},
      {"Resize", {10, &lowering::lower_resize}},
      {"ReverseSequence", {10, &lowering::lower_reverse_sequence}},
      {"RotaryEmbedding", {23, &lowering::lower_rotary_embedding}},
      {"STFT", {17, &lowering::lower_stft}},
      {"Shrink", {9, &lowering::lower_shrink}},
      {"Sign", {9, &lowering::lower_sign}},
      {"SpaceToDepth", {1, &lowering::lower_depth_space}},
      {"Sum", {6, &lowering::lower_sum_or_mean}},
      {"SwiGLU", {28, &lowering::lower_swish}},
      {"Swish", {24, &lowering::lower_swish}},
      {"ThresholdedRelu", {10, &lowering::lower_thresholded_relu}},
      {"TopK", {11, &lowering::lower_top_k}},
      {"Upsample", {9, &lowering::lower_resize}},
  };
  if (auto it = kExpanded.find(op); it != kExpanded.end()) {
    const auto [since, lower_fn] = it->second;
    if (sink.opset() < since) {
      return absl::UnimplementedError(str_cat(label, ": ampc implements ", op, " from opset ",
                                              since, "; the model imports opset ", sink.opset(),
                                              opset_mismatch_hint(op, sink.opset())));
    }
    return lower_fn(proto, label, sink);
  }
  // Every other lowered op has one output; one not asked for defines nothing.
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; ", op, " has one"));
  }

  if (op == "CastLike") {
    AMPC_ASSIGN_OR_RETURN(auto attrs, int_attributes(proto, label, {{"saturate", 1}}));
    AMPC_ASSIGN_OR_RETURN(Value * input, tensor_input(proto, 0, label, sink));
    AMPC_ASSIGN_OR_RETURN(Value * target, tensor_input(proto, 1, label, sink));
    if (out.empty()) return absl::OkStatus();
    Attributes cast = {{"to", AttrValue(target->dtype())}};
    if (proto.attribute_size() > 0) cast.emplace("saturate", AttrValue(attrs.at("saturate")));
    return sink.emit("Cast", {input}, std::move(cast), {out}, proto.name()).status();
  }

  // Size: the element count, known at import since shapes are static.
  if (op == "Size") {
    AMPC_RETURN_IF_ERROR(int_attributes(proto, label, {}).status());
    AMPC_ASSIGN_OR_RETURN(Value * input, tensor_input(proto, 0, label, sink));
    if (out.empty()) return absl::OkStatus();
    const Tensor count = Tensor::from_i64({}, {input->type().num_elements()});
    return sink.emit("Constant", {}, {{"value", AttrValue(count)}}, {out}, proto.name()).status();
  }

  if (op.starts_with("Sequence") || op == "SplitToSequence" || op == "ConcatFromSequence") {
    return lower_sequence(proto, label, sink);
  }
  return absl::InternalError(str_cat(label, ": ", op, " is not lowered at import"));
}

}  // namespace ampc::onnx_io
