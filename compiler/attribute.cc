#include "compiler/attribute.h"

namespace ampc {

AttrKind attr_kind(const AttrValue& value) {
  // The variant's alternatives are listed in AttrKind order.
  return static_cast<AttrKind>(value.index());
}

std::string_view attr_kind_name(AttrKind kind) {
  static constexpr std::string_view kNames[] = {"int",    "float",   "string", "ints",
                                                "floats", "strings", "tensor", "dtype"};
  return kNames[static_cast<int>(kind)];
}

}  // namespace ampc
