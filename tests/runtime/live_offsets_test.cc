// LiveOffsets, the planner's index of the ranges alive at one step: its answers against a scan
// of every range, and its work against the logarithm of their count.
#include "runtime/live_offsets.h"

#include <cmath>
#include <iterator>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace ampc::runtime {
namespace {

// The lowest offset where `bytes` fit below, between or above the disjoint ranges (begin ->
// end), found by walking them from the lowest up.
int64_t lowest_free_by_scan(const std::map<int64_t, int64_t>& ranges, int64_t bytes) {
  int64_t offset = 0;
  for (const auto& [begin, end] : ranges) {
    if (offset + bytes <= begin) break;
    offset = end;
  }
  return offset;
}

TEST(LiveOffsets, EmptyPlacesAtZeroAndATouchingRangeLeavesNoGap) {
  LiveOffsets live;
  EXPECT_EQ(live.lowest_free(64), 0);
  live.insert(0, 64);
  live.insert(64, 192);
  EXPECT_EQ(live.lowest_free(1), 192);
  live.erase(0);
  EXPECT_EQ(live.lowest_free(64), 0);
  EXPECT_EQ(live.lowest_free(65), 192);
  live.erase(64);
  EXPECT_EQ(live.size(), 0);
  EXPECT_EQ(live.lowest_free(1000), 0);
}

// Random places and removals of ranges of many sizes, each placed where the index says and
// checked against the scan: the lowest gap that fits is found whatever the order of the gaps'
// sizes, and removing a range merges the gaps on either side of it.
TEST(LiveOffsets, LowestFreeOffsetMatchesAScanOverEveryRange) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 random(seed);
    LiveOffsets live;
    std::map<int64_t, int64_t> ranges;
    const int64_t largest = seed % 4 == 0 ? 3 : 60;  // in units of 64 bytes
    for (int operation = 0; operation < 2000; ++operation) {
      if (!ranges.empty() && random() % 3 == 0) {
        auto range = std::next(ranges.begin(), static_cast<int64_t>(random() % ranges.size()));
        live.erase(range->first);
        ranges.erase(range);
      } else {
        const int64_t bytes = 64 * (1 + static_cast<int64_t>(random() % largest));
        const int64_t offset = lowest_free_by_scan(ranges, bytes);
        ASSERT_EQ(live.lowest_free(bytes), offset) << "operation " << operation;
        live.insert(offset, offset + bytes);
        ranges.emplace(offset, offset + bytes);
      }
      ASSERT_EQ(live.size(), static_cast<int>(ranges.size()));
    }
  }
}

// Scattered holes, the planner's worst case (a DenseNet block's gradient parts): 2^15 ranges of
// 64 bytes with a 64-byte hole after each, then searches for 256 bytes, which no such hole
// holds. Each search first makes a larger hole near the top (removing one range, lower each
// time) and must find it; a walk over the ranges from the lowest up would step over about
// 2^14 holes to get there. The index visits a few times log2(n) nodes a search and insertion,
// counted the same on every machine.
TEST(LiveOffsets, SearchesPastManySmallHolesTakeLogarithmicSteps) {
  constexpr int kRanges = 1 << 15;
  LiveOffsets live;
  for (int i = 0; i < kRanges; ++i) live.insert(int64_t{128} * i, int64_t{128} * i + 64);
  for (int i = 0; i < kRanges; i += 2) live.erase(int64_t{128} * i);
  ASSERT_EQ(live.size(), kRanges / 2);
  const int64_t before = live.visits();
  constexpr int kSearches = 1000;
  for (int j = 0; j < kSearches; ++j) {
    // Removing range k (odd) leaves 448 bytes from the end of range k - 2 to range k + 2.
    const int64_t k = kRanges - 1 - 4 * j;
    live.erase(128 * k);
    const int64_t offset = live.lowest_free(256);
    ASSERT_EQ(offset, 128 * k - 192) << "search " << j;
    live.insert(offset, offset + 256);
  }
  EXPECT_EQ(live.lowest_free(256), int64_t{128} * kRanges - 64);
  const double per_search = static_cast<double>(live.visits() - before) / kSearches;
  std::printf("%.1f nodes visited per removal, search and insertion among %d ranges\n", per_search,
              live.size());
  EXPECT_LT(per_search, 12 * std::log2(kRanges));
}

}  // namespace
}  // namespace ampc::runtime
