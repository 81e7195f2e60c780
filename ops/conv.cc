// Convolution and pooling over N x C x D1 ... Dn inputs (1-D, 2-D and 3-D): Conv, MaxPool,
// AveragePool, GlobalAveragePool.
//
// The sliding-window ops share one output-size rule, taken from the ONNX operator docs:
//   explicit pads: floor((in + pad_begin + pad_end - ek) / s) + 1, or with ceil_mode
//                  ceil(...) + 1 minus one when the last window would start in the end padding
//                  (PyTorch's rule, which ONNX adopted);
//   SAME_UPPER / SAME_LOWER: ceil(in / s);   VALID: floor((in - ek) / s) + 1,
// where ek = (kernel - 1) * dilation + 1 is the dilated kernel extent. The SAME rules differ only
// in where the odd pad goes, which does not change the shape.
#include <algorithm>
#include <string_view>

#include "ops/conv_grad.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

// Spatial ranks the window ops accept (1-D, 2-D and 3-D, as cuDNN and the CPU kernels do).
constexpr size_t kMinSpatialRank = 1;
constexpr size_t kMaxSpatialRank = 3;

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

struct Window {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;  // all begins, then all ends
  AutoPad auto_pad = AutoPad::kNotSet;
  bool ceil_mode = false;
};

absl::StatusOr<AutoPad> parse_auto_pad(std::string_view text) {
  if (text == "NOTSET") return AutoPad::kNotSet;
  if (text == "SAME_UPPER") return AutoPad::kSameUpper;
  if (text == "SAME_LOWER") return AutoPad::kSameLower;
  if (text == "VALID") return AutoPad::kValid;
  return absl::InvalidArgumentError(
      str_cat("auto_pad '", text, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"));
}

// The number of spatial dims of X (rank - 2), checked against what the window ops accept.
absl::StatusOr<size_t> spatial_rank(const TensorType& x) {
  const size_t rank = x.shape.size();
  if (rank < kMinSpatialRank + 2 || rank > kMaxSpatialRank + 2) {
    return absl::InvalidArgumentError(str_cat("X ", shape_to_string(x.shape),
                                              " must be N x C x D1 ... Dn with 1 to ",
                                              kMaxSpatialRank, " spatial dims"));
  }
  return rank - 2;
}

// An optional per-axis INTS attribute: `count` values (default `fill`), each at least `min`.
absl::StatusOr<std::vector<int64_t>> spatial_ints(const InferenceContext& ctx,
                                                  std::string_view name, size_t count, int64_t fill,
                                                  int64_t min) {
  if (!ctx.has_attr(name)) return std::vector<int64_t>(count, fill);
  const std::vector<int64_t>& values = ctx.ints_attr(name);
  if (values.size() != count) {
    return absl::InvalidArgumentError(str_cat(
        name, " has ", values.size(), " values, expected ", count, " (",
        name == "pads" ? "begin and end for each spatial dim" : "one per spatial dim", ")"));
  }
  for (int64_t v : values) {
    if (v < min) {
      return absl::InvalidArgumentError(
          str_cat(name, " [", str_join(values, ","), "] has a value below ", min));
    }
  }
  return values;
}

// Reads strides, dilations, pads, auto_pad and ceil_mode (those the op has) for `kernel`.
absl::StatusOr<Window> read_window(const InferenceContext& ctx, std::vector<int64_t> kernel) {
  const size_t n = kernel.size();
  Window w;
  w.kernel = std::move(kernel);
  for (int64_t k : w.kernel) {
    if (k < 1) {
      return absl::InvalidArgumentError(
          str_cat("kernel_shape [", str_join(w.kernel, ","), "] has a value below 1"));
    }
  }
  AMPC_ASSIGN_OR_RETURN(w.strides, spatial_ints(ctx, "strides", n, 1, 1));
  AMPC_ASSIGN_OR_RETURN(w.dilations, spatial_ints(ctx, "dilations", n, 1, 1));
  AMPC_ASSIGN_OR_RETURN(w.pads, spatial_ints(ctx, "pads", 2 * n, 0, 0));
  AMPC_ASSIGN_OR_RETURN(w.auto_pad, parse_auto_pad(ctx.string_attr("auto_pad")));
  if (w.auto_pad != AutoPad::kNotSet && ctx.has_attr("pads")) {
    return absl::InvalidArgumentError(
        str_cat("pads cannot be used together with auto_pad=", ctx.string_attr("auto_pad")));
  }
  // 0 or 1: checked with every flag attribute (AttrSpec::int_range).
  if (ctx.has_attr("ceil_mode")) w.ceil_mode = ctx.int_attr("ceil_mode") == 1;
  return w;
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// The output size along spatial axis `i` for an input of size `in` (see the file comment).
absl::StatusOr<int64_t> window_output_size(const Window& w, size_t i, int64_t in) {
  const int64_t stride = w.strides[i];
  const int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
  if (w.auto_pad == AutoPad::kSameUpper || w.auto_pad == AutoPad::kSameLower) {
    return ceil_div(in, stride);
  }
  const int64_t pad_begin = w.auto_pad == AutoPad::kValid ? 0 : w.pads[i];
  const int64_t pad_end = w.auto_pad == AutoPad::kValid ? 0 : w.pads[i + w.kernel.size()];
  const int64_t padded = in + pad_begin + pad_end;
  // auto_pad=VALID gives the same size in both modes (ceil((in - ek + 1) / s)).
  const bool ceil_mode = w.ceil_mode && w.auto_pad != AutoPad::kValid;
  const std::optional<int64_t> count =
      sliding_window_count(in, extent, stride, pad_begin, pad_end, ceil_mode);
  if (!count) {
    return absl::InvalidArgumentError(str_cat("spatial dim ", i, ": the kernel extent ", extent,
                                              " (kernel ", w.kernel[i], ", dilation ",
                                              w.dilations[i], ") exceeds the padded input size ",
                                              padded, ceil_mode ? " by the stride or more" : ""));
  }
  return *count;
}

// [N, channels, out_1, ..., out_n] for X = [N, C, in_1, ..., in_n].
absl::StatusOr<Shape> window_output_shape(const Window& w, const Shape& x, int64_t channels) {
  Shape out = {x[0], channels};
  for (size_t i = 0; i < w.kernel.size(); ++i) {
    AMPC_ASSIGN_OR_RETURN(int64_t size, window_output_size(w, i, x[i + 2]));
    out.push_back(size);
  }
  return out;
}

// ---- Conv ----------------------------------------------------------------------------------

// Checks W [M, C/group, k...] and B [M] against X [N, C, ...] and the group count.
absl::Status check_conv_operands(const InferenceContext& ctx, const Shape& x, const Shape& w,
                                 int64_t group) {
  if (w.size() != x.size()) {
    return absl::InvalidArgumentError(
        str_cat("W ", shape_to_string(w), " must have the rank of X ", shape_to_string(x)));
  }
  if (group < 1) return absl::InvalidArgumentError(str_cat("group must be >= 1, got ", group));
  if (w[1] * group != x[1]) {
    return absl::InvalidArgumentError(str_cat("X ", shape_to_string(x), " has ", x[1],
                                              " channels but W ", shape_to_string(w),
                                              " with group ", group, " expects ", w[1] * group));
  }
  if (w[0] % group != 0) {
    return absl::InvalidArgumentError(str_cat("W ", shape_to_string(w), " has ", w[0],
                                              " output channels, not a multiple of group ", group));
  }
  if (ctx.has_input(2)) {
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 2));
    const Shape& b = ctx.input_type(2).shape;
    if (b != Shape{w[0]}) {
      return absl::InvalidArgumentError(str_cat("B ", shape_to_string(b), " must be [", w[0],
                                                "], one value per output channel of W ",
                                                shape_to_string(w)));
    }
  }
  return absl::OkStatus();
}

absl::Status infer_conv(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& x = ctx.input_type(0).shape;
  const Shape& w = ctx.input_type(1).shape;
  AMPC_ASSIGN_OR_RETURN(size_t n, spatial_rank(ctx.input_type(0)));
  AMPC_RETURN_IF_ERROR(check_conv_operands(ctx, x, w, ctx.int_attr("group")));
  const std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (ctx.has_attr("kernel_shape") && ctx.ints_attr("kernel_shape") != kernel) {
    return absl::InvalidArgumentError(
        str_cat("kernel_shape [", str_join(ctx.ints_attr("kernel_shape"), ","),
                "] does not match the spatial dims of W ", shape_to_string(w)));
  }
  AMPC_CHECK(kernel.size() == n);
  AMPC_ASSIGN_OR_RETURN(Window window, read_window(ctx, kernel));
  AMPC_ASSIGN_OR_RETURN(Shape out, window_output_shape(window, x, w[0]));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

// ---- Pooling -------------------------------------------------------------------------------

// The window of a pooling op: kernel_shape is required and gives the spatial rank.
absl::StatusOr<Window> read_pool_window(const InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(size_t n, spatial_rank(ctx.input_type(0)));
  if (!ctx.has_attr("kernel_shape")) {
    return absl::InvalidArgumentError("the kernel_shape attribute is required");
  }
  const std::vector<int64_t>& kernel = ctx.ints_attr("kernel_shape");
  if (kernel.size() != n) {
    return absl::InvalidArgumentError(
        str_cat("kernel_shape [", str_join(kernel, ","), "] has ", kernel.size(), " dims but X ",
                shape_to_string(ctx.input_type(0).shape), " has ", n, " spatial dims"));
  }
  return read_window(ctx, kernel);
}

absl::Status infer_max_pool(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Window window, read_pool_window(ctx));
  const TensorType& x = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(Shape out, window_output_shape(window, x.shape, x.shape[1]));
  ctx.set_output(0, TensorType{x.dtype, out});
  ctx.set_output(1, TensorType{DType::kI64, out});  // flat indices into X
  return absl::OkStatus();
}

absl::Status infer_average_pool(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(Window window, read_pool_window(ctx));
  const TensorType& x = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(Shape out, window_output_shape(window, x.shape, x.shape[1]));
  ctx.set_output(0, TensorType{x.dtype, out});
  return absl::OkStatus();
}

// [N, C, D1, ...] -> [N, C, 1, ...].
absl::Status infer_global_average_pool(InferenceContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.shape.size() < 2) {
    return absl::InvalidArgumentError(
        str_cat("X ", shape_to_string(x.shape), " must be N x C x D1 ... Dn (rank >= 2)"));
  }
  Shape out(x.shape.size(), 1);
  out[0] = x.shape[0];
  out[1] = x.shape[1];
  ctx.set_output(0, TensorType{x.dtype, out});
  return absl::OkStatus();
}

// Y = mean over the spatial dims: dX = dY / (D1 * ... * Dn), broadcast over them.
absl::StatusOr<Grads> global_average_pool_gradient(GradBuilder& b) {
  const Shape& x = b.input(0)->shape();
  Value* dy = b.grad_of_output(0);
  const int64_t plane = num_elements(x) / std::max<int64_t>(x[0] * x[1], 1);
  Value* scaled = b.op("Div", {dy, b.scalar(static_cast<double>(plane), dy->dtype())});
  return Grads{b.op("Expand", {scaled, b.int64s(x)})};
}

// ---- Registration --------------------------------------------------------------------------

using Ints = std::vector<int64_t>;

std::vector<AttrSpec> window_attrs() {
  return {attr("auto_pad", std::string("NOTSET")), optional_attr("kernel_shape", AttrKind::kInts),
          optional_attr("pads", AttrKind::kInts), optional_attr("strides", AttrKind::kInts)};
}

OpDef conv_def() {
  OpDef def;
  def.name = "Conv";
  // Opset 11 only reworded auto_pad (SAME gives ceil(in / stride), as before) and the group rule.
  def.since_opset = 1;
  def.summary = "N-D convolution (cross-correlation) with groups, strides, dilations and padding";
  def.inputs = {input("X", kFloatTypes), input("W", kFloatTypes), optional_input("B", kFloatTypes)};
  def.outputs = {input("Y")};
  def.attrs = window_attrs();
  def.attrs.push_back(optional_attr("dilations", AttrKind::kInts));
  def.attrs.push_back(attr("group", int64_t{1}));
  def.infer = infer_conv;
  def.autocast.category = AutocastCategory::kAllow;
  def.autocast.accumulate = DType::kF32;
  def.gradient = conv_gradient;
  def.samples = {
      {"2-D, pads 1, bias",
       {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})},
       {},
       Attributes{{"pads", Ints{1, 1, 1, 1}}},
       {f32({1, 4, 8, 8})}},
      {"1-D, strided and dilated",
       {f32({2, 4, 10}), f32({6, 4, 3})},
       {},
       Attributes{{"strides", Ints{2}}, {"dilations", Ints{2}}},
       {f32({2, 6, 3})}},
      {"2-D grouped, SAME_UPPER, stride 2",
       {f16({1, 4, 5, 5}), f16({8, 2, 3, 3})},
       {},
       Attributes{
           {"group", int64_t{2}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}},
       {f16({1, 8, 3, 3})}},
      {"3-D, VALID",
       {f32({1, 1, 4, 5, 6}), f32({2, 1, 2, 3, 3})},
       {},
       Attributes{{"auto_pad", std::string("VALID")}},
       {f32({1, 2, 3, 3, 4})}},
      {"2-D asymmetric pads, stride 2, dilation, bias",
       {f32({1, 2, 6, 7}), f32({3, 2, 2, 2}), f32({3})},
       {},
       Attributes{{"pads", Ints{1, 0, 0, 2}}, {"strides", Ints{2, 2}}, {"dilations", Ints{2, 1}}},
       {f32({1, 3, 3, 4})}},
      {"2-D depthwise, bias, bf16",
       {TensorType{DType::kBF16, {1, 3, 5, 5}}, TensorType{DType::kBF16, {3, 1, 3, 3}},
        TensorType{DType::kBF16, {3}}},
       {},
       Attributes{{"group", int64_t{3}}, {"pads", Ints{1, 1, 1, 1}}},
       {TensorType{DType::kBF16, {1, 3, 5, 5}}}},
      {"2-D SAME_LOWER stride 2, odd pad",
       {f32({2, 1, 6, 6}), f32({2, 1, 3, 3})},
       {},
       Attributes{{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2, 2}}},
       {f32({2, 2, 3, 3})}},
      {"3-D stride 2, pads",
       {f32({1, 2, 4, 4, 4}), f32({2, 2, 2, 2, 2}), f32({2})},
       {},
       Attributes{{"strides", Ints{2, 2, 2}}, {"pads", Ints{1, 1, 1, 1, 1, 1}}},
       {f32({1, 2, 3, 3, 3})}},
  };
  return def;
}

OpDef max_pool_def() {
  OpDef def;
  def.name = "MaxPool";
  // Opset 8 added Indices and storage_order; 10 added ceil_mode and dilations with defaults that
  // keep 8's shapes; 11 only reworded auto_pad; 12 added int8/uint8.
  def.since_opset = 8;
  def.summary = "max over sliding windows; optional flat argmax indices";
  def.inputs = {
      input("X", {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8, DType::kU8})};
  def.outputs = {input("Y"), optional_input("Indices")};
  def.attrs = window_attrs();
  def.attrs.push_back(optional_attr("dilations", AttrKind::kInts));
  def.attrs.push_back(flag_attr("ceil_mode", 0));
  def.attrs.push_back(flag_attr("storage_order", 0));
  def.infer = infer_max_pool;
  // Max selects one of its inputs: exact in any dtype.
  def.autocast.category = AutocastCategory::kClear;
  def.gradient = max_pool_gradient;
  def.samples = {
      {"2-D 2x2 stride 2",
       {f32({1, 3, 8, 8})},
       {},
       Attributes{{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}},
       {f32({1, 3, 4, 4})}},
      {"2-D ceil_mode",
       {f32({1, 1, 4, 4})},
       {},
       Attributes{{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}},
       {f32({1, 1, 2, 2})}},
      {"2-D ceil_mode, kernel larger than the input",
       {f32({1, 2, 7, 7})},
       {},
       Attributes{{"kernel_shape", Ints{8, 8}}, {"strides", Ints{8, 8}}, {"ceil_mode", int64_t{1}}},
       {f32({1, 2, 1, 1})}},
      {"2-D pads with indices",
       {f16({1, 1, 5, 5})},
       {},
       Attributes{{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}},
       {f16({1, 1, 5, 5}), TensorType{DType::kI64, {1, 1, 5, 5}}}},
      {"1-D uint8 strided",
       {TensorType{DType::kU8, {1, 2, 7}}},
       {},
       Attributes{{"kernel_shape", Ints{3}}, {"strides", Ints{2}}},
       {TensorType{DType::kU8, {1, 2, 3}}}},
      {"3-D dilated, asymmetric pads",
       {f32({1, 1, 4, 4, 4})},
       {},
       Attributes{{"kernel_shape", Ints{2, 2, 2}},
                  {"strides", Ints{1, 2, 2}},
                  {"dilations", Ints{2, 1, 1}},
                  {"pads", Ints{1, 0, 0, 0, 1, 1}}},
       {f32({1, 1, 3, 2, 2})}},
      {"2-D overlapping SAME_UPPER",
       {f32({1, 2, 5, 5})},
       {},
       Attributes{{"kernel_shape", Ints{3, 3}}, {"auto_pad", std::string("SAME_UPPER")}},
       {f32({1, 2, 5, 5})}},
  };
  return def;
}

OpDef average_pool_def(int since_opset, int until_opset, bool with_dilations) {
  OpDef def;
  def.name = "AveragePool";
  def.since_opset = since_opset;
  def.until_opset = until_opset;
  def.summary = "mean over sliding windows, padding counted or not (count_include_pad)";
  def.inputs = {input("X", kFloatTypes)};
  def.outputs = {input("Y")};
  def.attrs = window_attrs();
  def.attrs.push_back(flag_attr("ceil_mode", 0));
  def.attrs.push_back(flag_attr("count_include_pad", 0));
  if (with_dilations) def.attrs.push_back(optional_attr("dilations", AttrKind::kInts));
  def.infer = infer_average_pool;
  def.autocast.category = AutocastCategory::kFollow;
  def.gradient = average_pool_gradient;
  def.samples = {
      {"2-D pads, count_include_pad",
       {f32({1, 2, 6, 6})},
       {},
       Attributes{{"kernel_shape", Ints{3, 3}},
                  {"pads", Ints{2, 2, 2, 2}},
                  {"count_include_pad", int64_t{1}}},
       {f32({1, 2, 8, 8})}},
      {"2-D SAME_LOWER",
       {f16({1, 2, 5, 5})},
       {},
       Attributes{{"kernel_shape", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}},
       {f16({1, 2, 5, 5})}},
      {"2-D ceil_mode, kernel larger than the input",
       {f32({1, 2, 7, 7})},
       {},
       Attributes{{"kernel_shape", Ints{8, 8}},
                  {"strides", Ints{8, 8}},
                  {"ceil_mode", int64_t{1}},
                  {"count_include_pad", int64_t{1}}},
       {f32({1, 2, 1, 1})}},
      {"3-D ceil_mode stride 2",
       {f32({1, 1, 5, 5, 5})},
       {},
       Attributes{
           {"kernel_shape", Ints{2, 2, 2}}, {"strides", Ints{2, 2, 2}}, {"ceil_mode", int64_t{1}}},
       {f32({1, 1, 3, 3, 3})}},
      {"2-D ceil_mode, asymmetric pads, count_include_pad",
       {f32({1, 1, 5, 6})},
       {},
       Attributes{{"kernel_shape", Ints{3, 2}},
                  {"strides", Ints{2, 2}},
                  {"pads", Ints{1, 0, 0, 1}},
                  {"ceil_mode", int64_t{1}},
                  {"count_include_pad", int64_t{1}}},
       {f32({1, 1, 3, 3})}},
      {"1-D pads, padding not counted",
       {f32({2, 3, 7})},
       {},
       Attributes{{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}},
       {f32({2, 3, 4})}},
  };
  if (with_dilations) {
    def.samples.push_back({"2-D dilated",
                           {f32({1, 1, 4, 4})},
                           {},
                           Attributes{{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}},
                           {f32({1, 1, 2, 2})}});
  }
  return def;
}

OpDef global_average_pool_def() {
  OpDef def;
  def.name = "GlobalAveragePool";
  def.since_opset = 1;
  def.summary = "mean over all spatial dims, kept as size-1 dims";
  def.inputs = {input("X", kFloatTypes)};
  def.outputs = {input("Y")};
  def.infer = infer_global_average_pool;
  // A long sum: kept in fp32.
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = global_average_pool_gradient;
  def.samples = {
      {"2-D", {f32({1, 3, 5, 5})}, {}, {}, {f32({1, 3, 1, 1})}},
      {"1-D bf16",
       {TensorType{DType::kBF16, {2, 8, 4}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 8, 1}}}},
      {"3-D", {f32({1, 2, 2, 3, 2})}, {}, {}, {f32({1, 2, 1, 1, 1})}},
  };
  return def;
}

void register_conv_ops(OpRegistry& registry) {
  registry.add(conv_def());
  registry.add(max_pool_def());
  // Opset 11 is the first whose auto_pad and ceil_mode shapes we implement; 19 adds dilations.
  registry.add(average_pool_def(11, 18, /*with_dilations=*/false));
  registry.add(average_pool_def(19, kLatestOpset, /*with_dilations=*/true));
  registry.add(global_average_pool_def());
}

const OpRegistration kConvOps(&register_conv_ops);

}  // namespace
}  // namespace ampc::ops
