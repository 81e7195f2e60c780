// ConvTranspose, Col2Im, Resize and Upsample, lowered at import onto ops ampc already has, so every
// backend runs them and autodiff differentiates them with no new kernels.
//
// ConvTranspose(X, W) is the gradient of a convolution with respect to its input, with X in the
// place of dY: ampc.ConvGradData(X, W) gives the full transposed convolution cropped by the
// pads, and a Pad adds what lies beyond it (zeros, from output_padding or negative pads). W's
// layout [C, M / group, k...] is the one ConvGradData reads.
//
// Resize is separable: each resized axis maps output position o to a few input positions
// ("taps") along that axis, with weights that depend only on o. Axes are resized one at a
// time, from the last to the first (the order of ONNX's reference and of PyTorch's
// interpolation kernels); each is a Gather per tap, then taps weighted with Mul and summed with
// Add. Nearest is one tap of weight 1: a Gather, moving data exactly. Indices and weights are
// computed here in f64 from ONNX's coordinate rules, and weights rounded once to X's type.
// Taps of one output that clamp to the same input position are merged, so edges read the edge
// value times 1.
#include <algorithm>
#include <cmath>
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

// ---- Resize ----------------------------------------------------------------------------------

namespace {

enum class Interpolation { kNearest, kLinear, kCubic };

struct ResizeRule {
  Interpolation mode = Interpolation::kNearest;
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
};

// The taps of one axis: for slot k, the input position and weight of each output position.
struct AxisTaps {
  std::vector<std::vector<int64_t>> index;
  std::vector<std::vector<double>> weight;
};

// The input coordinate output position `o` maps to (ONNX's coordinate_transformation_mode).
// `length` is the resized length before rounding: in * scale when scales are given (so
// align_corners with a scale of 0.6 on 4 positions divides by 1.4), the size when sizes are.
double source_coordinate(const ResizeRule& rule, double o, int64_t in, int64_t out, double scale,
                         double length) {
  const std::string& c = rule.coordinates;
  if (c == "half_pixel") return (o + 0.5) / scale - 0.5;
  if (c == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out) / (scale * static_cast<double>(in));
    const double offset = static_cast<double>(in) / 2 * (1 - adjustment);
    return offset + (o + 0.5) / scale - 0.5;
  }
  if (c == "pytorch_half_pixel") return length > 1 ? (o + 0.5) / scale - 0.5 : 0;
  if (c == "align_corners") {
    return length == 1 ? 0 : o * static_cast<double>(in - 1) / (length - 1);
  }
  if (c == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
  return o / scale;  // asymmetric
}

int64_t nearest_index(const std::string& mode, double x, double scale) {
  const double lower = std::floor(x);
  const double fraction = x - lower;
  double picked = 0;
  if (mode == "floor") {
    picked = lower;
  } else if (mode == "ceil") {
    picked = std::ceil(x);
  } else if (mode == "round_prefer_ceil") {
    picked = fraction >= 0.5 ? lower + 1 : lower;
  } else if (mode == "simple") {  // Upsample and Resize-10: down when enlarging, up otherwise
    picked = scale >= 1 ? lower : std::ceil(x);
  } else {  // round_prefer_floor
    picked = fraction > 0.5 ? lower + 1 : lower;
  }
  return static_cast<int64_t>(picked);
}

// ONNX's interpolation coefficients for the taps base + 1 - n/2 ... base + n/2 around a
// coordinate whose offset from `base` is `ratio` (in (0, 1]).
std::vector<double> coefficients(const ResizeRule& rule, double ratio, double scale) {
  const bool widen = rule.antialias && scale < 1;
  if (rule.mode == Interpolation::kLinear) {
    if (!widen) return {1 - ratio, ratio};
    const int64_t start = static_cast<int64_t>(std::floor(-1 / scale) + 1);
    const int64_t footprint = 2 - 2 * start;
    std::vector<double> c;
    double sum = 0;
    for (int64_t i = start; i < start + footprint; ++i) {
      c.push_back(std::clamp(1 - std::abs((static_cast<double>(i) - ratio) * scale), 0.0, 1.0));
      sum += c.back();
    }
    for (double& v : c) v /= sum;
    return c;
  }
  const double a = rule.cubic_a;
  auto kernel = [a](double t) {
    t = std::abs(t);
    if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0.0;
  };
  if (!widen) return {kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)};
  const int64_t start = static_cast<int64_t>(std::floor(-2 / scale) + 1);
  std::vector<double> c;
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    c.push_back(kernel(scale * (static_cast<double>(i) - ratio)));
    sum += c.back();
  }
  for (double& v : c) v /= sum;
  return c;
}

AxisTaps axis_taps(const ResizeRule& rule, int64_t in, int64_t out, double scale, double length) {
  std::vector<std::vector<std::pair<int64_t, double>>> per_output(out);
  for (int64_t o = 0; o < out; ++o) {
    const double x = source_coordinate(rule, static_cast<double>(o), in, out, scale, length);
    auto& taps = per_output[o];
    if (rule.mode == Interpolation::kNearest) {
      taps.emplace_back(std::clamp<int64_t>(nearest_index(rule.nearest, x, scale), 0, in - 1), 1.0);
      continue;
    }
    const bool whole = x == std::floor(x);
    const int64_t base = static_cast<int64_t>(std::floor(x)) - (whole ? 1 : 0);
    const double ratio = whole ? 1.0 : x - std::floor(x);
    std::vector<double> c = coefficients(rule, ratio, scale);
    const int64_t count = static_cast<int64_t>(c.size());
    if (rule.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < count; ++k) {
        const int64_t at = base + k - count / 2 + 1;
        if (at < 0 || at >= in) c[k] = 0;
        sum += c[k];
      }
      for (double& v : c) v /= sum;
    }
    for (int64_t k = 0; k < count; ++k) {
      if (c[k] == 0) continue;
      const int64_t at = std::clamp<int64_t>(base + k - count / 2 + 1, 0, in - 1);
      auto same = std::find_if(taps.begin(), taps.end(), [at](auto& t) { return t.first == at; });
      if (same == taps.end()) {
        taps.emplace_back(at, c[k]);
      } else {
        same->second += c[k];
      }
    }
  }
  size_t slots = 1;
  for (const auto& taps : per_output) slots = std::max(slots, taps.size());
  AxisTaps result;
  result.index.assign(slots, std::vector<int64_t>(out, 0));
  result.weight.assign(slots, std::vector<double>(out, 0.0));
  for (int64_t o = 0; o < out; ++o) {
    for (size_t k = 0; k < per_output[o].size(); ++k) {
      result.index[k][o] = per_output[o][k].first;
      result.weight[k][o] = per_output[o][k].second;
    }
    // Empty slots read a tap of this output with weight 0.
    for (size_t k = per_output[o].size(); k < slots; ++k) {
      result.index[k][o] = per_output[o].empty() ? 0 : per_output[o][0].first;
    }
  }
  return result;
}

bool is_identity(const AxisTaps& taps, int64_t in) {
  if (taps.index.size() != 1 || static_cast<int64_t>(taps.index[0].size()) != in) return false;
  for (int64_t o = 0; o < in; ++o) {
    if (taps.index[0][o] != o || taps.weight[0][o] != 1.0) return false;
  }
  return true;
}

}  // namespace

// Resize (opsets 10 to 19) and Upsample (9): output sizes and taps are computed here, so scales
// and sizes must be known at compile time, as they are in exported models.
absl::Status lower_resize(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  using onnx::AttributeProto;
  const bool upsample = proto.op_type() == "Upsample";
  const int64_t opset = sink.opset();
  std::map<std::string, AttributeProto::AttributeType, std::less<>> known = {
      {"mode", AttributeProto::STRING}};
  if (!upsample && opset >= 11) {
    known.insert({{"coordinate_transformation_mode", AttributeProto::STRING},
                  {"cubic_coeff_a", AttributeProto::FLOAT},
                  {"exclude_outside", AttributeProto::INT},
                  {"extrapolation_value", AttributeProto::FLOAT},
                  {"nearest_mode", AttributeProto::STRING}});
  }
  if (!upsample && opset >= 18) {
    known.insert({{"antialias", AttributeProto::INT},
                  {"axes", AttributeProto::INTS},
                  {"keep_aspect_ratio_policy", AttributeProto::STRING}});
  }
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(proto, label, known));
  if (proto.output_size() > 1) {
    return invalid(
        str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(), " has one"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  const Shape& xs = x->shape();
  const int64_t rank = static_cast<int64_t>(xs.size());

  ResizeRule rule;
  const std::string mode = attrs.s("mode", "nearest");
  if (mode == "nearest") {
    rule.mode = Interpolation::kNearest;
  } else if (mode == "linear" || (upsample && mode == "bilinear")) {
    rule.mode = Interpolation::kLinear;
  } else if (mode == "cubic" && !upsample && opset >= 11) {
    rule.mode = Interpolation::kCubic;
  } else {
    return invalid(str_cat(label, ": mode '", mode, "' is not one of nearest, linear",
                           !upsample && opset >= 11 ? ", cubic" : ""));
  }
  if (upsample || opset < 11) {
    rule.coordinates = "asymmetric";
    rule.nearest = "simple";
  } else {
    rule.coordinates = attrs.s("coordinate_transformation_mode", "half_pixel");
    rule.nearest = attrs.s("nearest_mode", "round_prefer_floor");
    rule.cubic_a = attrs.f("cubic_coeff_a", -0.75f);
    rule.exclude_outside = attrs.i("exclude_outside", 0) != 0;
    rule.antialias = attrs.i("antialias", 0) != 0;
    static const std::vector<std::string_view> kCoordinates = {
        "half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
        "align_corners", "asymmetric",           "tf_half_pixel_for_nn"};
    if (rule.coordinates == "tf_crop_and_resize") {
      return absl::UnimplementedError(
          str_cat(label,
                  ": ampc does not implement coordinate_transformation_mode "
                  "'tf_crop_and_resize'"));
    }
    if (std::find(kCoordinates.begin(), kCoordinates.end(), rule.coordinates) ==
            kCoordinates.end() ||
        (rule.coordinates == "half_pixel_symmetric" && opset < 19) ||
        (rule.coordinates == "tf_half_pixel_for_nn" && opset >= 19)) {
      return invalid(str_cat(label, ": coordinate_transformation_mode '", rule.coordinates,
                             "' is not one ONNX defines at opset ", opset));
    }
    static const std::vector<std::string_view> kNearest = {"round_prefer_floor",
                                                           "round_prefer_ceil", "floor", "ceil"};
    if (std::find(kNearest.begin(), kNearest.end(), rule.nearest) == kNearest.end()) {
      return invalid(str_cat(label, ": nearest_mode '", rule.nearest,
                             "' is not one of round_prefer_floor, round_prefer_ceil, floor, "
                             "ceil"));
    }
  }
  if (rule.mode != Interpolation::kNearest && !is_arithmetic_float(x->dtype())) {
    return invalid(str_cat(label, ": X is ", dtype_name(x->dtype()), "; ", mode,
                           " interpolation needs a float type"));
  }

  // The resized axes (opset 18's `axes`, else all) and their scales or sizes.
  std::vector<int64_t> axes;
  if (auto it = attrs.int_lists.find("axes"); it != attrs.int_lists.end()) {
    for (int64_t a : it->second) {
      if (a < -rank || a >= rank) {
        return invalid(str_cat(label, ": axis ", a, " is out of range for X of rank ", rank));
      }
      a = a < 0 ? a + rank : a;
      if (std::find(axes.begin(), axes.end(), a) != axes.end()) {
        return invalid(str_cat(label, ": axis ", a, " is listed twice"));
      }
      axes.push_back(a);
    }
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  const int scales_input = upsample || opset < 11 ? 1 : 2;
  std::vector<double> scales(rank, 1.0);
  Shape out_shape = xs;
  std::vector<double> lengths(xs.begin(), xs.end());
  std::vector<double> given;
  if (has_input(proto, scales_input)) {
    AMPC_ASSIGN_OR_RETURN(given, known_floats(proto, scales_input, label, sink));
  }
  const bool by_sizes = given.empty() && scales_input == 2 && has_input(proto, 3);
  if (!by_sizes) {
    if (given.size() != axes.size()) {
      return invalid(str_cat(label, ": scales has ", given.size(), " values for ", axes.size(),
                             " axes", scales_input == 2 ? " (and no sizes are given)" : ""));
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      if (!(given[i] > 0) || !std::isfinite(given[i])) {
        return invalid(str_cat(label, ": scale ", given[i], " of axis ", axes[i],
                               " is not a positive number"));
      }
      scales[axes[i]] = given[i];
      lengths[axes[i]] = static_cast<double>(xs[axes[i]]) * given[i];
      out_shape[axes[i]] =
          static_cast<int64_t>(std::floor(static_cast<double>(xs[axes[i]]) * given[i]));
    }
  } else {
    AMPC_ASSIGN_OR_RETURN(std::vector<double> sizes, known_floats(proto, 3, label, sink));
    if (sizes.size() != axes.size()) {
      return invalid(
          str_cat(label, ": sizes has ", sizes.size(), " values for ", axes.size(), " axes"));
    }
    const std::string policy = attrs.s("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller") {
      return invalid(str_cat(label, ": keep_aspect_ratio_policy '", policy,
                             "' is not one of stretch, not_larger, not_smaller"));
    }
    std::optional<double> common;
    for (size_t i = 0; i < axes.size(); ++i) {
      const double ratio = sizes[i] / static_cast<double>(xs[axes[i]]);
      if (policy == "not_larger") common = common ? std::min(*common, ratio) : ratio;
      if (policy == "not_smaller") common = common ? std::max(*common, ratio) : ratio;
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      const double in = static_cast<double>(xs[axes[i]]);
      const int64_t size = common ? static_cast<int64_t>(std::floor(*common * in + 0.5))
                                  : static_cast<int64_t>(sizes[i]);
      out_shape[axes[i]] = size;
      scales[axes[i]] = common ? *common : static_cast<double>(size) / in;
      lengths[axes[i]] = static_cast<double>(size);
    }
  }
  for (int64_t a = 0; a < rank; ++a) {
    if (out_shape[a] < 1 && xs[a] > 0) {
      return invalid(str_cat(label, ": axis ", a, " of X ", shape_to_string(xs), " resizes to ",
                             out_shape[a], " positions"));
    }
  }

  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  std::vector<std::pair<int64_t, AxisTaps>> resized;
  for (int64_t a = rank - 1; a >= 0; --a) {
    AxisTaps taps = axis_taps(rule, xs[a], out_shape[a], scales[a], lengths[a]);
    if (!is_identity(taps, xs[a])) resized.emplace_back(a, std::move(taps));
  }
  if (resized.empty()) return e.op("Identity", {x}, {}, e.output(0)).status();
  Value* v = x;
  for (size_t r = 0; r < resized.size(); ++r) {
    const auto& [axis, taps] = resized[r];
    const std::string name = r + 1 == resized.size() ? e.output(0) : "";
    const int64_t out = out_shape[axis];
    const size_t slots = taps.index.size();
    Value* sum = nullptr;
    for (size_t k = 0; k < slots; ++k) {
      AMPC_ASSIGN_OR_RETURN(Value * index, e.constant(Tensor::from_i64({out}, taps.index[k])));
      const bool plain = slots == 1 && std::all_of(taps.weight[0].begin(), taps.weight[0].end(),
                                                   [](double w) { return w == 1.0; });
      AMPC_ASSIGN_OR_RETURN(Value * gathered, e.op("Gather", {v, index},
                                                   {{"axis", AttrValue(axis)}}, plain ? name : ""));
      if (plain) {
        sum = gathered;
        break;
      }
      Shape weight_shape(rank - axis, 1);
      weight_shape[0] = out;
      AMPC_ASSIGN_OR_RETURN(Value * weight, e.constant(Tensor::from_doubles(
                                                x->dtype(), weight_shape, taps.weight[k])));
      const bool last = k + 1 == slots;
      AMPC_ASSIGN_OR_RETURN(Value * term,
                            e.op("Mul", {gathered, weight}, {}, last && k == 0 ? name : ""));
      if (sum == nullptr) {
        sum = term;
      } else {
        AMPC_ASSIGN_OR_RETURN(sum, e.op("Add", {sum, term}, {}, last ? name : ""));
      }
    }
    v = sum;
  }
  return absl::OkStatus();
}

}  // namespace ampc::onnx_io::lowering
