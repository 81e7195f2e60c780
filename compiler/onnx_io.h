// ONNX import and export, generic over each op's OpDef (no per-op code).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc {

// How import makes the graph inputs' shapes static. A dim a file leaves dynamic (symbolic, as
// PyTorch's exporters write `dynamic_axes` and `dynamic_shapes`, or unknown) takes, in this
// order: the size `input_shapes` gives that input; the size `dims` gives its name; the size
// another input's `input_shapes` gives a dim of the same name (one name is one size throughout a
// graph, as ONNX says); the size of the input's array in `data_shapes` (or `data_array_shapes`).
// A dim still dynamic,
// contradictory sizes for one name, or a flag that names nothing is an error naming the input,
// the dim and the flag that would fix it.
struct ImportOptions {
  // `--shape NAME:8x3x32x32`: an input's whole shape.
  std::map<std::string, Shape, std::less<>> input_shapes;
  // `--dim batch=32`: every input dim of that name.
  std::map<std::string, int64_t, std::less<>> dims;
  // The shapes of the arrays the model is about to run on (`ampc run --inputs`, one batch of
  // `--data`), by input name; they fix only what is dynamic: a static dim they contradict is left
  // to the check of the data, which names the file.
  std::map<std::string, Shape, std::less<>> data_shapes;
  // For `--data`: its arrays' whole shapes, [num_batches, ...batch] (`data_shapes` then holds the
  // batch) or, for one batch, the input's own. An input whose `data_shapes` entry has another rank
  // takes its array's whole shape when that has the input's rank.
  std::map<std::string, Shape, std::less<>> data_array_shapes = {};
  // For a training compile: the buffers the module updates in place become graph outputs that
  // the training step makes state updates (compiler/onnx_buffer_updates.h).
  bool buffer_updates = false;
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
namespace onnx_io {
// The standard-domain ops import rewrites into others (CastLike, the sequence ops, and ops
// expanded into their ONNX definitions: Attention, GroupNormalization, ...), sorted; they have no
// kernels of their own (compiler/onnx_lowering.h).
std::vector<std::string> ops_lowered_at_import();
}  // namespace onnx_io

struct ExportOptions {
  // Where initializers go. kAuto: beside the model when they total more than
  // auto_threshold_bytes (a ModelProto cannot exceed 2 GiB); kAlways: every initializer of
  // kExternalDataMinBytes or more goes to `<path>.data`, as PyTorch's exporter writes it;
  // kNever: one file.
  enum class ExternalData { kAuto, kAlways, kNever };
  ExternalData external_data = ExternalData::kAuto;
  int64_t auto_threshold_bytes = int64_t{1792} << 20;  // 1.75 GiB
};
inline constexpr int64_t kExternalDataMinBytes = 1024;

// Writes the model to `path` (and its weights to `path` + ".data" when external) through
// temporary files and renames, so a failure never leaves a half-written file.
absl::Status export_onnx_file(const Graph& graph, const std::string& path,
                              const ExportOptions& options = {});

}  // namespace ampc
