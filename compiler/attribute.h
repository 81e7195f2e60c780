// Node attributes: a small closed set of kinds that maps one to one onto ONNX's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/tensor.h"

namespace ampc {

// kDType is an ONNX INT attribute that names an element type (Cast's `to`); the IR keeps it as a
// DType so that passes and the text IR read `to=f16`, not `to=10`.
enum class AttrKind { kInt, kFloat, kString, kInts, kFloats, kStrings, kTensor, kDType };

using AttrValue = std::variant<int64_t, float, std::string, std::vector<int64_t>,
                               std::vector<float>, std::vector<std::string>, Tensor, DType>;

// Sorted by name, so that printing and comparison are deterministic.
using Attributes = std::map<std::string, AttrValue, std::less<>>;

AttrKind attr_kind(const AttrValue& value);
std::string_view attr_kind_name(AttrKind kind);  // "int", "floats", ...

}  // namespace ampc
