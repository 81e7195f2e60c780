// ONNX's metadata_props (key/value strings) on graphs and nodes, and what ampc and PyTorch's
// exporter record there (internal to compiler/onnx_*.cc).
//
// ONNX 1.16 added metadata_props to GraphProto (field 16) and NodeProto (field 9); the ONNX
// protobuf ampc builds against may predate them, in which case protobuf keeps them as unknown
// fields. These functions read and write both forms.
//
// What is read there:
// - `ampc.<attribute>` on a node: an ampc extension attribute of an ONNX op (AttrSpec::extension),
//   which ONNX's attribute list cannot hold (the checker refuses attributes an op does not define).
// - PyTorch's dynamo exporter (torch.onnx.export(..., dynamo=True)) records the exported
//   program's graph signature on the graph (`pkg.torch.export.ExportedProgram.graph_signature`:
//   each initializer a PARAMETER, BUFFER or CONSTANT_TENSOR) and each node's FX node
//   (`pkg.torch.onnx.fx_node`: the aten call it came from, with its arguments), from which what
//   the node's ONNX form lost is recovered.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/ir.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

using MetadataProps = std::vector<std::pair<std::string, std::string>>;

MetadataProps metadata_props(const onnx::NodeProto& node);
MetadataProps metadata_props(const onnx::GraphProto& graph);
void add_metadata_prop(onnx::NodeProto& node, std::string_view key, std::string_view value);

// The key under which an extension attribute `name` travels on a node.
std::string extension_attr_key(std::string_view name);
// `text` as a whole decimal integer, or nullopt.
std::optional<int64_t> parse_int64(std::string_view text);

// What a PyTorch graph signature on `graph` declares each initializer, by name: PARAMETER, or
// BUFFER and CONSTANT_TENSOR (register_buffer: a rotary frequency table, a fixed bias; tensors
// the program captured), which PyTorch does not train. Empty when the graph has no signature.
std::unordered_map<std::string, Value::Declared> torch_signature(const onnx::GraphProto& graph);
// The same signature's buffer mutations, in order: (the value holding the new value, the
// buffer's name), from its outputs ("add_1: BUFFER_MUTATION target='ema'").
std::vector<std::pair<std::string, std::string>> torch_buffer_mutations(
    const onnx::GraphProto& graph);
// The same signature's parameters and buffers by their FX names (p_w, b_table, as a node's FX
// node names its arguments) -> their names (w, table).
std::unordered_map<std::string, std::string> torch_names_by_fx_name(const onnx::GraphProto& graph);

// The parameters a PyTorch graph signature declares and its nodes' FX nodes read that the file
// holds neither as themselves nor in another form: what the dynamo exporter's optimizer
// (optimize=True) removed or folded into uniform constants (a Linear's zero bias it drops from
// the Gemm; GroupNorm's ones and zeros at opset 18). They do not train. The importer records
// them as this graph metadata (compiler/onnx_graph_import.cc), the training-step pass warns.
inline constexpr char kMissingParametersKey[] = "ampc.missing_parameters";

// The producer_name of the ONNX file a graph was imported from ("pytorch" for both of PyTorch's
// exporters; often empty in files written by hand), for the passes that undo what one exporter
// does (tie-folded-weights). Absent in graphs that were not imported (the text IR).
inline constexpr char kSourceProducerKey[] = "ampc.source_producer";

// The attributes PyTorch's dynamo exporter recorded of a node (its FX node, in the node's
// metadata) that the node's ONNX form lost:
// - Gather made from aten.embedding: `padding_idx` (the row that gets no gradient) when >= 0,
//   and `scale_grad_by_freq` = 1 when set (extension attributes, AttrSpec::extension);
// - BatchNormalization made from a batch norm that ran in training mode (the dynamo exporter
//   writes the inference form, normalizing by the running statistics, for
//   aten._native_batch_norm_legit_functional with training=True): `training_mode` = 1;
// - Identity made from aten.detach (an export with optimize=False): `stop_gradient` = 1;
// - ReduceMax or ReduceMin made from aten.max.dim or aten.min.dim: `gradient_to_first` = 1 (the
//   gradient goes to the first extremal element, whose index they return, not to every tie).
// Empty for other nodes, and for files without the metadata (TorchScript exports).
std::map<std::string, int64_t> torch_recorded_attrs(const onnx::NodeProto& node);

// Whether `node` was made from a batch norm that ran in training mode (its FX node). A node of
// another op that says so, where no BatchNormalization does, is what remains of a batch norm
// the dynamo exporter's optimizer folded away, with its running statistics, into the
// convolution before it: an inference model (compiler/onnx_optimizer_folds.h finds such nodes,
// the importer records them as the graph metadata kFoldedBatchNormsKey, and the training-step
// pass warns of them).
bool torch_training_batch_norm(const onnx::NodeProto& node);
inline constexpr char kFoldedBatchNormsKey[] = "ampc.folded_batch_norms";

// Initializer names that a node's output in the file redefines (PyTorch's dynamo exporter with
// optimize=False names a buffer and an aten call's output alike: a buffer `index` and
// aten.index): the importer reads them in node order, nodes after the output reading the output
// (under a fresh name), and records the names as this graph metadata; the training-step pass
// warns of them.
inline constexpr char kShadowedNamesKey[] = "ampc.shadowed_names";

// The FX node PyTorch's dynamo exporter recorded on `node` (`pkg.torch.onnx.fx_node`: "%exp :
// [num_users=1] = call_function[target=torch.ops.aten.exp.default](args = (%linear,), kwargs =
// {})"), or nullopt (TorchScript exports, other files).
std::optional<std::string> torch_fx_node(const onnx::NodeProto& node);

// The aten op an FX node `fx` calls ("layer_norm" for torch.ops.aten.layer_norm.default), or empty
// when it records no aten call.
std::string torch_fx_op(const std::string& fx);

// The names of the tensor arguments (`%name`, in order, without the `%`) of the aten call an FX
// node `fx` records; empty when it records none.
std::vector<std::string> torch_tensor_args(const std::string& fx);

// For an FX node `fx` whose aten call reads a detach() the exporter's optimizer removed (the
// argument is `%detach` or `%detach_N`, while the ONNX node reads the value the detach() took):
// per tensor argument of the call (torch_tensor_args), the detach's name ("detach_2") for a
// detached one, else empty. Empty when no argument is a detach.
std::vector<std::string> torch_detached_tensor_args(const std::string& fx);

// For a SoftmaxCrossEntropyLoss PyTorch's dynamo exporter made from cross_entropy with
// label_smoothing > 0 (which ONNX's op cannot hold, and the exporter drops): the smoothing;
// else 0.
double torch_label_smoothing(const onnx::NodeProto& node);

}  // namespace ampc::onnx_io
