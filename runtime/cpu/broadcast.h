// Numpy broadcasting for the element-wise CPU kernels, and the typed maps built on it.
//
// The contiguous loops are `omp simd` (-O2 alone does not vectorize them): each lane computes the
// scalar formula for its element (no fast-math, so no reassociation and no vector math library),
// which gives the scalar loop's bits; an output that shares its operand's buffer is read and
// written at the same index only.
//
// The output is walked in runs: stretches of consecutive output elements along which each
// operand advances by a fixed stride (0 where it is broadcast). Shapes are collapsed once per
// call (size-1 output dimensions dropped, neighbours merged where every operand is contiguous
// across them), so equal shapes become one run per chunk and an index is unravelled once per
// chunk, not per element. Each output element is written once, by one chunk, from its own
// operands: the results do not depend on the thread count, and an output may share its buffer
// with an operand of its own shape.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/broadcast_dims.h"
#include "runtime/cast_math.h"
#include "runtime/cpu/cpu_kernel_util.h"

namespace ampc::runtime::cpu {

// Elements per parallel_for chunk for the element-wise kernels.
inline constexpr int64_t kElementwiseGrain = int64_t{1} << 14;

template <size_t N>
class BroadcastWalk {
 public:
  using Offsets = std::array<int64_t, N>;

  // `operands` broadcast to `out` (validated by shape inference).
  BroadcastWalk(const Shape& out, const std::array<const Shape*, N>& operands)
      : size_(num_elements(out)) {
    BroadcastDims<N> collapsed = collapse_broadcast<N>(out, operands);
    dims_ = std::move(collapsed.dims);
    strides_ = std::move(collapsed.strides);
  }

  int64_t size() const { return size_; }

  // Calls run(out_offset, count, operand_offsets, operand_strides) for consecutive runs that
  // cover the output elements [begin, end), in order.
  template <typename Run>
  void for_each_run(int64_t begin, int64_t end, Run&& run) const {
    const int rank = static_cast<int>(dims_.size());
    const int64_t inner = dims_.back();
    const Offsets& inner_strides = strides_.back();
    std::vector<int64_t> index(rank);
    Offsets offsets{};
    int64_t rest = begin;
    for (int d = rank - 1; d >= 0; --d) {
      index[d] = rest % dims_[d];
      rest /= dims_[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * strides_[d][k];
    }
    for (int64_t pos = begin; pos < end;) {
      const int64_t count = std::min(inner - index[rank - 1], end - pos);
      run(pos, count, offsets, inner_strides);
      pos += count;
      if (pos >= end) break;
      // The run ended at the end of a row: back to the row's start, then carry outward.
      for (size_t k = 0; k < N; ++k) offsets[k] -= index[rank - 1] * inner_strides[k];
      index[rank - 1] = 0;
      for (int d = rank - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) offsets[k] += strides_[d][k];
        if (++index[d] < dims_[d]) break;
        for (size_t k = 0; k < N; ++k) offsets[k] -= dims_[d] * strides_[d][k];
        index[d] = 0;
      }
    }
  }

 private:
  int64_t size_ = 1;
  std::vector<int64_t> dims_;     // collapsed output dimensions, outermost first
  std::vector<Offsets> strides_;  // per collapsed dimension, each operand's element stride
};

// out[i] = store(fn(load(x[i]))) over same-shaped tensors.
template <typename Out, typename In, typename Fn>
void map_unary(const TensorArg& x, const TensorArg& out, Fn fn) {
  const In* in_data = x.in<In>().data();
  Out* out_data = out.out<Out>().data();
  parallel_for(out.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out_data[i] = store<Out>(fn(load(in_data[i])));
  });
}

// The same as map_unary for an array function of one dtype: fn(in, out, n) on contiguous pieces.
template <typename T, typename ArrayFn>
void map_unary_arrays(const TensorArg& x, const TensorArg& out, ArrayFn fn) {
  const T* in_data = x.in<T>().data();
  T* out_data = out.out<T>().data();
  parallel_for(out.num_elements(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    fn(in_data + begin, out_data + begin, end - begin);
  });
}

// out = store(fn(load(a), load(b))) over the broadcast of a and b.
template <typename Out, typename A, typename B, typename Fn>
void map_binary(const TensorArg& a, const TensorArg& b, const TensorArg& out, Fn fn) {
  const BroadcastWalk<2> walk(out.shape(), {&a.shape(), &b.shape()});
  const A* a_data = a.in<A>().data();
  const B* b_data = b.in<B>().data();
  Out* out_data = out.out<Out>().data();
  parallel_for(walk.size(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    walk.for_each_run(begin, end, [&](int64_t o, int64_t n, const auto& at, const auto& step) {
      const A* pa = a_data + at[0];
      const B* pb = b_data + at[1];
      Out* po = out_data + o;
      // The common stride patterns get loops the compiler can vectorize.
      if (step[0] == 1 && step[1] == 1) {
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) po[j] = store<Out>(fn(load(pa[j]), load(pb[j])));
      } else if (step[0] == 0 && step[1] == 1) {
        const auto x = load(*pa);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) po[j] = store<Out>(fn(x, load(pb[j])));
      } else if (step[0] == 1 && step[1] == 0) {
        const auto y = load(*pb);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) po[j] = store<Out>(fn(load(pa[j]), y));
      } else {
        for (int64_t j = 0; j < n; ++j) {
          po[j] = store<Out>(fn(load(pa[j * step[0]]), load(pb[j * step[1]])));
        }
      }
    });
  });
}

// out = store(fn(load(a), load(b), load(c))) over the broadcast of a, b and c.
template <typename Out, typename A, typename B, typename C, typename Fn>
void map_ternary(const TensorArg& a, const TensorArg& b, const TensorArg& c, const TensorArg& out,
                 Fn fn) {
  const BroadcastWalk<3> walk(out.shape(), {&a.shape(), &b.shape(), &c.shape()});
  const A* a_data = a.in<A>().data();
  const B* b_data = b.in<B>().data();
  const C* c_data = c.in<C>().data();
  Out* out_data = out.out<Out>().data();
  parallel_for(walk.size(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
    walk.for_each_run(begin, end, [&](int64_t o, int64_t n, const auto& at, const auto& step) {
      const A* pa = a_data + at[0];
      const B* pb = b_data + at[1];
      const C* pc = c_data + at[2];
      Out* po = out_data + o;
      if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
        for (int64_t j = 0; j < n; ++j) {
          po[j] = store<Out>(fn(load(pa[j]), load(pb[j]), load(pc[j])));
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          po[j] =
              store<Out>(fn(load(pa[j * step[0]]), load(pb[j * step[1]]), load(pc[j * step[2]])));
        }
      }
    });
  });
}

// A float truncated toward zero into integer type I, as a cast does (runtime/cast_math.h).
using cast_math::truncate_to_int;

}  // namespace ampc::runtime::cpu
