// Activations: Relu, LeakyRelu, Sigmoid, Tanh, Erf, Gelu. Shape-preserving, float only.
#include <cmath>

#include "ops/op_util.h"

namespace ampc::ops {
namespace {

OpDef activation(std::string name, int since_opset, AutocastCategory category,
                 std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = since_opset;
  def.summary = std::move(summary);
  def.inputs = {input("X", kFloatTypes)};
  def.outputs = {input("Y")};
  def.infer = infer_same_as_input;
  def.autocast.category = category;
  def.samples = {
      {"vector", {TensorType{DType::kF32, {5}}}, {}, {}, {TensorType{DType::kF32, {5}}}},
      {"bf16 matrix",
       {TensorType{DType::kBF16, {2, 3}}},
       {},
       {},
       {TensorType{DType::kBF16, {2, 3}}}},
  };
  return def;
}

void register_activation_ops(OpRegistry& registry) {
  // Relu is exact in every dtype, so it passes any precision through.
  registry.add(activation("Relu", 6, AutocastCategory::kClear, "max(x, 0)"));
  OpDef leaky = activation("LeakyRelu", 6, AutocastCategory::kFollow, "x < 0 ? alpha * x : x");
  leaky.attrs = {attr("alpha", 0.01f)};
  registry.add(std::move(leaky));
  registry.add(activation("Sigmoid", 6, AutocastCategory::kFollow, "1 / (1 + exp(-x))"));
  registry.add(activation("Tanh", 6, AutocastCategory::kFollow, "tanh(x)"));
  registry.add(activation("Erf", 9, AutocastCategory::kFollow, "the error function"));
  OpDef gelu = activation("Gelu", 20, AutocastCategory::kFollow,
                          "x * Phi(x), exactly (erf) or with the tanh approximation");
  gelu.attrs = {attr("approximate", std::string("none"))};
  registry.add(std::move(gelu));
}

const OpRegistration kRegistration(&register_activation_ops);

}  // namespace
}  // namespace ampc::ops
