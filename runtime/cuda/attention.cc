// CUDA kernels of ampc.Attention and ampc.AttentionGrad (ops/attention.cc): the parameters,
// read at load from the shapes and attributes as runtime/cpu/attention.cc reads them.
//
// Three ways to run them, chosen by AMPC_CUDA_ATTENTION (attention_path.h):
// - cuDNN's fused flash attention (`cudnn`, `cudnn-only`; cudnn_attention.h), for f16 and bf16
//   where cuDNN has an engine for the shapes, the mask (if any) is bool or of the operands' type
//   (for the backward, a constant with no large finite fill), and the node is not `safe` with a
//   mask that may leave a row no key (cuDNN gives such a row NaN, not 0); see plan_cudnn_path
//   for the rest. Kt is transposed into K [.., S, D] (cuDNN wants the head dim contiguous) and
//   the mask made an additive bias of the I/O type (0 / -inf for a bool mask) in the workspace,
//   unless it is a constant causal mask, which cuDNN's causal mode stands for (skipping the tiles
//   above the diagonal); the backward transposes cuDNN's dK back into dKt. cuDNN rounds the
//   probabilities to the I/O type before the product with V (and dS before the products with K
//   and Q), so it agrees with the other two within a few units of that type.
// - The GEMM path (`gemm`, and `cudnn` where cuDNN does not apply), for a batch entry whose f32
//   scores fit the budget below: the batch entries in chunks, per chunk S = scale Q Kt on
//   cuBLASLt into the workspace, the row-wise steps (mask, softmax, LSE; backward: the
//   probabilities again from the LSE, dS) as kernels, and the products with P and dS on cuBLASLt:
//   Y = P V; dV = P^T dY, dP = dY V^T, dQ = scale dS Kt^T, dKt = scale Q^T dS. Every product is
//   f32 with f32 accumulation (TF32 only where ExecutionContext::allow_tf32 says so); f16 and bf16
//   operands are widened into the workspace first (exactly) and the results rounded once into the
//   outputs.
// - Else the row kernels of attention_kernels.cu, which hold one row in shared memory and never
//   the T x S matrix, but run on the CUDA cores only: on an H200, GPT-2-124M's attention backward
//   (8 x 12 heads, T = 1024, bf16) took 84 ms a layer on them (docs/benchmarks.md).
// The row kernels stay the default until the other two have passed the gpu tests on a GPU
// (docs/device-runs/README.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "compiler/strings.h"
#include "runtime/cuda/attention_kernels.h"
#include "runtime/cuda/attention_path.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/data_movement_kernels.h"
#include "runtime/cuda/gemm_plan.h"
#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {
namespace {

// The f32 scratch the GEMM path takes for one chunk of batch entries, at most (a batch entry
// that alone needs more than kGemmEntryBytes runs on the row kernels).
inline constexpr int64_t kGemmChunkBytes = int64_t{256} << 20;
inline constexpr int64_t kGemmEntryBytes = int64_t{1} << 30;
// The most workspace cuDNN's fused attention may take for one node.
inline constexpr int64_t kCudnnWorkspaceBytes = int64_t{1} << 30;

// Where the GEMM path keeps a chunk's f32 values in the workspace (offsets in floats; -1: not
// kept, the operand read or the output written in place as f32).
struct GemmLayout {
  int64_t scores = 0, dprobs = -1, delta = -1;
  int64_t q = -1, kt = -1, v = -1, dy = -1;    // widened operands
  int64_t y = -1, dq = -1, dkt = -1, dv = -1;  // results before rounding
};

// The products of one chunk size.
struct GemmPlans {
  std::unique_ptr<GemmPlan> scores, values, dprobs, dvalues, dqueries, dkeys;
};

// The cuDNN path's graph and where its scratch lies in the workspace (byte offsets).
struct CudnnPath {
  std::shared_ptr<const CudnnAttention> graph;
  int64_t heads = 1;               // the last batch dim (cuDNN's h; b is the rest)
  int64_t bias_b = 0, bias_h = 0;  // the bias's extents; 0: no mask, or a causal one
  int64_t k = 0, bias = 0, dk = 0, library = 0;
};

struct AttentionState : KernelState {
  AttentionParams params;
  CudnnPath cudnn;    // the cuDNN path, when cudnn.graph is set
  bool gemm = false;  // the GEMM path
  DType dtype = DType::kF32;
  int64_t chunk = 0;  // batch entries per chunk
  GemmLayout layout;
  // [0] for full chunks, [1] for the last one when it is shorter.
  std::array<GemmPlans, 2> plans;
};

// The largest power of two up to 256 dividing every one of `bytes`.
int64_t common_alignment(std::initializer_list<int64_t> bytes) {
  int64_t alignment = 256;
  for (const int64_t b : bytes) {
    while (alignment > 1 && b % alignment != 0) alignment /= 2;
  }
  return alignment;
}

// The GEMM path's plans and workspace for `state` (`grad`: AttentionGrad's), when it applies.
absl::Status plan_gemm_path(const KernelContext& ctx, bool grad, AttentionState& state) {
  const AttentionParams& p = state.params;
  const bool widen = state.dtype != DType::kF32;
  const int64_t entry_floats =
      p.t * p.s * (grad ? 2 : 1) + (grad ? p.t : 0) +
      (widen ? p.t * p.d + p.d * p.s + p.s * p.dv + p.t * p.dv + (grad ? p.t * p.dv : 0) : 0) +
      (widen && grad ? p.t * p.d + p.d * p.s + p.s * p.dv : 0);
  if (p.t == 0 || p.s == 0 || p.d == 0 || p.dv == 0 ||
      entry_floats * static_cast<int64_t>(sizeof(float)) > kGemmEntryBytes) {
    return absl::OkStatus();
  }
  state.chunk = std::clamp<int64_t>(
      kGemmChunkBytes / (entry_floats * static_cast<int64_t>(sizeof(float))), 1, p.batch);
  const int64_t c = state.chunk;
  GemmLayout& l = state.layout;
  int64_t next = 0;
  const auto take = [&](int64_t floats) {
    const int64_t at = next;
    next += (floats + 63) / 64 * 64;  // 256-byte aligned
    return at;
  };
  l.scores = take(c * p.t * p.s);
  if (grad) {
    l.dprobs = take(c * p.t * p.s);
    l.delta = take(c * p.t);
  }
  if (widen) {
    l.q = take(c * p.t * p.d);
    l.kt = take(c * p.d * p.s);
    l.v = take(c * p.s * p.dv);
    if (grad) {
      l.dy = take(c * p.t * p.dv);
      l.dq = take(c * p.t * p.d);
      l.dkt = take(c * p.d * p.s);
      l.dv = take(c * p.s * p.dv);
    } else {
      l.y = take(c * p.t * p.dv);
    }
  }
  state.workspace_bytes = next * static_cast<int64_t>(sizeof(float));
  // Operands and results at chunk offsets of the tensors themselves where no copy is made.
  const int64_t f = sizeof(float);
  const int64_t alignment = common_alignment(
      {c * p.t * p.d * f, c * p.d * p.s * f, c * p.s * p.dv * f, c * p.t * p.dv * f, p.t * p.d * f,
       p.d * p.s * f, p.s * p.dv * f, p.t * p.dv * f, p.t * p.s * f});
  const auto plan = [&](int64_t batch, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                        int64_t stride_a, int64_t stride_b,
                        std::unique_ptr<GemmPlan>& out) -> absl::Status {
    const GemmProblem problem{.dtype = DType::kF32,
                              .m = m,
                              .n = n,
                              .k = k,
                              .trans_a = trans_a,
                              .trans_b = trans_b,
                              .batch = batch,
                              .stride_a = stride_a,
                              .stride_b = stride_b,
                              .alignment = alignment};
    AMPC_ASSIGN_OR_RETURN(out, GemmPlan::create(problem, *ctx.exec));
    return absl::OkStatus();
  };
  const int64_t last = p.batch % c;
  const absl::Status planned = [&]() -> absl::Status {
    for (int which = 0; which < (last == 0 ? 1 : 2); ++which) {
      const int64_t b = which == 0 ? c : last;
      GemmPlans& g = state.plans[which];
      // S [t, s] = Q [t, d] Kt [d, s].
      AMPC_RETURN_IF_ERROR(plan(b, p.t, p.s, p.d, false, false, p.t * p.d, p.d * p.s, g.scores));
      if (!grad) {
        // Y [t, dv] = P [t, s] V [s, dv].
        AMPC_RETURN_IF_ERROR(
            plan(b, p.t, p.dv, p.s, false, false, p.t * p.s, p.s * p.dv, g.values));
        continue;
      }
      // dP [t, s] = dY [t, dv] V^T (V stored [s, dv]).
      AMPC_RETURN_IF_ERROR(plan(b, p.t, p.s, p.dv, false, true, p.t * p.dv, p.s * p.dv, g.dprobs));
      // dV [s, dv] = P^T (P stored [t, s]) dY [t, dv].
      AMPC_RETURN_IF_ERROR(plan(b, p.s, p.dv, p.t, true, false, p.t * p.s, p.t * p.dv, g.dvalues));
      // dQ [t, d] = dS [t, s] Kt^T (Kt stored [d, s]).
      AMPC_RETURN_IF_ERROR(plan(b, p.t, p.d, p.s, false, true, p.t * p.s, p.d * p.s, g.dqueries));
      // dKt [d, s] = Q^T (Q stored [t, d]) dS [t, s].
      AMPC_RETURN_IF_ERROR(plan(b, p.d, p.s, p.t, true, false, p.t * p.d, p.t * p.s, g.dkeys));
    }
    return absl::OkStatus();
  }();
  if (!planned.ok()) {  // no cuBLASLt algorithm for a product: the row kernels instead
    state.plans = {};
    state.workspace_bytes = 0;
    return absl::OkStatus();
  }
  state.gemm = true;
  return absl::OkStatus();
}

// A chunk's operand as f32: `data` of `type` at element `offset` itself when f32, else widened
// into the workspace at `at` (floats).
absl::StatusOr<const float*> widened(const void* data, DType type, int64_t offset, int64_t n,
                                     float* workspace, int64_t at, cudaStream_t stream) {
  const int64_t bytes = dtype_size(type);
  const auto* from = static_cast<const std::byte*>(data) + offset * bytes;
  if (type == DType::kF32) return reinterpret_cast<const float*>(from);
  const cudaError_t code =
      launch_cast(*elem_of(type), Elem::kF32, from, workspace + at, n, false, stream);
  if (code != cudaSuccess) return cuda_status(code, "widening an attention operand to f32");
  return workspace + at;
}

// Where a chunk's f32 result goes: the output itself at element `offset` when f32, else the
// workspace at `at` (rounded into the output by rounded()).
float* result(void* data, DType type, int64_t offset, float* workspace, int64_t at) {
  if (type == DType::kF32) return static_cast<float*>(data) + offset;
  return workspace + at;
}

absl::Status rounded(const float* values, void* data, DType type, int64_t offset, int64_t n,
                     cudaStream_t stream) {
  if (type == DType::kF32) return absl::OkStatus();
  auto* to = static_cast<std::byte*>(data) + offset * dtype_size(type);
  return cuda_status(launch_cast(Elem::kF32, *elem_of(type), values, to, n, false, stream),
                     "rounding an attention result from f32");
}

absl::Status attention_gemm(const KernelContext& ctx, const AttentionState& state) {
  const AttentionParams& p = state.params;
  const GemmLayout& l = state.layout;
  const DType type = state.dtype;
  const cudaStream_t stream = stream_of(ctx);
  auto* ws = reinterpret_cast<float*>(ctx.workspace.data());
  const void* mask = ctx.has_input(3) ? ctx.input(3).data : nullptr;
  float* lse = ctx.has_output(1) ? static_cast<float*>(ctx.output(1).data) : nullptr;
  for (int64_t first = 0; first < p.batch; first += state.chunk) {
    const int64_t c = std::min(state.chunk, p.batch - first);
    const GemmPlans& g = state.plans[c == state.chunk ? 0 : 1];
    AMPC_ASSIGN_OR_RETURN(const float* q, widened(ctx.input(0).data, type, first * p.t * p.d,
                                                  c * p.t * p.d, ws, l.q, stream));
    AMPC_ASSIGN_OR_RETURN(const float* kt, widened(ctx.input(1).data, type, first * p.d * p.s,
                                                   c * p.d * p.s, ws, l.kt, stream));
    AMPC_ASSIGN_OR_RETURN(const float* v, widened(ctx.input(2).data, type, first * p.s * p.dv,
                                                  c * p.s * p.dv, ws, l.v, stream));
    float* scores = ws + l.scores;
    AMPC_RETURN_IF_ERROR(g.scores->run(*ctx.exec, q, kt, nullptr, scores, p.scale, 0));
    AMPC_RETURN_IF_ERROR(
        launched(launch_attention_probs(scores, mask, lse == nullptr ? nullptr : lse + first * p.t,
                                        first, c * p.t, p, stream),
                 ctx));
    float* y = result(ctx.output(0).data, type, first * p.t * p.dv, ws, l.y);
    AMPC_RETURN_IF_ERROR(g.values->run(*ctx.exec, scores, v, nullptr, y, 1, 0));
    AMPC_RETURN_IF_ERROR(
        rounded(y, ctx.output(0).data, type, first * p.t * p.dv, c * p.t * p.dv, stream));
  }
  return absl::OkStatus();
}

absl::Status attention_grad_gemm(const KernelContext& ctx, const AttentionState& state) {
  const AttentionParams& p = state.params;
  const GemmLayout& l = state.layout;
  const DType type = state.dtype;
  const cudaStream_t stream = stream_of(ctx);
  auto* ws = reinterpret_cast<float*>(ctx.workspace.data());
  const void* mask = ctx.has_input(6) ? ctx.input(6).data : nullptr;
  const auto* lse = static_cast<const float*>(ctx.input(5).data);
  const int64_t bytes = dtype_size(type);
  for (int64_t first = 0; first < p.batch; first += state.chunk) {
    const int64_t c = std::min(state.chunk, p.batch - first);
    const GemmPlans& g = state.plans[c == state.chunk ? 0 : 1];
    const int64_t row0 = first * p.t;
    AMPC_ASSIGN_OR_RETURN(const float* dy, widened(ctx.input(0).data, type, row0 * p.dv,
                                                   c * p.t * p.dv, ws, l.dy, stream));
    AMPC_ASSIGN_OR_RETURN(const float* q, widened(ctx.input(1).data, type, row0 * p.d,
                                                  c * p.t * p.d, ws, l.q, stream));
    AMPC_ASSIGN_OR_RETURN(const float* kt, widened(ctx.input(2).data, type, first * p.d * p.s,
                                                   c * p.d * p.s, ws, l.kt, stream));
    AMPC_ASSIGN_OR_RETURN(const float* v, widened(ctx.input(3).data, type, first * p.s * p.dv,
                                                  c * p.s * p.dv, ws, l.v, stream));
    float* probs = ws + l.scores;
    float* dprobs = ws + l.dprobs;
    float* delta = ws + l.delta;
    AMPC_RETURN_IF_ERROR(g.scores->run(*ctx.exec, q, kt, nullptr, probs, p.scale, 0));
    AMPC_RETURN_IF_ERROR(
        launched(launch_attention_grad_probs(
                     elem(ctx.input(0)), probs, mask, lse + row0,
                     static_cast<const std::byte*>(ctx.input(0).data) + row0 * p.dv * bytes,
                     static_cast<const std::byte*>(ctx.input(4).data) + row0 * p.dv * bytes, delta,
                     first, c * p.t, p, stream),
                 ctx));
    float* dv = result(ctx.output(2).data, type, first * p.s * p.dv, ws, l.dv);
    AMPC_RETURN_IF_ERROR(g.dvalues->run(*ctx.exec, probs, dy, nullptr, dv, 1, 0));
    AMPC_RETURN_IF_ERROR(g.dprobs->run(*ctx.exec, dy, v, nullptr, dprobs, 1, 0));
    AMPC_RETURN_IF_ERROR(
        launched(launch_attention_grad_scores(probs, dprobs, delta, c * p.t, p.s, stream), ctx));
    float* dq = result(ctx.output(0).data, type, row0 * p.d, ws, l.dq);
    AMPC_RETURN_IF_ERROR(g.dqueries->run(*ctx.exec, dprobs, kt, nullptr, dq, p.scale, 0));
    float* dkt = result(ctx.output(1).data, type, first * p.d * p.s, ws, l.dkt);
    AMPC_RETURN_IF_ERROR(g.dkeys->run(*ctx.exec, q, dprobs, nullptr, dkt, p.scale, 0));
    AMPC_RETURN_IF_ERROR(rounded(dq, ctx.output(0).data, type, row0 * p.d, c * p.t * p.d, stream));
    AMPC_RETURN_IF_ERROR(
        rounded(dkt, ctx.output(1).data, type, first * p.d * p.s, c * p.d * p.s, stream));
    AMPC_RETURN_IF_ERROR(
        rounded(dv, ctx.output(2).data, type, first * p.s * p.dv, c * p.s * p.dv, stream));
  }
  return absl::OkStatus();
}

// cuDNN's backward recomputes P = exp(s - LSE) from the forward's LSE with no guard for a row
// whose every key a large finite bias masks (Hugging Face's finfo.min fill): there LSE rounds
// back to the fill and P to 1 for every key, not 1 / S (ampc's kernels recompute such rows:
// numeric::lse_holds_log_sum). A float mask goes to cuDNN's backward only when it is a constant
// whose finite entries are small (|x| < 2^10, where LSE still holds log S to well within a
// unit of f16); a -inf entry masks exactly.
absl::Status check_cudnn_backward_bias(const Value& mask) {
  const Tensor* data = mask.initializer();
  if (data == nullptr || !data->has_data()) {
    return absl::UnimplementedError(str_cat(
        "cuDNN's attention backward would get a row masked by a large finite value wrong, and "
        "this node's float mask %",
        mask.name(),
        " is computed in the graph (a bool mask, or a "
        "constant one of 0 and -inf, goes)"));
  }
  for (int64_t i = 0; i < data->num_elements(); ++i) {
    const double x = data->element_as_double(i);
    if (std::isfinite(x) && std::abs(x) >= 1024) {
      return absl::UnimplementedError(str_cat(
          "cuDNN's attention backward would get a row masked by a large finite value "
          "wrong, and this node's float mask %",
          mask.name(), " holds ", x, " (a bool mask, or a constant one of 0 and -inf, goes)"));
    }
  }
  return absl::OkStatus();
}

// Whether `mask` is a constant bool mask that keeps exactly the keys j <= i of every query i
// (top left aligned) in every batch entry it covers: cuDNN's causal mode, with no bias.
bool is_causal_constant(const Value& mask, const AttentionParams& p) {
  const Tensor* data = mask.initializer();
  if (data == nullptr || !data->has_data() || data->dtype() != DType::kBool) return false;
  const Shape& shape = data->type().shape;
  const size_t rank = shape.size();
  if (rank < 2 || shape[rank - 2] != p.t || shape[rank - 1] != p.s) return false;
  for (int64_t k = 0; k < data->num_elements(); ++k) {
    const int64_t i = (k / p.s) % p.t;
    const int64_t j = k % p.s;
    if (((data->element_as_double(k) != 0) == p.keep) != (j <= i)) return false;
  }
  return true;
}

// The cuDNN path's graph and workspace for `state` (`grad`: AttentionGrad's; `stats`: the
// forward writes the LSE), or why it does not apply.
absl::Status plan_cudnn_path(const KernelContext& ctx, bool grad, bool stats,
                             AttentionState& state) {
  const AttentionParams& p = state.params;
  const bool causal = p.has_mask && is_causal_constant(*ctx.node.operand(grad ? 6 : 3), p);
  // A causal mask leaves every row key 0.
  if (p.has_mask && p.safe && !causal) {
    return absl::UnimplementedError(
        "cuDNN's fused attention gives a row that keeps no key NaN, and this node is `safe` with "
        "a mask (0 there) that is not a constant causal one");
  }
  if (p.has_mask && p.mask_type != Elem::kBool && p.mask_type != *elem_of(state.dtype)) {
    return absl::UnimplementedError(
        "cuDNN's fused attention adds the mask in the operands' type, which would round this "
        "node's wider float mask (a bool mask, or a float one of the operands' type, goes)");
  }
  // cuDNN before 9.10 takes -inf in a bias badly (its frontend masks with the lowest finite
  // value there), and a bool mask becomes a bias of 0 and -inf.
  if (p.has_mask && p.mask_type == Elem::kBool && cudnnGetVersion() < 91000) {
    return absl::UnimplementedError(
        str_cat("cuDNN ", cudnnGetVersion(), " takes a bool mask (a -inf bias) only from 9.10"));
  }
  if (grad && p.has_mask && p.mask_type != Elem::kBool) {
    AMPC_RETURN_IF_ERROR(check_cudnn_backward_bias(*ctx.node.operand(6)));
  }
  // Before cuDNN 9.26 its Hopper backward with a bias can give NaN where S is no multiple of
  // 128 (the frontend works around it only up to 9.15): the other paths take those.
  if (grad && p.has_mask && !causal && p.s % 128 != 0 && cudnnGetVersion() < 92600) {
    return absl::UnimplementedError(
        str_cat("cuDNN ", cudnnGetVersion(), "'s attention backward with a mask over ", p.s,
                " keys (no multiple of 128) is not trusted before cuDNN 9.26"));
  }
  CudnnPath& c = state.cudnn;
  c.heads = p.batch_rank > 0 ? p.batch_dims[p.batch_rank - 1] : 1;
  CudnnAttentionProblem problem{.dtype = state.dtype,
                                .b = p.batch / std::max<int64_t>(c.heads, 1),
                                .h = c.heads,
                                .t = p.t,
                                .s = p.s,
                                .d = p.d,
                                .dv = p.dv,
                                .scale = p.scale,
                                .backward = grad,
                                .stats = stats,
                                .causal = causal};
  if (p.has_mask && !causal) {
    bool varies_b = false;
    for (int k = 0; k + 1 < p.batch_rank; ++k) varies_b = varies_b || p.mask_batch_strides[k] != 0;
    const bool varies_h = p.batch_rank > 0 && p.mask_batch_strides[p.batch_rank - 1] != 0;
    c.bias_b = problem.bias_b = varies_b ? problem.b : 1;
    c.bias_h = problem.bias_h = varies_h ? c.heads : 1;
  }
  AMPC_ASSIGN_OR_RETURN(
      c.graph, CudnnAttention::create(problem, static_cast<cudnnHandle_t>(ctx.exec->cudnn)));
  // The deterministic backward keeps dP per tile pair: at long sequences more than a workspace
  // should hold.
  if (c.graph->workspace_bytes() > kCudnnWorkspaceBytes) {
    return absl::UnimplementedError(str_cat(
        "cuDNN's fused attention (", c.graph->describe(), ") asks ", c.graph->workspace_bytes(),
        " bytes of workspace, over ampc's ", kCudnnWorkspaceBytes));
  }
  const int64_t element = dtype_size(state.dtype);
  int64_t next = 0;
  const auto take = [&](int64_t bytes) {
    const int64_t at = next;
    next += (bytes + 255) / 256 * 256;
    return at;
  };
  c.library = take(c.graph->workspace_bytes());
  c.k = take(p.batch * p.s * p.d * element);
  if (c.bias_b > 0) c.bias = take(c.bias_b * c.bias_h * p.t * cudnn_bias_pitch(p.s) * element);
  if (grad) c.dk = take(p.batch * p.s * p.d * element);
  state.workspace_bytes = next;
  return absl::OkStatus();
}

// The batch of [rows, cols] matrices `in` transposed into `out` ([cols, rows] each).
absl::Status transposed(const KernelContext& ctx, const void* in, void* out, int64_t batch,
                        int64_t rows, int64_t cols, DType type) {
  MoveMap map;
  map.rank = 3;
  map.size = batch * rows * cols;
  const int64_t dims[3] = {batch, cols, rows};
  const int64_t in_strides[3] = {rows * cols, 1, cols};
  const int64_t out_strides[3] = {rows * cols, rows, 1};
  for (int k = 0; k < 3; ++k) {
    map.dims[k] = map.in_dims[k] = dims[k];
    map.in_strides[k] = in_strides[k];
    map.out_strides[k] = out_strides[k];
    map.rules[k] = DimRule::kStride;
  }
  return launched(
      launch_move(map, static_cast<int>(dtype_size(type)), in, out, nullptr, stream_of(ctx)), ctx);
}

// K from Kt and the bias from the mask (operand `mask`) in the workspace; returns the bias.
absl::StatusOr<const void*> cudnn_operands(const KernelContext& ctx, const AttentionState& state,
                                           const void* kt, int mask) {
  const AttentionParams& p = state.params;
  const CudnnPath& c = state.cudnn;
  std::byte* ws = ctx.workspace.data();
  AMPC_RETURN_IF_ERROR(transposed(ctx, kt, ws + c.k, p.batch, p.d, p.s, state.dtype));
  if (c.bias_b == 0) return nullptr;  // no mask, or cuDNN's causal mode
  AMPC_RETURN_IF_ERROR(launched(
      launch_attention_bias(*elem_of(state.dtype), ctx.input(mask).data, ws + c.bias, c.bias_b,
                            c.bias_h, c.heads, cudnn_bias_pitch(p.s), p, stream_of(ctx)),
      ctx));
  return ws + c.bias;
}

absl::Status attention_cudnn(const KernelContext& ctx, const AttentionState& state) {
  const CudnnPath& c = state.cudnn;
  std::byte* ws = ctx.workspace.data();
  AMPC_ASSIGN_OR_RETURN(const void* bias, cudnn_operands(ctx, state, ctx.input(1).data, 3));
  const CudnnAttentionArgs args{
      .q = ctx.input(0).data,
      .k = ws + c.k,
      .v = ctx.input(2).data,
      .bias = bias,
      .o = ctx.output(0).data,
      .stats = ctx.has_output(1) ? static_cast<float*>(ctx.output(1).data) : nullptr};
  return c.graph->run(static_cast<cudnnHandle_t>(ctx.exec->cudnn), args, ws + c.library);
}

absl::Status attention_grad_cudnn(const KernelContext& ctx, const AttentionState& state) {
  const AttentionParams& p = state.params;
  const CudnnPath& c = state.cudnn;
  std::byte* ws = ctx.workspace.data();
  AMPC_ASSIGN_OR_RETURN(const void* bias, cudnn_operands(ctx, state, ctx.input(2).data, 6));
  const CudnnAttentionArgs args{.q = ctx.input(1).data,
                                .k = ws + c.k,
                                .v = ctx.input(3).data,
                                .bias = bias,
                                .o_in = ctx.input(4).data,
                                .d_o = ctx.input(0).data,
                                .stats_in = static_cast<const float*>(ctx.input(5).data),
                                .dq = ctx.output(0).data,
                                .dk = ws + c.dk,
                                .dv = ctx.output(2).data};
  AMPC_RETURN_IF_ERROR(
      c.graph->run(static_cast<cudnnHandle_t>(ctx.exec->cudnn), args, ws + c.library));
  return transposed(ctx, ws + c.dk, ctx.output(1).data, p.batch, p.s, p.d, state.dtype);
}

// Q, Kt and V are operands `first` .. `first + 2`; the mask is operand `mask`.
absl::StatusOr<std::unique_ptr<KernelState>> init_params(const KernelContext& ctx, int first,
                                                         int mask) {
  const Shape& q = ctx.input(first).shape();
  const Shape& v = ctx.input(first + 2).shape();
  const size_t rank = q.size();
  if (rank < 2 || rank - 2 > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(str_cat(
        "Q ", shape_to_string(q), ": the CUDA kernel takes at most ", kMaxRank, " batch dims"));
  }
  auto state = std::make_unique<AttentionState>();
  AttentionParams& p = state->params;
  p.batch_rank = static_cast<int>(rank - 2);
  for (size_t k = 0; k + 2 < rank; ++k) {
    p.batch_dims[k] = q[k];
    p.batch *= q[k];
  }
  p.t = q[rank - 2];
  p.d = q[rank - 1];
  p.s = v[rank - 2];
  p.dv = v[rank - 1];
  p.scale = ctx.node.float_attr("scale");
  p.safe = ctx.node.int_attr("safe") != 0;
  state->dtype = ctx.input(first).dtype();
  if (ctx.has_input(mask)) {
    const TensorArg& m = ctx.input(mask);
    if (m.dtype() != DType::kBool && m.dtype() != DType::kF32 && m.dtype() != DType::kF16 &&
        m.dtype() != DType::kBF16) {
      return absl::UnimplementedError(str_cat("a ", dtype_name(m.dtype()),
                                              " mask: the CUDA kernels read bool or f32/f16/bf16"));
    }
    p.has_mask = true;
    p.mask_type = elem(m);
    p.keep = ctx.node.int_attr("mask_keep") != 0;
    // The mask's strides over [batch.., T, S], 0 along the dims it broadcasts.
    const Shape& shape = m.shape();
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (size_t k = 0; k < shape.size(); ++k) {
      const int64_t extent = shape[shape.size() - 1 - k];
      if (extent != 1) strides[rank - 1 - k] = stride;
      stride *= extent;
    }
    for (size_t k = 0; k + 2 < rank; ++k) p.mask_batch_strides[k] = strides[k];
    p.mask_row_stride = strides[rank - 2];
    p.mask_col_stride = strides[rank - 1];
  }
  const bool grad = first == 1;
  AMPC_ASSIGN_OR_RETURN(const AttentionPath path,
                        parse_attention_path(std::getenv("AMPC_CUDA_ATTENTION")));
  if (path == AttentionPath::kCudnn || path == AttentionPath::kCudnnOnly) {
    const absl::Status cudnn = plan_cudnn_path(ctx, grad, !grad && ctx.has_output(1), *state);
    if (!cudnn.ok() && path == AttentionPath::kCudnnOnly) {
      return absl::Status(cudnn.code(),
                          str_cat("AMPC_CUDA_ATTENTION=cudnn-only: ", cudnn.message()));
    }
    if (!cudnn.ok()) state->cudnn = {};
  }
  if (state->cudnn.graph == nullptr &&
      (path == AttentionPath::kGemm || path == AttentionPath::kCudnn)) {
    AMPC_RETURN_IF_ERROR(plan_gemm_path(ctx, grad, *state));
  }
  if (state->cudnn.graph == nullptr && !state->gemm &&
      (p.s > kMaxAttentionKeys || p.t > kMaxAttentionQueries)) {
    return absl::UnimplementedError(str_cat("attention over ", p.t, " queries and ", p.s,
                                            " keys: the CUDA kernels hold at most ",
                                            kMaxAttentionKeys, " keys and ", kMaxAttentionQueries,
                                            " queries per row in shared memory"));
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_attention(const KernelContext& ctx) {
  return init_params(ctx, 0, 3);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_attention_grad(const KernelContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<KernelState> state, init_params(ctx, 1, 6));
  const auto& attention = static_cast<const AttentionState&>(*state);
  if (attention.cudnn.graph == nullptr && !attention.gemm) {
    state->workspace_bytes =
        attention_grad_workspace_floats(attention.params) * static_cast<int64_t>(sizeof(float));
  }
  return state;
}

const void* mask_of(const KernelContext& ctx, int index) {
  return ctx.has_input(index) ? ctx.input(index).data : nullptr;
}

absl::Status attention(const KernelContext& ctx) {
  const auto& state = static_cast<const AttentionState&>(*ctx.state);
  if (state.cudnn.graph != nullptr) return attention_cudnn(ctx, state);
  if (state.gemm) return attention_gemm(ctx, state);
  float* lse = ctx.has_output(1) ? static_cast<float*>(ctx.output(1).data) : nullptr;
  return launched(
      launch_attention(elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data, ctx.input(2).data,
                       mask_of(ctx, 3), ctx.output(0).data, lse, state.params, stream_of(ctx)),
      ctx);
}

absl::Status attention_grad(const KernelContext& ctx) {
  const auto& state = static_cast<const AttentionState&>(*ctx.state);
  if (state.cudnn.graph != nullptr) return attention_grad_cudnn(ctx, state);
  if (state.gemm) return attention_grad_gemm(ctx, state);
  return launched(
      launch_attention_grad(
          elem(ctx.input(0)), ctx.input(0).data, ctx.input(1).data, ctx.input(2).data,
          ctx.input(3).data, ctx.input(4).data, static_cast<const float*>(ctx.input(5).data),
          mask_of(ctx, 6), ctx.output(0).data, ctx.output(1).data, ctx.output(2).data,
          reinterpret_cast<float*>(ctx.workspace.data()), state.params, stream_of(ctx)),
      ctx);
}

void register_cuda_attention_kernels(KernelRegistry& r) {
  r.add(cuda_ampc_kernel_def("Attention", kCudaFloatTypes, &attention, &init_attention));
  r.add(cuda_ampc_kernel_def("AttentionGrad", kCudaFloatTypes, &attention_grad,
                             &init_attention_grad));
}

static KernelRegistration kCudaAttentionKernels(&register_cuda_attention_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
