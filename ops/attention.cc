// ampc.Attention and its gradient ampc.AttentionGrad: scaled dot-product attention as one node,
// which passes/fuse_attention.cc makes of the pattern MatMul, scale, mask, Softmax, MatMul.
//
// ampc.Attention(Q [..., T, D], Kt [..., D, S], V [..., S, Dv], mask?) -> (Y [..., T, Dv],
//                                                                         LSE [..., T])
//   s_ij  = scale * (Q_i . Kt_:j), then masked: a bool mask broadcast to [..., T, S] keeps
//           (i, j) where it equals `mask_keep` and sets s_ij = -inf elsewhere; a float mask is
//           added (a bias of 0 and -inf, or any other).
//   Y_i   = sum_j softmax_j(s_i:) V_j;  LSE_i = log(sum_j exp(s_ij)), which the gradient reads so
//           that it never keeps the T x S probabilities.
//   Q, Kt and V share one float type, which is Y's; LSE is f32 (f64 for f64). The batch dims of
//   Q, Kt and V are equal. Kt is the keys already transposed, as MatMul reads them in the pattern.
//   A row whose every key is masked out gives NaN, as Softmax of a row of -inf does; with
//   `safe` set it gives Y_i = 0, LSE_i = -inf and no gradient, as PyTorch's safe softmax
//   (Where(IsNaN(Softmax(s)), 0, .), which its exports write for a masked attention) does.
// ampc.AttentionGrad(dY, Q, Kt, V, Y, LSE, mask?) -> (dQ, dKt, dV), with
//   P_ij = exp(s_ij - LSE_i) (recomputed from the row's scores where LSE_i is too large to hold
//   log(sum) to f32 precision: numeric::lse_holds_log_sum), dP_ij = dY_i . V_j,
//   d_i = dY_i . Y_i, dS_ij = P_ij (dP_ij - d_i):
//   dQ_i = scale sum_j dS_ij Kt_:j, dKt_:j = scale sum_i dS_ij Q_i, dV_j = sum_i P_ij dY_i.
// Numerics (runtime/cpu/attention.cc): every element is read in f32 (f64 for f64), dots and sums
// accumulate in that type and each result is rounded once on store: the unfused graph rounds the
// scores, the probabilities and their casts besides, so the two agree within a GEMM tolerance.
#include <limits>
#include <vector>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status check_batch_dims(const TensorType& q, const TensorType& other, const char* name) {
  const Shape& a = q.shape;
  const Shape& b = other.shape;
  if (b.size() != a.size() || !std::equal(a.begin(), a.end() - 2, b.begin())) {
    return absl::InvalidArgumentError(str_cat(name, " ", type_to_string(other),
                                              " does not have the batch dims of Q ",
                                              type_to_string(q)));
  }
  if (other.dtype != q.dtype) {
    return absl::InvalidArgumentError(
        str_cat(name, " ", type_to_string(other), " must have Q's dtype ", dtype_name(q.dtype)));
  }
  return absl::OkStatus();
}

// Checks Q, Kt, V (operands first .. first+2) and the mask, and returns Y's type.
absl::StatusOr<TensorType> infer_operands(const InferenceContext& ctx, int first, int mask) {
  const TensorType& q = ctx.input_type(first);
  const TensorType& kt = ctx.input_type(first + 1);
  const TensorType& v = ctx.input_type(first + 2);
  if (q.shape.size() < 2) {
    return absl::InvalidArgumentError(str_cat("Q is ", type_to_string(q), "; it needs rank >= 2"));
  }
  AMPC_RETURN_IF_ERROR(check_batch_dims(q, kt, "Kt"));
  AMPC_RETURN_IF_ERROR(check_batch_dims(q, v, "V"));
  const size_t r = q.shape.size();
  if (kt.shape[r - 2] != q.shape[r - 1] || v.shape[r - 2] != kt.shape[r - 1]) {
    return absl::InvalidArgumentError(str_cat("Q ", type_to_string(q), ", Kt ", type_to_string(kt),
                                              " and V ", type_to_string(v),
                                              " are not [.., T, D], [.., D, S] and [.., S, Dv]"));
  }
  if (ctx.has_input(mask)) {
    const TensorType& m = ctx.input_type(mask);
    Shape scores = q.shape;
    scores.back() = kt.shape.back();
    if (!broadcasts_to(m.shape, scores)) {
      return absl::InvalidArgumentError(str_cat("the mask ", type_to_string(m),
                                                " does not broadcast to the scores' shape ",
                                                shape_to_string(scores)));
    }
  }
  Shape y = q.shape;
  y.back() = v.shape.back();
  return TensorType{q.dtype, y};
}

DType lse_dtype(DType dtype) { return dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

absl::Status infer_attention(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const TensorType y, infer_operands(ctx, 0, 3));
  const TensorType& q = ctx.input_type(0);
  ctx.set_output(0, y);
  if (ctx.has_output(1)) {
    ctx.set_output(1, TensorType{lse_dtype(q.dtype), Shape(q.shape.begin(), q.shape.end() - 1)});
  }
  return absl::OkStatus();
}

absl::Status infer_attention_grad(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const TensorType y, infer_operands(ctx, 1, 6));
  const TensorType& q = ctx.input_type(1);
  for (int i : {0, 4}) {
    if (ctx.input_type(i) != y) {
      return absl::InvalidArgumentError(str_cat(i == 0 ? "dY " : "Y ",
                                                type_to_string(ctx.input_type(i)), " must be ",
                                                type_to_string(y)));
    }
  }
  const TensorType lse{lse_dtype(q.dtype), Shape(q.shape.begin(), q.shape.end() - 1)};
  if (ctx.input_type(5) != lse) {
    return absl::InvalidArgumentError(
        str_cat("LSE ", type_to_string(ctx.input_type(5)), " must be ", type_to_string(lse)));
  }
  for (int i = 0; i < 3; ++i) ctx.set_output(i, ctx.input_type(i + 1));
  return absl::OkStatus();
}

absl::StatusOr<Grads> attention_grad(GradBuilder& b) {
  const Node& node = b.node();
  std::vector<Value*> operands = {b.grad_of_output(0), b.input(0),  b.input(1),
                                  b.input(2),          b.output(0), b.output(1)};
  if (b.has_input(3)) operands.push_back(b.input(3));
  std::vector<Value*> grads = b.op_n(kAmpcDomain, "AttentionGrad", operands, 3,
                                     {{"scale", node.float_attr("scale")},
                                      {"mask_keep", node.int_attr("mask_keep")},
                                      {"safe", node.int_attr("safe")}});
  if (b.has_input(3)) grads.push_back(nullptr);
  return grads;
}

const std::vector<DType> kMaskTypes = {DType::kBool, DType::kF32, DType::kF16, DType::kBF16,
                                       DType::kF64};

// [T, S] with (i, j) kept for j <= i.
Tensor causal_mask(int64_t t, int64_t s) {
  Tensor mask(TensorType{DType::kBool, {t, s}});
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < s; ++j) mask.set_element_i64(i * s + j, j <= i ? 1 : 0);
  }
  return mask;
}

// [T, S] with (i, j) kept for j <= i, except in row 0, which keeps no key.
Tensor causal_mask_with_empty_row(int64_t t, int64_t s) {
  Tensor mask = causal_mask(t, s);
  mask.set_element_i64(0, 0);
  return mask;
}

// [S] additive: 0 for the first `kept` keys, -inf for the rest (padding).
Tensor key_padding_bias(int64_t s, int64_t kept) {
  std::vector<double> bias(s, 0.0);
  for (int64_t j = kept; j < s; ++j) bias[j] = -std::numeric_limits<double>::infinity();
  return Tensor::from_doubles(DType::kF32, {s}, bias);
}

OpDef attention() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "Attention";
  def.summary = "softmax(scale * Q Kt, masked) V in one pass over the keys, and the row LSE";
  def.inputs = {input("Q", kFloatTypes), input("Kt", kFloatTypes), input("V", kFloatTypes),
                optional_input("mask", kMaskTypes)};
  def.outputs = {input("Y"), input("LSE")};
  def.attrs = {attr("scale", 1.0f), flag_attr("mask_keep", 1), flag_attr("safe", 0)};
  def.infer = infer_attention;
  // Its inputs are the MatMuls' (low precision under autocast); the softmax inside is f32.
  def.autocast.category = AutocastCategory::kDeny;
  def.gradient = attention_grad;
  def.no_gradient_inputs = {3};
  def.no_gradient_outputs = {1};
  def.samples = {
      {"causal bool mask, 2 heads",
       {typed(DType::kF32, {2, 4, 3}), typed(DType::kF32, {2, 3, 4}), typed(DType::kF32, {2, 4, 5}),
        typed(DType::kBool, {4, 4})},
       {{3, causal_mask(4, 4)}},
       {{"scale", 0.5f}},
       {typed(DType::kF32, {2, 4, 5}), typed(DType::kF32, {2, 4})}},
      {"no mask, keys longer than queries",
       {typed(DType::kF32, {1, 2, 3, 2}), typed(DType::kF32, {1, 2, 2, 5}),
        typed(DType::kF32, {1, 2, 5, 3})},
       {},
       {{"scale", 0.7f}},
       {typed(DType::kF32, {1, 2, 3, 3}), typed(DType::kF32, {1, 2, 3})}},
      {"additive mask per key",
       {typed(DType::kF32, {3, 2}), typed(DType::kF32, {2, 4}), typed(DType::kF32, {4, 2}),
        typed(DType::kF32, {4})},
       {},
       {},
       {typed(DType::kF32, {3, 2}), typed(DType::kF32, {3})}},
      // Over 64 queries, the CPU kernel's tile: the second tile reads more keys than the first.
      {"causal bool mask over two query tiles",
       {typed(DType::kF32, {1, 70, 2}), typed(DType::kF32, {1, 2, 70}),
        typed(DType::kF32, {1, 70, 3}), typed(DType::kBool, {70, 70})},
       {{3, causal_mask(70, 70)}},
       {{"scale", 0.5f}},
       {typed(DType::kF32, {1, 70, 3}), typed(DType::kF32, {1, 70})}},
      {"padded keys, an additive mask over two query tiles",
       {typed(DType::kF32, {66, 2}), typed(DType::kF32, {2, 70}), typed(DType::kF32, {70, 2}),
        typed(DType::kF32, {70})},
       {{3, key_padding_bias(70, 61)}},
       {},
       {typed(DType::kF32, {66, 2}), typed(DType::kF32, {66})}},
      {"safe, a query row with no key",
       {typed(DType::kF32, {2, 4, 3}), typed(DType::kF32, {2, 3, 4}), typed(DType::kF32, {2, 4, 5}),
        typed(DType::kBool, {4, 4})},
       {{3, causal_mask_with_empty_row(4, 4)}},
       {{"scale", 0.5f}, {"safe", int64_t{1}}},
       {typed(DType::kF32, {2, 4, 5}), typed(DType::kF32, {2, 4})}},
  };
  return def;
}

OpDef attention_grad_def() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "AttentionGrad";
  def.summary = "dQ, dKt, dV of ampc.Attention, recomputing the probabilities from LSE";
  def.inputs = {input("dY", kFloatTypes),          input("Q", kFloatTypes),
                input("Kt", kFloatTypes),          input("V", kFloatTypes),
                input("Y", kFloatTypes),           input("LSE", kFloatTypes),
                optional_input("mask", kMaskTypes)};
  def.outputs = {input("dQ"), input("dKt"), input("dV")};
  def.attrs = {attr("scale", 1.0f), flag_attr("mask_keep", 1), flag_attr("safe", 0)};
  def.infer = infer_attention_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.no_gradient_inputs = {0, 1, 2, 3, 4, 5};
  const TensorType q = typed(DType::kF16, {2, 4, 3});
  const TensorType kt = typed(DType::kF16, {2, 3, 4});
  const TensorType y = typed(DType::kF16, {2, 4, 5});
  const TensorType v = typed(DType::kF16, {2, 4, 5});
  def.samples = {
      {"f16 with a causal mask",
       {y, q, kt, v, y, typed(DType::kF32, {2, 4}), typed(DType::kBool, {4, 4})},
       {{6, causal_mask(4, 4)}},
       {{"scale", 0.5f}},
       {q, kt, v}},
      {"f32 without a mask",
       {typed(DType::kF32, {3, 2}), typed(DType::kF32, {3, 4}), typed(DType::kF32, {4, 5}),
        typed(DType::kF32, {5, 2}), typed(DType::kF32, {3, 2}), typed(DType::kF32, {3})},
       {},
       {},
       {typed(DType::kF32, {3, 4}), typed(DType::kF32, {4, 5}), typed(DType::kF32, {5, 2})}},
  };
  return def;
}

void register_attention_ops(OpRegistry& registry) {
  registry.add(attention());
  registry.add(attention_grad_def());
}

const OpRegistration kAttentionOps(&register_attention_ops);

}  // namespace
}  // namespace ampc::ops
