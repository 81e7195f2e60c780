// The types of an ONNX graph's inputs, for import.
#pragma once

#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// The static types of graph inputs `inputs`, their dynamic dims fixed by `options` (the rules
// are ImportOptions'). Errors name the input, the dim and the flag (--shape, --dim) that would
// fix it: a dim still dynamic, a missing shape, a rank or a dim that a --shape contradicts, two
// sizes for one dim name, a --shape or --dim that names nothing in the graph, an invalid shape.
absl::StatusOr<std::vector<TensorType>> graph_input_types(
    const std::vector<const onnx::ValueInfoProto*>& inputs, const ImportOptions& options);

}  // namespace ampc::onnx_io
