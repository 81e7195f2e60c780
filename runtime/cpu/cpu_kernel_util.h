// What the CPU kernels share: the element types they are written over, the compute type of
// each, typed registration, and a parallel loop whose results do not depend on the thread count.
//
// The numeric contract: a kernel over Float16 or BFloat16 converts each element it reads to f32,
// computes in f32 and rounds once when it stores (round to nearest even). f32 kernels compute in
// f32 and f64 kernels in f64. GEMM-like ops accumulate in f32 (f64 for f64).
#pragma once

#include <cstdint>
#include <functional>
#include <type_traits>

#include "compiler/float_types.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cpu {

// The C++ type that stores one element of each DType the CPU kernels handle.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, double>) return DType::kF64;
  if constexpr (std::is_same_v<T, Float16>) return DType::kF16;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kI64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kI32;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kI8;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kU8;
  if constexpr (std::is_same_v<T, bool>) return DType::kBool;
}

// The type a kernel computes in for elements of type T: f32 for f32, f16 and bf16; f64 for f64;
// the type itself for integers and bool.
template <typename T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Float16> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeType<T>::type;

// Reads an element into its compute type, and rounds a computed value once into storage.
template <typename T>
compute_t<T> load(T value) {
  return static_cast<compute_t<T>>(value);
}
template <typename T>
T store(compute_t<T> value) {
  return T(value);
}

template <typename T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// Registers one KernelDef per type in Ts, each a copy of `base` keyed on that type, with the
// function `make.template operator()<T>()` returns:
//   add_kernels<float, double, Float16, BFloat16>(
//       registry, {.op = "Relu"}, []<typename T>() { return &relu<T>; });
template <typename... Ts, typename Make>
void add_kernels(KernelRegistry& registry, const KernelDef& base, Make make) {
  (
      [&] {
        KernelDef def = base;
        def.device = Device::kCpu;
        def.dtypes = {dtype_of<Ts>()};
        def.fn = make.template operator()<Ts>();
        registry.add(std::move(def));
      }(),
      ...);
}

// Calls body(begin, end) on disjoint ranges covering [0, n), in parallel when n is at least
// `grain` per thread. Each index is handled by exactly one call and nothing is combined across
// calls, so a kernel that writes only its own indices gives the same bits on any thread count.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

// The number of threads parallel_for uses (at least 1).
int cpu_threads();
// Sets it (0: one per core). For tests that check results do not depend on it.
void set_cpu_threads(int threads);

}  // namespace ampc::runtime::cpu
