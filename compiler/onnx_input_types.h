// The types of an ONNX graph's inputs, for import.
#pragma once

#include "ampc/status.h"
#include "compiler/ir.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// The static type of graph input `info`. `fixed` (from --shape; null if none) gives its shape
// or fixes its dynamic dims; a dim still dynamic, a missing shape, a rank or a dim that `fixed`
// contradicts, or an invalid shape is an error that names the input and the --shape that would
// fix it.
absl::StatusOr<TensorType> graph_input_type(const onnx::ValueInfoProto& info, const Shape* fixed);

}  // namespace ampc::onnx_io
