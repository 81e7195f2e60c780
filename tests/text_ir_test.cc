// The text IR: exact printing of graphs built through the Graph API, print -> parse -> print
// identity, the values the parser builds, and parse errors with their line and column.
// docs/text-ir.md is the reference the expected texts below are written from.
#include "compiler/text_ir.h"

#include <bit>
#include <cmath>
#include <random>

#include "ampc/float16.h"
#include "compiler/op_def.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }

// An op of a test-only domain whose attributes cover the kinds the parser checks against an
// AttrSpec: lists whose `[]` must take the spec's kind, a float given as an int, a required one.
void register_test_op(OpRegistry& registry) {
  OpDef def;
  def.domain = "text_ir_test";
  def.name = "Kinds";
  def.inputs = {{"X", OperandSpec::Arity::kSingle, {}}};
  def.outputs = {{"Y", OperandSpec::Arity::kSingle, {}}};
  def.attrs = {
      {"floats", AttrKind::kFloats, std::nullopt, false, std::nullopt},
      {"ints", AttrKind::kInts, std::nullopt, false, std::nullopt},
      {"scale", AttrKind::kFloat, AttrValue(1.0f), false, std::nullopt},
      {"strings", AttrKind::kStrings, std::nullopt, false, std::nullopt},
      {"to", AttrKind::kDType, std::nullopt, true, std::nullopt},
  };
  def.infer = [](InferenceContext& ctx) {
    ctx.set_output(0, ctx.input_type(0));
    return absl::OkStatus();
  };
  registry.add(std::move(def));
}
const OpRegistration kTestOp(&register_test_op);

// Parses `text` (which must succeed) and prints it again.
std::string reprint(std::string_view text, const PrintOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? print_graph(**graph, options) : std::string();
}

std::unique_ptr<Graph> parse_ok(std::string_view text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? *std::move(graph) : nullptr;
}

// ---- Printing graphs built through the API --------------------------------------------------

TEST(TextIrPrint, PrintsHandBuiltGraphInTheDocumentedForm) {
  Graph graph("main");
  graph.set_opset("ampc", 1);
  Value* x = graph.add_input("x", f32({8, 16}));
  Value* w = graph.add_input("w", f32({16, 4}));
  Value* b = graph.add_initializer("b", Tensor::from_f32({4}, {0.5f, -1.0f, 2.25f, 0.0f}));
  Node* matmul = graph.create_node("", "MatMul", {x, w}, {f32({8, 4})});
  matmul->output(0)->set_name("y");
  matmul->mutable_precision() = {DType::kF16, DType::kF32, "allow-list MatMul"};
  Node* add = graph.create_node("", "Add", {matmul->output(0), b}, {f32({8, 4})});
  add->output(0)->set_name("z");
  Node* relu = graph.create_node("", "Relu", {add->output(0)}, {f32({8, 4})});
  relu->output(0)->set_name("r");
  relu->set_name("/fc1/Relu");
  relu->set_doc_string("text");
  Node* split = graph.create_node("", "Split", {relu->output(0), nullptr},
                                  {f32({8, 2}), f32({8, 2})}, {{"axis", int64_t{1}}});
  split->output(0)->set_name("s1");
  split->output(1)->set_name("s2");
  Node* cast = graph.create_node("", "Cast", {split->output(0)}, {TensorType{DType::kF16, {8, 2}}},
                                 {{"to", DType::kF16}});
  cast->output(0)->set_name("c");
  Node* grad = graph.create_node("ampc", "ReluGrad", {cast->output(0), cast->output(0)},
                                 {TensorType{DType::kF16, {8, 2}}});
  grad->output(0)->set_name("k");
  Node* constant = graph.create_node("", "Constant", {}, {f32({2})},
                                     {{"value", Tensor::from_f32({2}, {1.0f, 2.0f})}});
  constant->output(0)->set_name("t");
  graph.add_output(add->output(0));
  graph.add_output(split->output(1));

  const std::string expected = R"(graph main(%x: f32[8,16], %w: f32[16,4]) opset(17, ampc:1) {
  init %b: f32[4] = [0.5, -1.0, 2.25, 0.0]
  %y = MatMul(%x, %w) : f32[8,4]  # f16 (acc f32): allow-list MatMul
  %z = Add(%y, %b) : f32[8,4]
  %r = Relu(%z) {name="/fc1/Relu", doc="text"} : f32[8,4]
  %s1, %s2 = Split<axis=1>(%r, _) : f32[8,2], f32[8,2]
  %c = Cast<to=f16>(%s1) : f16[8,2]
  %k = ampc.ReluGrad(%c, %c) : f16[8,2]
  %t = Constant<value=f32[2] [1.0, 2.0]>() : f32[2]
  return %z, %s2
}
)";
  EXPECT_EQ(print_graph(graph), expected);
  EXPECT_EQ(reprint(expected), expected);
}

TEST(TextIrPrint, NamesUnnamedAndRepeatedValuesUniquelyAndStably) {
  Graph graph("g");
  Value* x = graph.add_input("x", f32({2}));
  graph.add_input("t0", f32({2}));  // a real name the fresh names must avoid
  Node* a = graph.create_node("", "Relu", {x}, {f32({2})});  // unnamed
  Node* b = graph.create_node("", "Relu", {a->output(0)}, {f32({2})});
  b->output(0)->set_name("x");                                          // repeats the input's name
  Node* c = graph.create_node("", "Relu", {b->output(0)}, {f32({2})});  // unnamed
  graph.add_output(c->output(0));

  const std::string expected = R"(graph g(%x: f32[2], %t0: f32[2]) opset(17) {
  %t1 = Relu(%x) : f32[2]
  %x.1 = Relu(%t1) : f32[2]
  %t2 = Relu(%x.1) : f32[2]
  return %t2
}
)";
  EXPECT_EQ(print_graph(graph), expected);
  std::unique_ptr<Graph> parsed = parse_ok(expected);
  ASSERT_NE(parsed, nullptr);
  EXPECT_EQ(parsed->nodes().front()->output(0)->name(), "t1");
  EXPECT_EQ(print_graph(*parsed), expected);
}

// A state update names its values; it refers to the first value of each name (the initializer,
// not a later value that repeats its name), and a name no value has prints as it is.
TEST(TextIrPrint, StateUpdatesReferToTheFirstValueOfTheirNames) {
  Graph graph("step");
  Value* x = graph.add_input("x", f32({2}));
  Value* w = graph.add_initializer("w", Tensor::from_f32({2}, {1.0f, 2.0f}));
  Node* sum = graph.create_node("", "Add", {x, w}, {f32({2})});
  sum->output(0)->set_name("w");  // repeats the initializer's name
  Node* next = graph.create_node("", "Relu", {sum->output(0)}, {f32({2})});
  next->output(0)->set_name("w.next");
  graph.add_output(next->output(0));
  graph.add_state_update("w", "w.next");
  graph.add_state_update("ghost", "no such value");

  EXPECT_EQ(print_graph(graph), R"(graph step(%x: f32[2]) opset(17) {
  init %w: f32[2] = [1.0, 2.0]
  %w.1 = Add(%x, %w) : f32[2]
  %w.next = Relu(%w.1) : f32[2]
  return %w.next
  update %w = %w.next
  update %ghost = %"no such value"
}
)");
}

TEST(TextIrPrint, QuotesNamesThatAreNotBare) {
  Graph graph("my graph");
  Value* x = graph.add_input("input 0", f32({1}));
  Node* relu = graph.create_node("", "Relu", {x}, {f32({1})});
  relu->output(0)->set_name("a:");  // a bare name may not end in ':'
  Node* tanh = graph.create_node("", "Tanh", {relu->output(0)}, {f32({1})});
  tanh->output(0)->set_name("quote\"back\\slash\nnew\x01");
  tanh->set_name("/layer.0/Tanh:0");
  graph.add_output(tanh->output(0));

  const std::string expected = R"(graph "my graph"(%"input 0": f32[1]) opset(17) {
  %"a:" = Relu(%"input 0") : f32[1]
  %"quote\"back\\slash\nnew\x01" = Tanh(%"a:") {name="/layer.0/Tanh:0"} : f32[1]
  return %"quote\"back\\slash\nnew\x01"
}
)";
  EXPECT_EQ(print_graph(graph), expected);
  std::unique_ptr<Graph> parsed = parse_ok(expected);
  ASSERT_NE(parsed, nullptr);
  EXPECT_EQ(parsed->name(), "my graph");
  EXPECT_EQ(parsed->outputs()[0]->name(), "quote\"back\\slash\nnew\x01");
}

TEST(TextIrPrint, PrintsFloatsSoTheyCannotBeTakenForIntegers) {
  Graph graph("g");
  Value* x = graph.add_input("x", f32({4}));
  Node* node = graph.create_node(
      "", "Op", {x}, {f32({4})},
      {{"f", 2.0f}, {"fs", std::vector<float>{1.0f, -0.0f, 1e20f, 0.1f}}, {"i", int64_t{-3}}});
  graph.add_output(node->output(0));
  EXPECT_TRUE(
      contains(print_graph(graph), "Op<f=2.0, fs=[1.0, -0.0, 1e+20, 0.1], i=-3>(%x) : f32[4]\n"))
      << print_graph(graph);
}

TEST(TextIrPrint, ElidesLargeConstantsOnRequestAndElidedDataStaysElided) {
  Graph graph("g");
  Value* big = graph.add_initializer("big", Tensor::from_f32({2, 2}, {1, 2, 3, 4}));
  Value* small = graph.add_initializer("small", Tensor::from_f32({2}, {1, 2}));
  Node* node = graph.create_node("", "Constant", {}, {f32({3})},
                                 {{"value", Tensor::from_f32({3}, {1, 2, 3})}});
  graph.add_output(big);
  graph.add_output(small);
  graph.add_output(node->output(0));

  const std::string expected = R"(graph g() opset(17) {
  init %big: f32[2,2] = elided
  init %small: f32[2] = [1.0, 2.0]
  %t0 = Constant<value=f32[3] elided>() : f32[3]
  return %big, %small, %t0
}
)";
  EXPECT_EQ(print_graph(graph, {.max_constant_elements = 2}), expected);
  std::unique_ptr<Graph> parsed = parse_ok(expected);
  ASSERT_NE(parsed, nullptr);
  EXPECT_FALSE(parsed->initializers()[0]->initializer()->has_data());
  EXPECT_EQ(parsed->initializers()[0]->type(), f32({2, 2}));
  EXPECT_FALSE(parsed->nodes().front()->tensor_attr("value").has_data());
  // Elided data has nothing to print, whatever the options.
  EXPECT_EQ(print_graph(*parsed), expected);
}

// ---- Round trips ----------------------------------------------------------------------------

// Each text is in the printer's form, so parse -> print must give it back unchanged.
const char* const kCanonicalTexts[] = {
    // Every attribute kind, the empty list, zero operands, omitted operands and outputs.
    R"(graph attrs(%x: f32[2,3]) opset(17) {
  %a = Foo<dtype=bf16, empty=[], f=-0.25, fs=[1.5, -2.0, inf], i=-7, is=[0, 1, -9223372036854775808], s="constant\t\"q\"", ss=["a", "", "b c"], t=i64[2] [3, -4]>(%x, _, %x) : f32[2,3]
  %b, _, %c = Bar(_, %a) : f32[1], _, i64[]
  %d = Baz() : bool[0]
  return %a, %b, %c, %d
}
)",
    // Domains, a quoted op, a node with no outputs, zero graph outputs.
    R"(graph domains(%x: f16[4]) opset(13, ampc:1, com.microsoft:1) {
  %g = ampc.ReluGrad(%x, %x) : f16[4]
  %m = com.microsoft.FusedGemm(%g) : f16[4]
  %q = "odd op"(%m) : f16[4]
  %r = "my.domain"."Op.v2"(%q) : f16[4]
  Print(%r)
  "return"(%r)
  return
}
)",
    // Initializers of every dtype, special floats and the extremes of each integer type.
    R"(graph inits() opset(17) {
  init %f32: f32[9] = [0.0, -0.0, inf, -inf, nan, 1e-45, 3.4028235e+38, 0.1, -123456.79]
  init %f16: f16[6] = [65504.0, 5.9604645e-08, 0.099975586, -0.0, inf, nan]
  init %bf16: bf16[5] = [1.0, 0.100097656, -3.3895314e+38, -inf, nan]
  init %f64: f64[4] = [0.1, 5e-324, 1.7976931348623157e+308, -0.0]
  init %i64: i64[3] = [-9223372036854775808, 0, 9223372036854775807]
  init %i32: i32[2] = [-2147483648, 2147483647]
  init %i8: i8[2] = [-128, 127]
  init %u8: u8[2] = [0, 255]
  init %bool: bool[2,1] = [true, false]
  init %e4m3: f8e4m3fn[2] = [0x7e, 0x00]
  init %e5m2: f8e5m2[1] = [0xff]
  init %scalar: f32[] = [2.5]
  init %empty: i64[0] = []
  init %big: f32[64,32] = elided
  return %f32, %f16, %bf16, %f64, %i64, %i32, %i8, %u8, %bool, %e4m3, %e5m2, %scalar, %empty, %big
}
)",
    // Precision decisions in every form; names and docs with escapes.
    R"(graph decisions(%x: f32[4]) opset(17) {
  %a = Relu(%x) {name="n\"1\"", doc="line 1\nline 2"} : f32[4]  # f16 (acc f32): allow-list MatMul
  %b = Relu(%a) : f32[4]  # f32: deny-list Softmax
  %c = Relu(%b) : f32[4]  # bf16
  %d = Relu(%c) : f32[4]  # - (acc f32)
  %e = Relu(%d) {doc="d"} : f32[4]  # -: follows %d # and more
  %f = Relu(%e) : f32[4]  # f16: " padded reason "
  %g = Relu(%f) : f32[4]  # f16: "two\nlines"
  return %g
}
)",
};

TEST(TextIrRoundTrip, CanonicalTextsPrintBackUnchanged) {
  for (const char* text : kCanonicalTexts) EXPECT_EQ(reprint(text), text);
}

TEST(TextIrRoundTrip, ApiBuiltGraphPrintParsePrintIsIdentity) {
  Graph graph("");
  graph.set_opset("", 13);
  Value* x = graph.add_input("", TensorType{DType::kBF16, {2}});
  graph.add_initializer("w", Tensor::from_doubles(DType::kF16, {3}, {1.0 / 3, -65504, 1e-7}));
  Node* a = graph.create_node("", "Relu", {x}, {TensorType{DType::kBF16, {2}}});
  a->mutable_precision().reason = "  spaced  ";
  a->output(0)->set_name("w");
  Node* b = graph.create_node("ampc", "X", {a->output(0), nullptr}, {std::nullopt, f32({})},
                              {{"value", Tensor::from_doubles(DType::kF64, {2}, {0.1, -1e300})}});
  graph.add_output(b->output(1));

  const std::string first = print_graph(graph);
  std::unique_ptr<Graph> parsed = parse_ok(first);
  ASSERT_NE(parsed, nullptr);
  EXPECT_EQ(print_graph(*parsed), first);
  EXPECT_EQ(parsed->nodes().front()->precision().reason, "  spaced  ");
  const std::unique_ptr<Graph> copy = graph.clone();
  EXPECT_EQ(print_graph(*copy), first);
}

TEST(TextIrRoundTrip, ParsedTensorsHoldTheExactBits) {
  std::unique_ptr<Graph> graph = parse_ok(kCanonicalTexts[2]);
  ASSERT_NE(graph, nullptr);
  const auto& inits = graph->initializers();
  std::span<const float> f = inits[0]->initializer()->data<float>();
  EXPECT_EQ(std::bit_cast<uint32_t>(f[1]), 0x80000000u);  // -0.0 keeps its sign
  EXPECT_TRUE(std::isinf(f[3]) && f[3] < 0);
  EXPECT_TRUE(std::isnan(f[4]));
  EXPECT_EQ(std::bit_cast<uint32_t>(f[5]), 1u);  // smallest subnormal
  EXPECT_EQ(f[6], 3.4028235e+38f);
  // IEEE binary16: 65504 = 0x7bff, 2^-24 = 0x0001, 0.1 rounds to 0x2e66, -0 = 0x8000.
  std::span<const uint16_t> h = inits[1]->initializer()->data<uint16_t>();
  EXPECT_EQ(h[0], 0x7bff);
  EXPECT_EQ(h[1], 0x0001);
  EXPECT_EQ(h[2], 0x2e66);
  EXPECT_EQ(h[3], 0x8000);
  EXPECT_EQ(h[4], 0x7c00);
  // bfloat16: 1.0 = 0x3f80, 0.1 rounds to 0x3dcd, the most negative finite is 0xff7f.
  std::span<const uint16_t> bf = inits[2]->initializer()->data<uint16_t>();
  EXPECT_EQ(bf[0], 0x3f80);
  EXPECT_EQ(bf[1], 0x3dcd);
  EXPECT_EQ(bf[2], 0xff7f);
  EXPECT_EQ(std::bit_cast<uint64_t>(inits[3]->initializer()->data<double>()[1]), 1u);
  EXPECT_EQ(inits[4]->initializer()->to_i64_vector(),
            (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
  EXPECT_EQ(inits[7]->initializer()->to_i64_vector(), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(inits[8]->initializer()->to_i64_vector(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(inits[9]->initializer()->bytes()[0], 0x7e);
  EXPECT_EQ(inits[11]->type(), f32({}));
  EXPECT_FALSE(inits[13]->initializer()->has_data());
}

TEST(TextIrRoundTrip, ParsedAttributesHaveTheirKinds) {
  std::unique_ptr<Graph> graph = parse_ok(kCanonicalTexts[0]);
  ASSERT_NE(graph, nullptr);
  const Node& node = *graph->nodes().front();
  EXPECT_EQ(node.def(), nullptr);  // an unknown op still parses
  EXPECT_EQ(node.dtype_attr("dtype"), DType::kBF16);
  EXPECT_EQ(node.ints_attr("empty"), std::vector<int64_t>{});  // `[]` of an unknown op: ints
  EXPECT_EQ(node.float_attr("f"), -0.25f);
  EXPECT_EQ(node.floats_attr("fs")[1], -2.0f);
  EXPECT_EQ(node.int_attr("i"), -7);
  EXPECT_EQ(node.string_attr("s"), "constant\t\"q\"");
  EXPECT_EQ(node.tensor_attr("t"), Tensor::from_i64({2}, {3, -4}));
  EXPECT_FALSE(node.has_operand(1));
  const Node& bar = **std::next(graph->nodes().begin());
  EXPECT_EQ(bar.num_outputs(), 3);
  EXPECT_FALSE(bar.has_output(1));
  EXPECT_EQ(bar.output(2)->type(), (TensorType{DType::kI64, {}}));
}

TEST(TextIrRoundTrip, PrecisionDecisionsReadBackExactly) {
  std::unique_ptr<Graph> graph = parse_ok(kCanonicalTexts[3]);
  ASSERT_NE(graph, nullptr);
  std::vector<Node*> nodes = graph->node_list();
  EXPECT_EQ(nodes[0]->precision(),
            (PrecisionDecision{DType::kF16, DType::kF32, "allow-list MatMul"}));
  EXPECT_EQ(nodes[0]->name(), "n\"1\"");
  EXPECT_EQ(nodes[0]->doc_string(), "line 1\nline 2");
  EXPECT_EQ(nodes[1]->precision(), (PrecisionDecision{DType::kF32, {}, "deny-list Softmax"}));
  EXPECT_EQ(nodes[2]->precision(), (PrecisionDecision{DType::kBF16, {}, ""}));
  EXPECT_EQ(nodes[3]->precision(), (PrecisionDecision{{}, DType::kF32, ""}));
  EXPECT_EQ(nodes[4]->precision(), (PrecisionDecision{{}, {}, "follows %d # and more"}));
  EXPECT_EQ(nodes[5]->precision().reason, " padded reason ");
  EXPECT_EQ(nodes[6]->precision().reason, "two\nlines");
}

// ---- Parsing --------------------------------------------------------------------------------

TEST(TextIrParse, SpacingAndCommentsDoNotMatter) {
  const std::string messy = R"(
    # a comment line
    // another one
    graph   g ( %x :f32[ 2 , 2 ] )   {   # trailing comments are ignored here
      %y=LeakyRelu<alpha=0.5>(%x):f32[2,2]
      %z = Relu(%y) : f32[2,2]   #   f16 (acc f32)  :   follows %y
      return %z   # and here
    }
  )";
  EXPECT_EQ(reprint(messy), R"(graph g(%x: f32[2,2]) opset(17) {
  %y = LeakyRelu<alpha=0.5>(%x) : f32[2,2]
  %z = Relu(%y) : f32[2,2]  # f16 (acc f32): follows %y
  return %z
}
)");
}

TEST(TextIrParse, BuildsAVerifiableGraphWithRegisteredOps) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[3], %h: f16[3]) opset(20) {
      %a = Sigmoid(%x) : f32[3]
      %b = Tanh(%a) : f32[3]
      %c = Gelu<approximate="tanh">(%b) : f32[3]
      %d = Erf(%h) : f16[3]
      return %c, %d
    })");
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->opset(""), 20);
  for (const auto& node : graph->nodes()) EXPECT_NE(node->def(), nullptr) << node->op_type();
  EXPECT_EQ(graph->outputs()[1]->producer()->op_type(), "Erf");
  EXPECT_EQ(graph->inputs()[1]->uses().size(), 1u);
}

TEST(TextIrParse, DocumentedExampleVerifiesWithTheRegisteredOps) {
  const std::string text = R"(graph main(%x: f32[8,16], %w: f32[16,4]) opset(17) {
  init %b: f32[4] = [0.5, -1.0, 2.25, 0.0]
  init %shape: i64[2] = [4, 8]
  %y = MatMul(%x, %w) : f32[8,4]  # f16 (acc f32): allow-list MatMul
  %z = Add(%y, %b) : f32[8,4]
  %r = Relu(%z) {name="/fc1/Relu", doc="text"} : f32[8,4]
  %s1, %s2 = Split<axis=1>(%r, _) : f32[8,2], f32[8,2]
  %c = Cast<to=f16>(%s1) : f16[8,2]
  %t = Constant<value=f32[2] [1.0, 2.0]>() : f32[2]
  %m = Reshape(%y, %shape) : f32[4,8]
  return %z, %s2, %c, %t, %m
}
)";
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(print_graph(*graph), text);
  const Node& split = *graph->outputs()[1]->producer();
  EXPECT_EQ(split.num_operands(), 2);
  EXPECT_FALSE(split.has_operand(1));
  EXPECT_EQ(split.int_attr("axis"), 1);
  EXPECT_EQ(graph->outputs()[2]->producer()->dtype_attr("to"), DType::kF16);
}

TEST(TextIrParse, OpsetDefaultsAndDomains) {
  std::unique_ptr<Graph> plain = parse_ok("graph g() {\n  return\n}\n");
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->opset(""), kDefaultOnnxOpset);
  std::unique_ptr<Graph> explicit_opsets =
      parse_ok("graph g() opset(ampc:2, ai.onnx:13, \"x y\":3) {\n  return\n}\n");
  ASSERT_NE(explicit_opsets, nullptr);
  EXPECT_EQ(explicit_opsets->opset(""), 13);
  EXPECT_EQ(explicit_opsets->opset("ampc"), 2);
  EXPECT_EQ(print_graph(*explicit_opsets),
            "graph g() opset(13, ampc:2, \"x y\":3) {\n  return\n}\n");
}

TEST(TextIrParse, UnknownOpParsesAndVerifyReportsIt) {
  std::unique_ptr<Graph> graph = parse_ok(R"(graph g(%x: f32[2]) {
  %y = NoSuchOp(%x) : f32[2]
  return %y
})");
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->nodes().front()->def(), nullptr);
  absl::Status status = verify(*graph);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(contains(std::string(status.message()), "NoSuchOp")) << status;
}

TEST(TextIrParse, AttributesTakeTheKindsOfTheOpsAttrSpecs) {
  std::unique_ptr<Graph> graph = parse_ok(R"(graph g(%x: f32[2]) opset(17, text_ir_test:1) {
  %a = text_ir_test.Kinds<floats=[], ints=[], scale=2, strings=[], to=f16>(%x) : f32[2]
  %b = text_ir_test.Kinds<floats=[1, 2], to=i64>(%a) : f32[2]
  %c = LeakyRelu<alpha=1>(%b) : f32[2]
  return %c
})");
  ASSERT_NE(graph, nullptr);
  std::vector<Node*> nodes = graph->node_list();
  ASSERT_NE(nodes[0]->def(), nullptr);
  EXPECT_EQ(nodes[0]->floats_attr("floats"), std::vector<float>{});
  EXPECT_EQ(nodes[0]->ints_attr("ints"), std::vector<int64_t>{});
  EXPECT_EQ(std::get<std::vector<std::string>>(nodes[0]->attrs().at("strings")).size(), 0u);
  EXPECT_EQ(nodes[0]->float_attr("scale"), 2.0f);
  EXPECT_EQ(nodes[1]->floats_attr("floats"), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(nodes[2]->float_attr("alpha"), 1.0f);
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_TRUE(
      contains(print_graph(*graph), "Kinds<floats=[], ints=[], scale=2.0, strings=[], to=f16>(%x)"))
      << print_graph(*graph);
}

struct BadInput {
  std::string text;
  std::string error;  // the expected message starts with this
};

TEST(TextIrParse, RejectsBadInputWithLineAndColumn) {
  const std::string head = "graph g(%x: f32[2]) {\n";
  const BadInput cases[] = {
      {"", "line 1, column 1: expected 'graph' but found end of input"},
      {"graph g(%x: f33[2]) {\n  return\n}",
       "line 1, column 13: expected an element type (f32, f16, bf16, f64, i64, i32, i8, u8, "
       "bool, f8e4m3fn, f8e5m2) but found 'f33'"},
      {head + "  %y = Relu(%q) : f32[2]\n  return %y\n}",
       "line 2, column 13: value '%q' is not defined"},
      {head + "  %y = Relu(%y) : f32[2]\n  return %y\n}",
       "line 2, column 13: value '%y' is not defined"},
      {head + "  %x = Relu(%x) : f32[2]\n  return %x\n}",
       "line 2, column 3: value '%x' is already defined on line 1"},
      {head + "  %a, %a = Split(%x) : f32[1], f32[1]\n  return\n}",
       "line 2, column 7: value '%a' is already defined on line 2"},
      {head + "  %a, %b = Split(%x) : f32[1]\n  return\n}",
       "line 2, column 24: expected 2 output types (one per output) but found 1"},
      {head + "  %a = Relu(%x) : f32[2], f32[2]\n  return\n}",
       "line 2, column 19: expected 1 output types (one per output) but found 2"},
      {head + "  %a, _ = Split(%x) : f32[1], f32[1]\n  return\n}",
       "line 2, column 31: expected '_' (output 1 is omitted) but found 'f32'"},
      {head + "  %a = Relu(%x) : _\n  return\n}",
       "line 2, column 19: expected the type of '%a' but found '_'"},
      {head + "  init %w: f32[2,2] = [1.0, 2.0, 3.0]\n  return\n}",
       "line 2, column 23: expected 4 elements for f32[2,2] but found 3"},
      {head + "  init %w: i8[1] = [128]\n  return\n}",
       "line 2, column 21: expected an integer in the range of i8 but found '128'"},
      {head + "  init %w: i64[1] = [1.5]\n  return\n}",
       "line 2, column 22: expected an integer in the range of i64 but found '1.5'"},
      {head + "  init %w: bool[1] = [1]\n  return\n}",
       "line 2, column 23: expected 'true' or 'false' but found '1'"},
      {head + "  init %w: f32[1] = [1e99]\n  return\n}",
       "line 2, column 22: expected a number of type f32 but found '1e99'"},
      {head + "  init %w: f8e5m2[1] = [0x100]\n  return\n}",
       "line 2, column 25: expected an fp8 byte in hex (0x00 to 0xff) but found '0x100'"},
      {head + "  init %w: f32[-1] = elided\n  return\n}",
       "line 2, column 16: expected a dimension (an integer >= 0) or ']' but found '-1'"},
      {head + "  init %w: f32[4294967296,4294967296] = elided\n  return\n}",
       "line 2, column 27: the shape has too many elements"},
      {head + "  %y = Relu(%x) : f32[2]\n  return %y\n",
       "line 4, column 1: expected '}' but found end of input"},
      {head + "  return\n} extra", "line 3, column 3: expected end of input after the graph's '}'"},
      {head + "  %y = Relu(%x) {name=\"abc} : f32[2]\n  return\n}",
       "line 2, column 23: unterminated string"},
      {head + "  %y = Relu(%x) {name=\"a\\q\"} : f32[2]\n  return\n}",
       "line 2, column 25: unknown escape '\\q' in string"},
      {head + "  %y = Relu(%x) @ : f32[2]\n  return\n}",
       "line 2, column 17: unexpected character '@'"},
      {head + "  %y = Relu(%x) {nam=\"a\"} : f32[2]\n  return\n}",
       "line 2, column 18: expected 'name' or 'doc' but found 'nam'"},
      {head + "  %y = LeakyRelu<alpha=\"x\">(%x) : f32[2]\n  return\n}",
       "line 2, column 18: expected attribute 'alpha' of LeakyRelu to be float but found string"},
      {head + "  %y = LeakyRelu<alpha=1.0, alpha=2.0>(%x) : f32[2]\n  return\n}",
       "line 2, column 29: attribute 'alpha' is given twice"},
      {"graph g(%x: f32[2]) opset(17, text_ir_test:1) {\n"
       "  %y = text_ir_test.Kinds(%x) : f32[2]\n  return\n}",
       "line 2, column 8: expected attribute 'to', which text_ir_test.Kinds requires, but found "
       "none"},
      {head + "  %y = Foo<a=[1, \"s\"]>(%x) : f32[2]\n  return\n}",
       "line 2, column 18: expected a number or ']' but found '\"s\"'"},
      {head + "  %y = Foo<a=99999999999999999999>(%x) : f32[2]\n  return\n}",
       "line 2, column 14: expected an integer in the range of int64 but found "
       "'99999999999999999999'"},
      {head + "  %y = Foo<a=[1.5, -99999999999999999999]>(%x) : f32[2]\n  return\n}",
       "line 2, column 20: expected an integer in the range of int64 but found "
       "'-99999999999999999999'"},
      {head + "  %y = Foo<a=0x1>(%x) : f32[2]\n  return\n}",
       "line 2, column 14: expected an attribute value (number, string, list, dtype or tensor) "
       "but found '0x1'"},
      {head + "  %y = Relu(%x) : f32[2]  # weight cast, hoisted\n  return\n}",
       "line 2, column 29: expected a precision decision '# DTYPE|- (acc DTYPE): REASON' but found "
       "'weight cast, hoisted'"},
      {head + "  %y = Relu(%x) : f32[2]  # f16 (acc f99)\n  return\n}",
       "line 2, column 38: expected an accumulate dtype but found 'f99)'"},
      {head + "  %y = Relu(%x) : f32[2]  # f16 reason\n  return\n}",
       "line 2, column 33: expected ':' and the reason but found 'reason'"},
      {"graph g() opset(17, 18) {\n  return\n}",
       "line 1, column 21: the opset of domain '' is given twice"},
      {"graph g() opset(ampc:0) {\n  return\n}",
       "line 1, column 22: expected an opset version (an integer >= 1) or 'domain:version' but "
       "found '0'"},
      {head + "  %y = (%x) : f32[2]\n  return\n}",
       "line 2, column 8: expected a node ('%out = Op(%in) : type'), 'init' or 'return' but "
       "found '('"},
      {head + "  %y = Relu(%x : f32[2]\n  return\n}",
       "line 2, column 16: expected ',' but found ':'"},
      {"graph g(%: f32[2]) {\n  return\n}",
       "line 1, column 10: expected a value name after '%' but found ':'"},
      {head + "  init %w: f32[2] = [1.0, 2.0\n  return\n}",
       "line 3, column 3: expected ',' but found 'return'"},
      {head + "  init %w: f32[2] = [1.0,, 2.0]\n  return\n}",
       "line 2, column 26: expected a number of type f32 but found ','"},
  };
  for (const BadInput& bad : cases) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(bad.text);
    if (graph.ok()) {
      ADD_FAILURE() << "parsed, but expected: " << bad.error << "\n" << bad.text;
      continue;
    }
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(std::string(graph.status().message()).starts_with(bad.error))
        << graph.status().message() << "\nexpected: " << bad.error;
  }
}

// Truncations and byte mutations of valid texts must give a graph or a Status, never a crash;
// what parses must print.
TEST(TextIrParse, GarbageNeverCrashes) {
  std::mt19937 random(1234);
  int parsed = 0;
  int rejected = 0;
  for (const char* canonical : kCanonicalTexts) {
    const std::string text = canonical;
    for (size_t n = 0; n <= text.size(); ++n) {
      absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text.substr(0, n));
      graph.ok() ? ++parsed : ++rejected;
    }
    for (int trial = 0; trial < 2000; ++trial) {
      std::string mutated = text;
      for (int k = 0; k < 3; ++k) {
        mutated[random() % mutated.size()] = static_cast<char>(random() % 256);
      }
      absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(mutated);
      if (graph.ok()) {
        ++parsed;
        std::string printed = print_graph(**graph);
        EXPECT_EQ(reprint(printed), printed) << mutated;
      } else {
        ++rejected;
      }
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace ampc
