// Exports with dynamic dims, as people write them for training at several batch and sequence
// sizes: the zoo's GPT-2 exported by PyTorch at 2 x 8 tokens with its batch and sequence dims
// dynamic (dynamo's `dynamic_shapes`, whose graph computes its reshapes, positions and causal
// mask from the input's shape; TorchScript's `dynamic_axes`), compiled for other sizes and
// trained: 3 SGD steps against PyTorch's f32 losses at those sizes (recorded by
// tests/data/dynamic/make_models.py), within 1e-5 relative (PyTorch's own f32 rounding).
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

using runtime::StepStats;
using runtime::TrainingSession;

std::string data_path(std::string_view file) {
  return testing::source_path(str_cat("tests/data/dynamic/", file));
}

struct Case {
  std::string exporter;   // gpt2.<exporter>.onnx
  std::string batch;      // b3t12 or b5t4 in gpt2_refs.npz
  bool from_data_shapes;  // sizes from the batch's shapes (as ampc bench); else --dim
};

class DynamicExport : public ::testing::TestWithParam<Case> {};

TEST_P(DynamicExport, TrainsAtOtherSizesAsPyTorchDoes) {
  const Case& c = GetParam();
  absl::StatusOr<std::map<std::string, Tensor>> refs =
      runtime::read_npz(data_path("gpt2_refs.npz"));
  ASSERT_TRUE(refs.ok()) << refs.status();
  std::map<std::string, Tensor> batch = {{"idx", refs->at(c.batch + ".idx")},
                                         {"targets", refs->at(c.batch + ".targets")}};
  const Shape& shape = batch.at("idx").shape();
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = OptimizerOptions::Kind::kSgd;
  options.training->lr = 0.1f;
  if (c.from_data_shapes) {
    for (const auto& [name, value] : batch) options.import.data_shapes[name] = value.shape();
  } else {
    options.import.dims = {{"batch", shape[0]}, {"seq", shape[1]}};
  }
  const std::string file = data_path(str_cat("gpt2.", c.exporter, ".onnx"));
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph = compile_file(file, options, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      testing::session_from_file_bytes(**graph, file);
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor& losses = refs->at(c.batch + ".loss");
  for (int64_t step = 0; step < losses.num_elements(); ++step) {
    absl::StatusOr<StepStats> stats = (*session)->step(batch, 0.1f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    const double want = losses.element_as_double(step);
    EXPECT_LE(std::abs(stats->loss - want), 1e-5 * std::abs(want))
        << "step " << step << ": loss " << stats->loss << ", PyTorch " << want;
  }
}

INSTANTIATE_TEST_SUITE_P(Gpt2, DynamicExport,
                         ::testing::Values(Case{"dynamo", "b3t12", false},
                                           Case{"dynamo", "b5t4", true},
                                           Case{"torchscript", "b3t12", true},
                                           Case{"torchscript", "b5t4", false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return str_cat(info.param.exporter, "_", info.param.batch,
                                          info.param.from_data_shapes ? "_data" : "_dims");
                         });

// Without the sizes, import names the dim and the flags that fix it.
TEST(DynamicExport, WithoutTheSizesTheErrorSaysHowToGiveThem) {
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(data_path("gpt2.dynamo.onnx"), CompileOptions{}, diagnostics);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("input 'idx' has a dynamic dim 0 ('batch') in "
                                          "[batch,seq]; fix it with --dim batch=N"),
            std::string::npos)
      << graph.status().message();
}

}  // namespace
}  // namespace ampc
