// Helpers shared by the tests: parsing text IR, running one pass, paths to test data.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/ir.h"
#include "compiler/op_def.h"
#include "compiler/pass.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"

namespace ampc::testing {

// The repository root and ONNX's node test data folder (the environment variable
// AMPC_ONNX_TEST_DATA_DIR, when set, replaces the folder found at configure time).
std::string source_path(std::string_view relative);
std::string onnx_test_data_path(std::string_view relative);

// Whether the CUDA backend can start here (a CUDA build on a machine with a GPU and driver).
// `gpu` tests skip when it cannot.
bool cuda_device_present();

// The raw bits of each element of a tensor of elements of up to 4 bytes (f16, bf16, fp8, f32,
// the integers), for tests that compare bit patterns.
inline std::vector<uint32_t> element_bits(const Tensor& t) {
  std::vector<uint32_t> result;
  const size_t size = static_cast<size_t>(dtype_size(t.dtype()));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    uint32_t b = 0;
    std::memcpy(&b, t.bytes().data() + static_cast<size_t>(i) * size, size);
    result.push_back(b);
  }
  return result;
}

// Parses and verifies text IR; fails the test (and returns null) when either fails.
// (Inline, like the two below, so tests that do not use the text IR need not link it.)
inline std::unique_ptr<Graph> parse_or_fail(std::string_view text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  if (!graph.ok()) {
    ADD_FAILURE() << "parse failed: " << graph.status() << "\n" << text;
    return nullptr;
  }
  if (absl::Status status = verify(**graph); !status.ok()) {
    ADD_FAILURE() << "verify failed: " << status << "\n" << text;
    return nullptr;
  }
  return *std::move(graph);
}

// Text IR normalized for comparison: re-printed after parsing, so spacing in test sources does
// not matter.
inline std::string canonical_text(std::string_view text) {
  std::unique_ptr<Graph> graph = parse_or_fail(text);
  return graph ? print_graph(*graph) : std::string();
}

// Runs `pass` once on `before` and checks the result prints as `after` and verifies.
// Returns the pass's "changed" result.
inline bool expect_pass(Pass& pass, std::string_view before, std::string_view after) {
  std::unique_ptr<Graph> graph = parse_or_fail(before);
  if (!graph) return false;
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  absl::StatusOr<bool> changed = pass.run(*graph, context);
  if (!changed.ok()) {
    ADD_FAILURE() << "pass " << pass.name() << " failed: " << changed.status();
    return false;
  }
  EXPECT_TRUE(verify(*graph).ok()) << verify(*graph);
  EXPECT_EQ(print_graph(*graph), canonical_text(after));
  return *changed;
}

template <typename P>
bool ExpectPass(std::string_view before, std::string_view after) {
  P pass;
  return expect_pass(pass, before, after);
}

// Registers ampc.<name>: one input, one output of the input's type, and nothing else (no
// gradient rule, no precision category, no kernel), for tests of what happens to an op that
// lacks one of those.
inline void register_passthrough_op(std::string name) {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = std::move(name);
  def.inputs.push_back(OperandSpec{"X", OperandSpec::Arity::kSingle, {}});
  def.outputs.push_back(OperandSpec{"Y", OperandSpec::Arity::kSingle, {}});
  def.infer = [](InferenceContext& ctx) {
    ctx.set_output(0, ctx.input_type(0));
    return absl::OkStatus();
  };
  OpRegistry::global().add(std::move(def));
}

// Compares two texts line by line and reports only the first difference (graphs print large).
::testing::AssertionResult same_lines(std::string_view actual, std::string_view expected);

// Builds a one-node graph of `op_type` (standard domain at `opset`) whose inputs are graph
// inputs of `input_types` (a nullopt entry is an omitted optional input) or, for the indexes in
// `constant_inputs`, initializers; runs type inference and returns the output types.
// `num_outputs` outputs are requested (-1: the op's minimum).
struct OpCase {
  std::string op_type;
  std::vector<std::optional<TensorType>> input_types;
  std::vector<std::pair<int, Tensor>> constant_inputs;
  Attributes attrs;
  int64_t opset = kDefaultOnnxOpset;
  int num_outputs = -1;
  std::string domain = "";  // "" (standard) or "ampc"; other domains are at opset 1
};
absl::StatusOr<std::vector<TensorType>> infer_op(const OpCase& op_case);

// Runs a command line; returns its exit code and fills stdout and stderr.
int run_command(const std::string& command, std::string* out, std::string* err);

// Sets environment variable `name` to `value` for its lifetime (switches such as AMPC_CPU_CONV are
// read when a graph is loaded, AMPC_PROFILE when a session is made), then restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace ampc::testing
