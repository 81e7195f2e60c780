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

// An attention mask's -inf is on purpose: a node that spreads an inf it reads (the masked
// scores) is no error, nor is a Softmax that makes 0 of it. A NaN made of infs (inf - inf) is.
TEST(CheckNumerics, InfinitiesAMaskHoldsOnPurposeAreNoError) {
  constexpr std::string_view kMasked = R"(
    graph g(%x: f32[2,3]) opset(17) {
      init %c_keep: bool[2,3] = [true, false, true, true, true, false]
      init %c_ninf: f32[] = [-inf]
      %s = Where(%c_keep, %x, %c_ninf) {name="mask"} : f32[2,3]
      %t = Add(%s, %x) {name="shift"} : f32[2,3]
      %p = Softmax<axis=-1>(%t) {name="softmax"} : f32[2,3]
      %d = Sub(%t, %s) {name="difference"} : f32[2,3]
      return %p, %d
    })";
  SessionOptions options;
  options.check_numerics = true;
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(testing::parse_or_fail(kMasked), options);
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> result =
      (*session)->run({{"x", Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_FALSE(result.ok());
  // mask, shift and softmax pass; (-inf) - (-inf) at element 1 is the first NaN.
  EXPECT_NE(std::string(result.status().message())
                .find("node 'difference' (Sub) wrote NaN to output 0 %d (f32[2,3]) at element 1"),
            std::string::npos)
      << result.status();
}

}  // namespace
}  // namespace ampc::runtime
