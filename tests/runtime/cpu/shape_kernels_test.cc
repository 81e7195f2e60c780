// CPU kernels of runtime/cpu/shape.cc: the views (Reshape, Flatten, Squeeze, Unsqueeze,
// Identity), Shape, Expand and Dropout. Expected tensors are hand-written or built one element
// at a time in this file; every dtype runs through the byte-moving kernels.
#include <cmath>
#include <cstdint>
#include <string>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::patterned;
using testing::run;
using testing::same_tensor;
using testing::type_text;

// The same bytes under another shape.
Tensor reshaped(const Tensor& tensor, Shape shape) {
  return Tensor(TensorType{tensor.dtype(), std::move(shape)},
                std::vector<uint8_t>(tensor.bytes().begin(), tensor.bytes().end()));
}

// ---- Views ------------------------------------------------------------------------------------

TEST(ViewKernels, KeepTheBytesUnderTheInferredShapeForEveryDType) {
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::string t(dtype_name(dtype));
    const Tensor x = patterned(dtype, {2, 3, 4});
    const std::vector<Tensor> out = run(str_cat(R"(graph g(%x: )", t, R"([2,3,4]) {
      init %shape: i64[2] = [4, -1]
      init %axes: i64[2] = [0, -1]
      init %last: i64[1] = [-1]
      %r = Reshape(%x, %shape) : )",
                                                t, R"([4,6]
      %f = Flatten<axis=-1>(%x) : )",
                                                t, R"([6,4]
      %f0 = Flatten<axis=0>(%x) : )",
                                                t, R"([1,24]
      %u = Unsqueeze(%x, %axes) : )",
                                                t, R"([1,2,3,4,1]
      %q = Squeeze(%u) : )",
                                                t, R"([2,3,4]
      %q1 = Squeeze(%u, %last) : )",
                                                t, R"([1,2,3,4]
      %i = Identity(%x) : )",
                                                t, R"([2,3,4]
      return %r, %f, %f0, %u, %q, %q1, %i
    })"),
                                        {x});
    ASSERT_EQ(out.size(), 7u);
    EXPECT_TRUE(same_tensor(out[0], reshaped(x, {4, 6})));
    EXPECT_TRUE(same_tensor(out[1], reshaped(x, {6, 4})));
    EXPECT_TRUE(same_tensor(out[2], reshaped(x, {1, 24})));
    EXPECT_TRUE(same_tensor(out[3], reshaped(x, {1, 2, 3, 4, 1})));
    EXPECT_TRUE(same_tensor(out[4], x));
    EXPECT_TRUE(same_tensor(out[5], reshaped(x, {1, 2, 3, 4})));
    EXPECT_TRUE(same_tensor(out[6], x));
  }
}

TEST(ViewKernels, AxesAttributesOfOpset11) {
  const Tensor x = patterned(DType::kBF16, {3, 1, 2});
  const std::vector<Tensor> out = run(R"(graph g(%x: bf16[3,1,2]) opset(11) {
    %q = Squeeze<axes=[-2]>(%x) : bf16[3,2]
    %u = Unsqueeze<axes=[1]>(%q) : bf16[3,1,2]
    return %q, %u
  })",
                                      {x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(same_tensor(out[0], reshaped(x, {3, 2})));
  EXPECT_TRUE(same_tensor(out[1], x));
}

// ---- Shape ------------------------------------------------------------------------------------

TEST(ShapeKernel, ReportsDimsBetweenStartAndEnd) {
  const std::vector<Tensor> out =
      run(R"(graph g(%x: f16[2,3,4], %b: bool[]) {
    %all = Shape(%x) : i64[3]
    %tail = Shape<start=-2>(%x) : i64[2]
    %clamped = Shape<end=10, start=1>(%x) : i64[2]
    %head = Shape<end=-1>(%x) : i64[2]
    %empty = Shape<end=1, start=2>(%x) : i64[0]
    %scalar = Shape(%b) : i64[0]
    return %all, %tail, %clamped, %head, %empty, %scalar
  })",
          {patterned(DType::kF16, {2, 3, 4}), patterned(DType::kBool, {})});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_i64({3}, {2, 3, 4})));
  EXPECT_TRUE(same_tensor(out[1], Tensor::from_i64({2}, {3, 4})));
  EXPECT_TRUE(same_tensor(out[2], Tensor::from_i64({2}, {3, 4})));
  EXPECT_TRUE(same_tensor(out[3], Tensor::from_i64({2}, {2, 3})));
  EXPECT_TRUE(same_tensor(out[4], Tensor::from_i64({0}, {})));
  EXPECT_TRUE(same_tensor(out[5], Tensor::from_i64({0}, {})));
}

// ---- Expand -----------------------------------------------------------------------------------

TEST(ExpandKernel, StretchesInputOnesAndKeepsInputDimsWhereShapeHasOnes) {
  // x[3,1] against [2,1,4]: the input's 1 stretches to 4, the shape's 1 keeps the input's 3.
  const std::vector<Tensor> out = run(R"(graph g(%x: i64[3,1]) {
    init %s: i64[3] = [2, 1, 4]
    %y = Expand(%x, %s) : i64[2,3,4]
    return %y
  })",
                                      {Tensor::from_i64({3, 1}, {10, 20, 30})});
  ASSERT_EQ(out.size(), 1u);
  std::vector<int64_t> expected;
  for (int a = 0; a < 2; ++a) {
    for (int64_t v : {10, 20, 30}) expected.insert(expected.end(), 4, v);
  }
  EXPECT_TRUE(same_tensor(out[0], Tensor::from_i64({2, 3, 4}, expected)));
}

TEST(ExpandKernel, BroadcastsEveryElementSizeBothWays) {
  // x[1,4,1] against [3,1,1,2] gives [3,1,4,2]: out[a,0,c,d] = x[0,c,0].
  for (DType dtype : {DType::kBool, DType::kF8E5M2, DType::kBF16, DType::kF32, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = patterned(dtype, {1, 4, 1});
    const std::vector<Tensor> out =
        run(str_cat("graph g(%x: ", type_text(dtype, {1, 4, 1}), ") {\n",
                    "  init %s: i64[4] = [3, 1, 1, 2]\n  %y = Expand(%x, %s) : ",
                    type_text(dtype, {3, 1, 4, 2}), "\n  return %y\n}"),
            {x});
    ASSERT_EQ(out.size(), 1u);
    Tensor expected(TensorType{dtype, {3, 1, 4, 2}});
    const int size = dtype_size(dtype);
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      const int64_t c = (i / 2) % 4;
      for (int b = 0; b < size; ++b)
        expected.mutable_bytes()[i * size + b] = x.bytes()[c * size + b];
    }
    EXPECT_TRUE(same_tensor(out[0], expected));
  }
}

TEST(ExpandKernel, ScalarFillsTheShape) {
  const std::vector<Tensor> out = run(R"(graph g(%x: f16[]) {
    init %s: i64[2] = [2, 3]
    %y = Expand(%x, %s) : f16[2,3]
    return %y
  })",
                                      {Tensor::from_doubles(DType::kF16, {}, {-1.5})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(
      same_tensor(out[0], Tensor::from_doubles(DType::kF16, {2, 3}, std::vector<double>(6, -1.5))));
}

// ---- Dropout ----------------------------------------------------------------------------------

TEST(DropoutKernel, InferenceIsTheIdentityWithAnAllTrueMask) {
  const Tensor x = patterned(DType::kF16, {2, 3});
  const Tensor all_true = Tensor::from_doubles(DType::kBool, {2, 3}, std::vector<double>(6, 1));
  // No training_mode; training_mode false; training with ratio 0.
  for (std::string_view inputs : {"%x", "%x, %half, %no", "%x, %zero, %yes", "%x, _, %no"}) {
    SCOPED_TRACE(inputs);
    const std::vector<Tensor> out = run(str_cat(R"(graph g(%x: f16[2,3]) {
      init %half: f32[] = [0.5]
      init %zero: f32[] = [0.0]
      init %yes: bool[] = [true]
      init %no: bool[] = [false]
      %y, %m = Dropout()",
                                                inputs, R"() : f16[2,3], bool[2,3]
      return %y, %m
    })"),
                                        {x});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(same_tensor(out[0], x));
    EXPECT_TRUE(same_tensor(out[1], all_true));
  }
  // Opset 10 has no training mode: the ratio attribute does not matter.
  const std::vector<Tensor> old = run(R"(graph g(%x: f16[2,3]) opset(10) {
    %y = Dropout<ratio=0.3>(%x) : f16[2,3]
    return %y
  })",
                                      {x});
  ASSERT_EQ(old.size(), 1u);
  EXPECT_TRUE(same_tensor(old[0], x));
}

// f32 values in [1, 2) from a fixed linear congruential sequence (never zero, so a zero output
// means dropped).
std::vector<float> test_values(int n) {
  std::vector<float> values(n);
  uint32_t state = 12345;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = 1.0f + static_cast<float>(state >> 8) * 0x1p-24f;
  }
  return values;
}

std::string training_dropout_text(std::string_view type, std::string_view ratio,
                                  std::string_view attrs) {
  return str_cat("graph g(%x: ", type, ") {\n  init %r: f32[] = [", ratio, "]\n",
                 "  init %t: bool[] = [true]\n  %y, %m = Dropout", attrs, "(%x, %r, %t) : ", type,
                 ", ", "bool", type.substr(type.find('[')), "\n  return %y, %m\n}");
}

TEST(DropoutKernel, TrainingKeepsAboutOneMinusRatioAndScalesKeptValuesExactly) {
  constexpr int kCount = 10000;
  const std::vector<float> values = test_values(kCount);
  const Tensor x = Tensor::from_f32({kCount}, values);
  const std::vector<Tensor> out =
      run(training_dropout_text("f32[10000]", "0.25", "<seed=42>"), {x});
  ASSERT_EQ(out.size(), 2u);
  // ONNX: scale = 1 / (1 - ratio), the ratio being the f32 input; the product rounds to f32.
  const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(0.25f)));
  const std::span<const float> y = out[0].data<float>();
  const std::span<const uint8_t> mask = out[1].data<uint8_t>();
  int kept = 0;
  for (int i = 0; i < kCount; ++i) {
    ASSERT_TRUE(mask[i] == 0 || mask[i] == 1);
    kept += mask[i];
    EXPECT_EQ(y[i], mask[i] ? values[i] * scale : 0.0f) << "element " << i;
  }
  // Binomial(10000, 0.75) has a standard deviation of 0.0043 in the kept fraction.
  EXPECT_NEAR(kept / double(kCount), 0.75, 0.02);
}

TEST(DropoutKernel, MaskDependsOnTheSeedOnlyNotOnThreads) {
  const Tensor x = Tensor::from_f32({10000}, test_values(10000));
  auto mask_of = [&](std::string_view attrs) {
    const std::vector<Tensor> out = run(training_dropout_text("f32[10000]", "0.5", attrs), {x});
    return out.size() == 2 ? out[1] : Tensor();
  };
  auto seed_7_mask = [&] { return mask_of("<seed=7>"); };
  const Tensor one_thread = testing::on_cpu_threads(1, seed_7_mask);
  const Tensor four_threads = testing::on_cpu_threads(4, seed_7_mask);
  EXPECT_TRUE(one_thread == four_threads);
  EXPECT_FALSE(mask_of("<seed=7>") == mask_of("<seed=8>"));
  // Without a seed the default one is fixed, so runs repeat.
  EXPECT_TRUE(mask_of("") == mask_of(""));
}

TEST(DropoutKernel, LowPrecisionScalesInF32AndRoundsOnce) {
  // Eight copies of: two values whose doubling overflows f16, one whose doubling is exact, a
  // subnormal, f16's largest finite value and a negative one.
  std::vector<double> values;
  for (int copy = 0; copy < 8; ++copy) {
    values.insert(values.end(), {40000, -40000, 1.0009765625, 3.0e-6, 65504, -2.5});
  }
  const int n = values.size();
  const std::string f16_type = str_cat("f16[", n, "]");
  const std::string bf16_type = str_cat("bf16[", n, "]");

  // f16, ratio 0.5: scale 2, so a kept 40000 is inf.
  const Tensor x16 = Tensor::from_doubles(DType::kF16, {n}, values);
  const std::vector<Tensor> out16 = run(training_dropout_text(f16_type, "0.5", "<seed=3>"), {x16});
  ASSERT_EQ(out16.size(), 2u);
  int infinities = 0;
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(x16.data<Float16>()[i]);
    const float factor = out16[1].data<uint8_t>()[i] ? 2.0f : 0.0f;
    const Float16 y = out16[0].data<Float16>()[i];
    EXPECT_EQ(y.bits, Float16(x * factor).bits) << "element " << i;
    infinities += std::isinf(static_cast<float>(y));
  }
  EXPECT_GT(infinities, 0);

  // bf16, ratio 0.1: scale = f32(1 / (1 - f32(0.1))), then one rounding of x * scale.
  const Tensor x_bf = Tensor::from_doubles(DType::kBF16, {n}, values);
  const std::vector<Tensor> out_bf =
      run(training_dropout_text(bf16_type, "0.1", "<seed=3>"), {x_bf});
  ASSERT_EQ(out_bf.size(), 2u);
  const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(0.1f)));
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(x_bf.data<BFloat16>()[i]);
    const float factor = out_bf[1].data<uint8_t>()[i] ? scale : 0.0f;
    EXPECT_EQ(out_bf[0].data<BFloat16>()[i].bits, BFloat16(x * factor).bits) << "element " << i;
  }
}

}  // namespace
}  // namespace ampc
