// ONNX metadata_props on graphs and nodes (compiler/onnx_metadata.h).
#include "compiler/onnx_metadata.h"

#include <algorithm>
#include <charconv>
#include <regex>
#include <set>

#include "compiler/strings.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/unknown_field_set.h"

namespace ampc::onnx_io {
namespace {

namespace pb = google::protobuf;

// metadata_props' field number in the ONNX releases that define it on these messages.
constexpr int kNodeMetadataField = 9;
constexpr int kGraphMetadataField = 16;

MetadataProps read_props(const pb::Message& message, int field_number) {
  MetadataProps props;
  auto add = [&](const onnx::StringStringEntryProto& entry) {
    props.emplace_back(entry.key(), entry.value());
  };
  const pb::Reflection* reflection = message.GetReflection();
  if (const pb::FieldDescriptor* field = message.GetDescriptor()->FindFieldByNumber(field_number);
      field != nullptr && field->name() == "metadata_props") {
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      onnx::StringStringEntryProto entry;
      entry.CopyFrom(reflection->GetRepeatedMessage(message, field, i));
      add(entry);
    }
    return props;
  }
  const pb::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const pb::UnknownField& field = unknown.field(i);
    if (field.number() != field_number || field.type() != pb::UnknownField::TYPE_LENGTH_DELIMITED) {
      continue;
    }
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(field.length_delimited())) add(entry);
  }
  return props;
}

std::optional<std::string> find_prop(const MetadataProps& props, std::string_view key) {
  for (const auto& [k, v] : props) {
    if (k == key) return v;
  }
  return std::nullopt;
}

bool in_onnx_domain(const onnx::NodeProto& node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

// The aten call a node's FX node records (`pkg.torch.onnx.fx_node`): "%embedding :
// [num_users=1] = call_function[target=torch.ops.aten.embedding.default](args = (%p_weight, %x,
// 0), kwargs = {})".
struct FxCall {
  std::string op;        // "embedding"
  std::string overload;  // "default"
  std::vector<std::string> args;
  std::string kwargs;

  // Argument `position`, or the keyword argument `keyword`; empty when neither is there.
  std::string arg(size_t position, const std::string& keyword) const {
    std::smatch found;
    const std::regex by_name("'?" + keyword + R"('?: ([^,]+))");
    if (std::regex_search(kwargs, found, by_name)) return found[1].str();
    return position < args.size() ? args[position] : "";
  }
};

std::optional<FxCall> parse_fx_call(const std::string& fx) {
  static const std::regex kCall(
      R"(target=torch\.ops\.aten\.(\w+)\.(\w+)\]\(args = \(([^)]*)\), kwargs = \{([^}]*)\})");
  std::smatch match;
  if (!std::regex_search(fx, match, kCall)) return std::nullopt;
  FxCall call{match[1].str(), match[2].str(), {}, match[4].str()};
  const std::string listed = match[3].str();
  for (size_t begin = 0; begin <= listed.size();) {
    const size_t comma = std::min(listed.find(',', begin), listed.size());
    std::string arg = listed.substr(begin, comma - begin);
    arg.erase(0, arg.find_first_not_of(' '));
    call.args.push_back(std::move(arg));
    begin = comma + 1;
  }
  return call;
}

std::optional<FxCall> fx_call(const onnx::NodeProto& node) {
  const std::optional<std::string> fx = torch_fx_node(node);
  return fx ? parse_fx_call(*fx) : std::nullopt;
}

// Whether `call` is a batch norm that normalizes by the batch (training=True).
bool training_batch_norm(const FxCall& call) {
  // (input, weight, bias, running_mean, running_var, training, momentum, eps, ...); the no_stats
  // overload has no running statistics: (input, weight, bias, training, momentum, eps).
  static const std::set<std::string, std::less<>> kBatchNorms = {
      "_native_batch_norm_legit_functional", "_native_batch_norm_legit", "native_batch_norm",
      "batch_norm"};
  const size_t training = call.overload == "no_stats" ? 3 : 5;
  return kBatchNorms.contains(call.op) && call.arg(training, "training") == "True";
}

// One line of PyTorch's graph signature: an input ("p_w: PARAMETER target='w'") or an output
// ("add_1: BUFFER_MUTATION target='ema'").
struct SignatureInput {
  std::string fx_name;  // the FX graph's name for it: p_w, add_1
  std::string kind;     // PARAMETER, BUFFER, CONSTANT_TENSOR, BUFFER_MUTATION, ...
  std::string target;   // the module's name for it: w, ema
};

// The signature's lines that match `pattern` (the FX name, the kind, the target), one per input
// or output: "b_rotary_inv_freq: BUFFER target='rotary.inv_freq' persistent=False".
std::vector<SignatureInput> signature_lines(const onnx::GraphProto& graph,
                                            const std::regex& pattern) {
  std::vector<SignatureInput> lines;
  const std::optional<std::string> signature =
      find_prop(metadata_props(graph), "pkg.torch.export.ExportedProgram.graph_signature");
  if (!signature) return lines;
  std::smatch match;
  for (size_t begin = 0; begin < signature->size();) {
    const size_t end = std::min(signature->find('\n', begin), signature->size());
    const std::string line = signature->substr(begin, end - begin);
    begin = end + 1;
    if (std::regex_match(line, match, pattern)) {
      lines.push_back({match[1].str(), match[2].str(), match[3].str()});
    }
  }
  return lines;
}

std::vector<SignatureInput> signature_inputs(const onnx::GraphProto& graph) {
  static const std::regex kInput(
      R"(\s*(\S+):\s+(PARAMETER|BUFFER|CONSTANT_TENSOR)\s+target='([^']*)'.*)");
  return signature_lines(graph, kInput);
}

}  // namespace

std::optional<std::string> torch_fx_node(const onnx::NodeProto& node) {
  return find_prop(metadata_props(node), "pkg.torch.onnx.fx_node");
}

MetadataProps metadata_props(const onnx::NodeProto& node) {
  return read_props(node, kNodeMetadataField);
}

MetadataProps metadata_props(const onnx::GraphProto& graph) {
  return read_props(graph, kGraphMetadataField);
}

void add_metadata_prop(onnx::NodeProto& node, std::string_view key, std::string_view value) {
  onnx::StringStringEntryProto entry;
  entry.set_key(std::string(key));
  entry.set_value(std::string(value));
  const pb::Reflection* reflection = node.GetReflection();
  if (const pb::FieldDescriptor* field =
          node.GetDescriptor()->FindFieldByNumber(kNodeMetadataField);
      field != nullptr && field->name() == "metadata_props") {
    reflection->AddMessage(&node, field)->CopyFrom(entry);
    return;
  }
  reflection->MutableUnknownFields(&node)->AddLengthDelimited(kNodeMetadataField,
                                                              entry.SerializeAsString());
}

std::string extension_attr_key(std::string_view name) { return str_cat("ampc.", name); }

std::optional<int64_t> parse_int64(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::unordered_map<std::string, Value::Declared> torch_signature(const onnx::GraphProto& graph) {
  std::unordered_map<std::string, Value::Declared> declared;
  for (const SignatureInput& input : signature_inputs(graph)) {
    declared[input.target] =
        input.kind == "PARAMETER" ? Value::Declared::kParameter : Value::Declared::kBuffer;
  }
  return declared;
}

std::vector<std::pair<std::string, std::string>> torch_buffer_mutations(
    const onnx::GraphProto& graph) {
  std::vector<std::pair<std::string, std::string>> mutations;
  static const std::regex kMutation(R"(\s*(\S+):\s+(BUFFER_MUTATION)\s+target='([^']*)'.*)");
  for (const SignatureInput& output : signature_lines(graph, kMutation)) {
    mutations.emplace_back(output.fx_name, output.target);
  }
  return mutations;
}

std::unordered_map<std::string, std::string> torch_names_by_fx_name(const onnx::GraphProto& graph) {
  std::unordered_map<std::string, std::string> targets;
  for (const SignatureInput& input : signature_inputs(graph)) {
    if (input.kind != "CONSTANT_TENSOR") targets[input.fx_name] = input.target;
  }
  return targets;
}

std::map<std::string, int64_t> torch_recorded_attrs(const onnx::NodeProto& node) {
  std::map<std::string, int64_t> attrs;
  const bool gather = node.op_type() == "Gather";
  const bool batch_norm = node.op_type() == "BatchNormalization";
  const bool identity = node.op_type() == "Identity";
  const bool extremum = node.op_type() == "ReduceMax" || node.op_type() == "ReduceMin";
  if (!in_onnx_domain(node) || !(gather || batch_norm || identity || extremum)) return attrs;
  const std::optional<FxCall> call = fx_call(node);
  if (!call) return attrs;
  // max(dim) and min(dim) return the first extremal element's index, and their gradient goes
  // to it alone; amax and amin share it among ties, as ReduceMax's gradient does.
  if (extremum && (call->op == "max" || call->op == "min") && call->overload == "dim") {
    attrs["gradient_to_first"] = 1;
  }
  // An unoptimized export keeps each detach() as an Identity of its own.
  if (identity && call->op == "detach") attrs["stop_gradient"] = 1;
  if (gather && call->op == "embedding") {
    // aten.embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False)
    const std::optional<int64_t> padding = parse_int64(call->arg(2, "padding_idx"));
    if (padding && *padding >= 0) attrs["padding_idx"] = *padding;
    if (call->arg(3, "scale_grad_by_freq") == "True") attrs["scale_grad_by_freq"] = 1;
  }
  if (batch_norm && training_batch_norm(*call)) attrs["training_mode"] = 1;
  return attrs;
}

bool torch_training_batch_norm(const onnx::NodeProto& node) {
  const std::optional<std::string> fx = torch_fx_node(node);
  if (!fx || fx->find("batch_norm") == std::string::npos) return false;  // no regex per node
  const std::optional<FxCall> call = parse_fx_call(*fx);
  return call && training_batch_norm(*call);
}

std::string torch_fx_op(const std::string& fx) {
  const std::optional<FxCall> call = parse_fx_call(fx);
  return call ? call->op : std::string();
}

std::vector<std::string> torch_tensor_args(const std::string& fx) {
  const std::optional<FxCall> call = parse_fx_call(fx);
  if (!call) return {};
  std::vector<std::string> names;
  for (const std::string& arg : call->args) {
    if (!arg.empty() && arg[0] == '%') names.push_back(arg.substr(1));
  }
  return names;
}

std::vector<std::string> torch_detached_tensor_args(const std::string& fx) {
  // Every node of a dynamo export has an FX node; the regular expressions are for the few that
  // name a detach.
  if (fx.find("%detach") == std::string::npos) return {};
  static const std::regex kDetach(R"(detach(_[0-9]+)?)");
  std::vector<std::string> detached;
  bool any = false;
  for (std::string& name : torch_tensor_args(fx)) {
    if (!std::regex_match(name, kDetach)) name.clear();
    any |= !name.empty();
    detached.push_back(std::move(name));
  }
  return any ? detached : std::vector<std::string>{};
}

double torch_label_smoothing(const onnx::NodeProto& node) {
  if (!in_onnx_domain(node) || node.op_type() != "SoftmaxCrossEntropyLoss") return 0;
  const std::optional<FxCall> call = fx_call(node);
  // aten.cross_entropy_loss(self, target, weight=None, reduction=Mean, ignore_index=-100,
  // label_smoothing=0.0)
  if (!call || call->op != "cross_entropy_loss") return 0;
  const std::string text = call->arg(5, "label_smoothing");
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
      !(value > 0 && value <= 1)) {
    return 0;
  }
  return value;
}

}  // namespace ampc::onnx_io
