// CPU kernels of runtime/cpu/shape_grad.cc: DropoutGrad (ampc domain). References are computed
// in this file: dY * mask / (1 - ratio) in f64 for f64, and in f32 rounded once for f32, f16 and
// bf16; and, in training, DropoutGrad on Dropout's own mask must scale exactly as Dropout did.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::random_values;
using testing::run;
using testing::same_tensor;
using testing::try_run;
using testing::type_text;

constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

Tensor mask_of(const Shape& shape, uint32_t seed) {
  std::vector<double> bits;
  for (double v : random_values(num_elements(shape), seed)) bits.push_back(v > 0.3 ? 1 : 0);
  return Tensor::from_doubles(DType::kBool, shape, bits);
}

// DropoutGrad(%dy, %mask, <operands>) with the given attributes and initializers.
Tensor run_dropout_grad(const Tensor& dy, const Tensor& mask, std::string_view operands,
                        std::string_view attrs = "") {
  const std::vector<Tensor> out =
      run(str_cat("graph g(%dy: ", type_text(dy.dtype(), dy.shape()),
                  ", %mask: ", type_text(DType::kBool, dy.shape()), ") opset(17, ampc:1) {\n",
                  "  init %quarter: f32[] = [0.25]\n  init %zero: f64[] = [0.0]\n",
                  "  init %yes: bool[] = [true]\n  init %no: bool[] = [false]\n",
                  "  %dx = ampc.DropoutGrad", attrs.empty() ? "" : str_cat("<", attrs, ">"),
                  "(%dy, %mask", operands, ") : ", type_text(dy.dtype(), dy.shape()),
                  "\n  return %dx\n}"),
          {dy, mask});
  return out.size() == 1 ? out[0] : Tensor();
}

TEST(DropoutGradKernel, OutsideTrainingDxIsDyBitForBit) {
  const Shape shape = {3, 4};
  const Tensor mask = mask_of(shape, 1);
  for (DType dtype : kFloatDTypes) {
    const Tensor dy = Tensor::from_doubles(dtype, shape, random_values(12, 2));
    // No training_mode; training_mode false; training with ratio 0.
    for (std::string_view operands : {"", ", %quarter, %no", ", %zero, %yes", ", _, %no"}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " operands '", operands, "'"));
      EXPECT_TRUE(same_tensor(run_dropout_grad(dy, mask, operands), dy));
    }
  }
}

TEST(DropoutGradKernel, TrainingScalesKeptElementsAndZeroesDroppedOnesRoundingOnce) {
  const Shape shape = {5, 7};
  const Tensor mask = mask_of(shape, 3);
  const std::vector<double> values = random_values(35, 4);
  // Ratio from the input (0.25) and from the attribute (0.3, an f32 attribute value).
  for (const auto& [operands, attrs, ratio] :
       {std::tuple<std::string_view, std::string_view, double>{", %quarter, %yes", "", 0.25},
        {", _, %yes", "ratio=0.3", static_cast<double>(0.3f)}}) {
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " ratio ", ratio));
      const Tensor dy = Tensor::from_doubles(dtype, shape, values);
      const std::vector<double> dy_values = dy.to_double_vector();
      std::vector<double> expected(35);
      for (int64_t i = 0; i < 35; ++i) {
        const bool kept = mask.element_as_i64(i) != 0;
        // A dropped element is dY * 0, so a negative dY gives -0, as the forward Dropout does.
        if (dtype == DType::kF64) {
          expected[i] = dy_values[i] * (kept ? 1.0 / (1.0 - ratio) : 0.0);
        } else {  // f32 arithmetic; from_doubles then rounds the f32 value once
          const float scale = static_cast<float>(1.0 / (1.0 - ratio));
          expected[i] = static_cast<float>(dy_values[i]) * (kept ? scale : 0.0f);
        }
      }
      EXPECT_TRUE(same_tensor(run_dropout_grad(dy, mask, operands, attrs),
                              Tensor::from_doubles(dtype, shape, expected)));
    }
  }
}

TEST(DropoutGradKernel, OnDropoutsOwnMaskScalesExactlyAsDropoutDid) {
  // dY = x: then DropoutGrad(x, mask) must equal Dropout(x) bit for bit.
  for (DType dtype : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape = {6, 9};
    const Tensor x = Tensor::from_doubles(dtype, shape, random_values(54, 6));
    const std::string t = type_text(dtype, shape);
    const std::vector<Tensor> out =
        run(str_cat("graph g(%x: ", t, ") opset(17, ampc:1) {\n",
                    "  init %ratio: f32[] = [0.4]\n  init %yes: bool[] = [true]\n",
                    "  %y, %m = Dropout<seed=3>(%x, %ratio, %yes) : ", t, ", ",
                    type_text(DType::kBool, shape), "\n",
                    "  %dx = ampc.DropoutGrad(%x, %m, %ratio, %yes) : ", t, "\n",
                    "  return %y, %dx\n}"),
            {x});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(same_tensor(out[1], out[0]));
  }
}

TEST(DropoutGradKernel, RatioOfOneIsAnError) {
  const absl::StatusOr<std::vector<Tensor>> out =
      try_run(R"(graph g(%dy: f32[2], %mask: bool[2], %r: f32[]) opset(17, ampc:1) {
    init %yes: bool[] = [true]
    %dx = ampc.DropoutGrad(%dy, %mask, %r, %yes) : f32[2]
    return %dx
  })",
              {Tensor::from_f32({2}, {1, 2}), Tensor::from_doubles(DType::kBool, {2}, {1, 0}),
               Tensor::from_f32({}, {1.0f})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("ratio 1"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace ampc
