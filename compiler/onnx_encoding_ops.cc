// Position and class encodings expanded at import into the ops ONNX defines them with:
// RotaryEmbedding (opset 23) and OneHot (9), so every backend runs them and autodiff
// differentiates them with no new kernels.
#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {

// One-hot: output[..., k, ...] (k on `axis`) = values[1] where k equals the index (negative
// indices counting from depth), values[0] elsewhere, so an index outside [-depth, depth) gives
// a row of values[0]. Depth must be known at compile time: it is the new axis's size.
absl::Status lower_one_hot(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"axis", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * indices, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * depth_value, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * values, tensor_input(proto, 2, label, sink));
  const Tensor* depth_known = sink.known_value(depth_value);
  if (depth_known == nullptr || depth_known->num_elements() != 1) {
    return absl::UnimplementedError(
        str_cat(label, ": depth '", proto.input(1), "' must be one value known at compile time"));
  }
  const double depth_double = depth_known->element_as_double(0);
  const auto depth = static_cast<int64_t>(depth_double);
  if (!(depth_double >= 1) || depth_double > 1e9) {
    return invalid(str_cat(label, ": depth ", depth_double, " is not a positive count"));
  }
  if (values->type().shape.size() != 1 || values->type().shape[0] != 2) {
    return invalid(str_cat(label, ": values is ", type_to_string(values->type()),
                           "; it must be [off_value, on_value]"));
  }
  if (indices->dtype() == DType::kBool) {
    return invalid(str_cat(label, ": indices are bool; they must be numbers"));
  }
  const auto out_rank = static_cast<int64_t>(indices->type().shape.size()) + 1;
  int64_t axis = attrs.i("axis", -1);
  if (axis < -out_rank || axis >= out_rank) {
    return invalid(
        str_cat(label, ": axis ", axis, " is out of range for an output of rank ", out_rank));
  }
  if (axis < 0) axis += out_rank;
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  // Float indices are truncated to integers, as ONNX says.
  AMPC_ASSIGN_OR_RETURN(Value * index, e.cast(indices, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.constant(Tensor::from_i64({}, {0})));
  AMPC_ASSIGN_OR_RETURN(Value * count, e.constant(Tensor::from_i64({}, {depth})));
  AMPC_ASSIGN_OR_RETURN(Value * negative, e.op("Less", {index, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * wrapped, e.op("Add", {index, count}));
  AMPC_ASSIGN_OR_RETURN(index, e.op("Where", {negative, wrapped, index}));
  AMPC_ASSIGN_OR_RETURN(
      index, e.op("Unsqueeze", {index}, {{"axes", AttrValue(std::vector<int64_t>{axis})}}));
  std::vector<int64_t> classes(depth);
  for (int64_t k = 0; k < depth; ++k) classes[k] = k;
  Shape classes_shape(out_rank, 1);
  classes_shape[axis] = depth;
  AMPC_ASSIGN_OR_RETURN(Value * all, e.constant(Tensor::from_i64(classes_shape, classes)));
  AMPC_ASSIGN_OR_RETURN(Value * hot, e.op("Equal", {index, all}));
  AMPC_ASSIGN_OR_RETURN(Value * first, e.constant(Tensor::from_i64({}, {0})));
  AMPC_ASSIGN_OR_RETURN(Value * second, e.constant(Tensor::from_i64({}, {1})));
  AMPC_ASSIGN_OR_RETURN(Value * off, e.op("Gather", {values, first}));
  AMPC_ASSIGN_OR_RETURN(Value * on, e.op("Gather", {values, second}));
  return e.op("Where", {hot, on, off}, {}, e.output(0)).status();
}

namespace {

// X[..., begin:end] on the last axis (Slice's inputs form, opset 10 and later).
absl::StatusOr<Value*> last_axis_slice(Emitter& e, Value* x, int64_t begin, int64_t end) {
  AMPC_ASSIGN_OR_RETURN(Value * starts, e.constant(Tensor::from_i64({1}, {begin})));
  AMPC_ASSIGN_OR_RETURN(Value * ends, e.constant(Tensor::from_i64({1}, {end})));
  AMPC_ASSIGN_OR_RETURN(Value * axes, e.constant(Tensor::from_i64({1}, {-1})));
  return e.op("Slice", {x, starts, ends, axes});
}

}  // namespace

// Rotary position embedding (opset 23), as ONNX defines it: the first rotary_embedding_dim
// features of each head are rotated in pairs (halves, or neighbours when interleaved) by the
// angles whose cosines and sines the caches hold, real = cos x1 - sin x2 and
// imag = sin x1 + cos x2; the other features pass through.
absl::Status lower_rotary_embedding(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"interleaved", onnx::AttributeProto::INT},
                                         {"num_heads", onnx::AttributeProto::INT},
                                         {"rotary_embedding_dim", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * cos_cache, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * sin_cache, tensor_input(proto, 2, label, sink));
  const Shape& xs = x->type().shape;
  if (!is_arithmetic_float(x->dtype()) || (xs.size() != 3 && xs.size() != 4)) {
    return invalid(str_cat(label, ": X is ", type_to_string(x->type()),
                           "; it must be float [batch, heads, seq, head_size] or [batch, seq, "
                           "hidden]"));
  }
  if (cos_cache->dtype() != x->dtype() || sin_cache->dtype() != x->dtype()) {
    return invalid(
        str_cat(label, ": cos_cache and sin_cache must have X's type ", dtype_name(x->dtype())));
  }
  const int64_t batch = xs[0];
  const int64_t seq = xs.size() == 4 ? xs[2] : xs[1];
  int64_t heads = xs.size() == 4 ? xs[1] : attrs.i("num_heads", 0);
  if (xs.size() == 3 && (heads < 1 || xs[2] % heads != 0)) {
    return invalid(str_cat(label, ": 3-D X ", shape_to_string(xs),
                           " needs num_heads dividing its hidden size"));
  }
  const int64_t head_size = xs.size() == 4 ? xs[3] : xs[2] / heads;
  int64_t rotary = attrs.i("rotary_embedding_dim", 0);
  if (rotary == 0) rotary = head_size;
  if (rotary < 2 || rotary > head_size || rotary % 2 != 0) {
    return invalid(str_cat(label, ": rotary_embedding_dim ", rotary,
                           " must be even and at most the head size ", head_size));
  }
  const int64_t half = rotary / 2;
  Emitter e(proto, label, sink);
  // The caches as [batch, seq, half], picked by position_ids when given.
  Value* cos = cos_cache;
  Value* sin = sin_cache;
  if (has_input(proto, 3)) {
    AMPC_ASSIGN_OR_RETURN(Value * positions, tensor_input(proto, 3, label, sink));
    if (positions->type().shape != Shape{batch, seq} || cos_cache->type().shape.size() != 2) {
      return invalid(str_cat(label, ": position_ids ", type_to_string(positions->type()),
                             " must be [", batch, ", ", seq, "] and the caches [positions, ",
                             "features]"));
    }
    AMPC_ASSIGN_OR_RETURN(cos, e.op("Gather", {cos_cache, positions}));
    AMPC_ASSIGN_OR_RETURN(sin, e.op("Gather", {sin_cache, positions}));
  }
  const Shape& cs = cos->type().shape;
  if (cs.size() != 3 || cs[0] != batch || cs[1] != seq || cs[2] < half || sin->type().shape != cs) {
    return invalid(str_cat(label, ": the caches give ", shape_to_string(cs), " and ",
                           shape_to_string(sin->type().shape), "; they must be [", batch, ", ", seq,
                           ", >= ", half, "]"));
  }
  if (cs[2] != half) {
    AMPC_ASSIGN_OR_RETURN(cos, last_axis_slice(e, cos, 0, half));
    AMPC_ASSIGN_OR_RETURN(sin, last_axis_slice(e, sin, 0, half));
  }
  // Heads on axis 1 ([batch, heads, seq, head_size]) or 2 ([batch, seq, heads, head_size] for
  // 3-D X); the caches get a unit axis there.
  Value* heads_x = x;
  const int64_t head_axis = xs.size() == 4 ? 1 : 2;
  if (xs.size() == 3) {
    AMPC_ASSIGN_OR_RETURN(heads_x, e.reshape(x, {batch, seq, heads, head_size}));
  }
  const Attributes unsqueeze = {{"axes", AttrValue(std::vector<int64_t>{head_axis})}};
  AMPC_ASSIGN_OR_RETURN(cos, e.op("Unsqueeze", {cos}, unsqueeze));
  AMPC_ASSIGN_OR_RETURN(sin, e.op("Unsqueeze", {sin}, unsqueeze));
  Value* rotated = heads_x;
  if (rotary != head_size) {
    AMPC_ASSIGN_OR_RETURN(rotated, last_axis_slice(e, heads_x, 0, rotary));
  }
  Shape four = heads_x->type().shape;
  four[3] = rotary;
  const bool interleaved = attrs.i("interleaved", 0) != 0;
  Value* x1 = nullptr;
  Value* x2 = nullptr;
  if (interleaved) {
    Shape pairs = four;
    pairs[3] = half;
    pairs.push_back(2);
    AMPC_ASSIGN_OR_RETURN(Value * paired, e.reshape(rotated, pairs));
    AMPC_ASSIGN_OR_RETURN(Value * first, e.constant(Tensor::from_i64({}, {0})));
    AMPC_ASSIGN_OR_RETURN(Value * second, e.constant(Tensor::from_i64({}, {1})));
    AMPC_ASSIGN_OR_RETURN(x1, e.op("Gather", {paired, first}, {{"axis", AttrValue(int64_t{4})}}));
    AMPC_ASSIGN_OR_RETURN(x2, e.op("Gather", {paired, second}, {{"axis", AttrValue(int64_t{4})}}));
  } else {
    AMPC_ASSIGN_OR_RETURN(x1, last_axis_slice(e, rotated, 0, half));
    AMPC_ASSIGN_OR_RETURN(x2, last_axis_slice(e, rotated, half, rotary));
  }
  AMPC_ASSIGN_OR_RETURN(Value * cos_x1, e.op("Mul", {cos, x1}));
  AMPC_ASSIGN_OR_RETURN(Value * sin_x2, e.op("Mul", {sin, x2}));
  AMPC_ASSIGN_OR_RETURN(Value * real, e.op("Sub", {cos_x1, sin_x2}));
  AMPC_ASSIGN_OR_RETURN(Value * sin_x1, e.op("Mul", {sin, x1}));
  AMPC_ASSIGN_OR_RETURN(Value * cos_x2, e.op("Mul", {cos, x2}));
  AMPC_ASSIGN_OR_RETURN(Value * imag, e.op("Add", {sin_x1, cos_x2}));
  Value* joined = nullptr;
  if (interleaved) {
    const Attributes last = {{"axes", AttrValue(std::vector<int64_t>{4})}};
    AMPC_ASSIGN_OR_RETURN(Value * real_pairs, e.op("Unsqueeze", {real}, last));
    AMPC_ASSIGN_OR_RETURN(Value * imag_pairs, e.op("Unsqueeze", {imag}, last));
    AMPC_ASSIGN_OR_RETURN(
        Value * pairs, e.op("Concat", {real_pairs, imag_pairs}, {{"axis", AttrValue(int64_t{4})}}));
    AMPC_ASSIGN_OR_RETURN(joined, e.reshape(pairs, four));
  } else {
    AMPC_ASSIGN_OR_RETURN(joined, e.op("Concat", {real, imag}, {{"axis", AttrValue(int64_t{3})}}));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  const bool reshape_back = xs.size() == 3;
  if (rotary != head_size) {
    AMPC_ASSIGN_OR_RETURN(Value * passed, last_axis_slice(e, heads_x, rotary, head_size));
    AMPC_ASSIGN_OR_RETURN(joined,
                          e.op("Concat", {joined, passed}, {{"axis", AttrValue(int64_t{3})}},
                               reshape_back ? "" : e.output(0)));
    if (!reshape_back) return absl::OkStatus();
  } else if (!reshape_back) {
    return e.op("Identity", {joined}, {}, e.output(0)).status();
  }
  AMPC_ASSIGN_OR_RETURN(Value * to, e.constant(Tensor::from_i64({3}, xs)));
  return e.op("Reshape", {joined, to}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering
