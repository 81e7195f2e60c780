// CUDA kernels of the element-wise ops (ops/elementwise.cc, ops/activation.cc), Cast, Dropout,
// the random ops (ops/random.cc) and the views: registration and launch. The math is
// runtime/numeric.h's and runtime/cast_math.h's, the same the CPU kernels run, so casts,
// comparisons, data movement and the single-IEEE-operation ops are bit-exact against the CPU and
// transcendentals within the contract's ulps. Broadcast layouts are computed once, at load (the
// kernel state).
#include <algorithm>
#include <array>

#include "compiler/strings.h"
#include "ops/op_util.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/layout.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Unary -----------------------------------------------------------------------------------

template <UnaryOp kOp>
absl::Status unary(const KernelContext& ctx) {
  UnaryParams params;
  if constexpr (kOp == UnaryOp::kLeakyRelu || kOp == UnaryOp::kElu || kOp == UnaryOp::kCelu) {
    params.alpha = ctx.node.float_attr("alpha");
  }
  if constexpr (kOp == UnaryOp::kHardSigmoid) {
    params.alpha = ctx.node.float_attr("alpha");
    params.beta = ctx.node.float_attr("beta");
  }
  if constexpr (kOp == UnaryOp::kSelu) {
    params.alpha = ctx.node.float_attr("alpha");
    params.gamma = ctx.node.float_attr("gamma");
  }
  if constexpr (kOp == UnaryOp::kIsInf) {
    params.detect_positive = ctx.node.int_attr("detect_positive") != 0;
    params.detect_negative = ctx.node.int_attr("detect_negative") != 0;
  }
  if constexpr (kOp == UnaryOp::kClip) {
    if (ctx.has_input(1)) params.low = ctx.input(1).data;
    if (ctx.has_input(2)) params.high = ctx.input(2).data;
  }
  return launched(launch_unary(kOp, elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data,
                               ctx.output(0).num_elements(), params, stream_of(ctx)),
                  ctx);
}

absl::Status gelu(const KernelContext& ctx) {
  const std::string& approximate = ctx.node.string_attr("approximate");
  if (approximate == "tanh") return unary<UnaryOp::kGeluTanh>(ctx);
  if (approximate == "none") return unary<UnaryOp::kGeluErf>(ctx);
  return absl::InvalidArgumentError(
      str_cat("Gelu approximate=\"", approximate, "\": expected \"none\" or \"tanh\""));
}

// ---- Binary, with the layout made at load ----------------------------------------------------

// One Layout per pairwise application: out = op(in0, in1), then out = op(out, in_k).
struct BinaryState : KernelState {
  std::vector<Layout<2>> layouts;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_binary(const KernelContext& ctx) {
  auto state = std::make_unique<BinaryState>();
  const Shape& out = ctx.output(0).shape();
  for (size_t k = 1; k < ctx.inputs.size(); ++k) {
    const Shape& a = k == 1 ? ctx.input(0).shape() : out;
    AMPC_ASSIGN_OR_RETURN(Layout<2> layout,
                          broadcast_layout<2>(out, {&a, &ctx.input(static_cast<int>(k)).shape()}));
    state->layouts.push_back(layout);
  }
  return state;
}

absl::StatusOr<std::unique_ptr<KernelState>> init_pow(const KernelContext& ctx) {
  const DType base = ctx.input(0).dtype();
  const DType exponent = ctx.input(1).dtype();
  if (std::find(kCudaNumericTypes.begin(), kCudaNumericTypes.end(), exponent) ==
      kCudaNumericTypes.end()) {
    return absl::UnimplementedError(str_cat("no cuda kernel for Pow with a ", dtype_name(base),
                                            " base and a ", dtype_name(exponent),
                                            " exponent (it takes f32, f16, bf16, i64 or i32)"));
  }
  return init_binary(ctx);
}

template <BinaryOp kOp>
absl::Status binary(const KernelContext& ctx) {
  const auto& state = static_cast<const BinaryState&>(*ctx.state);
  const ErrorSink sink{ctx.exec->error, ctx.step};
  const Elem type = elem(ctx.input(0));
  // Variadic Min and Max fold pairwise into the output.
  const void* a = ctx.input(0).data;
  for (size_t k = 1; k < ctx.inputs.size(); ++k) {
    AMPC_RETURN_IF_ERROR(
        launched(launch_binary(kOp, type, elem(ctx.input(static_cast<int>(k))), a,
                               ctx.input(static_cast<int>(k)).data, ctx.output(0).data,
                               state.layouts[k - 1], sink, stream_of(ctx)),
                 ctx));
    a = ctx.output(0).data;
  }
  return absl::OkStatus();
}

// Mod: fmod picks truncated or floored remainders.
absl::Status mod(const KernelContext& ctx) {
  if (ctx.node.int_attr("fmod") != 0) return binary<BinaryOp::kFmod>(ctx);
  return binary<BinaryOp::kFloorMod>(ctx);
}

// Min or Max of one operand: a copy.
template <BinaryOp kOp>
absl::Status extremum(const KernelContext& ctx) {
  if (ctx.inputs.size() == 1) {
    if (ctx.input(0).data == ctx.output(0).data) return absl::OkStatus();
    return cuda_status(
        cudaMemcpyAsync(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size(),
                        cudaMemcpyDeviceToDevice, stream_of(ctx)),
        str_cat("cudaMemcpyAsync for ", ctx.node.op_type()));
  }
  return binary<kOp>(ctx);
}

struct WhereState : KernelState {
  Layout<3> layout;
};

absl::StatusOr<std::unique_ptr<KernelState>> init_where(const KernelContext& ctx) {
  auto state = std::make_unique<WhereState>();
  AMPC_ASSIGN_OR_RETURN(
      state->layout,
      broadcast_layout<3>(ctx.output(0).shape(),
                          {&ctx.input(0).shape(), &ctx.input(1).shape(), &ctx.input(2).shape()}));
  return state;
}

absl::Status where(const KernelContext& ctx) {
  const auto& state = static_cast<const WhereState&>(*ctx.state);
  return launched(launch_where(dtype_size(ctx.output(0).dtype()),
                               static_cast<const bool*>(ctx.input(0).data), ctx.input(1).data,
                               ctx.input(2).data, ctx.output(0).data, state.layout, stream_of(ctx)),
                  ctx);
}

// ---- Cast, Dropout, views, constants ---------------------------------------------------------

absl::Status cast(const KernelContext& ctx) {
  const bool saturate = ctx.node.int_attr("saturate") != 0;
  return launched(
      launch_cast(elem(ctx.input(0)), elem(ctx.output(0)), ctx.input(0).data, ctx.output(0).data,
                  ctx.output(0).num_elements(), saturate, stream_of(ctx)),
      ctx);
}

absl::Status copy_input(const KernelContext& ctx) {
  if (ctx.output(0).data == ctx.input(0).data || ctx.output(0).byte_size() == 0) {
    return absl::OkStatus();
  }
  return cuda_status(
      cudaMemcpyAsync(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size(),
                      cudaMemcpyDeviceToDevice, stream_of(ctx)),
      str_cat("cudaMemcpyAsync for ", ctx.node.op_type()));
}

// Dropout reads its ratio and training_mode operands on the device, so they may be graph inputs
// that change between runs, as on the CPU.
absl::Status dropout(const KernelContext& ctx) {
  DropoutArgs args;
  args.default_ratio = ctx.node.float_attr("ratio");
  if (ctx.has_input(1)) {
    args.ratio = ctx.input(1).data;
    args.ratio_type = elem(ctx.input(1));
  }
  if (ctx.has_input(2)) args.training = static_cast<const bool*>(ctx.input(2).data);
  args.seed = static_cast<uint64_t>(ops::random_seed(ctx.node).value_or(0));
  args.random_stream = ctx.exec->random_stream;
  bool* mask = ctx.has_output(1) ? static_cast<bool*>(ctx.output(1).data) : nullptr;
  return launched(launch_dropout(elem(ctx.input(0)), ctx.input(0).data, ctx.output(0).data, mask,
                                 ctx.output(0).num_elements(), args,
                                 ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
                  ctx);
}

// The random ops draw on the device from the run's random stream (device memory), as Dropout.
template <RandomDraw kDraw>
absl::Status random_draws(const KernelContext& ctx) {
  RandomArgs args;
  args.draw = kDraw;
  if constexpr (kDraw == RandomDraw::kUniform) {
    args.a = decimal_attr(ctx.node, "low");
    args.b = decimal_attr(ctx.node, "high");
  } else if constexpr (kDraw == RandomDraw::kNormal) {
    args.a = decimal_attr(ctx.node, "mean");
    args.b = decimal_attr(ctx.node, "scale");
  } else {
    args.p = ctx.input(0).data;
    args.p_type = elem(ctx.input(0));
  }
  args.seed = static_cast<uint64_t>(ops::random_seed(ctx.node).value_or(0));
  args.random_stream = ctx.exec->random_stream;
  return launched(
      launch_random(elem(ctx.output(0)), ctx.output(0).data, ctx.output(0).num_elements(), args,
                    ErrorSink{ctx.exec->error, ctx.step}, stream_of(ctx)),
      ctx);
}

// ---- Registration ----------------------------------------------------------------------------

void add(KernelRegistry& r, std::string op, std::vector<DType> dtypes, KernelFn fn,
         int in_place_operand = 0, KernelInitFn init = nullptr) {
  KernelDef def = cuda_kernel_def(std::move(op), std::move(dtypes), fn, in_place_operand);
  def.init = init;
  r.add(std::move(def));
}

void register_cuda_elementwise_kernels(KernelRegistry& r) {
  add(r, "Relu", kCudaFloatTypes, &unary<UnaryOp::kRelu>);
  add(r, "LeakyRelu", kCudaFloatTypes, &unary<UnaryOp::kLeakyRelu>);
  add(r, "Sigmoid", kCudaFloatTypes, &unary<UnaryOp::kSigmoid>);
  add(r, "Tanh", kCudaFloatTypes, &unary<UnaryOp::kTanh>);
  add(r, "Erf", kCudaFloatTypes, &unary<UnaryOp::kErf>);
  add(r, "Gelu", kCudaFloatTypes, &gelu);
  add(r, "Softplus", kCudaFloatTypes, &unary<UnaryOp::kSoftplus>);
  add(r, "HardSigmoid", kCudaFloatTypes, &unary<UnaryOp::kHardSigmoid>);
  add(r, "HardSwish", kCudaFloatTypes, &unary<UnaryOp::kHardSwish>);
  add(r, "Softsign", kCudaFloatTypes, &unary<UnaryOp::kSoftsign>);
  add(r, "Elu", kCudaFloatTypes, &unary<UnaryOp::kElu>);
  add(r, "Selu", kCudaFloatTypes, &unary<UnaryOp::kSelu>);
  add(r, "Celu", kCudaFloatTypes, &unary<UnaryOp::kCelu>);
  add(r, "Mish", kCudaFloatTypes, &unary<UnaryOp::kMish>);
  add(r, "PRelu", kCudaFloatTypes, &binary<BinaryOp::kPRelu>, 0, &init_binary);
  add(r, "Sin", kCudaFloatTypes, &unary<UnaryOp::kSin>);
  add(r, "Cos", kCudaFloatTypes, &unary<UnaryOp::kCos>);
  add(r, "Tan", kCudaFloatTypes, &unary<UnaryOp::kTan>);
  add(r, "Asin", kCudaFloatTypes, &unary<UnaryOp::kAsin>);
  add(r, "Acos", kCudaFloatTypes, &unary<UnaryOp::kAcos>);
  add(r, "Atan", kCudaFloatTypes, &unary<UnaryOp::kAtan>);
  add(r, "Sinh", kCudaFloatTypes, &unary<UnaryOp::kSinh>);
  add(r, "Cosh", kCudaFloatTypes, &unary<UnaryOp::kCosh>);
  add(r, "Asinh", kCudaFloatTypes, &unary<UnaryOp::kAsinh>);
  add(r, "Acosh", kCudaFloatTypes, &unary<UnaryOp::kAcosh>);
  add(r, "Atanh", kCudaFloatTypes, &unary<UnaryOp::kAtanh>);
  add(r, "Sqrt", kCudaFloatTypes, &unary<UnaryOp::kSqrt>);
  add(r, "Exp", kCudaFloatTypes, &unary<UnaryOp::kExp>);
  add(r, "Log", kCudaFloatTypes, &unary<UnaryOp::kLog>);
  add(r, "Reciprocal", {DType::kF32, DType::kF16, DType::kBF16, DType::kF64},
      &unary<UnaryOp::kReciprocal>);
  add(r, "Floor", kCudaFloatTypes, &unary<UnaryOp::kFloor>);
  add(r, "Ceil", kCudaFloatTypes, &unary<UnaryOp::kCeil>);
  add(r, "Round", kCudaFloatTypes, &unary<UnaryOp::kRound>);
  add(r, "Neg", kCudaNumericTypes, &unary<UnaryOp::kNeg>);
  add(r, "Abs", kCudaNumericTypes, &unary<UnaryOp::kAbs>);
  add(r, "Not", {DType::kBool}, &unary<UnaryOp::kNot>);
  add(r, "Clip", kCudaNumericTypes, &unary<UnaryOp::kClip>);
  // Bool results: in place only over an operand of one byte per element, which these never have.
  add(r, "IsNaN", kCudaFloatTypes, &unary<UnaryOp::kIsNaN>);
  add(r, "IsInf", kCudaFloatTypes, &unary<UnaryOp::kIsInf>);

  add(r, "Add", kCudaNumericTypes, &binary<BinaryOp::kAdd>, 0, &init_binary);
  add(r, "Sub", kCudaNumericTypes, &binary<BinaryOp::kSub>, 0, &init_binary);
  add(r, "Mul", kCudaNumericTypes, &binary<BinaryOp::kMul>, 0, &init_binary);
  add(r, "Div", kCudaNumericTypes, &binary<BinaryOp::kDiv>, 0, &init_binary);
  add(r, "Mod", kCudaNumericTypes, &mod, 0, &init_binary);
  add(r, "Pow", kCudaNumericTypes, &binary<BinaryOp::kPow>, 0, &init_pow);
  add(r, "Min", kCudaNumericTypes, &extremum<BinaryOp::kMin>, 0, &init_binary);
  add(r, "Max", kCudaNumericTypes, &extremum<BinaryOp::kMax>, 0, &init_binary);
  std::vector<DType> equal_types = kCudaNumericTypes;
  equal_types.push_back(DType::kBool);
  // Comparisons write bool: in place only over a bool operand of the output's shape (the
  // planner requires equal element counts and byte sizes).
  add(r, "Equal", equal_types, &binary<BinaryOp::kEqual>, 0, &init_binary);
  add(r, "Less", kCudaNumericTypes, &binary<BinaryOp::kLess>, 0, &init_binary);
  add(r, "Greater", kCudaNumericTypes, &binary<BinaryOp::kGreater>, 0, &init_binary);
  add(r, "LessOrEqual", kCudaNumericTypes, &binary<BinaryOp::kLessOrEqual>, 0, &init_binary);
  add(r, "GreaterOrEqual", kCudaNumericTypes, &binary<BinaryOp::kGreaterOrEqual>, 0, &init_binary);
  add(r, "And", {DType::kBool}, &binary<BinaryOp::kAnd>, 0, &init_binary);
  add(r, "Or", {DType::kBool}, &binary<BinaryOp::kOr>, 0, &init_binary);
  add(r, "Xor", {DType::kBool}, &binary<BinaryOp::kXor>, 0, &init_binary);

  std::vector<DType> all_types(std::begin(kAllDTypes), std::end(kAllDTypes));
  KernelDef where_def = cuda_kernel_def("Where", all_types, &where, 1);
  where_def.keyed_on = {.index = 1};
  where_def.init = &init_where;
  r.add(std::move(where_def));
  add(r, "Cast", all_types, &cast);
  add(r, "Dropout", kCudaFloatTypes, &dropout);
  // The random ops' key is their output, the type of the draws (the Like forms read only their
  // input's shape, Bernoulli its probabilities of any float type).
  const auto add_random = [&r](std::string op, KernelFn fn) {
    KernelDef def = cuda_kernel_def(std::move(op), kCudaFloatTypes, fn, -1);
    def.keyed_on = {.output = true, .index = 0};
    r.add(std::move(def));
  };
  add_random("RandomUniform", &random_draws<RandomDraw::kUniform>);
  add_random("RandomUniformLike", &random_draws<RandomDraw::kUniform>);
  add_random("RandomNormal", &random_draws<RandomDraw::kNormal>);
  add_random("RandomNormalLike", &random_draws<RandomDraw::kNormal>);
  add_random("Bernoulli", &random_draws<RandomDraw::kBernoulli>);
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    add(r, op, all_types, &copy_input);
  }
}

static KernelRegistration kCudaElementwiseKernels(&register_cuda_elementwise_kernels);

}  // namespace
}  // namespace ampc::runtime::cuda
