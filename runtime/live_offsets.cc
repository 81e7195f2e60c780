#include "runtime/live_offsets.h"

#include <algorithm>

namespace ampc::runtime {

int64_t LiveOffsets::lowest_free(int64_t bytes) {
  if (max_gap(root_) < bytes) return top(root_);
  // The lowest node whose gap fits: left while the left subtree holds one, else this node if its
  // own gap fits, else right.
  int node = root_;
  while (true) {
    ++visits_;
    const Node& n = nodes_[node];
    if (max_gap(n.left) >= bytes) {
      node = n.left;
    } else if (n.gap >= bytes) {
      return n.begin - n.gap;
    } else {
      node = n.right;
    }
  }
}

void LiveOffsets::insert(int64_t begin, int64_t end) {
  int below = -1;
  int above = -1;
  split(root_, begin, below, above);
  int node;
  if (free_nodes_.empty()) {
    node = static_cast<int>(nodes_.size());
    nodes_.emplace_back();
  } else {
    node = free_nodes_.back();
    free_nodes_.pop_back();
  }
  // xorshift32: a fixed sequence, so the treap's shape (and its work) is the same every run.
  next_priority_ ^= next_priority_ << 13;
  next_priority_ ^= next_priority_ >> 17;
  next_priority_ ^= next_priority_ << 5;
  const int64_t gap = begin - top(below);
  nodes_[node] = Node{.begin = begin,
                      .end = end,
                      .gap = gap,
                      .max_gap = gap,
                      .priority = next_priority_,
                      .left = -1,
                      .right = -1};
  if (above >= 0) set_lowest_gap(above, end);
  root_ = merge(merge(below, node), above);
  ++size_;
}

void LiveOffsets::erase(int64_t begin) {
  int below = -1;
  int rest = -1;
  int node = -1;
  int above = -1;
  split(root_, begin, below, rest);
  split(rest, begin + 1, node, above);
  if (above >= 0) set_lowest_gap(above, top(below));
  if (node >= 0) {
    free_nodes_.push_back(node);
    --size_;
  }
  root_ = merge(below, above);
}

void LiveOffsets::update(int node) {
  Node& n = nodes_[node];
  n.max_gap = std::max({n.gap, max_gap(n.left), max_gap(n.right)});
}

void LiveOffsets::split(int node, int64_t begin, int& below, int& rest) {
  if (node < 0) {
    below = rest = -1;
    return;
  }
  ++visits_;
  if (nodes_[node].begin < begin) {
    split(nodes_[node].right, begin, nodes_[node].right, rest);
    below = node;
  } else {
    split(nodes_[node].left, begin, below, nodes_[node].left);
    rest = node;
  }
  update(node);
}

int LiveOffsets::merge(int below, int above) {
  if (below < 0) return above;
  if (above < 0) return below;
  ++visits_;
  if (nodes_[below].priority > nodes_[above].priority) {
    nodes_[below].right = merge(nodes_[below].right, above);
    update(below);
    return below;
  }
  nodes_[above].left = merge(below, nodes_[above].left);
  update(above);
  return above;
}

int64_t LiveOffsets::top(int node) {
  if (node < 0) return 0;
  while (nodes_[node].right >= 0) {
    ++visits_;
    node = nodes_[node].right;
  }
  return nodes_[node].end;
}

void LiveOffsets::set_lowest_gap(int node, int64_t below_end) {
  ++visits_;
  Node& n = nodes_[node];
  if (n.left >= 0) {
    set_lowest_gap(n.left, below_end);
  } else {
    n.gap = n.begin - below_end;
  }
  update(node);
}

}  // namespace ampc::runtime
