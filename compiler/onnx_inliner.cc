// Inlining of model-local functions at import (compiler/onnx_lowering.h: inline_functions).
//
// Each call becomes the function's nodes, wherever the call is: in the model's graph or in a
// subgraph (an If's branch, a Loop's or Scan's body), at any depth. A function sees only its own
// names, so its body's values are renamed under the call, through the subgraphs its nodes hold:
// a subgraph's reference to a name it does not define reads the nearest enclosing graph's
// (ONNX's lexical scoping: a Loop body's input named as a function input shadows it), and the
// names a subgraph defines get fresh names too, so two inlined copies never share one. Attribute
// references resolve against the call's attributes and the function's defaults at any depth of
// the body. The model's own names are never renamed. Nothing is computed, so nothing is rounded.
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

// Every value name `graph` defines, through the graphs nested in its nodes.
void collect_names(const onnx::GraphProto& graph, std::unordered_set<std::string>& names) {
  for (const onnx::ValueInfoProto& info : graph.input()) names.insert(info.name());
  for (const onnx::TensorProto& init : graph.initializer()) names.insert(init.name());
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& name : node.output()) names.insert(name);
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) collect_names(attr.g(), names);
      for (const onnx::GraphProto& nested : attr.graphs()) collect_names(nested, names);
    }
  }
}

std::string label_of(const onnx::NodeProto& node) {
  return node.name().empty() ? node.op_type() : node.name();
}

// The names one graph being inlined defines, to what they are called after inlining, in front of
// its enclosing graphs'. The outermost scope of a function body is closed (a function sees only
// its inputs and its own values); the model graph's is open (what it does not rename stays).
class Scope {
 public:
  explicit Scope(const Scope* outer, bool open = false) : outer_(outer), open_(open) {}

  void define(const std::string& name, std::string actual) { names_[name] = std::move(actual); }

  // What `name` reads where this scope is innermost; nullopt when no scope defines it.
  std::optional<std::string> find(const std::string& name) const {
    const Scope* scope = this;
    for (; scope != nullptr; scope = scope->outer_) {
      if (auto it = scope->names_.find(name); it != scope->names_.end()) return it->second;
      if (scope->outer_ == nullptr && scope->open_) return name;
    }
    return std::nullopt;
  }

 private:
  const Scope* outer_;
  bool open_;
  std::unordered_map<std::string, std::string> names_;
};

// The nodes being walked: the model graph's (function null), or a function's body inlined for
// one call, with the attributes its references resolve against.
struct Body {
  const onnx::FunctionProto* function = nullptr;
  const std::map<std::string, onnx::AttributeProto>* attrs = nullptr;
  std::string what;    // the call, which errors name
  std::string prefix;  // of the names inlining makes
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
    collect_names(graph, names_);
  }

  absl::StatusOr<std::vector<onnx::NodeProto>> run() {
    for (const auto& [key, f] : functions_) {
      if (f->name().empty()) return invalid("the model has a function with no name");
    }
    const Body model{};
    const Scope scope(nullptr, /*open=*/true);
    std::vector<onnx::NodeProto> out;
    for (const onnx::NodeProto& node : graph_.node()) {
      AMPC_ASSIGN_OR_RETURN(onnx::NodeProto rewritten, rewrite(node, model, scope, ""));
      AMPC_RETURN_IF_ERROR(place(std::move(rewritten), out));
    }
    return out;
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

  // Appends `node` to `out`, or the function's nodes when it calls one.
  absl::Status place(onnx::NodeProto node, std::vector<onnx::NodeProto>& out) {
    const onnx::FunctionProto* f = callee(node);
    if (f == nullptr) {
      out.push_back(std::move(node));
      return absl::OkStatus();
    }
    return inline_call(node, *f, out);
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

  // `inner` (a node of `body`, at `path` in it: "" at its top, "If_1/then_branch/" in a branch)
  // with its inputs read in `scope`, its attribute references resolved and its subgraphs
  // walked; its outputs are the caller's to name.
  absl::StatusOr<onnx::NodeProto> rewrite(const onnx::NodeProto& inner, const Body& body,
                                          const Scope& scope, const std::string& path) {
    if (body.function != nullptr) AMPC_RETURN_IF_ERROR(check_opset(*body.function, inner));
    const std::string node_is = str_cat(body.what, ": its node '", path, label_of(inner), "'");
    onnx::NodeProto node = inner;
    for (int k = 0; k < node.input_size(); ++k) {
      if (node.input(k).empty()) continue;
      std::optional<std::string> actual = scope.find(node.input(k));
      if (!actual) {
        return invalid(str_cat(node_is, " reads '", inner.input(k),
                               "', which is neither an input of the function nor defined "
                               "before it"));
      }
      node.set_input(k, *actual);
    }
    node.clear_attribute();
    for (const onnx::AttributeProto& a : inner.attribute()) {
      if (a.ref_attr_name().empty() || body.attrs == nullptr) {
        onnx::AttributeProto& copy = *node.add_attribute() = a;
        const std::string nested_path = str_cat(path, label_of(inner), "/", a.name(), "/");
        if (copy.has_g()) {
          AMPC_RETURN_IF_ERROR(walk(*copy.mutable_g(), body, scope, nested_path));
        }
        for (onnx::GraphProto& nested : *copy.mutable_graphs()) {
          AMPC_RETURN_IF_ERROR(walk(nested, body, scope, nested_path));
        }
        continue;
      }
      // Resolved from the call, whose graphs were walked where it stands: copied as they are.
      auto given = body.attrs->find(a.ref_attr_name());
      if (given == body.attrs->end()) continue;  // unset and no default: the op's own default
      onnx::AttributeProto resolved = given->second;
      resolved.set_name(a.name());
      if (a.type() != onnx::AttributeProto::UNDEFINED && resolved.type() != a.type()) {
        return invalid(str_cat(body.what, ": attribute '", a.ref_attr_name(), "' is ",
                               onnx::AttributeProto::AttributeType_Name(resolved.type()),
                               " but its node '", path, label_of(inner), "' reads it as ",
                               onnx::AttributeProto::AttributeType_Name(a.type())));
      }
      *node.add_attribute() = std::move(resolved);
    }
    return node;
  }

  // Rewrites `graph` (a subgraph of a node of `body`, at `path`) in place, its references to
  // names it does not define read in `outer`. In a function's body the names it defines get
  // fresh names (shadowing the enclosing graphs' as they did); calls in it are inlined.
  absl::Status walk(onnx::GraphProto& graph, const Body& body, const Scope& outer,
                    const std::string& path) {
    Scope scope(&outer);
    auto define = [&](std::string& name) {
      if (body.function == nullptr || name.empty()) return;
      std::string actual = fresh(str_cat(body.prefix, "/", name));
      scope.define(name, actual);
      name = std::move(actual);
    };
    for (onnx::ValueInfoProto& input : *graph.mutable_input()) define(*input.mutable_name());
    for (onnx::TensorProto& init : *graph.mutable_initializer()) define(*init.mutable_name());
    for (onnx::SparseTensorProto& init : *graph.mutable_sparse_initializer()) {
      define(*init.mutable_values()->mutable_name());
    }
    std::vector<onnx::NodeProto> nodes;
    for (const onnx::NodeProto& inner : graph.node()) {
      AMPC_ASSIGN_OR_RETURN(onnx::NodeProto node, rewrite(inner, body, scope, path));
      for (std::string& output : *node.mutable_output()) define(output);
      AMPC_RETURN_IF_ERROR(place(std::move(node), nodes));
    }
    graph.clear_node();
    for (onnx::NodeProto& node : nodes) *graph.add_node() = std::move(node);
    for (onnx::ValueInfoProto& output : *graph.mutable_output()) {
      std::optional<std::string> actual = scope.find(output.name());
      if (!actual) {
        return invalid(str_cat(body.what, ": '", path.substr(0, path.size() - 1), "' returns '",
                               output.name(),
                               "', which is neither an input of the function nor defined "
                               "before it"));
      }
      output.set_name(*actual);
    }
    // Type annotations of the names kept; those of names it cannot see are dropped.
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> infos;
    for (onnx::ValueInfoProto& info : *graph.mutable_value_info()) {
      if (std::optional<std::string> actual = scope.find(info.name())) {
        info.set_name(*actual);
        *infos.Add() = std::move(info);
      }
    }
    graph.mutable_value_info()->Swap(&infos);
    return absl::OkStatus();
  }

  absl::Status inline_call(const onnx::NodeProto& call, const onnx::FunctionProto& f,
                           std::vector<onnx::NodeProto>& out) {
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
    const Body body{&f, &attrs, what, call.name().empty() ? f.name() : call.name()};

    // Formal names to the caller's: inputs to the call's operands ("" when omitted), outputs
    // to the call's results (fresh names when the call does not ask for one).
    Scope scope(nullptr);
    for (int i = 0; i < f.input_size(); ++i) {
      scope.define(f.input(i), i < call.input_size() ? call.input(i) : std::string());
    }
    std::unordered_map<std::string, std::string> result;
    for (int j = 0; j < f.output_size(); ++j) {
      const bool asked = j < call.output_size() && !call.output(j).empty();
      result[f.output(j)] = asked ? call.output(j) : fresh(str_cat(body.prefix, "/", f.output(j)));
    }
    std::unordered_set<std::string> defined;

    stack_.push_back(&f);
    for (const onnx::NodeProto& inner : f.node()) {
      AMPC_ASSIGN_OR_RETURN(onnx::NodeProto node, rewrite(inner, body, scope, ""));
      node.set_name(str_cat(body.prefix, "/", label_of(inner)));
      for (int k = 0; k < node.output_size(); ++k) {
        if (node.output(k).empty()) continue;
        auto out = result.find(inner.output(k));
        const std::string actual =
            out != result.end() ? out->second : fresh(str_cat(body.prefix, "/", inner.output(k)));
        scope.define(inner.output(k), actual);
        defined.insert(inner.output(k));
        node.set_output(k, actual);
      }
      AMPC_RETURN_IF_ERROR(place(std::move(node), out));
    }
    stack_.pop_back();

    // An output the body never defines is one of its inputs passed through.
    for (int j = 0; j < f.output_size(); ++j) {
      if (defined.contains(f.output(j))) continue;
      std::optional<std::string> input = scope.find(f.output(j));
      if (!input || input->empty()) {
        return invalid(
            str_cat(what, ": the function never defines its output '", f.output(j), "'"));
      }
      onnx::NodeProto identity;
      identity.set_op_type("Identity");
      identity.set_name(str_cat(body.prefix, "/", f.output(j)));
      identity.add_input(*input);
      identity.add_output(result[f.output(j)]);
      out.push_back(std::move(identity));
    }
    return absl::OkStatus();
  }

  const onnx::GraphProto& graph_;
  std::map<std::string, int64_t, std::less<>>& opsets_;
  std::map<FunctionKey, const onnx::FunctionProto*> functions_;
  std::unordered_set<std::string> names_;
  std::vector<const onnx::FunctionProto*> stack_;
};

}  // namespace

absl::StatusOr<std::vector<onnx::NodeProto>> inline_functions(
    const onnx::ModelProto& model, const onnx::GraphProto& graph,
    std::map<std::string, int64_t, std::less<>>& opsets) {
  return Inliner(model, graph, opsets).run();
}

}  // namespace ampc::onnx_io
