// eliminate-casts, in text IR: no-op casts, duplicates and exact round trips go; chains go
// straight from the source; value-changing round trips stay unless excess precision is allowed.
#include "passes/passes.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

TEST(EliminateCasts, RemovesNoOpsDuplicatesAndExactRoundTrips) {
  auto pass = make_eliminate_casts_pass();
  EXPECT_TRUE(testing::expect_pass(*pass, R"(
    graph g(%x: f32[4], %h: f16[4]) opset(17) {
      %same = Cast<to=f32>(%x) : f32[4]
      %up = Cast<to=f32>(%h) : f32[4]
      %down = Cast<to=f16>(%up) : f16[4]
      %d1 = Cast<to=f32>(%h) : f32[4]
      %d2 = Cast<to=f32>(%h) : f32[4]
      %sum = Add(%d1, %d2) : f32[4]
      %r = Relu(%down) : f16[4]
      %y = Add(%same, %sum) : f32[4]
      return %y, %r
    })",
                                   R"(
    graph g(%x: f32[4], %h: f16[4]) opset(17) {
      %up = Cast<to=f32>(%h) : f32[4]
      %sum = Add(%up, %up) : f32[4]
      %r = Relu(%h) : f16[4]
      %y = Add(%x, %sum) : f32[4]
      return %y, %r
    })"));
}

TEST(EliminateCasts, ChainsGoStraightFromTheSource) {
  auto pass = make_eliminate_casts_pass();
  EXPECT_TRUE(testing::expect_pass(*pass, R"(
    graph g(%h: f16[4]) opset(17) {
      %up = Cast<to=f32>(%h) : f32[4]
      %b = Cast<to=bf16>(%up) : bf16[4]
      return %b
    })",
                                   R"(
    graph g(%h: f16[4]) opset(17) {
      %b = Cast<to=bf16>(%h) : bf16[4]
      return %b
    })"));
}

// f32 -> f16 -> f32 rounds: the program computes with the rounded value, so the round trip
// stays unless the user allows the excess precision.
TEST(EliminateCasts, ValueChangingRoundTripsStayUnlessExcessPrecisionIsAllowed) {
  constexpr std::string_view kText = R"(
    graph g(%x: f32[4]) opset(17) {
      %down = Cast<to=f16>(%x) : f16[4]
      %up = Cast<to=f32>(%down) : f32[4]
      %y = Relu(%up) : f32[4]
      return %y
    })";
  auto strict = make_eliminate_casts_pass();
  EXPECT_FALSE(testing::expect_pass(*strict, kText, kText));
  auto excess = make_eliminate_casts_pass(/*allow_excess_precision=*/true);
  EXPECT_TRUE(testing::expect_pass(*excess, kText, R"(
    graph g(%x: f32[4]) opset(17) {
      %y = Relu(%x) : f32[4]
      return %y
    })"));
}

}  // namespace
}  // namespace ampc
