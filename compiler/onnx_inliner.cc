// Inlining of model-local functions at import (compiler/onnx_lowering.h: inline_functions).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/onnx_common.h"
#include "compiler/onnx_lowering.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "google/protobuf/io/coded_stream.h"

namespace ampc::onnx_io {
namespace {

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

}  // namespace

absl::StatusOr<std::vector<onnx::NodeProto>> inline_functions(
    const onnx::ModelProto& model, const onnx::GraphProto& graph,
    std::map<std::string, int64_t, std::less<>>& opsets) {
  return Inliner(model, graph, opsets).run();
}

}  // namespace ampc::onnx_io
