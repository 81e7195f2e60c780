// Buffers a module updates in place in its forward pass (a running average it keeps, a spectral
// norm's power-iteration vectors): PyTorch's dynamo exporter lists each as a BUFFER_MUTATION
// output of the graph signature, whose value the file keeps under that name, and the training
// step carries it to the next step as PyTorch's module does; as PyTorch updates it under
// torch.no_grad(), the forward reads the new value without a gradient. Reference: two SGD steps
// worked out by hand (every value exact in binary).
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/training_session.h"
#include "tests/onnx_model_builder.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::add_metadata;
using ::testing::HasSubstr;
using testing::kGraphMetadataField;
using testing::ModelBuilder;

// The module: ema = 0.5 * ema + 0.5 * x * w (in place, under torch.no_grad(), a buffer), loss =
// sum((x * w - ema)^2) for a parameter w, as the dynamo exporter writes it: the new value
// `add_1` is what the loss reads, and the signature says it is the buffer's next value.
// `mutation_value` names the value the signature gives ("add_1", or one the file lacks).
std::string ema_model(const std::string& mutation_value) {
  ModelBuilder m(18);
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.initializer_f32("w", {2}, {0.5f, 0.25f});
  m.initializer_f32("ema", {2}, {0, 0});
  m.initializer_f32("half", {}, {0.5f});
  m.node("Mul", {"x", "w"}, {"xw"}, "node_mul_2");
  m.node("Mul", {"ema", "half"}, {"kept"}, "node_mul");
  m.node("Mul", {"xw", "half"}, {"added"}, "node_mul_1");
  m.node("Add", {"kept", "added"}, {"add_1"}, "node_add_1");
  m.node("Sub", {"xw", "add_1"}, {"d"}, "node_sub");
  m.node("Mul", {"d", "d"}, {"sq"}, "node_mul_3");
  add_int_attr(m.node("ReduceSum", {"sq"}, {"loss"}, "node_sum"), "keepdims", 0);
  m.output("loss");
  add_metadata(m.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
               "\n# inputs\np_w: PARAMETER target='w'\nb_ema: BUFFER target='ema' "
               "persistent=True\nx: USER_INPUT\n\n# outputs\n" +
                   mutation_value + ": BUFFER_MUTATION target='ema'\nsum: USER_OUTPUT\n");
  return m.bytes();
}

struct Trajectory {
  std::vector<double> losses, ema;
  std::vector<std::string> warnings, eval_outputs;
};

// Two SGD steps at lr 0.5 on x = {1, -2}, imported as a training compile imports.
Trajectory two_steps(const std::string& bytes) {
  Trajectory run;
  ImportOptions import;
  import.buffer_updates = true;
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(bytes, "ema.onnx", import);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return run;
  Diagnostics diagnostics;
  EXPECT_TRUE(compile_graph(**graph, testing::sgd_options(0.5f), diagnostics).ok());
  run.warnings = diagnostics.warnings();
  for (const Value* output : (*graph)->outputs()) run.eval_outputs.push_back(output->name());
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(*std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return run;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<runtime::StepStats> stats =
        (*session)->step({{"x", Tensor::from_f32({2}, {1, -2})}}, 0.5f);
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) run.losses.push_back(stats->loss);
  }
  if (absl::StatusOr<Tensor> ema = (*session)->state("ema"); ema.ok()) {
    run.ema = ema->to_double_vector();
  }
  return run;
}

TEST(TorchBufferUpdates, ABufferTheModuleUpdatesInPlaceMovesFromStepToStep) {
  const Trajectory run = two_steps(ema_model("add_1"));
  // Step 1: x * w = {0.5, -0.5}, ema = {0.25, -0.25}, loss 0.125, dw = 2 (x w - ema) x =
  // {0.5, 1} (ema a constant), w = {0.25, -0.25}. Step 2: x * w = {0.25, 0.5}, ema = {0.25,
  // 0.125}, loss 0.375^2. A buffer left at zeros would give a second loss of 0.078125; a
  // gradient through the update, dw = (x w - ema) x, 0.01953125.
  EXPECT_EQ(run.losses, (std::vector<double>{0.125, 0.140625}));
  EXPECT_EQ(run.ema, (std::vector<double>{0.25, 0.125}));
  // The eval graph's interface is the model's.
  EXPECT_EQ(run.eval_outputs, (std::vector<std::string>{"loss"}));
}

TEST(TorchBufferUpdates, ABufferWhoseNewValueTheFileLacksIsReported) {
  const Trajectory run = two_steps(ema_model("add_9"));
  // Neither carried nor read without a gradient: dw = (x w - ema) x = {0.25, 0.5}, w = {0.375,
  // 0}; then x * w = {0.375, 0}, ema = {0.1875, 0}, loss 0.1875^2.
  EXPECT_EQ(run.losses, (std::vector<double>{0.125, 0.03515625}));
  EXPECT_EQ(run.ema, (std::vector<double>{0, 0}));
  EXPECT_THAT(::testing::PrintToString(run.warnings),
              HasSubstr("buffers ema are updated in place by the module (the graph signature "
                        "says so), but the file does not hold their new values"));
}

}  // namespace
}  // namespace ampc
