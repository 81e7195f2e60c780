// Matrix products: MatMul (numpy.matmul semantics) and Gemm (alpha * A' * B' + beta * C).
//
// Both are on the allow list: their inputs may be cast to low precision because the products
// accumulate in fp32 (cuBLASLt with fp32 compute; the CPU backend does the same).
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

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }
TensorType f16(Shape shape) { return TensorType{DType::kF16, std::move(shape)}; }

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
  def.samples = {
      {"matrix", {f32({3, 4}), f32({4, 5})}, {}, {}, {f32({3, 5})}},
      {"batch broadcast", {f16({2, 1, 3, 4}), f16({5, 4, 6})}, {}, {}, {f16({2, 5, 3, 6})}},
      {"vector times matrix", {f32({4}), f32({2, 4, 3})}, {}, {}, {f32({2, 3})}},
      {"matrix times vector", {f32({2, 3, 4}), f32({4})}, {}, {}, {f32({2, 3})}},
      {"dot product", {f32({4}), f32({4})}, {}, {}, {f32({})}},
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
  def.attrs = {attr("alpha", 1.0f), attr("beta", 1.0f), attr("transA", int64_t{0}),
               attr("transB", int64_t{0})};
  def.infer = infer_gemm;
  def.autocast.category = AutocastCategory::kAllow;
  def.autocast.accumulate = DType::kF32;
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
  };
  return def;
}

void register_matmul_ops(OpRegistry& registry) {
  registry.add(matmul_def());
  registry.add(gemm_def());
}

const OpRegistration kRegistration(&register_matmul_ops);

}  // namespace
}  // namespace ampc::ops
