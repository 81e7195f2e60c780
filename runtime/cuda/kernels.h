// The launchers of the CUDA kernels: the boundary between the host code (registration, shapes,
// descriptors; C++20, compiled by the host compiler) and the *_kernels.cu files (compiled by
// nvcc as C++17). Everything here is plain data: element types, index layouts, device pointers
// and the stream. Every launcher queues its kernels on `stream` and returns cudaGetLastError().
//
// The element math is runtime/numeric.h's, shared with the CPU kernels, so each op's formula is
// written once; this header only says how to walk the tensors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/device_error.h"
#include "runtime/numeric.h"
#include "runtime/optimizer_math.h"

namespace ampc::runtime::cuda {

// Element types of the CUDA kernels: the storage types of DType (fp8 for Cast only).
enum class Elem : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI8,
  kU8,
  kBool,
  kF8E4M3FN,
  kF8E5M2
};

inline int elem_size(Elem elem) {
  switch (elem) {
    case Elem::kF64:
    case Elem::kI64:
      return 8;
    case Elem::kF32:
    case Elem::kI32:
      return 4;
    case Elem::kF16:
    case Elem::kBF16:
      return 2;
    default:
      return 1;
  }
}

// Dims an element-wise layout holds after collapsing (neighbouring dims merge wherever every
// operand is contiguous across them, and size-1 dims drop, so real graphs need few).
inline constexpr int kMaxRank = 8;

// The index space of an element-wise op with N operands: `size` output elements (row-major over
// `dims`); operand k reads element sum_d index_d * strides[k][d] (0 where it is broadcast).
// `contiguous`: every operand has the output's shape, so element i reads element i everywhere.
template <int N>
struct Layout {
  int rank = 0;
  int64_t size = 0;
  bool contiguous = false;
  int64_t dims[kMaxRank] = {};
  int64_t strides[N][kMaxRank] = {};
};

// Where a kernel reports data errors (device_error.h) and which plan step it is.
struct ErrorSink {
  DeviceError* error = nullptr;
  int32_t step = -1;
};

// ---- Element-wise (elementwise_kernels.cu) -------------------------------------------------

enum class UnaryOp : uint8_t {
  kRelu,
  kLeakyRelu,  // alpha
  kSigmoid,
  kTanh,
  kErf,
  kGeluErf,
  kGeluTanh,
  kSoftplus,
  kHardSigmoid,  // alpha, beta
  kHardSwish,
  kSoftsign,
  kElu,   // alpha
  kSelu,  // alpha, gamma
  kCelu,  // alpha
  kMish,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kSqrt,
  kExp,
  kLog,
  kReciprocal,
  kFloor,
  kCeil,
  kRound,
  kNeg,
  kAbs,
  kNot,    // bool
  kClip,   // low, high: device pointers to one element of the input's type, or null
  kIsNaN,  // bool output
  kIsInf,  // bool output; detect_positive, detect_negative
};

struct UnaryParams {
  float alpha = 0;
  float beta = 0;
  float gamma = 0;
  bool detect_positive = true;
  bool detect_negative = true;
  const void* low = nullptr;
  const void* high = nullptr;
};

// y[i] = op(x[i]) over n elements of `type`, y of `type` or bool (x and y may be the same
// buffer when they have one element size).
cudaError_t launch_unary(UnaryOp op, Elem type, const void* x, void* y, int64_t n,
                         const UnaryParams& params, cudaStream_t stream);

enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,       // integer division by zero is reported through the error sink
  kFmod,      // Mod with fmod = 1 (integer zero divisors reported as for kDiv)
  kFloorMod,  // Mod with fmod = 0
  kPow,       // float a; b of `b_type`: a's type, f32, i64 or i32
  kMin,
  kMax,
  kPRelu,  // float; b (the slope) broadcast to a
  kEqual,  // bool results from here on
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,  // bool operands
  kOr,
  kXor,
};

// out = op(a, b) over the broadcast `layout`; a (and b, but for Pow) of `type`; out of `type`,
// or bool for comparisons and logic. `out` may be `a`'s buffer when a has out's shape.
cudaError_t launch_binary(BinaryOp op, Elem type, Elem b_type, const void* a, const void* b,
                          void* out, const Layout<2>& layout, ErrorSink sink, cudaStream_t stream);

// out = cond ? x : y over the broadcast `layout`, moving elements of `element_bytes` bytes.
cudaError_t launch_where(int element_bytes, const bool* cond, const void* x, const void* y,
                         void* out, const Layout<3>& layout, cudaStream_t stream);

// y[i] = x[i] converted from `from` to `to` (runtime/cast_math.h), n elements; `saturate` is
// Cast's attribute for fp8 targets.
cudaError_t launch_cast(Elem from, Elem to, const void* x, void* y, int64_t n, bool saturate,
                        cudaStream_t stream);

// Dropout: in training, y[i] = x[i] * (kept ? 1/(1-ratio) : 0) with the draw keyed by
// (seed, *random_stream) as numeric::random_key; otherwise (no training flag, a false one, or
// ratio 0) y = x and every mask element true. `ratio` (one element of `ratio_type`, or null for
// `default_ratio`), `training` (one bool, or null: inference) and `random_stream` are device
// memory, read by the kernel, so they may change between runs. A ratio outside [0, 1) in
// training is recorded in the error sink. `mask` may be null.
struct DropoutArgs {
  const void* ratio = nullptr;
  Elem ratio_type = Elem::kF32;
  double default_ratio = 0.5;
  const bool* training = nullptr;
  uint64_t seed = 0;
  const uint64_t* random_stream = nullptr;
};
cudaError_t launch_dropout(Elem type, const void* x, void* y, bool* mask, int64_t n,
                           const DropoutArgs& args, ErrorSink sink, cudaStream_t stream);

// The random ops: y[i] of `type` drawn as runtime/random_math.h says from the key of (seed,
// *random_stream) and i: RandomUniform(Like) low + (high - low) * u (a = low, b = high),
// RandomNormal(Like) mean + scale * z (a = mean, b = scale), Bernoulli 1 with probability p[i]
// (`p` of `p_type`), whose probabilities outside [0, 1] are recorded in the error sink.
enum class RandomDraw { kUniform, kNormal, kBernoulli };
struct RandomArgs {
  RandomDraw draw = RandomDraw::kUniform;
  double a = 0;
  double b = 1;
  uint64_t seed = 0;
  const uint64_t* random_stream = nullptr;
  const void* p = nullptr;
  Elem p_type = Elem::kF32;
};
cudaError_t launch_random(Elem type, void* y, int64_t n, const RandomArgs& args, ErrorSink sink,
                          cudaStream_t stream);

// Fills n elements of `element_bytes` bytes with the bytes of `value` (at most 8).
cudaError_t launch_fill(void* out, int64_t n, int element_bytes, uint64_t value,
                        cudaStream_t stream);

// ---- The training step's optimizer and loss scaling (training_kernels.cu) ------------------
// T is the parameter's type (f32, or f64 for tests); lr and step are one-element tensors on the
// device of `scalar_type` (f32 or f64), read by the kernels, so a new learning rate or step
// needs no new launch parameters; `skip` (null: none) is the update ops' bool input. A data error
// an earlier kernel of the run recorded in `error` skips the update too: it is found only after
// the run, when an update in place would already have written the state from bad gradients.

struct UpdateScalars {
  const void* lr = nullptr;
  const void* step = nullptr;
  Elem scalar_type = Elem::kF32;
  const uint8_t* skip = nullptr;
  const DeviceError* error = nullptr;
};

// `buffer` and `buffer_out` null: SGD without momentum and its buffer.
cudaError_t launch_sgd(Elem type, int64_t n, const void* param, const void* grad,
                       const void* buffer, void* param_out, void* buffer_out,
                       const numeric::SgdHyper& hyper, const UpdateScalars& scalars,
                       cudaStream_t stream);
cudaError_t launch_adam(Elem type, int64_t n, const void* param, const void* grad,
                        const void* exp_avg, const void* exp_avg_sq, void* param_out,
                        void* exp_avg_out, void* exp_avg_sq_out, const numeric::AdamHyper& hyper,
                        const UpdateScalars& scalars, cudaStream_t stream);

// Tensors one launch of GlobalNorm or UnscaleGradients takes (passed by value).
inline constexpr int kMaxTensorsPerLaunch = 64;
struct TensorList {
  int count = 0;
  const void* data[kMaxTensorsPerLaunch] = {};
  void* out[kMaxTensorsPerLaunch] = {};
  Elem type[kMaxTensorsPerLaunch] = {};
  int64_t size[kMaxTensorsPerLaunch] = {};
};

// A tensor of n elements is summed in this many parts (of at least 16384 elements, at most
// kMaxNormParts), each by one block, so a large tensor (an embedding) is not one block's work.
inline constexpr int64_t kMaxNormParts = 256;
AMPC_HD int64_t tensor_norm_parts(int64_t n) {
  const int64_t parts = (n + 16383) / 16384;
  return parts < 1 ? 1 : (parts > kMaxNormParts ? kMaxNormParts : parts);
}

// norms[first + k] = the L2 norm of tensor k of `tensors` (type T: f32 or f64): each part's sum
// of squares into partials[(first + k) * kMaxNormParts + part], then the parts' sum as a tree in
// a fixed order (deterministic); then global_norm over `count` norms into `out`.
cudaError_t launch_tensor_norms(Elem type, const TensorList& tensors, void* norms, void* partials,
                                int first, cudaStream_t stream);
cudaError_t launch_norm_of_norms(Elem type, const void* norms, int count, void* out,
                                 cudaStream_t stream);

// out_k = C(in_k) * inverse (C: f32 or f64; in_k f16, bf16, f32 or f64); *found = 1 where any
// out_k is not finite (*found must be zeroed first).
cudaError_t launch_unscale(Elem compute, const void* inverse, const TensorList& tensors,
                           uint8_t* found, cudaStream_t stream);

// One-element ops: loss * scale; min(max_norm / (norm + 1e-6), 1) (NaN kept); the dynamic loss
// scale's rule (numeric::LossScaleRule; `left` and `left_out` null without hysteresis), which
// leaves the scale's state as it was after a data error in `error`, as the updates do.
cudaError_t launch_scale_loss(Elem type, const void* loss, const void* scale, void* out,
                              cudaStream_t stream);
cudaError_t launch_clip_coefficient(Elem type, const void* norm, double max_norm, void* out,
                                    cudaStream_t stream);
cudaError_t launch_loss_scale_update(const numeric::LossScaleRule& rule, const float* scale,
                                     const int64_t* tracker, const uint8_t* found_inf,
                                     const int64_t* left, float* scale_out, int64_t* tracker_out,
                                     int64_t* left_out, const DeviceError* error,
                                     cudaStream_t stream);

}  // namespace ampc::runtime::cuda
