// An ONNX node's op and attributes in ampc's terms, for import: the OpDef of its op at the
// model's opset, or an error that says at which opsets ampc has the op or which supported ops
// are nearest its name; and its attributes, checked against the op's AttrSpecs.
#pragma once

#include <string>
#include <string_view>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "compiler/op_def.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// "ai.onnx" for the default domain (""), else `domain`.
std::string domain_label(std::string_view domain);

// The OpDef of `proto`'s op in `domain` ("" for ai.onnx) at `graph`'s opset of that domain;
// errors name the node by `label`.
absl::StatusOr<const OpDef*> find_op_def(const onnx::NodeProto& proto, const std::string& domain,
                                         const Graph& graph, const std::string& label);

// For an op ONNX introduced after opset 17 found in a model of an older opset, why the file is
// inconsistent and how it comes about (PyTorch's exporter leaves its graph at opset 18 when
// ONNX's version converter cannot bring it to the opset_version asked for); "" otherwise.
std::string opset_mismatch_hint(std::string_view op_type, int64_t model_opset);

// The attributes of `proto`, an instance of `def` at `opset`, checked against the op's
// AttrSpecs (types, unknown or repeated names, required ones), with what the node's metadata
// adds: what PyTorch's dynamo exporter recorded of the call and the ONNX form lost (an
// embedding's padding_idx, a batch norm's training mode) and ampc's own `ampc.<name>` entries
// for the op's extension attributes. A tensor's external data is read relative to `base_dir`;
// errors name the node by `label`.
absl::StatusOr<Attributes> node_attrs(const onnx::NodeProto& proto, const OpDef& def, int64_t opset,
                                      const std::string& base_dir, const std::string& label);

}  // namespace ampc::onnx_io
