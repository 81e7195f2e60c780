// ConvTranspose and Col2Im, lowered at import onto ampc.ConvGradData, so every backend runs them
// and autodiff differentiates them with no new kernels.
//
// ConvTranspose(X, W) is the gradient of a convolution with respect to its input, with X in the
// place of dY: ampc.ConvGradData(X, W) gives the full transposed convolution cropped by the
// pads, and a Pad adds what lies beyond it (zeros, from output_padding or negative pads). W's
// layout [C, M / group, k...] is the one ConvGradData reads.

#include <algorithm>
#include <optional>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

absl::Status lower_conv_transpose(const onnx::NodeProto& proto, const std::string& label,
                                  ImportSink& sink) {
  using onnx::AttributeProto;
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"auto_pad", AttributeProto::STRING},
                                         {"dilations", AttributeProto::INTS},
                                         {"group", AttributeProto::INT},
                                         {"kernel_shape", AttributeProto::INTS},
                                         {"output_padding", AttributeProto::INTS},
                                         {"output_shape", AttributeProto::INTS},
                                         {"pads", AttributeProto::INTS},
                                         {"strides", AttributeProto::INTS}}));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; ConvTranspose has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * w, tensor_input(proto, 1, label, sink));
  if (!is_arithmetic_float(x->dtype()) || w->dtype() != x->dtype()) {
    return invalid(str_cat(label, ": X is ", dtype_name(x->dtype()), " and W ",
                           dtype_name(w->dtype()), "; both must be the same float type"));
  }
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  if (xs.size() < 3 || xs.size() > 5 || ws.size() != xs.size()) {
    return invalid(str_cat(label, ": X ", shape_to_string(xs), " and W ", shape_to_string(ws),
                           " must be N x C x D1 ... Dn and C x M/group x k1 ... kn, n in 1..3"));
  }
  const size_t n = xs.size() - 2;
  const int64_t group = attrs.i("group", 1);
  if (group < 1 || xs[1] % group != 0 || ws[0] != xs[1]) {
    return invalid(str_cat(label, ": W ", shape_to_string(ws), " does not fit X ",
                           shape_to_string(xs), " with group ", group,
                           " (W's first dim must be X's channels, a multiple of group)"));
  }
  const std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (auto it = attrs.int_lists.find("kernel_shape");
      it != attrs.int_lists.end() && it->second != kernel) {
    return invalid(str_cat(label, ": kernel_shape ", shape_to_string(it->second),
                           " differs from W's spatial dims ", shape_to_string(kernel)));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> strides, per_axis(attrs, "strides", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> dilations,
                        per_axis(attrs, "dilations", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> output_padding,
                        per_axis(attrs, "output_padding", n, 0, 0, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_axis(attrs, "pads", 2 * n, 0, 0, label));
  const std::string auto_pad = attrs.s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" &&
      auto_pad != "VALID") {
    return invalid(str_cat(label, ": auto_pad '", auto_pad,
                           "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
  }
  std::optional<std::vector<int64_t>> output_shape;
  if (auto it = attrs.int_lists.find("output_shape"); it != attrs.int_lists.end()) {
    if (it->second.size() != n && it->second.size() != n + 2) {
      return invalid(str_cat(label, ": output_shape ", shape_to_string(it->second), " has neither ",
                             n, " (spatial) nor ", n + 2, " values"));
    }
    output_shape.emplace(it->second.end() - static_cast<int64_t>(n), it->second.end());
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    output_shape.emplace(n);
    for (size_t i = 0; i < n; ++i) (*output_shape)[i] = xs[i + 2] * strides[i];
  }

  // Per axis: the full transposed convolution's extent, the pads that crop it, and the output.
  std::vector<int64_t> crop(2 * n), extra(2 * n);
  Shape conv_shape = {xs[0], ws[1] * group};
  Shape out_shape = conv_shape;
  bool needs_pad = false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t full = strides[i] * (xs[i + 2] - 1) + extent;
    int64_t begin = pads[i], end = pads[i + n];
    if (output_shape) {
      // ONNX's rule: the total padding splits in halves, the odd one at the end for SAME_UPPER
      // and at the beginning otherwise.
      const int64_t total = full + output_padding[i] - (*output_shape)[i];
      const int64_t half = floor_div(total, 2);
      begin = auto_pad == "SAME_UPPER" ? half : total - half;
      end = total - begin;
    } else if (auto_pad == "VALID") {
      begin = end = 0;
    }
    const int64_t out = full + output_padding[i] - begin - end;
    if (out < 1) {
      return invalid(str_cat(label, ": spatial axis ", i, " has no output (extent ", full,
                             ", output_padding ", output_padding[i], ", pads ", begin, " and ", end,
                             ")"));
    }
    // ConvGradData computes [max(begin, 0), full - max(end, 0)) plus up to stride - 1 trailing
    // positions no input reaches (zeros); a Pad adds any more.
    crop[i] = std::max<int64_t>(begin, 0);
    crop[i + n] = std::max<int64_t>(end, 0);
    const int64_t computed = full - crop[i] - crop[i + n];
    if (computed < 1) {
      return invalid(str_cat(label, ": pads ", begin, " and ", end, " crop all ", full,
                             " positions of spatial axis ", i));
    }
    extra[i] = std::max<int64_t>(-begin, 0);
    extra[i + n] = out - computed - extra[i];
    if (extra[i] == 0 && extra[i + n] < strides[i]) {
      conv_shape.push_back(computed + extra[i + n]);
      extra[i + n] = 0;
    } else {
      conv_shape.push_back(computed);
      needs_pad = true;
    }
    out_shape.push_back(out);
  }

  Emitter e(proto, label, sink);
  const bool has_bias = has_input(proto, 2);
  Value* bias = nullptr;
  if (has_bias) {
    AMPC_ASSIGN_OR_RETURN(bias, tensor_input(proto, 2, label, sink));
    if (bias->dtype() != x->dtype() || bias->shape() != Shape{out_shape[1]}) {
      return invalid(str_cat(label, ": B is ", dtype_name(bias->dtype()), " ",
                             shape_to_string(bias->shape()), "; it must be ",
                             dtype_name(x->dtype()), " [", out_shape[1], "]"));
    }
  }
  if (e.output(0).empty()) return absl::OkStatus();
  Attributes conv = {{"input_shape", AttrValue(conv_shape)},
                     {"group", AttrValue(group)},
                     {"strides", AttrValue(strides)},
                     {"pads", AttrValue(crop)},
                     {"dilations", AttrValue(dilations)}};
  const bool last_is_conv = !needs_pad && !has_bias;
  AMPC_ASSIGN_OR_RETURN(
      Value * y, e.ampc_op("ConvGradData", {x, w}, std::move(conv), last_is_conv ? e.output(0) : "",
                           last_is_conv ? proto.name() : ""));
  if (needs_pad) {
    std::vector<int64_t> pad_all(2 * (n + 2), 0);
    for (size_t i = 0; i < n; ++i) {
      pad_all[i + 2] = extra[i];
      pad_all[i + 2 + n + 2] = extra[i + n];
    }
    AMPC_ASSIGN_OR_RETURN(y, e.pad(y, std::move(pad_all), has_bias ? "" : e.output(0)));
  }
  if (has_bias) {
    Shape per_channel(n + 1, 1);
    per_channel[0] = out_shape[1];
    AMPC_ASSIGN_OR_RETURN(Value * b, e.reshape(bias, per_channel));
    AMPC_RETURN_IF_ERROR(e.op("Add", {y, b}, {}, e.output(0)).status());
  }
  return absl::OkStatus();
}

// ---- Col2Im ----------------------------------------------------------------------------------

// Col2Im (opset 18; PyTorch's nn.Fold) is the adjoint of Im2Col (nn.Unfold), and Im2Col is a
// convolution whose weight picks one block position per output channel: column channel c * K + k
// (K the block's positions, row-major) reads channel c at block position k. So Col2Im is that
// convolution's input gradient, ampc.ConvGradData with group C and the one-hot weight: each image
// position gets the sum of the column entries that read it. image_shape and block_shape must be
// known at compile time, as in exported models.
absl::Status lower_col2im(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  using onnx::AttributeProto;
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(proto, label,
                                                              {{"dilations", AttributeProto::INTS},
                                                               {"pads", AttributeProto::INTS},
                                                               {"strides", AttributeProto::INTS}}));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; Col2Im has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  std::vector<std::vector<int64_t>> shapes;
  for (int i : {1, 2}) {
    AMPC_ASSIGN_OR_RETURN(std::vector<double> known, known_floats(proto, i, label, sink));
    std::vector<int64_t> values;
    for (double v : known) values.push_back(static_cast<int64_t>(v));
    shapes.push_back(std::move(values));
  }
  const std::vector<int64_t>& image = shapes[0];
  const std::vector<int64_t>& block = shapes[1];
  const size_t n = image.size();
  if (n == 0 || block.size() != n) {
    return invalid(str_cat(label, ": image_shape ", shape_to_string(image), " and block_shape ",
                           shape_to_string(block), " must have one value per spatial axis"));
  }
  int64_t block_size = 1;
  for (size_t i = 0; i < n; ++i) {
    if (image[i] < 1 || block[i] < 1) {
      return invalid(str_cat(label, ": image_shape ", shape_to_string(image), " and block_shape ",
                             shape_to_string(block), " must be positive"));
    }
    block_size *= block[i];
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> strides, per_axis(attrs, "strides", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> dilations,
                        per_axis(attrs, "dilations", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_axis(attrs, "pads", 2 * n, 0, 0, label));
  const Shape& xs = x->shape();
  if (!is_arithmetic_float(x->dtype())) {
    return invalid(
        str_cat(label, ": input is ", dtype_name(x->dtype()), "; it must be a float type"));
  }
  // The blocks along each axis, and the column layout they make.
  Shape blocks;
  int64_t block_count = 1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t reach = image[i] + pads[i] + pads[i + n] - dilations[i] * (block[i] - 1) - 1;
    if (reach < 0) {
      return invalid(str_cat(label, ": block ", block[i], " (dilation ", dilations[i],
                             ") does not fit image axis ", i, " of ", image[i], " with pads ",
                             pads[i], " and ", pads[i + n]));
    }
    blocks.push_back(reach / strides[i] + 1);
    block_count *= blocks.back();
  }
  if (xs.size() != 3 || xs[1] % block_size != 0 || xs[2] != block_count) {
    return invalid(str_cat(label, ": input is ", shape_to_string(xs), "; for image ",
                           shape_to_string(image), " and block ", shape_to_string(block),
                           " it must be [N, C * ", block_size, ", ", block_count, "]"));
  }
  const int64_t channels = xs[1] / block_size;

  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  Shape columns = {xs[0], xs[1]};
  columns.insert(columns.end(), blocks.begin(), blocks.end());
  AMPC_ASSIGN_OR_RETURN(Value * cols, e.reshape(x, columns));
  Shape weight_shape = {xs[1], 1};
  weight_shape.insert(weight_shape.end(), block.begin(), block.end());
  std::vector<double> one_hot(static_cast<size_t>(xs[1] * block_size), 0.0);
  for (int64_t m = 0; m < xs[1]; ++m) one_hot[m * block_size + m % block_size] = 1.0;
  AMPC_ASSIGN_OR_RETURN(Value * w,
                        e.constant(Tensor::from_doubles(x->dtype(), weight_shape, one_hot)));
  Shape out_shape = {xs[0], channels};
  out_shape.insert(out_shape.end(), image.begin(), image.end());
  Attributes conv = {{"input_shape", AttrValue(out_shape)},
                     {"group", AttrValue(channels)},
                     {"strides", AttrValue(strides)},
                     {"pads", AttrValue(pads)},
                     {"dilations", AttrValue(dilations)}};
  return e.ampc_op("ConvGradData", {cols, w}, std::move(conv), e.output(0), proto.name()).status();
}

}  // namespace ampc::onnx_io::lowering
