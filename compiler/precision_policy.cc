#include "compiler/precision_policy.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "ampc/float16.h"
#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "nlohmann/json.hpp"

namespace ampc {
namespace {

// The ops fp16 denies only because their results overflow its range; bf16 has fp32's range.
const std::set<std::string, std::less<>>& bf16_follow_ops() {
  static const auto* ops = new std::set<std::string, std::less<>>{
      "Exp", "Log", "Reciprocal", "Pow", "Softplus", "Sinh", "Cosh"};
  return *ops;
}

// The ops whose ONNX definitions admit f16 and bf16 only from an opset far past the ones
// exporters write (Celu from 28, Range from 27): in low precision a file could be legal ONNX
// only at that opset, so they run in fp32 unless the policy names them. (f16 and bf16 Celu
// compute in f32 and round once, which the fp32 node followed by a cast down does too.)
const std::map<std::string, int, std::less<>>& late_low_precision_ops() {
  static const auto* ops = new std::map<std::string, int, std::less<>>{{"Celu", 28}, {"Range", 27}};
  return *ops;
}

// "Softmax" names the standard op; "ampc.ReluGrad" an op of another domain.
std::pair<std::string, std::string> split_op_name(std::string_view op) {
  const size_t dot = op.rfind('.');
  if (dot == std::string_view::npos) return {"", std::string(op)};
  return {std::string(op.substr(0, dot)), std::string(op.substr(dot + 1))};
}

}  // namespace

std::string_view opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::kO0:
      return "O0";
    case OptLevel::kO1:
      return "O1";
    case OptLevel::kO2:
      return "O2";
    case OptLevel::kO3:
      return "O3";
  }
  return "?";
}

std::string_view precision_name(DType low) {
  switch (low) {
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    default:
      return "fp32";
  }
}

absl::StatusOr<DType> parse_precision(std::string_view name, std::string_view flag) {
  if (name == "fp32") return DType::kF32;
  if (name == "fp16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  if (name.starts_with("fp8")) {
    return absl::UnimplementedError(
        str_cat(flag, " ", name, ": fp8 training is not supported yet (fp32, fp16, bf16)"));
  }
  return absl::InvalidArgumentError(
      str_cat("unknown ", flag, " '", name, "' (fp32, fp16 or bf16)"));
}

absl::StatusOr<OptLevel> parse_opt_level(std::string_view name) {
  for (OptLevel level : {OptLevel::kO0, OptLevel::kO1, OptLevel::kO2, OptLevel::kO3}) {
    if (name == opt_level_name(level)) return level;
  }
  return absl::InvalidArgumentError(str_cat("unknown --opt-level '", name, "' (O0, O1, O2, O3)"));
}

absl::Status add_op_entry(PrecisionPolicy& policy, std::string_view op, AutocastCategory category,
                          std::string source) {
  const auto [domain, name] = split_op_name(op);
  if (OpRegistry::global().find_all(domain, name).empty()) {
    return absl::InvalidArgumentError(str_cat(source, ": ampc has no op '", op, "' (standard ops: ",
                                              OpRegistry::global().supported_names(""), ")"));
  }
  auto [it, inserted] =
      policy.ops.emplace(std::string(op), PrecisionPolicy::OpEntry{category, source});
  if (!inserted && it->second.category != category) {
    return absl::InvalidArgumentError(str_cat("conflicting precision entries for ", op, ": ",
                                              it->second.source, " and ", source));
  }
  return absl::OkStatus();
}

absl::Status read_policy_file(const std::string& path, PrecisionPolicy& policy) {
  absl::StatusOr<std::string> text = read_regular_file(path);
  if (!text.ok()) return absl::InvalidArgumentError(str_cat("--policy: ", text.status().message()));
  // A key given twice at the top level would silently keep one of the two lists.
  std::set<std::string, std::less<>> keys;
  std::string repeated;
  const auto note_keys = [&](int depth, nlohmann::json::parse_event_t event,
                             nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(*text, note_keys);
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 1: ..." without its tag.
    std::string_view why = e.what();
    if (const size_t tag_end = why.find("] "); tag_end != std::string_view::npos) {
      why.remove_prefix(tag_end + 2);
    }
    return absl::InvalidArgumentError(str_cat(path, ": not valid JSON: ", why));
  }
  if (!json.is_object()) return absl::InvalidArgumentError(str_cat(path, ": not a JSON object"));
  if (!repeated.empty()) {
    return absl::InvalidArgumentError(
        str_cat(path, ": \"", repeated, "\" is given twice; give each key once"));
  }
  auto string_list = [&](const nlohmann::json& value,
                         std::string_view key) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> items;
    if (!value.is_array()) {
      return absl::InvalidArgumentError(str_cat(path, ": \"", key, "\" must be a list of strings"));
    }
    for (const nlohmann::json& item : value) {
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            str_cat(path, ": \"", key, "\" must be a list of strings"));
      }
      items.push_back(item.get<std::string>());
    }
    return items;
  };
  const std::pair<std::string_view, AutocastCategory> lists[] = {
      {"allow", AutocastCategory::kAllow},
      {"clear", AutocastCategory::kClear},
      {"follow", AutocastCategory::kFollow},
      {"deny", AutocastCategory::kDeny}};
  for (const auto& [key, value] : json.items()) {
    if (key == "precision" || key == "opt_level") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(str_cat(path, ": \"", key, "\" must be a string"));
      }
      const std::string text_value = value.get<std::string>();
      if (key == "precision") {
        absl::StatusOr<DType> low = parse_precision(text_value);
        if (!low.ok())
          return absl::Status(low.status().code(), str_cat(path, ": ", low.status().message()));
        policy.low = *low;
        policy.low_source = path;
      } else {
        absl::StatusOr<OptLevel> level = parse_opt_level(text_value);
        if (!level.ok()) {
          return absl::Status(level.status().code(), str_cat(path, ": ", level.status().message()));
        }
        policy.level = *level;
        policy.level_source = path;
      }
      continue;
    }
    if (key == "fp32_nodes") {
      AMPC_ASSIGN_OR_RETURN(std::vector<std::string> regexes, string_list(value, key));
      for (std::string& regex : regexes) {
        policy.fp32_nodes.push_back({std::move(regex), str_cat(path, ": fp32_nodes")});
      }
      continue;
    }
    bool known = false;
    for (const auto& [list, category] : lists) {
      if (key != list) continue;
      known = true;
      AMPC_ASSIGN_OR_RETURN(std::vector<std::string> ops, string_list(value, key));
      for (const std::string& op : ops) {
        AMPC_RETURN_IF_ERROR(add_op_entry(policy, op, category, str_cat(path, ": ", key, " ", op)));
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(
          str_cat(path, ": unknown key \"", key,
                  "\" (precision, opt_level, allow, clear, follow, deny, fp32_nodes)"));
    }
  }
  return absl::OkStatus();
}

CategoryChoice category_of(const OpDef& def, const PrecisionPolicy& policy) {
  const std::string name = def.qualified_name();
  if (auto it = policy.ops.find(name); it != policy.ops.end()) {
    return {it->second.category, it->second.source, true};
  }
  AutocastCategory category = def.autocast.category;
  if (policy.low == DType::kBF16 && def.domain.empty() && category == AutocastCategory::kDeny &&
      bf16_follow_ops().contains(def.name)) {
    return {AutocastCategory::kFollow, "follow-list (bf16: no overflow risk)", false};
  }
  if (const auto late = late_low_precision_ops().find(def.name);
      def.domain.empty() && late != late_low_precision_ops().end() &&
      category != AutocastCategory::kDeny) {
    return {AutocastCategory::kDeny,
            str_cat("deny-list (ONNX admits f16 and bf16 only from opset ", late->second, ")"),
            false};
  }
  return {category, str_cat(autocast_category_name(category), "-list"), false};
}

bool holds_exactly(const Tensor& tensor, DType low) {
  if (!tensor.has_data() || tensor.dtype() != DType::kF32) return false;
  for (float x : tensor.data<float>()) {
    const float back = low == DType::kF16 ? f16_bits_to_f32(f32_to_f16_bits(x))
                                          : bf16_bits_to_f32(f32_to_bf16_bits(x));
    if (!(back == x) && !(std::isnan(back) && std::isnan(x))) return false;
  }
  return true;
}

}  // namespace ampc
