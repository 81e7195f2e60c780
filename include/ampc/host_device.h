// AMPC_HD marks a function compiled for the host and, under nvcc, for the device too: the
// per-element math both backends share (float conversions, activations, the Dropout hash, the
// loss-scale rule) is written once, with it. Headers that use it stay within C++17 (nvcc
// compiles the CUDA sources as C++17) and include nothing from the IR.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define AMPC_HD __host__ __device__ __forceinline__
#else
#define AMPC_HD inline
#endif

namespace ampc {

// The bits of an f32 and back (std::bit_cast, which device code in C++17 lacks).
AMPC_HD uint32_t f32_bits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

AMPC_HD float f32_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

}  // namespace ampc
