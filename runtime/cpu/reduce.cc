// CPU kernels for ReduceSum, ReduceMean and ReduceMax, ArgMax and ArgMin, and CumSum.
//
// Axes come from the `axes` attribute or, when present, from the axes operand (input 1); the
// operand wins because it is what the node reads at run time (canonicalize usually moves a
// constant operand into the attribute first). No axes, or an empty list, reduce over every
// dimension unless noop_with_empty_axes asks for the identity. Negative axes count from the end.
//
// Numerics: each output element takes its reduced elements in row-major order of the input (the
// reduced dimensions in their original order). Float sums accumulate in f32 for f16, bf16 and
// f32 and in f64 for f64, in pairwise_sum.h's order (blocks of 64 added in order, the block sums
// pairwise), so their error grows with the log of the length; integer sums are exact in i64
// (wrapping to the element type on store); a maximum is exact. ReduceMean divides the sum once by
// the element count. The result is rounded once on store. Output elements are spread over
// threads, and so are the blocks of the few long sums of a reduction with fewer outputs than
// threads; the order depends on the shapes alone, so the bits do not depend on the thread count.
//
// Empty reductions follow ONNX: a sum is 0, a mean of floats NaN (0 / 0; 0 for integers), a
// maximum the lowest value of the type (-inf for floats, false for bool). ReduceMax propagates
// NaN.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/pairwise_sum.h"

namespace ampc::runtime::cpu {
namespace {

// The reduced axes of the node, normalized and sorted; nullopt when none are given.
absl::StatusOr<std::optional<std::vector<int64_t>>> reduced_axes(const KernelContext& ctx,
                                                                 int64_t rank) {
  std::vector<int64_t> axes;
  if (ctx.has_input(1)) {
    const TensorArg& operand = ctx.input(1);
    if (operand.dtype() != DType::kI64) {
      return absl::InvalidArgumentError(
          str_cat("axes must be i64, got ", dtype_name(operand.dtype())));
    }
    std::span<const int64_t> values = operand.in<int64_t>();
    axes.assign(values.begin(), values.end());
  } else if (const AttrValue* attr = ctx.node.find_attr("axes")) {
    axes = std::get<std::vector<int64_t>>(*attr);
  } else {
    return std::nullopt;
  }
  for (int64_t& axis : axes) {
    if (axis < -rank || axis >= rank) {
      return absl::InvalidArgumentError(str_cat("axis ", axis, " is out of range for rank ", rank,
                                                " (expected [", -rank, ", ", rank - 1, "])"));
    }
    if (axis < 0) axis += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return absl::InvalidArgumentError(str_cat("axes [", str_join(axes, ", "), "] repeat an axis"));
  }
  return axes;
}

// Where the reduced elements of each output element live. Dimensions of size 1 are dropped and
// runs of adjacent kept (or reduced) dimensions are merged, which keeps the row-major order.
struct ReduceLayout {
  // Kept dimensions, outermost first: output element o sits at the input offset given by its
  // multi-index in these sizes times these strides.
  std::vector<int64_t> kept_sizes, kept_strides;
  // The innermost reduced dimension is walked directly; the offsets of the positions of all the
  // other reduced dimensions (row-major) are listed once.
  std::vector<int64_t> outer_reduced_offsets{0};
  int64_t inner_size = 1, inner_stride = 0;
  int64_t reduced_count = 1;
  int64_t output_count = 1;

  int64_t base_offset(int64_t output) const {
    int64_t offset = 0;
    for (size_t k = kept_sizes.size(); k-- > 0;) {
      offset += (output % kept_sizes[k]) * kept_strides[k];
      output /= kept_sizes[k];
    }
    return offset;
  }
};

ReduceLayout make_layout(const Shape& shape, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];

  ReduceLayout layout;
  std::vector<int64_t> reduced_sizes, reduced_strides;
  std::optional<bool> previous_reduced;
  for (int64_t d = 0; d < rank; ++d) {
    const bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (reduced) {
      layout.reduced_count *= shape[d];
    } else {
      layout.output_count *= shape[d];
    }
    if (shape[d] == 1) continue;
    std::vector<int64_t>& sizes = reduced ? reduced_sizes : layout.kept_sizes;
    std::vector<int64_t>& dim_strides = reduced ? reduced_strides : layout.kept_strides;
    if (previous_reduced == reduced) {
      sizes.back() *= shape[d];
      dim_strides.back() = strides[d];
    } else {
      sizes.push_back(shape[d]);
      dim_strides.push_back(strides[d]);
    }
    previous_reduced = reduced;
  }
  if (reduced_sizes.empty()) return layout;
  layout.inner_size = reduced_sizes.back();
  layout.inner_stride = reduced_strides.back();
  for (size_t k = 0; k + 1 < reduced_sizes.size(); ++k) {
    std::vector<int64_t> next;
    next.reserve(layout.outer_reduced_offsets.size() * reduced_sizes[k]);
    for (int64_t offset : layout.outer_reduced_offsets) {
      for (int64_t i = 0; i < reduced_sizes[k]; ++i)
        next.push_back(offset + i * reduced_strides[k]);
    }
    layout.outer_reduced_offsets = std::move(next);
  }
  return layout;
}

enum class Reduction { kSum, kMean, kMax };

// Sums accumulate in the compute type of floats and in i64 for integers; a maximum is exact in
// the compute type.
template <typename T, Reduction R>
using accumulate_t =
    std::conditional_t<R == Reduction::kMax || is_float_v<T>, compute_t<T>, int64_t>;

template <typename T, Reduction R>
accumulate_t<T, R> initial_value() {
  using A = accumulate_t<T, R>;
  if constexpr (R != Reduction::kMax) {
    return A(0);
  } else if constexpr (std::numeric_limits<A>::has_infinity) {
    return -std::numeric_limits<A>::infinity();
  } else {
    return std::numeric_limits<A>::lowest();
  }
}

template <typename T, Reduction R>
void accumulate(accumulate_t<T, R>& acc, T element) {
  const auto value = load(element);
  if constexpr (R == Reduction::kMax) {
    // A NaN element replaces the maximum and nothing replaces a NaN maximum.
    if (value > acc || value != value) acc = value;
  } else {
    acc += value;
  }
}

// Float sums and means, which add in pairwise_sum.h's order.
template <typename T, Reduction R>
constexpr bool kPairwise = (R != Reduction::kMax) && is_float_v<T>;

template <typename T, Reduction R>
T finish(accumulate_t<T, R> acc, int64_t count) {
  using A = accumulate_t<T, R>;
  if constexpr (R == Reduction::kMean) {
    if constexpr (std::is_integral_v<A>) {
      acc = count == 0 ? 0 : acc / count;
    } else {
      acc /= static_cast<A>(count);
    }
  }
  if constexpr (is_float_v<T>) {
    return store<T>(acc);
  } else {
    return static_cast<T>(acc);
  }
}

// Outputs whose innermost kept dimension is the input's last (a bias gradient: the sum of every
// row): consecutive outputs read consecutive elements, so a block of them is summed together,
// row after row, instead of one strided column at a time. Each output still adds its elements
// in the same order (the reduced positions, row-major), so the bits are the column walk's.
constexpr int64_t kColumnBlock = 256;

template <typename T, Reduction R>
void reduce_columns(const ReduceLayout& layout, std::span<const T> in, std::span<T> out) {
  const int64_t width = layout.kept_sizes.back();
  const int64_t blocks_per_run = (width + kColumnBlock - 1) / kColumnBlock;
  const int64_t items = layout.output_count / width * blocks_per_run;
  const int64_t work = layout.reduced_count * std::min(width, kColumnBlock);
  parallel_for(items, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work)),
               [&](int64_t begin, int64_t end) {
                 using A = accumulate_t<T, R>;
                 std::array<A, kColumnBlock> acc;
                 std::optional<PairwiseColumnSums<A>> sums;
                 if constexpr (kPairwise<T, R>) sums.emplace(kColumnBlock);
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t run = item / blocks_per_run;
                   const int64_t first = run * width + item % blocks_per_run * kColumnBlock;
                   const int64_t n = std::min(kColumnBlock, (run + 1) * width - first);
                   const int64_t base = layout.base_offset(first);
                   std::fill(acc.begin(), acc.begin() + n, initial_value<T, R>());
                   if constexpr (kPairwise<T, R>) sums->clear();
                   for (int64_t outer : layout.outer_reduced_offsets) {
                     for (int64_t i = 0; i < layout.inner_size; ++i) {
                       const T* row = in.data() + base + outer + i * layout.inner_stride;
                       if constexpr (kPairwise<T, R>) {
                         sums->add_row(row, n, [](T x) { return load(x); });
                       } else {
                         for (int64_t w = 0; w < n; ++w) accumulate<T, R>(acc[w], row[w]);
                       }
                     }
                   }
                   if constexpr (kPairwise<T, R>) sums->totals(n, acc.data());
                   for (int64_t w = 0; w < n; ++w) {
                     out[first + w] = finish<T, R>(acc[w], layout.reduced_count);
                   }
                 }
               });
}

// Sums at least this long, of a reduction with fewer outputs than threads (a mean loss, the
// total of a tensor), are cut into their blocks of kSumBlock across threads.
constexpr int64_t kParallelSumLength = 1 << 15;

// Each output in turn: the sums of its blocks of kSumBlock terms in parallel, then tree_sum;
// the bits of the streaming PairwiseSum.
template <typename T, Reduction R>
void reduce_long_sums(const ReduceLayout& layout, std::span<const T> in, std::span<T> out) {
  using A = accumulate_t<T, R>;
  const int64_t count = layout.reduced_count;
  std::vector<A> blocks((count + kSumBlock - 1) / kSumBlock);
  for (int64_t o = 0; o < layout.output_count; ++o) {
    const int64_t base = layout.base_offset(o);
    parallel_for(static_cast<int64_t>(blocks.size()), 256, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        // Term k is element i of run q: offset base + outer_reduced_offsets[q] + i * stride.
        const int64_t first = b * kSumBlock;
        int64_t q = first / layout.inner_size, i = first % layout.inner_size;
        A sum = A(0);
        for (int64_t k = first; k < std::min(count, first + kSumBlock); ++k) {
          sum += load(in[base + layout.outer_reduced_offsets[q] + i * layout.inner_stride]);
          if (++i == layout.inner_size) {
            i = 0;
            ++q;
          }
        }
        blocks[b] = sum;
      }
    });
    out[o] = finish<T, R>(tree_sum(std::span<A>(blocks)), count);
  }
}

template <typename T, Reduction R>
absl::Status reduce(const KernelContext& ctx) {
  const TensorArg& data = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(data.shape().size());
  std::span<const T> in = data.in<T>();
  std::span<T> out = ctx.output(0).out<T>();

  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, reduced_axes(ctx, rank));
  if (!axes || axes->empty()) {
    const AttrValue* noop = ctx.node.find_attr("noop_with_empty_axes");
    if (noop != nullptr && std::get<int64_t>(*noop) != 0) {
      std::copy(in.begin(), in.end(), out.begin());
      return absl::OkStatus();
    }
    axes = std::vector<int64_t>(rank);
    for (int64_t d = 0; d < rank; ++d) (*axes)[d] = d;
  }
  const ReduceLayout layout = make_layout(data.shape(), *axes);
  AMPC_CHECK(layout.output_count == static_cast<int64_t>(out.size()));

  if (!layout.kept_strides.empty() && layout.kept_strides.back() == 1 &&
      layout.kept_sizes.back() >= kColumnBlock / 8) {
    reduce_columns<T, R>(layout, in, out);
    return absl::OkStatus();
  }
  if constexpr (kPairwise<T, R>) {
    if (layout.output_count < cpu_threads() && layout.reduced_count >= kParallelSumLength) {
      reduce_long_sums<T, R>(layout, in, out);
      return absl::OkStatus();
    }
  }
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, layout.reduced_count));
  parallel_for(layout.output_count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const int64_t base = layout.base_offset(o);
      accumulate_t<T, R> acc = initial_value<T, R>();
      PairwiseSum<accumulate_t<T, R>> sum;
      for (int64_t outer : layout.outer_reduced_offsets) {
        const T* run = in.data() + base + outer;
        for (int64_t i = 0; i < layout.inner_size; ++i) {
          if constexpr (kPairwise<T, R>) {
            sum.add(load(run[i * layout.inner_stride]));
          } else {
            accumulate<T, R>(acc, run[i * layout.inner_stride]);
          }
        }
      }
      if constexpr (kPairwise<T, R>) acc = sum.total();
      out[o] = finish<T, R>(acc, layout.reduced_count);
    }
  });
  return absl::OkStatus();
}

// The lines along one axis of a row-major tensor: line l (of outer * inner) starts at base(l)
// and its elements are `inner` apart.
struct AxisLines {
  int64_t outer = 1, inner = 1, size = 1;

  AxisLines(const Shape& shape, int64_t axis) : size(shape[axis]) {
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  }
  int64_t count() const { return outer * inner; }
  int64_t base(int64_t line) const { return (line / inner) * size * inner + line % inner; }
  // Lines per parallel task: about 16K elements.
  int64_t grain() const { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, size)); }
};

// ArgMax (kMax) / ArgMin: one scan along the axis per output element, in the compute type. The
// first extreme wins, or the last with select_last_index; a NaN is the extreme (numpy's rule),
// and the first NaN wins whatever select_last_index says.
template <typename T, bool kMax>
absl::Status arg_reduce(const KernelContext& ctx) {
  const TensorArg& data = ctx.input(0);
  const Shape& shape = data.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = ctx.node.int_attr("axis");
  if (axis < 0) axis += rank;
  const bool last = int_attr_or(ctx.node, "select_last_index", 0) != 0;
  const AxisLines lines(shape, axis);
  const int64_t size = lines.size;
  const int64_t inner = lines.inner;
  std::span<const T> in = data.in<T>();
  std::span<int64_t> out = ctx.output(0).out<int64_t>();
  parallel_for(lines.count(), lines.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const T* run = in.data() + lines.base(o);
      int64_t best = 0;
      auto best_value = load(run[0]);
      for (int64_t i = 1; i < size && best_value == best_value; ++i) {
        const auto value = load(run[i * inner]);
        const bool better = value != value || (kMax ? value > best_value : value < best_value) ||
                            (last && value == best_value);
        if (better) {
          best = i;
          best_value = value;
        }
      }
      out[o] = best;
    }
  });
  return absl::OkStatus();
}

// CumSum: each line along the axis summed in order (from the end with reverse), accumulating in
// the compute type for floats (f32 for f16 and bf16) and in i64 for integers; each output is the
// running sum rounded once (exclusive: before adding its own element).
template <typename T>
absl::Status cumsum(const KernelContext& ctx) {
  const TensorArg& data = ctx.input(0);
  const Shape& shape = data.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  const TensorArg& axis_arg = ctx.input(1);
  int64_t axis =
      axis_arg.dtype() == DType::kI32 ? axis_arg.in<int32_t>()[0] : axis_arg.in<int64_t>()[0];
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(str_cat("axis ", axis, " is out of range for rank ", rank,
                                              " (expected [", -rank, ", ", rank - 1, "])"));
  }
  if (axis < 0) axis += rank;
  const bool exclusive = int_attr_or(ctx.node, "exclusive", 0) != 0;
  const bool reverse = int_attr_or(ctx.node, "reverse", 0) != 0;
  const AxisLines lines(shape, axis);
  const int64_t size = lines.size;
  const int64_t inner = lines.inner;
  using A = std::conditional_t<is_float_v<T>, compute_t<T>, int64_t>;
  std::span<const T> in = data.in<T>();
  std::span<T> out = ctx.output(0).out<T>();
  parallel_for(lines.count(), lines.grain(), [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      const int64_t base = lines.base(line);
      A sum = A(0);
      for (int64_t k = 0; k < size; ++k) {
        const int64_t i = base + (reverse ? size - 1 - k : k) * inner;
        const A value = static_cast<A>(load(in[i]));
        if (!exclusive) sum += value;
        if constexpr (is_float_v<T>) {
          out[i] = store<T>(sum);
        } else {
          out[i] = static_cast<T>(sum);
        }
        if (exclusive) sum += value;
      }
    }
  });
  return absl::OkStatus();
}

void register_reduce_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(
      r, kernel_def("CumSum"), []<typename T>() { return &cumsum<T>; });
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(
      r, kernel_def("ArgMax"), []<typename T>() { return &arg_reduce<T, true>; });
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(
      r, kernel_def("ArgMin"), []<typename T>() { return &arg_reduce<T, false>; });
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(
      r, kernel_def("ReduceSum"), []<typename T>() { return &reduce<T, Reduction::kSum>; });
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t>(
      r, kernel_def("ReduceMean"), []<typename T>() { return &reduce<T, Reduction::kMean>; });
  add_kernels<float, double, Float16, BFloat16, int64_t, int32_t, int8_t, uint8_t, bool>(
      r, kernel_def("ReduceMax"), []<typename T>() { return &reduce<T, Reduction::kMax>; });
}

static KernelRegistration kReduceKernels(&register_reduce_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
