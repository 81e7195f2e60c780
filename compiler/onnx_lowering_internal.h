// What the import-time lowerings (compiler/onnx_lowering*.cc) share.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/onnx_common.h"
#include "compiler/onnx_lowering.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {

// Input `i` of `proto` as a tensor; an error naming the node when missing or not a tensor.
absl::StatusOr<Value*> tensor_input(const onnx::NodeProto& proto, int i, const std::string& label,
                                    ImportSink& sink);
bool has_input(const onnx::NodeProto& proto, int i);
// The node's int attributes, each known to the op (`known`: name and default; nullopt when the
// attribute is required); an error naming the attribute otherwise.
absl::StatusOr<std::map<std::string, int64_t, std::less<>>> int_attributes(
    const onnx::NodeProto& proto, const std::string& label,
    const std::vector<std::pair<std::string, std::optional<int64_t>>>& known);
// Input `i` of `proto` as doubles; an error naming it when it is not known at compile time.
absl::StatusOr<std::vector<double>> known_floats(const onnx::NodeProto& proto, int i,
                                                 const std::string& label, ImportSink& sink);

// A node's int, float, ints and string attributes, each checked against the op's (`known`: name ->
// type).
struct NodeAttributes {
  std::map<std::string, int64_t, std::less<>> ints;
  std::map<std::string, float, std::less<>> floats;
  std::map<std::string, std::vector<int64_t>, std::less<>> int_lists;
  std::map<std::string, std::string, std::less<>> strings;
  int64_t i(std::string_view name, int64_t fallback) const;
  float f(std::string_view name, float fallback) const;
  std::string s(std::string_view name, std::string_view fallback) const;
  bool has(std::string_view name) const {
    return ints.contains(name) || floats.contains(name) || int_lists.contains(name) ||
           strings.contains(name);
  }
};
absl::StatusOr<NodeAttributes> read_attributes(
    const onnx::NodeProto& proto, const std::string& label,
    const std::map<std::string, onnx::AttributeProto::AttributeType, std::less<>>& known);

// An element type attribute (`dtype`, `output_datatype`) holding ONNX's `code`; an error naming
// `what` when ampc has no such type.
absl::StatusOr<DType> element_type_attr(int64_t code, const std::string& what);

// The same for a float type (RMSNormalization's stash_type, Attention's softmax_precision).
absl::StatusOr<DType> float_type_attr(int64_t code, const std::string& what);

// An INTS attribute with one value per spatial axis (`count`), each >= `min`, or `fill` for each
// when absent; an error naming the attribute otherwise.
absl::StatusOr<std::vector<int64_t>> per_axis(const NodeAttributes& attrs, std::string_view name,
                                              size_t count, int64_t fill, int64_t min,
                                              const std::string& label);

// Emits nodes for one lowered node: names its intermediate values after the node.
class Emitter {
 public:
  Emitter(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink)
      : proto_(proto), label_(label), sink_(sink) {
    hint_ = proto.name().empty() ? (proto.output_size() > 0 ? proto.output(0) : proto.op_type())
                                 : proto.name();
  }

  // A node with one output; `output` names it, or a fresh name is made.
  absl::StatusOr<Value*> op(std::string_view op_type, std::vector<Value*> operands,
                            Attributes attrs = {}, std::string output = "") {
    return op_in("", op_type, std::move(operands), std::move(attrs), std::move(output));
  }

  // The same for an op of the ampc domain; `node_name`, when given, names the node (a lowering
  // to one node keeps the node's name, so an export that writes it back re-imports the same).
  absl::StatusOr<Value*> ampc_op(std::string_view op_type, std::vector<Value*> operands,
                                 Attributes attrs = {}, std::string output = "",
                                 std::string node_name = "") {
    return op_in(kAmpcDomain, op_type, std::move(operands), std::move(attrs), std::move(output),
                 std::move(node_name));
  }

  absl::StatusOr<Value*> constant(Tensor value) {
    return op("Constant", {}, {{"value", AttrValue(std::move(value))}});
  }

  absl::StatusOr<Value*> scalar(double value, DType dtype) {
    return constant(Tensor::from_doubles(dtype, {}, {value}));
  }

  absl::StatusOr<Value*> cast(Value* value, DType to) {
    if (value->dtype() == to) return value;
    return op("Cast", {value}, {{"to", AttrValue(to)}});
  }

  absl::StatusOr<Value*> reshape(Value* value, const Shape& shape, std::string output = "") {
    AMPC_ASSIGN_OR_RETURN(Value * target,
                          constant(Tensor::from_i64({static_cast<int64_t>(shape.size())}, shape)));
    return op("Reshape", {value, target}, {}, std::move(output));
  }

  absl::StatusOr<Value*> transpose(Value* value, std::vector<int64_t> perm) {
    return op("Transpose", {value}, {{"perm", AttrValue(std::move(perm))}});
  }

  // `value` padded with zeros by `pads` (ONNX's order: each axis' begin, then each axis' end).
  // Pad takes its pads as an input from opset 11, as an attribute before.
  absl::StatusOr<Value*> pad(Value* value, std::vector<int64_t> pads, std::string output = "") {
    if (sink_.opset() < 11) {
      return op("Pad", {value}, {{"pads", AttrValue(std::move(pads))}}, std::move(output));
    }
    AMPC_ASSIGN_OR_RETURN(Value * amounts,
                          constant(Tensor::from_i64({static_cast<int64_t>(pads.size())}, pads)));
    return op("Pad", {value, amounts}, {}, std::move(output));
  }

  // The name of output `i` of the lowered node, or "" when it is not asked for.
  std::string output(int i) const {
    return i < proto_.output_size() ? proto_.output(i) : std::string();
  }

  const std::string& label() const { return label_; }

  // Nodes emitted from now on are kept fp32 by autocast, for `why` (Node::fp32_pin); "" stops.
  void pin_fp32(std::string why) { pin_ = std::move(why); }

 private:
  absl::StatusOr<Value*> op_in(std::string_view domain, std::string_view op_type,
                               std::vector<Value*> operands, Attributes attrs, std::string output,
                               std::string node_name = "") {
    if (output.empty()) output = sink_.fresh_name(str_cat(hint_, "/", op_type));
    ++count_;
    if (node_name.empty()) node_name = str_cat(hint_, "/", op_type, "_", count_);
    AMPC_ASSIGN_OR_RETURN(
        std::vector<Value*> outputs,
        sink_.emit_in(domain, op_type, std::move(operands), std::move(attrs), {output}, node_name));
    if (!pin_.empty() && outputs.at(0)->producer() != nullptr) {
      outputs.at(0)->producer()->set_fp32_pin(pin_);
    }
    return outputs.at(0);
  }

  const onnx::NodeProto& proto_;
  const std::string& label_;
  ImportSink& sink_;
  std::string hint_;
  std::string pin_;
  int count_ = 0;
};

// Positions 0 .. n-1 along axis `axis` of a rank-`rank` value (1 on every other axis), as i64.
absl::StatusOr<Value*> positions(Emitter& e, int64_t n, size_t axis, size_t rank);

// Sum, Mean, Shrink, ThresholdedRelu, Hardmax, GlobalMaxPool, LRN, EyeLike, MaxUnpool,
// ReverseSequence, Swish and SwiGLU, and CumProd (compiler/onnx_composite_ops.cc).
absl::Status lower_sum_or_mean(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink);
absl::Status lower_shrink(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);
absl::Status lower_thresholded_relu(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink);
absl::Status lower_hardmax(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink);
absl::Status lower_global_max_pool(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink);
absl::Status lower_lrn(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);
absl::Status lower_eye_like(const onnx::NodeProto& proto, const std::string& label,
                            ImportSink& sink);
absl::Status lower_max_unpool(const onnx::NodeProto& proto, const std::string& label,
                              ImportSink& sink);
absl::Status lower_reverse_sequence(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink);
absl::Status lower_swish(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);
absl::Status lower_cum_prod(const onnx::NodeProto& proto, const std::string& label,
                            ImportSink& sink);

// DFT, STFT, MelWeightMatrix and HannWindow, HammingWindow, BlackmanWindow
// (compiler/onnx_spectral_ops.cc).
absl::Status lower_dft(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);
absl::Status lower_stft(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);
absl::Status lower_mel_weight_matrix(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink);
absl::Status lower_window(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// Ops expanded into the ops they are defined by (compiler/onnx_function_ops.cc; Attention in
// compiler/onnx_attention.cc).
absl::Status lower_attention(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink);
absl::Status lower_rms_normalization(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink);
absl::Status lower_instance_normalization(const onnx::NodeProto& proto, const std::string& label,
                                          ImportSink& sink);
absl::Status lower_group_normalization(const onnx::NodeProto& proto, const std::string& label,
                                       ImportSink& sink);

// ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum; ReduceMin and ReduceProd; ReduceLogSumExp;
// TopK (compiler/onnx_reduce_ops.cc).
absl::Status lower_reduce_via_sum(const onnx::NodeProto& proto, const std::string& label,
                                  ImportSink& sink);
absl::Status lower_reduce_min_or_prod(const onnx::NodeProto& proto, const std::string& label,
                                      ImportSink& sink);
absl::Status lower_reduce_log_sum_exp(const onnx::NodeProto& proto, const std::string& label,
                                      ImportSink& sink);
absl::Status lower_top_k(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// DepthToSpace and SpaceToDepth (compiler/onnx_layout_ops.cc); Sign
// (compiler/onnx_function_ops.cc).
absl::Status lower_depth_space(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink);
absl::Status lower_sign(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// LSTM, GRU and RNN, unrolled over the sequence (compiler/onnx_recurrent_ops.cc).
absl::Status lower_recurrent(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink);

// ConvTranspose and Col2Im (compiler/onnx_conv_transpose.cc).
absl::Status lower_conv_transpose(const onnx::NodeProto& proto, const std::string& label,
                                  ImportSink& sink);
absl::Status lower_col2im(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// Resize and Upsample (compiler/onnx_resize.cc).
absl::Status lower_resize(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// GridSample (opsets 16 and 20; compiler/onnx_grid_sample.cc): Gathers of X at indices computed
// from the grid, weighted and summed; the coordinate arithmetic pinned fp32.
absl::Status lower_grid_sample(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink);

// LpNormalization (compiler/onnx_function_ops.cc), OneHot and RotaryEmbedding
// (compiler/onnx_encoding_ops.cc).
absl::Status lower_one_hot(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink);
absl::Status lower_lp_normalization(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink);
absl::Status lower_rotary_embedding(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink);

// Einsum (opset 12) as Transpose, Reshape, Slice, ReduceSum, Mul and MatMul
// (compiler/onnx_einsum.cc).
absl::Status lower_einsum(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

}  // namespace ampc::onnx_io::lowering
