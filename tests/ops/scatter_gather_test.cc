// The index ops of ops/scatter_gather.cc: GatherElements, ScatterElements (and Scatter),
// GatherND, ScatterND and the gather gradients. Inferred types and error messages against the
// ONNX spec; gradient rules against f64 central differences on graphs with duplicate indices,
// which the generic gradient check's samples leave out for the scatters without a reduction.
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "passes/passes.h"
#include "tests/gradient_check.h"
#include "tests/ops/op_test_helpers.h"

namespace ampc::op_testing {
namespace {

TensorType i32(Shape shape) { return {DType::kI32, std::move(shape)}; }

Attributes axis(int64_t value) { return {{"axis", value}}; }

TEST(ScatterGatherOps, GatherSamplesInferTheirListedTypes) {
  expect_samples_hold("GatherElements");
  expect_samples_hold("GatherND");
}

TEST(ScatterGatherOps, ScattersFollowAndGathersAreClear) {
  for (const char* op : {"ScatterElements", "ScatterND", "Scatter"}) {
    for (const OpDef* def : OpRegistry::global().find_all("", op)) {
      EXPECT_EQ(def->autocast.category, AutocastCategory::kFollow) << op;
    }
  }
  EXPECT_EQ(OpRegistry::global().find("", "Scatter", 11), nullptr);
  EXPECT_EQ(OpRegistry::global().find("", "ScatterElements", 10), nullptr);
  EXPECT_NE(OpRegistry::global().find("", "Scatter", 9), nullptr);
}

// ---- GatherElements ---------------------------------------------------------------------------

TEST(GatherElements, OutputHasTheIndicesShape) {
  EXPECT_EQ(infer_one("GatherElements", {f32({3, 4}), i64({5, 2})}, {}, axis(0), 13), f32({5, 2}));
  EXPECT_EQ(infer_one("GatherElements", {f16({2, 3, 4}), i32({2, 1, 7})}, {}, axis(-1), 13),
            f16({2, 1, 7}));
}

TEST(GatherElements, RejectsIndicesOfAnotherRankOrWiderThanTheData) {
  EXPECT_TRUE(fails_with(infer_error("GatherElements", {f32({3, 4}), i64({3})}, {}, {}, 13),
                         "input 1 ('indices') has shape [3]; it must have the rank 2"));
  EXPECT_TRUE(fails_with(infer_error("GatherElements", {f32({3, 4}), i64({2, 5})}, {}, {}, 13),
                         "dim 1 (5) is larger than data's [3,4] outside the axis 0"));
  EXPECT_TRUE(fails_with(infer_error("GatherElements", {f32({3, 4}), i64({2, 2})}, {}, axis(2), 13),
                         "axis 2 is out of range for rank 2"));
  EXPECT_TRUE(fails_with(infer_error("GatherElements", {f32({3}), f32({3})}, {}, {}, 13),
                         "does not accept"));
  EXPECT_TRUE(fails_with(infer_error("GatherElements", {f32({}), i64({})}, {}, {}, 13),
                         "input 0 ('data') must have rank 1 or more"));
}

// ---- ScatterElements, Scatter -----------------------------------------------------------------

TEST(ScatterElements, OutputIsTheDataType) {
  EXPECT_EQ(infer_one("ScatterElements", {f32({3, 4}), i64({2, 4}), f32({2, 4})}, {}, {}, 13),
            f32({3, 4}));
  EXPECT_EQ(infer_one("Scatter", {i64({3, 4}), i32({3, 2}), i64({3, 2})}, {}, axis(1), 10),
            i64({3, 4}));
}

TEST(ScatterElements, RejectsMismatchedUpdates) {
  EXPECT_TRUE(fails_with(
      infer_error("ScatterElements", {f32({3, 4}), i64({2, 4}), f32({2, 3})}, {}, {}, 13),
      "input 2 ('updates') has shape [2,3]; it must be [2,4]"));
  EXPECT_TRUE(fails_with(
      infer_error("ScatterElements", {f32({3, 4}), i64({2, 4}), f16({2, 4})}, {}, {}, 13),
      "inputs 0 and 2 must have the same element type"));
}

TEST(ScatterElements, ReductionsFollowTheOpset) {
  const Inputs inputs = {f32({3}), i64({2}), f32({2})};
  const Attributes add = {{"reduction", std::string("add")}};
  const Attributes max = {{"reduction", std::string("max")}};
  EXPECT_EQ(infer_one("ScatterElements", inputs, {}, add, 16), f32({3}));
  EXPECT_EQ(infer_one("ScatterElements", inputs, {}, max, 18), f32({3}));
  EXPECT_TRUE(fails_with(infer_error("ScatterElements", inputs, {}, max, 17),
                         "attribute 'reduction' is 'max'; at opset 17 it is one of 'none', "
                         "'add', 'mul'"));
  EXPECT_TRUE(fails_with(
      infer_error("ScatterElements", inputs, {}, {{"reduction", std::string("sum")}}, 18),
      "attribute 'reduction' is 'sum'"));
  EXPECT_TRUE(fails_with(
      infer_error("ScatterElements", {boolean({3}), i64({2}), boolean({2})}, {}, add, 18),
      "reduction 'add' needs numeric data; input 0 ('data') is bool"));
}

// ---- GatherND ---------------------------------------------------------------------------------

TEST(GatherND, OutputIsTheTuplesThenTheRestOfTheData) {
  EXPECT_EQ(infer_one("GatherND", {f32({2, 2}), i64({2, 2})}, {}, {}, 13), f32({2}));
  EXPECT_EQ(infer_one("GatherND", {f32({2, 3, 4}), i64({5, 1})}, {}, {}, 13), f32({5, 3, 4}));
  EXPECT_EQ(
      infer_one("GatherND", {f32({2, 3, 4}), i64({2, 5, 1})}, {}, {{"batch_dims", int64_t{1}}}, 13),
      f32({2, 5, 4}));
}

TEST(GatherND, RejectsBadTuplesAndBatchDims) {
  EXPECT_TRUE(fails_with(infer_error("GatherND", {f32({2, 2}), i64({2, 3})}, {}, {}, 13),
                         "its last dim (3) must be in [1, 2]"));
  EXPECT_TRUE(fails_with(
      infer_error("GatherND", {f32({2, 3}), i64({3, 1})}, {}, {{"batch_dims", int64_t{1}}}, 13),
      "the first 1 (batch_dims) dims of data [2,3] and indices [3,1] must agree"));
  EXPECT_TRUE(fails_with(
      infer_error("GatherND", {f32({2, 3}), i64({2, 1})}, {}, {{"batch_dims", int64_t{2}}}, 13),
      "attribute 'batch_dims' is 2; it must be in [0, 2)"));
}

// ---- ScatterND --------------------------------------------------------------------------------

TEST(ScatterND, UpdatesMustBeShapedAsTheGatheredSlices) {
  EXPECT_EQ(infer_one("ScatterND", {f32({4, 4, 4}), i64({2, 1}), f32({2, 4, 4})}, {}, {}, 13),
            f32({4, 4, 4}));
  EXPECT_TRUE(fails_with(
      infer_error("ScatterND", {f32({4, 4, 4}), i64({2, 2}), f32({2, 4, 4})}, {}, {}, 13),
      "input 2 ('updates') has shape [2,4,4]; it must be [2,4]"));
  EXPECT_TRUE(fails_with(infer_error("ScatterND", {f32({4}), i64({2, 1}), f32({2})}, {},
                                     {{"reduction", std::string("mul")}}, 13),
                         "attribute 'reduction' is 'mul'; at opset 13 it is one of 'none'"));
}

// ---- Gradients --------------------------------------------------------------------------------

// Central differences of `text` (f64, loss output `loss`) with respect to every float input, at
// random inputs but for the named integer ones.
void expect_gradients_match(std::string_view text, std::map<std::string, Tensor> fixed) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  ASSERT_NE(graph, nullptr);
  std::mt19937 rng(20261201);
  std::vector<Tensor> inputs;
  for (const Value* input : graph->inputs()) {
    auto it = fixed.find(input->name());
    inputs.push_back(it != fixed.end() ? it->second
                                       : testing::random_tensor(input->type(), rng, -1, 1));
  }
  absl::StatusOr<testing::GradientCheck> result = testing::check_gradients(*graph, inputs, "^x|^u");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GE(result->inputs_checked, 1);
  EXPECT_LT(result->max_relative_error, 1e-6) << "worst input " << result->worst_input;
}

// Autodiff of `graph` with respect to all its graph inputs.
absl::StatusOr<bool> differentiate(Graph& graph) {
  AutodiffOptions options;
  options.include_graph_inputs = true;
  Diagnostics diagnostics;
  return make_autodiff_pass(options)->run(graph, PassContext{&diagnostics});
}

TEST(ScatterGatherGradient, GatherElementsSumsRepeatedIndices) {
  expect_gradients_match(R"(graph g(%x: f64[3,4], %i: i64[5,4], %w: f64[5,4]) {
    %y = GatherElements(%x, %i) : f64[5,4]
    %p = Mul(%y, %w) : f64[5,4]
    %loss = ReduceSum<keepdims=0>(%p) : f64[]
    return %loss
  })",
                         {{"i", Tensor::from_i64({5, 4}, {0, 1, 2,  0, 0, 1, -1, 0, 2, 2,
                                                          2, 0, -3, 1, 0, 1, 1,  1, 1, 1})}});
}

TEST(ScatterGatherGradient, ScatterElementsAddMaxAndMinWithDuplicates) {
  for (const char* reduction : {"add", "max", "min"}) {
    SCOPED_TRACE(reduction);
    expect_gradients_match(
        str_cat(R"(graph g(%x: f64[3,4], %i: i64[3,3], %u: f64[3,3], %w: f64[3,4]) opset(18) {
    %y = ScatterElements<axis=1, reduction=")",
                reduction, R"(">(%x, %i, %u) : f64[3,4]
    %p = Mul(%y, %w) : f64[3,4]
    %loss = ReduceSum<keepdims=0>(%p) : f64[]
    return %loss
  })"),
        {{"i", Tensor::from_i64({3, 3}, {0, 0, 3, 1, -1, 1, 2, 2, 2})}});
  }
}

TEST(ScatterGatherGradient, ScatterNDAndGatherNDWithRepeatedTuples) {
  expect_gradients_match(
      R"(graph g(%x: f64[4,3], %i: i64[3,1], %u: f64[3,3], %w: f64[4,3]) opset(18) {
    %y = ScatterND<reduction="add">(%x, %i, %u) : f64[4,3]
    %p = Mul(%y, %w) : f64[4,3]
    %loss = ReduceSum<keepdims=0>(%p) : f64[]
    return %loss
  })",
      {{"i", Tensor::from_i64({3, 1}, {2, 0, -2})}});
  expect_gradients_match(R"(graph g(%x: f64[2,3,4], %i: i64[2,3,1], %w: f64[2,3,4]) {
    %y = GatherND<batch_dims=1>(%x, %i) : f64[2,3,4]
    %p = Mul(%y, %w) : f64[2,3,4]
    %loss = ReduceSum<keepdims=0>(%p) : f64[]
    return %loss
  })",
                         {{"i", Tensor::from_i64({2, 3, 1}, {2, 2, 0, -1, 1, 1})}});
}

TEST(ScatterGatherGradient, MaxTiesShareTheGradientEvenly) {
  // data [1, 3], updates [3, 3, 0] at [1, 1, 0]: element 1 is 3, reached by the data and both
  // updates (a third each); element 0 keeps its data 1.
  std::unique_ptr<Graph> graph =
      testing::parse_or_fail(R"(graph g(%x: f64[2], %u: f64[3]) opset(18) {
    init %i: i64[3] = [1, 1, 0]
    init %w: f64[2] = [2.0, 6.0]
    %y = ScatterElements<reduction="max">(%x, %i, %u) : f64[2]
    %p = Mul(%y, %w) : f64[2]
    %loss = ReduceSum<keepdims=0>(%p) : f64[]
    return %loss
  })");
  ASSERT_NE(graph, nullptr);
  ASSERT_TRUE(differentiate(*graph).ok());
  absl::StatusOr<std::vector<Tensor>> out =
      runtime::interpret_graph(*graph, {Tensor::from_doubles(DType::kF64, {2}, {1, 3}),
                                        Tensor::from_doubles(DType::kF64, {3}, {3, 3, 0})});
  ASSERT_TRUE(out.ok()) << out.status();
  std::map<std::string, std::vector<double>> grads;
  for (size_t k = 0; k < out->size(); ++k) {
    grads[graph->outputs()[k]->name()] = (*out)[k].to_double_vector();
  }
  EXPECT_EQ(grads["x.grad"], (std::vector<double>{2, 2}));
  EXPECT_EQ(grads["u.grad"], (std::vector<double>{2, 2, 0}));
}

TEST(ScatterGatherGradient, MulReductionIsAnErrorNamingTheNode) {
  std::unique_ptr<Graph> graph =
      testing::parse_or_fail(R"(graph g(%x: f64[3], %u: f64[2]) opset(18) {
    init %i: i64[2] = [0, 0]
    %y = ScatterElements<reduction="mul">(%x, %i, %u) : f64[3]
    %loss = ReduceSum<keepdims=0>(%y) : f64[]
    return %loss
  })");
  ASSERT_NE(graph, nullptr);
  const absl::StatusOr<bool> changed = differentiate(*graph);
  ASSERT_FALSE(changed.ok());
  EXPECT_TRUE(fails_with(changed.status(), "ScatterElements"));
  EXPECT_TRUE(fails_with(changed.status(), "no gradient for reduction 'mul'"));
}

}  // namespace
}  // namespace ampc::op_testing
