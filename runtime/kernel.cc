#include "runtime/kernel.h"

#include <array>
#include <charconv>
#include <mutex>

#include "compiler/strings.h"

namespace ampc::runtime {

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* registry = new KernelRegistry();
  return *registry;
}

void KernelRegistry::add(KernelDef def) {
  AMPC_CHECK(def.fn != nullptr && !def.dtypes.empty());
  const std::unique_lock lock(mutex_);
  for (DType dtype : def.dtypes) {
    // One kernel per key, or resolution would depend on registration order.
    AMPC_CHECK(find_locked(def.domain, def.op, def.device, dtype) == nullptr);
  }
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::find(std::string_view domain, std::string_view op, Device device,
                                      DType dtype) const {
  const std::shared_lock lock(mutex_);
  return find_locked(domain, op, device, dtype);
}

const KernelDef* KernelRegistry::find_locked(std::string_view domain, std::string_view op,
                                             Device device, DType dtype) const {
  for (const KernelDef& def : defs_) {
    if (def.domain != domain || def.op != op || def.device != device) continue;
    for (DType supported : def.dtypes) {
      if (supported == dtype) return &def;
    }
  }
  return nullptr;
}

std::vector<DType> KernelRegistry::dtypes(std::string_view domain, std::string_view op,
                                          Device device) const {
  const std::shared_lock lock(mutex_);
  return dtypes_locked(domain, op, device);
}

std::vector<DType> KernelRegistry::dtypes_locked(std::string_view domain, std::string_view op,
                                                 Device device) const {
  std::vector<DType> result;
  for (const KernelDef& def : defs_) {
    if (def.domain == domain && def.op == op && def.device == device) {
      result.insert(result.end(), def.dtypes.begin(), def.dtypes.end());
    }
  }
  return result;
}

int64_t int_attr_or(const Node& node, std::string_view name, int64_t fallback) {
  const AttrValue* value = node.find_attr(name);
  return value != nullptr ? std::get<int64_t>(*value) : fallback;
}

double decimal_attr(const Node& node, std::string_view name) {
  const float value = node.float_attr(name);
  std::array<char, 32> text;
  const auto [end, error] = std::to_chars(text.data(), text.data() + text.size(), value);
  double result = value;
  if (error == std::errc()) std::from_chars(text.data(), end, result);
  return result;
}

numeric::SgdHyper sgd_hyper(const Node& node) {
  return {.momentum = decimal_attr(node, "momentum"),
          .dampening = decimal_attr(node, "dampening"),
          .weight_decay = decimal_attr(node, "weight_decay"),
          .nesterov = node.int_attr("nesterov") != 0,
          .maximize = node.int_attr("maximize") != 0};
}

numeric::AdamHyper adam_hyper(const Node& node) {
  return {.beta1 = decimal_attr(node, "beta1"),
          .beta2 = decimal_attr(node, "beta2"),
          .epsilon = decimal_attr(node, "epsilon"),
          .weight_decay = decimal_attr(node, "weight_decay"),
          .decoupled = node.int_attr("decoupled_weight_decay") != 0,
          .maximize = node.int_attr("maximize") != 0};
}

numeric::LossScaleRule loss_scale_rule(const Node& node) {
  return {.growth_factor = decimal_attr(node, "growth_factor"),
          .backoff_factor = decimal_attr(node, "backoff_factor"),
          .min_scale = decimal_attr(node, "min_scale"),
          .growth_interval = node.int_attr("growth_interval"),
          .hysteresis = node.int_attr("hysteresis")};
}

const TensorType* key_type(const Node& node, KeyedOn keyed_on) {
  if (keyed_on.output) {
    return node.has_output(keyed_on.index) ? &node.output(keyed_on.index)->type() : nullptr;
  }
  return node.has_operand(keyed_on.index) ? &node.operand(keyed_on.index)->type() : nullptr;
}

absl::StatusOr<const KernelDef*> KernelRegistry::resolve(const Node& node, Device device) const {
  const std::shared_lock lock(mutex_);
  bool op_known = false;
  std::optional<DType> key_dtype;
  for (const KernelDef& def : defs_) {
    if (def.domain != node.domain() || def.op != node.op_type() || def.device != device) continue;
    op_known = true;
    const TensorType* key = key_type(node, def.keyed_on);
    if (key == nullptr) continue;
    key_dtype = key->dtype;
    for (DType supported : def.dtypes) {
      if (supported == key->dtype) return &def;
    }
  }
  if (!op_known) {
    return absl::UnimplementedError(
        str_cat(node.describe(), ": no ", device_name(device), " kernel for op ", node.op_type()));
  }
  std::vector<std::string> names;
  for (DType dtype : dtypes_locked(node.domain(), node.op_type(), device)) {
    names.emplace_back(dtype_name(dtype));
  }
  return absl::UnimplementedError(str_cat(node.describe(), ": no ", device_name(device),
                                          " kernel for op ", node.op_type(), " with element type ",
                                          key_dtype ? dtype_name(*key_dtype) : "(absent)",
                                          " (kernels exist for ", str_join(names, ", "), ")"));
}

}  // namespace ampc::runtime
