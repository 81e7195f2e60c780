// autodiff on the models in models/: the gradient of the loss with respect to every parameter,
// run on the CPU backend in f32, against PyTorch's (`grad.<parameter>` in <model>.ref.npz); and
// the same for tiny_gpt with its attention fused (ampc.Attention and ampc.AttentionGrad).
#include <cmath>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "passes/fuse_attention.h"
#include "passes/passes.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

void expect_pytorch_gradients(const std::string& model, bool fuse_attention) {
  absl::StatusOr<std::map<std::string, Tensor>> ref =
      read_npz(testing::source_path("models/" + model + ".ref.npz"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + model + ".onnx"), {}, diagnostics);
  ASSERT_TRUE(graph.ok()) << graph.status();
  if (fuse_attention) {
    absl::StatusOr<bool> fused =
        make_fuse_attention_pass()->run(**graph, PassContext{&diagnostics});
    ASSERT_TRUE(fused.ok()) << fused.status();
    ASSERT_TRUE(*fused) << "no attention fused in " << model;
  }
  absl::StatusOr<bool> changed = make_autodiff_pass()->run(**graph, PassContext{&diagnostics});
  ASSERT_TRUE(changed.ok()) << changed.status();
  ASSERT_TRUE(*changed);
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(*std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  std::map<std::string, Tensor> inputs;
  int expected_grads = 0;
  for (const auto& [name, tensor] : *ref) {
    if (name.starts_with("grad.")) ++expected_grads;
    if (!name.starts_with("grad.") && !name.starts_with("output.")) inputs[name] = tensor;
  }
  ASSERT_GT(expected_grads, 0) << "no grad.* arrays in the fixture";
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  int compared = 0;
  for (const auto& [name, want] : *ref) {
    if (!name.starts_with("grad.")) continue;
    const std::string parameter = name.substr(5);
    auto got = outputs->find(parameter + ".grad");
    ASSERT_NE(got, outputs->end()) << "no gradient for " << parameter;
    ASSERT_EQ(got->second.type(), want.type()) << parameter;
    double diff = 0;
    double norm = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      const double w = want.element_as_double(i);
      const double g = got->second.element_as_double(i);
      diff += (g - w) * (g - w);
      norm += w * w;
    }
    // The floor covers gradients that are zero in exact arithmetic (a conv bias feeding a
    // training-mode BatchNorm), where both sides hold f32 rounding noise of about 1e-8.
    EXPECT_LT(std::sqrt(diff), 1e-4 * std::sqrt(norm) + 1e-6)
        << parameter << ": |got - torch| = " << std::sqrt(diff)
        << ", |torch| = " << std::sqrt(norm);
    ++compared;
  }
  EXPECT_EQ(compared, expected_grads);
}

class ModelGradients : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGradients, MatchPyTorchInF32) { expect_pytorch_gradients(GetParam(), false); }

TEST(ModelGradients, FusedAttentionMatchesPyTorchInF32) {
  expect_pytorch_gradients("tiny_gpt", true);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGradients, ::testing::Values("mlp", "cnn", "tiny_gpt"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ampc::runtime
