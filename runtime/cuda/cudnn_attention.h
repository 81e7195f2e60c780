// CudnnAttention: ampc.Attention or ampc.AttentionGrad as one cuDNN scaled dot-product attention
// graph (cuDNN's fused flash attention, forward or backward), built at load through cuDNN's C++
// frontend and run many times. Only this file's .cc sees the frontend's headers; a build without
// them (CMake's AMPC_CUDNN_FRONTEND off, or its download failed) gets Unimplemented from create().
//
// The layout is cuDNN's [b, h, rows, d] with the head dim contiguous: Q [b, h, T, D], K (not Kt)
// [b, h, S, D], V [b, h, S, Dv], O and dO [b, h, T, Dv], Stats (the LSE, f32) [b, h, T, 1], all
// dense, and an optional additive bias [b or 1, h or 1, T, S] in the I/O type, its rows
// cudnn_bias_pitch(S) apart. cuDNN reads the
// operands in f16 or bf16, accumulates in f32 and rounds the probabilities (and the backward's
// dS) to the I/O type before the products with V (and K, Q): the results agree with ampc's own
// kernels within a few units of the I/O type, not bit for bit.
#pragma once

#include <cudnn.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "ampc/dtype.h"
#include "ampc/status.h"

namespace ampc::runtime::cuda {

struct CudnnAttentionProblem {
  DType dtype = DType::kF16;  // f16 or bf16
  int64_t b = 1, h = 1, t = 0, s = 0, d = 0, dv = 0;
  float scale = 1;
  bool backward = false;
  // The forward writes the LSE (a training step's forward, whose gradient reads it).
  bool stats = true;
  // The bias's batch and head extents (each 1 or b / h); 0: no bias.
  int64_t bias_b = 0, bias_h = 0;
  // Query i sees keys 0..i only (top left aligned), which cuDNN masks itself, skipping the tiles
  // above the diagonal: about half the work of the same mask as a bias.
  bool causal = false;
};

// The elements between rows of the bias: S rounded up to 8, so that every row starts 16-byte
// aligned, as cuDNN assumes of every tensor it is given (its frontend checks that of Q, K, V
// and O only, and a misaligned operand gives wrong results on Hopper, not an error).
inline int64_t cudnn_bias_pitch(int64_t s) { return (s + 7) / 8 * 8; }

// The device pointers of one run. Forward reads q, k, v, bias and writes o, stats; backward reads
// q, k, v, o_in, d_o, stats_in, bias and writes dq, dk, dv.
struct CudnnAttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* bias = nullptr;
  const void* o_in = nullptr;  // the forward's O (backward)
  const void* d_o = nullptr;
  void* o = nullptr;
  const float* stats_in = nullptr;  // the forward's Stats (backward)
  float* stats = nullptr;           // written by the forward when it makes them
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
};

class CudnnAttention {
 public:
  // The graph and its execution plan on `handle` (whose device and stream are the backend's),
  // built once per problem and handle and shared while any node holds it (cuDNN compiles its
  // attention kernels when it plans them: the 12 layers of a GPT share one forward and one
  // backward). Unimplemented, with cuDNN's reason, when cuDNN has no engine for the problem
  // (f32, a head dim it does not take, a GPU older than it supports, a build without the
  // frontend); the backward is deterministic (cuDNN's deterministic algorithm) or refused. A
  // refusal is remembered per problem and handle like a graph, so it is asked for once.
  static absl::StatusOr<std::shared_ptr<const CudnnAttention>> create(
      const CudnnAttentionProblem& p, cudnnHandle_t handle);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Scratch bytes a run needs.
  int64_t workspace_bytes() const;
  // Queues the graph on `handle`'s stream.
  absl::Status run(cudnnHandle_t handle, const CudnnAttentionArgs& args, void* workspace) const;
  // "bf16 b 8 h 12 T 1024 S 1024 D 64 Dv 64, bias [1, 1]" (or ", causal"): for messages.
  std::string describe() const;
  // Every field of the problem, for the cache of built graphs.
  static auto key(const CudnnAttentionProblem& p) {
    // The scale by its bits: a NaN would break the cache's ordering.
    return std::make_tuple(p.dtype, p.b, p.h, p.t, p.s, p.d, p.dv, std::bit_cast<uint32_t>(p.scale),
                           p.backward, p.stats, p.bias_b, p.bias_h, p.causal);
  }

 private:
  struct Graph;
  explicit CudnnAttention(const CudnnAttentionProblem& problem);
  // create() without the cache.
  static absl::StatusOr<std::shared_ptr<const CudnnAttention>> make(const CudnnAttentionProblem& p,
                                                                    cudnnHandle_t handle);
  CudnnAttentionProblem problem_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace ampc::runtime::cuda
