// The CPU kernel of ampc.FusedElementwise (ops/fused.cc): the body runs over blocks of elements
// small enough to stay in L1, one loop per instruction, each a runtime/numeric.h formula over
// f32 values the compiler vectorizes (Exp and Sigmoid through runtime/cpu/vector_math.h, the C
// library's expf eight lanes at a time).
//
// Numerics: operands are read into f32 exactly (f16, bf16, bool); each instruction computes its
// op's formula in f32 as the op's own kernel does and rounds the result once to its dtype, so the
// fused node writes the bits the nodes it replaced wrote. Blocks are independent: the results do
// not depend on the thread count.
#include <algorithm>
#include <vector>

#include "compiler/fused_body.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/vector_math.h"
#include "runtime/gradient_math.h"
#include "runtime/numeric.h"

namespace ampc::runtime::cpu {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kBlocksPerChunk = 32;  // parallel_for's grain, in blocks

struct FusedProgram : KernelState {
  FusedBody body;
  std::vector<BroadcastWindow> windows;  // per operand
  int64_t size = 0;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_fused(const KernelContext& ctx) {
  auto program = std::make_unique<FusedProgram>();
  AMPC_ASSIGN_OR_RETURN(program->body, FusedBody::parse(ctx.node.string_attr("body"),
                                                        static_cast<int>(ctx.inputs.size())));
  const Shape& shape = ctx.output(0).shape();
  for (const TensorArg& input : ctx.inputs) {
    std::optional<BroadcastWindow> window = broadcast_window(input.shape(), shape);
    if (!window) {
      return absl::InvalidArgumentError(str_cat("operand ", type_to_string(*input.type),
                                                " is not a block broadcast of ",
                                                shape_to_string(shape)));
    }
    program->windows.push_back(*window);
  }
  program->size = num_elements(shape);
  return program;
}

template <typename T>
void load_block(const T* data, BroadcastWindow window, int64_t start, int64_t n, float* out) {
  if (window.count == 1) {
    std::fill(out, out + n, static_cast<float>(data[0]));
    return;
  }
  if (window.inner == 1 && start + n <= window.count) {
    for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(data[start + j]);
    return;
  }
  int64_t within = start % window.inner;
  int64_t index = (start / window.inner) % window.count;
  for (int64_t j = 0; j < n; ++j) {
    out[j] = static_cast<float>(data[index]);
    if (++within == window.inner) {
      within = 0;
      if (++index == window.count) index = 0;
    }
  }
}

// Operand `i` of the block [start, start + n): a pointer into the tensor when it is f32 and not
// broadcast, else its values converted into `scratch`.
const float* operand_block(const TensorArg& arg, BroadcastWindow window, int64_t start, int64_t n,
                           float* scratch) {
  switch (arg.dtype()) {
    case DType::kF32:
      if (window.inner == 1 && window.count >= start + n) {
        return static_cast<const float*>(arg.data) + start;
      }
      load_block(static_cast<const float*>(arg.data), window, start, n, scratch);
      break;
    case DType::kF16:
      load_block(static_cast<const Float16*>(arg.data), window, start, n, scratch);
      break;
    case DType::kBF16:
      load_block(static_cast<const BFloat16*>(arg.data), window, start, n, scratch);
      break;
    case DType::kBool:
      load_block(static_cast<const bool*>(arg.data), window, start, n, scratch);
      break;
    default:
      AMPC_CHECK(false && "not a fusable operand type");
  }
  return scratch;
}

// `omp simd`: -O2 does not vectorize these loops by itself. Lanes compute the scalar formula
// element by element (no fast-math, so no vector math library and no reassociation): the same
// bits as the scalar loop.
template <typename Fn>
void unary(const float* a, float* out, int64_t n, Fn fn) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(fn(a[j]));
}

template <typename Fn>
void binary(const float* a, const float* b, float* out, int64_t n, Fn fn) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(fn(a[j], b[j]));
}

void evaluate(const FusedInstr& instr, const float* const* slots, float* out, int64_t n) {
  const float* a = slots[instr.args[0]];
  const float* b = instr.args.size() > 1 ? slots[instr.args[1]] : nullptr;
  const auto param = [&](int i) { return instr.params[i]; };
  namespace nm = numeric;
  switch (instr.op) {
    case FusedOp::kIdentity:
    case FusedOp::kCast:
      std::copy(a, a + n, out);
      return;
    case FusedOp::kNeg:
      return unary(a, out, n, nm::Neg{});
    case FusedOp::kAbs:
      return unary(a, out, n, nm::Abs{});
    case FusedOp::kSqrt:
      return unary(a, out, n, nm::Sqrt{});
    case FusedOp::kExp:
      return exp_array(a, out, n);
    case FusedOp::kLog:
      return unary(a, out, n, nm::Log{});
    case FusedOp::kReciprocal:
      return unary(a, out, n, nm::Reciprocal{});
    case FusedOp::kRelu:
      return unary(a, out, n, nm::Relu{});
    case FusedOp::kSigmoid:
      return sigmoid_array(a, out, n);
    case FusedOp::kTanh:
      return unary(a, out, n, nm::Tanh{});
    case FusedOp::kErf:
      return unary(a, out, n, nm::Erf{});
    case FusedOp::kGeluErf:
      return unary(a, out, n, nm::GeluErf{});
    case FusedOp::kGeluTanh:
      return unary(a, out, n, nm::GeluTanh{});
    case FusedOp::kSoftplus:
      return unary(a, out, n, nm::Softplus{});
    case FusedOp::kSoftsign:
      return unary(a, out, n, nm::Softsign{});
    case FusedOp::kHardSwish:
      return unary(a, out, n, nm::HardSwish{});
    case FusedOp::kMish:
      return unary(a, out, n, nm::Mish{});
    case FusedOp::kSin:
      return unary(a, out, n, nm::Sin{});
    case FusedOp::kCos:
      return unary(a, out, n, nm::Cos{});
    case FusedOp::kNot:
      return unary(a, out, n, [](float x) { return x == 0.0f; });
    case FusedOp::kLeakyRelu:
      return unary(a, out, n, nm::LeakyRelu{param(0)});
    case FusedOp::kElu:
      return unary(a, out, n, nm::Elu{param(0)});
    case FusedOp::kCelu:
      return unary(a, out, n, nm::Celu{param(0)});
    case FusedOp::kSelu:
      return unary(a, out, n, nm::Selu{param(0), param(1)});
    case FusedOp::kHardSigmoid:
      return unary(a, out, n, nm::HardSigmoid{param(0), param(1)});
    case FusedOp::kAdd:
      return binary(a, b, out, n, nm::Add{});
    case FusedOp::kSub:
      return binary(a, b, out, n, nm::Sub{});
    case FusedOp::kMul:
      return binary(a, b, out, n, nm::Mul{});
    case FusedOp::kDiv:
      return binary(a, b, out, n, nm::Div{});
    case FusedOp::kPow:
      return binary(a, b, out, n, nm::FloatPow{});
    case FusedOp::kMin:
      return binary(a, b, out, n, nm::Min{});
    case FusedOp::kMax:
      return binary(a, b, out, n, nm::Max{});
    case FusedOp::kPRelu:
      return binary(a, b, out, n, nm::PRelu{});
    case FusedOp::kEqual:
      return binary(a, b, out, n, nm::Equal{});
    case FusedOp::kLess:
      return binary(a, b, out, n, nm::Less{});
    case FusedOp::kGreater:
      return binary(a, b, out, n, nm::Greater{});
    case FusedOp::kLessOrEqual:
      return binary(a, b, out, n, nm::LessOrEqual{});
    case FusedOp::kGreaterOrEqual:
      return binary(a, b, out, n, nm::GreaterOrEqual{});
    case FusedOp::kAnd:
      return binary(a, b, out, n, [](float x, float y) { return x != 0.0f && y != 0.0f; });
    case FusedOp::kOr:
      return binary(a, b, out, n, [](float x, float y) { return x != 0.0f || y != 0.0f; });
    case FusedOp::kXor:
      return binary(a, b, out, n, [](float x, float y) { return (x != 0.0f) != (y != 0.0f); });
    case FusedOp::kReluGrad:
      return binary(a, b, out, n, nm::ReluGrad{});
    case FusedOp::kLeakyReluGrad:
      return binary(a, b, out, n, nm::LeakyReluGrad{param(0)});
    case FusedOp::kGeluErfGrad:
      return binary(a, b, out, n, nm::GeluErfGrad{});
    case FusedOp::kGeluTanhGrad:
      return binary(a, b, out, n, nm::GeluTanhGrad{});
    case FusedOp::kWhere: {
      const float* c = slots[instr.args[2]];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) out[j] = a[j] != 0.0f ? b[j] : c[j];
      return;
    }
  }
}

// Rounds a block of results to the instruction's dtype (f32 and bool results are exact).
void round_to(DType dtype, float* values, int64_t n) {
  if (dtype == DType::kF16) {
    for (int64_t j = 0; j < n; ++j) values[j] = static_cast<float>(Float16(values[j]));
  } else if (dtype == DType::kBF16) {
    for (int64_t j = 0; j < n; ++j) values[j] = static_cast<float>(BFloat16(values[j]));
  }
}

template <typename T>
void store_block(const float* values, int64_t n, T* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = static_cast<T>(values[j]);
}

void store_output(const TensorArg& arg, int64_t start, int64_t n, const float* values) {
  switch (arg.dtype()) {
    case DType::kF32:
      std::copy(values, values + n, static_cast<float*>(arg.data) + start);
      return;
    case DType::kF16:
      return store_block(values, n, static_cast<Float16*>(arg.data) + start);
    case DType::kBF16:
      return store_block(values, n, static_cast<BFloat16*>(arg.data) + start);
    case DType::kBool:
      for (int64_t j = 0; j < n; ++j) static_cast<bool*>(arg.data)[start + j] = values[j] != 0.0f;
      return;
    default:
      AMPC_CHECK(false && "not a fusable output type");
  }
}

absl::Status fused_kernel(const KernelContext& ctx) {
  const auto& program = static_cast<const FusedProgram&>(*ctx.state);
  const FusedBody& body = program.body;
  const int num_slots = body.num_inputs + static_cast<int>(body.instrs.size());
  const int64_t blocks = (program.size + kBlock - 1) / kBlock;
  parallel_for(blocks, kBlocksPerChunk, [&](int64_t first, int64_t end) {
    // Per thread, kept between calls: a step allocates nothing.
    thread_local std::vector<float> scratch;
    thread_local std::vector<const float*> slots;
    scratch.resize(static_cast<size_t>(num_slots) * kBlock);
    slots.resize(num_slots);
    for (int64_t block = first; block < end; ++block) {
      const int64_t start = block * kBlock;
      const int64_t n = std::min(kBlock, program.size - start);
      for (int i = 0; i < body.num_inputs; ++i) {
        slots[i] = operand_block(ctx.input(i), program.windows[i], start, n, &scratch[i * kBlock]);
      }
      for (size_t k = 0; k < body.instrs.size(); ++k) {
        const int slot = body.slot_of_instr(static_cast<int>(k));
        float* out = &scratch[static_cast<size_t>(slot) * kBlock];
        evaluate(body.instrs[k], slots.data(), out, n);
        round_to(body.instrs[k].dtype, out, n);
        slots[slot] = out;
      }
      for (size_t o = 0; o < body.outputs.size(); ++o) {
        store_output(ctx.output(static_cast<int>(o)), start, n, slots[body.outputs[o]]);
      }
    }
  });
  return absl::OkStatus();
}

void register_fused_kernels(KernelRegistry& r) {
  // Output 0 may take over operand 0's buffer: a block reads every operand before it writes.
  KernelDef def = ampc_kernel_def("FusedElementwise", {.in_place_operand = 0});
  def.device = Device::kCpu;
  def.dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kBool};
  def.fn = &fused_kernel;
  def.init = &init_fused;
  r.add(std::move(def));
}

const KernelRegistration kFusedKernels(&register_fused_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
