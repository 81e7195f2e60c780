// safe-softmax: PyTorch's exported safe softmax, Where(IsNaN(Softmax(x)), 0, .), trains without
// NaN. Against the definitions: the forward is bit-identical to the exported graph's; the
// gradient of a row of -inf is 0 (PyTorch's), and of any other row the softmax's, p_j (r_j -
// sum_k p_k r_k), computed here in f64 from the formula.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Scores s [3, 4] plus a mask whose row 1 keeps nothing, through the guarded softmax, into
// loss = sum(y * r).
const double kMask[3][4] = {{0, -kInf, 0, 0}, {-kInf, -kInf, -kInf, -kInf}, {0, 0, -kInf, 0}};

std::string guarded_softmax_graph(std::string_view dtype) {
  std::string mask;
  for (const auto& row : kMask) {
    for (double m : row) mask += str_cat(mask.empty() ? "" : ", ", std::isinf(m) ? "-inf" : "0.0");
  }
  return str_cat("graph g(%s: ", dtype, "[3,4], %r: ", dtype, "[3,4]) opset(17) {\n",
                 "  init %c_mask: ", dtype, "[3,4] = [", mask, "]\n",  //
                 "  init %c_zero: ", dtype, "[] = [0.0]\n",            //
                 "  %x = Add(%s, %c_mask) : ", dtype, "[3,4]\n",       //
                 "  %p = Softmax<axis=-1>(%x) : ", dtype, "[3,4]\n",   //
                 "  %n = IsNaN(%p) : bool[3,4]\n",                     //
                 "  %y = Where(%n, %c_zero, %p) : ", dtype, "[3,4]\n",
                 "  %yr = Mul(%y, %r) : ", dtype, "[3,4]\n",
                 "  %loss = ReduceSum<keepdims=0>(%yr) : ", dtype, "[]\n",
                 "  return %loss, %y\n}\n");
}

// y and the gradient of s, from the graph in `dtype` with or without the pass.
std::map<std::string, Tensor> run(std::string_view dtype, bool safe, const Tensor& s,
                                  const Tensor& r) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(guarded_softmax_graph(dtype));
  if (graph == nullptr) return {};
  for (Value* init : graph->initializers()) init->set_constant(true);
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  if (safe) {
    absl::StatusOr<bool> changed = make_safe_softmax_pass()->run(*graph, context);
    EXPECT_TRUE(changed.ok() && *changed) << "the guard was not found";
  }
  AutodiffOptions autodiff;
  autodiff.include_graph_inputs = true;
  EXPECT_TRUE(make_autodiff_pass(autodiff)->run(*graph, context).ok());
  absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> session =
      runtime::InferenceSession::create(std::move(graph), runtime::SessionOptions{});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run({{"s", s}, {"r", r}});
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? *outputs : std::map<std::string, Tensor>{};
}

TEST(SafeSoftmax, ARowOfMinusInfinityHasGradientZeroAndTheForwardIsUnchanged) {
  const std::vector<double> s = {0.5,  -1.25, 2.0,  0.75,  1.0, -0.5,
                                 0.25, 3.0,   -2.0, 0.125, 1.5, 1.0};
  const std::vector<double> r = {1.0, 2.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.25, -0.5, 1.5, 2.0, -1.0};
  for (const auto& [dtype, type, tolerance] :
       {std::tuple{"f64", DType::kF64, 1e-15}, std::tuple{"f32", DType::kF32, 1e-6}}) {
    SCOPED_TRACE(dtype);
    const Tensor s_in = Tensor::from_doubles(type, {3, 4}, s);
    const Tensor r_in = Tensor::from_doubles(type, {3, 4}, r);
    const std::map<std::string, Tensor> exported = run(dtype, false, s_in, r_in);
    const std::map<std::string, Tensor> safe = run(dtype, true, s_in, r_in);
    ASSERT_TRUE(exported.contains("y") && safe.contains("s.grad"));
    EXPECT_TRUE(std::ranges::equal(safe.at("y").bytes(), exported.at("y").bytes()));
    // The exported graph's own gradient of the full row: NaN (what the pass is for).
    EXPECT_TRUE(std::isnan(exported.at("s.grad").element_as_double(4)));

    const Tensor& grad = safe.at("s.grad");
    for (int i = 0; i < 3; ++i) {
      double top = -kInf;
      for (int j = 0; j < 4; ++j) {
        if (!std::isinf(kMask[i][j])) top = std::max(top, s[i * 4 + j]);
      }
      std::vector<double> p(4, 0.0);
      double sum = 0, pr = 0;
      for (int j = 0; j < 4; ++j) {
        if (!std::isinf(kMask[i][j])) sum += p[j] = std::exp(s[i * 4 + j] - top);
      }
      for (int j = 0; j < 4; ++j) {
        if (sum > 0) p[j] /= sum;
        pr += p[j] * r[i * 4 + j];
      }
      for (int j = 0; j < 4; ++j) {
        const double want = p[j] * (r[i * 4 + j] - pr);  // 0 for a masked key and the full row
        EXPECT_NEAR(grad.element_as_double(i * 4 + j), want, tolerance) << i << ", " << j;
      }
    }
  }
}

// The guard must be the exported form: a Where that zeroes something else, or fills with
// another value, is left alone.
TEST(SafeSoftmax, OnlyTheGuardOfASoftmaxIsRewritten) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %c_zero: f32[] = [0.0]
      init %c_one: f32[] = [1.0]
      %p = Softmax<axis=-1>(%x) : f32[2,3]
      %n = IsNaN(%p) : bool[2,3]
      %a = Where(%n, %c_one, %p) : f32[2,3]
      %e = Exp(%x) : f32[2,3]
      %m = IsNaN(%e) : bool[2,3]
      %b = Where(%m, %c_zero, %e) : f32[2,3]
      return %a, %b
    })");
  ASSERT_NE(graph, nullptr);
  for (Value* init : graph->initializers()) init->set_constant(true);
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed = make_safe_softmax_pass()->run(*graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace ampc
