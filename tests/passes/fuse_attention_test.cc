// fuse-attention: what fuses (the pattern with a bool or additive mask, a Mul or Div scale or
// none, float casts between, PyTorch's safe-softmax guard) and what must not (the probabilities
// read elsewhere, a finite fill value, a mask before the scale, a bias computed from a weight, a
// Softmax over another axis); and the fused node's output and its gradients (autodiff through
// ampc.AttentionGrad) against the unfused pattern's, on the CPU. The reference for the numerics is
// the unfused graph run in f64: the fused node in f32 and in f16 must be as close to it as the
// unfused graph in the same type is (within a factor), and within a tolerance that scales with the
// sums' lengths.
#include "passes/fuse_attention.h"

#include <cstdio>
#include <random>
#include <tuple>

#include "tests/attention_graphs.h"

namespace ampc {
namespace {

using testing::mark_constants;

// Runs fuse-attention on `before` (its c_ initializers constant) and compares with `after`.
void expect_fusion(std::string_view before, std::string_view after, bool changes = true) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(before);
  ASSERT_NE(graph, nullptr);
  mark_constants(*graph);
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed = make_fuse_attention_pass()->run(*graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ(*changed, changes);
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_EQ(print_graph(*graph), testing::canonical_text(after));
}

void expect_unchanged(std::string_view graph) { expect_fusion(graph, graph, false); }

// The causal mask of 3 queries over 3 keys.
constexpr std::string_view kCausal = "[true, false, false, true, true, false, true, true, true]";

TEST(FuseAttention, TheAutocastPatternWithABoolMaskBecomesOneNode) {
  const std::string before = str_cat(R"(
    graph g(%q: f16[2,3,4], %kt: f16[2,4,3], %v: f16[2,3,5]) opset(17) {
      init %c_scale: f16[] = [0.5]
      init %c_ninf: f16[] = [-inf]
      init %c_mask: bool[3,3] = )",
                                     kCausal, R"(
      %s = MatMul(%q, %kt) : f16[2,3,3]
      %sc = Mul(%s, %c_scale) : f16[2,3,3]
      %sm = Where(%c_mask, %sc, %c_ninf) : f16[2,3,3]
      %s32 = Cast<to=f32>(%sm) : f32[2,3,3]
      %p = Softmax<axis=-1>(%s32) : f32[2,3,3]
      %p16 = Cast<to=f16>(%p) : f16[2,3,3]
      %y = MatMul(%p16, %v) : f16[2,3,5]
      return %y
    })");
  const std::string after = str_cat(R"(
    graph g(%q: f16[2,3,4], %kt: f16[2,4,3], %v: f16[2,3,5]) opset(17) {
      init %c_mask: bool[3,3] = )",
                                    kCausal, R"(
      %y, %y.lse = ampc.Attention<mask_keep=1, scale=0.5>(%q, %kt, %v, %c_mask) : f16[2,3,5], f32[2,3]
      return %y
    })");
  expect_fusion(before, after);
}

// Where(M, -inf, scores) masks where M is true; Div divides; the bias of the ONNX Attention
// op's expansion (Add of a constant 0 / -inf matrix) is the float form.
TEST(FuseAttention, InvertedMasksDivisorsAndAdditiveBiasesFuse) {
  expect_fusion(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
      init %c_d: f32[] = [4.0]
      init %c_ninf: f32[] = [-inf]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sc = Div(%s, %c_d) : f32[3,4]
      %sm = Where(%m, %c_ninf, %sc) : f32[3,4]
      %p = Softmax(%sm) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })",
                R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
      %y, %y.lse = ampc.Attention<mask_keep=0, scale=0.25>(%q, %kt, %v, %m) : f32[3,2], f32[3]
      return %y
    })");
  expect_fusion(R"(
    graph g(%q: f32[1,3,2], %kt: f32[1,2,3], %v: f32[1,3,2]) opset(17) {
      init %c_bias: f32[3,3] = [0.0, -inf, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0]
      %s = MatMul(%q, %kt) : f32[1,3,3]
      %sb = Add(%s, %c_bias) : f32[1,3,3]
      %p = Softmax(%sb) : f32[1,3,3]
      %y = MatMul(%p, %v) : f32[1,3,2]
      return %y
    })",
                R"(
    graph g(%q: f32[1,3,2], %kt: f32[1,2,3], %v: f32[1,3,2]) opset(17) {
      init %c_bias.keep: bool[3,3] = [true, false, false, true, true, false, true, true, true]
      %y, %y.lse = ampc.Attention<mask_keep=1, scale=1.0>(%q, %kt, %v, %c_bias.keep) : f32[1,3,2], f32[1,3]
      return %y
    })");
}

// A constant bias of only 0 and -inf (the dynamo exporter folds the causal mask into one, in f32
// whatever the operands' type, maybe behind a cast) is the bool mask kept where it is 0: one
// bool initializer for every attention that reads the bias, and the f32 one gone.
TEST(FuseAttention, AConstantBiasOfZeroAndMinusInfinityBecomesABoolMask) {
  const std::string attention = R"(
      %s{n} = MatMul(%q, %kt) : f16[2,3,3]
      %sb{n} = Add(%s{n}, %bh) : f16[2,3,3]
      %p{n} = Softmax(%sb{n}) : f16[2,3,3]
      %y{n} = MatMul(%p{n}, %v) : f16[2,3,2]
)";
  const auto layers = [&](std::string_view bias) {
    std::string text = str_cat(R"(
    graph g(%q: f16[2,3,2], %kt: f16[2,2,3], %v: f16[2,3,2]) opset(17) {
      init %bias: f32[3,3] = [)",
                               bias, R"(]
      %bh = Cast<to=f16>(%bias) : f16[3,3]
)");
    for (const char* n : {"1", "2"}) {
      std::string layer = attention;
      for (size_t at; (at = layer.find("{n}")) != std::string::npos;) layer.replace(at, 3, n);
      text += layer;
    }
    return text + "      return %y1, %y2\n    }";
  };
  std::unique_ptr<Graph> graph =
      testing::parse_or_fail(layers("0.0, -inf, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0"));
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(make_fuse_attention_pass()->run(*graph, PassContext{&diagnostics}).ok());
  ASSERT_TRUE(make_dce_pass()->run(*graph, PassContext{&diagnostics}).ok());
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_EQ(print_graph(*graph), testing::canonical_text(R"(
    graph g(%q: f16[2,3,2], %kt: f16[2,2,3], %v: f16[2,3,2]) opset(17) {
      init %bias.keep: bool[3,3] = [true, false, false, true, true, false, true, true, true]
      %y1, %y1.lse = ampc.Attention<mask_keep=1, scale=1.0>(%q, %kt, %v, %bias.keep) : f16[2,3,2], f32[2,3]
      %y2, %y2.lse = ampc.Attention<mask_keep=1, scale=1.0>(%q, %kt, %v, %bias.keep) : f16[2,3,2], f32[2,3]
      return %y1, %y2
    })"));

  // Hugging Face's fill, f32's lowest finite value, masks as -inf does where every row keeps a
  // key; a row that keeps none is uniform over its keys, so such a bias stays one, as does a
  // fill of smaller magnitude (whose masked scores need not round to it).
  constexpr std::string_view kLowest = "-3.4028234663852886e+38";
  graph = testing::parse_or_fail(
      layers(str_cat("0.0, ", kLowest, ", ", kLowest, ", 0.0, 0.0, ", kLowest, ", 0.0, 0.0, 0.0")));
  ASSERT_NE(graph, nullptr);
  ASSERT_TRUE(make_fuse_attention_pass()->run(*graph, PassContext{&diagnostics}).ok());
  std::string text = print_graph(*graph);
  EXPECT_NE(text.find("init %bias.keep: bool[3,3] = [true, false, false, true, true, false, true, "
                      "true, true]"),
            std::string::npos)
      << text;
  for (const std::string& bias :
       {str_cat("0.0, ", kLowest, ", ", kLowest, ", ", kLowest, ", ", kLowest, ", ", kLowest,
                ", 0.0, 0.0, 0.0"),
        std::string("0.0, -10000.0, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0")}) {
    SCOPED_TRACE(bias);
    graph = testing::parse_or_fail(layers(bias));
    ASSERT_NE(graph, nullptr);
    ASSERT_TRUE(make_fuse_attention_pass()->run(*graph, PassContext{&diagnostics}).ok());
    text = print_graph(*graph);
    EXPECT_EQ(text.find("bool["), std::string::npos) << text;
    EXPECT_NE(text.find("ampc.Attention<scale=1.0>(%q, %kt, %v, %bh)"), std::string::npos) << text;
  }
}

// PyTorch's export of scaled_dot_product_attention scales Q and Kt by the scale's square root;
// those factors join the scores' own. A scaled Q that something else reads keeps its Mul.
TEST(FuseAttention, ScalesOfQAndKtFoldIntoTheScale) {
  expect_fusion(R"(
    graph g(%q: f32[2,3,2], %kt: f32[2,2,3], %v: f32[2,3,2]) opset(17) {
      init %c_root: f32[1] = [0.5]
      init %c_d: f32[] = [4.0]
      init %c_bias: f32[3,3] = [0.0, -inf, -inf, 0.0, 0.0, -inf, 0.0, 0.0, 0.0]
      init %c_three: f32[] = [3.0]
      %qs = Mul(%q, %c_root) : f32[2,3,2]
      %kts = Div(%kt, %c_d) : f32[2,2,3]
      %s = MatMul(%qs, %kts) : f32[2,3,3]
      %sc = Mul(%c_three, %s) : f32[2,3,3]
      %sb = Add(%sc, %c_bias) : f32[2,3,3]
      %p = Softmax(%sb) : f32[2,3,3]
      %y = MatMul(%p, %v) : f32[2,3,2]
      return %y
    })",
                R"(
    graph g(%q: f32[2,3,2], %kt: f32[2,2,3], %v: f32[2,3,2]) opset(17) {
      init %c_bias.keep: bool[3,3] = [true, false, false, true, true, false, true, true, true]
      %y, %y.lse = ampc.Attention<mask_keep=1, scale=0.375>(%q, %kt, %v, %c_bias.keep) : f32[2,3,2], f32[2,3]
      return %y
    })");
  expect_fusion(R"(
    graph g(%q: f32[3,2], %kt: f32[2,3], %v: f32[3,2]) opset(17) {
      init %c_root: f32[] = [0.5]
      %qs = Mul(%q, %c_root) : f32[3,2]
      %kts = Mul(%kt, %c_root) : f32[2,3]
      %s = MatMul(%qs, %kts) : f32[3,3]
      %p = Softmax(%s) : f32[3,3]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y, %qs
    })",
                R"(
    graph g(%q: f32[3,2], %kt: f32[2,3], %v: f32[3,2]) opset(17) {
      init %c_root: f32[] = [0.5]
      %qs = Mul(%q, %c_root) : f32[3,2]
      %y, %y.lse = ampc.Attention<scale=0.5>(%qs, %kt, %v) : f32[3,2], f32[3]
      return %y, %qs
    })");
}

// The dynamo exporter's optimizer folds the causal mask into a bool initializer, which the
// padding mask is combined with before it becomes a bias: a bool (or integer) initializer is
// never a weight, so the bias is data.
TEST(FuseAttention, BiasesFromAFoldedBoolMaskFuse) {
  expect_fusion(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[1,4]) opset(17) {
      init %causal: bool[3,4] = [true, false, false, false, true, true, false, false, true, true, true, false]
      init %zero: f32[] = [0.0]
      init %lowest: f32[] = [-3.4028234663852886e+38]
      %keep = And(%causal, %m) : bool[3,4]
      %b = Where(%keep, %zero, %lowest) : f32[3,4]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sb = Add(%s, %b) : f32[3,4]
      %p = Softmax(%sb) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })",
                R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[1,4]) opset(17) {
      init %causal: bool[3,4] = [true, false, false, false, true, true, false, false, true, true, true, false]
      init %zero: f32[] = [0.0]
      init %lowest: f32[] = [-3.4028234663852886e+38]
      %keep = And(%causal, %m) : bool[3,4]
      %b = Where(%keep, %zero, %lowest) : f32[3,4]
      %y, %y.lse = ampc.Attention<scale=1.0>(%q, %kt, %v, %b) : f32[3,2], f32[3]
      return %y
    })");
}

// A bias of 0 and -inf computed by Where from a bool condition (GPT-2's causal mask through
// PyTorch's TorchScript export, maybe cast by autocast) is that condition as a bool mask: kept
// where the 0 is. The Where, read by nothing now, is left to dce.
TEST(FuseAttention, ABiasOfZeroAndMinusInfinityFromABoolConditionIsThatBoolMask) {
  for (const bool zero_first : {true, false}) {
    const std::string where =
        zero_first ? "Where(%c, %c_zero, %c_ninf)" : "Where(%c, %c_ninf, %c_zero)";
    const std::string head = R"(
    graph g(%q: f16[2,3,2], %kt: f16[2,2,3], %v: f16[2,3,2], %c: bool[3,3]) opset(17) {
      init %c_zero: f32[] = [0.0]
      init %c_ninf: f32[] = [-inf]
      %b = )" + where + R"( : f32[3,3]
      %bh = Cast<to=f16>(%b) : f16[3,3]
)";
    expect_fusion(
        head + R"(
      %s = MatMul(%q, %kt) : f16[2,3,3]
      %sb = Add(%s, %bh) : f16[2,3,3]
      %p = Softmax(%sb) : f16[2,3,3]
      %y = MatMul(%p, %v) : f16[2,3,2]
      return %y
    })",
        head + str_cat(R"(
      %y, %y.lse = ampc.Attention<mask_keep=)",
                       zero_first ? 1 : 0, R"(, scale=1.0>(%q, %kt, %v, %c) : f16[2,3,2], f32[2,3]
      return %y
    })"));
  }
  // A finite fill (rows with no key are uniform, not NaN) or a nonzero kept value stays a bias.
  for (const std::string& where :
       {std::string("Where(%c, %c_zero, %c_low)"), std::string("Where(%c, %c_one, %c_ninf)")}) {
    const std::string head = R"(
    graph g(%q: f32[3,2], %kt: f32[2,3], %v: f32[3,2], %c: bool[3,3]) opset(17) {
      init %c_zero: f32[] = [0.0]
      init %c_one: f32[] = [1.0]
      init %c_low: f32[] = [-10000.0]
      init %c_ninf: f32[] = [-inf]
      %b = )" + where + R"( : f32[3,3]
)";
    expect_fusion(head + R"(
      %s = MatMul(%q, %kt) : f32[3,3]
      %sb = Add(%s, %b) : f32[3,3]
      %p = Softmax(%sb) : f32[3,3]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })",
                  head + R"(
      %y, %y.lse = ampc.Attention<scale=1.0>(%q, %kt, %v, %b) : f32[3,2], f32[3]
      return %y
    })");
  }
}

// The dynamo exporter's default optimizer lifts the square-root scale into a one-element
// initializer named val_<n>, which autodiff takes as a constant (not a weight; passes/mask_data.h),
// and so does the fusion. A [1] initializer named as a module's parameter stays a weight: see
// below.
TEST(FuseAttention, ScalesTheDynamoExporterLiftedFold) {
  expect_fusion(R"(
    graph g(%q: f32[3,2], %kt: f32[2,3], %v: f32[3,2]) opset(17) {
      init %val_94: f32[1] = [0.5]
      %qs = Mul(%q, %val_94) : f32[3,2]
      %kts = Mul(%kt, %val_94) : f32[2,3]
      %s = MatMul(%qs, %kts) : f32[3,3]
      %p = Softmax(%s) : f32[3,3]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })",
                R"(
    graph g(%q: f32[3,2], %kt: f32[2,3], %v: f32[3,2]) opset(17) {
      %y, %y.lse = ampc.Attention<scale=0.25>(%q, %kt, %v) : f32[3,2], f32[3]
      return %y
    })");
}

// nn.MultiheadAttention's key padding mask, as the dynamo exporter writes it: masked_fill of a
// torch.zeros_like that its optimizer folded into an initializer of zeros. In a file that
// declares its parameters (PyTorch's graph signature), an undeclared tensor of one value is the
// exporter's constant (passes/mask_data.h), so the bias reads no weight and fuses; where the
// file declares nothing, the zeros might be a parameter, and the pattern stays.
TEST(FuseAttention, APaddingBiasFromAFoldedZerosFusesWhereTheFileDeclaresItsParameters) {
  constexpr std::string_view kPadded = R"(
    graph g(%x: f32[2,3,2], %kt: f32[2,2,4], %v: f32[2,4,2], %pad: bool[2,1,4]) opset(18) {
      init %w: f32[2,2] = [1.0, 0.5, -0.5, 2.0]
      init %val_5: f32[] = [-inf]
      init %zeros_like: f32[2,1,4] = [0, 0, 0, 0, 0, 0, 0, 0]
      %q = MatMul(%x, %w) : f32[2,3,2]
      %b = Where(%pad, %val_5, %zeros_like) : f32[2,1,4]
      %s = MatMul(%q, %kt) : f32[2,3,4]
      %sb = Add(%s, %b) : f32[2,3,4]
      %p = Softmax(%sb) : f32[2,3,4]
      %y = MatMul(%p, %v) : f32[2,3,2]
      return %y
    })";
  for (const bool declared : {true, false}) {
    SCOPED_TRACE(declared ? "declared" : "undeclared");
    std::unique_ptr<Graph> graph = testing::parse_or_fail(kPadded);
    ASSERT_NE(graph, nullptr);
    for (Value* init : graph->initializers()) {
      if (declared && init->name() == "w") init->set_declared(Value::Declared::kParameter);
    }
    Diagnostics diagnostics;
    absl::StatusOr<bool> changed =
        make_fuse_attention_pass()->run(*graph, PassContext{&diagnostics});
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, declared);
    if (!declared) continue;
    EXPECT_EQ(print_graph(*graph), testing::canonical_text(R"(
      graph g(%x: f32[2,3,2], %kt: f32[2,2,4], %v: f32[2,4,2], %pad: bool[2,1,4]) opset(18) {
        init %w: f32[2,2] = [1.0, 0.5, -0.5, 2.0]
        init %val_5: f32[] = [-inf]
        init %zeros_like: f32[2,1,4] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        %q = MatMul(%x, %w) : f32[2,3,2]
        %b = Where(%pad, %val_5, %zeros_like) : f32[2,1,4]
        %y, %y.lse = ampc.Attention<scale=1.0>(%q, %kt, %v, %b) : f32[2,3,2], f32[2,3]
        return %y
      })"));
  }
}

// Multi-query attention as Falcon writes it: one key and value head that MatMul broadcasts over
// the four query heads. Kt and V are expanded to the query heads before the fused node. A key
// head count that is neither the queries' nor 1 does not broadcast, and MatMul would refuse it.
TEST(FuseAttention, KeysAndValuesBroadcastOverTheQueryHeadsAreExpanded) {
  expect_fusion(R"(
    graph g(%q: f32[2,4,3,8], %kt: f32[2,1,8,5], %v: f32[2,1,5,6]) opset(17) {
      init %c_scale: f32[] = [0.25]
      %s = MatMul(%q, %kt) : f32[2,4,3,5]
      %sc = Mul(%s, %c_scale) : f32[2,4,3,5]
      %p = Softmax(%sc) : f32[2,4,3,5]
      %y = MatMul(%p, %v) : f32[2,4,3,6]
      return %y
    })",
                R"(
    graph g(%q: f32[2,4,3,8], %kt: f32[2,1,8,5], %v: f32[2,1,5,6]) opset(17) {
      init %kt.heads: i64[4] = [2, 4, 8, 5]
      init %v.heads: i64[4] = [2, 4, 5, 6]
      %kt.expanded = Expand(%kt, %kt.heads) : f32[2,4,8,5]
      %v.expanded = Expand(%v, %v.heads) : f32[2,4,5,6]
      %y, %y.lse = ampc.Attention<scale=0.25>(%q, %kt.expanded, %v.expanded) : f32[2,4,3,6], f32[2,4,3]
      return %y
    })");
}

// PyTorch's TorchScript export of scaled_dot_product_attention with a mask guards the
// probabilities with its safe softmax, Where(IsNaN(p), 0, p), before the cast autocast puts
// there: the fused node is `safe`. A guard whose IsNaN something else reads, or that fills with
// another value, is not PyTorch's and stays.
TEST(FuseAttention, TheSafeSoftmaxGuardMakesTheFusedNodeSafe) {
  expect_fusion(R"(
    graph g(%q: f16[3,2], %kt: f16[2,4], %v: f16[4,2], %m: bool[3,4]) opset(17) {
      init %c_ninf: f16[] = [-inf]
      init %c_zero: f32[] = [0.0]
      %s = MatMul(%q, %kt) : f16[3,4]
      %sm = Where(%m, %s, %c_ninf) : f16[3,4]
      %s32 = Cast<to=f32>(%sm) : f32[3,4]
      %p = Softmax(%s32) : f32[3,4]
      %nan = IsNaN(%p) : bool[3,4]
      %pg = Where(%nan, %c_zero, %p) : f32[3,4]
      %p16 = Cast<to=f16>(%pg) : f16[3,4]
      %y = MatMul(%p16, %v) : f16[3,2]
      return %y
    })",
                R"(
    graph g(%q: f16[3,2], %kt: f16[2,4], %v: f16[4,2], %m: bool[3,4]) opset(17) {
      %y, %y.lse = ampc.Attention<mask_keep=1, safe=1, scale=1.0>(%q, %kt, %v, %m) : f16[3,2], f32[3]
      return %y
    })");
  // A guard filling with `fill`, whose IsNaN the graph returns too when `nan_read`.
  const auto guarded = [](std::string_view fill, bool nan_read) {
    return str_cat(R"(
      graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
        init %c_ninf: f32[] = [-inf]
        init %c_fill: f32[] = [)",
                   fill, R"(]
        %s = MatMul(%q, %kt) : f32[3,4]
        %sm = Where(%m, %s, %c_ninf) : f32[3,4]
        %p = Softmax(%sm) : f32[3,4]
        %nan = IsNaN(%p) : bool[3,4]
        %pg = Where(%nan, %c_fill, %p) : f32[3,4]
        %y = MatMul(%pg, %v) : f32[3,2]
        return %y)",
                   nan_read ? ", %nan" : "", "\n}");
  };
  expect_fusion(guarded("0.0", false), R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
      %y, %y.lse = ampc.Attention<mask_keep=1, safe=1, scale=1.0>(%q, %kt, %v, %m) : f32[3,2], f32[3]
      return %y
    })");
  expect_unchanged(guarded("1.0", false));
  expect_unchanged(guarded("0.0", true));
}

TEST(FuseAttention, WhatIsReadElsewhereOrComputedDifferentlyStays) {
  // The probabilities are a graph output.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2]) opset(17) {
      %s = MatMul(%q, %kt) : f32[3,4]
      %p = Softmax(%s) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y, %p
    })");
  // The scores are read twice.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2]) opset(17) {
      %s = MatMul(%q, %kt) : f32[3,4]
      %p = Softmax(%s) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      %z = ReduceSum<keepdims=0>(%s) : f32[]
      return %y, %z
    })");
  // A finite fill value: a fully masked row is uniform, not NaN.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
      init %c_fill: f32[] = [-10000.0]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sm = Where(%m, %s, %c_fill) : f32[3,4]
      %p = Softmax(%sm) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })");
  // The mask comes before the scale.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %m: bool[3,4]) opset(17) {
      init %c_ninf: f32[] = [-inf]
      init %c_scale: f32[] = [0.5]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sm = Where(%m, %s, %c_ninf) : f32[3,4]
      %sc = Mul(%sm, %c_scale) : f32[3,4]
      %p = Softmax(%sc) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })");
  // A learned bias (a weight) would need its own gradient.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2]) opset(17) {
      init %bias: f32[4] = [0.1, 0.2, 0.3, 0.4]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sb = Add(%s, %bias) : f32[3,4]
      %p = Softmax(%sb) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      return %y
    })");
  // A weight as the scale (of shape [1]: rank-0 initializers are constants by default, as
  // autodiff takes them), and a Softmax over the first axis.
  expect_unchanged(R"(
    graph g(%q: f32[3,2], %kt: f32[2,4], %v: f32[4,2], %v3: f32[3,2]) opset(17) {
      init %t: f32[1] = [0.5]
      %s = MatMul(%q, %kt) : f32[3,4]
      %sc = Mul(%s, %t) : f32[3,4]
      %p = Softmax(%sc) : f32[3,4]
      %y = MatMul(%p, %v) : f32[3,2]
      %s2 = MatMul(%q, %kt) : f32[3,4]
      %p2 = Softmax<axis=0>(%s2) : f32[3,4]
      %p2t = Transpose(%p2) : f32[4,3]
      %y2 = MatMul(%p2t, %v3) : f32[4,2]
      return %y, %y2
    })");
}

// ---- Numerics ------------------------------------------------------------------------------

using AttentionRun = std::map<std::string, std::vector<double>>;

// The unfused graph of `c` in f64 (the reference), and the fused node in f64 and f32, checked
// against it: within f64 rounding, and within 8 u sqrt(T) in f32. Empty after a failure.
std::vector<AttentionRun> expect_fused_near_reference(const testing::AttentionCase& c,
                                                      const std::map<std::string, Tensor>& inputs) {
  const AttentionRun reference = testing::run_attention(DType::kF64, c, false, inputs);
  const AttentionRun fused64 = testing::run_attention(DType::kF64, c, true, inputs);
  const AttentionRun fused = testing::run_attention(DType::kF32, c, true, inputs);
  if (reference.size() != 4 || fused64.size() != 4 || fused.size() != 4) {
    ADD_FAILURE() << "a run failed";
    return {};
  }
  for (const auto& [name, want] : reference) {
    EXPECT_LT(testing::relative_error(fused64.at(name), want), 1e-12) << name << " in f64";
    for (const double x : fused.at(name)) EXPECT_TRUE(std::isfinite(x)) << name;
    EXPECT_LT(testing::relative_error(fused.at(name), want),
              8 * 0x1p-24 * std::sqrt(static_cast<double>(c.t)))
        << name << " in f32";
  }
  return {reference, fused64, fused};
}

// Masks as a bool Where (the scores scaled) or an additive bias (Q and Kt each scaled by the
// scale's square root, as PyTorch exports them): a constant one of 0 and -inf, or of 0 and
// f32's lowest finite value, each of which the fused node reads as a bool mask, and one
// computed in the graph of 0 and -inf, which it adds; 16 positions (one CPU tile of queries) or
// 150 (three tiles, each reading the keys up to its last row under the causal mask).
class FusedAttentionNumerics
    : public ::testing::TestWithParam<std::tuple<std::string_view, int64_t>> {};

TEST_P(FusedAttentionNumerics, OutputAndGradientsMatchTheUnfusedGraph) {
  const auto [mask, t] = GetParam();
  const testing::AttentionCase c{.t = t,
                                 .bias = mask != "bool_mask",
                                 .fill = mask == "lowest_bias" ? "-3.4028234663852886e+38" : "-inf",
                                 .computed_bias = mask == "computed_bias"};
  std::mt19937 rng(11);
  const std::map<std::string, Tensor> inputs = testing::attention_inputs(c, rng);
  const auto reference = testing::run_attention(DType::kF64, c, false, inputs);
  ASSERT_EQ(reference.size(), 4u);
  // Sanity: the f64 graph fused and unfused agree to f64 rounding.
  const auto fused64 = testing::run_attention(DType::kF64, c, true, inputs);
  ASSERT_EQ(fused64.size(), 4u);
  for (const auto& [name, want] : reference) {
    EXPECT_LT(testing::relative_error(fused64.at(name), want), 1e-12) << name << " in f64";
  }
  // Per type, with u its unit roundoff: the fused node's relative error must be within
  // 8 u sqrt(T) (T keys summed; D = 8 and Dv = 5 are shorter), and within twice the unfused
  // graph's, which rounds the scores and the probabilities besides.
  for (const auto& [dtype, u] : std::vector<std::pair<DType, double>>{
           {DType::kF32, 0x1p-24}, {DType::kF16, 0x1p-11}, {DType::kBF16, 0x1p-8}}) {
    const auto fused = testing::run_attention(dtype, c, true, inputs);
    const auto unfused = testing::run_attention(dtype, c, false, inputs);
    ASSERT_EQ(fused.size(), 4u);
    ASSERT_EQ(unfused.size(), 4u);
    for (const auto& [name, want] : reference) {
      const double fused_error = testing::relative_error(fused.at(name), want);
      const double unfused_error = testing::relative_error(unfused.at(name), want);
      const std::string figures = str_cat(name, " in ", dtype_name(dtype), ": fused ", fused_error,
                                          ", unfused ", unfused_error);
      std::printf("relative error against f64, %s\n", figures.c_str());
      SCOPED_TRACE(figures);
      EXPECT_LT(fused_error, 8 * u * std::sqrt(static_cast<double>(c.t)));
      EXPECT_LE(fused_error, 2 * unfused_error + 4 * u);
    }
  }
}

// Multi-query attention (one key and value head for four query heads, broadcast by MatMul):
// the fused graph expands K and V to the query heads, and their gradients sum the heads back, as
// the unfused graph's MatMul gradients do. Fused and unfused agree to f64 rounding in f64, and
// the fused node is within 8 u sqrt(T) of that in f32.
TEST(FusedAttention, BroadcastKeysAndValuesMatchTheUnfusedGraph) {
  const testing::AttentionCase c{.heads = 4, .t = 24, .bias = true, .kv_heads = 1};
  std::mt19937 rng(17);
  const std::vector<AttentionRun> runs =
      expect_fused_near_reference(c, testing::attention_inputs(c, rng));
  ASSERT_EQ(runs.size(), 3u);
  // The gradients have the keys' and values' one head, not the queries' four.
  EXPECT_EQ(runs[0].at("k.grad").size(), static_cast<size_t>(c.batch * c.t * c.d));
  EXPECT_EQ(runs[2].at("v.grad").size(), static_cast<size_t>(c.batch * c.t * c.dv));
}

// Without a mask the pattern fuses too (cuDNN's path runs it without a bias): the fused node
// agrees with the unfused graph to f64 rounding in f64, and within 8 u sqrt(T) in f32.
TEST(FusedAttention, TheUnmaskedPatternFusesAndMatchesTheUnfusedGraph) {
  const testing::AttentionCase c{.t = 37, .masked = false};
  std::mt19937 rng(13);
  EXPECT_EQ(expect_fused_near_reference(c, testing::attention_inputs(c, rng)).size(), 3u);
}

// Hugging Face's eager attention masks with the dtype's lowest finite value, and under left
// padding the first rows keep no key: every score of such a row rounds to that value, and its
// softmax (the unfused graph's) is uniform over all keys. The fused backward must not take the
// saved LSE, max + log(T) rounded back to max, for the log of the row's sum: it would give each
// key P = 1, not 1/T. In f64 (the f32 value, far from f64's lowest: a LSE of -3.4e38) and in
// f32, where the bias is the lowest value itself; 16 and 150 positions, 3 rows fully masked.
TEST(FusedAttention, RowsMaskedByTheLowestFiniteBiasAreUniformInTheGradientToo) {
  for (const int64_t t : {int64_t{16}, int64_t{150}}) {
    SCOPED_TRACE(str_cat("t = ", t));
    const testing::AttentionCase c{
        .t = t, .bias = true, .fill = "-3.4028234663852886e+38", .padded = 3};
    std::mt19937 rng(5);
    const std::map<std::string, Tensor> inputs = testing::attention_inputs(c, rng);
    const std::vector<AttentionRun> runs = expect_fused_near_reference(c, inputs);
    ASSERT_EQ(runs.size(), 3u);
    // A fully masked row's output is the mean of V's rows (an independent check of the
    // reference: the uniform softmax).
    const std::vector<double>& v = testing::as_type(inputs.at("v"), DType::kF64).to_double_vector();
    for (int64_t x = 0; x < c.dv; ++x) {
      double mean = 0;
      for (int64_t j = 0; j < t; ++j) mean += v[j * c.dv + x];
      EXPECT_NEAR(runs[0].at("y")[x], mean / static_cast<double>(t), 1e-12) << x;
    }
  }
}

// Under PyTorch's safe softmax a query row that keeps no key (left padding, masked with -inf)
// is 0, and so is its gradient. The fused node (safe) against the unfused graph with the guard,
// made differentiable by the safe-softmax pass, in f64; the masked rows' outputs and dQ are
// exactly 0 (the guard's definition, an independent check of both); in f32 within the GEMM
// tolerance. Bool masks and additive ones computed in the graph, one and three query tiles.
TEST(FusedAttention, RowsWithNoKeyBehindTheSafeSoftmaxAreZeroWithNoGradient) {
  for (const bool bias : {false, true}) {
    for (const int64_t t : {int64_t{16}, int64_t{150}}) {
      SCOPED_TRACE(str_cat(bias ? "bias" : "bool mask", ", t = ", t));
      const testing::AttentionCase c{
          .t = t, .bias = bias, .computed_bias = bias, .padded = 3, .safe = true};
      std::mt19937 rng(7);
      const std::map<std::string, Tensor> inputs = testing::attention_inputs(c, rng);
      const std::vector<AttentionRun> runs = expect_fused_near_reference(c, inputs);
      ASSERT_EQ(runs.size(), 3u);
      // Rows 0 .. 2 of every (batch, head): Y and dQ are 0.
      for (const AttentionRun& run : runs) {
        for (int64_t bh = 0; bh < c.batch * c.heads; ++bh) {
          for (int64_t i = 0; i < c.padded; ++i) {
            for (int64_t x = 0; x < c.dv; ++x) {
              EXPECT_EQ(run.at("y")[(bh * t + i) * c.dv + x], 0.0) << bh << " " << i;
            }
            for (int64_t x = 0; x < c.d; ++x) {
              EXPECT_EQ(run.at("q.grad")[(bh * t + i) * c.d + x], 0.0) << bh << " " << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, FusedAttentionNumerics,
                         ::testing::Combine(::testing::Values("bool_mask", "bias", "lowest_bias",
                                                              "computed_bias"),
                                            ::testing::Values(int64_t{16}, int64_t{150})),
                         [](const auto& info) {
                           return str_cat(std::get<0>(info.param), "_t", std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ampc
