// Attention (opsets 23 to 25) expanded at import into the ops ONNX defines it with: the scores'
// MatMul, softcap, the causal, sliding-window, cache-length and mask biases, Softmax with its
// empty-row guard and the MatMul by V, so that every backend runs it and autodiff differentiates
// it; the training step fuses it back into ampc.Attention (passes/fuse_attention.cc).
#include <cmath>
#include <limits>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {

// Y = softmax(softcap(Q K^T * scale) + causal bias + mask) V over Q, K, V of shape
// [B, heads, S, H] (or [B, S, heads * H] with q_num_heads and kv_num_heads), K and V heads
// repeated for grouped-query attention, past_key/past_value concatenated in front of K and V.
absl::Status lower_attention(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"is_causal", onnx::AttributeProto::INT},
                                         {"kv_num_heads", onnx::AttributeProto::INT},
                                         {"left_window_size", onnx::AttributeProto::INT},
                                         {"right_window_size", onnx::AttributeProto::INT},
                                         {"q_num_heads", onnx::AttributeProto::INT},
                                         {"qk_matmul_output_mode", onnx::AttributeProto::INT},
                                         {"scale", onnx::AttributeProto::FLOAT},
                                         {"softcap", onnx::AttributeProto::FLOAT},
                                         {"softmax_precision", onnx::AttributeProto::INT}}));
  // Opset 24 adds input 6 (nonpad_kv_seqlen), 25 the sliding window's bounds.
  const int64_t opset = sink.opset();
  const int max_inputs = opset >= 24 ? 7 : 6;
  if (proto.input_size() > max_inputs) {
    return invalid(str_cat(label, " has ", proto.input_size(), " inputs; Attention has ",
                           max_inputs, " at opset ", opset));
  }
  int64_t window[2] = {-1, -1};  // left, right; -1 leaves that side unbounded
  for (int side = 0; side < 2; ++side) {
    const char* name = side == 0 ? "left_window_size" : "right_window_size";
    if (!attrs.has(name)) continue;
    if (opset < 25) {
      return invalid(str_cat(label, ": attribute '", name,
                             "' is an attribute of Attention from opset 25; the model imports "
                             "opset ",
                             opset));
    }
    window[side] = attrs.i(name, -1);
    if (window[side] < -1) {
      return invalid(str_cat(label, ": attribute '", name, "' is ", window[side],
                             "; it must be -1 (unbounded) or >= 0"));
    }
  }
  const bool windowed = window[0] >= 0 || window[1] >= 0;
  if (proto.output_size() > 3 && !proto.output(3).empty()) {
    return absl::UnimplementedError(
        str_cat(label,
                ": output 3 (qk_matmul_output) is not supported; it is a debugging "
                "output"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * q, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * k, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * v, tensor_input(proto, 2, label, sink));
  const DType dtype = q->dtype();
  if (!is_arithmetic_float(dtype) || k->dtype() != dtype || v->dtype() != dtype) {
    return invalid(str_cat(label, ": Q, K and V must share one float type, got ",
                           type_to_string(q->type()), ", ", type_to_string(k->type()), " and ",
                           type_to_string(v->type())));
  }
  const size_t rank = q->type().shape.size();
  if ((rank != 3 && rank != 4) || k->type().shape.size() != rank ||
      v->type().shape.size() != rank) {
    return invalid(str_cat(label, ": Q, K and V must all be 3-D or all 4-D, got ",
                           type_to_string(q->type()), ", ", type_to_string(k->type()), " and ",
                           type_to_string(v->type())));
  }
  Emitter e(proto, label, sink);

  // To [B, heads, S, H].
  const bool flat = rank == 3;
  const int64_t batch = q->type().shape[0];
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  if (flat) {
    q_heads = attrs.i("q_num_heads", 0);
    kv_heads = attrs.i("kv_num_heads", 0);
    if (q_heads <= 0 || kv_heads <= 0) {
      return invalid(str_cat(label, ": 3-D Q, K and V need q_num_heads and kv_num_heads"));
    }
    const auto split_heads = [&](Value* t, int64_t heads) -> absl::StatusOr<Value*> {
      const Shape& s = t->type().shape;
      if (s[2] % heads != 0) {
        return invalid(str_cat(label, ": ", type_to_string(t->type()), " does not split into ",
                               heads, " heads"));
      }
      AMPC_ASSIGN_OR_RETURN(Value * r, e.reshape(t, {s[0], s[1], heads, s[2] / heads}));
      return e.transpose(r, {0, 2, 1, 3});
    };
    AMPC_ASSIGN_OR_RETURN(q, split_heads(q, q_heads));
    AMPC_ASSIGN_OR_RETURN(k, split_heads(k, kv_heads));
    AMPC_ASSIGN_OR_RETURN(v, split_heads(v, kv_heads));
  } else {
    q_heads = q->type().shape[1];
    kv_heads = k->type().shape[1];
  }
  if (v->type().shape[1] != kv_heads || kv_heads <= 0 || q_heads % kv_heads != 0) {
    return invalid(str_cat(label, ": ", q_heads, " query heads cannot be grouped over ", kv_heads,
                           " key and ", v->type().shape[1], " value heads"));
  }
  const int64_t head_size = q->type().shape[3];
  if (k->type().shape[3] != head_size || k->type().shape[0] != batch ||
      v->type().shape[0] != batch || k->type().shape[2] != v->type().shape[2]) {
    return invalid(str_cat(label, ": K ", type_to_string(k->type()), " and V ",
                           type_to_string(v->type()), " do not fit Q ", type_to_string(q->type())));
  }

  // Cached keys and values come first; present_key/present_value are the concatenations.
  int64_t past = 0;
  if (has_input(proto, 4) != has_input(proto, 5)) {
    return invalid(str_cat(label, ": past_key and past_value go together"));
  }
  Value* nonpad = nullptr;
  if (has_input(proto, 6)) {
    if (has_input(proto, 4)) {
      return invalid(str_cat(label,
                             ": nonpad_kv_seqlen (an external cache's lengths) cannot be combined "
                             "with past_key and past_value"));
    }
    AMPC_ASSIGN_OR_RETURN(nonpad, tensor_input(proto, 6, label, sink));
    if (nonpad->dtype() != DType::kI64 || nonpad->type().shape != Shape{batch}) {
      return invalid(str_cat(label, ": nonpad_kv_seqlen is ", type_to_string(nonpad->type()),
                             "; it must be i64[", batch, "], one length per batch entry"));
    }
  }
  if (has_input(proto, 4)) {
    AMPC_ASSIGN_OR_RETURN(Value * past_key, tensor_input(proto, 4, label, sink));
    AMPC_ASSIGN_OR_RETURN(Value * past_value, tensor_input(proto, 5, label, sink));
    past = past_key->type().shape.size() == 4 ? past_key->type().shape[2] : 0;
    AMPC_ASSIGN_OR_RETURN(k, e.op("Concat", {past_key, k}, {{"axis", AttrValue(int64_t{2})}}));
    AMPC_ASSIGN_OR_RETURN(v, e.op("Concat", {past_value, v}, {{"axis", AttrValue(int64_t{2})}}));
  }
  for (int i : {1, 2}) {
    if (e.output(i).empty()) continue;
    AMPC_RETURN_IF_ERROR(e.op("Identity", {i == 1 ? k : v}, {}, e.output(i)).status());
  }
  const int64_t q_len = q->type().shape[2];
  const int64_t kv_len = k->type().shape[2];

  // Grouped-query attention: key/value head h serves query heads h*g .. h*g+g-1.
  if (kv_heads != q_heads) {
    const int64_t group = q_heads / kv_heads;
    const auto repeat = [&](Value* t) -> absl::StatusOr<Value*> {
      const Shape& s = t->type().shape;
      AMPC_ASSIGN_OR_RETURN(Value * u,
                            e.op("Unsqueeze", {t}, {{"axes", AttrValue(std::vector<int64_t>{2})}}));
      AMPC_ASSIGN_OR_RETURN(Value * to,
                            e.constant(Tensor::from_i64({5}, {s[0], s[1], group, s[2], s[3]})));
      AMPC_ASSIGN_OR_RETURN(Value * expanded, e.op("Expand", {u, to}));
      return e.reshape(expanded, {s[0], q_heads, s[2], s[3]});
    };
    AMPC_ASSIGN_OR_RETURN(k, repeat(k));
    AMPC_ASSIGN_OR_RETURN(v, repeat(v));
  }

  // Scores: Q and K^T each scaled by sqrt(scale), as the definition does against overflow.
  const double scale =
      attrs.has("scale") ? attrs.f("scale", 0) : 1.0 / std::sqrt(static_cast<double>(head_size));
  AMPC_ASSIGN_OR_RETURN(Value * root, e.scalar(std::sqrt(scale), dtype));
  AMPC_ASSIGN_OR_RETURN(Value * qs, e.op("Mul", {q, root}));
  AMPC_ASSIGN_OR_RETURN(Value * kt, e.transpose(k, {0, 1, 3, 2}));
  AMPC_ASSIGN_OR_RETURN(Value * kts, e.op("Mul", {kt, root}));
  AMPC_ASSIGN_OR_RETURN(Value * scores, e.op("MatMul", {qs, kts}));
  if (const float softcap = attrs.f("softcap", 0); softcap > 0) {
    AMPC_ASSIGN_OR_RETURN(Value * cap, e.scalar(softcap, dtype));
    AMPC_ASSIGN_OR_RETURN(Value * ratio, e.op("Div", {scores, cap}));
    AMPC_ASSIGN_OR_RETURN(Value * bounded, e.op("Tanh", {ratio}));
    AMPC_ASSIGN_OR_RETURN(scores, e.op("Mul", {bounded, cap}));
  }

  // Biases of 0 or -inf: causal and the sliding window, both aligned bottom-right (a query at
  // in-block index i is at absolute position p = i + offset: query i sees keys j <= p, and
  // p - left <= j <= p + right), and the keys past each batch entry's nonpad_kv_seqlen; then the
  // mask. The offset is the past's length, or with nonpad_kv_seqlen, that length - q_len per
  // batch entry, known only at run time.
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const bool causal = attrs.i("is_causal", 0) != 0;
  if (nonpad != nullptr) {
    AMPC_ASSIGN_OR_RETURN(Value * lengths, e.reshape(nonpad, {batch, 1, 1, 1}));
    AMPC_ASSIGN_OR_RETURN(Value * keys, positions(e, kv_len, 3, 4));
    AMPC_ASSIGN_OR_RETURN(Value * queries, positions(e, q_len, 2, 4));
    AMPC_ASSIGN_OR_RETURN(Value * q_count, e.constant(Tensor::from_i64({}, {q_len})));
    AMPC_ASSIGN_OR_RETURN(Value * offset, e.op("Sub", {lengths, q_count}));
    AMPC_ASSIGN_OR_RETURN(Value * at, e.op("Add", {queries, offset}));
    AMPC_ASSIGN_OR_RETURN(Value * allowed, e.op("Less", {keys, lengths}));
    const auto also = [&](Value* condition) -> absl::Status {
      AMPC_ASSIGN_OR_RETURN(allowed, e.op("And", {allowed, condition}));
      return absl::OkStatus();
    };
    const auto shifted = [&](int64_t shift) -> absl::StatusOr<Value*> {
      AMPC_ASSIGN_OR_RETURN(Value * amount, e.constant(Tensor::from_i64({}, {shift})));
      return e.op("Add", {at, amount});
    };
    if (causal) {
      AMPC_ASSIGN_OR_RETURN(Value * seen, e.op("LessOrEqual", {keys, at}));
      AMPC_RETURN_IF_ERROR(also(seen));
    }
    if (window[0] >= 0) {
      AMPC_ASSIGN_OR_RETURN(Value * first, shifted(-window[0]));
      AMPC_ASSIGN_OR_RETURN(Value * seen, e.op("LessOrEqual", {first, keys}));
      AMPC_RETURN_IF_ERROR(also(seen));
    }
    if (window[1] >= 0) {
      AMPC_ASSIGN_OR_RETURN(Value * last, shifted(window[1]));
      AMPC_ASSIGN_OR_RETURN(Value * seen, e.op("LessOrEqual", {keys, last}));
      AMPC_RETURN_IF_ERROR(also(seen));
    }
    AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, dtype));
    AMPC_ASSIGN_OR_RETURN(Value * blocked, e.scalar(neg_inf, dtype));
    AMPC_ASSIGN_OR_RETURN(Value * bias, e.op("Where", {allowed, zero, blocked}));
    AMPC_ASSIGN_OR_RETURN(scores, e.op("Add", {scores, bias}));
  } else if (causal || windowed) {
    std::vector<double> bias(q_len * kv_len, 0.0);
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t p = i + past;
      for (int64_t j = 0; j < kv_len; ++j) {
        const bool seen = (!causal || j <= p) && (window[0] < 0 || p - window[0] <= j) &&
                          (window[1] < 0 || j <= p + window[1]);
        if (!seen) bias[i * kv_len + j] = neg_inf;
      }
    }
    AMPC_ASSIGN_OR_RETURN(Value * blocks,
                          e.constant(Tensor::from_doubles(dtype, {q_len, kv_len}, bias)));
    AMPC_ASSIGN_OR_RETURN(scores, e.op("Add", {scores, blocks}));
  }
  const bool masked = has_input(proto, 3);
  if (masked) {
    AMPC_ASSIGN_OR_RETURN(Value * mask, tensor_input(proto, 3, label, sink));
    if (mask->dtype() == DType::kBool) {
      AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, dtype));
      AMPC_ASSIGN_OR_RETURN(Value * blocked, e.scalar(neg_inf, dtype));
      AMPC_ASSIGN_OR_RETURN(mask, e.op("Where", {mask, zero, blocked}));
    } else if (mask->dtype() != dtype) {
      return invalid(str_cat(label, ": attn_mask is ", dtype_name(mask->dtype()),
                             "; it must be bool or ", dtype_name(dtype), " like Q"));
    }
    // From opset 24 a mask shorter than the keys blocks the keys past its end (one of length 1
    // too, as ONNX's reference pads it); before, it broadcasts.
    const Shape& mask_shape = mask->type().shape;
    if (opset >= 24 && !mask_shape.empty() && mask_shape.back() < kv_len) {
      std::vector<int64_t> pads(2 * mask_shape.size(), 0);
      pads.back() = kv_len - mask_shape.back();
      AMPC_ASSIGN_OR_RETURN(
          Value * amounts, e.constant(Tensor::from_i64({static_cast<int64_t>(pads.size())}, pads)));
      AMPC_ASSIGN_OR_RETURN(Value * blocked, e.scalar(neg_inf, dtype));
      AMPC_ASSIGN_OR_RETURN(mask, e.op("Pad", {mask, amounts, blocked}));
    }
    AMPC_ASSIGN_OR_RETURN(scores, e.op("Add", {scores, mask}));
  }

  // Softmax over the keys, in softmax_precision when given. A query row the biases leave no key
  // (every score -inf: a mask's, a window's, or a length's) would be NaN; the definition makes it
  // zero. The guard is PyTorch's safe softmax, Where(IsNaN(p), 0, p), which the training step
  // fuses into a `safe` ampc.Attention or keeps out of the Softmax's gradient
  // (passes/safe_softmax.cc). (A causal row alone always keeps key 0.)
  DType softmax_type = dtype;
  if (attrs.has("softmax_precision")) {
    AMPC_ASSIGN_OR_RETURN(softmax_type, float_type_attr(attrs.i("softmax_precision", 1),
                                                        str_cat(label, ": softmax_precision")));
  }
  AMPC_ASSIGN_OR_RETURN(Value * wide, e.cast(scores, softmax_type));
  AMPC_ASSIGN_OR_RETURN(Value * probs, e.op("Softmax", {wide}, {{"axis", AttrValue(int64_t{-1})}}));
  if (masked || windowed || nonpad != nullptr) {
    AMPC_ASSIGN_OR_RETURN(Value * nan, e.op("IsNaN", {probs}));
    AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, softmax_type));
    AMPC_ASSIGN_OR_RETURN(probs, e.op("Where", {nan, zero, probs}));
  }
  AMPC_ASSIGN_OR_RETURN(probs, e.cast(probs, dtype));

  if (e.output(0).empty()) return absl::OkStatus();
  if (!flat) return e.op("MatMul", {probs, v}, {}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * y, e.op("MatMul", {probs, v}));
  AMPC_ASSIGN_OR_RETURN(Value * y_t, e.transpose(y, {0, 2, 1, 3}));
  const int64_t v_size = v->type().shape[3];
  AMPC_ASSIGN_OR_RETURN(Value * shape,
                        e.constant(Tensor::from_i64({3}, {batch, q_len, q_heads * v_size})));
  return e.op("Reshape", {y_t, shape}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering
