// The element-wise kernels: one contiguous launcher (16-byte packs when the buffers allow) and one
// broadcast launcher per operand count, instantiated for the functors of runtime/numeric.h and
// the conversions of runtime/cast_math.h. Each output element is computed from its own operands
// and written once, so an output may share its buffer with an operand of its shape.
#include "runtime/cast_math.h"
#include "runtime/cuda/elementwise.cuh"
#include "runtime/numeric.h"
#include "runtime/random_math.h"

namespace ampc::runtime::cuda {
namespace {

// ---- Storage-level functors: what one output element is --------------------------------------

// out = store(fn(load(x))).
template <typename Fn, typename T, typename Out>
struct UnaryStore {
  Fn fn;
  __device__ Out operator()(T x, int64_t) const { return store<Out>(fn(load(x))); }
};

// out = store(fn(load(a), load(b))); fn returns Out's compute type (bool for comparisons).
template <typename Fn, typename A, typename B, typename Out>
struct BinaryStore {
  Fn fn;
  ErrorSink sink;
  __device__ Out operator()(A a, B b, int64_t) const { return store<Out>(fn(load(a), load(b))); }
};

// Integer division and Mod: a zero divisor is recorded (the first one wins) and gives 0.
template <typename I, typename Fn>
struct IntegerDivide {
  Fn fn;
  ErrorSink sink;
  __device__ I operator()(I a, I b, int64_t i) const {
    if (b == I(0)) {
      record_device_error(sink.error, kDivisionByZero, sink.step, i, 0, 0);
      return I(0);
    }
    return fn(a, b);
  }
};

// ---- Kernels ---------------------------------------------------------------------------------

// y[i] = op(x[i], i) for i < n, V elements per access (V = 1: element by element).
template <int V, typename T, typename Out, typename Op>
__global__ void unary_kernel(const T* x, Out* y, int64_t n, Op op) {
  const int64_t packs = n / V;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const Pack<T, V> in = reinterpret_cast<const Pack<T, V>*>(x)[p];
    Pack<Out, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = op(in.v[j], p * V + j);
    reinterpret_cast<Pack<Out, V>*>(y)[p] = out;
  }
  for (int64_t i = packs * V + global_thread(); i < n; i += grid_threads()) y[i] = op(x[i], i);
}

// out[i] = op(a[i], b[i], i): operands of the output's shape.
template <int V, typename A, typename B, typename Out, typename Op>
__global__ void binary_kernel(const A* a, const B* b, Out* out, int64_t n, Op op) {
  const int64_t packs = n / V;
  for (int64_t p = global_thread(); p < packs; p += grid_threads()) {
    const Pack<A, V> pa = reinterpret_cast<const Pack<A, V>*>(a)[p];
    const Pack<B, V> pb = reinterpret_cast<const Pack<B, V>*>(b)[p];
    Pack<Out, V> po;
#pragma unroll
    for (int j = 0; j < V; ++j) po.v[j] = op(pa.v[j], pb.v[j], p * V + j);
    reinterpret_cast<Pack<Out, V>*>(out)[p] = po;
  }
  for (int64_t i = packs * V + global_thread(); i < n; i += grid_threads()) {
    out[i] = op(a[i], b[i], i);
  }
}

template <typename A, typename B, typename Out, typename Op>
__global__ void binary_broadcast_kernel(const A* a, const B* b, Out* out, Layout<2> layout, Op op) {
  for (int64_t i = global_thread(); i < layout.size; i += grid_threads()) {
    int64_t at[2];
    layout_offsets(layout, i, at);
    out[i] = op(a[at[0]], b[at[1]], i);
  }
}

template <typename W>
__global__ void where_kernel(const bool* cond, const W* x, const W* y, W* out, Layout<3> layout) {
  for (int64_t i = global_thread(); i < layout.size; i += grid_threads()) {
    if (layout.contiguous) {
      out[i] = cond[i] ? x[i] : y[i];
    } else {
      int64_t at[3];
      layout_offsets(layout, i, at);
      out[i] = cond[at[0]] ? x[at[1]] : y[at[2]];
    }
  }
}

// ---- Launch helpers --------------------------------------------------------------------------

template <typename T, typename Out, typename Op>
cudaError_t launch_map(const void* x, void* y, int64_t n, Op op, cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  const T* in = static_cast<const T*>(x);
  Out* out = static_cast<Out*>(y);
  constexpr int V = kPackOf<T, Out>;
  if (aligned16(x) && aligned16(y)) {
    unary_kernel<V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(in, out, n, op);
  } else {
    unary_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(in, out, n, op);
  }
  return cudaGetLastError();
}

template <typename A, typename B, typename Out, typename Op>
cudaError_t launch_map2(const void* a, const void* b, void* out, const Layout<2>& layout, Op op,
                        cudaStream_t stream) {
  const int64_t n = layout.size;
  if (n == 0) return cudaGetLastError();
  const A* pa = static_cast<const A*>(a);
  const B* pb = static_cast<const B*>(b);
  Out* po = static_cast<Out*>(out);
  if (!layout.contiguous) {
    binary_broadcast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(pa, pb, po, layout, op);
  } else if (aligned16(a) && aligned16(b) && aligned16(out)) {
    constexpr int V = kPackOf<A, Out> < kPackOf<B, Out> ? kPackOf<A, Out> : kPackOf<B, Out>;
    binary_kernel<V><<<blocks_for((n + V - 1) / V), kThreads, 0, stream>>>(pa, pb, po, n, op);
  } else {
    binary_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(pa, pb, po, n, op);
  }
  return cudaGetLastError();
}

template <typename T, typename Fn>
cudaError_t map_same(const void* x, void* y, int64_t n, Fn fn, cudaStream_t stream) {
  return launch_map<T, T>(x, y, n, UnaryStore<Fn, T, T>{fn}, stream);
}

template <typename Fn>
cudaError_t float_unary(Elem type, const void* x, void* y, int64_t n, Fn fn, cudaStream_t stream) {
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_same<T>(x, y, n, fn, stream);
  });
}

// A float test: bool results.
template <typename Fn>
cudaError_t float_predicate(Elem type, const void* x, void* y, int64_t n, Fn fn,
                            cudaStream_t stream) {
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_map<T, bool>(x, y, n, UnaryStore<Fn, T, bool>{fn}, stream);
  });
}

template <typename Fn>
cudaError_t numeric_unary(Elem type, const void* x, void* y, int64_t n, Fn fn,
                          cudaStream_t stream) {
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return map_same<T>(x, y, n, fn, stream);
  });
}

// Clip's bounds live in device memory: reading them on the host would need a synchronization,
// so each thread reads them (they stay in cache).
template <typename T>
struct DeviceClip {
  const T* low;
  const T* high;
  __device__ T operator()(T x, int64_t) const {
    using X = compute_t<T>;
    const numeric::Clip<X> clip{low ? load(*low) : X{}, high ? load(*high) : X{}, low != nullptr,
                                high != nullptr};
    return store<T>(clip(load(x)));
  }
};

template <typename T>
cudaError_t clip(const void* x, void* y, int64_t n, const UnaryParams& params,
                 cudaStream_t stream) {
  return launch_map<T, T>(
      x, y, n, DeviceClip<T>{static_cast<const T*>(params.low), static_cast<const T*>(params.high)},
      stream);
}

template <typename Fn>
cudaError_t arithmetic(Elem type, const void* a, const void* b, void* out, const Layout<2>& layout,
                       ErrorSink sink, Fn fn, cudaStream_t stream) {
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_map2<T, T, T>(a, b, out, layout, BinaryStore<Fn, T, T, T>{fn, sink}, stream);
  });
}

template <typename Fn>
cudaError_t comparison(Elem type, const void* a, const void* b, void* out, const Layout<2>& layout,
                       Fn fn, cudaStream_t stream) {
  if (type == Elem::kBool) {
    return launch_map2<bool, bool, bool>(a, b, out, layout,
                                         BinaryStore<Fn, bool, bool, bool>{fn, {}}, stream);
  }
  return visit_numeric_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return launch_map2<T, T, bool>(a, b, out, layout, BinaryStore<Fn, T, T, bool>{fn, {}}, stream);
  });
}

// Div, Fmod or FloorMod (`Fn`), integers checked for a zero divisor.
template <typename Fn>
cudaError_t divide(Elem type, const void* a, const void* b, void* out, const Layout<2>& layout,
                   ErrorSink sink, cudaStream_t stream) {
  switch (type) {
    case Elem::kI64:
      return launch_map2<int64_t, int64_t, int64_t>(a, b, out, layout,
                                                    IntegerDivide<int64_t, Fn>{{}, sink}, stream);
    case Elem::kI32:
      return launch_map2<int32_t, int32_t, int32_t>(a, b, out, layout,
                                                    IntegerDivide<int32_t, Fn>{{}, sink}, stream);
    default:
      return arithmetic(type, a, b, out, layout, sink, Fn{}, stream);
  }
}

// An integer base to an integer power, wrapping; 0 to a negative power is recorded and gives 0.
template <typename I, typename E>
struct IntegerPower {
  ErrorSink sink;
  __device__ I operator()(I base, E exponent, int64_t i) const {
    bool undefined = false;
    const I result = numeric::IntegerPow{}(base, static_cast<int64_t>(exponent), undefined);
    if (undefined) record_device_error(sink.error, kZeroToNegativePower, sink.step, i, 0, 0);
    return result;
  }
};

// An integer base to a float power: in f64, truncated back (as on the CPU).
template <typename I, typename E>
struct IntegerBaseFloatPower {
  __device__ I operator()(I base, E exponent, int64_t) const {
    return cast_math::truncate_to_int<I>(
        numeric::pow(static_cast<double>(base), static_cast<double>(load(exponent))));
  }
};

cudaError_t integer_power(Elem type, Elem b_type, const void* a, const void* b, void* out,
                          const Layout<2>& layout, ErrorSink sink, cudaStream_t stream) {
  auto with_base = [&](auto base_tag) -> cudaError_t {
    using I = typename decltype(base_tag)::type;
    switch (b_type) {
      case Elem::kF32:
        return launch_map2<I, float, I>(a, b, out, layout, IntegerBaseFloatPower<I, float>{},
                                        stream);
      case Elem::kF16:
        return launch_map2<I, Float16, I>(a, b, out, layout, IntegerBaseFloatPower<I, Float16>{},
                                          stream);
      case Elem::kBF16:
        return launch_map2<I, BFloat16, I>(a, b, out, layout, IntegerBaseFloatPower<I, BFloat16>{},
                                           stream);
      case Elem::kI64:
        return launch_map2<I, int64_t, I>(a, b, out, layout, IntegerPower<I, int64_t>{sink},
                                          stream);
      case Elem::kI32:
        return launch_map2<I, int32_t, I>(a, b, out, layout, IntegerPower<I, int32_t>{sink},
                                          stream);
      default:
        return cudaErrorInvalidValue;
    }
  };
  if (type == Elem::kI64) return with_base(Tag<int64_t>{});
  if (type == Elem::kI32) return with_base(Tag<int32_t>{});
  return cudaErrorInvalidValue;
}

// The exponent f32, f16, bf16, i64 or i32. A float base computes in its compute type (the
// exponent converted to it), as on the CPU.
cudaError_t power(Elem type, Elem b_type, const void* a, const void* b, void* out,
                  const Layout<2>& layout, ErrorSink sink, cudaStream_t stream) {
  if (type == Elem::kI64 || type == Elem::kI32) {
    return integer_power(type, b_type, a, b, out, layout, sink, stream);
  }
  return visit_float_elem(type, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    auto with_exponent = [&](auto exponent_tag) {
      using E = typename decltype(exponent_tag)::type;
      return launch_map2<T, E, T>(a, b, out, layout, BinaryStore<numeric::FloatPow, T, E, T>{},
                                  stream);
    };
    switch (b_type) {
      case Elem::kF32:
        return with_exponent(Tag<float>{});
      case Elem::kF16:
        return with_exponent(Tag<Float16>{});
      case Elem::kBF16:
        return with_exponent(Tag<BFloat16>{});
      case Elem::kI64:
        return with_exponent(Tag<int64_t>{});
      case Elem::kI32:
        return with_exponent(Tag<int32_t>{});
      default:
        if (b_type != type) return cudaErrorInvalidValue;
        return with_exponent(Tag<T>{});
    }
  });
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, Elem type, const void* x, void* y, int64_t n,
                         const UnaryParams& params, cudaStream_t stream) {
  switch (op) {
    case UnaryOp::kRelu:
      return float_unary(type, x, y, n, numeric::Relu{}, stream);
    case UnaryOp::kLeakyRelu:
      return float_unary(type, x, y, n, numeric::LeakyRelu{params.alpha}, stream);
    case UnaryOp::kSigmoid:
      return float_unary(type, x, y, n, numeric::Sigmoid{}, stream);
    case UnaryOp::kTanh:
      return float_unary(type, x, y, n, numeric::Tanh{}, stream);
    case UnaryOp::kErf:
      return float_unary(type, x, y, n, numeric::Erf{}, stream);
    case UnaryOp::kGeluErf:
      return float_unary(type, x, y, n, numeric::GeluErf{}, stream);
    case UnaryOp::kGeluTanh:
      return float_unary(type, x, y, n, numeric::GeluTanh{}, stream);
    case UnaryOp::kSoftplus:
      return float_unary(type, x, y, n, numeric::Softplus{}, stream);
    case UnaryOp::kHardSigmoid:
      return float_unary(type, x, y, n, numeric::HardSigmoid{params.alpha, params.beta}, stream);
    case UnaryOp::kHardSwish:
      return float_unary(type, x, y, n, numeric::HardSwish{}, stream);
    case UnaryOp::kSoftsign:
      return float_unary(type, x, y, n, numeric::Softsign{}, stream);
    case UnaryOp::kElu:
      return float_unary(type, x, y, n, numeric::Elu{params.alpha}, stream);
    case UnaryOp::kSelu:
      return float_unary(type, x, y, n, numeric::Selu{params.alpha, params.gamma}, stream);
    case UnaryOp::kCelu:
      return float_unary(type, x, y, n, numeric::Celu{params.alpha}, stream);
    case UnaryOp::kMish:
      return float_unary(type, x, y, n, numeric::Mish{}, stream);
    case UnaryOp::kSin:
      return float_unary(type, x, y, n, numeric::Sin{}, stream);
    case UnaryOp::kCos:
      return float_unary(type, x, y, n, numeric::Cos{}, stream);
    case UnaryOp::kTan:
      return float_unary(type, x, y, n, numeric::Tan{}, stream);
    case UnaryOp::kAsin:
      return float_unary(type, x, y, n, numeric::Asin{}, stream);
    case UnaryOp::kAcos:
      return float_unary(type, x, y, n, numeric::Acos{}, stream);
    case UnaryOp::kAtan:
      return float_unary(type, x, y, n, numeric::Atan{}, stream);
    case UnaryOp::kSinh:
      return float_unary(type, x, y, n, numeric::Sinh{}, stream);
    case UnaryOp::kCosh:
      return float_unary(type, x, y, n, numeric::Cosh{}, stream);
    case UnaryOp::kAsinh:
      return float_unary(type, x, y, n, numeric::Asinh{}, stream);
    case UnaryOp::kAcosh:
      return float_unary(type, x, y, n, numeric::Acosh{}, stream);
    case UnaryOp::kAtanh:
      return float_unary(type, x, y, n, numeric::Atanh{}, stream);
    case UnaryOp::kSqrt:
      return float_unary(type, x, y, n, numeric::Sqrt{}, stream);
    case UnaryOp::kExp:
      return float_unary(type, x, y, n, numeric::Exp{}, stream);
    case UnaryOp::kLog:
      return float_unary(type, x, y, n, numeric::Log{}, stream);
    case UnaryOp::kReciprocal:
      // Also f64: the loss scaler's inverse scale is 1 / scale in f64, as GradScaler's.
      if (type == Elem::kF64) return map_same<double>(x, y, n, numeric::Reciprocal{}, stream);
      return float_unary(type, x, y, n, numeric::Reciprocal{}, stream);
    case UnaryOp::kFloor:
      return float_unary(type, x, y, n, numeric::Floor{}, stream);
    case UnaryOp::kCeil:
      return float_unary(type, x, y, n, numeric::Ceil{}, stream);
    case UnaryOp::kRound:
      return float_unary(type, x, y, n, numeric::Round{}, stream);
    case UnaryOp::kNeg:
      return numeric_unary(type, x, y, n, numeric::Neg{}, stream);
    case UnaryOp::kAbs:
      return numeric_unary(type, x, y, n, numeric::Abs{}, stream);
    case UnaryOp::kNot:
      return map_same<bool>(x, y, n, numeric::Not{}, stream);
    case UnaryOp::kClip:
      return visit_numeric_elem(type, [&](auto tag) {
        return clip<typename decltype(tag)::type>(x, y, n, params, stream);
      });
    case UnaryOp::kIsNaN:
      return float_predicate(type, x, y, n, numeric::IsNaN{}, stream);
    case UnaryOp::kIsInf:
      return float_predicate(
          type, x, y, n, numeric::IsInf{params.detect_positive, params.detect_negative}, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_binary(BinaryOp op, Elem type, Elem b_type, const void* a, const void* b,
                          void* out, const Layout<2>& layout, ErrorSink sink, cudaStream_t stream) {
  switch (op) {
    case BinaryOp::kAdd:
      return arithmetic(type, a, b, out, layout, sink, numeric::Add{}, stream);
    case BinaryOp::kSub:
      return arithmetic(type, a, b, out, layout, sink, numeric::Sub{}, stream);
    case BinaryOp::kMul:
      return arithmetic(type, a, b, out, layout, sink, numeric::Mul{}, stream);
    case BinaryOp::kDiv:
      return divide<numeric::Div>(type, a, b, out, layout, sink, stream);
    case BinaryOp::kFmod:
      return divide<numeric::Fmod>(type, a, b, out, layout, sink, stream);
    case BinaryOp::kFloorMod:
      return divide<numeric::FloorMod>(type, a, b, out, layout, sink, stream);
    case BinaryOp::kPow:
      return power(type, b_type, a, b, out, layout, sink, stream);
    case BinaryOp::kMin:
      return arithmetic(type, a, b, out, layout, sink, numeric::Min{}, stream);
    case BinaryOp::kMax:
      return arithmetic(type, a, b, out, layout, sink, numeric::Max{}, stream);
    case BinaryOp::kPRelu:
      return visit_float_elem(type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return launch_map2<T, T, T>(a, b, out, layout,
                                    BinaryStore<numeric::PRelu, T, T, T>{{}, sink}, stream);
      });
    case BinaryOp::kEqual:
      return comparison(type, a, b, out, layout, numeric::Equal{}, stream);
    case BinaryOp::kLess:
      return comparison(type, a, b, out, layout, numeric::Less{}, stream);
    case BinaryOp::kGreater:
      return comparison(type, a, b, out, layout, numeric::Greater{}, stream);
    case BinaryOp::kLessOrEqual:
      return comparison(type, a, b, out, layout, numeric::LessOrEqual{}, stream);
    case BinaryOp::kGreaterOrEqual:
      return comparison(type, a, b, out, layout, numeric::GreaterOrEqual{}, stream);
    case BinaryOp::kAnd:
      return launch_map2<bool, bool, bool>(a, b, out, layout,
                                           BinaryStore<numeric::And, bool, bool, bool>{}, stream);
    case BinaryOp::kOr:
      return launch_map2<bool, bool, bool>(a, b, out, layout,
                                           BinaryStore<numeric::Or, bool, bool, bool>{}, stream);
    case BinaryOp::kXor:
      return launch_map2<bool, bool, bool>(a, b, out, layout,
                                           BinaryStore<numeric::Xor, bool, bool, bool>{}, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_where(int element_bytes, const bool* cond, const void* x, const void* y,
                         void* out, const Layout<3>& layout, cudaStream_t stream) {
  if (layout.size == 0) return cudaGetLastError();
  const unsigned blocks = blocks_for(layout.size);
  switch (element_bytes) {
    case 1:
      where_kernel<<<blocks, kThreads, 0, stream>>>(cond, static_cast<const uint8_t*>(x),
                                                    static_cast<const uint8_t*>(y),
                                                    static_cast<uint8_t*>(out), layout);
      break;
    case 2:
      where_kernel<<<blocks, kThreads, 0, stream>>>(cond, static_cast<const uint16_t*>(x),
                                                    static_cast<const uint16_t*>(y),
                                                    static_cast<uint16_t*>(out), layout);
      break;
    case 4:
      where_kernel<<<blocks, kThreads, 0, stream>>>(cond, static_cast<const uint32_t*>(x),
                                                    static_cast<const uint32_t*>(y),
                                                    static_cast<uint32_t*>(out), layout);
      break;
    case 8:
      where_kernel<<<blocks, kThreads, 0, stream>>>(cond, static_cast<const uint64_t*>(x),
                                                    static_cast<const uint64_t*>(y),
                                                    static_cast<uint64_t*>(out), layout);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

// ---- Cast ------------------------------------------------------------------------------------

namespace {

// The target type is a run-time switch inside the kernel (the same branch for every thread), so
// one kernel per source type serves every target.
template <typename From>
__global__ void cast_kernel(const From* x, void* y, int64_t n, Elem to, bool saturate) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const From v = x[i];
    switch (to) {
      case Elem::kF32:
        static_cast<float*>(y)[i] = cast_math::cast<From, float>(v, saturate);
        break;
      case Elem::kF16:
        static_cast<Float16*>(y)[i] = cast_math::cast<From, Float16>(v, saturate);
        break;
      case Elem::kBF16:
        static_cast<BFloat16*>(y)[i] = cast_math::cast<From, BFloat16>(v, saturate);
        break;
      case Elem::kF64:
        static_cast<double*>(y)[i] = cast_math::cast<From, double>(v, saturate);
        break;
      case Elem::kI64:
        static_cast<int64_t*>(y)[i] = cast_math::cast<From, int64_t>(v, saturate);
        break;
      case Elem::kI32:
        static_cast<int32_t*>(y)[i] = cast_math::cast<From, int32_t>(v, saturate);
        break;
      case Elem::kI8:
        static_cast<int8_t*>(y)[i] = cast_math::cast<From, int8_t>(v, saturate);
        break;
      case Elem::kU8:
        static_cast<uint8_t*>(y)[i] = cast_math::cast<From, uint8_t>(v, saturate);
        break;
      case Elem::kBool:
        static_cast<bool*>(y)[i] = cast_math::cast<From, bool>(v, saturate);
        break;
      case Elem::kF8E4M3FN:
        static_cast<F8E4M3FN*>(y)[i] = cast_math::cast<From, F8E4M3FN>(v, saturate);
        break;
      case Elem::kF8E5M2:
        static_cast<F8E5M2*>(y)[i] = cast_math::cast<From, F8E5M2>(v, saturate);
        break;
    }
  }
}

template <typename From, typename To>
struct CastTo {
  bool saturate;
  __device__ To operator()(From v, int64_t) const { return cast_math::cast<From, To>(v, saturate); }
};

}  // namespace

cudaError_t launch_cast(Elem from, Elem to, const void* x, void* y, int64_t n, bool saturate,
                        cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  if (from == to) {
    if (x == y) return cudaGetLastError();  // in place: nothing to move
    return cudaMemcpyAsync(y, x, static_cast<size_t>(n) * elem_size(from), cudaMemcpyDeviceToDevice,
                           stream);
  }
  // The casts mixed precision inserts (between f32, f16 and bf16) get the vectorized launcher;
  // the rest share one kernel per source type.
  auto compute_float = [](Elem e) {
    return e == Elem::kF32 || e == Elem::kF16 || e == Elem::kBF16;
  };
  if (compute_float(from) && compute_float(to)) {
    return visit_float_elem(from, [&](auto from_tag) {
      return visit_float_elem(to, [&](auto to_tag) {
        using From = typename decltype(from_tag)::type;
        using To = typename decltype(to_tag)::type;
        return launch_map<From, To>(x, y, n, CastTo<From, To>{saturate}, stream);
      });
    });
  }
  return visit_elem(from, [&](auto tag) {
    using From = typename decltype(tag)::type;
    cast_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const From*>(x), y, n, to,
                                                        saturate);
    return cudaGetLastError();
  });
}

// ---- Dropout and fill ------------------------------------------------------------------------

namespace {

template <typename T>
__global__ void dropout_kernel(const T* x, T* y, bool* mask, int64_t n, DropoutArgs args,
                               ErrorSink sink) {
  const double ratio = read_ratio(args);
  const bool training = args.training != nullptr && *args.training;
  if (!training || ratio == 0) {
    for (int64_t i = global_thread(); i < n; i += grid_threads()) {
      y[i] = x[i];
      if (mask != nullptr) mask[i] = true;
    }
    return;
  }
  if (!(ratio > 0 && ratio < 1)) {
    if (global_thread() == 0)
      record_device_error(sink.error, kInvalidDropoutRatio, sink.step, 0, 0, 0);
    return;
  }
  // The scale in the compute type (f32), as the CPU kernel rounds it.
  const float scale = static_cast<float>(1.0 / (1.0 - ratio));
  const uint64_t key = numeric::random_key(args.seed, *args.random_stream);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const bool keep = numeric::dropout_keeps(key, i, ratio);
    y[i] = store<T>(load(x[i]) * (keep ? scale : 0.0f));
    if (mask != nullptr) mask[i] = keep;
  }
}

// Element i of a probability operand of any float type, as the double the CPU reads.
__device__ __forceinline__ double load_probability(const void* p, Elem type, int64_t i) {
  switch (type) {
    case Elem::kF16:
      return static_cast<float>(static_cast<const Float16*>(p)[i]);
    case Elem::kBF16:
      return static_cast<float>(static_cast<const BFloat16*>(p)[i]);
    case Elem::kF64:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<const float*>(p)[i];
  }
}

template <typename T>
__global__ void random_kernel(T* y, int64_t n, RandomArgs args, ErrorSink sink) {
  const uint64_t key = numeric::random_key(args.seed, *args.random_stream);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    double value;
    if (args.draw == RandomDraw::kUniform) {
      value = numeric::uniform_draw(key, i, numeric::digits_of<T>(), args.a, args.b);
    } else if (args.draw == RandomDraw::kNormal) {
      value = numeric::normal_draw(key, i, args.a, args.b);
    } else {
      const double p = load_probability(args.p, args.p_type, i);
      if (!(p >= 0 && p <= 1)) {
        record_device_error(sink.error, kInvalidProbability, sink.step, i, 0, 0);
      }
      value = numeric::bernoulli_draw(key, i, p) ? 1.0 : 0.0;
    }
    y[i] = cast_math::convert<T>(value, true);
  }
}

template <typename W>
__global__ void fill_kernel(W* out, int64_t n, W value) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = value;
}

}  // namespace

cudaError_t launch_dropout(Elem type, const void* x, void* y, bool* mask, int64_t n,
                           const DropoutArgs& args, ErrorSink sink, cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                           static_cast<T*>(y), mask, n, args, sink);
    return cudaGetLastError();
  });
}

cudaError_t launch_random(Elem type, void* y, int64_t n, const RandomArgs& args, ErrorSink sink,
                          cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  return visit_float_elem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), n, args, sink);
    return cudaGetLastError();
  });
}

cudaError_t launch_fill(void* out, int64_t n, int element_bytes, uint64_t value,
                        cudaStream_t stream) {
  if (n == 0) return cudaGetLastError();
  const unsigned blocks = blocks_for(n);
  switch (element_bytes) {
    case 1:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint8_t*>(out), n,
                                                   static_cast<uint8_t>(value));
      break;
    case 2:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint16_t*>(out), n,
                                                   static_cast<uint16_t>(value));
      break;
    case 4:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint32_t*>(out), n,
                                                   static_cast<uint32_t>(value));
      break;
    case 8:
      fill_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint64_t*>(out), n, value);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ampc::runtime::cuda
