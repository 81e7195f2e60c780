// Gradient rules of the reductions and losses beyond what the generic gradient check can see:
// ReduceMax shares the gradient among tied maxima (as PyTorch's amax does), and the loss rules
// give labels and weights no gradient.
#include <map>

#include "compiler/op_def.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

// The outputs of `text` after autodiff with respect to its graph inputs, by name.
std::map<std::string, Tensor> gradients(std::string_view text, const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return {};
  AutodiffOptions options;
  options.include_graph_inputs = true;
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed =
      make_autodiff_pass(options)->run(*graph, PassContext{&diagnostics});
  EXPECT_TRUE(changed.ok()) << changed.status();
  absl::StatusOr<std::vector<Tensor>> outputs = runtime::interpret_graph(*graph, inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> by_name;
  if (!outputs.ok()) return by_name;
  for (size_t i = 0; i < outputs->size(); ++i) {
    by_name.emplace(graph->outputs()[i]->name(), (*outputs)[i]);
  }
  return by_name;
}

TEST(ReduceMaxGradient, TiedMaximaShareTheGradientEvenly) {
  const std::map<std::string, Tensor> grads =
      gradients(R"(
    graph g(%x: f32[2,4]) {
      init %w: f32[2] = [1.0, 6.0]
      %m = ReduceMax<axes=[1], keepdims=0>(%x) : f32[2]
      %p = Mul(%m, %w) : f32[2]
      %loss = ReduceSum<keepdims=0>(%p) : f32[]
      return %loss
    })",
                {Tensor::from_doubles(DType::kF32, {2, 4}, {1, 3, 3, 2, 5, 5, 0, 5})});
  ASSERT_TRUE(grads.contains("x.grad"));
  EXPECT_EQ(grads.at("x.grad").to_double_vector(),
            (std::vector<double>{0, 0.5, 0.5, 0, 2, 2, 0, 2}));
}

TEST(LossGradient, LabelsAndWeightsGetNoGradient) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[3,4], %t: i64[3], %w: f32[4]) {
      %loss = SoftmaxCrossEntropyLoss<reduction="mean">(%x, %t, %w) : f32[]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  AutodiffOptions options;
  options.include_graph_inputs = true;
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed =
      make_autodiff_pass(options)->run(*graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  std::vector<std::string> outputs;
  for (const Value* output : graph->outputs()) outputs.push_back(output->name());
  EXPECT_EQ(outputs, (std::vector<std::string>{"loss", "x.grad"}));
}

}  // namespace
}  // namespace ampc
