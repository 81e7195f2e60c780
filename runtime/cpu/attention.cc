// CPU kernels of ampc.Attention and ampc.AttentionGrad (ops/attention.cc).
//
// The work goes in tiles of kQueryTile query rows of one batch (the product of the leading
// dims); a tile's scores (kQueryTile x S values) are the most either kernel holds, never T x S.
// A tile reads only the keys up to the last one its mask keeps in any of its rows (the key
// extent): under a causal mask, the tile of rows r0 .. r0 + 63 reads keys 0 .. r0 + 63 and
// skips the rest, about half the work; a padding mask's padded keys are skipped the same way.
// A skipped key would have added exp(-inf) = 0 to every sum it enters.
// Every product is a GEMM in the calling thread (runtime/cpu/gemm_core.h, oneDNN over f32, or
// f64 for f64; f16 and bf16 operands staged in f32 in the workspace):
// - forward, tiles spread over threads: S = scale Q_tile Kt + mask, each row's maximum, the
//   exponentials and their sum, Y_tile = (P V) / sum, and the row's LSE = max + log(sum);
// - backward, one batch per thread, its tiles in order: P = exp(S - LSE) recomputed,
//   dP = dY_tile V^T, dS = P (dP - d) with d_i = dY_i . Y_i, dQ_tile = scale dS K, and
//   dKt = scale Q^T dS, dV = P^T dY accumulated over the tiles.
// Each output element is computed by one thread in an order fixed by the shapes: the results do
// not depend on the thread count.
//
// Numerics: the GEMMs accumulate in the compute type in the library kernel's order, the
// exponentials' sum and d_i in vector lanes (an order fixed by the build); each output is rounded
// once. d_i reads Y as stored.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"
#include "runtime/cpu/vector_math.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

// The sizes of one call: `batch` products of the leading dims, T queries, S keys, D and Dv.
struct AttentionDims {
  int64_t batch = 1, t = 0, s = 0, d = 0, dv = 0;
};

AttentionDims dims_of(const Shape& q, const Shape& v) {
  AttentionDims dims;
  const size_t r = q.size();
  for (size_t i = 0; i + 2 < r; ++i) dims.batch *= q[i];
  dims.t = q[r - 2];
  dims.d = q[r - 1];
  dims.s = v[r - 2];
  dims.dv = v[r - 1];
  return dims;
}

// Reads the mask at (batch b, query i, key j) as what it does to a score: a bool mask sets
// -inf where it differs from `keep`, a float mask is added.
class MaskReader {
 public:
  MaskReader(const KernelContext& ctx, int operand, const AttentionDims& dims, const Shape& q)
      : arg_(ctx.has_input(operand) ? &ctx.input(operand) : nullptr) {
    if (arg_ == nullptr) return;
    keep_ = ctx.node.int_attr("mask_keep") != 0;
    // The mask's strides over [batch dims.., T, S], 0 along the dims it broadcasts.
    const Shape& m = arg_->shape();
    const size_t rank = q.size();
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (size_t k = 0; k < m.size(); ++k) {
      const size_t axis = rank - 1 - k;
      const int64_t extent = m[m.size() - 1 - k];
      if (extent != 1) strides[axis] = stride;
      stride *= extent;
    }
    row_stride_ = strides[rank - 2];
    col_stride_ = strides[rank - 1];
    batch_offset_.assign(dims.batch, 0);
    for (int64_t b = 0; b < dims.batch; ++b) {
      int64_t rest = b;
      for (size_t axis = rank - 2; axis-- > 0;) {
        batch_offset_[b] += (rest % q[axis]) * strides[axis];
        rest /= q[axis];
      }
    }
  }

  bool present() const { return arg_ != nullptr; }

  // The key extent of every tile of `tile_rows` queries of every batch, at b * tiles + tile: one
  // past the last key a row of the tile keeps, or s when none of them keeps any (those rows'
  // softmax is then computed over every key, as the unfused graph does). A mask shared by
  // batches (broadcast over the batch dims) is scanned once.
  std::vector<int64_t> tile_extents(const AttentionDims& n, int64_t tile_rows) const {
    const int64_t tiles = (n.t + tile_rows - 1) / tile_rows;
    std::vector<int64_t> extents(n.batch * tiles, n.s);
    if (arg_ == nullptr || col_stride_ == 0) return extents;
    std::unordered_map<int64_t, int64_t> first_with_offset;
    std::vector<int64_t> scanned;  // the first batch of each distinct mask
    for (int64_t b = 0; b < n.batch; ++b) {
      if (first_with_offset.emplace(batch_offset_[b], b).second) scanned.push_back(b);
    }
    parallel_for(static_cast<int64_t>(scanned.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t b = scanned[k];
        for (int64_t tile = 0; tile < tiles; ++tile) {
          const int64_t r0 = tile * tile_rows;
          extents[b * tiles + tile] = key_extent(b, r0, std::min(tile_rows, n.t - r0), n.s);
        }
      }
    });
    for (int64_t b = 0; b < n.batch; ++b) {
      const int64_t first = first_with_offset.at(batch_offset_[b]);
      std::copy_n(extents.begin() + first * tiles, tiles, extents.begin() + b * tiles);
    }
    return extents;
  }

  // Applies the mask of row (b, i) to `scores[0..s)`.
  template <typename C>
  void apply(int64_t b, int64_t i, std::span<C> scores) const {
    if (arg_ == nullptr) return;
    const int64_t base = batch_offset_[b] + i * row_stride_;
    switch (arg_->dtype()) {
      case DType::kBool: {
        const bool* m = arg_->in<bool>().data() + base;
        for (size_t j = 0; j < scores.size(); ++j) {
          if (m[j * col_stride_] != keep_) scores[j] = -std::numeric_limits<C>::infinity();
        }
        return;
      }
      case DType::kF32:
        return add_bias(arg_->in<float>().data() + base, scores);
      case DType::kF64:
        return add_bias(arg_->in<double>().data() + base, scores);
      case DType::kF16:
        return add_bias(arg_->in<Float16>().data() + base, scores);
      case DType::kBF16:
        return add_bias(arg_->in<BFloat16>().data() + base, scores);
      default:
        AMPC_CHECK(false && "a mask is bool or float");
    }
  }

 private:
  // The key extent of rows i0 .. i0 + rows of batch b (tile_extents).
  int64_t key_extent(int64_t b, int64_t i0, int64_t rows, int64_t s) const {
    const int64_t base = batch_offset_[b] + i0 * row_stride_;
    const auto removed = [](auto bias) {
      const auto x = load(bias);
      return std::isinf(x) && x < 0;
    };
    switch (arg_->dtype()) {
      case DType::kBool:
        return extent(arg_->in<bool>().data() + base, rows, s,
                      [keep = keep_](bool m) { return m != keep; });
      case DType::kF32:
        return extent(arg_->in<float>().data() + base, rows, s, removed);
      case DType::kF64:
        return extent(arg_->in<double>().data() + base, rows, s, removed);
      case DType::kF16:
        return extent(arg_->in<Float16>().data() + base, rows, s, removed);
      case DType::kBF16:
        return extent(arg_->in<BFloat16>().data() + base, rows, s, removed);
      default:
        AMPC_CHECK(false && "a mask is bool or float");
        return s;
    }
  }

  // Each row is scanned from its end, only down to the extent the rows before it reached.
  template <typename M, typename Removed>
  int64_t extent(const M* mask, int64_t rows, int64_t s, Removed removed) const {
    int64_t reach = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const M* row = mask + r * row_stride_;
      int64_t j = s;
      while (j > reach && removed(row[(j - 1) * col_stride_])) --j;
      reach = j;
    }
    return reach == 0 ? s : reach;
  }

  template <typename M, typename C>
  void add_bias(const M* bias, std::span<C> scores) const {
    for (size_t j = 0; j < scores.size(); ++j) {
      scores[j] += static_cast<C>(load(bias[j * col_stride_]));
    }
  }

  const TensorArg* arg_;
  bool keep_ = true;
  int64_t row_stride_ = 0, col_stride_ = 0;
  std::vector<int64_t> batch_offset_;
};

// Query rows per tile: the tile's scores (kQueryTile x S) are the most the kernels hold.
constexpr int64_t kQueryTile = 64;

// Workspace for the operands the GEMMs read (gemm_t): none for f32 and f64, which they read
// in place, else f32 copies of `operands` (the node's float type is operand 0's).
int64_t staging_bytes(const Node& node, std::initializer_list<int> operands) {
  const DType dtype = node.operand(0)->dtype();
  if (dtype != DType::kF16 && dtype != DType::kBF16) return 0;
  int64_t bytes = 0;
  for (int i : operands) {
    bytes += WorkspaceCarver::bytes_for<float>(node.operand(i)->type().num_elements());
  }
  return bytes;
}

int64_t attention_workspace(const Node& node) { return staging_bytes(node, {0, 1, 2}); }

// The tile's scores over keys 0 .. keys: S = scale Q_tile Kt + mask, for query rows r0 .. r0 +
// rows of batch b, `keys` apart.
template <typename C>
void tile_scores(const C* q, const C* kt, const AttentionDims& n, int64_t b, int64_t r0,
                 int64_t rows, int64_t keys, C scale, const MaskReader& mask, C* scores) {
  gemm_in_thread(GemmDims{.m = rows, .n = keys, .k = n.d}, scale, q + (b * n.t + r0) * n.d, n.d,
                 kt + b * n.d * n.s, n.s, C(0), scores, keys);
  for (int64_t r = 0; r < rows; ++r) {
    mask.apply(b, r0 + r, std::span<C>(scores + r * keys, keys));
  }
}

// Turns a row of scores into exp(score - max) and returns (max, the sum of the exponentials).
template <typename C>
std::pair<C, C> exponentiate(C* row, int64_t keys) {
  C top = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < keys; ++j) top = top < row[j] ? row[j] : top;
#pragma omp simd
  for (int64_t j = 0; j < keys; ++j) row[j] -= top;
  exp_array(row, row, keys);
  C sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < keys; ++j) sum += row[j];
  return {top, sum};
}

// A row of scores' maximum and the log of the sum of exp(score - max), as the forward has them.
template <typename C>
std::pair<C, C> max_and_log_sum(const C* row, int64_t keys) {
  C top = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < keys; ++j) top = top < row[j] ? row[j] : top;
  C sum = 0;
  for (int64_t j = 0; j < keys; ++j) sum += numeric::exp(row[j] - top);
  return {top, numeric::log(sum)};
}

// What both kernels read of the node: the sizes (Q, Kt, V are operands first .. first + 2), the
// scale and the mask.
template <typename C>
struct AttentionCall {
  AttentionCall(const KernelContext& ctx, int first, int mask_operand)
      : n(dims_of(ctx.input(first).shape(), ctx.input(first + 2).shape())),
        scale(static_cast<C>(ctx.node.float_attr("scale"))),
        safe(ctx.node.int_attr("safe") != 0),
        mask(ctx, mask_operand, n, ctx.input(first).shape()) {}

  AttentionDims n;
  C scale;
  bool safe;  // a row with no key gives 0 and no gradient
  MaskReader mask;
};

template <typename T>
absl::Status attention(const KernelContext& ctx) {
  using C = gemm_t<T>;
  const AttentionCall<C> call(ctx, 0, 3);
  const AttentionDims& n = call.n;
  WorkspaceCarver carver(ctx.workspace);
  const C* q = staged_operand(ctx.input(0).in<T>(), carver);
  const C* kt = staged_operand(ctx.input(1).in<T>(), carver);
  const C* v = staged_operand(ctx.input(2).in<T>(), carver);
  const std::span<T> y = ctx.output(0).out<T>();
  const bool with_lse = ctx.has_output(1);
  const std::span<C> lse = with_lse ? ctx.output(1).out<C>() : std::span<C>();
  const int64_t tile_rows = std::min(kQueryTile, n.t);
  const int64_t tiles = (n.t + tile_rows - 1) / tile_rows;
  const std::vector<int64_t> extents = call.mask.tile_extents(n, tile_rows);
  const int64_t tile_work = tile_rows * n.s * (n.d + n.dv);
  parallel_for(n.batch * tiles, std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, tile_work)),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> scores(tile_rows * n.s);
                 std::vector<C> acc(tile_rows * n.dv);
                 std::vector<C> sums(tile_rows);
                 for (int64_t item = begin; item < end; ++item) {
                   const int64_t b = item / tiles;
                   const int64_t r0 = item % tiles * tile_rows;
                   const int64_t rows = std::min(tile_rows, n.t - r0);
                   const int64_t keys = extents[item];
                   tile_scores(q, kt, n, b, r0, rows, keys, call.scale, call.mask, scores.data());
                   for (int64_t r = 0; r < rows; ++r) {
                     C* row = scores.data() + r * keys;
                     auto [max, sum] = exponentiate(row, keys);
                     if (call.safe && numeric::is_empty_row(max)) {  // Y_i = 0, LSE_i = -inf
                       std::fill_n(row, keys, C(0));
                       sum = 1;
                     }
                     sums[r] = sum;
                     if (with_lse) lse[b * n.t + r0 + r] = max + std::log(sum);
                   }
                   gemm_in_thread(GemmDims{.m = rows, .n = n.dv, .k = keys}, C(1), scores.data(),
                                  keys, v + b * n.s * n.dv, n.dv, C(0), acc.data(), n.dv);
                   for (int64_t r = 0; r < rows; ++r) {
                     T* out = y.data() + (b * n.t + r0 + r) * n.dv;
                     const C* in = acc.data() + r * n.dv;
                     const C sum = sums[r];
#pragma omp simd
                     for (int64_t x = 0; x < n.dv; ++x) out[x] = store<T>(in[x] / sum);
                   }
                 }
               });
  return absl::OkStatus();
}

// Whether outputs of type T are in the compute type (f32, f64), so the GEMMs accumulate in them.
template <typename T>
constexpr bool kOutputsAreAccumulators = std::is_same_v<T, gemm_t<T>>;

// Where the GEMMs accumulate `out` from `offset` on: the output itself when it is in the compute
// type, else `acc`.
template <typename T, typename C>
C* accumulator(std::span<T> out, int64_t offset, std::vector<C>& acc) {
  if constexpr (kOutputsAreAccumulators<T>) {
    return out.data() + offset;
  } else {
    return acc.data();
  }
}

// Rounds `count` accumulated values into `out` from `offset` on (nothing to do when the GEMMs
// wrote the output itself).
template <typename T, typename C>
void round_into(const std::vector<C>& acc, std::span<T> out, int64_t offset, int64_t count) {
  if constexpr (!kOutputsAreAccumulators<T>) {
    for (int64_t i = 0; i < count; ++i) out[offset + i] = store<T>(acc[i]);
  }
}

int64_t attention_grad_workspace(const Node& node) { return staging_bytes(node, {0, 1, 2, 3}); }

template <typename T>
absl::Status attention_grad(const KernelContext& ctx) {
  using C = gemm_t<T>;
  const AttentionCall<C> call(ctx, 1, 6);
  const AttentionDims& n = call.n;
  const C scale = call.scale;
  WorkspaceCarver carver(ctx.workspace);
  const C* dy = staged_operand(ctx.input(0).in<T>(), carver);
  const C* q = staged_operand(ctx.input(1).in<T>(), carver);
  const C* kt = staged_operand(ctx.input(2).in<T>(), carver);
  const C* v = staged_operand(ctx.input(3).in<T>(), carver);
  const std::span<const T> y = ctx.input(4).in<T>();
  const std::span<const C> lse = ctx.input(5).in<C>();
  const std::span<T> dq = ctx.output(0).out<T>();
  const std::span<T> dkt = ctx.output(1).out<T>();
  const std::span<T> dv = ctx.output(2).out<T>();
  const int64_t tile_rows = std::min(kQueryTile, n.t);
  const int64_t tiles = (n.t + tile_rows - 1) / tile_rows;
  const std::vector<int64_t> extents = call.mask.tile_extents(n, tile_rows);
  parallel_for(n.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> probs(tile_rows * n.s);
    std::vector<C> ds(tile_rows * n.s);
    // f32 accumulators for f16 and bf16 outputs (rounded into them once); f32 and f64 outputs
    // are written by the GEMMs themselves.
    std::vector<C> dq_acc(kOutputsAreAccumulators<T> ? 0 : tile_rows * n.d);
    std::vector<C> dkt_acc(kOutputsAreAccumulators<T> ? 0 : n.d * n.s);
    std::vector<C> dv_acc(kOutputsAreAccumulators<T> ? 0 : n.s * n.dv);
    for (int64_t b = begin; b < end; ++b) {
      // dKt and dV accumulate over the tiles; a key past a tile's extent gets nothing from it.
      C* dkt_b = accumulator(dkt, b * n.d * n.s, dkt_acc);
      C* dv_b = accumulator(dv, b * n.s * n.dv, dv_acc);
      std::fill_n(dkt_b, n.d * n.s, C(0));
      std::fill_n(dv_b, n.s * n.dv, C(0));
      for (int64_t r0 = 0; r0 < n.t; r0 += tile_rows) {
        const int64_t rows = std::min(tile_rows, n.t - r0);
        const int64_t first = b * n.t + r0;  // the tile's first row over all batches
        const int64_t keys = extents[b * tiles + r0 / tile_rows];
        tile_scores(q, kt, n, b, r0, rows, keys, scale, call.mask, probs.data());
        // dP = dY_tile V^T.
        gemm_in_thread(GemmDims{.m = rows, .n = keys, .k = n.dv, .trans_b = true}, C(1),
                       dy + first * n.dv, n.dv, v + b * n.s * n.dv, n.dv, C(0), ds.data(), keys);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = first + r;
          const C* dy_row = dy + row * n.dv;
          const T* y_row = y.data() + row * n.dv;
          C d = 0;  // dY_i . Y_i
#pragma omp simd reduction(+ : d)
          for (int64_t x = 0; x < n.dv; ++x) d += dy_row[x] * load(y_row[x]);
          C* p = probs.data() + r * keys;
          C* g = ds.data() + r * keys;
          // P = exp((s - max) - log_sum), from the LSE where it holds log_sum (numeric.h).
          C max = lse[row], log_sum = 0;
          if (!numeric::lse_holds_log_sum(max)) std::tie(max, log_sum) = max_and_log_sum(p, keys);
          if (call.safe && numeric::is_empty_row(max)) {  // no probability, no gradient
            std::fill_n(p, keys, C(0));
            std::fill_n(g, keys, C(0));
            continue;
          }
#pragma omp simd
          for (int64_t j = 0; j < keys; ++j) p[j] = (p[j] - max) - log_sum;
          exp_array(p, p, keys);
#pragma omp simd
          for (int64_t j = 0; j < keys; ++j) {
            // dS = P (dP - d); a masked key (P = 0) adds nothing, whatever its dP.
            g[j] = p[j] == 0 ? C(0) : p[j] * (g[j] - d);
          }
        }
        // dQ_tile = scale dS K (K = Kt^T); dKt += scale Q_tile^T dS; dV += P^T dY_tile.
        C* dq_tile = accumulator(dq, first * n.d, dq_acc);
        gemm_in_thread(GemmDims{.m = rows, .n = n.d, .k = keys, .trans_b = true}, scale, ds.data(),
                       keys, kt + b * n.d * n.s, n.s, C(0), dq_tile, n.d);
        round_into(dq_acc, dq, first * n.d, rows * n.d);
        gemm_in_thread(GemmDims{.m = n.d, .n = keys, .k = rows, .trans_a = true}, scale,
                       q + first * n.d, n.d, ds.data(), keys, C(1), dkt_b, n.s);
        gemm_in_thread(GemmDims{.m = keys, .n = n.dv, .k = rows, .trans_a = true}, C(1),
                       probs.data(), keys, dy + first * n.dv, n.dv, C(1), dv_b, n.dv);
      }
      round_into(dkt_acc, dkt, b * n.d * n.s, n.d * n.s);
      round_into(dv_acc, dv, b * n.s * n.dv, n.s * n.dv);
    }
  });
  return absl::OkStatus();
}

void register_attention_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("Attention", {.workspace_bytes = &attention_workspace}),
      []<typename T>() { return &attention<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("AttentionGrad", {.workspace_bytes = &attention_grad_workspace}),
      []<typename T>() { return &attention_grad<T>; });
}

static KernelRegistration kAttentionKernels(&register_attention_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
