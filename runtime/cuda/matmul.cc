// CUDA kernels of MatMul (numpy.matmul: 1-D operands, broadcast batch dims) and Gemm
// (alpha * A' * B' + beta * C) on cuBLASLt, and GemmPlan, the planned cuBLASLt product they (and
// later fused kernels) run through.
//
// Layout: tensors are row-major and cuBLASLt is column-major, so Y = A B is computed as
// Y^T = B^T A^T: a row-major [r, c] matrix is a column-major [c, r] one, and cuBLASLt's A is our
// B. Every descriptor, layout and the algorithm (cublasLtMatmulAlgoGetHeuristic, once) are made
// at load; a call only launches on the backend's stream.
//
// Numerics (the CPU's contract, runtime/cpu/matmul.cc): f32 accumulation (CUBLAS_COMPUTE_32F,
// f32 scale) for f32, f16 and bf16 operands; f16/bf16 outputs rounded once; split-K partial sums
// of f16/bf16 products kept in f32 (no reduction in the output type). f32 runs without TF32
// unless ExecutionContext::allow_tf32. Gemm's epilogue alpha * p + beta * c runs in f32 inside
// cuBLASLt before the one rounding (beta 0 ignores C, as on the CPU). MatMul batches become one
// strided-batched call where the broadcast batch dims collapse to one (stride 0 for a broadcast
// operand), else one call per outer batch index; a batch that reuses B over consecutive A's is
// one taller product, as on the CPU.
#include <algorithm>
#include <array>
#include <climits>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/gemm_plan.h"
#include "runtime/cuda/pool_kernels.h"
#include "runtime/plan.h"

namespace ampc::runtime::cuda {

// ---- GemmPlan -------------------------------------------------------------------------------

namespace {

bool has_bias(GemmEpilogue epilogue) { return epilogue != GemmEpilogue::kNone; }

cublasLtEpilogue_t lt_epilogue(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <typename V>
absl::Status set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                        V value) {
  return cublas_status(cublasLtMatrixLayoutSetAttribute(layout, attr, &value, sizeof(value)),
                       "cublasLtMatrixLayoutSetAttribute");
}

template <typename V>
absl::Status set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, V value) {
  return cublas_status(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)),
                       "cublasLtMatmulDescSetAttribute");
}

template <typename V>
absl::Status set_preference(cublasLtMatmulPreference_t preference,
                            cublasLtMatmulPreferenceAttributes_t attr, V value) {
  return cublas_status(
      cublasLtMatmulPreferenceSetAttribute(preference, attr, &value, sizeof(value)),
      "cublasLtMatmulPreferenceSetAttribute");
}

// A stored [rows, cols] column-major matrix of `type` (ld = rows), `batch` of them `stride` apart.
absl::Status make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t batch,
                         int64_t stride, cublasLtMatrixLayout_t& out) {
  AMPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&out, type, static_cast<uint64_t>(rows),
                                                         static_cast<uint64_t>(cols), rows));
  if (batch > 1) {
    AMPC_RETURN_IF_ERROR(
        set_layout(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch)));
    AMPC_RETURN_IF_ERROR(set_layout(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride));
  }
  return absl::OkStatus();
}

bool aligned(const void* pointer, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(alignment) == 0;
}

// The largest power of two (at most `cap`) dividing every one of `byte_counts` (0 divides by all).
int64_t common_alignment(std::initializer_list<int64_t> byte_counts, int64_t cap) {
  int64_t alignment = cap;
  for (int64_t bytes : byte_counts) {
    while (bytes % alignment != 0) alignment /= 2;
  }
  return alignment;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmPlan>> GemmPlan::create(const GemmProblem& problem,
                                                           const ExecutionContext& exec) {
  std::unique_ptr<GemmPlan> plan(new GemmPlan());
  plan->problem_ = problem;
  const GemmProblem& p = plan->problem_;
  cudaDataType_t type = CUDA_R_32F;
  switch (p.dtype) {
    case DType::kF32:
      break;
    case DType::kF16:
      type = CUDA_R_16F;
      break;
    case DType::kBF16:
      type = CUDA_R_16BF;
      break;
    default:
      return absl::UnimplementedError(
          str_cat("no cuBLASLt product for ", dtype_name(p.dtype), " operands (f32, f16, bf16)"));
  }
  for (int64_t dim : {p.m, p.n, p.k, p.batch}) {
    if (dim < 1 || dim > INT32_MAX) {
      return absl::UnimplementedError(
          str_cat("cuBLASLt takes dims and batch counts in [1, 2^31): ", plan->describe()));
    }
  }
  // Y^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m], column-major.
  const cublasComputeType_t compute =
      p.dtype == DType::kF32 && exec.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  AMPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc_, compute, CUDA_R_32F));
  AMPC_RETURN_IF_ERROR(set_desc(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSA,
                                static_cast<int32_t>(p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N)));
  AMPC_RETURN_IF_ERROR(set_desc(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSB,
                                static_cast<int32_t>(p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N)));
  if (has_bias(p.epilogue)) {
    AMPC_RETURN_IF_ERROR(set_desc(plan->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                  static_cast<uint32_t>(lt_epilogue(p.epilogue))));
    // The heuristic reads the bias pointer's alignment only; run() sets the real one.
    AMPC_RETURN_IF_ERROR(set_desc(plan->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                  reinterpret_cast<const void*>(p.alignment)));
  }
  AMPC_RETURN_IF_ERROR(make_layout(type, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.batch,
                                   p.stride_b, plan->lt_a_));
  AMPC_RETURN_IF_ERROR(make_layout(type, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.batch,
                                   p.stride_a, plan->lt_b_));
  AMPC_RETURN_IF_ERROR(make_layout(type, p.n, p.m, p.batch, p.m * p.n, plan->lt_d_));

  AMPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&plan->preference_));
  AMPC_RETURN_IF_ERROR(set_preference(plan->preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                      static_cast<uint64_t>(exec.library_workspace_bytes)));
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    AMPC_RETURN_IF_ERROR(
        set_preference(plan->preference_, attr, static_cast<uint32_t>(p.alignment)));
  }
  if (p.dtype != DType::kF32) {  // split-K partial sums in f32, never in f16/bf16
    AMPC_RETURN_IF_ERROR(
        set_preference(plan->preference_, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                       static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE |
                                             CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)));
  }

  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      static_cast<cublasLtHandle_t>(exec.cublaslt), plan->desc_, plan->lt_a_, plan->lt_b_,
      plan->lt_d_, plan->lt_d_, plan->preference_, 1, &result, &found);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError(str_cat(
        "cuBLASLt has no algorithm for ", plan->describe(), " within ",
        exec.library_workspace_bytes, " bytes of workspace (",
        status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(status) : "no result", ")"));
  }
  plan->algo_ = result.algo;
  return plan;
}

GemmPlan::~GemmPlan() {
  if (preference_ != nullptr) cublasLtMatmulPreferenceDestroy(preference_);
  if (lt_d_ != nullptr) cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_b_ != nullptr) cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_ != nullptr) cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

std::string GemmPlan::describe() const {
  const GemmProblem& p = problem_;
  const std::string a =
      p.trans_a ? str_cat("[", p.k, ",", p.m, "]^T") : str_cat("[", p.m, ",", p.k, "]");
  const std::string b =
      p.trans_b ? str_cat("[", p.n, ",", p.k, "]^T") : str_cat("[", p.k, ",", p.n, "]");
  std::string text = str_cat(dtype_name(p.dtype), " ", a, " x ", b);
  if (p.batch > 1) {
    text += str_cat(", batch ", p.batch, " (strides ", p.stride_a, ", ", p.stride_b, ")");
  }
  if (p.epilogue == GemmEpilogue::kBias) text += ", bias epilogue";
  if (p.epilogue == GemmEpilogue::kReluBias) text += ", bias + Relu epilogue";
  if (p.epilogue == GemmEpilogue::kGeluBias) text += ", bias + GELU (tanh) epilogue";
  return text;
}

absl::Status GemmPlan::run(const ExecutionContext& exec, const void* a, const void* b,
                           const void* c, void* d, float alpha, float beta,
                           const void* bias) const {
  if (c == nullptr) c = d;
  for (const void* pointer : {a, b, c, static_cast<const void*>(d)}) {
    if (!aligned(pointer, problem_.alignment)) {
      return absl::InternalError(str_cat("an operand of the cuBLASLt product ", describe(),
                                         " is not aligned to the ", problem_.alignment,
                                         " bytes it was planned for"));
    }
  }
  if (has_bias(problem_.epilogue)) {
    if (bias == nullptr || !aligned(bias, problem_.alignment)) {
      return absl::InternalError(str_cat("the bias of ", describe(), " is missing or unaligned"));
    }
    AMPC_RETURN_IF_ERROR(set_desc(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias));
  }
  AMPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      static_cast<cublasLtHandle_t>(exec.cublaslt), desc_, &alpha, b, lt_a_, a, lt_b_, &beta, c,
      lt_d_, d, lt_d_, &algo_, exec.library_workspace,
      static_cast<size_t>(exec.library_workspace_bytes), static_cast<cudaStream_t>(exec.stream)));
  return absl::OkStatus();
}

namespace {

// ---- MatMul ----------------------------------------------------------------------------------

// A MatMul as calls of one strided-batched product each: the product's geometry, and per call
// the element offsets of its first A, B and Y matrices.
struct MatMulCalls {
  GemmProblem problem;
  std::vector<std::array<int64_t, 3>> offsets;
};

// One batch dim of the output: its size and the element step of A, B and Y along it.
struct BatchDim {
  int64_t size = 1;
  int64_t a = 0;
  int64_t b = 0;
  int64_t y = 0;
};

// The calls of MatMul(A, B) with the CPU's geometry (runtime/cpu/matmul.cc): a 1-D A is a [1, k]
// row, a 1-D B a [k, 1] column, batch dims broadcast. Size-1 batch dims drop and neighbours
// merge where A, B and Y all step evenly across them; the innermost dim folds into M when it
// reuses B over consecutive A's, else becomes the strided batch; each index of the dims left is
// one call.
MatMulCalls matmul_calls(const Shape& a, const Shape& b, DType dtype) {
  const Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  MatMulCalls calls;
  GemmProblem& p = calls.problem;
  p.dtype = dtype;
  p.m = a2[a2.size() - 2];
  p.k = a2[a2.size() - 1];
  p.n = b2[b2.size() - 1];
  const size_t a_rank = a2.size() - 2, b_rank = b2.size() - 2;
  const size_t rank = std::max(a_rank, b_rank);
  std::vector<BatchDim> dims(rank);
  int64_t a_stride = p.m * p.k, b_stride = p.k * p.n;
  for (size_t i = 0; i < rank; ++i) {
    const size_t d = rank - 1 - i;
    const int64_t a_dim = i < a_rank ? a2[a_rank - 1 - i] : 1;
    const int64_t b_dim = i < b_rank ? b2[b_rank - 1 - i] : 1;
    dims[d] = {std::max(a_dim, b_dim), a_dim == 1 ? 0 : a_stride, b_dim == 1 ? 0 : b_stride, 0};
    a_stride *= a_dim;
    b_stride *= b_dim;
  }
  int64_t y_stride = p.m * p.n;
  for (size_t d = rank; d-- > 0;) {
    dims[d].y = y_stride;
    y_stride *= dims[d].size;
  }
  std::vector<BatchDim> merged;
  for (const BatchDim& dim : dims) {
    if (dim.size == 1) continue;
    if (!merged.empty()) {
      BatchDim& outer = merged.back();
      if (outer.a == dim.a * dim.size && outer.b == dim.b * dim.size &&
          outer.y == dim.y * dim.size) {
        outer = {outer.size * dim.size, dim.a, dim.b, dim.y};
        continue;
      }
    }
    merged.push_back(dim);
  }
  if (!merged.empty() && merged.back().b == 0 && merged.back().a == p.m * p.k) {
    p.m *= merged.back().size;  // [size * m, k] x [k, n]: the same sums in one taller product
    merged.pop_back();
  }
  if (!merged.empty()) {
    p.batch = merged.back().size;
    p.stride_a = merged.back().a;
    p.stride_b = merged.back().b;
    merged.pop_back();
  }
  int64_t count = 1;
  for (const BatchDim& dim : merged) count *= dim.size;
  std::vector<int64_t> index(merged.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    std::array<int64_t, 3> offsets = {0, 0, 0};
    for (size_t d = 0; d < merged.size(); ++d) {
      offsets[0] += index[d] * merged[d].a;
      offsets[1] += index[d] * merged[d].b;
      offsets[2] += index[d] * merged[d].y;
    }
    calls.offsets.push_back(offsets);
    for (size_t d = merged.size(); d-- > 0;) {
      if (++index[d] < merged[d].size) break;
      index[d] = 0;
    }
  }
  // Every call's matrices must keep the alignment the plan promises cuBLASLt.
  const int64_t bytes = dtype_size(dtype);
  const int64_t y_step = p.batch > 1 ? p.m * p.n * bytes : 0;
  p.alignment =
      common_alignment({p.stride_a * bytes, p.stride_b * bytes, y_step}, kBufferAlignment);
  for (const std::array<int64_t, 3>& offsets : calls.offsets) {
    p.alignment =
        common_alignment({offsets[0] * bytes, offsets[1] * bytes, offsets[2] * bytes}, p.alignment);
  }
  return calls;
}

struct MatMulState : KernelState {
  std::unique_ptr<GemmPlan> plan;  // null when there is nothing to multiply
  bool zero_fill = false;          // K = 0: Y is zeros
  std::vector<std::array<int64_t, 3>> offsets;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_matmul(const KernelContext& ctx) {
  auto state = std::make_unique<MatMulState>();
  if (ctx.output(0).num_elements() == 0) return state;
  MatMulCalls calls =
      matmul_calls(ctx.input(0).shape(), ctx.input(1).shape(), ctx.input(0).dtype());
  if (calls.problem.k == 0) {
    state->zero_fill = true;
    return state;
  }
  AMPC_ASSIGN_OR_RETURN(state->plan, GemmPlan::create(calls.problem, *ctx.exec));
  state->offsets = std::move(calls.offsets);
  return state;
}

absl::Status matmul(const KernelContext& ctx) {
  const auto& state = static_cast<const MatMulState&>(*ctx.state);
  if (state.zero_fill) {
    return cuda_status(
        cudaMemsetAsync(ctx.output(0).data, 0, ctx.output(0).byte_size(), stream_of(ctx)),
        "cudaMemsetAsync for MatMul with K = 0");
  }
  if (state.plan == nullptr) return absl::OkStatus();
  const int64_t bytes = dtype_size(ctx.input(0).dtype());
  const auto* a = static_cast<const std::byte*>(ctx.input(0).data);
  const auto* b = static_cast<const std::byte*>(ctx.input(1).data);
  auto* y = static_cast<std::byte*>(ctx.output(0).data);
  for (const std::array<int64_t, 3>& offsets : state.offsets) {
    AMPC_RETURN_IF_ERROR(state.plan->run(*ctx.exec, a + offsets[0] * bytes, b + offsets[1] * bytes,
                                         nullptr, y + offsets[2] * bytes, 1.0f, 0.0f));
  }
  return absl::OkStatus();
}

// ---- Gemm ------------------------------------------------------------------------------------

// How C reaches the product (C is used when present and beta is not 0).
enum class GemmC {
  kNone,
  kDirect,  // C has Y's [M, N] layout: cuBLASLt reads it as its C
  kBias,    // a row [N] with beta 1: the bias epilogue
  kCopied,  // any other broadcast: copied into Y first, which cuBLASLt reads as its C
};

struct GemmState : KernelState {
  std::unique_ptr<GemmPlan> plan;  // null when Y is empty
  GemmC c_mode = GemmC::kNone;
  float alpha = 1.0f;
  float beta = 0.0f;
  // kCopied: C's element strides along Y's rows and columns (0 where it broadcasts).
  int64_t c_row_stride = 0;
  int64_t c_col_stride = 0;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_gemm(const KernelContext& ctx) {
  const Node& node = ctx.node;
  const Shape& a = ctx.input(0).shape();
  const Shape& b = ctx.input(1).shape();
  GemmProblem p;
  p.dtype = ctx.input(0).dtype();
  p.trans_a = node.int_attr("transA") != 0;
  p.trans_b = node.int_attr("transB") != 0;
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  p.n = p.trans_b ? b[0] : b[1];
  auto state = std::make_unique<GemmState>();
  state->alpha = node.float_attr("alpha");
  const float beta = node.float_attr("beta");
  if (p.m * p.n == 0) return state;
  if (p.k == 0) {
    return absl::UnimplementedError(str_cat("the cuda Gemm kernel does not take K = 0 (A ",
                                            shape_to_string(a), ", B ", shape_to_string(b), ")"));
  }
  if (ctx.has_input(2) && beta != 0) {  // beta 0 ignores C, inf and NaN too
    const Shape& c = ctx.input(2).shape();
    const int64_t rows = c.size() == 2 ? c[0] : 1;
    const int64_t cols = c.empty() ? 1 : c.back();
    state->c_row_stride = rows == 1 ? 0 : cols;
    state->c_col_stride = cols == 1 ? 0 : 1;
    state->beta = beta;
    if (num_elements(c) == p.m * p.n) {
      state->c_mode = GemmC::kDirect;
    } else if (state->c_row_stride == 0 && state->c_col_stride == 1 && beta == 1.0f) {
      state->c_mode = GemmC::kBias;
      state->beta = 0.0f;
      p.epilogue = GemmEpilogue::kBias;
    } else {
      state->c_mode = GemmC::kCopied;
    }
  }
  AMPC_ASSIGN_OR_RETURN(state->plan, GemmPlan::create(p, *ctx.exec));
  return state;
}

absl::Status gemm(const KernelContext& ctx) {
  const auto& state = static_cast<const GemmState&>(*ctx.state);
  if (state.plan == nullptr) return absl::OkStatus();
  const GemmProblem& p = state.plan->problem();
  const void* a = ctx.input(0).data;
  const void* b = ctx.input(1).data;
  void* y = ctx.output(0).data;
  switch (state.c_mode) {
    case GemmC::kNone:
      return state.plan->run(*ctx.exec, a, b, nullptr, y, state.alpha, 0.0f);
    case GemmC::kDirect:
      return state.plan->run(*ctx.exec, a, b, ctx.input(2).data, y, state.alpha, state.beta);
    case GemmC::kBias:
      return state.plan->run(*ctx.exec, a, b, nullptr, y, state.alpha, 0.0f, ctx.input(2).data);
    case GemmC::kCopied:
      AMPC_RETURN_IF_ERROR(cuda_status(
          launch_broadcast_matrix_copy(dtype_size(p.dtype), ctx.input(2).data, y, p.m, p.n,
                                       state.c_row_stride, state.c_col_stride, stream_of(ctx)),
          "launching the Gemm C broadcast kernel"));
      return state.plan->run(*ctx.exec, a, b, y, y, state.alpha, state.beta);
  }
  return absl::OkStatus();
}

void register_cuda_matmul_kernels(KernelRegistry& r) {
  KernelDef matmul_def = cuda_kernel_def("MatMul", kCudaFloatTypes, &matmul);
  matmul_def.init = &init_matmul;
  r.add(std::move(matmul_def));
  KernelDef gemm_def = cuda_kernel_def("Gemm", kCudaFloatTypes, &gemm);
  gemm_def.init = &init_gemm;
  r.add(std::move(gemm_def));
}

static KernelRegistration kCudaMatmulKernels(&register_cuda_matmul_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
