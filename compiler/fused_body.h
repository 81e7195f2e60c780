// The body of an ampc.FusedElementwise node: a small expression graph over the node's operands,
// written by passes/fuse_elementwise.cc and run by each backend's fused kernel.
//
// The body is stored on the node as the string attribute `body`, one instruction per `;`:
//
//   t0 = Mul(x0, x1) : f16; t1 = LeakyRelu[0.01](t0) : f16; t2 = Cast(t1) : f32; return t1, t2
//
// `xI` is the node's operand I, `tK` the result of instruction K, `[...]` the op's float
// parameters, and the dtype after `:` the type the result is rounded to (bool results are 0 or
// 1). Every instruction is the element-wise op of the same name computed as its own kernel
// computes it: operands read in f32 (f16, bf16 and bool values are exact in f32), the op's
// runtime/numeric.h formula in f32, the result rounded once to its dtype. So a fused node gives
// the bits of the nodes it replaced, each rounding to its own output type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"

namespace ampc {

// The most operands a fused node reads (the fusion pass's bound, which keeps bodies small).
inline constexpr int kMaxFusedOperands = 16;

enum class FusedOp : uint8_t {
  // Unary.
  kIdentity,  // Expand (a broadcast)
  kCast,      // between float types, and bool -> float
  kNeg,
  kAbs,
  kSqrt,
  kExp,
  kLog,
  kReciprocal,
  kRelu,
  kSigmoid,
  kTanh,
  kErf,
  kGeluErf,
  kGeluTanh,
  kSoftplus,
  kSoftsign,
  kHardSwish,
  kMish,
  kSin,
  kCos,
  kNot,
  kLeakyRelu,    // [alpha]
  kElu,          // [alpha]
  kCelu,         // [alpha]
  kSelu,         // [alpha, gamma]
  kHardSigmoid,  // [alpha, beta]
  // Binary.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMin,
  kMax,
  kPRelu,
  kEqual,
  kLess,
  kGreater,
  kLessOrEqual,
  kGreaterOrEqual,
  kAnd,
  kOr,
  kXor,
  kReluGrad,       // (dy, y)
  kLeakyReluGrad,  // (dy, x) [alpha]
  kGeluErfGrad,    // (dy, x)
  kGeluTanhGrad,   // (dy, x)
  // Ternary.
  kWhere,  // (condition, a, b)
};

// The body's spelling of `op` ("Mul", "GeluTanhGrad", "Identity").
std::string_view fused_op_name(FusedOp op);
int fused_op_arity(FusedOp op);
int fused_op_num_params(FusedOp op);

struct FusedInstr {
  FusedOp op = FusedOp::kIdentity;
  // Slots: 0 .. num_inputs-1 are the node's operands, num_inputs + K is instruction K's result.
  std::vector<int> args;
  std::vector<float> params;
  DType dtype = DType::kF32;  // f32, f16, bf16 or bool
};

struct FusedBody {
  int num_inputs = 0;
  std::vector<FusedInstr> instrs;
  std::vector<int> outputs;  // slots of instruction results, one per node output

  int slot_of_instr(int k) const { return num_inputs + k; }
  DType output_dtype(int i) const { return instrs[outputs[i] - num_inputs].dtype; }
  // The `body` attribute's text (see above).
  std::string to_string() const;
  // Parses and checks a body over `num_inputs` operands: known ops, arities, slots defined
  // before use, result dtypes the body can hold, outputs that are instruction results.
  static absl::StatusOr<FusedBody> parse(std::string_view text, int num_inputs);
};

// How an operand of shape `in` broadcast to `out` is indexed: output element i reads operand
// element (i / inner) % count. Exists when the operand's dimensions other than 1 are one block of
// consecutive output dimensions (a scalar, a bias over the last dimensions, a per-row factor, a
// full tensor): the operands a fused node takes.
struct BroadcastWindow {
  int64_t inner = 1;
  int64_t count = 1;
};
std::optional<BroadcastWindow> broadcast_window(const std::vector<int64_t>& in,
                                                const std::vector<int64_t>& out);

// The element types a fused body can hold: f32, f16, bf16 and bool.
bool fusable_dtype(DType dtype);

// A stable 64-bit hash of a body and its operand types (FNV-1a): the key of the CUDA backend's
// generated-kernel cache.
uint64_t fused_body_hash(std::string_view body, const std::vector<DType>& input_dtypes);

}  // namespace ampc
