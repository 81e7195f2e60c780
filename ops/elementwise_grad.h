// The gradient rules of the element-wise ops of ops/elementwise.cc, kept beside them so that
// file stays about the ops' semantics.
#pragma once

#include <string_view>

#include "compiler/op_def.h"

namespace ampc::ops {

// The gradient rule of element-wise op `op_type`; null for ops nothing differentiates through
// (comparisons, Not).
GradFn elementwise_gradient(std::string_view op_type);

}  // namespace ampc::ops
