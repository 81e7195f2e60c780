// InferenceSession: running the models against PyTorch's outputs, and the errors a user sees.
#include "runtime/session.h"

#include <cmath>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

// models/<name>.ref.npz: the inputs PyTorch was given (by graph input name) and its f32 outputs
// (`output.<graph output name>`), recorded by models/export_models.py. (It also holds
// PyTorch's gradients, `grad.<parameter>`.)
struct Reference {
  std::map<std::string, Tensor> inputs;
  std::map<std::string, Tensor> outputs;
};

Reference read_reference(const std::string& model) {
  Reference ref;
  absl::StatusOr<std::map<std::string, Tensor>> arrays =
      read_npz(testing::source_path("models/" + model + ".ref.npz"));
  EXPECT_TRUE(arrays.ok()) << arrays.status();
  if (!arrays.ok()) return ref;
  for (auto& [name, tensor] : *arrays) {
    if (name.starts_with("output.")) {
      ref.outputs[name.substr(7)] = tensor;
    } else if (!name.starts_with("grad.")) {  // gradients: model_gradients_test
      ref.inputs[name] = tensor;
    }
  }
  return ref;
}

class ModelRun : public ::testing::TestWithParam<std::string> {};

// f32 on both sides; PyTorch sums in other orders, so allow a few ulps of the larger terms.
TEST_P(ModelRun, F32OutputsMatchPyTorch) {
  const Reference ref = read_reference(GetParam());
  ASSERT_FALSE(ref.outputs.empty());
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::load(testing::source_path("models/" + GetParam() + ".onnx"));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(ref.inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (const auto& [name, want] : ref.outputs) {
    ASSERT_TRUE(outputs->contains(name)) << "no output " << name;
    const Tensor& got = outputs->at(name);
    ASSERT_EQ(got.type(), want.type()) << name;
    double worst = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      const double w = want.element_as_double(i);
      const double error = std::abs(got.element_as_double(i) - w) / (1e-5 + 1e-4 * std::abs(w));
      worst = std::max(worst, error);
    }
    EXPECT_LE(worst, 1.0) << name << ": worst |got - want| / (1e-5 + 1e-4 |want|)";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelRun, ::testing::Values("mlp", "cnn", "tiny_gpt"),
                         [](const auto& info) { return info.param; });

std::unique_ptr<InferenceSession> mlp_session() {
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::load(testing::source_path("models/mlp.onnx"));
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

TEST(InferenceSession, RejectsAnInputOfTheWrongShapeNamingIt) {
  std::unique_ptr<InferenceSession> session = mlp_session();
  ASSERT_NE(session, nullptr);
  const TensorInfo input = session->inputs().at(0);
  TensorType wrong = input.type;
  wrong.shape.back() += 1;
  absl::Status status = session->set_input(input.name, Tensor(wrong));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'" + input.name + "'"), std::string::npos) << status;
  EXPECT_NE(status.message().find(type_to_string(input.type)), std::string::npos) << status;
}

TEST(InferenceSession, RejectsAnUnknownInputListingTheInputs) {
  std::unique_ptr<InferenceSession> session = mlp_session();
  ASSERT_NE(session, nullptr);
  absl::Status status = session->set_input("nope", Tensor(TensorType{DType::kF32, {1}}));
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find(session->inputs().at(0).name), std::string::npos) << status;
}

TEST(InferenceSession, RunWithoutAllInputsNamesTheMissingOne) {
  std::unique_ptr<InferenceSession> session = mlp_session();
  ASSERT_NE(session, nullptr);
  absl::Status status = session->run();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find(session->inputs().at(0).name), std::string::npos) << status;
  EXPECT_FALSE(session->output("loss").ok());
}

TEST(InferenceSession, LoadReportsAMissingFile) {
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::load("/nonexistent/model.onnx");
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("/nonexistent/model.onnx"), std::string::npos);
}

TEST(InferenceSession, DataDependentKernelErrorNamesTheNode) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(R"(
graph g(%x: f32[3,2], %i: i64[2]) {
  %y = Gather<axis=0>(%x, %i) : f32[2,2]
  return %y
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  (*graph)->node_list()[0]->set_name("pick_rows");
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(*std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(
      {{"x", Tensor(TensorType{DType::kF32, {3, 2}})}, {"i", Tensor::from_i64({2}, {0, 7})}});
  ASSERT_FALSE(outputs.ok());
  EXPECT_NE(outputs.status().message().find("pick_rows"), std::string::npos) << outputs.status();
}

// Every initializer and output is found by its own name, among many (the session indexes them),
// and a name the graph lacks is an error naming it.
TEST(InferenceSession, FindsEachOfManyInitializersAndOutputsByName) {
  constexpr int kCount = 64;
  std::string text = "graph g(%x: f32[1]) {\n";
  std::vector<std::string> outputs;
  for (int i = 0; i < kCount; ++i) {
    text += str_cat("  init %p", i, ": f32[1] = [", i, ".0]\n");
    text += str_cat("  %o", i, " = Add(%p", i, ", %x) : f32[1]\n");
    outputs.push_back(str_cat("%o", i));
  }
  text += str_cat("  return ", str_join(outputs, ", "), "\n}\n");
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::unique_ptr<InferenceSession>> made =
      InferenceSession::create(*std::move(graph));
  ASSERT_TRUE(made.ok()) << made.status();
  InferenceSession& session = **made;

  ASSERT_TRUE(session.set_input("x", Tensor::from_f32({1}, {100.0f})).ok());
  ASSERT_TRUE(session.run().ok());
  for (int i = 0; i < kCount; ++i) {
    const std::string p = str_cat("p", i);
    const std::string o = str_cat("o", i);
    absl::StatusOr<Tensor> output = session.output(o);
    ASSERT_TRUE(output.ok()) << output.status();
    EXPECT_EQ(output->data<float>()[0], 100.0f + static_cast<float>(i)) << o;
    ASSERT_TRUE(session.copy_output_to_initializer(o, p).ok()) << o;
    absl::StatusOr<Tensor> state = session.initializer(p);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->data<float>()[0], 100.0f + static_cast<float>(i)) << p;
    EXPECT_TRUE(session.initializer_address(p).ok()) << p;
    EXPECT_TRUE(session.output_address(o).ok()) << o;
  }

  EXPECT_EQ(session.initializer("p64").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(session.initializer_address("o0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(session.output_address("p0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(session.set_initializer("x", Tensor::from_f32({1}, {0.0f})).code(),
            absl::StatusCode::kNotFound);
  const absl::Status unknown_output = session.output("o64").status();
  EXPECT_EQ(unknown_output.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown_output.message().find("'o64'"), std::string::npos) << unknown_output;
  EXPECT_FALSE(session.copy_output_to_initializer("p0", "o0").ok());
}

}  // namespace
}  // namespace ampc::runtime
