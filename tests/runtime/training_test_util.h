// Test helper: a TrainingSession from a text-IR model and compile options.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "runtime/training_session.h"
#include "tests/test_util.h"

namespace ampc::testing {

// Parses `text`, compiles it with `options` (which should ask for training) and opens the result;
// null, with a test failure, when any of it fails.
inline std::unique_ptr<runtime::TrainingSession> compile_training_session(
    std::string_view text, const CompileOptions& options) {
  std::unique_ptr<Graph> graph = parse_or_fail(text);
  if (graph == nullptr) return nullptr;
  Diagnostics diagnostics;
  absl::Status compiled = compile_graph(*graph, options, diagnostics);
  EXPECT_TRUE(compiled.ok()) << compiled;
  if (!compiled.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

// The same for an ONNX file (`models/<name>.onnx`, say, through source_path).
inline std::unique_ptr<runtime::TrainingSession> compile_training_file(
    const std::string& path, const CompileOptions& options) {
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph = compile_file(path, options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(*std::move(graph));
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? *std::move(session) : nullptr;
}

}  // namespace ampc::testing
