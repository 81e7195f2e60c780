// Import-time lowering of model-local functions, CastLike and sequences (compiler/onnx_lowering.h).
#include "compiler/onnx_lowering.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/onnx_io.h"
#include "compiler/onnx_lowering_internal.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "google/protobuf/io/coded_stream.h"

namespace ampc::onnx_io {

using lowering::has_input;
using lowering::tensor_input;
using LowerFn = absl::Status (*)(const onnx::NodeProto&, const std::string&, ImportSink&);

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string normalized_domain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

std::string domain_label(std::string_view domain) {
  return domain.empty() ? std::string("ai.onnx") : std::string(domain);
}

// The length-delimited fields numbered `field` that `message` carries but its generated class
// does not know: fields of ONNX versions newer than the one ampc builds against (a function's
// attribute defaults, IR 9; `overload`, IR 10) stay in the message as unknown fields.
std::vector<std::string> unknown_bytes_fields(const google::protobuf::MessageLite& message,
                                              uint32_t field) {
  const std::string bytes = message.SerializeAsString();
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  std::vector<std::string> found;
  while (const uint32_t tag = in.ReadTag()) {
    const uint32_t number = tag >> 3;
    switch (tag & 7) {
      case 0: {  // varint
        uint64_t ignored = 0;
        if (!in.ReadVarint64(&ignored)) return found;
        break;
      }
      case 1: {  // 64-bit
        uint64_t ignored = 0;
        if (!in.ReadLittleEndian64(&ignored)) return found;
        break;
      }
      case 2: {  // length-delimited
        uint32_t length = 0;
        std::string data;
        if (!in.ReadVarint32(&length) || !in.ReadString(&data, static_cast<int>(length))) {
          return found;
        }
        if (number == field) found.push_back(std::move(data));
        break;
      }
      case 5: {  // 32-bit
        uint32_t ignored = 0;
        if (!in.ReadLittleEndian32(&ignored)) return found;
        break;
      }
      default:  // groups: ONNX has none
        return found;
    }
  }
  return found;
}

// FunctionProto.attribute_proto (field 11): attributes with their default values.
std::vector<onnx::AttributeProto> attribute_defaults(const onnx::FunctionProto& function) {
  std::vector<onnx::AttributeProto> defaults;
  for (const std::string& bytes : unknown_bytes_fields(function, 11)) {
    onnx::AttributeProto attr;
    if (attr.ParseFromString(bytes)) defaults.push_back(std::move(attr));
  }
  return defaults;
}

// FunctionProto.overload (field 13) and NodeProto.overload (field 8): "" when absent.
std::string overload_of(const google::protobuf::MessageLite& message, uint32_t field) {
  std::vector<std::string> values = unknown_bytes_fields(message, field);
  return values.empty() ? std::string() : values.back();
}

std::string describe_function(const onnx::FunctionProto& f) {
  return str_cat("function '", domain_label(normalized_domain(f.domain())), ".", f.name(), "'");
}

std::string describe_call(const onnx::NodeProto& node) {
  const std::string op =
      str_cat(domain_label(normalized_domain(node.domain())), ".", node.op_type());
  if (!node.name().empty()) return str_cat("node '", node.name(), "' (", op, ")");
  return str_cat(
      "node ", op,
      node.output_size() > 0 ? str_cat(" producing '", node.output(0), "'") : std::string());
}

struct FunctionKey {
  std::string domain;
  std::string name;
  std::string overload;
  auto operator<=>(const FunctionKey&) const = default;
};

class Inliner {
 public:
  Inliner(const onnx::ModelProto& model, const onnx::GraphProto& graph,
          std::map<std::string, int64_t, std::less<>>& opsets)
      : graph_(graph), opsets_(opsets) {
    for (const onnx::FunctionProto& f : model.functions()) {
      functions_.emplace(FunctionKey{normalized_domain(f.domain()), f.name(), overload_of(f, 13)},
                         &f);
    }
    for (const onnx::ValueInfoProto& info : graph.input()) names_.insert(info.name());
    for (const onnx::TensorProto& init : graph.initializer()) names_.insert(init.name());
    for (const onnx::NodeProto& node : graph.node()) {
      for (const std::string& name : node.output()) names_.insert(name);
    }
  }

  absl::StatusOr<std::vector<onnx::NodeProto>> run() {
    for (const auto& [key, f] : functions_) {
      if (f->name().empty()) return invalid("the model has a function with no name");
    }
    for (const onnx::NodeProto& node : graph_.node()) AMPC_RETURN_IF_ERROR(expand(node));
    return std::move(out_);
  }

 private:
  const onnx::FunctionProto* callee(const onnx::NodeProto& node) const {
    auto it = functions_.find(
        FunctionKey{normalized_domain(node.domain()), node.op_type(), overload_of(node, 8)});
    return it == functions_.end() ? nullptr : it->second;
  }

  std::string fresh(const std::string& hint) {
    std::string name = hint;
    for (int n = 1; names_.contains(name); ++n) name = str_cat(hint, "_", n);
    names_.insert(name);
    return name;
  }

  absl::Status expand(const onnx::NodeProto& node) {
    const onnx::FunctionProto* f = callee(node);
    if (f == nullptr) {
      out_.push_back(node);
      return absl::OkStatus();
    }
    return inline_call(node, *f);
  }

  // The opset the function's node `inner` is read at must mean what the model's does.
  absl::Status check_opset(const onnx::FunctionProto& f, const onnx::NodeProto& inner) {
    if (callee(inner) != nullptr) return absl::OkStatus();
    const std::string domain = normalized_domain(inner.domain());
    std::optional<int64_t> own;
    for (const onnx::OperatorSetIdProto& id : f.opset_import()) {
      if (normalized_domain(id.domain()) == domain) own = id.version();
    }
    auto model = opsets_.find(domain);
    if (!own) return absl::OkStatus();  // read at the model's opset, as the import will
    if (model == opsets_.end()) {
      opsets_.emplace(domain, *own);
      return absl::OkStatus();
    }
    if (model->second == *own || lowered_at_import(domain, inner.op_type())) {
      return absl::OkStatus();
    }
    const OpRegistry& registry = OpRegistry::global();
    const OpDef* at_function = registry.find(domain, inner.op_type(), *own);
    const OpDef* at_model = registry.find(domain, inner.op_type(), model->second);
    if (at_function == at_model) return absl::OkStatus();
    return absl::UnimplementedError(
        str_cat(describe_function(f), " imports domain '", domain_label(domain), "' at opset ",
                *own, " and the model at opset ", model->second, "; ", inner.op_type(),
                " differs between them, so its node '", inner.name(), "' cannot be inlined"));
  }

  absl::Status inline_call(const onnx::NodeProto& call, const onnx::FunctionProto& f) {
    const std::string what = str_cat(describe_call(call), ", a call of ", describe_function(f));
    if (std::find(stack_.begin(), stack_.end(), &f) != stack_.end()) {
      return invalid(str_cat(what, ": the function calls itself, which ONNX does not allow"));
    }
    if (call.input_size() > f.input_size() || call.output_size() > f.output_size()) {
      return invalid(str_cat(what, ": it passes ", call.input_size(), " inputs and asks for ",
                             call.output_size(), " outputs; the function has ", f.input_size(),
                             " and ", f.output_size()));
    }
    // The attributes the body may refer to: the call's, then the function's defaults.
    std::map<std::string, onnx::AttributeProto> attrs;
    std::set<std::string> declared(f.attribute().begin(), f.attribute().end());
    const std::vector<onnx::AttributeProto> defaults = attribute_defaults(f);
    for (const onnx::AttributeProto& d : defaults) declared.insert(d.name());
    for (const onnx::AttributeProto& a : call.attribute()) {
      if (!declared.contains(a.name())) {
        return invalid(str_cat(what, ": attribute '", a.name(), "' is not an attribute of it (",
                               declared.empty() ? "it has none" : str_join(declared, ", "), ")"));
      }
      attrs[a.name()] = a;
    }
    for (const onnx::AttributeProto& d : defaults) attrs.try_emplace(d.name(), d);

    // Formal names to the caller's: inputs to the call's operands ("" when omitted), outputs
    // to the call's results (fresh names when the call does not ask for one).
    const std::string prefix = call.name().empty() ? f.name() : call.name();
    std::unordered_map<std::string, std::string> rename;
    for (int i = 0; i < f.input_size(); ++i) {
      rename[f.input(i)] = i < call.input_size() ? call.input(i) : std::string();
    }
    std::unordered_map<std::string, std::string> result;
    for (int j = 0; j < f.output_size(); ++j) {
      const bool asked = j < call.output_size() && !call.output(j).empty();
      result[f.output(j)] = asked ? call.output(j) : fresh(str_cat(prefix, "/", f.output(j)));
    }
    std::unordered_set<std::string> defined;

    stack_.push_back(&f);
    for (const onnx::NodeProto& inner : f.node()) {
      AMPC_RETURN_IF_ERROR(check_opset(f, inner));
      onnx::NodeProto node = inner;
      node.set_name(str_cat(prefix, "/", inner.name().empty() ? inner.op_type() : inner.name()));
      for (int k = 0; k < node.input_size(); ++k) {
        if (node.input(k).empty()) continue;
        auto it = rename.find(node.input(k));
        if (it == rename.end()) {
          return invalid(str_cat(what, ": its node '", inner.name(), "' reads '", inner.input(k),
                                 "', which is neither an input of the function nor defined "
                                 "before it"));
        }
        node.set_input(k, it->second);
      }
      for (int k = 0; k < node.output_size(); ++k) {
        if (node.output(k).empty()) continue;
        auto out = result.find(inner.output(k));
        const std::string actual =
            out != result.end() ? out->second : fresh(str_cat(prefix, "/", inner.output(k)));
        rename[inner.output(k)] = actual;
        defined.insert(inner.output(k));
        node.set_output(k, actual);
      }
      node.clear_attribute();
      for (const onnx::AttributeProto& a : inner.attribute()) {
        if (a.ref_attr_name().empty()) {
          *node.add_attribute() = a;
          continue;
        }
        auto given = attrs.find(a.ref_attr_name());
        if (given == attrs.end()) continue;  // unset and no default: the op's own default
        onnx::AttributeProto resolved = given->second;
        resolved.set_name(a.name());
        if (a.type() != onnx::AttributeProto::UNDEFINED && resolved.type() != a.type()) {
          return invalid(str_cat(what, ": attribute '", a.ref_attr_name(), "' is ",
                                 onnx::AttributeProto::AttributeType_Name(resolved.type()),
                                 " but its node '", inner.name(), "' reads it as ",
                                 onnx::AttributeProto::AttributeType_Name(a.type())));
        }
        *node.add_attribute() = std::move(resolved);
      }
      AMPC_RETURN_IF_ERROR(expand(node));
    }
    stack_.pop_back();

    // An output the body never defines is one of its inputs passed through.
    for (int j = 0; j < f.output_size(); ++j) {
      if (defined.contains(f.output(j))) continue;
      auto input = rename.find(f.output(j));
      if (input == rename.end() || input->second.empty()) {
        return invalid(
            str_cat(what, ": the function never defines its output '", f.output(j), "'"));
      }
      onnx::NodeProto identity;
      identity.set_op_type("Identity");
      identity.set_name(str_cat(prefix, "/", f.output(j)));
      identity.add_input(input->second);
      identity.add_output(result[f.output(j)]);
      out_.push_back(std::move(identity));
    }
    return absl::OkStatus();
  }

  const onnx::GraphProto& graph_;
  std::map<std::string, int64_t, std::less<>>& opsets_;
  std::map<FunctionKey, const onnx::FunctionProto*> functions_;
  std::unordered_set<std::string> names_;
  std::vector<const onnx::FunctionProto*> stack_;
  std::vector<onnx::NodeProto> out_;
};

// ---- Lowered ops ---------------------------------------------------------------------------

// clang-format off
constexpr std::string_view kLoweredOps[] = {
    "Attention",
    "CastLike",
    "ConcatFromSequence",
    "ConvTranspose",
    "DepthToSpace",
    "Einsum",
    "GRU",
    "GroupNormalization",
    "InstanceNormalization",
    "LSTM",
    "LpNormalization",
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
    "RotaryEmbedding",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "Sign",
    "SpaceToDepth",
    "SplitToSequence",
    "TopK",
    "Upsample",
};
// clang-format on

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

namespace lowering {

absl::StatusOr<Value*> tensor_input(const onnx::NodeProto& proto, int i, const std::string& label,
                                    ImportSink& sink) {
  if (i >= proto.input_size() || proto.input(i).empty()) {
    return invalid(str_cat(label, ": input ", i, " is missing"));
  }
  Value* value = sink.tensor(proto.input(i));
  if (value == nullptr) {
    return invalid(str_cat(label, " reads value '", proto.input(i),
                           "', which is not a tensor defined before it"));
  }
  return value;
}

bool has_input(const onnx::NodeProto& proto, int i) {
  return i < proto.input_size() && !proto.input(i).empty();
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

absl::StatusOr<std::vector<onnx::NodeProto>> inline_functions(
    const onnx::ModelProto& model, const onnx::GraphProto& graph,
    std::map<std::string, int64_t, std::less<>>& opsets) {
  return Inliner(model, graph, opsets).run();
}

bool lowered_at_import(std::string_view domain, std::string_view op_type) {
  return (domain.empty() || domain == "ai.onnx") &&
         std::find(std::begin(kLoweredOps), std::end(kLoweredOps), op_type) !=
             std::end(kLoweredOps);
}

std::vector<std::string> ops_lowered_at_import() {
  return {std::begin(kLoweredOps), std::end(kLoweredOps)};
}

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

absl::Status ImportLowering::lower(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink) {
  const std::string& op = proto.op_type();
  const std::string out = proto.output_size() > 0 ? proto.output(0) : std::string();
  // The ops expanded into their definitions, and the opsets from which ampc expands them: those
  // of the definitions, 12 for Einsum (its first), and 11 for InstanceNormalization and the
  // reductions (their expansions need reductions with negative axes, as ampc has them).
  static const std::map<std::string_view, std::pair<int64_t, LowerFn>, std::less<>> kExpanded = {
      {"Attention", {23, &lowering::lower_attention}},
      {"ConvTranspose", {1, &lowering::lower_conv_transpose}},
      {"DepthToSpace", {11, &lowering::lower_depth_space}},
      {"Einsum", {12, &lowering::lower_einsum}},
      {"GRU", {11, &lowering::lower_recurrent}},
      {"LSTM", {11, &lowering::lower_recurrent}},
      {"RNN", {11, &lowering::lower_recurrent}},
      {"GroupNormalization", {18, &lowering::lower_group_normalization}},
      {"InstanceNormalization", {11, &lowering::lower_instance_normalization}},
      {"LpNormalization", {1, &lowering::lower_lp_normalization}},
      {"OneHot", {9, &lowering::lower_one_hot}},
      {"ReduceL1", {11, &lowering::lower_reduce_via_sum}},
      {"ReduceL2", {11, &lowering::lower_reduce_via_sum}},
      {"ReduceLogSum", {11, &lowering::lower_reduce_via_sum}},
      {"ReduceLogSumExp", {11, &lowering::lower_reduce_log_sum_exp}},
      {"ReduceMin", {11, &lowering::lower_reduce_min_or_prod}},
      {"ReduceProd", {11, &lowering::lower_reduce_min_or_prod}},
      {"ReduceSumSquare", {11, &lowering::lower_reduce_via_sum}},
      {"RMSNormalization", {23, &lowering::lower_rms_normalization}},
      {"Resize", {10, &lowering::lower_resize}},
      {"RotaryEmbedding", {23, &lowering::lower_rotary_embedding}},
      {"Sign", {9, &lowering::lower_sign}},
      {"SpaceToDepth", {1, &lowering::lower_depth_space}},
      {"TopK", {11, &lowering::lower_top_k}},
      {"Upsample", {9, &lowering::lower_resize}},
  };
  if (auto it = kExpanded.find(op); it != kExpanded.end()) {
    const auto [since, lower_fn] = it->second;
    if (sink.opset() < since) {
      return absl::UnimplementedError(str_cat(label, ": ampc implements ", op, " from opset ",
                                              since, "; the model imports opset ", sink.opset()));
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
    return sink.emit("Concat", parts, {{"axis", AttrValue(axis)}}, {out}, proto.name()).status();
  }
  return absl::InternalError(str_cat(label, ": ", op, " is not lowered at import"));
}

}  // namespace ampc::onnx_io
