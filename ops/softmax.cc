// Softmax and LogSoftmax along one axis (default the last). Shape-preserving, float only.
//
// Only the opset 13 definition is registered: before 13 both ops flattened the input to 2-D at
// `axis` and normalized over all trailing dims, a different function.
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status infer_softmax(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (in.shape.empty()) {
    return absl::InvalidArgumentError("input must have rank >= 1, got a scalar");
  }
  AMPC_RETURN_IF_ERROR(
      normalize_axis(ctx.int_attr("axis"), static_cast<int64_t>(in.shape.size())).status());
  ctx.set_output(0, in);
  return absl::OkStatus();
}

OpDef softmax(std::string name, std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 13;
  def.summary = std::move(summary);
  def.inputs = {input("input", kFloatTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{-1})};
  def.infer = infer_softmax;
  // exp overflows fp16 easily and the normalizing sum loses precision: fp32.
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"last axis", {{DType::kF32, {2, 5}}}, {}, {}, {{DType::kF32, {2, 5}}}},
      {"axis 1 of 3-D",
       {{DType::kF32, {2, 3, 4}}},
       {},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 3, 4}}}},
      {"f64 vector", {{DType::kF64, {7}}}, {}, {}, {{DType::kF64, {7}}}},
  };
  return def;
}

void register_softmax_ops(OpRegistry& registry) {
  registry.add(softmax("Softmax", "exp(x) / sum(exp(x)) along axis"));
  registry.add(softmax("LogSoftmax", "x - log(sum(exp(x))) along axis"));
}

const OpRegistration kRegistration(&register_softmax_ops);

}  // namespace
}  // namespace ampc::ops
