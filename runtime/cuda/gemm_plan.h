// GemmPlan: one cuBLASLt product planned at load (descriptors, layouts, the algorithm) and run
// many times. MatMul and Gemm (runtime/cuda/matmul.cc) run through it; a fused kernel can plan a
// product with a bias and activation epilogue the same way.
#pragma once

#include <cublasLt.h>

#include <memory>
#include <string>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "runtime/backend.h"
#include "runtime/plan.h"

namespace ampc::runtime::cuda {

// What cuBLASLt applies to alpha * op(A) op(B) + beta * C before rounding once into D. The bias
// is a vector of n elements of D's type added to every row of D; GELU is cuBLASLt's (the tanh
// approximation).
enum class GemmEpilogue { kNone, kBias, kReluBias, kGeluBias };

// D[m, n] = op(A)[m, k] op(B)[k, n] (+ beta C[m, n]), row-major and dense: A is stored [m, k] or
// [k, m] (trans_a), B [k, n] or [n, k] (trans_b). `batch` products, A and B advancing by
// stride_a / stride_b elements (0: one matrix for all), C and D by m * n.
struct GemmProblem {
  DType dtype = DType::kF32;  // A, B, C, D and the bias
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool trans_a = false;
  bool trans_b = false;
  int64_t batch = 1;
  int64_t stride_a = 0;
  int64_t stride_b = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  // Bytes every A, B, C, D and bias pointer is a multiple of (the algorithm relies on it).
  int64_t alignment = kBufferAlignment;
};

class GemmPlan {
 public:
  // Descriptors, layouts and the algorithm for `problem` on `exec`'s cuBLASLt handle, within its
  // library workspace. Unimplemented (naming the shapes and dtype) when cuBLASLt has no algorithm.
  static absl::StatusOr<std::unique_ptr<GemmPlan>> create(const GemmProblem& problem,
                                                          const ExecutionContext& exec);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;

  // Queues D = epilogue(alpha * op(A) op(B) + beta * C) on exec's stream. C may be D, and is not
  // read when beta is 0 (then it may be null); `bias` is read by the bias epilogues only.
  absl::Status run(const ExecutionContext& exec, const void* a, const void* b, const void* c,
                   void* d, float alpha, float beta, const void* bias = nullptr) const;

  const GemmProblem& problem() const { return problem_; }
  // "f16 [64,128] x [32,128]^T, batch 4 (strides 8192, 0)": for messages.
  std::string describe() const;

 private:
  GemmPlan() = default;

  GemmProblem problem_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t lt_a_ = nullptr;  // cuBLASLt's A: our B
  cublasLtMatrixLayout_t lt_b_ = nullptr;  // cuBLASLt's B: our A
  cublasLtMatrixLayout_t lt_d_ = nullptr;  // C and D
  cublasLtMatmulPreference_t preference_ = nullptr;
  cublasLtMatmulAlgo_t algo_ = {};
};

}  // namespace ampc::runtime::cuda
