// nn.EmbeddingBag with `offsets` (bags of varying length, as DLRM-style models feed their sparse
// features), exported by PyTorch: a click model summing with per-sample weights, averaging and
// taking the max over three features (tests/data/ragged/make_models.py), each bag an ONNX Loop
// iteration whose slice bounds are the offsets. Compiled and trained for 4 SGD steps on two
// batches of other bag lengths than the export's, against PyTorch's f32 losses within 1e-5
// relative (PyTorch's own f32 rounding), empty bags included.
#include <cmath>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using runtime::TrainingSession;

int count_ops(const Graph& graph, std::string_view op_type) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node->op_type() == op_type ? 1 : 0;
  return n;
}

class RaggedBags : public ::testing::TestWithParam<std::string> {};

TEST_P(RaggedBags, TrainOnBatchesOfOtherBagLengthsAsPyTorchDoes) {
  const std::string& exporter = GetParam();
  absl::StatusOr<std::map<std::string, Tensor>> refs =
      runtime::read_npz(testing::source_path("tests/data/ragged/bags_refs.npz"));
  ASSERT_TRUE(refs.ok()) << refs.status();
  const std::vector<std::map<std::string, Tensor>> batches =
      testing::fixture_batches(*refs, exporter);
  ASSERT_EQ(batches.size(), 2u);
  ASSERT_EQ(batches[0].size(), 8u);
  const CompileOptions options = testing::sgd_options(0.1f);
  const std::string file =
      testing::source_path(str_cat("tests/data/ragged/bags.", exporter, ".onnx"));
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph = compile_file(file, options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  // Each feature's bags are one segment reduction (a ScatterElements counting the bags' starts,
  // a ScatterND reducing the rows), with no masked reduction per bag left; the max of the
  // opset-17 export, where the scatters do not reduce by max, is a running max within the bags.
  EXPECT_EQ(count_ops(**graph, "ScatterElements"), 3);
  EXPECT_EQ(count_ops(**graph, "ScatterND"), exporter == "dynamo" ? 3 : 2);
  EXPECT_EQ(count_ops(**graph, "ReduceMax"), 0);
  // Nothing of a middle iteration of the Loops (3 of 0-5) is left: each bag's bounds, and
  // dynamo's per-bag `start == end`, are gathered as vectors.
  for (const auto& node : (*graph)->nodes()) {
    EXPECT_EQ(node->name().find("/3/"), std::string::npos) << node->name();
  }
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      testing::session_from_file_bytes(**graph, file);
  ASSERT_TRUE(session.ok()) << session.status();
  testing::expect_losses_track(**session, batches, refs->at(str_cat(exporter, ".loss")), 0.1f);
}

INSTANTIATE_TEST_SUITE_P(Exporters, RaggedBags, ::testing::Values("dynamo", "torchscript"));

}  // namespace
}  // namespace ampc
