#include "runtime/cpu/f16_convert.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace ampc::runtime::cpu {
namespace {

void widen_scalar(const Float16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

void narrow_scalar(const float* in, Float16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Float16(in[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
static_assert(sizeof(Float16) == 2, "Float16 is its 16 bits");

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

__attribute__((target("avx,f16c"))) void widen_f16c(const Float16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(half));
  }
  // Leave no dirty upper halves behind: the rest of the build is SSE code, which would pay for
  // every instruction until the next vzeroupper.
  _mm256_zeroupper();
  widen_scalar(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void narrow_f16c(const float* in, Float16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), half);
  }
  _mm256_zeroupper();
  narrow_scalar(in + i, out + i, n - i);
}
#endif

}  // namespace

void widen_f16(const Float16* in, float* out, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_f16c()) return widen_f16c(in, out, n);
#endif
  widen_scalar(in, out, n);
}

void narrow_to_f16(const float* in, Float16* out, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_f16c()) return narrow_f16c(in, out, n);
#endif
  narrow_scalar(in, out, n);
}

}  // namespace ampc::runtime::cpu
