// accumulate, in text IR: each gradient output becomes its f32 running sum over the window, with
// the micro-step counter, K and the window's end; low-precision gradients are summed in f32;
// K = 1 changes nothing; a graph without gradients is an error.
#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::expect_pass;

// A stand-in for autodiff's output: `w.grad` (an Identity of x) beside the loss.
constexpr std::string_view kStep = R"(
  graph g(%x: f32[2]) opset(17) {
    init %w: f32[2] = [1.0, 2.0]
    %y = Mul(%x, %w) {name="mul"} : f32[2]
    %loss = ReduceSum<keepdims=0>(%y) {name="sum"} : f32[]
    %w.grad = Identity(%x) {name="grad"} : f32[2]
    return %loss, %w.grad
  })";

// Run r of a window: next = r; the window ends when next == K; the output w.grad is the sum of
// this window's gradients so far; the sum and the counter go back to 0 at the window's end.
TEST(Accumulate, GradientsBecomeTheirRunningSumOverKRuns) {
  EXPECT_TRUE(expect_pass(*make_accumulate_pass(4), kStep, R"(
    graph g(%x: f32[2]) opset(17) {
      init %w: f32[2] = [1.0, 2.0]
      init %accumulate.micro_step: i64[] = [0]
      init %accumulate.steps: i64[] = [4]
      init %accumulate.one: i64[] = [1]
      init %accumulate.zero: i64[] = [0]
      init %accumulate.zero_f32: f32[] = [0.0]
      init %w.grad_sum: f32[2] = [0.0, 0.0]
      %y = Mul(%x, %w) {name="mul"} : f32[2]
      %loss = ReduceSum<keepdims=0>(%y) {name="sum"} : f32[]
      %w.grad.micro = Identity(%x) {name="grad"} : f32[2]
      %accumulate.next_micro_step = Add(%accumulate.micro_step, %accumulate.one) {name="accumulate/next_micro_step"} : i64[]
      %accumulate.window_end = Equal(%accumulate.next_micro_step, %accumulate.steps) {name="accumulate/window_end"} : bool[]
      %accumulate.micro_step.next = Where(%accumulate.window_end, %accumulate.zero, %accumulate.next_micro_step) {name="accumulate/micro_step"} : i64[]
      %w.grad = Add(%w.grad_sum, %w.grad.micro) {name="w/accumulate"} : f32[2]
      %w.grad_sum.next = Where(%accumulate.window_end, %accumulate.zero_f32, %w.grad) {name="w/reset"} : f32[2]
      return %loss, %w.grad, %accumulate.micro_step.next, %w.grad_sum.next, %accumulate.window_end
      update %accumulate.micro_step = %accumulate.micro_step.next
      update %w.grad_sum = %w.grad_sum.next
    })"));
}

// A low-precision gradient (a weight kept in fp16) is summed in f32.
TEST(Accumulate, LowPrecisionGradientsAreSummedInF32) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f16[2]) opset(17) {
      init %w: f16[2] = [1.0, 2.0]
      %y = Mul(%x, %w) {name="mul"} : f16[2]
      %y32 = Cast<to=f32>(%y) {name="up"} : f32[2]
      %loss = ReduceSum<keepdims=0>(%y32) {name="sum"} : f32[]
      %w.grad = Identity(%x) {name="grad"} : f16[2]
      return %loss, %w.grad
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  ASSERT_TRUE(make_accumulate_pass(2)->run(*graph, context).ok());
  ASSERT_TRUE(verify(*graph).ok()) << verify(*graph);
  const Value* grad = graph->outputs()[1];
  EXPECT_EQ(grad->name(), "w.grad");
  EXPECT_EQ(grad->dtype(), DType::kF32);
  ASSERT_EQ(grad->producer()->op_type(), "Add");
  const Value* micro = grad->producer()->operand(1);
  ASSERT_EQ(micro->producer()->op_type(), "Cast");
  EXPECT_EQ(micro->producer()->operand(0)->dtype(), DType::kF16);
  bool has_sum = false;
  for (const Value* init : graph->initializers()) {
    if (init->name() == "w.grad_sum") has_sum = init->dtype() == DType::kF32;
  }
  EXPECT_TRUE(has_sum);
}

TEST(Accumulate, OneRunPerStepChangesNothing) {
  EXPECT_FALSE(expect_pass(*make_accumulate_pass(1), kStep, kStep));
}

TEST(Accumulate, WithoutGradientsItSaysToRunAutodiff) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) opset(17) {
      %loss = ReduceSum<keepdims=0>(%x) {name="sum"} : f32[]
      return %loss
    })");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  absl::StatusOr<bool> changed = make_accumulate_pass(4)->run(*graph, context);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(std::string(changed.status().message()).find("run autodiff first"), std::string::npos)
      << changed.status();
}

}  // namespace
}  // namespace ampc
