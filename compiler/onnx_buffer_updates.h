// Buffers a module updates in place in its forward pass (a spectral norm's power-iteration
// vectors, a running average or a counter it keeps with `buf.mul_(m).add_(...)`), which a
// training step must carry from one step to the next as PyTorch's module does. An ONNX graph
// has no form for an update in place: PyTorch's dynamo exporter lists each in the graph
// signature (`add_1: BUFFER_MUTATION target='ema'`: the value `add_1` is the buffer `ema`'s new
// value) and keeps the value in the file under that name, where the forward reads it. The
// TorchScript exporter keeps no trace of them.
//
// For a training compile, import makes each such value a graph output `<buffer>.next` and lists
// the pairs as the graph metadata kBufferUpdatesKey, and the rest of the forward reads the value
// through an Identity with `stop_gradient` (PyTorch updates buffers under torch.no_grad(), a
// block no exporter records); the training-step pass turns them into
// state updates of the step and removes them from the eval graph. A batch norm's running
// statistics are the batchnorm-state pass's; a buffer the file does not read needs no update; a
// buffer whose new value the file lacks is listed as kStaleBuffersKey, which the training-step
// pass warns of.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/ir.h"
#include "compiler/onnx_lowering.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

inline constexpr char kBufferUpdatesKey[] = "ampc.buffer_updates";
inline constexpr char kStaleBuffersKey[] = "ampc.stale_buffers";

// After `graph`'s nodes and outputs are imported into `out` through `sink`: the outputs and the
// metadata above. Does nothing for a graph without a signature.
absl::Status import_buffer_updates(const onnx::GraphProto& graph, ImportSink& sink, Graph& out);

// The (buffer, graph output holding its new value) pairs `graph`'s metadata lists.
std::vector<std::pair<std::string, std::string>> buffer_updates(const Graph& graph);

// Whether `output` is one of those outputs (not an output of the model itself).
bool is_buffer_update_output(const Graph& graph, const Value* output);

}  // namespace ampc::onnx_io
