// The collective ops data-parallel training inserts into a training step (passes/data_parallel).
//
// AllReduce<mean>(g1, ..., gn) -> (r1, ..., rn): each ri is the element-wise sum over the ranks
//   of the data-parallel group of gi (mean = 1: that sum times 1 / size, rounded once), in f32
//   (f64 when the operands are f64): every rank's gi converted to f32 exactly, summed over the
//   ranks in f32 in the communicator's fixed order (every rank gets the same bits). One node is
//   one bucket: one collective for all of its operands. In a group of one (no communicator) ri
//   is gi converted to f32.
//   Its gradient is the same reduction of the outputs' gradients (every rank's loss reads every
//   rank's gi through the sum), each converted back to gi's dtype. The data-parallel rewrite
//   inserts it after autodiff, so training never differentiates it; the rule is the math.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status infer_all_reduce(InferenceContext& ctx) {
  if (ctx.num_inputs() == 0 || ctx.num_outputs() != ctx.num_inputs()) {
    return absl::InvalidArgumentError(str_cat("one output per operand: ", ctx.num_inputs(),
                                              " operands, ", ctx.num_outputs(), " outputs"));
  }
  const bool f64 = ctx.input_type(0).dtype == DType::kF64;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const TensorType& in = ctx.input_type(i);
    if ((in.dtype == DType::kF64) != f64) {
      return absl::InvalidArgumentError(
          str_cat("operand ", i, " is ", dtype_name(in.dtype), " and operand 0 ",
                  dtype_name(ctx.input_type(0).dtype), ": f64 is reduced only with f64"));
    }
    ctx.set_output(i, TensorType{f64 ? DType::kF64 : DType::kF32, in.shape});
  }
  return absl::OkStatus();
}

absl::StatusOr<Grads> all_reduce_grad(GradBuilder& b) {
  Grads grads(b.node().num_operands(), nullptr);
  const Attributes attrs = b.node().attrs();
  for (int i = 0; i < b.node().num_operands(); ++i) {
    if (!b.needs_grad(i)) continue;
    Value* grad = b.ampc_op("AllReduce", {b.grad_of_output_or_zeros(i)}, attrs);
    const DType dtype = b.input(i)->dtype();
    grads[i] = dtype == grad->dtype() ? grad : b.op("Cast", {grad}, {{"to", dtype}});
  }
  return grads;
}

OpDef all_reduce() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "AllReduce";
  def.summary =
      "the sum (mean=1: the mean) of every operand over the ranks of a data-parallel group, in "
      "f32, in one collective";
  def.inputs = {variadic_input("operands", {DType::kF16, DType::kBF16, DType::kF32, DType::kF64})};
  def.outputs = {variadic_input("reduced")};
  def.attrs = {flag_attr("mean", 0)};
  def.infer = infer_all_reduce;
  def.gradient = all_reduce_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"one f32 gradient", {TensorType{DType::kF32, {3}}}, {}, {}, {TensorType{DType::kF32, {3}}}},
      {"f16 and bf16 gradients in, f32 out",
       {TensorType{DType::kF16, {2, 2}}, TensorType{DType::kBF16, {5}}},
       {},
       {},
       {TensorType{DType::kF32, {2, 2}}, TensorType{DType::kF32, {5}}}},
      {"the mean of a loss",
       {TensorType{DType::kF32, {}}},
       {},
       {{"mean", int64_t{1}}},
       {TensorType{DType::kF32, {}}}},
  };
  return def;
}

void register_collective_ops(OpRegistry& registry) { registry.add(all_reduce()); }

const OpRegistration kRegistration(&register_collective_ops);

}  // namespace
}  // namespace ampc::ops
