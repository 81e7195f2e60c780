// The example models in models/: they import, canonicalize to static shapes with no shape
// arithmetic left, round-trip through the text IR and through ONNX.
#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/report.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

struct ModelFacts {
  std::string name;
  // Elements of the initializers PyTorch calls parameters (named *.weight / *.bias), as
  // PyTorch's sum(p.numel() for p in model.parameters()) counts them.
  int64_t parameter_elements;
  TensorType logits;
  // Initializers that end in .weight/.bias but are buffers, not parameters (nanoGPT's causal
  // mask is the buffer `attn.bias`).
  std::string buffer_suffix = "";
};

void PrintTo(const ModelFacts& facts, std::ostream* os) { *os << facts.name; }

class ExampleModel : public ::testing::TestWithParam<ModelFacts> {
 protected:
  std::unique_ptr<Graph> import() {
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_file(testing::source_path("models/" + GetParam().name + ".onnx"));
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? *std::move(graph) : nullptr;
  }
};

int count_ops(const Graph& graph, const std::string& op) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node->op_type() == op;
  return n;
}

TEST_P(ExampleModel, CanonicalizesToStaticShapesWithoutShapeArithmetic) {
  std::unique_ptr<Graph> graph = import();
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, CompileOptions{}, diagnostics).ok());
  for (const char* op : {"Shape", "Constant", "Identity", "ConstantOfShape", "Range"}) {
    EXPECT_EQ(count_ops(*graph, op), 0) << op;
  }
  // Every Reshape reads a constant shape now.
  for (const auto& node : graph->nodes()) {
    if (node->op_type() == "Reshape") {
      EXPECT_NE(node->operand(1)->initializer(), nullptr);
    }
  }
  ASSERT_EQ(graph->outputs().size(), 2u);
  EXPECT_EQ(graph->outputs()[0]->name(), "loss");
  EXPECT_EQ(graph->outputs()[0]->type(), (TensorType{DType::kF32, {}}));
  EXPECT_EQ(graph->outputs()[1]->type(), GetParam().logits);
}

TEST_P(ExampleModel, RoundTripsThroughTextIr) {
  std::unique_ptr<Graph> graph = import();
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, CompileOptions{}, diagnostics).ok());
  const std::string text = print_graph(*graph);
  absl::StatusOr<std::unique_ptr<Graph>> parsed = parse_graph(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(verify(**parsed).ok()) << verify(**parsed);
  EXPECT_TRUE(testing::same_lines(print_graph(**parsed), text));
}

TEST_P(ExampleModel, RoundTripsThroughOnnxExport) {
  std::unique_ptr<Graph> graph = import();
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, CompileOptions{}, diagnostics).ok());
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::unique_ptr<Graph>> reimported = import_onnx_bytes(*bytes, "exported");
  ASSERT_TRUE(reimported.ok()) << reimported.status();
  // Export wrote attributes in the form opset 17 wants (e.g. Split's sizes as an input), so the
  // re-imported graph is canonicalized again before comparing.
  ASSERT_TRUE(compile_graph(**reimported, CompileOptions{}, diagnostics).ok());
  EXPECT_TRUE(testing::same_lines(print_graph(**reimported), print_graph(*graph)));
}

TEST_P(ExampleModel, SummaryCountsParameters) {
  std::unique_ptr<Graph> graph = import();
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, CompileOptions{}, diagnostics).ok());
  const GraphSummary summary = summarize_graph(*graph);
  int64_t parameter_elements = 0;
  for (const Value* init : graph->initializers()) {
    const std::string& name = init->name();
    const std::string& buffer_suffix = GetParam().buffer_suffix;
    const bool is_buffer = !buffer_suffix.empty() && name.ends_with(buffer_suffix);
    const bool is_parameter = !is_buffer && (name.ends_with(".weight") || name.ends_with(".bias"));
    if (is_parameter) parameter_elements += init->type().num_elements();
  }
  EXPECT_EQ(parameter_elements, GetParam().parameter_elements);
  EXPECT_GE(summary.parameter_elements, parameter_elements);
  EXPECT_EQ(summary.node_count, graph->num_nodes());
}

INSTANTIATE_TEST_SUITE_P(
    Models, ExampleModel,
    ::testing::Values(
        // 2*(64*64+64) + 64*10+10
        ModelFacts{"mlp", 8970, TensorType{DType::kF32, {8, 10}}},
        // conv1 1*8*9+8, bn1 8+8, conv2 8*16*9+16, bn2 16+16, fc 16*10+10
        ModelFacts{"cnn", 80 + 16 + 1168 + 32 + 170, TensorType{DType::kF32, {8, 10}}},
        // embeddings 64*32 + 32*32; per block: 2 LayerNorms 4*32, qkv 32*96+96, out 32*32+32,
        // MLP 32*128+128 + 128*32+32; final LayerNorm 2*32; the LM head is tied.
        ModelFacts{"tiny_gpt",
                   64 * 32 + 32 * 32 +
                       2 * (4 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 128 + 128 + 128 * 32 + 32) +
                       2 * 32,
                   TensorType{DType::kF32, {4, 32, 64}}, ".attn.bias"}),
    [](const ::testing::TestParamInfo<ModelFacts>& info) { return info.param.name; });

}  // namespace
}  // namespace ampc
