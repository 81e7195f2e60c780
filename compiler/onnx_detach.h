// PyTorch's detach() in dynamo exports, which ONNX cannot say (internal to compiler/onnx_*.cc).
//
// The dynamo exporter records each node's aten call (onnx_io::torch_fx_node). With its optimizer
// on (the default), a node that read `detach(y)` reads `y` itself and only its FX node's
// arguments still name `%detach`; the importer puts an Identity with the extension attribute
// stop_gradient between (autodiff takes no gradient through it). With optimize=False the detach
// stays an Identity of its own, read by onnx_io::torch_recorded_attrs.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "compiler/onnx_lowering.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

class DetachedInputs {
 public:
  // Called for each node before it is imported, in order. For a node whose aten call reads a
  // detach() the optimizer removed: the node reading, in place of each detached float input, an
  // Identity of it that stops the gradient (emitted into `sink`). Nullopt when nothing is
  // detached. Which inputs: the call's tensor arguments in order, when they are all of the
  // node's inputs or the first ones with constants after (Reshape's shape) and the other
  // arguments are their inputs by name (a parameter by its FX name, p_w, so any initializer);
  // else (a node of the call's decomposition) each input that is none of the call's other
  // arguments, not made by the same call, and neither a constant nor an initializer: a value
  // from outside the call that it does not list, which only a detached argument can be.
  absl::StatusOr<std::optional<onnx::NodeProto>> read(const onnx::NodeProto& proto,
                                                      ImportSink& sink);

 private:
  // The hash of the FX node (one per aten call; the nodes of its decomposition share it) that
  // made each value, for the values of nodes read so far.
  std::unordered_map<std::string, size_t> made_by_call_;
};

}  // namespace ampc::onnx_io
