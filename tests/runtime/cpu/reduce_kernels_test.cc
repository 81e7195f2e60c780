// ReduceSum, ReduceMean and ReduceMax on the CPU backend against naive f64 reductions written
// here, hand-derived values and IEEE rules, and, for f16/bf16, bit for bit against "upcast to f32,
// add the reduced elements (row-major) in pairwise_sum.h's order, round once", that order
// written here as its recursive definition. Also pairwise_sum.h's streaming, tree and column
// forms against that definition.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/cpu/pairwise_sum.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::expect_near_all;
using testing::on_cpu_threads;
using testing::random_values;
using testing::run;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A one-node graph `%y = OP<ATTRS>(%x[, %axes]) : OUT` over input `in`, with `axes` (if any) as
// an initializer operand, as opsets 13 / 18 pass them.
std::string reduce_graph(const std::string& op, const std::string& attrs, const TensorType& in,
                         const TensorType& out, const std::vector<int64_t>* axes = nullptr,
                         int opset = 17) {
  std::string init, operands = "%x";
  if (axes != nullptr) {
    init = str_cat("  init %axes: i64[", axes->size(), "] = [", str_join(*axes, ", "), "]\n");
    operands += ", %axes";
  }
  return str_cat("graph g(%x: ", type_to_string(in), ") opset(", opset, ") {\n", init,
                 "  %y = ", op, attrs.empty() ? "" : str_cat("<", attrs, ">"), "(", operands,
                 ") : ", type_to_string(out), "\n  return %y\n}\n");
}

Tensor reduce_op(const std::string& op, const std::string& attrs, const Tensor& x,
                 const TensorType& out, const std::vector<int64_t>* axes = nullptr,
                 int opset = 17) {
  std::vector<Tensor> outputs = run(reduce_graph(op, attrs, x.type(), out, axes, opset), {x});
  return outputs.empty() ? Tensor() : outputs[0];
}

// Naive f64 reduction of a [A, B, C] tensor over the axes whose flag is set, visiting the
// reduced elements in row-major order (a, b, c loops). kind: 's'um, 'm'ean, 'x' max.
std::vector<double> naive_reduce(const std::vector<double>& x, const Shape& shape,
                                 std::vector<bool> reduced, char kind) {
  const int64_t A = shape[0], B = shape[1], C = shape[2];
  const int64_t oa = reduced[0] ? 1 : A, ob = reduced[1] ? 1 : B, oc = reduced[2] ? 1 : C;
  std::vector<double> acc(oa * ob * oc, kind == 'x' ? -kInf : 0.0);
  std::vector<int64_t> count(acc.size(), 0);
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t c = 0; c < C; ++c) {
        const int64_t o =
            ((reduced[0] ? 0 : a) * ob + (reduced[1] ? 0 : b)) * oc + (reduced[2] ? 0 : c);
        const double v = x[(a * B + b) * C + c];
        acc[o] = kind == 'x' ? std::max(acc[o], v) : acc[o] + v;
        ++count[o];
      }
    }
  }
  if (kind == 'm') {
    for (size_t o = 0; o < acc.size(); ++o) acc[o] /= static_cast<double>(count[o]);
  }
  return acc;
}

TEST(ReduceKernels, SumOverAttributeAxesMatchesNaiveF64) {
  const std::vector<double> x = random_values(2 * 3 * 4, 1);
  const Tensor y =
      reduce_op("ReduceSum", "axes=[0, 2]", Tensor::from_doubles(DType::kF32, {2, 3, 4}, x),
                {DType::kF32, {1, 3, 1}});
  expect_near_all(y, naive_reduce(x, {2, 3, 4}, {true, false, true}, 's'), 1e-6);
}

TEST(ReduceKernels, SumOverAxesOperandMatchesNaiveF64) {
  const std::vector<double> x = random_values(2 * 3 * 4, 2);
  const std::vector<int64_t> axes = {1};
  const Tensor y =
      reduce_op("ReduceSum", "keepdims=0", Tensor::from_doubles(DType::kF64, {2, 3, 4}, x),
                {DType::kF64, {2, 4}}, &axes);
  expect_near_all(y, naive_reduce(x, {2, 3, 4}, {false, true, false}, 's'), 1e-14);
}

TEST(ReduceKernels, MeanWithNegativeAxesMatchesNaiveF64) {
  const std::vector<double> x = random_values(3 * 4 * 5, 3);
  const std::vector<int64_t> axes = {-1, -3};
  const Tensor y =
      reduce_op("ReduceMean", "keepdims=0", Tensor::from_doubles(DType::kF64, {3, 4, 5}, x),
                {DType::kF64, {4}}, &axes, 18);
  expect_near_all(y, naive_reduce(x, {3, 4, 5}, {true, false, true}, 'm'), 1e-14);
  // The same through the attribute form of opset 17.
  const Tensor z = reduce_op("ReduceMean", "axes=[-1, 0], keepdims=0",
                             Tensor::from_doubles(DType::kF32, {3, 4, 5}, x), {DType::kF32, {4}});
  expect_near_all(z, naive_reduce(x, {3, 4, 5}, {true, false, true}, 'm'), 1e-6);
}

TEST(ReduceKernels, MaxOverMiddleAxisMatchesNaive) {
  const std::vector<double> x = random_values(4 * 5 * 3, 4);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    const Tensor input = Tensor::from_doubles(dtype, {4, 5, 3}, x);
    const Tensor y = reduce_op("ReduceMax", "axes=[1]", input, {dtype, {4, 1, 3}});
    // A maximum is one of the inputs: exact in every dtype.
    expect_near_all(y, naive_reduce(input.to_double_vector(), {4, 5, 3}, {false, true, false}, 'x'),
                    0);
  }
}

TEST(ReduceKernels, NoAxesReduceEverything) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(reduce_op("ReduceSum", "", x, {DType::kF32, {1, 1}}).element_as_double(0), 21.0);
  EXPECT_EQ(reduce_op("ReduceMean", "keepdims=0", x, {DType::kF32, {}}).element_as_double(0), 3.5);
  EXPECT_EQ(reduce_op("ReduceMax", "", x, {DType::kF32, {1, 1}}).element_as_double(0), 6.0);
  // An empty axes operand means the same unless noop_with_empty_axes.
  const std::vector<int64_t> none;
  EXPECT_EQ(reduce_op("ReduceSum", "", x, {DType::kF32, {1, 1}}, &none).element_as_double(0), 21.0);
}

TEST(ReduceKernels, NoopWithEmptyAxesIsTheIdentity) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {2, 3}, {1, -2, 3, -4, 5, -6});
  const std::vector<int64_t> none;
  EXPECT_EQ(reduce_op("ReduceSum", "noop_with_empty_axes=1", x, x.type(), &none), x);
  EXPECT_EQ(reduce_op("ReduceMax", "noop_with_empty_axes=1", x, x.type(), &none, 18), x);
}

TEST(ReduceKernels, EmptyReductionsGiveTheIdentityOfEachOp) {
  const Tensor x = Tensor::from_doubles(DType::kF32, {2, 0, 3}, {});
  const TensorType out{DType::kF32, {2, 1, 3}};
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(reduce_op("ReduceSum", "axes=[1]", x, out).element_as_double(i), 0.0);
    EXPECT_EQ(reduce_op("ReduceMax", "axes=[1]", x, out).element_as_double(i), -kInf);
    EXPECT_TRUE(std::isnan(reduce_op("ReduceMean", "axes=[1]", x, out).element_as_double(i)));
  }
  const Tensor ints = Tensor::from_doubles(DType::kI32, {0, 2}, {});
  EXPECT_EQ(reduce_op("ReduceMax", "axes=[0]", ints, {DType::kI32, {1, 2}}).to_i64_vector(),
            (std::vector<int64_t>(2, std::numeric_limits<int32_t>::min())));
}

TEST(ReduceKernels, MaxPropagatesNaNAndHandlesInfinities) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x =
      Tensor::from_doubles(DType::kF32, {3, 3}, {1, nan, 2, nan, 1, 2, -kInf, -kInf, -kInf});
  const Tensor y = reduce_op("ReduceMax", "axes=[1], keepdims=0", x, {DType::kF32, {3}});
  EXPECT_TRUE(std::isnan(y.element_as_double(0)));
  EXPECT_TRUE(std::isnan(y.element_as_double(1)));
  EXPECT_EQ(y.element_as_double(2), -kInf);
}

// The documented order as a recursion: blocks of 64 terms added left to right; the sum of blocks
// [lo, hi) is that of [lo, mid) plus that of [mid, hi), mid - lo the largest power of two below
// hi - lo.
template <typename A>
A pairwise_reference(std::span<const A> terms) {
  const size_t block = 64;
  if (terms.size() <= block) {
    A sum = 0;
    for (A t : terms) sum += t;
    return sum;
  }
  const size_t blocks = (terms.size() + block - 1) / block;
  size_t left = 1;
  while (left * 2 < blocks) left *= 2;
  return pairwise_reference(terms.first(left * block)) +
         pairwise_reference(terms.subspan(left * block));
}

// "Upcast to f32, add the reduced elements of each output in row-major order pairwise, round
// once."
template <typename S>
std::vector<uint16_t> f32_sum_rounded(const Tensor& x, int64_t A, int64_t B, int64_t C) {
  std::vector<uint16_t> bits(B);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<float> terms;
    for (int64_t a = 0; a < A; ++a) {
      for (int64_t c = 0; c < C; ++c)
        terms.push_back(static_cast<float>(x.element_as_double((a * B + b) * C + c)));
    }
    bits[b] = S(pairwise_reference<float>(terms)).bits;
  }
  return bits;
}

TEST(ReduceKernels, LowPrecisionSumEqualsF32SumRoundedOnce) {
  const int64_t A = 7, B = 3, C = 33;
  std::vector<double> x = random_values(A * B * C, 5);
  for (double& v : x) v *= 100;  // large terms: the f32 sum of many of them rounds often
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const Tensor input = Tensor::from_doubles(dtype, {A, B, C}, x);
    const Tensor y = reduce_op("ReduceSum", "axes=[0, 2], keepdims=0", input, {dtype, {B}});
    const std::vector<uint16_t> expected = dtype == DType::kF16
                                               ? f32_sum_rounded<Float16>(input, A, B, C)
                                               : f32_sum_rounded<BFloat16>(input, A, B, C);
    EXPECT_EQ(testing::bits_of(y), expected) << dtype_name(dtype);
  }
}

TEST(ReduceKernels, F16SumOverflowsToInfOnlyWhenRounded) {
  // 60000 + 60000 = 120000 in f32, past f16's largest finite value: inf on store. The partial
  // sum 80000 of 40000 + 40000 - 30000 - 10000 would overflow in f16 but not in f32.
  const Tensor big = Tensor::from_doubles(DType::kF16, {2}, {60000, 60000});
  EXPECT_EQ(reduce_op("ReduceSum", "", big, {DType::kF16, {1}}).element_as_double(0), kInf);
  const Tensor fits = Tensor::from_doubles(DType::kF16, {4}, {40000, 40000, -30000, -10000});
  EXPECT_EQ(reduce_op("ReduceSum", "", fits, {DType::kF16, {1}}).element_as_double(0), 40000.0);
  // The mean of two 60000s is 60000 again: the sum stays in f32.
  EXPECT_EQ(reduce_op("ReduceMean", "", big, {DType::kF16, {1}}).element_as_double(0), 60000.0);
}

TEST(ReduceKernels, IntegersAreExact) {
  const Tensor x = Tensor::from_doubles(DType::kI64, {2, 3}, {1, -2, 7, 4, 5, -6});
  EXPECT_EQ(reduce_op("ReduceSum", "axes=[1], keepdims=0", x, {DType::kI64, {2}}).to_i64_vector(),
            (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(reduce_op("ReduceMax", "axes=[0], keepdims=0", x, {DType::kI64, {3}}).to_i64_vector(),
            (std::vector<int64_t>{4, 5, 7}));
  // An integer mean truncates toward zero, like the cast of ONNX's f64 reference mean.
  const Tensor y = Tensor::from_doubles(DType::kI32, {2, 2}, {1, 2, -3, -4});
  EXPECT_EQ(reduce_op("ReduceMean", "axes=[1], keepdims=0", y, {DType::kI32, {2}}).to_i64_vector(),
            (std::vector<int64_t>{1, -3}));
}

TEST(ReduceKernels, BoolMaxIsAnyFromOpset20) {
  Tensor x(TensorType{DType::kBool, {2, 3}});
  x.set_element_i64(4, 1);
  const Tensor y =
      reduce_op("ReduceMax", "axes=[1], keepdims=0", x, {DType::kBool, {2}}, nullptr, 20);
  EXPECT_EQ(y.to_i64_vector(), (std::vector<int64_t>{0, 1}));
}

// ArgMax and ArgMin beyond the ONNX test data: numpy's NaN rule (a NaN is the extreme, the
// first one wins), ties to the first index or, with select_last_index, the last, and f16 data.
TEST(ReduceKernels, ArgMaxAndArgMinFollowNumpyOnNaNAndTies) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = Tensor::from_doubles(DType::kF32, {2, 4}, {1, nan, 3, nan, 2, 5, 5, -1});
  const TensorType indices{DType::kI64, {2, 1}};
  EXPECT_EQ(reduce_op("ArgMax", "axis=1", x, indices).to_double_vector(),
            (std::vector<double>{1, 1}));
  EXPECT_EQ(reduce_op("ArgMax", "axis=1, select_last_index=1", x, indices).to_double_vector(),
            (std::vector<double>{1, 2}));
  EXPECT_EQ(reduce_op("ArgMin", "axis=1", x, indices).to_double_vector(),
            (std::vector<double>{1, 3}));
  const Tensor half = Tensor::from_doubles(DType::kF16, {3}, {0.5, -2, 0.5});
  EXPECT_EQ(reduce_op("ArgMax", "keepdims=0", half, {DType::kI64, {}}).to_double_vector(),
            std::vector<double>{0});
  EXPECT_EQ(reduce_op("ArgMin", "keepdims=0", half, {DType::kI64, {}}).to_double_vector(),
            std::vector<double>{1});
}

// CumSum accumulates f16 in f32 and rounds each running sum once: 2,100 ones sum to 2,100 (even,
// so exact in f16), where an f16 accumulator would stop at 2,048 (2,048 + 1 rounds back).
TEST(ReduceKernels, CumSumAccumulatesLowPrecisionInF32) {
  const std::vector<double> ones(2100, 1.0);
  const Tensor x = Tensor::from_doubles(DType::kF16, {2100}, ones);
  std::vector<Tensor> inputs = {x, Tensor::from_i64({}, {0})};
  const Tensor y = testing::run_op("CumSum", "", inputs, x.type());
  const std::vector<double> sums = y.to_double_vector();
  EXPECT_EQ(sums[2047], 2048.0);
  EXPECT_EQ(sums[2048], 2048.0);  // 2,049 rounds to even
  EXPECT_EQ(sums[2099], 2100.0);
}

// 2^24 + 2^10 ones: a left-to-right f32 sum stops at 2^24 (2^24 + 1 rounds back to it); the
// pairwise sum's partial sums are all integers below 2^24 but the last, which is exact. On one
// thread the sum streams; on four its blocks are summed by the threads, then combined.
TEST(ReduceKernels, LongSumsArePairwiseAndExactPastTheF32IntegerRange) {
  const int64_t n = (int64_t{1} << 24) + 1024;
  Tensor ones(TensorType{DType::kF32, {n}});
  std::ranges::fill(ones.mutable_data<float>(), 1.0f);
  for (int threads : {1, 4}) {
    const Tensor sum = on_cpu_threads(threads, [&] {
      return reduce_op("ReduceSum", "keepdims=0", ones, {DType::kF32, {}});
    });
    EXPECT_EQ(sum.element_as_double(0), static_cast<double>(n)) << threads << " threads";
    const Tensor mean = on_cpu_threads(threads, [&] {
      return reduce_op("ReduceMean", "keepdims=0", ones, {DType::kF32, {}});
    });
    EXPECT_EQ(mean.element_as_double(0), 1.0) << threads << " threads";
  }
}

// The column sums of a bias gradient: 65,536 rows of 32 columns, the first row 2^24 and the
// others 1. Left to right every column stays at 2^24. Pairwise, the first block of 64 rows
// stays at 2^24 (each + 1 rounds back to even) and the other 1,023 blocks add 64 each, exactly.
TEST(ReduceKernels, ColumnSumsArePairwise) {
  const int64_t rows = 65536, columns = 32;
  Tensor x(TensorType{DType::kF32, {rows, columns}});
  std::span<float> data = x.mutable_data<float>();
  std::ranges::fill(data, 1.0f);
  std::fill_n(data.begin(), columns, 16777216.0f);
  const Tensor y = reduce_op("ReduceSum", "axes=[0], keepdims=0", x, {DType::kF32, {columns}});
  for (int64_t c = 0; c < columns; ++c)
    EXPECT_EQ(y.element_as_double(c), 16777216.0 + 64.0 * 1023) << "column " << c;
}

// The sum of 2^20 values in [0, 1) is within the pairwise bound, (64 + 14) units of roundoff
// (2^-24) of the sum of |x|, of its f64 value. Measured on these values: 0.9 units; a
// left-to-right f32 sum is 116 units off.
TEST(ReduceKernels, LongSumIsWithinThePairwiseErrorBound) {
  const int64_t n = int64_t{1} << 20;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Tensor x(TensorType{DType::kF32, {n}});
  double exact = 0;
  for (float& v : x.mutable_data<float>()) {
    v = uniform(rng);
    exact += v;
  }
  const double got =
      reduce_op("ReduceSum", "keepdims=0", x, {DType::kF32, {}}).element_as_double(0);
  EXPECT_LE(std::abs(got - exact), (64 + 14) * std::ldexp(1.0, -24) * exact);
}

// PairwiseSum (streaming), tree_sum over block sums and PairwiseColumnSums give the recursive
// definition's bits for every length up to 40 blocks and for a few long ones.
TEST(PairwiseSum, StreamingTreeAndColumnFormsFollowTheDefinition) {
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> uniform(-1000.0f, 1000.0f);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 64 * 40; n += 7) lengths.push_back(n);
  for (size_t n : {64u * 64u, 64u * 64u + 1u, 64u * 1000u + 63u}) lengths.push_back(n);
  for (size_t n : lengths) {
    std::vector<float> terms(n);
    for (float& t : terms) t = uniform(rng);
    const float want = pairwise_reference<float>(terms);

    runtime::cpu::PairwiseSum<float> streaming;
    for (float t : terms) streaming.add(t);
    EXPECT_EQ(streaming.total(), want) << n << " terms";

    std::vector<float> blocks;
    for (size_t b = 0; b < n; b += 64) {
      float sum = 0;
      for (size_t i = b; i < std::min(n, b + 64); ++i) sum += terms[i];
      blocks.push_back(sum);
    }
    EXPECT_EQ(runtime::cpu::tree_sum(std::span<float>(blocks)), want) << n << " terms";

    // Two lanes: the terms and their negations.
    runtime::cpu::PairwiseColumnSums<float> columns(3);
    for (float t : terms) {
      const float row[2] = {t, -t};
      columns.add_row(row, 2, [](float v) { return v; });
    }
    float totals[2];
    columns.totals(2, totals);
    EXPECT_EQ(totals[0], want) << n << " terms";
    EXPECT_EQ(totals[1], -want) << n << " terms";
  }
}

TEST(ReduceKernels, BitsDoNotDependOnThreadCount) {
  const std::vector<double> x = random_values(64 * 48 * 40, 6);
  const Tensor input = Tensor::from_doubles(DType::kF32, {64, 48, 40}, x);
  auto reduce_all = [&] {
    std::vector<Tensor> results;
    // One long sum: streamed on one thread, its blocks spread over four.
    results.push_back(reduce_op("ReduceSum", "", input, {DType::kF32, {1, 1, 1}}));
    results.push_back(reduce_op("ReduceSum", "axes=[0, 2]", input, {DType::kF32, {1, 48, 1}}));
    results.push_back(reduce_op("ReduceMean", "axes=[2]", input, {DType::kF32, {64, 48, 1}}));
    results.push_back(reduce_op("ReduceMax", "axes=[0]", input, {DType::kF32, {1, 48, 40}}));
    return results;
  };
  const std::vector<Tensor> one = on_cpu_threads(1, reduce_all);
  const std::vector<Tensor> four = on_cpu_threads(4, reduce_all);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], four[i]) << "result " << i;
}

}  // namespace
}  // namespace ampc
