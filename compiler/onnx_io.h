// ONNX import and export, generic over each op's OpDef (no per-op code).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "compiler/ir.h"
#include "compiler/status.h"

namespace ampc {

struct ImportOptions {
  // Fixes graph inputs' dims (`--shape NAME:8x3x32x32`). Every symbolic or unknown dim of a graph
  // input must be fixed here, else import fails naming the input and the dim.
  std::map<std::string, Shape, std::less<>> input_shapes;
};

// Reads an ONNX model file. Every failure (unreadable file, not a model, unsupported op or type,
// inconsistent shapes) is a Status naming the file and, where it applies, the node.
absl::StatusOr<std::unique_ptr<Graph>> import_onnx_file(const std::string& path,
                                                        const ImportOptions& options = {});
// The same from serialized ModelProto bytes; `source` names them in messages.
absl::StatusOr<std::unique_ptr<Graph>> import_onnx_bytes(std::string_view bytes,
                                                         std::string_view source,
                                                         const ImportOptions& options = {});

// Serializes the graph as an ONNX ModelProto (names made unique, attributes in the form the
// graph's opset expects).
absl::StatusOr<std::string> export_onnx_bytes(const Graph& graph);
// Writes the model to `path` through a temporary file and a rename, so a failure never leaves a
// half-written file.
absl::Status export_onnx_file(const Graph& graph, const std::string& path);

}  // namespace ampc
