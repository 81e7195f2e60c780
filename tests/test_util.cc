#include "tests/test_util.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ampc::testing {

std::string source_path(std::string_view relative) {
  return (std::filesystem::path(AMPC_SOURCE_DIR) / relative).string();
}

std::string onnx_test_data_path(std::string_view relative) {
  return (std::filesystem::path(AMPC_ONNX_TEST_DATA_DIR) / relative).string();
}

std::unique_ptr<Graph> parse_or_fail(std::string_view text) {
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

std::string canonical_text(std::string_view text) {
  std::unique_ptr<Graph> graph = parse_or_fail(text);
  return graph ? print_graph(*graph) : std::string();
}

bool expect_pass(Pass& pass, std::string_view before, std::string_view after) {
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

int run_command(const std::string& command, std::string* out, std::string* err) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  const std::filesystem::path out_path = dir / ("ampc_test_out_" + stem);
  const std::filesystem::path err_path = dir / ("ampc_test_err_" + stem);
  const std::string full =
      command + " >" + out_path.string() + " 2>" + err_path.string() + " </dev/null";
  const int raw = std::system(full.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (out) *out = slurp(out_path);
  if (err) *err = slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
}

}  // namespace ampc::testing
