// An ONNX node's op and attributes in ampc's terms, for import.
#include "compiler/onnx_op_lookup.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/onnx_common.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_metadata.h"
#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

// "opsets 6 to 12, 13 and later", for messages about an op known at other opsets.
std::string opset_ranges(const std::vector<const OpDef*>& defs) {
  std::vector<std::string> parts;
  for (const OpDef* def : defs) {
    if (def->until_opset == kLatestOpset) {
      parts.push_back(str_cat(def->since_opset, " and later"));
    } else if (def->since_opset == def->until_opset) {
      parts.push_back(str_cat(def->since_opset));
    } else {
      parts.push_back(str_cat(def->since_opset, " to ", def->until_opset));
    }
  }
  return str_cat(
      defs.size() == 1 && defs[0]->since_opset == defs[0]->until_opset ? "opset " : "opsets ",
      str_join(parts, ", "));
}

// Edit distance between `a` and `b`, ignoring case, less half their common prefix: ops of one
// family share a prefix (ReduceLogSumExp, ReduceSum).
double name_distance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1)});
      diagonal = above;
    }
  }
  size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && lower(a[prefix]) == lower(b[prefix])) ++prefix;
  return static_cast<double>(row[b.size()]) - 0.5 * static_cast<double>(prefix);
}

// The five ops of `domain` ampc supports (registered or lowered at import) whose names are
// nearest to `op_type`, nearest first.
std::vector<std::string> nearest_op_names(const std::string& domain, const std::string& op_type) {
  std::set<std::string> names;
  for (const OpDef* def : OpRegistry::global().all()) {
    if (def->domain == domain) names.insert(def->name);
  }
  if (domain.empty()) {
    for (std::string& name : onnx_io::ops_lowered_at_import()) names.insert(std::move(name));
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const std::string& name : names) ranked.emplace_back(name_distance(op_type, name), name);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> nearest;
  for (size_t i = 0; i < ranked.size() && i < 5; ++i) nearest.push_back(ranked[i].second);
  return nearest;
}

// The ONNX attribute type of `attr`; very old files leave `type` unset and only fill a field.
onnx::AttributeProto::AttributeType onnx_attr_type(const onnx::AttributeProto& attr) {
  if (attr.type() != onnx::AttributeProto::UNDEFINED) return attr.type();
  if (attr.has_f()) return onnx::AttributeProto::FLOAT;
  if (attr.has_i()) return onnx::AttributeProto::INT;
  if (attr.has_s()) return onnx::AttributeProto::STRING;
  if (attr.has_t()) return onnx::AttributeProto::TENSOR;
  if (attr.floats_size() > 0) return onnx::AttributeProto::FLOATS;
  if (attr.ints_size() > 0) return onnx::AttributeProto::INTS;
  if (attr.strings_size() > 0) return onnx::AttributeProto::STRINGS;
  return onnx::AttributeProto::UNDEFINED;
}

onnx::AttributeProto::AttributeType onnx_type_of_kind(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt:
    case AttrKind::kDType:
      return onnx::AttributeProto::INT;
    case AttrKind::kFloat:
      return onnx::AttributeProto::FLOAT;
    case AttrKind::kString:
      return onnx::AttributeProto::STRING;
    case AttrKind::kInts:
      return onnx::AttributeProto::INTS;
    case AttrKind::kFloats:
      return onnx::AttributeProto::FLOATS;
    case AttrKind::kStrings:
      return onnx::AttributeProto::STRINGS;
    case AttrKind::kTensor:
      return onnx::AttributeProto::TENSOR;
  }
  return onnx::AttributeProto::UNDEFINED;
}

absl::StatusOr<AttrValue> attr_value(const onnx::AttributeProto& attr, const AttrSpec& spec,
                                     const std::string& where, const std::string& base_dir) {
  const onnx::AttributeProto::AttributeType type = onnx_attr_type(attr);
  const onnx::AttributeProto::AttributeType want = onnx_type_of_kind(spec.kind);
  if (type != want) {
    return invalid(str_cat(where, " is ", onnx::AttributeProto::AttributeType_Name(type),
                           "; the op takes ", onnx::AttributeProto::AttributeType_Name(want)));
  }
  switch (spec.kind) {
    case AttrKind::kInt:
      return AttrValue(attr.i());
    case AttrKind::kDType: {
      const int code = attr.i() >= INT_MIN && attr.i() <= INT_MAX ? static_cast<int>(attr.i()) : 0;
      absl::StatusOr<DType> dtype = from_onnx_dtype(code);
      if (!dtype.ok())
        return absl::Status(dtype.status().code(), str_cat(where, ": ", dtype.status().message()));
      return AttrValue(*dtype);
    }
    case AttrKind::kFloat:
      return AttrValue(attr.f());
    case AttrKind::kString:
      return AttrValue(attr.s());
    case AttrKind::kInts:
      return AttrValue(std::vector<int64_t>(attr.ints().begin(), attr.ints().end()));
    case AttrKind::kFloats:
      return AttrValue(std::vector<float>(attr.floats().begin(), attr.floats().end()));
    case AttrKind::kStrings:
      return AttrValue(std::vector<std::string>(attr.strings().begin(), attr.strings().end()));
    case AttrKind::kTensor: {
      AMPC_ASSIGN_OR_RETURN(Tensor tensor, onnx_io::tensor_from_proto(attr.t(), where, base_dir));
      return AttrValue(std::move(tensor));
    }
  }
  return absl::InternalError("unknown attribute kind");
}

// What the node's metadata adds to its attributes: what PyTorch's dynamo exporter recorded
// of it and its ONNX form lost (an embedding's padding_idx, a batch norm's training mode),
// and ampc's own `ampc.<name>` entries for the op's extension attributes
// (AttrSpec::extension).
absl::Status metadata_attrs(const onnx::NodeProto& proto, const OpDef& def,
                            const std::string& label, Attributes& attrs) {
  for (const auto& [name, value] : torch_recorded_attrs(proto)) {
    if (def.find_attr(name) != nullptr) attrs.insert_or_assign(name, AttrValue(value));
  }
  if (std::none_of(def.attrs.begin(), def.attrs.end(),
                   [](const AttrSpec& spec) { return spec.extension; })) {
    return absl::OkStatus();
  }
  for (const auto& [key, text] : metadata_props(proto)) {
    for (const AttrSpec& spec : def.attrs) {
      if (!spec.extension || key != extension_attr_key(spec.name)) continue;
      const std::string where = str_cat(label, ": metadata '", key, "'");
      AMPC_CHECK(spec.kind == AttrKind::kInt);
      const std::optional<int64_t> value = parse_int64(text);
      if (!value) return invalid(str_cat(where, " is '", text, "', not an integer"));
      attrs.insert_or_assign(spec.name, AttrValue(*value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string domain_label(std::string_view domain) {
  return domain.empty() ? std::string("ai.onnx") : std::string(domain);
}

std::string opset_mismatch_hint(std::string_view op_type, int64_t model_opset) {
  static const std::map<std::string_view, int64_t, std::less<>> kIntroduced = {
      {"AffineGrid", 20},
      {"Attention", 23},
      {"Col2Im", 18},
      {"CumProd", 26},
      {"Gelu", 20},
      {"GroupNormalization", 18},
      {"Mish", 18},
      {"RMSNormalization", 23},
      {"RotaryEmbedding", 23},
      {"SwiGLU", 28},
      {"Swish", 24},
      {"TensorScatter", 24},
  };
  auto it = kIntroduced.find(op_type);
  if (it == kIntroduced.end() || model_opset >= it->second) return "";
  return str_cat("; ", op_type, " is not in ONNX before opset ", it->second,
                 ", so the file's opset_import does not fit its ops (PyTorch's exporter writes "
                 "such a file, left at opset 18, when ONNX's version converter cannot bring its "
                 "graph to the opset_version asked for: export at a lower one, such as 23)");
}

absl::StatusOr<const OpDef*> find_op_def(const onnx::NodeProto& proto, const std::string& domain,
                                         const Graph& graph, const std::string& label) {
  const auto& opsets = graph.opset_imports();
  if (!opsets.contains(domain)) {
    return invalid(str_cat(label, " uses domain '", domain_label(domain),
                           "', which the model's opset_import does not list"));
  }
  const int64_t opset = graph.opset(domain);
  const OpRegistry& registry = OpRegistry::global();
  if (const OpDef* def = registry.find(domain, proto.op_type(), opset)) return def;
  const std::string what =
      str_cat(label, ": op '", proto.op_type(), "' (domain '", domain_label(domain), "', opset ",
              opset, ") is not supported by ampc");
  std::vector<const OpDef*> others = registry.find_all(domain, proto.op_type());
  if (!others.empty()) {
    return absl::UnimplementedError(str_cat(what, "; ampc implements ", proto.op_type(), " for ",
                                            opset_ranges(others),
                                            opset_mismatch_hint(proto.op_type(), opset)));
  }
  const std::string supported = registry.supported_names(domain);
  if (supported.empty()) {
    return absl::UnimplementedError(str_cat(what, "; ampc has no ops in domain '",
                                            domain_label(domain),
                                            "' (ai.onnx ops: ", registry.supported_names(""), ")"));
  }
  const std::vector<std::string> nearest = nearest_op_names(domain, proto.op_type());
  return absl::UnimplementedError(str_cat(what, "; the nearest ops ampc supports: ",
                                          str_join(nearest, ", "), " (`ampc ops` lists all)"));
}

absl::StatusOr<Attributes> node_attrs(const onnx::NodeProto& proto, const OpDef& def, int64_t opset,
                                      const std::string& base_dir, const std::string& label) {
  Attributes attrs;
  for (const onnx::AttributeProto& attr : proto.attribute()) {
    const std::string where = str_cat(label, ": attribute '", attr.name(), "'");
    if (!attr.ref_attr_name().empty()) {
      return absl::UnimplementedError(
          str_cat(where, " refers to a function attribute, which is not supported"));
    }
    const AttrSpec* spec = def.find_attr(attr.name());
    if (spec == nullptr || spec->extension) {
      std::vector<std::string> known;
      for (const AttrSpec& s : def.attrs) {
        if (!s.extension) known.push_back(s.name);
      }
      return invalid(str_cat(where, " is not an attribute of ", def.qualified_name(), " at opset ",
                             opset, " (it has ", known.empty() ? "none" : str_join(known, ", "),
                             ")"));
    }
    if (attrs.contains(attr.name())) return invalid(str_cat(where, " is set twice"));
    AMPC_ASSIGN_OR_RETURN(AttrValue value, attr_value(attr, *spec, where, base_dir));
    attrs.emplace(attr.name(), std::move(value));
  }
  AMPC_RETURN_IF_ERROR(metadata_attrs(proto, def, label, attrs));
  for (const AttrSpec& spec : def.attrs) {
    if (spec.required && !attrs.contains(spec.name)) {
      return invalid(str_cat(label, ": required attribute '", spec.name, "' is missing"));
    }
  }
  return attrs;
}

}  // namespace ampc::onnx_io
