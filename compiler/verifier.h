// The IR verifier, run after every pass. It checks, and names the first violation of:
//   - every operand is a value of this graph defined before its use (topological order);
//   - use lists match operands exactly (each operand edge is one use, each use one edge);
//   - every node output has this node as its single producer; graph outputs are defined;
//   - every op is registered for the graph's opset, with a valid number of operands;
//   - every node's output types equal what its OpDef infers; initializer data matches its type.
#pragma once

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc {

absl::Status verify(const Graph& graph);

}  // namespace ampc
