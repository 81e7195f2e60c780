// MatMul and Gemm on the CPU backend against a naive f64 product written here, against exact
// sums (small integers times powers of two, so every accumulation order gives the same bits),
// and, for f16/bf16, bit for bit against "upcast to f32, the f32 GEMM core, round once".
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/cpu/gemm_core.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using runtime::cpu::GemmBatch;
using runtime::cpu::GemmDims;

using testing::bits_of;
using testing::on_cpu_threads;
using testing::random_values;
using testing::round_to;
using testing::run_op;
using testing::upcast;

// Small integers times powers of two: products and all partial sums of a short dot product are
// exact in f32, so the sum does not depend on its order.
std::vector<double> exact_values(int64_t count, uint32_t seed) {
  return testing::exact_values(count, seed, /*max_mantissa=*/31, /*max_exponent=*/3);
}

Tensor tensor(DType dtype, Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(dtype, std::move(shape), values);
}

// A naive row-major [m,k] x [k,n] product in f64, with the error bound of an f32 sum of k terms
// (k * 2^-24 * sum |a||b|, doubled for slack) per element.
struct Reference {
  std::vector<double> value;
  std::vector<double> bound;
};

Reference naive_product(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                        int64_t k, int64_t n, bool trans_a = false, bool trans_b = false) {
  Reference r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = trans_a ? a[p * m + i] : a[i * k + p];
        const double y = trans_b ? b[j * k + p] : b[p * n + j];
        sum += x * y;
        magnitude += std::abs(x * y);
      }
      r.value[i * n + j] = sum;
      r.bound[i * n + j] = 2.0 * (k + 1) * std::ldexp(magnitude, -24) + 1e-30;
    }
  }
  return r;
}

void expect_within(const Tensor& actual, const Reference& expected) {
  ASSERT_EQ(actual.num_elements(), static_cast<int64_t>(expected.value.size()));
  for (int64_t i = 0; i < actual.num_elements(); ++i) {
    EXPECT_NEAR(actual.element_as_double(i), expected.value[i], expected.bound[i])
        << "element " << i;
  }
}

TEST(MatMulKernel, F32MatchesF64ReferenceWithinSumErrorBound) {
  const std::vector<double> a = random_values(7 * 300, 1), b = random_values(300 * 9, 2);
  const Tensor y =
      run_op("MatMul", "", {tensor(DType::kF32, {7, 300}, a), tensor(DType::kF32, {300, 9}, b)},
             {DType::kF32, {7, 9}});
  expect_within(y, naive_product(a, b, 7, 300, 9));
}

TEST(MatMulKernel, F64MatchesF64ReferenceTightly) {
  const std::vector<double> a = random_values(5 * 64, 3), b = random_values(64 * 6, 4);
  const Tensor y =
      run_op("MatMul", "", {tensor(DType::kF64, {5, 64}, a), tensor(DType::kF64, {64, 6}, b)},
             {DType::kF64, {5, 6}});
  const Reference r = naive_product(a, b, 5, 64, 6);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR(y.element_as_double(i), r.value[i], 1e-12) << i;
  }
}

// [2,1,3,4] x [5,4,2] -> [2,5,3,2]: A broadcasts along dim 1, B along the new leading dim.
TEST(MatMulKernel, BroadcastsBatchDims) {
  const std::vector<double> a = exact_values(2 * 3 * 4, 5), b = exact_values(5 * 4 * 2, 6);
  const Tensor y = run_op("MatMul", "",
                          {tensor(DType::kF32, {2, 1, 3, 4}, a), tensor(DType::kF32, {5, 4, 2}, b)},
                          {DType::kF32, {2, 5, 3, 2}});
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      const std::vector<double> a_i(a.begin() + i * 12, a.begin() + (i + 1) * 12);
      const std::vector<double> b_j(b.begin() + j * 8, b.begin() + (j + 1) * 8);
      const Reference r = naive_product(a_i, b_j, 3, 4, 2);
      for (int64_t e = 0; e < 6; ++e) {
        EXPECT_EQ(y.element_as_double((i * 5 + j) * 6 + e), r.value[e]) << i << "," << j;
      }
    }
  }
}

// [3,1,2,4] x [1,2,4,3]: both operands broadcast, and B's batch is not shared by all products.
TEST(MatMulKernel, BroadcastsBothOperands) {
  const std::vector<double> a = exact_values(3 * 2 * 4, 7), b = exact_values(2 * 4 * 3, 8);
  const Tensor y = run_op(
      "MatMul", "", {tensor(DType::kF64, {3, 1, 2, 4}, a), tensor(DType::kF64, {1, 2, 4, 3}, b)},
      {DType::kF64, {3, 2, 2, 3}});
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      const std::vector<double> a_i(a.begin() + i * 8, a.begin() + (i + 1) * 8);
      const std::vector<double> b_j(b.begin() + j * 12, b.begin() + (j + 1) * 12);
      const Reference r = naive_product(a_i, b_j, 2, 4, 3);
      for (int64_t e = 0; e < 6; ++e) {
        EXPECT_EQ(y.element_as_double((i * 2 + j) * 6 + e), r.value[e]) << i << "," << j;
      }
    }
  }
}

TEST(MatMulKernel, OneDimensionalOperands) {
  const std::vector<double> v = exact_values(4, 9), m = exact_values(2 * 4 * 3, 10);
  // [4] x [2,4,3] -> [2,3]: v is a row vector for each of the two matrices.
  const Tensor vm =
      run_op("MatMul", "", {tensor(DType::kF32, {4}, v), tensor(DType::kF32, {2, 4, 3}, m)},
             {DType::kF32, {2, 3}});
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<double> m_i(m.begin() + i * 12, m.begin() + (i + 1) * 12);
    const Reference r = naive_product(v, m_i, 1, 4, 3);
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(vm.element_as_double(i * 3 + e), r.value[e]);
  }
  // [2,3,4] x [4] -> [2,3]: v is a column vector.
  const std::vector<double> m2 = exact_values(2 * 3 * 4, 11);
  const Tensor mv =
      run_op("MatMul", "", {tensor(DType::kF32, {2, 3, 4}, m2), tensor(DType::kF32, {4}, v)},
             {DType::kF32, {2, 3}});
  const Reference r2 = naive_product(m2, v, 6, 4, 1);
  for (int64_t e = 0; e < 6; ++e) EXPECT_EQ(mv.element_as_double(e), r2.value[e]);
  // [4] x [4] -> []: a dot product.
  const Tensor dot = run_op(
      "MatMul", "", {tensor(DType::kF32, {4}, v), tensor(DType::kF32, {4}, v)}, {DType::kF32, {}});
  EXPECT_EQ(dot.element_as_double(0), naive_product(v, v, 1, 4, 1).value[0]);
}

// Every partial sum is exact in f32, so the f16/bf16 result must be the exact f64 sum rounded
// once. K = 48 sums of products up to 31*31*64 reach beyond 2048 (f16) and 256 (bf16), where
// the rounding to the output type is not exact.
TEST(MatMulKernel, LowPrecisionExactSumsRoundOnce) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const std::vector<double> a = exact_values(6 * 48, 12), b = exact_values(48 * 5, 13);
    const Tensor y = run_op("MatMul", "", {tensor(dtype, {6, 48}, a), tensor(dtype, {48, 5}, b)},
                            {dtype, {6, 5}});
    const Reference r = naive_product(a, b, 6, 48, 5);
    bool some_inexact = false;
    for (int64_t i = 0; i < 30; ++i) {
      const float exact = static_cast<float>(r.value[i]);
      ASSERT_EQ(static_cast<double>(exact), r.value[i]);  // the test's premise
      EXPECT_EQ(y.data<uint16_t>()[i], round_to(dtype, exact)) << dtype_name(dtype) << " " << i;
      some_inexact |= tensor(dtype, {}, {r.value[i]}).element_as_double(0) != r.value[i];
    }
    EXPECT_TRUE(some_inexact) << "the sums should exercise rounding";
  }
}

// Random (inexact) values spanning several GEMM tiles: the f16/bf16 kernel equals upcasting in
// the test, the f32 GEMM core, and one rounding per element.
TEST(MatMulKernel, LowPrecisionEqualsF32CoreRoundedOnce) {
  const int64_t m = 150, k = 40, n = 300;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor a = tensor(dtype, {m, k}, random_values(m * k, 14));
    const Tensor b = tensor(dtype, {k, n}, random_values(k * n, 15));
    const Tensor y = run_op("MatMul", "", {a, b}, {dtype, {m, n}});
    const std::vector<float> a32 = upcast(a), b32 = upcast(b);
    std::vector<float> p(m * n);
    runtime::cpu::gemm({.m = m, .n = n, .k = k}, GemmBatch::strided(1, 0, 0, 0), a32.data(),
                       b32.data(), p.data());
    std::vector<uint16_t> expected;
    for (float v : p) expected.push_back(round_to(dtype, v));
    EXPECT_EQ(bits_of(y), expected) << dtype_name(dtype);
  }
}

// f16's largest finite value is 65504; sums from 65520 up round to inf, below stay finite.
TEST(MatMulKernel, F16OverflowsToInfAndUnderflowsWhereIeeeSays) {
  const Tensor a =
      tensor(DType::kF16, {4, 2}, {65504, 15, 65504, 16, -65504, -16, 0x1p-14, 0x1p-14});
  const Tensor b = tensor(DType::kF16, {2, 2}, {1, 0x1p-12, 1, 0x1p-10});
  const Tensor y = run_op("MatMul", "", {a, b}, {DType::kF16, {4, 2}});
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(y.element_as_double(0), 65504.0);  // 65519 rounds down
  EXPECT_EQ(y.element_as_double(2), inf);      // 65520 is the first to round to inf
  EXPECT_EQ(y.element_as_double(4), -inf);
  // 2^-14 * 2^-12 + 2^-14 * 2^-10 = 2^-26 + 2^-24: 1.25 times the smallest subnormal, rounds to
  // it; 2^-14 * 1 + 2^-14 * 1 = 2^-13 is normal.
  EXPECT_EQ(y.element_as_double(7), 0x1p-24);
  EXPECT_EQ(y.element_as_double(6), 0x1p-13);
}

TEST(MatMulKernel, F16TinyProductsUnderflowToZero) {
  const Tensor a = tensor(DType::kF16, {1, 1}, {0x1p-14});
  const Tensor b = tensor(DType::kF16, {1, 2}, {0x1p-12, -0x1p-11});
  const Tensor y = run_op("MatMul", "", {a, b}, {DType::kF16, {1, 2}});
  EXPECT_EQ(y.data<uint16_t>()[0], 0x0000);  // 2^-26 < half of 2^-24
  EXPECT_EQ(y.data<uint16_t>()[1], 0x8000);  // -2^-25 is the tie: to even, -0
}

TEST(MatMulKernel, IntegersAreExactAndWrap) {
  const Tensor a = Tensor::from_i64({2, 3}, {1, -2, 3, 4, 5, -6});
  const Tensor b = Tensor::from_i64({3, 2}, {7, 8, 9, 10, -11, 12});
  const Tensor y = run_op("MatMul", "", {a, b}, {DType::kI64, {2, 2}});
  EXPECT_EQ(y.to_i64_vector(), (std::vector<int64_t>{1 * 7 - 2 * 9 - 3 * 11, 8 - 20 + 36,
                                                     28 + 45 + 66, 32 + 50 - 72}));
  Tensor big(TensorType{DType::kI32, {1, 2}});
  big.set_element_i64(0, std::numeric_limits<int32_t>::max());
  big.set_element_i64(1, 1);
  Tensor ones(TensorType{DType::kI32, {2, 1}});
  ones.set_element_i64(0, 1);
  ones.set_element_i64(1, 1);
  const Tensor wrapped = run_op("MatMul", "", {big, ones}, {DType::kI32, {1, 1}});
  EXPECT_EQ(wrapped.element_as_i64(0), std::numeric_limits<int32_t>::min());
}

// The f32 GEMM core gives the same bits on any thread count (OpenBLAS's own threading does not,
// which is why the core tiles the output itself).
TEST(GemmCore, BitsDoNotDependOnThreadCount) {
  const int64_t m = 256, n = 512, k = 384;
  std::vector<float> a(m * k), b(k * n);
  std::mt19937 rng(16);
  std::normal_distribution<float> normal;
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  auto product = [&](int threads, bool trans_b) {
    return on_cpu_threads(threads, [&] {
      std::vector<float> c(m * n);
      runtime::cpu::gemm({.m = m, .n = n, .k = k, .trans_b = trans_b},
                         GemmBatch::strided(1, 0, 0, 0), a.data(), b.data(), c.data());
      return c;
    });
  };
  for (bool trans_b : {false, true}) {
    const std::vector<float> one = product(1, trans_b);
    for (int threads : {2, 3, 4, 0}) {
      EXPECT_EQ(product(threads, trans_b), one) << threads << " threads, transB " << trans_b;
    }
  }
}

TEST(MatMulKernel, BitsDoNotDependOnThreadCount) {
  const Tensor a = tensor(DType::kBF16, {3, 40, 64}, random_values(3 * 40 * 64, 17));
  const Tensor b = tensor(DType::kBF16, {64, 300}, random_values(64 * 300, 18));
  auto matmul = [&] { return run_op("MatMul", "", {a, b}, {DType::kBF16, {3, 40, 300}}); };
  const Tensor one = on_cpu_threads(1, matmul);
  const Tensor three = on_cpu_threads(3, matmul);
  EXPECT_TRUE(one == three);
}

// ---- Gemm -----------------------------------------------------------------------------------

// A stored [m,k] or, with transA, [k,m]; B likewise [k,n] or [n,k].
Shape gemm_a_shape(int64_t m, int64_t k, bool trans) { return trans ? Shape{k, m} : Shape{m, k}; }
Shape gemm_b_shape(int64_t k, int64_t n, bool trans) { return trans ? Shape{n, k} : Shape{k, n}; }

TEST(GemmKernel, TransposesScalesAndAddsBias) {
  const int64_t m = 5, k = 70, n = 6;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      const std::vector<double> a = random_values(m * k, 20), b = random_values(k * n, 21);
      const std::vector<double> c = random_values(n, 22);
      const Tensor y = run_op(
          "Gemm",
          str_cat("alpha=0.5, beta=-2.0, transA=", trans_a ? 1 : 0, ", transB=", trans_b ? 1 : 0),
          {tensor(DType::kF32, gemm_a_shape(m, k, trans_a), a),
           tensor(DType::kF32, gemm_b_shape(k, n, trans_b), b), tensor(DType::kF32, {n}, c)},
          {DType::kF32, {m, n}});
      Reference r = naive_product(a, b, m, k, n, trans_a, trans_b);
      for (int64_t i = 0; i < m * n; ++i) {
        r.value[i] = 0.5 * r.value[i] - 2.0 * c[i % n];
        r.bound[i] =
            0.5 * r.bound[i] + 4 * std::ldexp(std::abs(r.value[i]) + 2 * std::abs(c[i % n]), -24);
      }
      expect_within(y, r);
    }
  }
}

// C of shape [], [n], [1,n], [m,1] and [m,n]; exact values, so the results are exact.
TEST(GemmKernel, BroadcastsC) {
  const int64_t m = 3, k = 4, n = 5;
  const std::vector<double> a = exact_values(m * k, 23), b = exact_values(k * n, 24);
  const Reference p = naive_product(a, b, m, k, n);
  const std::vector<Shape> c_shapes = {{}, {n}, {1, n}, {m, 1}, {m, n}};
  for (const Shape& c_shape : c_shapes) {
    const std::vector<double> c = exact_values(num_elements(c_shape), 25);
    const Tensor y = run_op("Gemm", "alpha=0.5, beta=2.0",
                            {tensor(DType::kF64, {m, k}, a), tensor(DType::kF64, {k, n}, b),
                             tensor(DType::kF64, c_shape, c)},
                            {DType::kF64, {m, n}});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t rows = c_shape.size() == 2 ? c_shape[0] : 1;
        const int64_t cols = c_shape.empty() ? 1 : c_shape.back();
        const double c_ij = c[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
        EXPECT_EQ(y.element_as_double(i * n + j), 0.5 * p.value[i * n + j] + 2.0 * c_ij)
            << shape_to_string(c_shape) << " at " << i << "," << j;
      }
    }
  }
}

TEST(GemmKernel, WithoutCIsTheScaledProduct) {
  const std::vector<double> a = exact_values(2 * 10, 26), b = exact_values(10 * 3, 27);
  const Tensor y = run_op("Gemm", "alpha=0.25",
                          {tensor(DType::kF32, {2, 10}, a), tensor(DType::kF32, {10, 3}, b)},
                          {DType::kF32, {2, 3}});
  const Reference p = naive_product(a, b, 2, 10, 3);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.element_as_double(i), 0.25 * p.value[i]);
}

// As in the ONNX reference and PyTorch's addmm, beta = 0 ignores C: its infinities and NaNs do
// not reach the result.
TEST(GemmKernel, ZeroBetaIgnoresC) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor a = tensor(DType::kF32, {1, 2}, {1, 2});
  const Tensor b = tensor(DType::kF32, {2, 2}, {3, 4, 5, 6});
  const Tensor c = tensor(DType::kF32, {2}, {inf, std::nan("")});
  const Tensor y = run_op("Gemm", "beta=0.0", {a, b, c}, {DType::kF32, {1, 2}});
  EXPECT_EQ(y.to_double_vector(), (std::vector<double>{13, 16}));
}

// f16/bf16: upcast, the f32 core, then y = alpha * p, y = y + beta * c in f32, rounded once.
TEST(GemmKernel, LowPrecisionEqualsF32CoreThenEpilogueRoundedOnce) {
  const int64_t m = 130, k = 24, n = 260;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor a = tensor(dtype, {k, m}, random_values(m * k, 28));
    const Tensor b = tensor(dtype, {n, k}, random_values(k * n, 29));
    const Tensor c = tensor(dtype, {1, n}, random_values(n, 30));
    const Tensor y =
        run_op("Gemm", "alpha=0.25, beta=0.35, transA=1, transB=1", {a, b, c}, {dtype, {m, n}});
    const std::vector<float> a32 = upcast(a), b32 = upcast(b), c32 = upcast(c);
    std::vector<float> p(m * n);
    runtime::cpu::gemm({.m = m, .n = n, .k = k, .trans_a = true, .trans_b = true},
                       GemmBatch::strided(1, 0, 0, 0), a32.data(), b32.data(), p.data());
    std::vector<uint16_t> expected;
    for (int64_t i = 0; i < m * n; ++i) {
      float v = 0.25f * p[i];
      v = v + 0.35f * c32[i % n];
      expected.push_back(round_to(dtype, v));
    }
    EXPECT_EQ(bits_of(y), expected) << dtype_name(dtype);
  }
}

TEST(GemmKernel, IntegersAreExact) {
  const Tensor a = Tensor::from_i64({2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::from_i64({2, 2}, {5, 6, 7, 8});
  const Tensor c = Tensor::from_i64({2}, {100, -100});
  const Tensor y = run_op("Gemm", "transB=1", {a, b, c}, {DType::kI64, {2, 2}});
  EXPECT_EQ(y.to_i64_vector(), (std::vector<int64_t>{17 + 100, 23 - 100, 39 + 100, 53 - 100}));
  const Tensor scaled = run_op("Gemm", "alpha=0.5, beta=3.0", {a, b, c}, {DType::kI64, {2, 2}});
  // [19, 22; 43, 50] * 0.5 + 3 * c, truncated toward zero.
  EXPECT_EQ(scaled.to_i64_vector(), (std::vector<int64_t>{309, 11 - 300, 321, 25 - 300}));
}

}  // namespace
}  // namespace ampc
