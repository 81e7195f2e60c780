// Helpers shared by the tests: parsing text IR, running one pass, paths to test data.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "compiler/ir.h"
#include "compiler/pass.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"

namespace ampc::testing {

// The repository root and ONNX's node test data folder.
std::string source_path(std::string_view relative);
std::string onnx_test_data_path(std::string_view relative);

// Parses and verifies text IR; fails the test (and returns null) when either fails.
std::unique_ptr<Graph> parse_or_fail(std::string_view text);

// Text IR normalized for comparison: re-printed after parsing, so spacing in test sources does
// not matter.
std::string canonical_text(std::string_view text);

// Runs `pass` once on `before` and checks the result prints as `after` and verifies.
// Returns the pass's "changed" result.
bool expect_pass(Pass& pass, std::string_view before, std::string_view after);

template <typename P>
bool ExpectPass(std::string_view before, std::string_view after) {
  P pass;
  return expect_pass(pass, before, after);
}

// Runs a command line; returns its exit code and fills stdout and stderr.
int run_command(const std::string& command, std::string* out, std::string* err);

}  // namespace ampc::testing
