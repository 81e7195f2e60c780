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
#include "onnx/onnx_pb.h"
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

// Writes the ONNX model `source` to `path` with dim 0 of every graph input made the symbolic
// `batch`, as PyTorch's exporters write `dynamic_axes`.
inline void write_with_dynamic_batch(const std::string& source, const std::string& path) {
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(read_file(source))) << source;
  for (onnx::ValueInfoProto& input : *model.mutable_graph()->mutable_input()) {
    onnx::TensorShapeProto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    ASSERT_GT(shape->dim_size(), 0) << input.name();
    shape->mutable_dim(0)->set_dim_param("batch");  // replaces the dim_value (a oneof)
  }
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
}

// A fixture with an empty folder of its own, named after `prefix`, the process and the test, and
// removed after the test.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
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
