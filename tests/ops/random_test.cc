// The random ops' definitions (ops/random.cc): what their inference rejects, gradients that flow
// around a draw (a VAE's reparameterization, stochastic depth) against central differences in
// f64, and the training-step pass giving each random node of a step a seed of its own.
#include <string>
#include <vector>

#include "compiler/op_def.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/op_util.h"
#include "passes/passes.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;
using testing::infer_op;
using testing::OpCase;

// The message of inferring `op_case`, which must fail.
std::string rejection(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> types = infer_op(op_case);
  EXPECT_FALSE(types.ok()) << op_case.op_type;
  return types.ok() ? "" : std::string(types.status().message());
}

TEST(RandomOps, InferenceRejectsWhatCannotBeDrawn) {
  const std::vector<int64_t> shape = {2, 3};
  const TensorType f32_4{DType::kF32, {4}};
  const TensorType i64_4{DType::kI64, {4}};
  EXPECT_THAT(
      rejection({"RandomUniform", {}, {}, {{"shape", shape}, {"low", 2.0f}, {"high", 1.0f}}}),
      HasSubstr("attribute 'low' (2) is greater than attribute 'high' (1)"));
  EXPECT_THAT(rejection({"RandomNormal", {}, {}, {{"shape", shape}, {"dtype", DType::kI64}}}),
              HasSubstr("attribute 'dtype' is i64"));
  EXPECT_THAT(rejection({"RandomNormal", {}, {}, {{"shape", std::vector<int64_t>{2, -1}}}}),
              HasSubstr("negative dim"));
  EXPECT_THAT(rejection({"RandomNormal", {}, {}, {{"shape", shape}, {"scale", INFINITY}}}),
              HasSubstr("must be finite"));
  // The Like forms draw in their input's type unless told otherwise: not in an integer's.
  EXPECT_THAT(rejection({"RandomUniformLike", {i64_4}, {}, {}}),
              HasSubstr("the input (whose dtype the output takes) is i64"));
  EXPECT_THAT(rejection({"Bernoulli", {f32_4}, {}, {{"dtype", DType::kF8E4M3FN}}, 15}),
              HasSubstr("Bernoulli stores 0 and 1"));
  EXPECT_THAT(rejection({"Bernoulli", {i64_4}, {}, {}, 15}), HasSubstr("i64"));
}

// z = mu + exp(logvar / 2) * eps, eps = RandomNormalLike(mu): the loss's gradient reaches mu and
// logvar around the draw (eps is fixed for a fixed random stream, which every run here uses), and
// none flows into the draw's input. dLoss/dmu = 2z, dLoss/dlogvar = z * exp(logvar / 2) * eps.
TEST(RandomOps, GradientsFlowAroundTheDraws) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
      graph g(%mu: f64[3,4], %logvar: f64[3,4], %x: f64[3,4]) opset(17) {
        init %half: f64[] = [0.5]
        init %keep: f64[3,4] = [0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
        %eps = RandomNormalLike(%mu) : f64[3,4]
        %scaled = Mul(%logvar, %half) : f64[3,4]
        %std = Exp(%scaled) : f64[3,4]
        %noise = Mul(%std, %eps) : f64[3,4]
        %z = Add(%mu, %noise) : f64[3,4]
        %square = Mul(%z, %z) : f64[3,4]
        %u = RandomUniformLike<low=0.5, high=1.5>(%x) : f64[3,4]
        %kept = Bernoulli(%keep) : f64[3,4]
        %dropped = Mul(%x, %kept) : f64[3,4]
        %wx = Mul(%dropped, %u) : f64[3,4]
        %both = Add(%square, %wx) : f64[3,4]
        %loss = ReduceSum<keepdims=0>(%both) : f64[]
        return %loss
      })");
  ASSERT_NE(graph, nullptr);
  std::mt19937 rng(3);
  std::vector<Tensor> inputs;
  for (int i = 0; i < 3; ++i) {
    inputs.push_back(testing::random_tensor(TensorType{DType::kF64, {3, 4}}, rng, -1.0, 1.0));
  }
  absl::StatusOr<testing::GradientCheck> check =
      testing::check_gradients(*graph, inputs, "^(mu|logvar|x)$");
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_EQ(check->inputs_checked, 3);
  EXPECT_LT(check->max_relative_error, 1e-7) << check->worst_input;
}

TEST(RandomOps, EachRandomNodeOfAStepGetsItsOwnSeed) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
      graph g(%x: f32[4]) opset(17) {
        init %half: f32[] = [0.5]
        init %yes: bool[] = [true]
        %a = RandomNormalLike(%x) : f32[4]
        %b = Dropout<seed=0>(%x, %half, %yes) : f32[4]
        %c = RandomUniformLike<seed=2.0>(%x) : f32[4]
        %d = Bernoulli(%a) : f32[4]
        %ab = Add(%a, %b) : f32[4]
        %cd = Add(%c, %d) : f32[4]
        %all = Add(%ab, %cd) : f32[4]
        %loss = ReduceSum<keepdims=0>(%all) : f32[]
        return %loss
      })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(make_training_step_pass()->run(*graph, PassContext{&diagnostics}).ok());
  ASSERT_NE(graph->training_step(), nullptr);
  // The file's seeds (0 and 2) kept; the others the smallest free ones in graph order, floats
  // as ONNX's random ops have them.
  std::vector<std::string> seeds;
  for (const auto& node : graph->training_step()->nodes()) {
    if (const AttrValue* seed = node->find_attr("seed")) {
      seeds.push_back(str_cat(node->op_type(), " ", attr_kind_name(attr_kind(*seed)), " ",
                              *ops::random_seed(*node)));
    }
  }
  EXPECT_EQ(seeds, (std::vector<std::string>{"RandomNormalLike float 1", "Dropout int 0",
                                             "RandomUniformLike float 2", "Bernoulli float 3"}));
}

}  // namespace
}  // namespace ampc
