// The example of docs/runtime-api.md, compiled and run. The test also checks that the document
// shows exactly this code (between the BEGIN/END EXAMPLE lines), so the two cannot drift apart.
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/test_util.h"

// BEGIN EXAMPLE
#include <cstdio>
#include <string>

#include "runtime/session.h"

// Runs models/mlp.onnx on a batch of zeros and prints its loss. Returns 0 on success.
int run_mlp(const std::string& model_path) {
  using ampc::runtime::InferenceSession;
  absl::StatusOr<std::unique_ptr<InferenceSession>> session = InferenceSession::load(model_path);
  if (!session.ok()) {
    std::fprintf(stderr, "load: %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  // Every input gets a tensor of its own type: here zeros (labels 0).
  for (const ampc::runtime::TensorInfo& input : (*session)->inputs()) {
    absl::Status bound = (*session)->set_input(input.name, ampc::Tensor(input.type));
    if (!bound.ok()) {
      std::fprintf(stderr, "bind: %s\n", std::string(bound.message()).c_str());
      return 1;
    }
  }
  if (absl::Status ran = (*session)->run(); !ran.ok()) {
    std::fprintf(stderr, "run: %s\n", std::string(ran.message()).c_str());
    return 1;
  }
  absl::StatusOr<ampc::Tensor> loss = (*session)->output("loss");
  if (!loss.ok()) return 1;
  std::printf("loss = %f\n", loss->data<float>()[0]);
  return 0;
}
// END EXAMPLE

namespace ampc {
namespace {

std::string example_region(const std::string& text) {
  const std::string begin = "// BEGIN EXAMPLE\n";
  const size_t from = text.find(begin);
  const size_t to = text.find("// END EXAMPLE");
  if (from == std::string::npos || to == std::string::npos) return "";
  return text.substr(from + begin.size(), to - from - begin.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(RuntimeApiExample, RunsTheMlp) {
  EXPECT_EQ(run_mlp(testing::source_path("models/mlp.onnx")), 0);
}

TEST(RuntimeApiExample, FailsCleanlyOnAMissingModel) { EXPECT_EQ(run_mlp("/nonexistent.onnx"), 1); }

TEST(RuntimeApiExample, DocumentShowsThisCode) {
  const std::string code =
      example_region(read_file(testing::source_path("tests/runtime/runtime_api_example_test.cc")));
  ASSERT_FALSE(code.empty());
  const std::string doc = read_file(testing::source_path("docs/runtime-api.md"));
  EXPECT_NE(doc.find("```cpp\n" + code + "```"), std::string::npos)
      << "docs/runtime-api.md must show the example between BEGIN/END EXAMPLE verbatim";
}

}  // namespace
}  // namespace ampc
