// `ampc inspect --precision`: each node's precision and why, and what it costs (casts, memory).
#pragma once

#include <string>

#include "compiler/ir.h"

namespace ampc {

std::string precision_report(const Graph& graph);

}  // namespace ampc
