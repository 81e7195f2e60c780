// AMPC_PROFILE=1 (ExecutorOptions::profile): a session prints, when it ends, the time of its
// runs per op and its slowest nodes, and computes what it computes without the option, bit for
// bit (the same kernels, one at a time).
#include <string>

#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

constexpr std::string_view kText = R"(
  graph g(%x: f32[4,8]) opset(17) {
    init %w: f32[8,8] = [0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5, 0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5,
                         0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5, 0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5,
                         0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5, 0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5,
                         0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5, 0.5, -1, 2, 0.25, 1, -0.5, 3, 1.5]
    %h = MatMul(%x, %w) {name="mm"} : f32[4,8]
    %r = Relu(%h) {name="relu"} : f32[4,8]
    %y = Add(%r, %x) {name="residual"} : f32[4,8]
    return %y
  })";

// The output of `runs` runs of a session, and what it printed to stderr by its end.
std::pair<Tensor, std::string> run(int runs) {
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 3;
  ::testing::internal::CaptureStderr();
  Tensor y;
  {
    absl::StatusOr<std::unique_ptr<InferenceSession>> session =
        InferenceSession::create(testing::parse_or_fail(kText));
    EXPECT_TRUE(session.ok()) << session.status();
    for (int k = 0; k < runs && session.ok(); ++k) {
      absl::StatusOr<std::map<std::string, Tensor>> out =
          (*session)->run({{"x", Tensor::from_f32({4, 8}, x)}});
      EXPECT_TRUE(out.ok()) << out.status();
      if (out.ok()) y = out->at("y");
    }
  }
  return {y, ::testing::internal::GetCapturedStderr()};
}

TEST(Profile, PrintsEachOpsTimeAndTheSlowestNodesWhenTheSessionEnds) {
  const auto [plain, quiet] = run(3);
  EXPECT_EQ(quiet, "");  // nothing without the variable
  const testing::ScopedEnv profile("AMPC_PROFILE", "1");
  const auto [profiled, report] = run(3);
  EXPECT_EQ(profiled, plain);
  EXPECT_NE(report.find("ampc profile (cpu device, 3 runs of 3 steps;"), std::string::npos)
      << report;
  for (const char* op : {"  MatMul\n", "  Relu\n", "  Add\n", "the slowest nodes:\n",
                         "node 'mm' (MatMul) -> f32[4,8]\n"}) {
    EXPECT_NE(report.find(op), std::string::npos) << op << " in:\n" << report;
  }
}

TEST(Profile, ZeroLeavesItOffAndAnotherValueIsAnError) {
  {
    const testing::ScopedEnv profile("AMPC_PROFILE", "0");
    EXPECT_EQ(run(1).second, "");
  }
  const testing::ScopedEnv profile("AMPC_PROFILE", "yes");
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(testing::parse_or_fail(kText));
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("AMPC_PROFILE=yes: expected 1"), std::string::npos)
      << session.status();
}

}  // namespace
}  // namespace ampc::runtime
