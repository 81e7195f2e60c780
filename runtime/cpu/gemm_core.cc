#include "runtime/cpu/gemm_core.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <mutex>

#include "cblas.h"
#include "oneapi/dnnl/dnnl.h"

namespace ampc::runtime::cpu {
namespace {

// OpenBLAS's threads would make the bits depend on the thread count (see the header), so it
// runs single-threaded in the calling thread and the core spreads tiles over the cores itself.
void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Work below this many flops stays on one thread.
constexpr int64_t kMinFlopsPerChunk = int64_t{1} << 21;

blasint blas_int(int64_t value) {
  AMPC_CHECK(value >= 0 && value <= INT_MAX);
  return static_cast<blasint>(value);
}

// One f32 product through oneDNN's sgemm, in the calling thread. oneDNN uses one thread inside
// an OpenMP parallel region of several; elsewhere it would use omp_get_max_threads() of them
// (and may split K among them, which changes the bits), so the calling thread's OpenMP thread
// count is 1 for the call.
void sgemm_in_thread(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  omp_set_num_threads(threads);
  AMPC_CHECK(status == dnnl_success);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
               const float* a, blasint lda, const float* b, blasint ldb, float* c, blasint ldc) {
  sgemm_in_thread(ta == CblasTrans, tb == CblasTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k,
               const double* a, blasint lda, const double* b, blasint ldb, double* c, blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

template <typename F>
void tiled_gemm(const GemmDims& dims, const GemmBatch& batch, const F* a, const F* b, F* c) {
  AMPC_CHECK(batch.a_offsets.size() == batch.c_offsets.size() &&
             batch.b_offsets.size() == batch.c_offsets.size());
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  if (batch.size() == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t c_offset : batch.c_offsets) std::fill_n(c + c_offset, m * n, F(0));
    return;
  }
  use_single_threaded_blas();
  const blasint lda = blas_int(dims.trans_a ? m : k);
  const blasint ldb = blas_int(dims.trans_b ? k : n);
  const blasint ldc = blas_int(n);
  const blasint k_blas = blas_int(k);
  const CBLAS_TRANSPOSE ta = dims.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = dims.trans_b ? CblasTrans : CblasNoTrans;
  const int64_t row_tiles = (m + kGemmTileRows - 1) / kGemmTileRows;
  const int64_t col_tiles = (n + kGemmTileCols - 1) / kGemmTileCols;
  const int64_t tiles = row_tiles * col_tiles;
  const int64_t flops_per_tile = 2 * std::min(m, kGemmTileRows) * std::min(n, kGemmTileCols) * k;
  const int64_t grain = std::max<int64_t>(1, kMinFlopsPerChunk / flops_per_tile);
  parallel_for(batch.size() * tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t product = item / tiles;
      const int64_t row0 = (item % tiles) / col_tiles * kGemmTileRows;
      const int64_t col0 = (item % tiles) % col_tiles * kGemmTileCols;
      const int64_t rows = std::min(kGemmTileRows, m - row0);
      const int64_t cols = std::min(kGemmTileCols, n - col0);
      const F* a_tile = a + batch.a_offsets[product] + (dims.trans_a ? row0 : row0 * k);
      const F* b_tile = b + batch.b_offsets[product] + (dims.trans_b ? col0 * k : col0);
      F* c_tile = c + batch.c_offsets[product] + row0 * n + col0;
      blas_gemm(ta, tb, static_cast<blasint>(rows), static_cast<blasint>(cols), k_blas, a_tile, lda,
                b_tile, ldb, c_tile, ldc);
    }
  });
}

}  // namespace

void gemm_in_thread(const GemmDims& dims, float alpha, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dims.m == 0 || dims.n == 0) return;
  if (dims.k == 0) {  // C = beta C; oneDNN refuses the leading dimensions of empty operands
    for (int64_t i = 0; i < dims.m; ++i) {
      for (int64_t j = 0; j < dims.n; ++j)
        c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  sgemm_in_thread(dims.trans_a, dims.trans_b, dims.m, dims.n, dims.k, alpha, a, lda, b, ldb, beta,
                  c, ldc);
}

void gemm_in_thread(const GemmDims& dims, double alpha, const double* a, int64_t lda,
                    const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (dims.m == 0 || dims.n == 0) return;
  use_single_threaded_blas();
  cblas_dgemm(CblasRowMajor, dims.trans_a ? CblasTrans : CblasNoTrans,
              dims.trans_b ? CblasTrans : CblasNoTrans, blas_int(dims.m), blas_int(dims.n),
              blas_int(dims.k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c, blas_int(ldc));
}

GemmBatch GemmBatch::strided(int64_t count, int64_t stride_a, int64_t stride_b, int64_t stride_c) {
  GemmBatch batch;
  for (int64_t i = 0; i < count; ++i) {
    batch.a_offsets.push_back(i * stride_a);
    batch.b_offsets.push_back(i * stride_b);
    batch.c_offsets.push_back(i * stride_c);
  }
  return batch;
}

void gemm(const GemmDims& dims, const GemmBatch& batch, const float* a, const float* b, float* c) {
  tiled_gemm(dims, batch, a, b, c);
}

void gemm(const GemmDims& dims, const GemmBatch& batch, const double* a, const double* b,
          double* c) {
  tiled_gemm(dims, batch, a, b, c);
}

}  // namespace ampc::runtime::cpu
