// The storage types of the element types and the type each computes in, for every backend:
// f16 and bf16 (and fp8) are read into f32 exactly and a result is rounded once when stored
// back; f32 computes in f32, f64 in f64, integers and bool in themselves. Host and device.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ampc/float_types.h"
#include "ampc/host_device.h"
#include "compiler/float8.h"

namespace ampc {

// Storage of the fp8 element types: the bits, converted by compiler/float8.h. Nothing computes
// in them; Cast moves values in and out.
struct F8E4M3FN {
  uint8_t bits;
};
struct F8E5M2 {
  uint8_t bits;
};

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
AMPC_HD compute_t<T> load(T value) {
  return static_cast<compute_t<T>>(value);
}
template <typename T>
AMPC_HD T store(compute_t<T> value) {
  return T(value);
}

template <typename T>
inline constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

}  // namespace ampc
