// LiveOffsets: the arena ranges of the buffers alive at one step, for placing buffers in the
// order they are written (the planner's first fit in time, runtime/plan.cc).
//
// Placed in that order, a buffer meets exactly the placed buffers still alive at its first
// step, and those sit at disjoint offsets: the lowest offset where it fits is the lowest gap
// between them that is large enough, or the top. The ranges are kept in a treap ordered by
// offset whose every node holds the gap below its range (down to the range under it, or 0) and
// the largest gap in its subtree, so finding that gap, adding a range and removing one each
// take O(log n) expected steps however many buffers are alive and however scattered the holes
// between them are. The answers do not depend on the treap's shape (its priorities are a fixed
// sequence): only its speed does.
#pragma once

#include <cstdint>
#include <vector>

namespace ampc::runtime {

class LiveOffsets {
 public:
  // The lowest offset at which [offset, offset + bytes) meets no range.
  int64_t lowest_free(int64_t bytes);
  // Adds [begin, end), which must meet no range (begin < end).
  void insert(int64_t begin, int64_t end);
  // Removes the range that starts at `begin`, which must be there.
  void erase(int64_t begin);

  int size() const { return size_; }
  // How many treap nodes the operations so far have stepped through: their work, counted the
  // same on every machine.
  int64_t visits() const { return visits_; }

 private:
  struct Node {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t gap = 0;      // begin minus the end of the range below (or 0)
    int64_t max_gap = 0;  // the largest gap in this subtree
    uint32_t priority = 0;
    int left = -1;
    int right = -1;
  };

  int64_t max_gap(int node) const { return node < 0 ? -1 : nodes_[node].max_gap; }
  void update(int node);
  // Splits `node`'s subtree into the ranges that start below `begin` and the rest.
  void split(int node, int64_t begin, int& below, int& rest);
  int merge(int below, int above);
  // The end of the highest range in the subtree, or 0 when it is empty.
  int64_t top(int node);
  // Sets the gap of the lowest range in the subtree to reach down to `below_end`.
  void set_lowest_gap(int node, int64_t below_end);

  std::vector<Node> nodes_;
  std::vector<int> free_nodes_;
  int root_ = -1;
  int size_ = 0;
  uint32_t next_priority_ = 0x9e3779b9u;
  int64_t visits_ = 0;
};

}  // namespace ampc::runtime
