// Which float initializers are data an exporter folded, not parameters: shared by autodiff (it
// does not train them by default) and fuse-attention (it takes them as masks and scales).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <regex>
#include <span>

#include "compiler/ir.h"

namespace ampc {

// Whether `value` is an initializer holding a mask fill: inf or NaN (an additive 0 / -inf
// mask), or the type's largest finite magnitude (PyTorch's masks filled with
// torch.finfo(dtype).min, as the dynamo exporter folds them). No trained weight holds either.
inline bool holds_mask_fill(const Value& value) {
  const Tensor* data = value.initializer();
  if (data == nullptr || !data->has_data() || !is_arithmetic_float(data->dtype())) return false;
  double largest = std::numeric_limits<double>::max();
  switch (data->dtype()) {
    case DType::kF32:
      largest = std::numeric_limits<float>::max();
      break;
    case DType::kF16:
      largest = 65504.0;
      break;
    case DType::kBF16:
      largest = 0x1.fep127;
      break;
    default:
      break;
  }
  for (int64_t i = 0; i < data->num_elements(); ++i) {
    const double x = data->element_as_double(i);
    if (!std::isfinite(x) || std::abs(x) >= largest) return true;
  }
  return false;
}

// Whether the float initializer `value` holds more than one element, all one value (bitwise): a
// torch.ones, zeros or full that an exporter's optimizer folded into an initializer (the dynamo
// exporter does so with nn.EmbeddingBag's per-sample weights). Where the file declares its
// parameters and buffers and not this one, it is the exporter's constant (autodiff).
inline bool holds_one_value(const Value& value) {
  const Tensor* data = value.initializer();
  if (data == nullptr || !data->has_data() || !is_arithmetic_float(data->dtype()) ||
      data->num_elements() < 2) {
    return false;
  }
  const std::span<const uint8_t> bytes = data->bytes();
  const size_t size = bytes.size() / static_cast<size_t>(data->num_elements());
  for (size_t at = size; at < bytes.size(); at += size) {
    if (!std::equal(bytes.begin(), bytes.begin() + size, bytes.begin() + at)) return false;
  }
  return true;
}

// Whether the float initializer `value` is a constant an exporter lifted out of the graph: a
// scalar of rank 0 (an exponent, an epsilon, a temperature), or a one-element tensor named as
// torch.onnx's dynamo exporter names the constants it lifts (val_<n>: an attention's square-root
// scale). A [1] parameter, such as the bias of a one-output Linear, keeps its module's name.
inline bool is_lifted_constant(const Value& value) {
  if (value.type().shape.empty()) return true;
  static const std::regex kDynamoConstant("^_?val_[0-9]+$");
  return value.type().num_elements() == 1 && std::regex_match(value.name(), kDynamoConstant);
}

// Whether the file declares its parameters and buffers (PyTorch's graph signature,
// Value::declared): then an initializer it does not declare is one the exporter made.
inline bool declares_parameters(const Graph& graph) {
  return std::any_of(graph.initializers().begin(), graph.initializers().end(),
                     [](const Value* v) { return v->declared() != Value::Declared::kUnknown; });
}

// Whether autodiff takes the initializer `value` as data by default (without --trainable naming
// it): a program constant, a buffer or frozen parameter, a mask fill, a lifted constant (unless
// the exporter declared it a parameter), or, where the file declares its parameters
// (`file_declares`, declares_parameters), an undeclared tensor of one repeated value
// (holds_one_value).
inline bool data_by_default(const Value& value, bool file_declares) {
  if (value.initializer() == nullptr) return false;
  return value.is_constant() || value.is_declared_untrained() || holds_mask_fill(value) ||
         (is_float(value.dtype()) && is_lifted_constant(value) &&
          value.declared() != Value::Declared::kParameter) ||
         (file_declares && value.declared() == Value::Declared::kUnknown && holds_one_value(value));
}

// The value of a one-element float initializer autodiff does not train by default, or nullopt
// (a scale, a mask's fill, a guard's 0).
inline std::optional<double> constant_scalar(const Value* value) {
  const Tensor* data = value->initializer();
  // One element: never a repeated-value tensor, so the file's declarations do not matter.
  if (data == nullptr || !data_by_default(*value, /*file_declares=*/false) ||
      value->type().num_elements() != 1 || !is_float(value->dtype()) || !data->has_data()) {
    return std::nullopt;
  }
  return data->element_as_double(0);
}

}  // namespace ampc
