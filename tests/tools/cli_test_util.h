// What the `ampc` command-line tests share: running the binary, reading files, and a fresh
// folder per test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc::testing {

// The exit code and output of one `ampc` run.
struct CliResult {
  int exit_code;
  std::string out;
  std::string err;
};

// Runs `ampc ARGS`, from the folder `cwd` when one is given.
inline CliResult run_ampc(const std::string& args, const std::string& cwd = "") {
  CliResult r;
  const std::string cd = cwd.empty() ? "" : "cd " + cwd + " && ";
  r.exit_code = run_command(cd + std::string(AMPC_BINARY) + " " + args, &r.out, &r.err);
  return r;
}

// The bytes of the file at `path` (empty when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace ampc::testing
