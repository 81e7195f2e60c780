// The random draws of Dropout and of the random ops (RandomUniform, RandomNormal, their Like
// forms, Bernoulli), written once for the CPU and the CUDA kernels (AMPC_HD).
//
// A node's draw is a function of (key, element index) alone, the key of (the node's seed, the
// run's random stream): so it depends on neither the thread count nor the device, a run
// replays its draws, and each step (a new stream) draws new ones. It is not PyTorch's (or ONNX
// Runtime's) generator: a model that draws gives other numbers than PyTorch, from the same
// distribution. Element i's words are SplitMix64's finalizer of key + i (Box-Muller takes
// words 2i and 2i + 1).
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/element_types.h"
#include "runtime/numeric.h"

namespace ampc::numeric {

// SplitMix64's finalizer: a bijection of 64-bit words whose outputs look independent.
AMPC_HD uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The key of one node's draw: its seed and the run's random stream.
AMPC_HD uint64_t random_key(uint64_t seed, uint64_t random_stream) {
  return mix64(seed + 0x9e3779b97f4a7c15ull * random_stream);
}

// Word w of a draw.
AMPC_HD uint64_t random_word(uint64_t key, uint64_t w) { return mix64(key + w); }

// A uniform value in [0, 1) of `digits` significant bits (1 to 53): the word's top bits times
// 2^-digits. With the digits of the output type (24 for f32, 11 for f16, 8 for bf16) the value
// is exact in that type, so it never rounds up to 1.
AMPC_HD double uniform_of(uint64_t word, int digits) {
  return static_cast<double>(word >> (64 - digits)) / static_cast<double>(uint64_t{1} << digits);
}

// The significant bits of a float element type: the digits of its uniform draws.
template <typename T>
AMPC_HD constexpr int digits_of() {
  static_assert(is_float_v<T>, "draws are of a float type");
  if constexpr (std::is_same_v<T, double>) {
    return 53;
  } else if constexpr (std::is_same_v<T, float>) {
    return 24;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return 11;
  } else {
    return 8;  // BFloat16
  }
}

// Dropout: whether element i is kept, a 53-bit uniform of word i at least `ratio`.
AMPC_HD bool dropout_keeps(uint64_t key, int64_t i, double ratio) {
  return uniform_of(random_word(key, static_cast<uint64_t>(i)), 53) >= ratio;
}

// RandomUniform(Like): low + (high - low) * u in f64, u of the output type's digits.
AMPC_HD double uniform_draw(uint64_t key, int64_t i, int digits, double low, double high) {
  return low + (high - low) * uniform_of(random_word(key, static_cast<uint64_t>(i)), digits);
}

// RandomNormal(Like): a standard normal by Box-Muller in f64 from words 2i and 2i + 1,
// sqrt(-2 log(u1)) cos(2 pi u2) with u1 in (0, 1] (so the log is finite), u2 in [0, 1); then
// mean + scale * z. The logarithm and cosine are the math library's in f64 (within an ulp
// of each other on the host and the device, which rounding to f32 or below nearly always hides).
AMPC_HD double normal_draw(uint64_t key, int64_t i, double mean, double scale) {
  const uint64_t w = 2 * static_cast<uint64_t>(i);
  const double u1 = 1.0 - uniform_of(random_word(key, w), 53);
  const double u2 = uniform_of(random_word(key, w + 1), 53);
  const double two_pi = 6.283185307179586;  // 2 pi rounded to f64
  return mean + scale * (sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

// Bernoulli: 1 with probability p (a 53-bit uniform of word i below p), else 0. A p outside
// [0, 1] (or NaN) is the caller's error to report.
AMPC_HD bool bernoulli_draw(uint64_t key, int64_t i, double p) {
  return uniform_of(random_word(key, static_cast<uint64_t>(i)), 53) < p;
}

}  // namespace ampc::numeric
