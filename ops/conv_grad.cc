// The backward of the sliding-window ops: the gradient rules of Conv, MaxPool and AveragePool,
// and the internal ops they build (ampc domain):
//
//   ConvGradData(dY, W) -> dX        the transposed convolution: dY scattered back through W
//   ConvGradFilter(X, dY) -> dW      dY correlated with the windows of X, summed over the batch
//   MaxPoolGrad(dY, X) -> dX         dY routed to each window's first maximum (recomputed from X)
//   AveragePoolGrad(dY) -> dX        dY / count spread over each window's taps inside X
//
// The rules resolve auto_pad into explicit pads (the CPU kernels' rule, runtime/cpu/window.h), so
// the internal ops take only explicit `pads` (begins, then ends), `strides`, `dilations` and, for
// the pools, `ceil_mode`: with the shapes of X and dY they fix every window. Each op's inference
// checks that dY's spatial dims are what the forward op gives for X under those attributes.
// The internal ops have gradient rules of their own (each is linear in dY, and the conv ones
// bilinear), which lets the generic gradient check cover their kernels too.
#include "ops/conv_grad.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/op_util.h"

namespace ampc::ops {
namespace {

using Ints = std::vector<int64_t>;

// A window with explicit pads, as the internal ops carry it.
struct GradWindow {
  Ints kernel;
  Ints strides;
  Ints dilations;
  Ints pads;  // all begins, then all ends
  bool ceil_mode = false;

  // strides, pads and dilations (plus kernel_shape and ceil_mode for the pools).
  Attributes attrs(bool pool) const {
    Attributes out = {{"strides", strides}, {"pads", pads}, {"dilations", dilations}};
    if (pool) {
      out["kernel_shape"] = kernel;
      out["ceil_mode"] = int64_t{ceil_mode ? 1 : 0};
    }
    return out;
  }
};

Ints ints_or(const Node& node, std::string_view name, size_t count, int64_t fill) {
  const AttrValue* value = node.find_attr(name);
  return value != nullptr ? std::get<Ints>(*value) : Ints(count, fill);
}

// The window of forward node `node` (X operand 0, Y output 0) with auto_pad resolved: SAME pads
// (out - 1) * stride + dilated kernel - in in total, clamped at 0, the odd one at the end
// (SAME_UPPER) or the beginning (SAME_LOWER); VALID pads nothing. Under auto_pad the output size
// does not depend on ceil_mode, and the resolved pads give it with ceil_mode 0.
GradWindow forward_window(const Node& node, Ints kernel) {
  const Shape& x = node.operand(0)->shape();
  const Shape& y = node.output(0)->shape();
  const size_t n = kernel.size();
  GradWindow w;
  w.kernel = std::move(kernel);
  w.strides = ints_or(node, "strides", n, 1);
  w.dilations = ints_or(node, "dilations", n, 1);
  w.pads = ints_or(node, "pads", 2 * n, 0);
  const AttrValue* ceil_mode = node.find_attr("ceil_mode");
  w.ceil_mode = ceil_mode != nullptr && std::get<int64_t>(*ceil_mode) != 0;
  const std::string& auto_pad = node.string_attr("auto_pad");
  if (auto_pad == "NOTSET") return w;
  w.ceil_mode = false;
  for (size_t i = 0; i < n; ++i) {
    int64_t total = 0;
    if (auto_pad != "VALID") {
      const int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
      total = std::max<int64_t>(0, (y[i + 2] - 1) * w.strides[i] + extent - x[i + 2]);
    }
    w.pads[i] = auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
    w.pads[i + n] = total - w.pads[i];
  }
  return w;
}

Ints spatial(const Shape& shape) { return Ints(shape.begin() + 2, shape.end()); }

// ---- Gradient rules of the forward ops ------------------------------------------------------

}  // namespace

// Y = conv(X, W) + B: dX = ConvGradData(dY, W) (the transposed convolution), dW =
// ConvGradFilter(X, dY) (dY correlated with the windows of X), dB = dY summed over N and space.
absl::StatusOr<Grads> conv_gradient(GradBuilder& b) {
  const Node& node = b.node();
  Value* x = b.input(0);
  Value* w = b.input(1);
  Value* dy = b.grad_of_output(0);
  const GradWindow window = forward_window(node, spatial(w->shape()));
  Attributes attrs = window.attrs(/*pool=*/false);
  attrs["group"] = node.int_attr("group");
  Grads grads = {nullptr, nullptr, nullptr};
  if (b.needs_grad(0)) {
    Attributes data_attrs = attrs;
    data_attrs["input_shape"] = x->shape();
    grads[0] = b.ampc_op("ConvGradData", {dy, w}, std::move(data_attrs));
  }
  if (b.needs_grad(1)) {
    Attributes filter_attrs = attrs;
    filter_attrs["kernel_shape"] = window.kernel;
    grads[1] = b.ampc_op("ConvGradFilter", {x, dy}, std::move(filter_attrs));
  }
  if (b.needs_grad(2)) {
    Ints axes = {0};
    for (size_t d = 2; d < dy->shape().size(); ++d) axes.push_back(static_cast<int64_t>(d));
    grads[2] = b.op("ReduceSum", {dy}, {{"axes", axes}, {"keepdims", int64_t{0}}});
  }
  return grads;
}

// Y = max over each window: dX[i] = the sum of dY over the windows whose first maximum (in scan
// order, as the forward kernel picks it) is X[i]. MaxPoolGrad recomputes the argmax from X.
absl::StatusOr<Grads> max_pool_gradient(GradBuilder& b) {
  const Node& node = b.node();
  const GradWindow window = forward_window(node, node.ints_attr("kernel_shape"));
  return Grads{b.ampc_op("MaxPoolGrad", {b.grad_of_output(0), b.input(0)}, window.attrs(true))};
}

// Y = (sum of the window's taps inside X) / count: dX[i] = the sum over the windows that read
// X[i] of dY / count, with the forward's count (count_include_pad, ceil_mode windows).
absl::StatusOr<Grads> average_pool_gradient(GradBuilder& b) {
  const Node& node = b.node();
  const GradWindow window = forward_window(node, node.ints_attr("kernel_shape"));
  Attributes attrs = window.attrs(/*pool=*/true);
  attrs["count_include_pad"] = node.int_attr("count_include_pad");
  attrs["input_shape"] = b.input(0)->shape();
  return Grads{b.ampc_op("AveragePoolGrad", {b.grad_of_output(0)}, std::move(attrs))};
}

namespace {

// ---- Inference of the internal ops ----------------------------------------------------------

absl::StatusOr<Ints> checked_ints(const InferenceContext& ctx, std::string_view name, size_t count,
                                  int64_t fill, int64_t min) {
  if (!ctx.has_attr(name)) return Ints(count, fill);
  const Ints& values = ctx.ints_attr(name);
  if (values.size() != count) {
    return absl::InvalidArgumentError(
        str_cat(name, " has ", values.size(), " values, expected ", count));
  }
  for (int64_t v : values) {
    if (v < min) {
      return absl::InvalidArgumentError(
          str_cat(name, " [", str_join(values, ","), "] has a value below ", min));
    }
  }
  return values;
}

// Checks that X [N, C, x...] and dY [N, M, y...] agree under the window attributes of the node
// for `kernel`: y is what the forward op gives for x (floor, or ceil with ceil_mode).
absl::Status check_window(const InferenceContext& ctx, const Ints& kernel, const Shape& x,
                          const Shape& dy) {
  const size_t n = kernel.size();
  if (n < 1 || n > 3 || x.size() != n + 2 || dy.size() != n + 2) {
    return absl::InvalidArgumentError(
        str_cat("X ", shape_to_string(x), " and dY ", shape_to_string(dy), " must both be N x C x ",
                "D1 ... Dn with the kernel's ", n, " spatial dims (1 to 3)"));
  }
  if (x[0] != dy[0]) {
    return absl::InvalidArgumentError(str_cat("X ", shape_to_string(x), " and dY ",
                                              shape_to_string(dy), " differ in batch size"));
  }
  AMPC_ASSIGN_OR_RETURN(Ints strides, checked_ints(ctx, "strides", n, 1, 1));
  AMPC_ASSIGN_OR_RETURN(Ints dilations, checked_ints(ctx, "dilations", n, 1, 1));
  AMPC_ASSIGN_OR_RETURN(Ints pads, checked_ints(ctx, "pads", 2 * n, 0, 0));
  const bool ceil_mode = ctx.has_attr("ceil_mode") && ctx.int_attr("ceil_mode") != 0;
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] < 1) {
      return absl::InvalidArgumentError(
          str_cat("kernel_shape [", str_join(kernel, ","), "] has a value below 1"));
    }
    const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
    const int64_t out =
        sliding_window_count(x[i + 2], extent, strides[i], pads[i], pads[i + n], ceil_mode)
            .value_or(-1);
    if (out != dy[i + 2]) {
      return absl::InvalidArgumentError(str_cat(
          "dY ", shape_to_string(dy), " does not match X ", shape_to_string(x),
          " under kernel_shape [", str_join(kernel, ","), "], strides [", str_join(strides, ","),
          "], pads [", str_join(pads, ","), "], dilations [", str_join(dilations, ","), "]",
          ceil_mode ? ", ceil_mode" : "", ": spatial dim ", i, " should be ", out));
    }
  }
  return absl::OkStatus();
}

// The `input_shape` attribute: X's shape, which dY alone does not determine.
absl::StatusOr<Shape> input_shape(const InferenceContext& ctx) {
  const Ints& shape = ctx.ints_attr("input_shape");
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          str_cat("input_shape [", str_join(shape, ","), "] has a negative dim"));
    }
  }
  return Shape(shape.begin(), shape.end());
}

// Checks the channel counts of X [N, C, ...], W [M, C / group, k...] and dY [N, M, ...].
absl::Status check_channels(const InferenceContext& ctx, const Shape& x, const Shape& w,
                            const Shape& dy) {
  const int64_t group = ctx.int_attr("group");
  if (group < 1) return absl::InvalidArgumentError(str_cat("group must be >= 1, got ", group));
  if (w.size() != x.size() || w[1] * group != x[1] || w[0] % group != 0 || dy[1] != w[0]) {
    return absl::InvalidArgumentError(str_cat(
        "X ", shape_to_string(x), ", W ", shape_to_string(w), " and dY ", shape_to_string(dy),
        " do not fit a group-", group, " convolution (W must be [M, C/group, k...], M a ",
        "multiple of group, dY [N, M, ...])"));
  }
  return absl::OkStatus();
}

absl::Status infer_conv_grad_data(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& dy = ctx.input_type(0).shape;
  const Shape& w = ctx.input_type(1).shape;
  AMPC_ASSIGN_OR_RETURN(Shape x, input_shape(ctx));
  if (w.size() < 3) {
    return absl::InvalidArgumentError(str_cat("W ", shape_to_string(w), " has no spatial dims"));
  }
  AMPC_RETURN_IF_ERROR(check_window(ctx, spatial(w), x, dy));
  AMPC_RETURN_IF_ERROR(check_channels(ctx, x, w, dy));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, x});
  return absl::OkStatus();
}

absl::Status infer_conv_grad_filter(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& x = ctx.input_type(0).shape;
  const Shape& dy = ctx.input_type(1).shape;
  const Ints& kernel = ctx.ints_attr("kernel_shape");
  AMPC_RETURN_IF_ERROR(check_window(ctx, kernel, x, dy));
  const int64_t group = ctx.int_attr("group");
  if (group < 1 || x[1] % group != 0) {
    return absl::InvalidArgumentError(
        str_cat("group ", group, " does not divide the ", x[1], " channels of X"));
  }
  Shape w = {dy[1], x[1] / group};
  w.insert(w.end(), kernel.begin(), kernel.end());
  AMPC_RETURN_IF_ERROR(check_channels(ctx, x, w, dy));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, w});
  return absl::OkStatus();
}

absl::Status infer_max_pool_grad(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& dy = ctx.input_type(0).shape;
  const Shape& x = ctx.input_type(1).shape;
  AMPC_RETURN_IF_ERROR(check_window(ctx, ctx.ints_attr("kernel_shape"), x, dy));
  if (dy[1] != x[1]) {
    return absl::InvalidArgumentError(
        str_cat("dY ", shape_to_string(dy), " and X ", shape_to_string(x), " differ in channels"));
  }
  ctx.set_output(0, ctx.input_type(1));
  return absl::OkStatus();
}

absl::Status infer_average_pool_grad(InferenceContext& ctx) {
  const Shape& dy = ctx.input_type(0).shape;
  AMPC_ASSIGN_OR_RETURN(Shape x, input_shape(ctx));
  AMPC_RETURN_IF_ERROR(check_window(ctx, ctx.ints_attr("kernel_shape"), x, dy));
  if (dy[1] != x[1]) {
    return absl::InvalidArgumentError(str_cat("dY ", shape_to_string(dy), " and input_shape ",
                                              shape_to_string(x), " differ in channels"));
  }
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, x});
  return absl::OkStatus();
}

// ---- Gradient rules of the internal ops -----------------------------------------------------

// The attributes `names` of `node` that it sets.
Attributes copy_attrs(const Node& node, std::initializer_list<std::string_view> names) {
  Attributes out;
  for (std::string_view name : names) {
    if (const AttrValue* value = node.find_attr(name)) out[std::string(name)] = *value;
  }
  return out;
}

Attributes conv_attrs(const Node& node) {
  return copy_attrs(node, {"strides", "pads", "dilations", "group"});
}

// dX = J_W^T dY, with J_W = conv(., W), is bilinear: d dY = conv(G, W), dW = ConvGradFilter(G, dY).
absl::StatusOr<Grads> conv_grad_data_gradient(GradBuilder& b) {
  Value* g = b.grad_of_output(0);
  Grads grads = {nullptr, nullptr};
  if (b.needs_grad(0)) grads[0] = b.op("Conv", {g, b.input(1)}, conv_attrs(b.node()));
  if (b.needs_grad(1)) {
    Attributes attrs = conv_attrs(b.node());
    attrs["kernel_shape"] = spatial(b.input(1)->shape());
    grads[1] = b.ampc_op("ConvGradFilter", {g, b.input(0)}, std::move(attrs));
  }
  return grads;
}

// dW = J_X^T dY, with J_X = conv(X, .), is bilinear: dX = ConvGradData(dY, G), d dY = conv(X, G).
absl::StatusOr<Grads> conv_grad_filter_gradient(GradBuilder& b) {
  Value* g = b.grad_of_output(0);
  Grads grads = {nullptr, nullptr};
  if (b.needs_grad(0)) {
    Attributes attrs = conv_attrs(b.node());
    attrs["input_shape"] = b.input(0)->shape();
    grads[0] = b.ampc_op("ConvGradData", {b.input(1), g}, std::move(attrs));
  }
  if (b.needs_grad(1)) grads[1] = b.op("Conv", {b.input(0), g}, conv_attrs(b.node()));
  return grads;
}

// dX is linear in dY and routes each dY to one X element: d dY = G at each window's argmax,
// gathered through MaxPool's flat Indices (which pick the same first maximum). X gets none.
absl::StatusOr<Grads> max_pool_grad_gradient(GradBuilder& b) {
  const Node& node = b.node();
  Attributes attrs =
      copy_attrs(node, {"kernel_shape", "strides", "pads", "dilations", "ceil_mode"});
  Value* indices = b.op_n(kOnnxDomain, "MaxPool", {b.input(1)}, 2, std::move(attrs))[1];
  Value* flat = b.op("Reshape", {b.grad_of_output(0), b.int64s({-1})});
  return Grads{b.op("Gather", {flat, indices}), nullptr};
}

// dX = A^T dY for the averaging map A = AveragePool: d dY = AveragePool(G) with the same window.
absl::StatusOr<Grads> average_pool_grad_gradient(GradBuilder& b) {
  const Node& node = b.node();
  Attributes attrs = copy_attrs(
      node, {"kernel_shape", "strides", "pads", "ceil_mode", "count_include_pad", "dilations"});
  // AveragePool takes dilations from opset 19 only; leave out the default.
  auto dilations = attrs.find("dilations");
  if (dilations != attrs.end()) {
    const Ints& values = std::get<Ints>(dilations->second);
    if (std::all_of(values.begin(), values.end(), [](int64_t d) { return d == 1; })) {
      attrs.erase(dilations);
    }
  }
  return Grads{b.op("AveragePool", {b.grad_of_output(0)}, std::move(attrs))};
}

// ---- Registration ---------------------------------------------------------------------------

OpDef grad_op(std::string name, std::string summary) {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = std::move(name);
  def.since_opset = 1;
  def.summary = std::move(summary);
  def.outputs = {input("dX")};
  def.attrs = {optional_attr("strides", AttrKind::kInts), optional_attr("pads", AttrKind::kInts),
               optional_attr("dilations", AttrKind::kInts)};
  return def;
}

OpDef conv_grad_data_def() {
  OpDef def = grad_op("ConvGradData", "the gradient of Conv with respect to X");
  def.inputs = {input("dY", kFloatTypes), input("W", kFloatTypes)};
  def.attrs.push_back(required_attr("input_shape", AttrKind::kInts));
  def.attrs.push_back(attr("group", int64_t{1}));
  def.infer = infer_conv_grad_data;
  def.gradient = conv_grad_data_gradient;
  // Import lowers ConvTranspose onto it: matrix work, in low precision as Conv is (and as
  // PyTorch's autocast runs conv_transpose).
  def.autocast.category = AutocastCategory::kAllow;
  def.autocast.accumulate = DType::kF32;
  def.samples = {
      {"2-D grouped, stride 2, pads 1",
       {f32({1, 4, 3, 3}), f32({4, 2, 3, 3})},
       {},
       Attributes{{"input_shape", Ints{1, 4, 5, 5}},
                  {"group", int64_t{2}},
                  {"strides", Ints{2, 2}},
                  {"pads", Ints{1, 1, 1, 1}}},
       {f32({1, 4, 5, 5})}},
      {"1-D dilated f16",
       {f16({2, 3, 3}), f16({3, 2, 2})},
       {},
       Attributes{{"input_shape", Ints{2, 2, 5}}, {"dilations", Ints{2}}},
       {f16({2, 2, 5})}},
      {"3-D asymmetric pads bf16",
       {bf16({1, 2, 2, 2, 3}), bf16({2, 1, 2, 2, 2})},
       {},
       Attributes{{"input_shape", Ints{1, 1, 3, 3, 3}}, {"pads", Ints{0, 0, 1, 0, 0, 0}}},
       {bf16({1, 1, 3, 3, 3})}},
  };
  return def;
}

OpDef conv_grad_filter_def() {
  OpDef def = grad_op("ConvGradFilter", "the gradient of Conv with respect to W");
  def.inputs = {input("X", kFloatTypes), input("dY", kFloatTypes)};
  def.outputs = {input("dW")};
  def.attrs.push_back(required_attr("kernel_shape", AttrKind::kInts));
  def.attrs.push_back(attr("group", int64_t{1}));
  def.infer = infer_conv_grad_filter;
  def.gradient = conv_grad_filter_gradient;
  def.samples = {
      {"2-D grouped, stride 2, pads 1",
       {f32({1, 4, 5, 5}), f32({1, 4, 3, 3})},
       {},
       Attributes{{"kernel_shape", Ints{3, 3}},
                  {"group", int64_t{2}},
                  {"strides", Ints{2, 2}},
                  {"pads", Ints{1, 1, 1, 1}}},
       {f32({4, 2, 3, 3})}},
      {"1-D dilated f16",
       {f16({2, 2, 5}), f16({2, 3, 3})},
       {},
       Attributes{{"kernel_shape", Ints{2}}, {"dilations", Ints{2}}},
       {f16({3, 2, 2})}},
      {"3-D asymmetric pads bf16",
       {bf16({1, 1, 3, 3, 3}), bf16({1, 2, 2, 2, 3})},
       {},
       Attributes{{"kernel_shape", Ints{2, 2, 2}}, {"pads", Ints{0, 0, 1, 0, 0, 0}}},
       {bf16({2, 1, 2, 2, 2})}},
  };
  return def;
}

OpDef max_pool_grad_def() {
  OpDef def = grad_op("MaxPoolGrad", "the gradient of MaxPool with respect to X");
  def.inputs = {input("dY", kFloatTypes), input("X", kFloatTypes)};
  def.attrs.push_back(required_attr("kernel_shape", AttrKind::kInts));
  def.attrs.push_back(flag_attr("ceil_mode", 0));
  def.infer = infer_max_pool_grad;
  def.gradient = max_pool_grad_gradient;
  // The argmax is piecewise constant in X: no gradient flows into it.
  def.no_gradient_inputs = {1};
  def.samples = {
      {"2-D ceil_mode, overlapping",
       {f32({1, 2, 2, 2}), f32({1, 2, 4, 4})},
       {},
       Attributes{{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}},
       {f32({1, 2, 4, 4})}},
      {"1-D pads, dilated f16",
       {f16({1, 2, 3}), f16({1, 2, 7})},
       {},
       Attributes{{"kernel_shape", Ints{2}},
                  {"strides", Ints{2}},
                  {"dilations", Ints{2}},
                  {"pads", Ints{1, 0}}},
       {f16({1, 2, 7})}},
  };
  return def;
}

OpDef average_pool_grad_def() {
  OpDef def = grad_op("AveragePoolGrad", "the gradient of AveragePool with respect to X");
  def.inputs = {input("dY", kFloatTypes)};
  def.attrs.push_back(required_attr("input_shape", AttrKind::kInts));
  def.attrs.push_back(required_attr("kernel_shape", AttrKind::kInts));
  def.attrs.push_back(flag_attr("ceil_mode", 0));
  def.attrs.push_back(flag_attr("count_include_pad", 0));
  def.infer = infer_average_pool_grad;
  def.gradient = average_pool_grad_gradient;
  def.samples = {
      {"2-D pads, count_include_pad",
       {f32({1, 2, 3, 3})},
       {},
       Attributes{{"input_shape", Ints{1, 2, 5, 5}},
                  {"kernel_shape", Ints{3, 3}},
                  {"strides", Ints{2, 2}},
                  {"pads", Ints{1, 1, 1, 1}},
                  {"count_include_pad", int64_t{1}}},
       {f32({1, 2, 5, 5})}},
      {"2-D ceil_mode, asymmetric pads bf16",
       {bf16({1, 1, 3, 3})},
       {},
       Attributes{{"input_shape", Ints{1, 1, 5, 6}},
                  {"kernel_shape", Ints{3, 2}},
                  {"strides", Ints{2, 2}},
                  {"pads", Ints{1, 0, 0, 1}},
                  {"ceil_mode", int64_t{1}}},
       {bf16({1, 1, 5, 6})}},
  };
  return def;
}

void register_conv_grad_ops(OpRegistry& registry) {
  registry.add(conv_grad_data_def());
  registry.add(conv_grad_filter_def());
  registry.add(max_pool_grad_def());
  registry.add(average_pool_grad_def());
}

const OpRegistration kConvGradOps(&register_conv_grad_ops);

}  // namespace
}  // namespace ampc::ops
