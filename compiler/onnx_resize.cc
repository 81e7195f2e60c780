// Resize and Upsample, lowered at import onto Gather, Mul and Add, so every backend runs them and
// autodiff differentiates them with no new kernels.
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
