// The order in which the long float sums of the CPU kernels add their terms: ReduceSum and
// ReduceMean, and the sum and mean of SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// The n terms, in their given order, are cut into blocks of kSumBlock (the last may be short).
// Each block is added left to right into one accumulator; the block sums are then added
// pairwise: blocks 0 and 1, 2 and 3, ..., then those pairs pairwise, and so on, a sum left over
// at one level joining at the next (the tree whose left subtrees cover a power-of-two number of
// blocks). The rounding error is then at most about (kSumBlock + log2(n / kSumBlock)) units of
// roundoff times the sum of |terms| where a left-to-right sum's is n of them: summing 2^24 + 2^10
// ones in f32 gives the exact count instead of stopping at 2^24, and the mean loss over a
// 4 × 64 × 64 segmentation map is within an ulp or two of f64 instead of tens.
//
// The order depends on n alone. PairwiseSum streams the terms with O(log n) state; tree_sum
// combines block sums computed separately (by threads) and gives the same bits.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace ampc::runtime::cpu {

inline constexpr int64_t kSumBlock = 64;

// Adds terms in the order above. A binary counter over the finished blocks: the partial sums
// kept are one per set bit of the finished-block count, the earliest the largest; a new block
// merges with one per trailing 1 bit (earlier + later), as a carry does. total() adds what is
// left from the latest to the earliest, which is the same tree.
template <typename A>
class PairwiseSum {
 public:
  void add(A term) {
    block_ += term;
    if (++in_block_ == kSumBlock) push_block();
  }

  A total() const {
    int depth = depth_;
    A sum = in_block_ > 0 || depth == 0 ? block_ : sums_[--depth];
    while (depth > 0) sum = sums_[--depth] + sum;
    return sum;
  }

 private:
  void push_block() {
    A sum = block_;
    for (uint64_t carry = finished_; carry & 1; carry >>= 1) sum = sums_[--depth_] + sum;
    sums_[depth_++] = sum;
    ++finished_;
    block_ = A(0);
    in_block_ = 0;
  }

  A block_ = A(0);
  int64_t in_block_ = 0;
  uint64_t finished_ = 0;  // blocks finished
  std::array<A, 64> sums_;
  int depth_ = 0;  // the set bits of finished_
};

// The sum of block sums in the order above (pairs at distance 1, then 2, 4, ...), in place;
// 0 for none.
template <typename A>
A tree_sum(std::span<A> blocks) {
  const size_t n = blocks.size();
  if (n == 0) return A(0);
  for (size_t width = 1; width < n; width *= 2) {
    for (size_t j = 0; j + width < n; j += 2 * width) blocks[j] = blocks[j] + blocks[j + width];
  }
  return blocks[0];
}

// `lanes` sums side by side, each in PairwiseSum's order, fed one row of `lanes` terms at a time
// (the column sums of a matrix read row by row, which vectorizes over the lanes).
template <typename A>
class PairwiseColumnSums {
 public:
  explicit PairwiseColumnSums(int64_t lanes) : lanes_(lanes), block_(lanes, A(0)) {}

  // Adds row[w] to sum w for each lane w < count (count <= lanes; the same count every row).
  template <typename T, typename Load>
  void add_row(const T* row, int64_t count, Load&& load) {
    for (int64_t w = 0; w < count; ++w) block_[w] += static_cast<A>(load(row[w]));
    if (++in_block_ == kSumBlock) push_block(count);
  }

  // The sums of the first `count` lanes into out[0..count).
  void totals(int64_t count, A* out) const {
    int64_t depth = static_cast<int64_t>(sums_.size()) / lanes_;
    if (in_block_ > 0 || depth == 0) {
      for (int64_t w = 0; w < count; ++w) out[w] = block_[w];
    } else {
      --depth;
      for (int64_t w = 0; w < count; ++w) out[w] = sums_[depth * lanes_ + w];
    }
    while (depth > 0) {
      --depth;
      for (int64_t w = 0; w < count; ++w) out[w] = sums_[depth * lanes_ + w] + out[w];
    }
  }

  void clear() {
    std::fill(block_.begin(), block_.end(), A(0));
    in_block_ = 0;
    finished_ = 0;
    sums_.clear();
  }

 private:
  // PairwiseSum's carry, a row of lanes at a time.
  void push_block(int64_t count) {
    for (uint64_t carry = finished_; carry & 1; carry >>= 1) {
      const A* earlier = sums_.data() + sums_.size() - lanes_;
      for (int64_t w = 0; w < count; ++w) block_[w] = earlier[w] + block_[w];
      sums_.resize(sums_.size() - lanes_);
    }
    sums_.insert(sums_.end(), block_.begin(), block_.end());
    ++finished_;
    std::fill(block_.begin(), block_.end(), A(0));
    in_block_ = 0;
  }

  int64_t lanes_;
  std::vector<A> block_;
  int64_t in_block_ = 0;
  uint64_t finished_ = 0;  // blocks finished
  std::vector<A> sums_;    // one row of `lanes_` partial sums per set bit of finished_
};

}  // namespace ampc::runtime::cpu
