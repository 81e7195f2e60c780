#include "compiler/op_def.h"

#include <algorithm>
#include <tuple>

#include "compiler/strings.h"

namespace ampc {

std::string_view autocast_category_name(AutocastCategory category) {
  switch (category) {
    case AutocastCategory::kNone:
      return "none";
    case AutocastCategory::kAllow:
      return "allow";
    case AutocastCategory::kClear:
      return "clear";
    case AutocastCategory::kFollow:
      return "follow";
    case AutocastCategory::kDeny:
      return "deny";
  }
  return "none";
}

const AttrSpec* OpDef::find_attr(std::string_view attr_name) const {
  for (const AttrSpec& spec : attrs) {
    if (spec.name == attr_name) return &spec;
  }
  return nullptr;
}

namespace {
int count_min(const std::vector<OperandSpec>& specs) {
  int n = 0;
  for (int i = 0; i < static_cast<int>(specs.size()); ++i) {
    if (specs[i].arity == OperandSpec::Arity::kSingle) n = i + 1;
    // A variadic operand needs at least one value.
    if (specs[i].arity == OperandSpec::Arity::kVariadic) n = i + 1;
  }
  return n;
}
int count_max(const std::vector<OperandSpec>& specs) {
  if (!specs.empty() && specs.back().arity == OperandSpec::Arity::kVariadic) return INT_MAX;
  return static_cast<int>(specs.size());
}
}  // namespace

int OpDef::min_inputs() const { return count_min(inputs); }
int OpDef::max_inputs() const { return count_max(inputs); }
int OpDef::min_outputs() const { return count_min(outputs); }
int OpDef::max_outputs() const { return count_max(outputs); }

std::string OpDef::qualified_name() const {
  return domain.empty() ? name : str_cat(domain, ".", name);
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = new OpRegistry();  // never destroyed: used until exit
  return *registry;
}

void OpRegistry::add(OpDef def) {
  for (const auto& existing : defs_) {
    const bool overlap = existing->domain == def.domain && existing->name == def.name &&
                         existing->since_opset <= def.until_opset &&
                         def.since_opset <= existing->until_opset;
    if (overlap) {
      std::fprintf(stderr, "op %s registered twice for overlapping opsets\n",
                   def.qualified_name().c_str());
      AMPC_CHECK(false);
    }
  }
  defs_.push_back(std::make_unique<OpDef>(std::move(def)));
}

const OpDef* OpRegistry::find(std::string_view domain, std::string_view name, int64_t opset) const {
  for (const auto& def : defs_) {
    if (def->domain == domain && def->name == name && def->since_opset <= opset &&
        opset <= def->until_opset) {
      return def.get();
    }
  }
  return nullptr;
}

std::vector<const OpDef*> OpRegistry::find_all(std::string_view domain,
                                               std::string_view name) const {
  std::vector<const OpDef*> found;
  for (const auto& def : defs_) {
    if (def->domain == domain && def->name == name) found.push_back(def.get());
  }
  std::sort(found.begin(), found.end(),
            [](const OpDef* a, const OpDef* b) { return a->since_opset < b->since_opset; });
  return found;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> list;
  for (const auto& def : defs_) list.push_back(def.get());
  std::sort(list.begin(), list.end(), [](const OpDef* a, const OpDef* b) {
    return std::tie(a->domain, a->name, a->since_opset) <
           std::tie(b->domain, b->name, b->since_opset);
  });
  return list;
}

std::string OpRegistry::supported_names(std::string_view domain) const {
  std::vector<std::string> names;
  for (const OpDef* def : all()) {
    if (def->domain == domain && (names.empty() || names.back() != def->name)) {
      names.push_back(def->name);
    }
  }
  return str_join(names, ", ");
}

// ---- InferenceContext -------------------------------------------------------------------------

InferenceContext::InferenceContext(const Node& node, std::vector<const TensorType*> input_types,
                                   std::vector<const Tensor*> input_values)
    : node_(node),
      input_types_(std::move(input_types)),
      input_values_(std::move(input_values)),
      output_types_(static_cast<size_t>(node.num_outputs())) {
  input_values_.resize(input_types_.size(), nullptr);
}

InferenceContext::InferenceContext(const Node& node, std::vector<const TensorType*> input_types,
                                   ValueSource value_of)
    : node_(node),
      input_types_(std::move(input_types)),
      value_of_(std::move(value_of)),
      output_types_(static_cast<size_t>(node.num_outputs())) {}

const Tensor* InferenceContext::input_value(int i) const {
  if (i < 0 || i >= num_inputs() || input_types_[i] == nullptr) return nullptr;
  return value_of_ ? value_of_(i) : input_values_[i];
}

int64_t InferenceContext::opset() const { return node_.graph()->opset(node_.domain()); }

const TensorType& InferenceContext::input_type(int i) const {
  AMPC_CHECK(has_input(i));
  return *input_types_[i];
}

bool InferenceContext::has_attr(std::string_view name) const {
  if (node_.find_attr(name)) return true;
  const AttrSpec* spec = node_.def() ? node_.def()->find_attr(name) : nullptr;
  return spec != nullptr && spec->default_value.has_value();
}

absl::StatusOr<std::optional<std::vector<int64_t>>> InferenceContext::ints_attr_or_input(
    std::string_view attr, int input) const {
  if (node_.find_attr(attr)) return std::optional(node_.ints_attr(attr));
  if (has_input(input)) {
    const Tensor* value = input_value(input);
    if (value == nullptr || !value->has_data()) {
      return absl::InvalidArgumentError(
          str_cat("input ", input, " ('", attr, "') must be known at compile time (a constant)"));
    }
    return std::optional(value->to_i64_vector());
  }
  if (has_attr(attr)) return std::optional(node_.ints_attr(attr));
  return std::optional<std::vector<int64_t>>();
}

bool InferenceContext::has_output(int i) const { return node_.has_output(i); }

void InferenceContext::set_output(int i, TensorType type) {
  if (i < num_outputs()) output_types_[i] = std::move(type);
}

}  // namespace ampc
