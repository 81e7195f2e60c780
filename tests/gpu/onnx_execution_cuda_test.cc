// ONNX conformance on the CUDA backend (label `gpu`; skipped without a GPU): every node test case
// the CPU passes (tests/onnx_execution_expected.txt) runs on CUDA and must match the expected
// outputs within the same tolerances (tests/onnx_execution.h), unless a node has no cuda kernel
// (the cases are listed, not failed: `ampc ops` and tests/tools/ops_cli_test.cc track coverage) or
// the case is in tests/gpu/onnx_execution_cuda_known_failures.txt with its reason.
#include "tests/onnx_execution.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;

TEST(OnnxExecutionCuda, CasesThatPassOnTheCpuPassOnCuda) {
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device";
  ASSERT_TRUE(fs::is_directory(testing::onnx_test_data_path("node")))
      << "no ONNX node test data at " << testing::onnx_test_data_path("node")
      << ": set AMPC_ONNX_TEST_DATA_DIR to a copy of Debian's libonnx-testdata folder "
         "(/usr/include/onnx/backend/test/data)";
  const std::set<std::string> expected =
      testing::read_case_list("tests/onnx_execution_expected.txt");
  const std::set<std::string> known_failures =
      testing::read_case_list("tests/gpu/onnx_execution_cuda_known_failures.txt");
  int passed = 0;
  std::vector<std::string> uncovered;
  std::vector<std::string> failures;
  for (const fs::path& dir : testing::node_case_dirs()) {
    const std::string name = testing::case_name(dir);
    if (!expected.contains(name)) continue;
    std::optional<std::string> bytes = testing::read_bytes(dir / "model.onnx");
    onnx::ModelProto model;
    if (!bytes || !model.ParseFromString(*bytes)) continue;
    absl::Status status = testing::run_case(dir, model, runtime::Device::kCuda);
    if (status.ok()) {
      ++passed;
      EXPECT_FALSE(known_failures.contains(name)) << name << " passes: drop it from the list";
    } else if (absl::IsUnimplemented(status) &&
               status.message().find("no cuda kernel") != std::string_view::npos) {
      uncovered.push_back(name);
    } else if (!known_failures.contains(name)) {
      failures.push_back(str_cat(name, ": ", status.message()));
    }
  }
  std::printf("%d passed on cuda; %zu not covered by cuda kernels\n", passed, uncovered.size());
  for (const std::string& name : uncovered) std::printf("  not covered: %s\n", name.c_str());
  EXPECT_TRUE(failures.empty()) << str_join(failures, "\n");
  EXPECT_GT(passed, 300);
}

}  // namespace
}  // namespace ampc
