// ampc.SGD, ampc.Adam, ampc.GlobalNorm and ampc.ClipCoefficient: output types (those of the
// state each output replaces), the errors that name a mismatched operand, and the schema facts
// the optimizer pass relies on.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
TensorType f64(Shape shape) { return {DType::kF64, std::move(shape)}; }

const OpDef& def_of(const std::string& op) {
  const OpDef* def = OpRegistry::global().find(kAmpcDomain, op, 1);
  AMPC_CHECK(def != nullptr);
  return *def;
}

// The output types ampc.`op`<attrs> infers over graph inputs of `inputs` (nullopt: omitted), with
// `outputs` outputs (-1: all the op has).
absl::StatusOr<std::vector<TensorType>> infer(const std::string& op,
                                              const std::vector<std::optional<TensorType>>& inputs,
                                              Attributes attrs = {}, int outputs = -1) {
  Graph graph("optimizer");
  graph.set_opset(std::string(kAmpcDomain), 1);
  std::vector<Value*> operands;
  for (size_t i = 0; i < inputs.size(); ++i) {
    operands.push_back(inputs[i] ? graph.add_input(str_cat("x", i), *inputs[i]) : nullptr);
  }
  const int num_outputs = outputs < 0 ? def_of(op).max_outputs() : outputs;
  Node* node = graph.create_node(kAmpcDomain, op, operands,
                                 std::vector<std::optional<TensorType>>(num_outputs, TensorType{}),
                                 std::move(attrs));
  TypePropagator propagator;
  AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<TensorType>> types, propagator.visit(*node));
  std::vector<TensorType> out;
  for (const auto& type : types) out.push_back(type.value_or(TensorType{}));
  return out;
}

std::string message(const absl::StatusOr<std::vector<TensorType>>& result) {
  return result.ok() ? std::string("(ok)") : std::string(result.status().message());
}

TEST(OptimizerOps, UpdatesReturnTheirStatesTypes) {
  const TensorType w = f64({3, 4});
  absl::StatusOr<std::vector<TensorType>> sgd = infer("SGD", {w, w, w, f32({}), f32({1})});
  ASSERT_TRUE(sgd.ok()) << sgd.status();
  EXPECT_EQ(*sgd, (std::vector<TensorType>{w, w}));
  absl::StatusOr<std::vector<TensorType>> adam = infer("Adam", {w, w, w, w, f64({}), f32({})});
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_EQ(*adam, (std::vector<TensorType>{w, w, w}));
}

// Without momentum SGD needs no buffer (PyTorch keeps none): the buffer and its update are
// omitted together; with momentum the buffer is required.
TEST(OptimizerOps, SgdWithoutMomentumTakesNoBuffer) {
  const TensorType w = f32({3});
  absl::StatusOr<std::vector<TensorType>> plain =
      infer("SGD", {w, w, std::nullopt, f32({}), f32({})}, {}, 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, (std::vector<TensorType>{w}));
  EXPECT_THAT(
      message(infer("SGD", {w, w, std::nullopt, f32({}), f32({})}, {{"momentum", 0.9f}}, 1)),
      HasSubstr("momentum 0.9 needs the input momentum_buffer"));
  EXPECT_THAT(message(infer("SGD", {w, w, std::nullopt, f32({}), f32({})}, {}, 2)),
              HasSubstr("momentum_buffer and its update momentum_buffer_out are given together"));
  EXPECT_THAT(message(infer("SGD", {w, w, w, f32({}), f32({})}, {}, 1)),
              HasSubstr("momentum_buffer and its update momentum_buffer_out are given together"));
  // Adam's moments are not optional.
  EXPECT_FALSE(infer("Adam", {w, w, std::nullopt, w, f32({}), f32({})}).ok());
}

TEST(OptimizerOps, MismatchedStateIsNamed) {
  const TensorType w = f32({4});
  EXPECT_THAT(message(infer("SGD", {w, f32({5}), w, f32({}), f32({})})),
              AllOf(HasSubstr("grad f32[5]"), HasSubstr("param, f32[4]")));
  EXPECT_THAT(message(infer("Adam", {w, w, w, f64({4}), f32({}), f32({})})),
              HasSubstr("exp_avg_sq f64[4] must have the type of param"));
}

TEST(OptimizerOps, LrAndStepHoldOneElement) {
  const TensorType w = f32({4});
  EXPECT_THAT(message(infer("SGD", {w, w, w, f32({2}), f32({})})),
              HasSubstr("lr must hold one element, got f32[2]"));
  EXPECT_THAT(message(infer("Adam", {w, w, w, w, f32({}), f32({1, 3})})),
              HasSubstr("step must hold one element"));
}

TEST(OptimizerOps, MasterWeightsAreF32OrF64) {
  const TensorType h{DType::kF16, {4}};
  EXPECT_FALSE(infer("SGD", {h, h, h, f32({}), f32({})}).ok());
  EXPECT_FALSE(infer("Adam", {h, h, h, h, f32({}), f32({})}).ok());
}

TEST(OptimizerOps, NothingDifferentiatesThroughAnUpdate) {
  for (const char* op : {"SGD", "Adam"}) {
    const OpDef& def = def_of(op);
    EXPECT_FALSE(def.gradient) << op;
    for (int i = 0; i < static_cast<int>(def.inputs.size()); ++i) {
      EXPECT_NE(std::find(def.no_gradient_inputs.begin(), def.no_gradient_inputs.end(), i),
                def.no_gradient_inputs.end())
          << op << " input " << i;
    }
    EXPECT_EQ(def.autocast.category, AutocastCategory::kDeny) << op;
  }
}

TEST(OptimizerOps, AttributeDefaultsAreTorchs) {
  auto float_default = [](const std::string& op, const std::string& name) {
    return std::get<float>(*def_of(op).find_attr(name)->default_value);
  };
  EXPECT_EQ(float_default("Adam", "beta1"), 0.9f);
  EXPECT_EQ(float_default("Adam", "beta2"), 0.999f);
  EXPECT_EQ(float_default("Adam", "epsilon"), 1e-8f);
  EXPECT_EQ(float_default("Adam", "weight_decay"), 0.0f);
  EXPECT_EQ(float_default("SGD", "momentum"), 0.0f);
  EXPECT_EQ(def_of("Adam").find_attr("amsgrad"), nullptr);
}

TEST(GlobalNormOp, IsAScalarOfItsInputsType) {
  absl::StatusOr<std::vector<TensorType>> one = infer("GlobalNorm", {f64({2, 3})});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->at(0), f64({}));
  absl::StatusOr<std::vector<TensorType>> many =
      infer("GlobalNorm", {f32({2}), f32({}), f32({0}), f32({5, 5})});
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_EQ(many->at(0), f32({}));
}

TEST(GlobalNormOp, MixedElementTypesAreAnError) {
  EXPECT_THAT(message(infer("GlobalNorm", {f32({2}), f64({2})})),
              HasSubstr("inputs 0 and 1 must have the same element type"));
}

TEST(ClipCoefficientOp, TakesOneNormAndNeedsMaxNorm) {
  absl::StatusOr<std::vector<TensorType>> ok =
      infer("ClipCoefficient", {f32({1})}, {{"max_norm", 1.0f}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->at(0), f32({}));
  EXPECT_THAT(message(infer("ClipCoefficient", {f32({2})}, {{"max_norm", 1.0f}})),
              HasSubstr("total_norm must hold one element"));
  absl::StatusOr<std::unique_ptr<Graph>> missing = parse_graph(
      "graph g(%n: f32[]) opset(ampc:1) {\n  %c = ampc.ClipCoefficient(%n) : f32[]\n"
      "  return %c\n}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("max_norm"));
}

// The generic gradient check covers the samples; this one composes the two ops as the optimizer
// pass does, on both sides of the clipping threshold, and prints the error.
TEST(ClippingGradients, MatchCentralDifferencesInF64) {
  std::mt19937 rng(7);
  const std::vector<Tensor> inputs = {testing::random_tensor(f64({2, 3}), rng, -1, 1),
                                      testing::random_tensor(f64({9}), rng, -1, 1),
                                      testing::random_tensor(f64({}), rng, 0.5, 1)};
  for (const char* max_norm : {"0.5", "50.0"}) {  // clipped (norm > 1), then not
    SCOPED_TRACE(str_cat("max_norm=", max_norm));
    std::unique_ptr<Graph> graph = testing::parse_or_fail(
        str_cat("graph g(%a: f64[2,3], %b: f64[9], %c: f64[]) opset(17, ampc:1) {\n"
                "  %n = ampc.GlobalNorm(%a, %b, %c) : f64[]\n"
                "  %k = ampc.ClipCoefficient<max_norm=",
                max_norm,
                ">(%n) : f64[]\n"
                "  %loss = Mul(%k, %n) : f64[]\n"
                "  return %loss\n}\n"));
    ASSERT_NE(graph, nullptr);
    absl::StatusOr<testing::GradientCheck> check = testing::check_gradients(*graph, inputs, ".*");
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_EQ(check->inputs_checked, 3);
    EXPECT_LT(check->max_relative_error, 1e-6) << check->worst_input;
    std::printf("max_norm=%s: max relative error %.3g\n", max_norm, check->max_relative_error);
  }
}

}  // namespace
}  // namespace ampc
