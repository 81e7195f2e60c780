// MatMul (numpy.matmul: 1-D operands, broadcast batch dims) and Gemm (alpha * A' * B' + beta * C).
//
// Accumulation contract:
// - f32: the f32 GEMM core (runtime/cpu/gemm_core.h: oneDNN sgemm, single-threaded per fixed
//   output tile, so the order does not depend on the thread count).
// - f16/bf16: inputs upcast exactly to f32, product accumulated by the f32 GEMM core (oneDNN
//   sgemm, fixed blocking order), rounded once.
// - f64: the same core over OpenBLAS dgemm.
// - i32/i64: exact integer sums that wrap around on overflow, as numpy's do.
// Gemm's epilogue runs in the compute type on the accumulated product p, in this order:
// y = alpha * p, then y = y + beta * c when C is present and beta is not 0 (a zero beta ignores
// C, infinities and NaNs included, as the ONNX reference and PyTorch's addmm do); f16/bf16
// round y once at the end.
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"

namespace ampc::runtime::cpu {
namespace {

// ---- MatMul ---------------------------------------------------------------------------------

// A MatMul as a batch of [m, k] x [k, n] products: a 1-D A is a [1, k] row, a 1-D B a [k, 1]
// column, and the output's batch dims are the broadcast of the operands' batch dims.
struct MatMulGeometry {
  GemmDims dims;
  GemmBatch batch;
};

MatMulGeometry matmul_geometry(const Shape& a, const Shape& b) {
  const Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  MatMulGeometry g;
  g.dims.m = a2[a2.size() - 2];
  g.dims.k = a2[a2.size() - 1];
  g.dims.n = b2[b2.size() - 1];
  const size_t a_rank = a2.size() - 2, b_rank = b2.size() - 2;
  const size_t rank = std::max(a_rank, b_rank);
  // Per output batch dim (right-aligned): its size and each operand's element stride (0 where
  // the operand broadcasts along it).
  std::vector<int64_t> sizes(rank, 1), a_strides(rank, 0), b_strides(rank, 0);
  int64_t a_stride = g.dims.m * g.dims.k, b_stride = g.dims.k * g.dims.n;
  for (size_t i = 0; i < rank; ++i) {
    const size_t d = rank - 1 - i;
    const int64_t a_dim = i < a_rank ? a2[a_rank - 1 - i] : 1;
    const int64_t b_dim = i < b_rank ? b2[b_rank - 1 - i] : 1;
    sizes[d] = std::max(a_dim, b_dim);
    a_strides[d] = a_dim == 1 ? 0 : a_stride;
    b_strides[d] = b_dim == 1 ? 0 : b_stride;
    a_stride *= a_dim;
    b_stride *= b_dim;
  }
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  std::vector<int64_t> index(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t a_offset = 0, b_offset = 0;
    for (size_t d = 0; d < rank; ++d) {
      a_offset += index[d] * a_strides[d];
      b_offset += index[d] * b_strides[d];
    }
    g.batch.a_offsets.push_back(a_offset);
    g.batch.b_offsets.push_back(b_offset);
    g.batch.c_offsets.push_back(i * g.dims.m * g.dims.n);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return g;
}

// When every product reads the same B and consecutive A's, the batch is one [count*m, k] x
// [k, n] product: the same sums in fewer, larger calls.
void fold_batch_into_rows(MatMulGeometry& g) {
  const int64_t count = g.batch.size();
  if (count <= 1) return;
  for (int64_t i = 0; i < count; ++i) {
    if (g.batch.b_offsets[i] != g.batch.b_offsets[0] ||
        g.batch.a_offsets[i] != i * g.dims.m * g.dims.k) {
      return;
    }
  }
  g.dims.m *= count;
  g.batch = GemmBatch::strided(1, 0, 0, 0);  // B's offsets were all equal, so all 0
}

MatMulGeometry matmul_geometry(const Node& node) {
  MatMulGeometry g = matmul_geometry(node.operand(0)->shape(), node.operand(1)->shape());
  fold_batch_into_rows(g);
  return g;
}

// f16/bf16 only: A and B staged in f32 and the f32 product (f32 and f64 use the tensors).
int64_t matmul_workspace(const Node& node) {
  const DType dtype = node.operand(0)->dtype();
  if (dtype != DType::kF16 && dtype != DType::kBF16) return 0;
  return WorkspaceCarver::bytes_for<float>(node.operand(0)->type().num_elements()) +
         WorkspaceCarver::bytes_for<float>(node.operand(1)->type().num_elements()) +
         WorkspaceCarver::bytes_for<float>(node.output(0)->type().num_elements());
}

template <typename T>
absl::Status matmul(const KernelContext& ctx) {
  const MatMulGeometry g = matmul_geometry(ctx.node);
  std::span<T> y = ctx.output(0).out<T>();
  WorkspaceCarver carver(ctx.workspace);
  const gemm_t<T>* a = staged_operand(ctx.input(0).in<T>(), carver);
  const gemm_t<T>* b = staged_operand(ctx.input(1).in<T>(), carver);
  if constexpr (needs_staging_v<T>) {
    std::span<float> product = carver.take<float>(static_cast<int64_t>(y.size()));
    gemm(g.dims, g.batch, a, b, product.data());
    round_into(product.data(), y);
  } else {
    gemm(g.dims, g.batch, a, b, y.data());
  }
  return absl::OkStatus();
}

// Integer products: exact, wrapping on overflow (unsigned arithmetic has no undefined overflow).
template <typename T>
T wrapping_dot(const T* a, int64_t a_step, const T* b, int64_t b_step, int64_t k) {
  using U = std::make_unsigned_t<T>;
  U sum = 0;
  for (int64_t p = 0; p < k; ++p) {
    sum += static_cast<U>(a[p * a_step]) * static_cast<U>(b[p * b_step]);
  }
  return static_cast<T>(sum);
}

// C_i = op(A_i) * op(B_i) over integers, one output row per parallel index.
template <typename T>
void integer_gemm(const GemmDims& d, const GemmBatch& batch, const T* a, const T* b, T* c) {
  const int64_t a_row = d.trans_a ? 1 : d.k, a_step = d.trans_a ? d.m : 1;
  const int64_t b_col = d.trans_b ? d.k : 1, b_step = d.trans_b ? 1 : d.n;
  parallel_for(batch.size() * d.m, std::max<int64_t>(1, 4096 / (d.n * d.k + 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t i = r / d.m, row = r % d.m;
                   const T* a_i = a + batch.a_offsets[i] + row * a_row;
                   T* c_row = c + batch.c_offsets[i] + row * d.n;
                   for (int64_t col = 0; col < d.n; ++col) {
                     c_row[col] = wrapping_dot(a_i, a_step, b + batch.b_offsets[i] + col * b_col,
                                               b_step, d.k);
                   }
                 }
               });
}

template <typename T>
absl::Status integer_matmul(const KernelContext& ctx) {
  const MatMulGeometry g = matmul_geometry(ctx.node);
  integer_gemm(g.dims, g.batch, ctx.input(0).in<T>().data(), ctx.input(1).in<T>().data(),
               ctx.output(0).out<T>().data());
  return absl::OkStatus();
}

// ---- Gemm -----------------------------------------------------------------------------------

GemmDims gemm_dims(const Node& node) {
  const Shape& a = node.operand(0)->shape();
  const Shape& b = node.operand(1)->shape();
  GemmDims d;
  d.trans_a = node.int_attr("transA") != 0;
  d.trans_b = node.int_attr("transB") != 0;
  d.m = d.trans_a ? a[1] : a[0];
  d.k = d.trans_a ? a[0] : a[1];
  d.n = d.trans_b ? b[0] : b[1];
  return d;
}

// Element strides of C along the rows and columns of [M, N] (0 where C broadcasts).
struct BiasStrides {
  int64_t row = 0;
  int64_t col = 0;
};

BiasStrides bias_strides(const Shape& c) {
  const int64_t rows = c.size() == 2 ? c[0] : 1;
  const int64_t cols = c.empty() ? 1 : c.back();
  return {rows == 1 ? 0 : cols, cols == 1 ? 0 : 1};
}

int64_t gemm_workspace(const Node& node) {
  return matmul_workspace(node);  // staged A, staged B, f32 product: the same three buffers
}

template <typename T>
absl::Status gemm_kernel(const KernelContext& ctx) {
  using C = gemm_t<T>;
  const GemmDims d = gemm_dims(ctx.node);
  const C alpha = static_cast<C>(ctx.node.float_attr("alpha"));
  const C beta = static_cast<C>(ctx.node.float_attr("beta"));
  std::span<T> y = ctx.output(0).out<T>();
  WorkspaceCarver carver(ctx.workspace);
  const C* a = staged_operand(ctx.input(0).in<T>(), carver);
  const C* b = staged_operand(ctx.input(1).in<T>(), carver);
  C* product = nullptr;
  if constexpr (needs_staging_v<T>) {
    product = carver.take<float>(d.m * d.n).data();
  } else {
    product = y.data();
  }
  gemm(d, GemmBatch::strided(1, 0, 0, 0), a, b, product);

  const bool has_c = ctx.has_input(2) && beta != 0;  // beta 0 ignores C, inf and NaN too
  const T* c = has_c ? ctx.input(2).in<T>().data() : nullptr;
  const BiasStrides s = has_c ? bias_strides(ctx.input(2).shape()) : BiasStrides{};
  const int64_t grain = std::max<int64_t>(1, 16384 / (d.n + 1));
  if constexpr (!needs_staging_v<T>) {
    // The common case, nn.Linear's: alpha = beta = 1 (both products exact) and C a row of
    // biases or absent. The product is already Y; the bias is added by a loop that vectorizes.
    if (alpha == 1 && !has_c) return absl::OkStatus();
    if (alpha == 1 && beta == 1 && s.col == 1) {
      parallel_for(d.m, grain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const T* bias = c + i * s.row;
          T* row = y.data() + i * d.n;
#pragma omp simd
          for (int64_t j = 0; j < d.n; ++j) row[j] += bias[j];
        }
      });
      return absl::OkStatus();
    }
  }
  parallel_for(d.m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        C value = alpha * product[i * d.n + j];
        if (has_c) value = value + beta * load(c[i * s.row + j * s.col]);
        y[i * d.n + j] = store<T>(value);
      }
    }
  });
  return absl::OkStatus();
}

// Integer Gemm follows the ONNX reference: the exact product, then alpha and beta applied in
// f64 and the result truncated toward zero (saturating at the type's range).
template <typename T>
absl::Status integer_gemm_kernel(const KernelContext& ctx) {
  const GemmDims d = gemm_dims(ctx.node);
  const double alpha = ctx.node.float_attr("alpha");
  const double beta = ctx.node.float_attr("beta");
  std::span<T> y = ctx.output(0).out<T>();
  integer_gemm(d, GemmBatch::strided(1, 0, 0, 0), ctx.input(0).in<T>().data(),
               ctx.input(1).in<T>().data(), y.data());
  const bool has_c = ctx.has_input(2) && beta != 0;  // beta 0 ignores C, inf and NaN too
  const T* c = has_c ? ctx.input(2).in<T>().data() : nullptr;
  const BiasStrides s = has_c ? bias_strides(ctx.input(2).shape()) : BiasStrides{};
  if (alpha == 1.0 && (!has_c || beta == 1.0)) {  // stay exact in integers
    if (!has_c) return absl::OkStatus();
    using U = std::make_unsigned_t<T>;
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        T& out = y[i * d.n + j];
        out = static_cast<T>(static_cast<U>(out) + static_cast<U>(c[i * s.row + j * s.col]));
      }
    }
    return absl::OkStatus();
  }
  constexpr double kLow = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHigh = static_cast<double>(std::numeric_limits<T>::max());
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) {
      T& out = y[i * d.n + j];
      double value = static_cast<double>(out) * alpha;
      if (has_c) value += static_cast<double>(c[i * s.row + j * s.col]) * beta;
      out = value <= kLow    ? std::numeric_limits<T>::min()
            : value >= kHigh ? std::numeric_limits<T>::max()
                             : static_cast<T>(value);
    }
  }
  return absl::OkStatus();
}

void register_matmul_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("MatMul", {.workspace_bytes = &matmul_workspace}),
      []<typename T>() { return &matmul<T>; });
  add_kernels<int64_t, int32_t>(r, kernel_def("MatMul"),
                                []<typename T>() { return &integer_matmul<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("Gemm", {.workspace_bytes = &gemm_workspace}),
      []<typename T>() { return &gemm_kernel<T>; });
  add_kernels<int64_t, int32_t>(r, kernel_def("Gemm"),
                                []<typename T>() { return &integer_gemm_kernel<T>; });
}

static KernelRegistration kMatmulKernels(&register_matmul_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
