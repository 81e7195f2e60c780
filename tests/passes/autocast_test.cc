// autocast: the decision (compute dtype, accumulate dtype, reason) of every node of small graphs
// written in text IR, for each rule of the policy (docs/precision-policy.md): allow, deny
// spreading through clear and follow nodes, follow with mixed inputs, constants, overrides, pins,
// unknown ops, bf16's table, the levels. The policy's own checks are in
// tests/compiler/precision_policy_test.cc.
#include "compiler/precision_policy.h"
#include "compiler/strings.h"
#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

// "NAME: COMPUTE[ acc ACCUMULATE]: REASON" for every node, in order.
std::vector<std::string> decisions(const Graph& graph) {
  std::vector<std::string> lines;
  for (const auto& node : graph.nodes()) {
    const PrecisionDecision& d = node->precision();
    lines.push_back(str_cat(node->name(), ": ", d.compute ? dtype_name(*d.compute) : "-",
                            d.accumulate ? str_cat(" acc ", dtype_name(*d.accumulate)) : "", ": ",
                            d.reason));
  }
  return lines;
}

std::unique_ptr<Graph> autocast(std::string_view text, const PrecisionPolicy& policy,
                                Diagnostics& diagnostics,
                                const std::vector<std::string>& constants = {}) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return nullptr;
  for (Value* init : graph->initializers()) {
    for (const std::string& name : constants) {
      if (init->name() == name) init->set_constant(true);
    }
  }
  const std::string before = print_graph(*graph);
  absl::StatusOr<bool> changed = make_autocast_pass(policy)->run(*graph, PassContext{&diagnostics});
  EXPECT_TRUE(changed.ok()) << changed.status();
  // Decisions only: the graph itself is unchanged.
  std::unique_ptr<Graph> bare = graph->clone();
  for (const auto& node : bare->nodes()) node->mutable_precision() = {};
  EXPECT_EQ(print_graph(*bare), before);
  return graph;
}

// The decisions of nodes `picked` (indices in graph order) of `text` under `policy`.
std::vector<std::string> decisions_of(std::string_view text, const PrecisionPolicy& policy,
                                      const std::vector<size_t>& picked) {
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(text, policy, diagnostics);
  if (graph == nullptr) return {};
  const std::vector<std::string> all = decisions(*graph);
  std::vector<std::string> got;
  for (size_t i : picked) got.push_back(i < all.size() ? all[i] : "(no node)");
  return got;
}

PrecisionPolicy bf16_policy() {
  PrecisionPolicy bf16;
  bf16.low = DType::kBF16;
  return bf16;
}

// x -> MatMul (allow) -> Softmax (deny) -> Relu (clear) -> Mul (follow) -> MatMul -> Tanh (follow)
// (the Mul of two values: a Mul of one value by itself is a square, which takes Pow's entry)
constexpr std::string_view kChain = R"(
  graph g(%x: f32[4,8]) opset(17) {
    init %w1: f32[8,8] = elided
    init %w2: f32[8,8] = elided
    %a = MatMul(%x, %w1) {name="mm1"} : f32[4,8]
    %s = Softmax(%a) {name="softmax"} : f32[4,8]
    %r = Relu(%s) {name="relu"} : f32[4,8]
    %m = Mul(%r, %s) {name="product"} : f32[4,8]
    %b = MatMul(%m, %w2) {name="mm2"} : f32[4,8]
    %t = Tanh(%b) {name="tanh"} : f32[4,8]
    %n = Neg(%t) {name="neg"} : f32[4,8]
    return %n
  })";

TEST(Autocast, DenySpreadsForwardThroughClearAndFollowAllowThroughThem) {
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(kChain, PrecisionPolicy{}, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph), (std::vector<std::string>{
                                   "mm1: f16 acc f32: allow-list MatMul",
                                   "softmax: f32: deny-list Softmax",
                                   "relu: f32: clear-list Relu: input %s is fp32 from 'softmax'",
                                   "product: f32: follow-list Mul: input %r is fp32 from 'relu'",
                                   "mm2: f16 acc f32: allow-list MatMul",
                                   "tanh: f16: follow-list Tanh: follows %b from 'mm2'",
                                   "neg: f16: clear-list Neg: follows %t from 'tanh'",
                               }));
  EXPECT_TRUE(diagnostics.warnings().empty());
}

// A Mul of a value by itself is the square Pow(x, 2) is, and takes Pow's entry: fp32 in fp16,
// whose squares overflow from 256 on (as mse_loss, norms and variances square before their
// fp32 sums); follow in bf16, which has fp32's range; the policy's own entry for Mul, if any.
TEST(Autocast, ASquareTakesPowsEntry) {
  constexpr std::string_view kSquares = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %d = Sub(%a, %x) {name="difference"} : f32[4,8]
      %q = Mul(%a, %a) {name="square"} : f32[4,8]
      %p = Mul(%a, %q) {name="product"} : f32[4,8]
      return %q, %p, %d
    })";
  const auto square_and_product = [&](const PrecisionPolicy& policy) {
    Diagnostics diagnostics;
    std::unique_ptr<Graph> graph = autocast(kSquares, policy, diagnostics);
    std::vector<std::string> got =
        graph == nullptr ? std::vector<std::string>{} : decisions(*graph);
    return std::vector<std::string>(got.begin() + 2, got.end());
  };
  EXPECT_EQ(
      square_and_product(PrecisionPolicy{}),
      (std::vector<std::string>{"square: f32: deny-list Pow (x * x)",
                                "product: f32: follow-list Mul: input %q is fp32 from 'square'"}));
  PrecisionPolicy bf16;
  bf16.low = DType::kBF16;
  EXPECT_EQ(
      square_and_product(bf16),
      (std::vector<std::string>{
          "square: bf16: follow-list (bf16: no overflow risk) Pow (x * x): follows %a from 'mm'",
          "product: bf16: follow-list Mul: follows %a from 'mm'"}));
  PrecisionPolicy named;
  ASSERT_TRUE(add_op_entry(named, "Mul", AutocastCategory::kFollow, "--follow Mul").ok());
  EXPECT_EQ(
      square_and_product(named),
      (std::vector<std::string>{"square: f16: follow (--follow Mul): follows %a from 'mm'",
                                "product: f16: follow (--follow Mul): follows %a from 'mm'"}));
}

// nn.Linear on a rank-3 input as the exporters write it, MatMul by the transposed weight and Add
// of the bias [N]: the Add is low with its product (F.linear under autocast adds its bias in
// low precision, as Gemm does); a weight of another shape, or a product of two activations,
// keeps the rule for weights.
TEST(Autocast, NnLinearsBiasAddIsLowWithItsProduct) {
  constexpr std::string_view kLinear = R"(
    graph g(%x: f32[2,4,8]) opset(17) {
      init %weight: f32[6,8] = elided
      init %bias: f32[6] = elided
      init %table: f32[4,6] = elided
      %wt = Transpose<perm=[1,0]>(%weight) {name="transpose"} : f32[8,6]
      %p = MatMul(%x, %wt) {name="fc/MatMul"} : f32[2,4,6]
      %y = Add(%bias, %p) {name="fc/Add"} : f32[2,4,6]
      %z = Add(%p, %table) {name="add_table"} : f32[2,4,6]
      return %y, %z
    })";
  for (const DType low : {DType::kF16, DType::kBF16}) {
    Diagnostics diagnostics;
    PrecisionPolicy policy;
    policy.low = low;
    std::unique_ptr<Graph> graph = autocast(kLinear, policy, diagnostics);
    ASSERT_NE(graph, nullptr);
    const std::vector<std::string> got = decisions(*graph);
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got[2], str_cat("fc/Add: ", dtype_name(low),
                              ": follow-list Add: adds the bias of 'fc/MatMul' (nn.Linear's, in ",
                              dtype_name(low), " with its product as F.linear's under autocast)"));
    EXPECT_EQ(got[3], "add_table: f32: follow-list Add: reads fp32 %table (weight)");
  }
}

// The start of a graph of two f16 products of x, %a (node mm_a) and %b (mm_b).
constexpr std::string_view kTwoProducts = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      init %v: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm_a"} : f32[4,8]
      %b = MatMul(%x, %v) {name="mm_b"} : f32[4,8]
)";

// A Mul that only fp32 sums read is a dot product's element-wise half: fp32 in fp16 (its
// products exact, as a GEMM's), not when anything else reads it. In bf16 the sum's fp32 makes it
// fp32 only as the last low node before a loss (nothing after it computes low).
TEST(Autocast, AProductOnlySumsReadIsFp32InFp16) {
  const std::string kDot = std::string(kTwoProducts) + R"(
      %p = Mul(%a, %b) {name="products"} : f32[4,8]
      %d = ReduceSum<axes=[1], keepdims=0>(%p) {name="dot"} : f32[4]
      %q = Mul(%b, %a) {name="also_read"} : f32[4,8]
      %e = ReduceSum<axes=[1], keepdims=0>(%q) {name="sum"} : f32[4]
      %t = Tanh(%q) {name="tanh"} : f32[4,8]
      return %d, %e, %t
    })";
  const auto products = [&](const PrecisionPolicy& policy) {
    return decisions_of(kDot, policy, {2, 4});
  };
  EXPECT_EQ(products(PrecisionPolicy{}),
            (std::vector<std::string>{"products: f32: follow-list Mul: its products are summed in "
                                      "fp32 by 'dot' (a dot product's, exact in fp32 as a GEMM's)",
                                      "also_read: f16: follow-list Mul: follows %b from 'mm_b'"}));
  EXPECT_EQ(products(bf16_policy()),
            (std::vector<std::string>{"products: f32: follow-list Mul: fp32 nodes read it and none "
                                      "after it computes low ('dot' reads it)",
                                      "also_read: bf16: follow-list Mul: follows %b from 'mm_b'"}));
}

// atan2 as the exporters write it, Atan of a quotient, then the quadrant's corrections: in fp16
// the quotient is fp32 (so is the Atan that follows it), since y / x overflows where x is small,
// and so does Atan's gradient 1 / (1 + u^2) of a large quotient u; in bf16 both follow. A
// quotient read otherwise follows.
TEST(Autocast, AnArctangentsQuotientIsFp32InFp16) {
  const std::string kAtan2 = std::string(kTwoProducts) + R"(
      %u = Div(%a, %b) {name="slope"} : f32[4,8]
      %t = Atan(%u) {name="atan"} : f32[4,8]
      %r = Div(%b, %a) {name="ratio"} : f32[4,8]
      %s = Tanh(%r) {name="tanh"} : f32[4,8]
      return %t, %s
    })";
  const auto decided = [&](const PrecisionPolicy& policy) {
    return decisions_of(kAtan2, policy, {2, 3, 4});
  };
  EXPECT_EQ(decided(PrecisionPolicy{}),
            (std::vector<std::string>{
                "slope: f32: follow-list Div: 'atan' takes the arctangent of its quotient "
                "(torch.atan2 as the exporters write it; in fp16 the quotient and its gradient "
                "overflow where the angle does not)",
                "atan: f32: follow-list Atan: input %u is fp32 from 'slope'",
                "ratio: f16: follow-list Div: follows %b from 'mm_b'"}));
  EXPECT_EQ(decided(bf16_policy()),
            (std::vector<std::string>{"slope: bf16: follow-list Div: follows %a from 'mm_a'",
                                      "atan: bf16: follow-list Atan: follows %u from 'slope'",
                                      "ratio: bf16: follow-list Div: follows %b from 'mm_b'"}));
}

// ConvTranspose, which import lowers onto ampc.ConvGradData (Conv's input gradient), is matrix
// work on the allow list like Conv, in fp16 and bf16.
TEST(Autocast, TransposedConvolutionIsOnTheAllowList) {
  constexpr std::string_view kUp = R"(
    graph g(%x: f32[1,4,3,3]) opset(17) {
      init %w: f32[4,2,3,3] = elided
      %y = ampc.ConvGradData<input_shape=[1,2,5,5]>(%x, %w) {name="up"} : f32[1,2,5,5]
      return %y
    })";
  for (const DType low : {DType::kF16, DType::kBF16}) {
    Diagnostics diagnostics;
    PrecisionPolicy policy;
    policy.low = low;
    std::unique_ptr<Graph> graph = autocast(kUp, policy, diagnostics);
    ASSERT_NE(graph, nullptr);
    EXPECT_EQ(decisions(*graph),
              (std::vector<std::string>{
                  str_cat("up: ", dtype_name(low), " acc f32: allow-list ampc.ConvGradData")}));
    EXPECT_TRUE(diagnostics.warnings().empty());
  }
}

// A follow node reading a low value and a weight stays fp32 (reading the weight in fp16 would
// round it, as PyTorch's type promotion of fp16 + fp32 does); a constant that fp16 holds exactly
// does not count; one it cannot hold does, and the reason says so (not "weight").
TEST(Autocast, FollowWithMixedInputs) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      init %offset: f32[4,8] = elided
      init %half: f32[] = [0.5]
      init %tiny: f32[] = [1e-10]
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %b = Add(%a, %offset) {name="add_offset"} : f32[4,8]
      %c = Mul(%a, %half) {name="mul_half"} : f32[4,8]
      %d = Mul(%a, %tiny) {name="mul_tiny"} : f32[4,8]
      %e = Add(%x, %half) {name="input_only"} : f32[4,8]
      %f = Add(%half, %half) {name="constants_only"} : f32[]
      return %b, %c, %d, %e, %f
    })";
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(kText, PrecisionPolicy{}, diagnostics, {"half", "tiny"});
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph), (std::vector<std::string>{
                                   "mm: f16 acc f32: allow-list MatMul",
                                   "add_offset: f32: follow-list Add: reads fp32 %offset (weight)",
                                   "mul_half: f16: follow-list Mul: follows %a from 'mm'",
                                   "mul_tiny: f32: follow-list Mul: reads fp32 %tiny (a "
                                   "constant f16 does not hold exactly)",
                                   "input_only: f32: follow-list Add: reads fp32 %x (graph input)",
                                   "constants_only: f32: follow-list Add: only constants in",
                               }));
}

// What torch.onnx's dynamo exporter lifts into initializers is taken for the constant it is, as
// autodiff takes it (passes/mask_data.h): a one-element val_<n> (an attention's square-root
// scale), a rank-0 scalar and, in a file that declares its parameters, an undeclared tensor of
// one repeated value (a folded torch.zeros). A scale bf16 does not hold stays fp32, saying so. A
// [1] tensor named as a module's parameter, and a buffer (state a step may change), are read as
// the fp32 data they are.
TEST(Autocast, ConstantsTheExporterLiftedAreConstants) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(18) {
      init %w: f32[8,8] = elided
      init %val_3: f32[1] = [0.5]
      init %val_7: f32[1] = [0.59460354]
      init %two: f32[] = [2.0]
      init %zeros_like: f32[4,8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
      init %running: f32[4,8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
      init %gate.bias: f32[1] = [0.5]
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %b = Mul(%a, %val_3) {name="lifted_half"} : f32[4,8]
      %c = Mul(%a, %val_7) {name="lifted_scale"} : f32[4,8]
      %d = Mul(%a, %two) {name="scalar"} : f32[4,8]
      %e = Add(%a, %zeros_like) {name="folded_zeros"} : f32[4,8]
      %f = Add(%a, %running) {name="buffer"} : f32[4,8]
      %h = Add(%a, %gate.bias) {name="parameter"} : f32[4,8]
      return %b, %c, %d, %e, %f, %h
    })";
  const auto run = [&](bool declared) {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(kText);
    if (graph == nullptr) return std::vector<std::string>{};
    for (Value* init : graph->initializers()) {
      if (declared && (init->name() == "w" || init->name() == "gate.bias")) {
        init->set_declared(Value::Declared::kParameter);
      }
      if (declared && init->name() == "running") init->set_declared(Value::Declared::kBuffer);
    }
    Diagnostics diagnostics;
    EXPECT_TRUE(make_autocast_pass(bf16_policy())->run(*graph, PassContext{&diagnostics}).ok());
    return decisions(*graph);
  };
  EXPECT_EQ(run(/*declared=*/true),
            (std::vector<std::string>{
                "mm: bf16 acc f32: allow-list MatMul",
                "lifted_half: bf16: follow-list Mul: follows %a from 'mm'",
                "lifted_scale: f32: follow-list Mul: reads fp32 %val_7 (a constant bf16 does not "
                "hold exactly)",
                "scalar: bf16: follow-list Mul: follows %a from 'mm'",
                "folded_zeros: bf16: follow-list Add: follows %a from 'mm'",
                "buffer: f32: follow-list Add: reads fp32 %running (weight)",
                "parameter: f32: follow-list Add: reads fp32 %gate.bias (weight)",
            }));
  // A file that declares nothing (the TorchScript exporter's): a tensor of zeros may be a
  // parameter (a bias initialized to 0), and is read as one.
  EXPECT_EQ(run(/*declared=*/false)[4],
            "folded_zeros: f32: follow-list Add: reads fp32 %zeros_like (weight)");
}

TEST(Autocast, OverridesAndPinsNameTheirSource) {
  PrecisionPolicy policy;
  ASSERT_TRUE(add_op_entry(policy, "Softmax", AutocastCategory::kFollow, "--follow Softmax").ok());
  ASSERT_TRUE(add_op_entry(policy, "Tanh", AutocastCategory::kDeny, "--deny Tanh").ok());
  policy.fp32_nodes.push_back({"^mm2$", "--fp32-nodes"});
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(kChain, policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph),
            (std::vector<std::string>{
                "mm1: f16 acc f32: allow-list MatMul",
                // --follow Softmax is taken as written. Nothing after the pinned mm2 computes
                // low: the nodes before it that the lists decide compute in fp32 too, which mm2
                // reads their results in.
                "softmax: f16 acc f32: follow (--follow Softmax): follows %a from 'mm1'",
                "relu: f32: clear-list Relu: fp32 nodes read it and none after it computes low "
                "('product' reads it)",
                "product: f32: follow-list Mul: fp32 nodes read it and none after it computes low "
                "('mm2' reads it)",
                "mm2: f32: pinned by --fp32-nodes '^mm2$'",
                "tanh: f32: deny (--deny Tanh)",
                "neg: f32: clear-list Neg: input %t is fp32 from 'tanh'",
            }));
  EXPECT_TRUE(diagnostics.warnings().empty());
}

TEST(Autocast, AnOpWithoutAnEntryStaysFp32WithOneWarning) {
  testing::register_passthrough_op("AutocastTestOpaque");
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(R"(
    graph g(%x: f32[2]) opset(17, ampc:1) {
      %a = ampc.AutocastTestOpaque(%x) {name="one"} : f32[2]
      %b = ampc.AutocastTestOpaque(%a) {name="two"} : f32[2]
      return %b
    })",
                                          PrecisionPolicy{}, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph), (std::vector<std::string>{
                                   "one: f32: no precision entry for ampc.AutocastTestOpaque",
                                   "two: f32: no precision entry for ampc.AutocastTestOpaque",
                               }));
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_NE(diagnostics.warnings()[0].find("ampc.AutocastTestOpaque"), std::string::npos);
}

// bf16 has fp32's exponent range: the ops fp16 denies for overflow only follow there.
TEST(Autocast, Bf16LetsExpAndLogFollow) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %e = Exp(%a) {name="exp"} : f32[4,8]
      %s = Softmax(%e) {name="softmax"} : f32[4,8]
      %o = MatMul(%s, %w) {name="mm_out"} : f32[4,8]
      return %o
    })";
  Diagnostics diagnostics;
  PrecisionPolicy bf16;
  bf16.low = DType::kBF16;
  std::unique_ptr<Graph> graph = autocast(kText, bf16, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph),
            (std::vector<std::string>{
                "mm: bf16 acc f32: allow-list MatMul",
                "exp: bf16: follow-list (bf16: no overflow risk) Exp: follows %a from 'mm'",
                "softmax: f32: deny-list Softmax",
                "mm_out: bf16 acc f32: allow-list MatMul",
            }));
  graph = autocast(kText, PrecisionPolicy{}, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph)[1], "exp: f32: deny-list Exp");
}

// A loss's element-wise terms after the last low node (softplus(-x) * w before an fp32 mean)
// compute in fp32: low, they would spare no cast (only move it from the mean's input to the
// product's) and round each term once more. A node after which something computes low again
// (here the MatMul reading the second mean) follows its input, and so does a graph output,
// whose dtype insert-casts restores after the low node autocast would run, and a clear node
// that selects fewer elements than it reads (the ReduceMax: fp32, it would only move the cast
// to its larger input).
TEST(Autocast, TheLowNodesAfterWhichNothingIsLowComputeInFp32) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %n = Neg(%a) {name="neg"} : f32[4,8]
      %p = Softplus(%n) {name="softplus"} : f32[4,8]
      %q = Mul(%p, %a) {name="weigh"} : f32[4,8]
      %loss = ReduceMean<keepdims=0>(%q) {name="loss"} : f32[]
      %t = Tanh(%a) {name="tanh"} : f32[4,8]
      %m = ReduceMean<axes=[0]>(%t) {name="mean"} : f32[1,8]
      %h = MatMul(%m, %w) {name="mm_after"} : f32[1,8]
      %r = Relu(%a) {name="relu"} : f32[4,8]
      %k = ReduceMax<axes=[1], keepdims=0>(%a) {name="max"} : f32[4]
      %km = ReduceMean<keepdims=0>(%k) {name="max_mean"} : f32[]
      return %loss, %h, %r, %km
    })";
  EXPECT_EQ(decisions_of(kText, bf16_policy(), {1, 2, 3, 5, 8, 9}),
            (std::vector<std::string>{
                "neg: f32: clear-list Neg: fp32 nodes read it and none after it computes low "
                "('softplus' reads it)",
                "softplus: f32: follow-list (bf16: no overflow risk) Softplus: fp32 nodes read it "
                "and none after it computes low ('weigh' reads it)",
                "weigh: f32: follow-list Mul: fp32 nodes read it and none after it computes low "
                "('loss' reads it)",
                "tanh: bf16: follow-list Tanh: follows %a from 'mm'",
                "relu: bf16: clear-list Relu: follows %a from 'mm'",
                "max: bf16: clear-list ReduceMax: follows %a from 'mm'",
            }));
  // In fp16 Softplus is denied: the Neg before it is the last low node, and fp32 as well.
  EXPECT_EQ(decisions_of(kText, PrecisionPolicy{}, {1, 2}),
            (std::vector<std::string>{
                "neg: f32: clear-list Neg: fp32 nodes read it and none after it computes low "
                "('softplus' reads it)",
                "softplus: f32: deny-list Softplus",
            }));
}

// ONNX admits f16 and bf16 Celu only from opset 28: it runs fp32 in both, so the file stays
// legal ONNX at the model's opset, unless the policy names it (then legalize-opset raises the
// file's opset).
TEST(Autocast, CeluIsFp32UnlessThePolicyNamesIt) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4,8]) opset(17) {
      init %w: f32[8,8] = elided
      %a = MatMul(%x, %w) {name="mm"} : f32[4,8]
      %c = Celu<alpha=2.0>(%a) {name="celu"} : f32[4,8]
      %n = Neg(%c) {name="neg"} : f32[4,8]
      return %n
    })";
  for (const PrecisionPolicy& policy : {PrecisionPolicy{}, bf16_policy()}) {
    SCOPED_TRACE(dtype_name(policy.low));
    EXPECT_EQ(decisions_of(kText, policy, {1, 2}),
              (std::vector<std::string>{
                  "celu: f32: deny-list (ONNX admits f16 and bf16 only from opset 28) Celu",
                  "neg: f32: clear-list Neg: input %c is fp32 from 'celu'",
              }));
  }
  PrecisionPolicy named;
  ASSERT_TRUE(add_op_entry(named, "Celu", AutocastCategory::kFollow, "--follow Celu").ok());
  EXPECT_EQ(decisions_of(kText, named, {1}),
            (std::vector<std::string>{"celu: f16: follow (--follow Celu): follows %a from 'mm'"}));
}

TEST(Autocast, Levels) {
  Diagnostics diagnostics;
  PrecisionPolicy policy;
  policy.level = OptLevel::kO0;
  std::unique_ptr<Graph> graph = autocast(kChain, policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  for (const std::string& line : decisions(*graph)) {
    EXPECT_TRUE(line.ends_with(": f32: O0: everything fp32")) << line;
  }
  policy.level = OptLevel::kO2;
  graph = autocast(kChain, policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph)[0],
            "mm1: f16 acc f32: O2: everything f16 but losses and normalization");
  EXPECT_EQ(decisions(*graph)[1], "softmax: f32: O2: Softmax stays fp32");
  EXPECT_EQ(decisions(*graph)[2], "relu: f16: O2: everything f16 but losses and normalization");
  policy.level = OptLevel::kO3;
  graph = autocast(kChain, policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph)[1], "softmax: f16 acc f32: O3: everything f16");
  policy.low = DType::kF32;
  graph = autocast(kChain, policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph)[0], "mm1: f32: --precision fp32");
}

// A loss the graph computes itself (mse: Sub, Mul, ReduceMean) plus a weighted second one: at O2
// the element-wise part runs low, and the reduction to a scalar and the scalar arithmetic after
// it stay fp32, so the loss (and its scaled gradient) never passes through an f16 scalar.
TEST(Autocast, O2KeepsScalarResultsFp32) {
  Diagnostics diagnostics;
  PrecisionPolicy policy;
  policy.level = OptLevel::kO2;
  std::unique_ptr<Graph> graph = autocast(R"(
    graph g(%x: f32[4,8], %w: f32[8,2], %t: f32[4,2], %half: f32[], %other: f32[]) opset(17) {
      %y = MatMul(%x, %w) {name="mm"} : f32[4,2]
      %d = Sub(%y, %t) {name="diff"} : f32[4,2]
      %sq = Mul(%d, %d) {name="square"} : f32[4,2]
      %mse = ReduceMean<keepdims=0>(%sq) {name="mean"} : f32[]
      %weighted = Mul(%mse, %half) {name="weigh"} : f32[]
      %loss = Add(%weighted, %other) {name="sum"} : f32[]
      return %loss
    })",
                                          policy, diagnostics);
  ASSERT_NE(graph, nullptr);
  const std::string scalar =
      ": f32: O2: a scalar result (a loss, or arithmetic on losses) stays fp32";
  EXPECT_EQ(decisions(*graph),
            (std::vector<std::string>{
                "mm: f16 acc f32: O2: everything f16 but losses and normalization",
                "diff: f16: O2: everything f16 but losses and normalization",
                "square: f16: O2: everything f16 but losses and normalization",
                "mean" + scalar,
                "weigh" + scalar,
                "sum" + scalar,
            }));
}

TEST(Autocast, NodesWithoutFloatDataSaySo) {
  Diagnostics diagnostics;
  std::unique_ptr<Graph> graph = autocast(R"(
    graph g(%x: f32[4,8], %i: i64[2]) opset(17) {
      %s = Shape(%x) {name="shape"} : i64[2]
      %j = Add(%s, %i) {name="int_add"} : i64[2]
      %c = Cast<to=f32>(%j) {name="cast"} : f32[2]
      return %c
    })",
                                          PrecisionPolicy{}, diagnostics);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(decisions(*graph), (std::vector<std::string>{
                                   "shape: -: no floating-point data (reads the shape only)",
                                   "int_add: -: no floating-point data",
                                   "cast: f32: explicit Cast in the model",
                               }));
}

}  // namespace
}  // namespace ampc
