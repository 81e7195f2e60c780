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

// A fixture with an empty folder of its own, named after `prefix`, the process and the test, and
// removed after the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = test_temp_path(prefix_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `name` in the test's folder.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to `name` in the test's folder.
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace ampc::testing
