// The GEMM core of the CPU backend: batches of row-major f32 and f64 matrix products, f32 through
// oneDNN's sgemm (its JIT kernels; about 10% faster than OpenBLAS's on the benchmark models'
// steps, docs/benchmarks.md) and f64 through OpenBLAS's dgemm, and the helpers the MatMul, Gemm
// and Conv kernels share to stage f16/bf16 operands in f32 (their workspace) and round the f32
// result once.
//
// Accumulation order. Neither library's own threading keeps the bits of a product fixed: the
// per-element summation order depends on how it splits the work among threads (oneDNN may split
// K), so the same product gives different bits on 1 and 2 threads. The core therefore runs both
// single-threaded and splits each product itself into output tiles of at most kGemmTileRows x
// kGemmTileCols, fixed by (M, N) alone. Each tile is one single-threaded sgemm/dgemm call over
// the full K; tiles (and batch entries) are spread over the cores with parallel_for. An
// element's sum is therefore the library kernel's order for the tile that holds it: the same on
// any thread count, though it may differ between CPU models.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/f16_convert.h"

namespace ampc::runtime::cpu {

inline constexpr int64_t kGemmTileRows = 128;
inline constexpr int64_t kGemmTileCols = 256;

// One row-major product C = op(A) * op(B) with op(A) [m, k] and op(B) [k, n]. A is stored
// [m, k] (or [k, m] when trans_a), B [k, n] (or [n, k] when trans_b), C [m, n], all dense.
struct GemmDims {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;
};

// Where each product of a batch reads and writes, in elements from the base pointers. Product i
// reads A at a_offsets[i] and B at b_offsets[i] and writes C at c_offsets[i].
struct GemmBatch {
  std::vector<int64_t> a_offsets;
  std::vector<int64_t> b_offsets;
  std::vector<int64_t> c_offsets;

  int64_t size() const { return static_cast<int64_t>(c_offsets.size()); }
  // `count` products at fixed strides (a stride of 0 reuses one matrix for every product).
  static GemmBatch strided(int64_t count, int64_t stride_a, int64_t stride_b, int64_t stride_c);
};

// C_i = op(A_i) * op(B_i) for every product of `batch` (C is overwritten; k = 0 gives zeros).
// Must not be called from inside parallel_for: it spreads the tiles over the cores itself.
void gemm(const GemmDims& dims, const GemmBatch& batch, const float* a, const float* b, float* c);
void gemm(const GemmDims& dims, const GemmBatch& batch, const double* a, const double* b,
          double* c);

// One product C = alpha op(A) op(B) + beta C in the calling thread, with leading dimensions as
// BLAS takes them: for kernels that split their work over parallel_for themselves (one tile per
// call, in a fixed order, so the bits do not depend on the thread count either).
void gemm_in_thread(const GemmDims& dims, float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_in_thread(const GemmDims& dims, double alpha, const double* a, int64_t lda,
                    const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Carves aligned typed buffers out of a kernel's workspace, in the order a WorkspaceFn counted
// them with bytes_for.
class WorkspaceCarver {
 public:
  static constexpr int64_t kAlignment = 64;

  explicit WorkspaceCarver(std::span<std::byte> workspace) : workspace_(workspace) {}

  // What a buffer of `count` elements of T costs, alignment slack included.
  template <typename T>
  static int64_t bytes_for(int64_t count) {
    return count * static_cast<int64_t>(sizeof(T)) + kAlignment;
  }

  template <typename T>
  std::span<T> take(int64_t count) {
    const auto base = reinterpret_cast<uintptr_t>(workspace_.data());
    const auto aligned = (base + used_ + kAlignment - 1) / kAlignment * kAlignment;
    const size_t offset = aligned - base;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    AMPC_CHECK(offset + bytes <= workspace_.size());
    used_ = offset + bytes;
    return {reinterpret_cast<T*>(workspace_.data() + offset), static_cast<size_t>(count)};
  }

 private:
  std::span<std::byte> workspace_;
  size_t used_ = 0;
};

// The type a GEMM over T runs in: f32 for f32, f16 and bf16; f64 for f64.
template <typename T>
using gemm_t = compute_t<T>;

// True when T's elements must be staged in gemm_t<T> before the GEMM (f16, bf16).
template <typename T>
constexpr bool needs_staging_v = !std::is_same_v<T, gemm_t<T>>;

// Converts every element of `in` exactly to f32 (f16 through F16C where the CPU has it).
template <typename T>
void upcast(std::span<const T> in, float* out) {
  parallel_for(static_cast<int64_t>(in.size()), 1 << 14, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, Float16>) {
      widen_f16(in.data() + begin, out + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i) out[i] = load(in[i]);
    }
  });
}

// Rounds each f32 value once into T (f16 through F16C where the CPU has it).
template <typename T>
void round_into(const float* in, std::span<T> out) {
  parallel_for(static_cast<int64_t>(out.size()), 1 << 14, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, Float16>) {
      narrow_to_f16(in + begin, out.data() + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i) out[i] = store<T>(in[i]);
    }
  });
}

// `tensor` as gemm_t<T> elements: the tensor itself for f32/f64, else an upcast copy carved
// from `carver`.
template <typename T>
const gemm_t<T>* staged_operand(std::span<const T> tensor, WorkspaceCarver& carver) {
  if constexpr (needs_staging_v<T>) {
    std::span<float> staged = carver.take<float>(static_cast<int64_t>(tensor.size()));
    upcast(tensor, staged.data());
    return staged.data();
  } else {
    return tensor.data();
  }
}

}  // namespace ampc::runtime::cpu
