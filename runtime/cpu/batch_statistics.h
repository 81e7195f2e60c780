// Training-mode BatchNormalization's batch statistics, for the forward kernel
// (normalization.cc) and the gradient's (normalization_grad.cc), which recomputes them.
//
// Per channel c of X [N, C, D1, ...] over its count = N * D1 * ... elements (n, d), in row-major
// order:
//   mean = sum of x / count,  var = sum of (x - mean)^2 / count   (the population variance)
// each sum in the compute type, one thread per channel, in an order fixed by the shape alone
// (BatchShape::channel_sum), so the bits do not depend on the thread count.
//
// With a data-parallel group (ampc.SyncBatchNormalization, and the gradient's all_ranks), the
// sums and counts are every rank's together: each rank's sum of x and its count are summed over
// the ranks, the mean is their quotient, and each rank's sum of (x - mean)^2 around that mean is
// summed over the ranks: the statistics of all the ranks' batches as one, up to the order of the
// additions. Every rank gets the same bits.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {

// `values` becomes its element-wise sum over `group`'s ranks (null: a group of one).
template <typename C>
absl::Status sum_over_ranks(std::vector<C>& values, comm::Communicator* group) {
  if (group == nullptr || group->size() == 1) return absl::OkStatus();
  return group->all_reduce_now(values.data(), static_cast<int64_t>(values.size()),
                               std::is_same_v<C, double> ? DType::kF64 : DType::kF32,
                               comm::ReduceOp::kSum);
}

struct BatchShape {
  int64_t batch = 1;
  int64_t channels = 1;
  int64_t spatial = 1;  // D1 * ... (1 for X [N, C] or [N])

  explicit BatchShape(const Shape& x) {
    batch = x[0];
    channels = x.size() >= 2 ? x[1] : 1;
    for (size_t d = 2; d < x.size(); ++d) spatial *= x[d];
  }

  // The sum of f(i) over the elements of channel c, in C. Element o of each of its rows of
  // `spatial` elements is added into partial sum o mod kLanes, row after row, and the partial
  // sums are then added pairwise (kLanes / 2 apart, then a quarter, ...). The order depends on
  // the shape alone; the kLanes independent sums vectorize and do not wait on one another.
  static constexpr int kLanes = 16;
  template <typename C, typename F>
  C channel_sum(int64_t c, F&& f) const {
    return channel_sums<C, 1>(c, [&](int64_t i) { return std::array<C, 1>{f(i)}; })[0];
  }

  // N sums over channel c in one pass, f(i) giving the N terms of element i: each sum is
  // channel_sum's of its terms, in its order (the same bits).
  template <typename C, size_t N, typename F>
  std::array<C, N> channel_sums(int64_t c, F&& f) const {
    C partial[N][kLanes] = {};
    const auto add = [&](int lane, int64_t i) {
      const std::array<C, N> terms = f(i);
      for (size_t k = 0; k < N; ++k) partial[k][lane] += terms[k];
    };
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t first = (b * channels + c) * spatial;
      int64_t o = 0;
      for (; o + kLanes <= spatial; o += kLanes) {
        for (int j = 0; j < kLanes; ++j) add(j, first + o + j);
      }
      for (; o < spatial; ++o) add(static_cast<int>(o % kLanes), first + o);
    }
    std::array<C, N> sums;
    for (size_t k = 0; k < N; ++k) {
      for (int width = kLanes / 2; width > 0; width /= 2) {
        for (int j = 0; j < width; ++j) partial[k][j] += partial[k][j + width];
      }
      sums[k] = partial[k][0];
    }
    return sums;
  }
};

// `mean` and `var` (channels elements each) of X's batch, or of every rank's batches in `group`.
// Returns the number of elements per channel they are over.
template <typename T, typename C = compute_t<T>>
absl::StatusOr<C> batch_statistics(std::span<const T> x, const BatchShape& shape,
                                   comm::Communicator* group, std::vector<C>& mean,
                                   std::vector<C>& var) {
  const int64_t channels = shape.channels;
  // Channel sums, then the count.
  std::vector<C> sums(channels + 1);
  parallel_for(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      sums[c] = shape.channel_sum<C>(c, [&](int64_t i) { return static_cast<C>(load(x[i])); });
    }
  });
  sums[channels] = static_cast<C>(shape.batch * shape.spatial);
  AMPC_RETURN_IF_ERROR(sum_over_ranks(sums, group));
  const C count = sums[channels];
  mean.resize(channels);
  for (int64_t c = 0; c < channels; ++c) mean[c] = sums[c] / count;
  std::vector<C> square_sums(channels);
  parallel_for(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const C m = mean[c];
      square_sums[c] = shape.channel_sum<C>(c, [&](int64_t i) {
        const C centered = load(x[i]) - m;
        return centered * centered;
      });
    }
  });
  AMPC_RETURN_IF_ERROR(sum_over_ranks(square_sums, group));
  var.resize(channels);
  for (int64_t c = 0; c < channels; ++c) var[c] = square_sums[c] / count;
  return count;
}

}  // namespace ampc::runtime::cpu
