// ampc.FusedElementwise(x0, ..., xn) -> (y0, ..., ym): a chain or tree of element-wise nodes that
// passes/fuse_elementwise.cc replaced by one node. Attributes:
//   body:  the expression graph over the operands (compiler/fused_body.h), which says each
//          result's op, operands and the dtype it is rounded to;
//   shape: the shape of every output. Each operand broadcasts to it (ONNX unidirectional
//          broadcasting; the fusion pass takes operands whose non-1 dimensions are one block of
//          consecutive output dimensions, which is what the kernels index).
// The results are bit for bit those of the nodes it replaced. Nothing differentiates through a
// fused node: fusion runs after autodiff.
#include "compiler/fused_body.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status infer_fused(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const FusedBody body,
                        FusedBody::parse(ctx.string_attr("body"), ctx.num_inputs()));
  if (static_cast<int>(body.outputs.size()) != ctx.num_outputs()) {
    return absl::InvalidArgumentError(str_cat("the body returns ", body.outputs.size(),
                                              " results for ", ctx.num_outputs(), " outputs"));
  }
  const Shape shape(ctx.ints_attr("shape"));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& type = ctx.input_type(i);
    if (!fusable_dtype(type.dtype)) {
      return absl::InvalidArgumentError(str_cat("operand ", i, " is ", type_to_string(type),
                                                "; a fused body reads f32, f16, bf16 or bool"));
    }
    if (!broadcasts_to(type.shape, shape)) {
      return absl::InvalidArgumentError(str_cat("operand ", i, " ", type_to_string(type),
                                                " does not broadcast to the shape ",
                                                shape_to_string(shape)));
    }
  }
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    ctx.set_output(i, TensorType{body.output_dtype(i), shape});
  }
  return absl::OkStatus();
}

OpDef fused_elementwise() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "FusedElementwise";
  def.summary = "element-wise nodes fused into one pass over memory (compiler/fused_body.h)";
  def.inputs = {variadic_input("operands", {DType::kF32, DType::kF16, DType::kBF16, DType::kBool})};
  def.outputs = {variadic_input("results")};
  def.attrs = {required_attr("body", AttrKind::kString), required_attr("shape", AttrKind::kInts)};
  def.infer = infer_fused;
  def.autocast.category = AutocastCategory::kDeny;
  for (int i = 0; i < kMaxFusedOperands; ++i) def.no_gradient_inputs.push_back(i);
  const TensorType f16_rows{DType::kF16, {4, 3}};
  const TensorType bias{DType::kF16, {3}};
  def.samples = {
      {"bias add, Relu and a cast to f32",
       {f16_rows, bias},
       {},
       {{"body", std::string("t0 = Add(x0, x1) : f16; t1 = Relu(t0) : f16; "
                             "t2 = Cast(t1) : f32; return t1, t2")},
        {"shape", std::vector<int64_t>{4, 3}}},
       {f16_rows, TensorType{DType::kF32, {4, 3}}}},
      {"a scalar broadcast and a comparison",
       {TensorType{DType::kF32, {2, 5}}, TensorType{DType::kF32, {}}},
       {},
       {{"body", std::string("t0 = Mul(x0, x1) : f32; t1 = Less(t0, x1) : bool; "
                             "t2 = Where(t1, t0, x1) : f32; return t2")},
        {"shape", std::vector<int64_t>{2, 5}}},
       {TensorType{DType::kF32, {2, 5}}}},
  };
  return def;
}

void register_fused_ops(OpRegistry& registry) { registry.add(fused_elementwise()); }

const OpRegistration kFusedOps(&register_fused_ops);

}  // namespace
}  // namespace ampc::ops
