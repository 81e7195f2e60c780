// Import of one ONNX graph into ampc's IR, node by node (compiler/onnx_graph_import.cc); the
// model around it (the file, opset conversion, training_info) is compiler/onnx_import.cc's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// `graph` of `model` (its main graph, or training_info's algorithm) as a Graph: its opsets,
// initializers, inputs, nodes (functions inlined, ops lowered) and outputs, each output typed
// by inference. External data is read relative to `base_dir`. `outer`: the graph whose
// initializers this one may read by name (the eval graph, when importing the training step);
// each one read is copied in, so the result stands alone.
absl::StatusOr<std::unique_ptr<Graph>> import_graph(const onnx::ModelProto& model,
                                                    const onnx::GraphProto& graph,
                                                    const ImportOptions& options,
                                                    const std::string& base_dir,
                                                    const Graph* outer = nullptr);

}  // namespace ampc::onnx_io
