// The conventions of the activation and element-wise gradient rules where the derivative is not
// defined (kinks, ties, bounds, 0 * inf), which central differences cannot check: each is
// PyTorch's, since training runs are compared with PyTorch's. The expected values are what
// PyTorch's autograd gives for the same inputs.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

// d loss / d input for every graph input of `text` (as `input.grad`), by autodiff and the CPU
// interpreter.
std::map<std::string, std::vector<double>> gradients(std::string_view text,
                                                     const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return {};
  auto values = testing::outputs_with_gradients(*graph, inputs);
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? *std::move(values) : std::map<std::string, std::vector<double>>{};
}

Tensor f32(const std::vector<float>& values) {
  return Tensor::from_f32({static_cast<int64_t>(values.size())}, values);
}

TEST(ElementwiseGradConventions, MaxAndMinSplitTiesEvenly) {
  // torch.maximum / torch.minimum: a tie gives each input half the gradient.
  const std::vector<Tensor> pair = {f32({1, 2, 3, -1}), f32({1, 5, 0, -1})};
  auto max2 = gradients(R"(
    graph g(%a: f32[4], %b: f32[4]) {
      %m = Max(%a, %b) : f32[4]
      %loss = ReduceSum<keepdims=0>(%m) : f32[]
      return %loss
    })",
                        pair);
  EXPECT_EQ(max2["a.grad"], (std::vector<double>{0.5, 0, 1, 0.5}));
  EXPECT_EQ(max2["b.grad"], (std::vector<double>{0.5, 1, 0, 0.5}));
  auto min2 = gradients(R"(
    graph g(%a: f32[4], %b: f32[4]) {
      %m = Min(%a, %b) : f32[4]
      %loss = ReduceSum<keepdims=0>(%m) : f32[]
      return %loss
    })",
                        pair);
  EXPECT_EQ(min2["a.grad"], (std::vector<double>{0.5, 1, 0, 0.5}));
  EXPECT_EQ(min2["b.grad"], (std::vector<double>{0.5, 0, 1, 0.5}));

  // With more inputs, the k tied ones share it, a broadcast input summing over its uses.
  auto max3 = gradients(R"(
    graph g(%a: f32[2], %b: f32[2], %c: f32[]) {
      %m = Max(%a, %b, %c) : f32[2]
      %loss = ReduceSum<keepdims=0>(%m) : f32[]
      return %loss
    })",
                        {f32({4, 1}), f32({4, 2}), Tensor::from_f32({}, {4})});
  ASSERT_EQ(max3["a.grad"].size(), 2u);
  ASSERT_EQ(max3["b.grad"].size(), 2u);
  ASSERT_EQ(max3["c.grad"].size(), 1u);
  EXPECT_FLOAT_EQ(max3["a.grad"][0], 1.0 / 3);
  EXPECT_EQ(max3["a.grad"][1], 0);
  EXPECT_FLOAT_EQ(max3["b.grad"][0], 1.0 / 3);
  EXPECT_EQ(max3["b.grad"][1], 0);
  EXPECT_FLOAT_EQ(max3["c.grad"][0], 1.0 / 3 + 1);
}

TEST(ElementwiseGradConventions, ClipWithNumberBoundsPassesNoGradientAtThem) {
  // torch.clamp(x, -0.5, 0.75), F.hardtanh and F.relu6 (PyTorch 2.15, measured): the gradient
  // flows where min < x < max, and not at a bound, which low-precision data reach often. Bounds
  // stored as initializers are hyperparameters (ReLU6's), not trained, also where they are read
  // through Casts (autocast's, under --precision: not computed bounds, whose ties split).
  for (const bool through_casts : {false, true}) {
    SCOPED_TRACE(through_casts ? "read through Casts" : "read directly");
    const char* stored = through_casts ? "f64" : "f32";
    const std::string clip = through_casts ? "%l = Cast<to=f32>(%lo) : f32[]\n"
                                             "%h = Cast<to=f32>(%hi) : f32[]\n"
                                             "%y = Clip(%x, %l, %h) : f32[6]"
                                           : "%y = Clip(%x, %lo, %hi) : f32[6]";
    auto grads = gradients(str_cat("graph g(%x: f32[6]) {\ninit %lo: ", stored,
                                   "[] = [-0.5]\ninit %hi: ", stored, "[] = [0.75]\n", clip,
                                   "\n%loss = ReduceSum<keepdims=0>(%y) : f32[]\nreturn %loss\n}"),
                           {f32({-1, -0.5f, 0, 0.75f, 1, 0.5f})});
    EXPECT_EQ(grads["x.grad"], (std::vector<double>{0, 0, 1, 0, 0, 1}));
    EXPECT_FALSE(grads.contains("lo.grad"));
    EXPECT_FALSE(grads.contains("hi.grad"));
  }
}

TEST(ElementwiseGradConventions, ClipBoundsComputedAtRunTimeGetClampsGradients) {
  // torch.clamp(x, min, max) with tensor bounds: the figures PyTorch 2.15 gives, element by
  // element (x, lo, hi) -> (dx, dlo, dhi) for a loss of sum(y).
  struct Case {
    float x, lo, hi;
    double dx, dlo, dhi;
  };
  const Case cases[] = {
      {0, 1, 2, 0, 1, 0}, {1, 1, 2, 0.5, 0.5, 0}, {1.5, 1, 2, 1, 0, 0}, {2, 1, 2, 0.5, 0, 0.5},
      {3, 1, 2, 0, 0, 1}, {0, 1, 1, 0, 1, 0},     {1, 1, 1, 1, 0, 0},   {2, 1, 1, 0, 0, 1},
      {0, 2, 1, 0, 0, 1}, {1, 2, 1, 0, 0, 1},     {1.5, 2, 1, 0, 0, 1}, {2, 2, 1, 0, 0, 1},
      {3, 2, 1, 0, 0, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(str_cat("x ", c.x, ", lo ", c.lo, ", hi ", c.hi));
    auto grads =
        gradients(R"(
      graph g(%x: f32[1], %lo: f32[], %hi: f32[]) {
        %y = Clip(%x, %lo, %hi) : f32[1]
        %loss = ReduceSum<keepdims=0>(%y) : f32[]
        return %loss
      })",
                  {f32({c.x}), Tensor::from_f32({}, {c.lo}), Tensor::from_f32({}, {c.hi})});
    EXPECT_EQ(grads["x.grad"], (std::vector<double>{c.dx}));
    EXPECT_EQ(grads["lo.grad"], (std::vector<double>{c.dlo}));
    EXPECT_EQ(grads["hi.grad"], (std::vector<double>{c.dhi}));
  }
  // One bound: a tie splits evenly (torch.clamp(x, min=lo) at x == lo: 1/2 each); the bound's
  // gradient sums over the elements.
  auto min_only = gradients(R"(
    graph g(%x: f32[3], %lo: f32[]) {
      %y = Clip(%x, %lo) : f32[3]
      %loss = ReduceSum<keepdims=0>(%y) : f32[]
      return %loss
    })",
                            {f32({-1, -0.5f, 0}), Tensor::from_f32({}, {-0.5f})});
  EXPECT_EQ(min_only["x.grad"], (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(min_only["lo.grad"], (std::vector<double>{1.5}));
}

TEST(ElementwiseGradConventions, KinksAtZero) {
  // relu'(0) = 0, leaky_relu'(0) = alpha, |x|'(0) = 0.
  auto grads = gradients(R"(
    graph g(%r: f32[3], %l: f32[3], %a: f32[3]) {
      %relu = Relu(%r) : f32[3]
      %leaky = LeakyRelu<alpha=0.25>(%l) : f32[3]
      %abs = Abs(%a) : f32[3]
      %s1 = ReduceSum<keepdims=0>(%relu) : f32[]
      %s2 = ReduceSum<keepdims=0>(%leaky) : f32[]
      %s3 = ReduceSum<keepdims=0>(%abs) : f32[]
      %s12 = Add(%s1, %s2) : f32[]
      %loss = Add(%s12, %s3) : f32[]
      return %loss
    })",
                         {f32({-1, 0, 2}), f32({-1, 0, 2}), f32({-1, 0, 2})});
  EXPECT_EQ(grads["r.grad"], (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(grads["l.grad"], (std::vector<double>{0.25, 0.25, 1}));
  EXPECT_EQ(grads["a.grad"], (std::vector<double>{-1, 0, 1}));
}

TEST(ElementwiseGradConventions, HardSwishAtTheEndsOfItsCurve) {
  // F.hardswish's gradient (PyTorch 2.15, measured): 0 up to -3, x/3 + 1/2 strictly between,
  // 1 from 3.
  auto grads = gradients(R"(
    graph g(%x: f32[6]) opset(14) {
      %y = HardSwish(%x) : f32[6]
      %loss = ReduceSum<keepdims=0>(%y) : f32[]
      return %loss
    })",
                         {f32({-4, -3, -1.5f, 0, 3, 4})});
  EXPECT_EQ(grads["x.grad"], (std::vector<double>{0, 0, 0, 0.5, 1, 1}));
}

TEST(ElementwiseGradConventions, EluSeluAndCeluTakeTheExponentialSideAtZero) {
  // elu'(0) = alpha, selu'(0) = gamma * alpha, celu'(0) = 1: torch's elu_backward uses x <= 0.
  auto grads = gradients(R"(
    graph g(%e: f32[3], %s: f32[3], %c: f32[3]) {
      %elu = Elu<alpha=0.5>(%e) : f32[3]
      %selu = Selu(%s) : f32[3]
      %celu = Celu<alpha=2.0>(%c) : f32[3]
      %s1 = ReduceSum<keepdims=0>(%elu) : f32[]
      %s2 = ReduceSum<keepdims=0>(%selu) : f32[]
      %s3 = ReduceSum<keepdims=0>(%celu) : f32[]
      %s12 = Add(%s1, %s2) : f32[]
      %loss = Add(%s12, %s3) : f32[]
      return %loss
    })",
                         {f32({-1, 0, 2}), f32({-1, 0, 2}), f32({-1, 0, 2})});
  const double alpha = 1.67326319217681884765625, gamma = 1.05070102214813232421875;
  ASSERT_EQ(grads["e.grad"].size(), 3u);
  EXPECT_FLOAT_EQ(grads["e.grad"][0], 0.5 * std::exp(-1.0));
  EXPECT_EQ(grads["e.grad"][1], 0.5);
  EXPECT_EQ(grads["e.grad"][2], 1);
  ASSERT_EQ(grads["s.grad"].size(), 3u);
  EXPECT_FLOAT_EQ(grads["s.grad"][0], gamma * alpha * std::exp(-1.0));
  EXPECT_FLOAT_EQ(grads["s.grad"][1], gamma * alpha);
  EXPECT_FLOAT_EQ(grads["s.grad"][2], gamma);
  ASSERT_EQ(grads["c.grad"].size(), 3u);
  EXPECT_FLOAT_EQ(grads["c.grad"][0], std::exp(-0.5));
  EXPECT_EQ(grads["c.grad"][1], 1);
  EXPECT_EQ(grads["c.grad"][2], 1);
}

TEST(ElementwiseGradConventions, PReluSlopeGetsNothingAtZeroAndSumsOverBroadcastDims) {
  // torch's _prelu_kernel_backward: dx = x > 0 ? dy : slope * dy, dslope = x > 0 ? 0 : x * dy,
  // the slope's gradient summed over the rows it was broadcast along.
  auto grads = gradients(R"(
    graph g(%x: f32[2,3], %slope: f32[3]) {
      %y = PRelu(%x, %slope) : f32[2,3]
      %loss = ReduceSum<keepdims=0>(%y) : f32[]
      return %loss
    })",
                         {Tensor::from_f32({2, 3}, {-1, 0, 2, -3, 4, 0}), f32({0.25f, -1, 3})});
  EXPECT_EQ(grads["x.grad"], (std::vector<double>{0.25, -1, 1, 0.25, 1, 3}));
  EXPECT_EQ(grads["slope.grad"], (std::vector<double>{-4, 0, 0}));
}

TEST(ElementwiseGradConventions, SoftsignAndMishAtZero) {
  // softsign'(0) = 1; mish'(0) = tanh(ln 2) = 0.6.
  auto grads = gradients(R"(
    graph g(%a: f32[1], %m: f32[1]) opset(18) {
      %soft = Softsign(%a) : f32[1]
      %mish = Mish(%m) : f32[1]
      %s1 = ReduceSum<keepdims=0>(%soft) : f32[]
      %s2 = ReduceSum<keepdims=0>(%mish) : f32[]
      %loss = Add(%s1, %s2) : f32[]
      return %loss
    })",
                         {f32({0}), f32({0})});
  EXPECT_EQ(grads["a.grad"], (std::vector<double>{1}));
  ASSERT_EQ(grads["m.grad"].size(), 1u);
  EXPECT_FLOAT_EQ(grads["m.grad"][0], 0.6);
}

TEST(ElementwiseGradConventions, PowAtAZeroBaseOrExponentGivesZeroNotNaN) {
  // torch.pow: no base gradient where y == 0 (0^0), no exponent gradient where x == 0, y >= 0.
  auto grads = gradients(R"(
    graph g(%x: f32[4], %y: f32[4]) {
      %z = Pow(%x, %y) : f32[4]
      %loss = ReduceSum<keepdims=0>(%z) : f32[]
      return %loss
    })",
                         {f32({0, 0, 2, 3}), f32({0, 2, 3, 0})});
  ASSERT_EQ(grads["x.grad"].size(), 4u);
  EXPECT_EQ(grads["x.grad"], (std::vector<double>{0, 0, 12, 0}));
  EXPECT_EQ(grads["y.grad"][0], 0);
  EXPECT_EQ(grads["y.grad"][1], 0);
  EXPECT_FLOAT_EQ(grads["y.grad"][2], 8 * std::log(2.0));
  EXPECT_FLOAT_EQ(grads["y.grad"][3], std::log(3.0));
}

}  // namespace
}  // namespace ampc
