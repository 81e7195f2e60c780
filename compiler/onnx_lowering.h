// ONNX constructs that ampc's IR has no form for, rewritten at import into the ops it has.
//
// - Model-local functions (ModelProto.functions, which exporters use for decompositions) are
//   inlined: each call becomes the function's nodes, with its values renamed under the call
//   and its attribute references resolved against the call's attributes and the function's
//   defaults. This happens on the protos, before any node is imported.
// - CastLike becomes Cast to the target's element type, which the IR always knows statically;
//   Size the constant element count of its input.
// - RMSNormalization and Attention (opset 23), GroupNormalization, InstanceNormalization,
//   ReduceLogSumExp and LpNormalization (compiler/onnx_function_ops.cc), RotaryEmbedding (23)
//   and OneHot (compiler/onnx_encoding_ops.cc) become the ops their definitions are made of;
//   their gradients follow.
// - ConvTranspose becomes ampc.ConvGradData (the input gradient of Conv, which it is;
//   compiler/onnx_conv_transpose.cc), and Resize and Upsample a Gather per tap and axis,
//   weighted and summed (compiler/onnx_resize.cc).
// - Einsum becomes Transposes, Reshapes, strided Slices (diagonals), ReduceSums and one MatMul
//   or Mul per pair of operands (compiler/onnx_einsum.cc).
// - Sequences (SplitToSequence, SequenceAt, SequenceConstruct, SequenceInsert, SequenceErase,
//   SequenceEmpty, SequenceLength, ConcatFromSequence) of a length known at import become the
//   tensors they hold: a sequence is a list of values while the graph is imported, each
//   position a compile-time constant, and only the tensor ops that read them (Split, Squeeze,
//   Unsqueeze, Concat, Identity, Constant) reach the IR.
// - Control flow (compiler/onnx_control_flow.cc): an If becomes the nodes of the branch its
//   condition known at import takes (or both branches and a Where per output when the
//   condition is data), and a Loop its body's nodes once per iteration, as many times as its
//   trip count and conditions say (ampc runs static graphs).
// - Slices whose bounds are data, reduced over the sliced axis (compiler/onnx_ragged.h).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// ---- Model-local functions -----------------------------------------------------------------

// The nodes of `graph` with every call of a function of `model` replaced by the function's
// body, recursively. `opsets` (domain -> version, "" for ai.onnx) is the model's opset_import;
// domains only the functions import are added to it. A function whose opset of a domain differs
// from the model's may be inlined only where each of its ops means the same at both versions;
// otherwise the error names the function, the op and both versions.
absl::StatusOr<std::vector<onnx::NodeProto>> inline_functions(
    const onnx::ModelProto& model, const onnx::GraphProto& graph,
    std::map<std::string, int64_t, std::less<>>& opsets);

// ---- Ops lowered while importing -----------------------------------------------------------

// True for the standard-domain ops ImportLowering rewrites (CastLike, the sequence ops and the
// expanded ops above).
bool lowered_at_import(std::string_view domain, std::string_view op_type);
// (Their names: ops_lowered_at_import in compiler/onnx_io.h.)

class RaggedValues;  // compiler/onnx_ragged.h

// What a lowering sees of the importer.
class ImportSink {
 public:
  virtual ~ImportSink() = default;
  // The tensor value bound to `name`, or null.
  virtual Value* tensor(const std::string& name) = 0;
  // The value of `value` when known at compile time, or null.
  virtual const Tensor* known_value(const Value* value) = 0;
  // Adds a node of `domain` ("" for ai.onnx, or the ampc domain) and binds its outputs to
  // `output_names` (each non-empty).
  virtual absl::StatusOr<std::vector<Value*>> emit_in(std::string_view domain,
                                                      std::string_view op_type,
                                                      std::vector<Value*> operands,
                                                      Attributes attrs,
                                                      const std::vector<std::string>& output_names,
                                                      const std::string& node_name) = 0;
  // The same for a standard-domain node.
  absl::StatusOr<std::vector<Value*>> emit(std::string_view op_type, std::vector<Value*> operands,
                                           Attributes attrs,
                                           const std::vector<std::string>& output_names,
                                           const std::string& node_name) {
    return emit_in("", op_type, std::move(operands), std::move(attrs), output_names, node_name);
  }
  // A value name not used in the model yet, made from `hint`.
  virtual std::string fresh_name(std::string_view hint) = 0;
  // The model's opset of the standard domain.
  virtual int64_t opset() = 0;
  // Leaves `name`, an output of the node being lowered that ampc does not compute, undefined:
  // a node or graph output that reads it fails with `why`.
  virtual void leave_undefined(const std::string& name, std::string why) = 0;
  // Why `name` was left undefined, or null.
  virtual const std::string* why_undefined(const std::string& name) const = 0;
  // Whether `name` is a sequence defined so far.
  virtual bool is_sequence(const std::string& name) const = 0;
  // Imports `proto` as the model's nodes are imported (the nodes of an If's branch or a Loop's
  // body, once their names are those of the outer graph).
  virtual absl::Status import_node(const onnx::NodeProto& proto) = 0;
  // Defines `name` as what `existing` (a tensor or a sequence defined so far) holds: an Identity
  // named `node_name` for a tensor, the same tensors for a sequence.
  virtual absl::Status bind(const std::string& name, const std::string& existing,
                            const std::string& node_name) = 0;
  // The slices with run-time bounds imported so far (compiler/onnx_ragged.h).
  virtual RaggedValues& ragged() = 0;
};

// Whether the known value `value` is computed from a float initializer of the file, which may be
// a trainable parameter (the min of a learned scale, a bias derived from one): a constant folded
// from it would cut its gradient. Walks the known values upstream only, and not past ops that
// read only their operands' shapes (Shape, Size).
bool reads_float_initializer(const Value* value, ImportSink& sink);

// An If whose condition is known at import: the taken branch's nodes in place, its outputs
// bound to the If's. A condition computed at run time: both branches' nodes (renamed under the
// If) and a Where per output, which needs the branches' outputs to have one type (an error
// naming the output otherwise). A branch's initializers become Constant nodes.
absl::Status lower_static_if(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink);

// A Loop whose trip count and conditions are known at import (the trip count from constants or
// shapes; the body's condition output from them and the iteration number), unrolled: the body's
// nodes once per iteration, their values renamed under the Loop and the iteration, the
// iteration number a constant, the loop-carried values (tensors or sequences) threaded from
// each iteration into the next, and each scan output the iterations' values stacked on a new
// first axis. What is decided at run time, or more than kMaxLoopIterations iterations, is an
// error naming the node.
inline constexpr int64_t kMaxLoopIterations = 16384;
absl::Status unroll_static_loop(const onnx::NodeProto& proto, const std::string& label,
                                ImportSink& sink);

// SoftmaxCrossEntropyLoss against class probabilities (float labels shaped like the scores), which
// PyTorch's exporters write for F.cross_entropy with soft targets though ONNX defines the op for
// class indices only: lowered to what PyTorch computes, -sum_c(labels * weight_c *
// LogSoftmax(scores)) over the class axis, then the mean over the rest (or sum, or none). As in
// PyTorch, the gradient reaches the labels too where they depend on trained weights; ONNX has no
// detach(), so soft targets a model detaches are differentiated (freeze a teacher's weights),
// unless the importer found the detach in a dynamo export's metadata (then the labels arrive
// through an Identity that stops the gradient).
// `smoothing` > 0: PyTorch's label_smoothing, which mixes the labels with the uniform
// distribution (labels * (1 - smoothing) + smoothing / C) first.
absl::Status lower_soft_target_cross_entropy(const onnx::NodeProto& proto, const std::string& label,
                                             ImportSink& sink, double smoothing = 0);

// SoftmaxCrossEntropyLoss against class indices with PyTorch's label_smoothing (which the
// dynamo exporter records in the node's metadata and ONNX's op cannot hold;
// compiler/onnx_metadata.h): (1 - smoothing) times the op, plus smoothing / C times the same
// reduction of -sum_c(weight_c * LogSoftmax(scores)_c) over the positions whose target is not
// ignored (a "mean" divided as the op divides: by the summed weights of the kept targets'
// classes), as PyTorch's cross_entropy computes it.
absl::Status lower_label_smoothed_cross_entropy(const onnx::NodeProto& proto,
                                                const std::string& label, ImportSink& sink,
                                                double smoothing);

// The forms ops had at old opsets that ampc lowers at import to what its definitions of those
// opsets hold (compiler/onnx_legacy_ops.cc): Softmax and LogSoftmax before 13, BatchNormalization
// at opsets 9 to 13 and Dropout at 7 to 11 (whose training mode the file marks by outputs).
// Whether `op_type` of the standard domain is one at `opset`:
bool legacy_form_lowered(std::string_view op_type, int64_t opset);
absl::Status lower_legacy_form(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink);

// Lowers the ops above in one graph, node by node, in order; holds the graph's sequences.
class ImportLowering {
 public:
  // Lowers `proto` (for which lowered_at_import holds); `label` names it in errors.
  absl::Status lower(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

  // Whether `name` is a sequence defined so far, and which node defined it (for messages).
  bool is_sequence(const std::string& name) const { return sequences_.contains(name); }
  const std::string& defined_by(const std::string& name) const {
    return sequences_.at(name).definer;
  }
  // Defines the sequence `name` as the one `existing` names (ImportSink::bind).
  absl::Status alias(const std::string& name, const std::string& existing,
                     const std::string& label);

 private:
  struct Sequence {
    std::vector<Value*> tensors;
    DType dtype = DType::kF32;
    std::string definer;
  };

  absl::StatusOr<const Sequence*> sequence(const onnx::NodeProto& proto, int input,
                                           const std::string& label) const;
  absl::Status define(const onnx::NodeProto& proto, Sequence sequence, const std::string& label);
  // lower() for the sequence ops (compiler/onnx_sequence_ops.cc).
  absl::Status lower_sequence(const onnx::NodeProto& proto, const std::string& label,
                              ImportSink& sink);

  std::map<std::string, Sequence, std::less<>> sequences_;
};

}  // namespace ampc::onnx_io
