// SessionOptions::check_numerics: the first node that writes an inf or a NaN fails the run,
// named with its op, the output's dtype, the bad element and the range of each float input;
// without the option the same run succeeds (and the non-finite values flow on).
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

constexpr std::string_view kText = R"(
  graph g(%x: f32[3]) opset(17) {
    %e = Exp(%x) {name="exp"} : f32[3]
    %l = Log(%x) {name="log"} : f32[3]
    %y = Add(%e, %l) {name="add"} : f32[3]
    return %y
  })";

absl::StatusOr<std::map<std::string, Tensor>> run(bool check, std::vector<float> x) {
  SessionOptions options;
  options.check_numerics = check;
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(testing::parse_or_fail(kText), options);
  EXPECT_TRUE(session.ok()) << session.status();
  return (*session)->run({{"x", Tensor::from_f32({3}, x)}});
}

TEST(CheckNumerics, TheFirstNonFiniteOutputNamesTheNodeAndItsInputs) {
  // exp(100) overflows f32 at element 1; log(-1) would be NaN later, but Exp runs first.
  absl::StatusOr<std::map<std::string, Tensor>> result = run(true, {1, 100, -1});
  ASSERT_FALSE(result.ok());
  const std::string message(result.status().message());
  EXPECT_NE(message.find("node 'exp' (Exp) wrote inf to output 0 %e (f32[3]) at element 1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("%x f32[3] in [-1, 100]"), std::string::npos) << message;

  result = run(true, {1, 2, -1});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.status().message()).find("node 'log' (Log) wrote NaN"),
            std::string::npos)
      << result.status();

  EXPECT_TRUE(run(true, {1, 2, 3}).ok());
  absl::StatusOr<std::map<std::string, Tensor>> unchecked = run(false, {1, 100, -1});
  ASSERT_TRUE(unchecked.ok()) << unchecked.status();
  EXPECT_TRUE(std::isinf(unchecked->at("y").element_as_double(1)));
}

}  // namespace
}  // namespace ampc::runtime
