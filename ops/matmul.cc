// Matrix products: MatMul (numpy.matmul semantics) and Gemm (alpha * A' * B' + beta * C).
//
// Both are on the allow list: their inputs may be cast to low precision because the products
// accumulate in fp32 (cuBLASLt with fp32 compute; the CPU backend does the same).
#include <utility>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

const std::vector<DType> kMatMulTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                         DType::kF64, DType::kI64, DType::kI32};

// numpy.matmul: a 1-D A is a row vector and a 1-D B a column vector, and the added dim is
// dropped from the result; dims before the last two broadcast.
absl::Status infer_matmul(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& a = ctx.input_type(0).shape;
  const Shape& b = ctx.input_type(1).shape;
  if (a.empty() || b.empty()) {
    return absl::InvalidArgumentError(str_cat("MatMul does not take scalars: A is ",
                                              shape_to_string(a), ", B is ", shape_to_string(b)));
  }
  const Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  const int64_t k_a = a2[a2.size() - 1];
  const int64_t k_b = b2[b2.size() - 2];
  if (k_a != k_b) {
    return absl::InvalidArgumentError(str_cat("inner dimensions differ: A ", shape_to_string(a),
                                              " has K=", k_a, ", B ", shape_to_string(b),
                                              " has K=", k_b));
  }
  const Shape a_batch(a2.begin(), a2.end() - 2);
  const Shape b_batch(b2.begin(), b2.end() - 2);
  absl::StatusOr<Shape> batch = broadcast_shapes(a_batch, b_batch);
  if (!batch.ok()) {
    return absl::InvalidArgumentError(str_cat("batch dimensions of A ", shape_to_string(a),
                                              " and B ", shape_to_string(b),
                                              " do not broadcast: ", batch.status().message()));
  }
  Shape out = *batch;
  if (a.size() > 1) out.push_back(a2[a2.size() - 2]);
  if (b.size() > 1) out.push_back(b2[b2.size() - 1]);
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

absl::Status infer_gemm(InferenceContext& ctx) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 1));
  const Shape& a = ctx.input_type(0).shape;
  const Shape& b = ctx.input_type(1).shape;
  if (a.size() != 2 || b.size() != 2) {
    return absl::InvalidArgumentError(str_cat("Gemm takes 2-D A and B, got A ", shape_to_string(a),
                                              " and B ", shape_to_string(b)));
  }
  const bool trans_a = ctx.int_attr("transA") != 0;
  const bool trans_b = ctx.int_attr("transB") != 0;
  const int64_t m = trans_a ? a[1] : a[0];
  const int64_t k_a = trans_a ? a[0] : a[1];
  const int64_t k_b = trans_b ? b[1] : b[0];
  const int64_t n = trans_b ? b[0] : b[1];
  if (k_a != k_b) {
    return absl::InvalidArgumentError(str_cat("inner dimensions differ: A ", shape_to_string(a),
                                              " (transA=", trans_a ? 1 : 0, ") has K=", k_a, ", B ",
                                              shape_to_string(b), " (transB=", trans_b ? 1 : 0,
                                              ") has K=", k_b));
  }
  const Shape out = {m, n};
  if (ctx.has_input(2)) {
    AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 2));
    const Shape& c = ctx.input_type(2).shape;
    if (!broadcasts_to(c, out)) {
      return absl::InvalidArgumentError(
          str_cat("C ", shape_to_string(c),
                  " does not broadcast to the result [M,N] = ", shape_to_string(out)));
    }
  }
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, out});
  return absl::OkStatus();
}

// ---- Gradients -----------------------------------------------------------------------------

Value* reshape(GradBuilder& b, Value* value, const Shape& shape) {
  return value->shape() == shape ? value : b.op("Reshape", {value, b.int64s(shape)});
}

// `value` with its last two dims swapped.
Value* transpose_last_two(GradBuilder& b, Value* value) {
  std::vector<int64_t> perm(value->shape().size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return b.op("Transpose", {value}, {{"perm", perm}});
}

Value* gemm(GradBuilder& b, Value* a, Value* m, bool trans_a, bool trans_b, float alpha = 1.0f) {
  Attributes attrs;
  if (trans_a) attrs["transA"] = int64_t{1};
  if (trans_b) attrs["transB"] = int64_t{1};
  if (alpha != 1.0f) attrs["alpha"] = alpha;
  return b.op("Gemm", {a, m}, std::move(attrs));
}

// Y = A B (numpy.matmul): dA = dY B^T and dB = A^T dY per batch entry, each summed over the batch
// dims its operand was broadcast along. A 1-D A is lifted to [1, K] and a 1-D B to [K, 1] (dY
// gets the dropped dims back), and their gradients are reshaped back. Two-dimensional products
// are Gemms with transposed operands, and a batched A times a 2-D B folds the batch into M, so
// no transpose is materialized and dB is not summed from a batch of partial products.
absl::StatusOr<Grads> matmul_grad(GradBuilder& b) {
  Value* a = b.input(0);
  Value* m = b.input(1);
  const Shape& a_shape = a->shape();
  const Shape& m_shape = m->shape();
  const int64_t k = a_shape.back();
  const Shape a2 = a_shape.size() == 1 ? Shape{1, k} : a_shape;
  const Shape m2 = m_shape.size() == 1 ? Shape{k, 1} : m_shape;
  Shape y2 = b.output(0)->shape();
  y2.resize(y2.size() - (a_shape.size() == 1 ? 0 : 1) - (m_shape.size() == 1 ? 0 : 1));
  const Shape batch = y2;
  y2.push_back(a2[a2.size() - 2]);
  y2.push_back(m2.back());
  Value* dy = reshape(b, b.grad_of_output(0), y2);
  Value* a_lifted = reshape(b, a, a2);
  Value* m_lifted = reshape(b, m, m2);

  Value* da = nullptr;
  Value* dm = nullptr;
  if (m2.size() == 2) {
    // [batch..., M, K] x [K, N]: rows of every batch entry are rows of one [B*M, K] matrix.
    const int64_t rows = num_elements(batch) * a2[a2.size() - 2];
    Value* dy_rows = reshape(b, dy, {rows, m2[1]});
    if (b.needs_grad(0)) da = reshape(b, gemm(b, dy_rows, m_lifted, false, true), a2);
    if (b.needs_grad(1)) dm = gemm(b, reshape(b, a_lifted, {rows, k}), dy_rows, true, false);
  } else {
    if (b.needs_grad(0)) da = b.op("MatMul", {dy, transpose_last_two(b, m_lifted)});
    if (b.needs_grad(1)) dm = b.op("MatMul", {transpose_last_two(b, a_lifted), dy});
  }
  Grads grads = {nullptr, nullptr};
  if (da != nullptr) grads[0] = reshape(b, b.reduce_to_shape(da, a2), a_shape);
  if (dm != nullptr) grads[1] = reshape(b, b.reduce_to_shape(dm, m2), m_shape);
  return grads;
}

// Y = alpha A' B' + beta C with A' = op(A), B' = op(B): dA' = alpha dY B'^T, dB' = alpha A'^T dY
// (each one Gemm whose transposes absorb op(), transposed back when op() transposed), and
// dC = beta dY (the walker sums it over the dims C was broadcast along).
absl::StatusOr<Grads> gemm_grad(GradBuilder& b) {
  Value* a = b.input(0);
  Value* m = b.input(1);
  Value* dy = b.grad_of_output(0);
  const Node& node = b.node();
  const bool trans_a = node.int_attr("transA") != 0;
  const bool trans_b = node.int_attr("transB") != 0;
  const float alpha = node.float_attr("alpha");
  const float beta = node.float_attr("beta");
  Grads grads = {nullptr, nullptr, nullptr};
  if (b.needs_grad(0)) {
    grads[0] =
        trans_a ? gemm(b, m, dy, trans_b, true, alpha) : gemm(b, dy, m, false, !trans_b, alpha);
  }
  if (b.needs_grad(1)) {
    grads[1] =
        trans_b ? gemm(b, dy, a, true, trans_a, alpha) : gemm(b, a, dy, !trans_a, false, alpha);
  }
  if (b.needs_grad(2)) {
    grads[2] = beta == 1.0f ? dy : b.op("Mul", {dy, b.scalar(beta, dy->dtype())});
  }
  return grads;
}

OpDef matmul_def() {
  OpDef def;
  def.name = "MatMul";
  def.since_opset = 1;  // 9 and 13 only add element types
  def.summary = "matrix product with numpy.matmul semantics (1-D operands, batch broadcasting)";
  def.inputs = {input("A", kMatMulTypes), input("B", kMatMulTypes)};
  def.outputs = {input("Y")};
  def.infer = infer_matmul;
  def.autocast.category = AutocastCategory::kAllow;
  def.autocast.accumulate = DType::kF32;
  def.gradient = matmul_grad;
  def.samples = {
      {"matrix", {f32({3, 4}), f32({4, 5})}, {}, {}, {f32({3, 5})}},
      {"batch broadcast", {f16({2, 1, 3, 4}), f16({5, 4, 6})}, {}, {}, {f16({2, 5, 3, 6})}},
      {"vector times matrix", {f32({4}), f32({2, 4, 3})}, {}, {}, {f32({2, 3})}},
      {"matrix times vector", {f32({2, 3, 4}), f32({4})}, {}, {}, {f32({2, 3})}},
      {"dot product", {f32({4}), f32({4})}, {}, {}, {f32({})}},
      {"batched times matrix", {f32({2, 3, 4}), f32({4, 5})}, {}, {}, {f32({2, 3, 5})}},
      {"matrix times batched", {f32({3, 4}), f32({2, 4, 5})}, {}, {}, {f32({2, 3, 5})}},
      {"both batches broadcast",
       {f32({3, 1, 2, 4}), f32({1, 2, 4, 3})},
       {},
       {},
       {f32({3, 2, 2, 3})}},
      {"vector times vector batch", {f32({4}), f32({3, 4, 1})}, {}, {}, {f32({3, 1})}},
  };
  return def;
}

OpDef gemm_def() {
  OpDef def;
  def.name = "Gemm";
  // Opset 7 dropped `broadcast` (C broadcasts unidirectionally from then on); 11 made C
  // optional, which we accept throughout; 9 and 13 only add element types.
  def.since_opset = 7;
  def.summary = "alpha * A' * B' + beta * C with A' = transA ? A^T : A, B' likewise";
  def.inputs = {input("A", kMatMulTypes), input("B", kMatMulTypes),
                optional_input("C", kMatMulTypes)};
  def.outputs = {input("Y")};
  def.attrs = {attr("alpha", 1.0f), attr("beta", 1.0f), flag_attr("transA", 0),
               flag_attr("transB", 0)};
  def.infer = infer_gemm;
  def.autocast.category = AutocastCategory::kAllow;
  def.autocast.accumulate = DType::kF32;
  def.gradient = gemm_grad;
  def.samples = {
      {"linear layer, bias row",
       {f32({8, 16}), f32({4, 16}), f32({4})},
       {},
       Attributes{{"transB", int64_t{1}}},
       {f32({8, 4})}},
      {"no bias", {f32({2, 10}), f32({10, 3})}, {}, {}, {f32({2, 3})}},
      {"both transposed, scaled",
       {f16({4, 3}), f16({5, 4}), f16({1, 5})},
       {},
       Attributes{
           {"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.25f}, {"beta", 0.35f}},
       {f16({3, 5})}},
      {"transA, bias column, scaled",
       {f32({4, 3}), f32({4, 2}), f32({3, 1})},
       {},
       Attributes{{"transA", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}},
       {f32({3, 2})}},
      {"transB, scalar bias",
       {f32({3, 4}), f32({5, 4}), f32({})},
       {},
       Attributes{{"transB", int64_t{1}}},
       {f32({3, 5})}},
      {"full bias, beta",
       {f32({2, 3}), f32({3, 4}), f32({2, 4})},
       {},
       Attributes{{"beta", 0.5f}},
       {f32({2, 4})}},
  };
  return def;
}

void register_matmul_ops(OpRegistry& registry) {
  registry.add(matmul_def());
  registry.add(gemm_def());
}

const OpRegistration kMatmulOps(&register_matmul_ops);

}  // namespace
}  // namespace ampc::ops
