// DepthToSpace (PyTorch's pixel_shuffle) and SpaceToDepth (pixel_unshuffle), expanded at import
// into the Reshape, Transpose, Reshape ONNX defines them with, so that every backend runs them and
// autodiff differentiates them with no new kernels. The input's shape is static, as everywhere in
// ampc.
#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {

absl::Status lower_depth_space(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink) {
  const bool to_space = proto.op_type() == "DepthToSpace";
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"blocksize", onnx::AttributeProto::INT},
                                         {"mode", onnx::AttributeProto::STRING}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  const Shape& shape = x->shape();
  if (shape.size() != 4) {
    return invalid(str_cat(label, ": input is ", shape_to_string(shape),
                           "; it must be of rank 4 [N, C, H, W]"));
  }
  const int64_t b = attrs.i("blocksize", 0);
  if (b < 1) return invalid(str_cat(label, ": blocksize is ", b, "; it must be >= 1"));
  const std::string mode = attrs.s("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") {
    return invalid(str_cat(label, ": mode is \"", mode, "\"; it must be \"DCR\" or \"CRD\""));
  }
  // SpaceToDepth takes `mode` from opset 28; before, its order is DCR's.
  if (!to_space && attrs.has("mode") && sink.opset() < 28) {
    return invalid(str_cat(label,
                           ": SpaceToDepth has attribute 'mode' from opset 28; the model "
                           "imports opset ",
                           sink.opset()));
  }
  const int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  Shape split, joined;
  std::vector<int64_t> perm;
  if (to_space) {
    if (c % (b * b) != 0) {
      return invalid(str_cat(label, ": the input's ", c,
                             " channels are not a multiple of "
                             "blocksize squared (",
                             b * b, ")"));
    }
    const int64_t depth = c / (b * b);
    if (mode == "DCR") {
      split = {n, b, b, depth, h, w};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      split = {n, depth, b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    }
    joined = {n, depth, h * b, w * b};
  } else {
    if (h % b != 0 || w % b != 0) {
      return invalid(str_cat(label, ": the input's height ", h, " and width ", w,
                             " are not multiples of blocksize ", b));
    }
    // Inverse to DepthToSpace's: DCR puts the block's offsets outside the channels, CRD inside.
    split = {n, c, h / b, b, w / b, b};
    perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 5, 1, 2, 4}
                         : std::vector<int64_t>{0, 1, 3, 5, 2, 4};
    joined = {n, c * b * b, h / b, w / b};
  }
  AMPC_ASSIGN_OR_RETURN(Value * blocks, e.reshape(x, split));
  AMPC_ASSIGN_OR_RETURN(Value * moved, e.transpose(blocks, perm));
  AMPC_ASSIGN_OR_RETURN(Value * target, e.constant(Tensor::from_i64({4}, joined)));
  return e.op("Reshape", {moved, target}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering
