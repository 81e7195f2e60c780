// Runs a graph node by node with one fresh allocation per value: no plan, no memory reuse. It
// is the baseline the planned executor is checked against, and the quickest way to run one op in
// a test, on any backend.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "runtime/backend.h"
#include "runtime/kernel.h"

namespace ampc::runtime {

// Evaluates `graph` with `inputs` bound to its graph inputs (in order) and returns its outputs
// (in order). Input types must match exactly; errors name the input or the node.
absl::StatusOr<std::vector<Tensor>> interpret_graph(const Graph& graph,
                                                    const std::vector<Tensor>& inputs,
                                                    Device device = Device::kCpu);
// The same on a given backend.
absl::StatusOr<std::vector<Tensor>> interpret_graph(const Graph& graph,
                                                    const std::vector<Tensor>& inputs,
                                                    Backend& backend);

}  // namespace ampc::runtime
