#include "runtime/cpu/vector_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace ampc::runtime::cpu {
namespace {

template <typename X>
void exp_scalar(const X* x, X* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The method: with N = 32, z = x N / ln 2 = k + r (k the nearest integer, |r| <= 1/2), and
// exp(x) = 2^(k/N) 2^(r/N) ~= s (c0 r^3 + c1 r^2 + c2 r + 1), s = 2^(k/N) built from the table
// entry k mod N and k's multiple of N in the exponent field. ExpTable::entry[i] is the bits of
// the double nearest 2^(i/N) less i << 47, so adding k << 47 lands floor(k/N) in the exponent.
constexpr int kTableBits = 5;
constexpr double kN = 1 << kTableBits;
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * kN;
constexpr double kShift = 0x1.8p+52;  // adding it rounds to an integer, kept in the low bits
constexpr double kC0 = 0x1.c6af84b912394p-5 / kN / kN / kN;
constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / kN / kN;
constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / kN;

struct ExpTable {
  alignas(32) int64_t entry[1 << kTableBits];
  ExpTable() {
    for (int i = 0; i < (1 << kTableBits); ++i) {
      // exp2l's 64-bit significand, rounded to double (the exhaustive test in
      // tests/runtime/cpu/vector_math_test.cc checks every result this table gives).
      const double power = static_cast<double>(exp2l(static_cast<long double>(i) / kN));
      entry[i] = std::bit_cast<int64_t>(power) - (int64_t{i} << (52 - kTableBits));
    }
  }
};

const ExpTable& exp_table() {
  static const ExpTable table;
  return table;
}

bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// Four lanes of the method in double precision.
__attribute__((target("avx2,fma"))) inline __m128 exp4(__m128 x, const int64_t* table) {
  // z = InvLn2N * x is never rounded on its own: the C library's FMA build contracts both of
  // its uses, kd = z + shift and r = z - kd, into one fused operation each.
  const __m256d inv_ln2n = _mm256_set1_pd(kInvLn2N);
  const __m256d xd = _mm256_cvtps_pd(x);
  __m256d kd = _mm256_fmadd_pd(inv_ln2n, xd, _mm256_set1_pd(kShift));
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_fmsub_pd(inv_ln2n, xd, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x((1 << kTableBits) - 1));
  __m256i bits = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(table), index, 8);
  bits = _mm256_add_epi64(bits, _mm256_slli_epi64(ki, 52 - kTableBits));
  const __m256d odd = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d even = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  const __m256d poly = _mm256_fmadd_pd(odd, _mm256_mul_pd(r, r), even);
  return _mm256_cvtpd_ps(_mm256_mul_pd(poly, _mm256_castsi256_pd(bits)));
}

__attribute__((target("avx2,fma"))) void exp_avx2(const float* x, float* y, int64_t n) {
  const int64_t* table = exp_table().entry;
  // The C library's own bounds: below ln(2^-150) expf returns +0 (an underflow), above
  // ln(FLT_MAX) +infinity (an overflow); -infinity and +infinity fall there too. Between, its
  // method is the one here, subnormal results included.
  const __m256 underflow = _mm256_set1_ps(-0x1.9fe368p6f);
  const __m256 overflow = _mm256_set1_ps(0x1.62e42ep6f);
  const __m256 infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m128 low = exp4(_mm256_castps256_ps128(v), table);
    const __m128 high = exp4(_mm256_extractf128_ps(v, 1), table);
    __m256 result = _mm256_set_m128(high, low);
    result = _mm256_andnot_ps(_mm256_cmp_ps(v, underflow, _CMP_LT_OQ), result);
    result = _mm256_blendv_ps(result, infinity, _mm256_cmp_ps(v, overflow, _CMP_GT_OQ));
    _mm256_storeu_ps(y + i, result);
    // NaN lanes (rare) take the C library's NaN.
    const int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    for (int j = 0; nan != 0 && j < 8; ++j) {
      if ((nan >> j & 1) != 0) y[i + j] = std::exp(x[i + j]);
    }
  }
  // Leave no dirty upper halves to the SSE code of the rest of the build.
  _mm256_zeroupper();
  exp_scalar(x + i, y + i, n - i);
}
#endif

}  // namespace

void exp_array(const float* x, float* y, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2_fma()) return exp_avx2(x, y, n);
#endif
  exp_scalar(x, y, n);
}

void exp_array(const double* x, double* y, int64_t n) { exp_scalar(x, y, n); }

namespace {

// numeric::Sigmoid takes exp(-x) for x >= 0 and exp(x) otherwise, that is exp(-|x|), then
// 1 / (1 + e) or e / (1 + e). Both loops are branch-free (the signs of activations are a coin
// toss for a branch predictor) and vectorize; x = -0 gives exp(-0) = exp(+0), as the formula.
template <typename X>
void sigmoid_blocks(const X* x, X* y, int64_t n) {
  constexpr int64_t kBlock = 256;
  X e[kBlock];
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t count = std::min(kBlock, n - first);
    const X* in = x + first;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) e[j] = -std::fabs(in[j]);
    exp_array(e, e, count);
    X* out = y + first;
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      const X numerator = in[j] >= X(0) ? X(1) : e[j];
      out[j] = numerator / (X(1) + e[j]);
    }
  }
}

}  // namespace

void sigmoid_array(const float* x, float* y, int64_t n) { sigmoid_blocks(x, y, n); }
void sigmoid_array(const double* x, double* y, int64_t n) { sigmoid_blocks(x, y, n); }

}  // namespace ampc::runtime::cpu
