// The element-wise CPU kernels (runtime/cpu/elementwise.cc) against hand-derived values, IEEE
// f32 arithmetic done here, naive f64 references and numpy broadcasting written out per element,
// and, for f16/bf16, bit for bit against "upcast to f32, compute, round once".
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::bits_of;
using testing::elements;
using testing::on_cpu_threads;
using testing::typed_tensor;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs `%y = OP<ATTRS>(inputs...) : OUT` (a null input is an omitted operand `_`).
absl::StatusOr<Tensor> try_op(const std::string& op, const std::vector<const Tensor*>& inputs,
                              const TensorType& out, const std::string& attrs = "") {
  std::vector<std::optional<TensorType>> types;
  std::vector<Tensor> values;
  for (const Tensor* input : inputs) {
    types.push_back(input ? std::optional(input->type()) : std::nullopt);
    if (input) values.push_back(*input);
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<Tensor> outputs,
                        testing::try_run(testing::one_node_graph(op, attrs, types, {out}), values));
  return outputs.at(0);
}

Tensor run_op(const std::string& op, const std::vector<const Tensor*>& inputs,
              const TensorType& out, const std::string& attrs = "") {
  absl::StatusOr<Tensor> result = try_op(op, inputs, out, attrs);
  EXPECT_TRUE(result.ok()) << op << ": " << result.status();
  return result.ok() ? *result : Tensor(out);
}

// Random values of storage type T (via f32, so f16/bf16 hold exactly what they read back).
template <typename T>
Tensor random_tensor(DType dtype, Shape shape, uint32_t seed, float low = -4, float high = 4) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<T> values(num_elements(shape));
  for (T& v : values) v = T(uniform(rng));
  return typed_tensor<T>(dtype, std::move(shape), values);
}

// The flat index into `in` of output element `i`, by numpy's rule, written per element.
int64_t broadcast_index(int64_t i, const Shape& out, const Shape& in) {
  int64_t index = 0, in_stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t coordinate = i % out[d];
    i /= out[d];
    const size_t lead = out.size() - in.size();
    if (d < lead) continue;
    const int64_t dim = in[d - lead];
    if (dim != 1) index += coordinate * in_stride;
    in_stride *= dim;
  }
  return index;
}

// fn(a[..], b[..]) per output element of the broadcast, on storage values.
template <typename T, typename Out = T, typename Fn>
std::vector<Out> reference_binary(const Tensor& a, const Tensor& b, const Shape& out, Fn fn) {
  std::vector<Out> result(num_elements(out));
  const std::vector<T> av = elements<T>(a), bv = elements<T>(b);
  for (int64_t i = 0; i < num_elements(out); ++i) {
    result[i] = fn(av[broadcast_index(i, out, a.shape())], bv[broadcast_index(i, out, b.shape())]);
  }
  return result;
}

// ---- f32 ----------------------------------------------------------------------------------

TEST(ElementwiseKernels, F32ArithmeticIsIeeeExact) {
  const Tensor a = random_tensor<float>(DType::kF32, {64}, 1);
  const Tensor b = random_tensor<float>(DType::kF32, {64}, 2, 0.5f, 3);
  const TensorType out{DType::kF32, {64}};
  EXPECT_EQ(elements<float>(run_op("Add", {&a, &b}, out)),
            reference_binary<float>(a, b, {64}, [](float x, float y) { return x + y; }));
  EXPECT_EQ(elements<float>(run_op("Sub", {&a, &b}, out)),
            reference_binary<float>(a, b, {64}, [](float x, float y) { return x - y; }));
  EXPECT_EQ(elements<float>(run_op("Mul", {&a, &b}, out)),
            reference_binary<float>(a, b, {64}, [](float x, float y) { return x * y; }));
  EXPECT_EQ(elements<float>(run_op("Div", {&a, &b}, out)),
            reference_binary<float>(a, b, {64}, [](float x, float y) { return x / y; }));
  const Tensor h = Tensor::from_f32({4}, {1.5f, -2.0f, 0.0f, 7.0f});
  const Tensor k = Tensor::from_f32({4}, {0.25f, 4.0f, -3.0f, 0.0f});
  EXPECT_EQ(elements<float>(run_op("Add", {&h, &k}, {DType::kF32, {4}})),
            (std::vector<float>{1.75f, 2.0f, -3.0f, 7.0f}));
  EXPECT_EQ(elements<float>(run_op("Div", {&h, &k}, {DType::kF32, {4}})),
            (std::vector<float>{6.0f, -0.5f, -0.0f, kInf}));
}

TEST(ElementwiseKernels, BroadcastsScalarRowColumnAndBothSides) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {}, {2, 3}},
      {{}, {2, 3}, {2, 3}},
      {{2, 3}, {3}, {2, 3}},
      {{2, 3}, {2, 1}, {2, 3}},
      {{2, 1}, {1, 3}, {2, 3}},
      {{4, 1, 5}, {3, 1}, {4, 3, 5}},
      {{2, 1, 3, 4}, {5, 1, 1}, {2, 5, 3, 4}},
      {{3, 4, 1}, {1, 4, 5}, {3, 4, 5}},
      {{1, 1, 6}, {2, 3, 1}, {2, 3, 6}},
      {{7, 1}, {7, 1}, {7, 1}},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(str_cat(shape_to_string(c.a), " - ", shape_to_string(c.b)));
    const Tensor a = random_tensor<float>(DType::kF32, c.a, ++seed);
    const Tensor b = random_tensor<float>(DType::kF32, c.b, ++seed);
    // Sub is not symmetric, so a swapped operand shows.
    EXPECT_EQ(elements<float>(run_op("Sub", {&a, &b}, {DType::kF32, c.out})),
              reference_binary<float>(a, b, c.out, [](float x, float y) { return x - y; }));
  }
}

TEST(ElementwiseKernels, UnaryMathMatchesF64Reference) {
  const std::vector<float> x = {0.25f, 1.0f, 2.5f, 9.0f, 0.001f, 30.0f, 1e-30f};
  const Tensor t = Tensor::from_f32({7}, x);
  const TensorType out{DType::kF32, {7}};
  struct Case {
    std::string op;
    double (*reference)(double);
  };
  for (const Case& c : std::vector<Case>{{"Sqrt", [](double v) { return std::sqrt(v); }},
                                         {"Exp", [](double v) { return std::exp(v); }},
                                         {"Log", [](double v) { return std::log(v); }}}) {
    const std::vector<float> y = elements<float>(run_op(c.op, {&t}, out));
    for (size_t i = 0; i < x.size(); ++i) {
      const double expected = c.reference(x[i]);
      EXPECT_NEAR(y[i], expected, 1e-6 * std::fabs(expected)) << c.op << "(" << x[i] << ")";
    }
  }
  const Tensor s = Tensor::from_f32({5}, {-2.5f, 0.0f, -0.0f, 3.0f, kNaN});
  const std::vector<float> reciprocal =
      elements<float>(run_op("Reciprocal", {&s}, {DType::kF32, {5}}));
  EXPECT_EQ(reciprocal[0], -0.4f);
  EXPECT_EQ(reciprocal[1], kInf);
  EXPECT_EQ(reciprocal[2], -kInf);
  EXPECT_EQ(reciprocal[3], 1.0f / 3.0f);
  EXPECT_TRUE(std::isnan(reciprocal[4]));
  const std::vector<float> neg = elements<float>(run_op("Neg", {&s}, {DType::kF32, {5}}));
  EXPECT_EQ(neg[0], 2.5f);
  EXPECT_TRUE(std::signbit(neg[1]) && !std::signbit(neg[2]));
  const std::vector<float> abs = elements<float>(run_op("Abs", {&s}, {DType::kF32, {5}}));
  EXPECT_EQ(std::vector<float>(abs.begin(), abs.begin() + 4),
            (std::vector<float>{2.5f, 0.0f, 0.0f, 3.0f}));
  EXPECT_FALSE(std::signbit(abs[2]));
  EXPECT_EQ(elements<float>(run_op("Sqrt", {&s}, {DType::kF32, {5}}))[3], std::sqrt(3.0f));
  EXPECT_TRUE(std::isnan(elements<float>(run_op("Sqrt", {&s}, {DType::kF32, {5}}))[0]));
}

// Floor, Ceil and Round by IEEE's rules: halves round to even, the sign of a zero result is x's
// (Ceil(-0.5) = -0), integral values (2^24 + 2 in f32, 2^11 + 2 in f16) and infinities are
// themselves, NaN stays NaN.
TEST(ElementwiseKernels, FloorCeilAndRoundFollowIeee) {
  const std::vector<float> x = {-2.5f, -1.5f, -0.5f,       0.5f,  1.5f, 2.5f,
                                2.7f,  -2.7f, 16777218.0f, -kInf, kNaN};
  const Tensor t = Tensor::from_f32({11}, x);
  const auto run = [&](const char* op) {
    return elements<float>(run_op(op, {&t}, {DType::kF32, {11}}));
  };
  const std::vector<float> floor = run("Floor"), ceil = run("Ceil"), round = run("Round");
  const std::vector<float> want_floor = {-3, -2, -1, 0, 1, 2, 2, -3, 16777218.0f, -kInf};
  const std::vector<float> want_ceil = {-2, -1, -0.0f, 1, 2, 3, 3, -2, 16777218.0f, -kInf};
  const std::vector<float> want_round = {-2, -2, -0.0f, 0, 2, 2, 3, -3, 16777218.0f, -kInf};
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    SCOPED_TRACE(x[i]);
    EXPECT_EQ(floor[i], want_floor[i]);
    EXPECT_EQ(ceil[i], want_ceil[i]);
    EXPECT_EQ(std::signbit(ceil[i]), std::signbit(want_ceil[i]));
    EXPECT_EQ(round[i], want_round[i]);
    EXPECT_EQ(std::signbit(round[i]), std::signbit(want_round[i]));
  }
  EXPECT_TRUE(std::isnan(floor.back()) && std::isnan(ceil.back()) && std::isnan(round.back()));
  // f16: 2050 is integral, 0.5 rounds to 0 and 1.5 to 2.
  const Tensor h = Tensor::from_doubles(DType::kF16, {3}, {2050.0, 0.5, 1.5});
  const Tensor rounded = run_op("Round", {&h}, {DType::kF16, {3}});
  EXPECT_EQ(rounded.to_double_vector(), (std::vector<double>{2050.0, 0.0, 2.0}));
}

TEST(ElementwiseKernels, PowFloatBaseWithAnyExponentType) {
  const Tensor base = Tensor::from_f32({2, 3}, {2.0f, 3.0f, 0.5f, 10.0f, 1.5f, 4.0f});
  const Tensor exponent = Tensor::from_f32({3}, {0.5f, 2.0f, -1.5f});
  const std::vector<float> y =
      elements<float>(run_op("Pow", {&base, &exponent}, {DType::kF32, {2, 3}}));
  const std::vector<float> b = elements<float>(base), e = elements<float>(exponent);
  for (int i = 0; i < 6; ++i) {
    const double expected = std::pow(static_cast<double>(b[i]), static_cast<double>(e[i % 3]));
    EXPECT_NEAR(y[i], expected, 1e-6 * expected) << i;
  }
  const Tensor int_exponent = Tensor::from_i64({}, {3});
  EXPECT_EQ(elements<float>(run_op("Pow", {&base, &int_exponent}, {DType::kF32, {2, 3}})),
            (std::vector<float>{8.0f, 27.0f, 0.125f, 1000.0f, 3.375f, 64.0f}));
}

// Integer powers wrap like repeated multiplication; a negative power truncates 1 / base^n toward
// zero; 0 to a negative power is an error (values worked out by hand; 3^40 mod 2^64 by Python).
TEST(ElementwiseKernels, IntegerPowWrapsAndZeroToANegativePowerIsAnError) {
  const Tensor base = Tensor::from_i64({7}, {2, -3, 2, 1, -1, -1, 3});
  const Tensor exponent = Tensor::from_i64({7}, {10, 3, -1, -5, -3, -2, 40});
  EXPECT_EQ(run_op("Pow", {&base, &exponent}, {DType::kI64, {7}}).to_i64_vector(),
            (std::vector<int64_t>{1024, -27, 0, 1, -1, 1, -6289078614652622815}));
  const Tensor zero = Tensor::from_i64({2}, {3, 0});
  const Tensor negative = Tensor::from_i64({2}, {2, -1});
  absl::StatusOr<Tensor> result = try_op("Pow", {&zero, &negative}, {DType::kI64, {2}});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("Pow of 0 to a negative power"), std::string_view::npos)
      << result.status();
}

// ---- f16 / bf16: upcast, compute in f32, round once -----------------------------------------

template <typename T>
void expect_rounded_once(DType dtype) {
  const Tensor a = random_tensor<T>(dtype, {3, 1, 40}, 31);
  const Tensor b = random_tensor<T>(dtype, {5, 40}, 32, 0.25f, 4);
  const Shape out = {3, 5, 40};
  const TensorType out_type{dtype, out};
  auto reference = [&](auto fn) {
    return bits_of(reference_binary<T>(
        a, b, out, [&](T x, T y) { return T(fn(static_cast<float>(x), static_cast<float>(y))); }));
  };
  EXPECT_EQ(bits_of(elements<T>(run_op("Add", {&a, &b}, out_type))),
            reference([](float x, float y) { return x + y; }));
  EXPECT_EQ(bits_of(elements<T>(run_op("Mul", {&a, &b}, out_type))),
            reference([](float x, float y) { return x * y; }));
  EXPECT_EQ(bits_of(elements<T>(run_op("Div", {&a, &b}, out_type))),
            reference([](float x, float y) { return x / y; }));
  std::vector<T> exp_expected;
  for (T x : elements<T>(a)) exp_expected.push_back(T(std::exp(static_cast<float>(x))));
  EXPECT_EQ(bits_of(elements<T>(run_op("Exp", {&a}, a.type()))), bits_of(exp_expected));
}

TEST(ElementwiseKernels, F16RoundsTheF32ResultOnce) { expect_rounded_once<Float16>(DType::kF16); }
TEST(ElementwiseKernels, BF16RoundsTheF32ResultOnce) {
  expect_rounded_once<BFloat16>(DType::kBF16);
}

Tensor f16(Shape shape, const std::vector<float>& values) {
  std::vector<Float16> halves;
  for (float v : values) halves.push_back(Float16(v));
  return typed_tensor<Float16>(DType::kF16, std::move(shape), halves);
}

TEST(ElementwiseKernels, F16AddOverflowsToInfinityWhereIeeeSays) {
  // 65504 + 16 = 65520 lies halfway between 65504 (odd mantissa) and 2^16: ties to even -> inf.
  const Tensor a = f16({2}, {65504.0f, 65504.0f});
  const Tensor b = f16({2}, {16.0f, 15.0f});
  const std::vector<Float16> sum = elements<Float16>(run_op("Add", {&a, &b}, {DType::kF16, {2}}));
  EXPECT_EQ(sum[0].bits, 0x7c00);  // +inf
  EXPECT_EQ(sum[1].bits, 0x7bff);  // 65504
}

TEST(ElementwiseKernels, F16MulProducesSubnormalsAndRoundsTiesToEven) {
  const Tensor a = f16({3}, {0x1p-14f, 0x1p-24f, 0x1p-24f});
  const Tensor b = f16({3}, {0x1p-5f, 0.5f, 1.5f});
  const std::vector<Float16> product =
      elements<Float16>(run_op("Mul", {&a, &b}, {DType::kF16, {3}}));
  EXPECT_EQ(product[0].bits, 0x0020);  // 2^-19 = 32 * 2^-24, subnormal and exact
  EXPECT_EQ(product[1].bits, 0x0000);  // 2^-25: halfway between 0 and 2^-24, even is 0
  EXPECT_EQ(product[2].bits, 0x0002);  // 1.5 * 2^-24: halfway between 1 and 2 units, even is 2
}

// ---- Integers -----------------------------------------------------------------------------

TEST(ElementwiseKernels, IntegerDivisionTruncatesTowardZero) {
  const Tensor a = Tensor::from_i64({5}, {7, -7, 7, -7, std::numeric_limits<int64_t>::min()});
  const Tensor b = Tensor::from_i64({5}, {2, 2, -2, -2, -1});
  EXPECT_EQ(run_op("Div", {&a, &b}, {DType::kI64, {5}}).to_i64_vector(),
            (std::vector<int64_t>{3, -3, -3, 3, std::numeric_limits<int64_t>::min()}));
  const Tensor c = typed_tensor<int32_t>(DType::kI32, {3}, {9, -9, 100});
  const Tensor d = typed_tensor<int32_t>(DType::kI32, {}, {-4});
  EXPECT_EQ(elements<int32_t>(run_op("Div", {&c, &d}, {DType::kI32, {3}})),
            (std::vector<int32_t>{-2, 2, -25}));
  const Tensor e = typed_tensor<int8_t>(DType::kI8, {2}, {-128, 100});
  const Tensor f = typed_tensor<int8_t>(DType::kI8, {2}, {-1, 7});
  EXPECT_EQ(elements<int8_t>(run_op("Div", {&e, &f}, {DType::kI8, {2}})),
            (std::vector<int8_t>{-128, 14}));
}

TEST(ElementwiseKernels, IntegerDivisionByZeroIsAnError) {
  const Tensor a = typed_tensor<int32_t>(DType::kI32, {3}, {1, 2, 3});
  const Tensor b = typed_tensor<int32_t>(DType::kI32, {3}, {1, 0, 3});
  absl::StatusOr<Tensor> result = try_op("Div", {&a, &b}, {DType::kI32, {3}});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("division by zero"), std::string_view::npos)
      << result.status();
  // Float division by zero is IEEE: inf, not an error.
  const Tensor x = Tensor::from_f32({1}, {1.0f});
  const Tensor zero = Tensor::from_f32({1}, {0.0f});
  EXPECT_TRUE(try_op("Div", {&x, &zero}, {DType::kF32, {1}}).ok());
}

// ONNX's Mod: fmod = 1 keeps the dividend's sign (C's fmod and %), fmod = 0 the divisor's
// (Python's %); values worked out by hand.
TEST(ElementwiseKernels, ModTruncatesOrFloorsAsFmodSays) {
  const Tensor a = Tensor::from_i64({6}, {7, -7, 7, -7, 6, std::numeric_limits<int64_t>::min()});
  const Tensor b = Tensor::from_i64({6}, {3, 3, -3, -3, 3, -1});
  EXPECT_EQ(run_op("Mod", {&a, &b}, {DType::kI64, {6}}).to_i64_vector(),
            (std::vector<int64_t>{1, 2, -2, -1, 0, 0}));
  EXPECT_EQ(run_op("Mod", {&a, &b}, {DType::kI64, {6}}, "fmod=1").to_i64_vector(),
            (std::vector<int64_t>{1, -1, 1, -1, 0, 0}));
  const Tensor c = typed_tensor<int8_t>(DType::kI8, {2}, {-128, 100});
  const Tensor d = typed_tensor<int8_t>(DType::kI8, {}, {-7});
  EXPECT_EQ(elements<int8_t>(run_op("Mod", {&c, &d}, {DType::kI8, {2}})),
            (std::vector<int8_t>{-2, -5}));

  // Floats: fmod is exact; floored remainders add the divisor once; a zero remainder takes the
  // divisor's sign under fmod = 0 and the dividend's under fmod = 1.
  const Tensor x = Tensor::from_f32({5}, {5.5f, -5.5f, 6.0f, -6.0f, 1.0f});
  const Tensor y = Tensor::from_f32({5}, {2.0f, 2.0f, -3.0f, 3.0f, kInf});
  const std::vector<float> floored = elements<float>(run_op("Mod", {&x, &y}, {DType::kF32, {5}}));
  EXPECT_EQ(floored[0], 1.5f);
  EXPECT_EQ(floored[1], 0.5f);
  EXPECT_TRUE(floored[2] == 0.0f && std::signbit(floored[2]));
  EXPECT_TRUE(floored[3] == 0.0f && !std::signbit(floored[3]));
  EXPECT_EQ(floored[4], 1.0f);
  const std::vector<float> truncated =
      elements<float>(run_op("Mod", {&x, &y}, {DType::kF32, {5}}, "fmod=1"));
  EXPECT_EQ(truncated[0], 1.5f);
  EXPECT_EQ(truncated[1], -1.5f);
  EXPECT_TRUE(truncated[2] == 0.0f && !std::signbit(truncated[2]));
  EXPECT_TRUE(truncated[3] == 0.0f && std::signbit(truncated[3]));
  EXPECT_EQ(truncated[4], 1.0f);
  // 0.1f mod 0.03f: fmod's exact remainder of the two f32 values, as f64 computes it.
  const Tensor p = Tensor::from_f32({1}, {0.1f});
  const Tensor q = Tensor::from_f32({1}, {0.03f});
  EXPECT_EQ(elements<float>(run_op("Mod", {&p, &q}, {DType::kF32, {1}}, "fmod=1"))[0],
            static_cast<float>(std::fmod(static_cast<double>(0.1f), static_cast<double>(0.03f))));

  const Tensor zero = typed_tensor<int32_t>(DType::kI32, {2}, {3, 0});
  const Tensor ones = typed_tensor<int32_t>(DType::kI32, {2}, {1, 1});
  absl::StatusOr<Tensor> by_zero = try_op("Mod", {&ones, &zero}, {DType::kI32, {2}});
  ASSERT_FALSE(by_zero.ok());
  EXPECT_NE(by_zero.status().message().find("Mod by zero"), std::string_view::npos)
      << by_zero.status();
}

TEST(ElementwiseKernels, IntegerArithmeticWrapsOnOverflow) {
  const Tensor a = typed_tensor<int8_t>(DType::kI8, {3}, {100, -100, 16});
  const Tensor b = typed_tensor<int8_t>(DType::kI8, {3}, {100, 100, 16});
  EXPECT_EQ(elements<int8_t>(run_op("Add", {&a, &b}, {DType::kI8, {3}})),
            (std::vector<int8_t>{-56, 0, 32}));
  EXPECT_EQ(elements<int8_t>(run_op("Mul", {&a, &b}, {DType::kI8, {3}})),
            (std::vector<int8_t>{16, -16, 0}));  // 10000 mod 256 = 16; 256 mod 256 = 0
  const Tensor u = typed_tensor<uint8_t>(DType::kU8, {2}, {250, 3});
  const Tensor v = typed_tensor<uint8_t>(DType::kU8, {2}, {10, 5});
  EXPECT_EQ(elements<uint8_t>(run_op("Add", {&u, &v}, {DType::kU8, {2}})),
            (std::vector<uint8_t>{4, 8}));
  EXPECT_EQ(elements<uint8_t>(run_op("Sub", {&u, &v}, {DType::kU8, {2}})),
            (std::vector<uint8_t>{240, 254}));
  const int32_t max32 = std::numeric_limits<int32_t>::max();
  const Tensor p = typed_tensor<int32_t>(DType::kI32, {2}, {max32, -5});
  const Tensor q = typed_tensor<int32_t>(DType::kI32, {2}, {1, 7});
  EXPECT_EQ(elements<int32_t>(run_op("Add", {&p, &q}, {DType::kI32, {2}})),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 2}));
  const Tensor n = typed_tensor<int8_t>(DType::kI8, {3}, {-128, -3, 5});
  EXPECT_EQ(elements<int8_t>(run_op("Abs", {&n}, {DType::kI8, {3}})),
            (std::vector<int8_t>{-128, 3, 5}));
  EXPECT_EQ(elements<int8_t>(run_op("Neg", {&n}, {DType::kI8, {3}})),
            (std::vector<int8_t>{-128, 3, -5}));
}

TEST(ElementwiseKernels, IntegerPowTruncatesAndRejectsZeroToNegativePowers) {
  const Tensor base = Tensor::from_i64({6}, {2, -3, 2, 1, -1, 7});
  const Tensor exponent = Tensor::from_i64({6}, {10, 3, -1, -5, -3, 0});
  EXPECT_EQ(run_op("Pow", {&base, &exponent}, {DType::kI64, {6}}).to_i64_vector(),
            (std::vector<int64_t>{1024, -27, 0, 1, -1, 1}));
  const Tensor float_exponent = Tensor::from_f32({2}, {0.5f, -1.0f});
  const Tensor four = Tensor::from_i64({2}, {4, 10});
  EXPECT_EQ(run_op("Pow", {&four, &float_exponent}, {DType::kI64, {2}}).to_i64_vector(),
            (std::vector<int64_t>{2, 0}));  // 10^-1 = 0.1 truncates to 0
  const Tensor zero = Tensor::from_i64({1}, {0});
  const Tensor minus_one = Tensor::from_i64({1}, {-1});
  EXPECT_FALSE(try_op("Pow", {&zero, &minus_one}, {DType::kI64, {1}}).ok());
}

// ---- Min, Max, Clip, Where ----------------------------------------------------------------

TEST(ElementwiseKernels, VariadicMinMaxBroadcastAndLetNaNWin) {
  const Tensor a = Tensor::from_f32({2, 1}, {1.0f, 5.0f});
  const Tensor b = Tensor::from_f32({3}, {0.0f, 3.0f, kNaN});
  const Tensor c = Tensor::from_f32({}, {2.0f});
  const TensorType out{DType::kF32, {2, 3}};
  const std::vector<float> lo = elements<float>(run_op("Min", {&a, &b, &c}, out));
  const std::vector<float> hi = elements<float>(run_op("Max", {&a, &b, &c}, out));
  EXPECT_EQ(lo[0], 0.0f);
  EXPECT_EQ(lo[1], 1.0f);
  EXPECT_EQ(lo[3], 0.0f);
  EXPECT_EQ(lo[4], 2.0f);
  EXPECT_EQ(hi[0], 2.0f);
  EXPECT_EQ(hi[1], 3.0f);
  EXPECT_EQ(hi[3], 5.0f);
  EXPECT_EQ(hi[4], 5.0f);
  EXPECT_TRUE(std::isnan(lo[2]) && std::isnan(lo[5]) && std::isnan(hi[2]) && std::isnan(hi[5]));
  // NaN first also wins.
  const Tensor nan_first = Tensor::from_f32({1}, {kNaN});
  const Tensor one = Tensor::from_f32({1}, {1.0f});
  EXPECT_TRUE(std::isnan(elements<float>(run_op("Max", {&nan_first, &one}, one.type()))[0]));
  EXPECT_EQ(elements<float>(run_op("Min", {&a}, a.type())), elements<float>(a));
  const Tensor i = Tensor::from_i64({3}, {-4, 9, 2});
  const Tensor j = Tensor::from_i64({3}, {3, -9, 2});
  EXPECT_EQ(run_op("Max", {&i, &j}, i.type()).to_i64_vector(), (std::vector<int64_t>{3, 9, 2}));
  EXPECT_EQ(run_op("Min", {&i, &j}, i.type()).to_i64_vector(), (std::vector<int64_t>{-4, -9, 2}));
}

TEST(ElementwiseKernels, ClipWithOptionalBounds) {
  const Tensor x = Tensor::from_f32({5}, {-3.0f, -0.5f, 0.5f, 4.0f, kNaN});
  const Tensor low = Tensor::from_f32({}, {-1.0f});
  const Tensor high = Tensor::from_f32({}, {1.0f});
  auto clip = [&](const Tensor* lo, const Tensor* hi) {
    return elements<float>(run_op("Clip", {&x, lo, hi}, x.type()));
  };
  std::vector<float> both = clip(&low, &high);
  EXPECT_EQ(std::vector<float>(both.begin(), both.end() - 1),
            (std::vector<float>{-1.0f, -0.5f, 0.5f, 1.0f}));
  EXPECT_TRUE(std::isnan(both[4]));
  std::vector<float> only_max = clip(nullptr, &high);
  EXPECT_EQ(std::vector<float>(only_max.begin(), only_max.end() - 1),
            (std::vector<float>{-3.0f, -0.5f, 0.5f, 1.0f}));
  std::vector<float> only_min = clip(&low, nullptr);
  EXPECT_EQ(std::vector<float>(only_min.begin(), only_min.end() - 1),
            (std::vector<float>{-1.0f, -0.5f, 0.5f, 4.0f}));
  std::vector<float> none = elements<float>(run_op("Clip", {&x}, x.type()));
  EXPECT_EQ(none[0], -3.0f);
  EXPECT_EQ(none[3], 4.0f);
  // min > max: every element becomes max.
  std::vector<float> crossed = clip(&high, &low);
  EXPECT_EQ(crossed[0], -1.0f);
  EXPECT_EQ(crossed[3], -1.0f);
  // A NaN bound makes every element NaN, as numpy.clip (ONNX's reference) and torch.clamp.
  const Tensor nan_bound = Tensor::from_f32({}, {kNaN});
  for (const std::vector<float>& clipped : {clip(&nan_bound, &high), clip(&low, &nan_bound)}) {
    for (float v : clipped) EXPECT_TRUE(std::isnan(v)) << v;
  }
  const Tensor i = typed_tensor<int32_t>(DType::kI32, {4}, {-7, 0, 3, 9});
  const Tensor ilo = typed_tensor<int32_t>(DType::kI32, {1}, {0});
  const Tensor ihi = typed_tensor<int32_t>(DType::kI32, {}, {5});
  EXPECT_EQ(elements<int32_t>(run_op("Clip", {&i, &ilo, &ihi}, i.type())),
            (std::vector<int32_t>{0, 0, 3, 5}));
}

TEST(ElementwiseKernels, WhereBroadcastsAllThreeAndCopiesBits) {
  const Tensor cond = typed_tensor<bool>(DType::kBool, {3, 1}, {true, false, true});
  const Tensor x = Tensor::from_i64({1, 4}, {1, 2, 3, 4});
  const Tensor y = Tensor::from_i64({}, {-1});
  EXPECT_EQ(run_op("Where", {&cond, &x, &y}, {DType::kI64, {3, 4}}).to_i64_vector(),
            (std::vector<int64_t>{1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4}));
  // A signalling NaN payload in f16 would be quieted by a trip through f32; Where keeps it.
  const Tensor hx =
      typed_tensor<Float16>(DType::kF16, {2}, {Float16::from_bits(0x7c01), Float16(1.0f)});
  const Tensor hy = typed_tensor<Float16>(DType::kF16, {2}, {Float16(2.0f), Float16(3.0f)});
  const Tensor pick = typed_tensor<bool>(DType::kBool, {2}, {true, false});
  EXPECT_EQ(bits_of(elements<Float16>(run_op("Where", {&pick, &hx, &hy}, hx.type()))),
            (std::vector<uint16_t>{0x7c01, Float16(3.0f).bits}));
}

// ---- Comparisons and Not ------------------------------------------------------------------

TEST(ElementwiseKernels, ComparisonsProduceBoolAndNaNComparesFalse) {
  const Tensor a = Tensor::from_f32({2, 3}, {1.0f, 2.0f, kNaN, -0.0f, 5.0f, 3.0f});
  const Tensor b = Tensor::from_f32({3}, {1.0f, 3.0f, kNaN});
  const TensorType out{DType::kBool, {2, 3}};
  EXPECT_EQ(elements<bool>(run_op("Equal", {&a, &b}, out)),
            (std::vector<bool>{true, false, false, false, false, false}));
  EXPECT_EQ(elements<bool>(run_op("Less", {&a, &b}, out)),
            (std::vector<bool>{false, true, false, true, false, false}));
  EXPECT_EQ(elements<bool>(run_op("Greater", {&a, &b}, out)),
            (std::vector<bool>{false, false, false, false, true, false}));
  const Tensor zero = Tensor::from_f32({}, {0.0f});
  EXPECT_EQ(elements<bool>(run_op("Equal", {&a, &zero}, out))[3], true);  // -0 == 0
  const Tensor i = Tensor::from_i64({3}, {-2, 0, 7});
  const Tensor j = Tensor::from_i64({}, {0});
  EXPECT_EQ(elements<bool>(run_op("Less", {&i, &j}, {DType::kBool, {3}})),
            (std::vector<bool>{true, false, false}));
  const Tensor p = typed_tensor<bool>(DType::kBool, {4}, {true, true, false, false});
  const Tensor q = typed_tensor<bool>(DType::kBool, {4}, {true, false, true, false});
  EXPECT_EQ(elements<bool>(run_op("Equal", {&p, &q}, p.type())),
            (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(elements<bool>(run_op("Not", {&p}, p.type())),
            (std::vector<bool>{false, false, true, true}));
  const Tensor h = f16({2}, {1.0f, 2.0f});
  const Tensor k = f16({2}, {1.0f, 1.5f});
  EXPECT_EQ(elements<bool>(run_op("Greater", {&h, &k}, {DType::kBool, {2}})),
            (std::vector<bool>{false, true}));
}

TEST(ElementwiseKernels, IsNaNAndIsInfClassifyEveryFloatType) {
  const std::vector<float> values = {1.0f, kNaN, kInf, -kInf, -0.0f, 3e38f};
  const TensorType out{DType::kBool, {6}};
  const Tensor x = Tensor::from_f32({6}, values);
  EXPECT_EQ(elements<bool>(run_op("IsNaN", {&x}, out)),
            (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&x}, out)),
            (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&x}, out, "detect_negative=0")),
            (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&x}, out, "detect_positive=0")),
            (std::vector<bool>{false, false, false, true, false, false}));
  // f32's largest values overflow f16 to infinity when converted; bf16 holds them.
  const Tensor h = f16({6}, values);
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&h}, out)),
            (std::vector<bool>{false, false, true, true, false, true}));
  EXPECT_EQ(elements<bool>(run_op("IsNaN", {&h}, out)),
            (std::vector<bool>{false, true, false, false, false, false}));
  std::vector<BFloat16> brain;
  for (float v : values) brain.push_back(BFloat16(v));
  const Tensor b = typed_tensor<BFloat16>(DType::kBF16, brain);
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&b}, out)),
            (std::vector<bool>{false, false, true, true, false, false}));
  const Tensor d =
      Tensor::from_doubles(DType::kF64, {2}, {1e300, -std::numeric_limits<double>::infinity()});
  EXPECT_EQ(elements<bool>(run_op("IsInf", {&d}, {DType::kBool, {2}})),
            (std::vector<bool>{false, true}));
}

// ---- Threads and aliasing -----------------------------------------------------------------

TEST(ElementwiseKernels, LargeBroadcastAddIsIndependentOfThreadCount) {
  const Tensor a = random_tensor<float>(DType::kF32, {33, 1, 257}, 41);
  const Tensor b = random_tensor<float>(DType::kF32, {40, 257}, 42);
  const TensorType out{DType::kF32, {33, 40, 257}};
  auto add = [&] { return run_op("Add", {&a, &b}, out); };
  const Tensor one = on_cpu_threads(1, add);
  const Tensor four = on_cpu_threads(4, add);
  EXPECT_TRUE(one == four);
  EXPECT_EQ(elements<float>(four),
            reference_binary<float>(a, b, out.shape, [](float x, float y) { return x + y; }));
}

// Kernels that declare in_place_operand must be right when the output is that operand.
TEST(ElementwiseKernels, InPlaceAddWithBroadcastOperandIsCorrect) {
  const Tensor a = random_tensor<float>(DType::kF32, {300, 129}, 51);
  const Tensor b = random_tensor<float>(DType::kF32, {129}, 52);
  const std::vector<float> expected =
      reference_binary<float>(a, b, a.shape(), [](float x, float y) { return x + y; });
  std::unique_ptr<Graph> graph = testing::parse_or_fail(
      "graph g(%a: f32[300,129], %b: f32[129]) {\n  %y = Add(%a, %b) : f32[300,129]\n"
      "  return %y\n}\n");
  ASSERT_TRUE(graph);
  const Node& node = *graph->nodes().front();
  absl::StatusOr<const runtime::KernelDef*> kernel =
      runtime::KernelRegistry::global().resolve(node, runtime::Device::kCpu);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_EQ((*kernel)->in_place_operand, 0);
  Tensor buffer = a;
  Tensor b_copy = b;
  runtime::KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
  ctx.inputs = {{&buffer.type(), buffer.mutable_bytes().data()},
                {&b_copy.type(), b_copy.mutable_bytes().data()}};
  ctx.outputs = {{&buffer.type(), buffer.mutable_bytes().data()}};
  ASSERT_TRUE((*kernel)->fn(ctx).ok());
  EXPECT_EQ(elements<float>(buffer), expected);
}

}  // namespace
}  // namespace ampc
