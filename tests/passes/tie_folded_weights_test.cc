// tie-folded-weights: a weight an exporter's constant folding wrote a second time, transposed (a
// tied LM head, as the TorchScript exporter writes it by default), is read as the transpose of the
// first again, so the two train as one parameter, as in PyTorch; coincidences are left alone.
// Reference: one SGD step of the tied model, its gradient worked out here in f64.
#include <cmath>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/onnx_metadata.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/passes.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

// Token ids -> embedding rows -> logits through `head`, which an exporter's folding wrote as
// the embedding's transpose (kTransposeOfEmb: bit for bit emb^T): loss = sum((logits - y)^2).
std::string tied_head_model(const std::string& head_values) {
  return R"(
    graph g(%ids: i64[2], %y: f32[2,3]) {
      init %emb: f32[3,2] = [0.5, -1, 2, 0.25, -0.75, 1.5]
      init %head: f32[2,3] = )" +
         head_values + R"(
      %h = Gather(%emb, %ids) : f32[2,2]
      %logits = MatMul(%h, %head) : f32[2,3]
      %d = Sub(%logits, %y) : f32[2,3]
      %sq = Mul(%d, %d) : f32[2,3]
      %loss = ReduceSum<keepdims=0>(%sq) : f32[]
      return %loss
    })";
}

constexpr const char* kTransposeOfEmb = "[0.5, 2, -0.75, -1, 0.25, 1.5]";

TEST(TieFoldedWeights, ATransposedCopyReadsTheTransposeOfTheOriginal) {
  std::unique_ptr<Pass> pass = make_tie_folded_weights_pass();
  EXPECT_TRUE(testing::expect_pass(*pass, tied_head_model(kTransposeOfEmb), R"(
    graph g(%ids: i64[2], %y: f32[2,3]) {
      init %emb: f32[3,2] = [0.5, -1, 2, 0.25, -0.75, 1.5]
      %h = Gather(%emb, %ids) : f32[2,2]
      %head = Transpose<perm=[1, 0]>(%emb) {name="emb/tied_transpose"} : f32[2,3]
      %logits = MatMul(%h, %head) : f32[2,3]
      %d = Sub(%logits, %y) : f32[2,3]
      %sq = Mul(%d, %d) : f32[2,3]
      %loss = ReduceSum<keepdims=0>(%sq) : f32[]
      return %loss
    })"));
}

TEST(TieFoldedWeights, CoincidencesStayApart) {
  std::unique_ptr<Pass> pass = make_tie_folded_weights_pass();
  // Not the transpose (one element differs).
  const std::string near = tied_head_model("[0.5, 2, -0.75, -1, 0.25, 1.25]");
  EXPECT_FALSE(testing::expect_pass(*pass, near, near));
  // Two matrices of one repeated value (zero-initialized weights) are each other's transpose.
  const std::string zeros = R"(
    graph g(%x: f32[2,3]) {
      init %a: f32[3,2] = [0, 0, 0, 0, 0, 0]
      init %b: f32[2,3] = [0, 0, 0, 0, 0, 0]
      %p = MatMul(%x, %a) : f32[2,2]
      %q = MatMul(%p, %b) : f32[2,3]
      %loss = ReduceSum<keepdims=0>(%q) : f32[]
      return %loss
    })";
  EXPECT_FALSE(testing::expect_pass(*pass, zeros, zeros));
  // Two identity-initialized square weights: each is its own transpose too.
  const std::string identities = R"(
    graph g(%x: f32[2,2]) {
      init %a: f32[2,2] = [1, 0, 0, 1]
      init %b: f32[2,2] = [1, 0, 0, 1]
      %p = MatMul(%x, %a) : f32[2,2]
      %q = MatMul(%p, %b) : f32[2,2]
      %loss = ReduceSum<keepdims=0>(%q) : f32[]
      return %loss
    })";
  EXPECT_FALSE(testing::expect_pass(*pass, identities, identities));
  // A copy the exporter declares a parameter of its own (PyTorch's graph signature).
  std::unique_ptr<Graph> declared = testing::parse_or_fail(tied_head_model(kTransposeOfEmb));
  ASSERT_NE(declared, nullptr);
  for (Value* init : declared->initializers()) init->set_declared(Value::Declared::kParameter);
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed = pass->run(*declared, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
}

// Only PyTorch's exporters fold a transpose into a copy; in a file another program wrote, the
// copy is a weight of its own that starts equal (a hand-written autoencoder's decoder), and
// stays one. The producer is the file's producer_name, which the importer records.
TEST(TieFoldedWeights, OnlyFilesPyTorchWroteAreTied) {
  for (const char* producer : {"", "handwritten", "tf2onnx", "pytorch"}) {
    std::unique_ptr<Graph> graph = testing::parse_or_fail(tied_head_model(kTransposeOfEmb));
    ASSERT_NE(graph, nullptr);
    graph->set_metadata(onnx_io::kSourceProducerKey, producer);
    Diagnostics diagnostics;
    absl::StatusOr<bool> changed =
        make_tie_folded_weights_pass()->run(*graph, PassContext{&diagnostics});
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(*changed, std::string(producer) == "pytorch") << producer;
    EXPECT_EQ(diagnostics.warnings().size(), *changed ? 1u : 0u) << producer;
  }
}

// Many ties (a model of many tied layers) are one warning that counts them, not one line each;
// every copy reads its own original's transpose.
TEST(TieFoldedWeights, ManyTiesAreOneWarning) {
  std::string inits, body;
  const int kTies = 5;
  for (int k = 0; k < kTies; ++k) {
    // w<k> = [[k, 1, 2], [3, 4, 5]] + 10 k; c<k> its transpose (folded copy, after every w).
    std::vector<double> w(6);
    for (int e = 0; e < 6; ++e) w[e] = e + 10 * k + 0.5;
    inits += str_cat("init %w", k, ": f32[2,3] = [", str_join(w, ", "), "]\n");
    body += str_cat("%p", k, " = MatMul(%x, %w", k, ") : f32[2,3]\n");
    body += str_cat("%q", k, " = MatMul(%p", k, ", %c", k, ") : f32[2,2]\n");
    body += k == 0 ? std::string("%all0 = Identity(%q0) : f32[2,2]\n")
                   : str_cat("%all", k, " = Add(%all", k - 1, ", %q", k, ") : f32[2,2]\n");
  }
  for (int k = 0; k < kTies; ++k) {
    std::vector<double> c(6);
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) c[i * 2 + j] = j * 3 + i + 10 * k + 0.5;
    }
    inits += str_cat("init %c", k, ": f32[3,2] = [", str_join(c, ", "), "]\n");
  }
  const std::string model =
      str_cat("graph g(%x: f32[2,2]) {\n", inits, body, "%loss = ReduceSum<keepdims=0>(%all",
              kTies - 1, ") : f32[]\nreturn %loss\n}");
  std::unique_ptr<Graph> graph = testing::parse_or_fail(model);
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  absl::StatusOr<bool> changed =
      make_tie_folded_weights_pass()->run(*graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_NE(diagnostics.warnings()[0].find("5 initializers are the transposes of others"),
            std::string::npos)
      << diagnostics.warnings()[0];
  EXPECT_NE(diagnostics.warnings()[0].find("and 2 more"), std::string::npos)
      << diagnostics.warnings()[0];
  int transposes = 0;
  for (Node* node : graph->node_list()) {
    if (node->op_type() != "Transpose") continue;
    ++transposes;
    const std::string original = node->operand(0)->name();
    // The reader of c<k> (MatMul q<k>) now reads Transpose(w<k>).
    for (const Use& use : node->output(0)->uses()) {
      EXPECT_EQ(use.user->output(0)->name(), "q" + original.substr(1)) << original;
    }
  }
  EXPECT_EQ(transposes, kTies);
  EXPECT_EQ(graph->initializers().size(), static_cast<size_t>(kTies));
}

// One SGD step (lr 1) moves emb by its whole gradient: the rows the ids pick get
// dL/dh = 2 d emb (through the head emb^T), and every row gets (h^T 2d)^T (as the head).
TEST(TieFoldedWeights, TheTiedWeightTrainsWithBothGradients) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(tied_head_model(kTransposeOfEmb));
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, testing::sgd_options(1.0f), diagnostics).ok());
  ASSERT_EQ(diagnostics.warnings().size(), 1u);
  EXPECT_NE(diagnostics.warnings()[0].find("'head' is the transpose of 'emb'"), std::string::npos)
      << diagnostics.warnings()[0];
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  const int64_t ids[2] = {2, 0};
  const double y[2][3] = {{0.25, -0.5, 1}, {1.5, 0, -0.25}};
  absl::StatusOr<runtime::StepStats> stats =
      (*session)->step({{"ids", Tensor::from_i64({2}, {ids[0], ids[1]})},
                        {"y", Tensor::from_f32({2, 3}, {0.25f, -0.5f, 1, 1.5f, 0, -0.25f})}},
                       1.0f);
  ASSERT_TRUE(stats.ok()) << stats.status();
  absl::StatusOr<Tensor> after = (*session)->state("emb");
  ASSERT_TRUE(after.ok()) << after.status();

  const double emb[3][2] = {{0.5, -1}, {2, 0.25}, {-0.75, 1.5}};
  double grad[3][2] = {};
  for (int r = 0; r < 2; ++r) {
    const double* h = emb[ids[r]];
    for (int c = 0; c < 3; ++c) {
      const double d2 = 2 * (h[0] * emb[c][0] + h[1] * emb[c][1] - y[r][c]);
      for (int k = 0; k < 2; ++k) {
        grad[ids[r]][k] += d2 * emb[c][k];  // through the lookup
        grad[c][k] += d2 * h[k];            // through the head
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 2; ++k) {
      const double want = emb[i][k] - grad[i][k];
      EXPECT_NEAR(after->element_as_double(i * 2 + k), want, 1e-6 * std::max(1.0, std::abs(want)))
          << "emb[" << i << "][" << k << "]";
    }
  }
}

}  // namespace
}  // namespace ampc
