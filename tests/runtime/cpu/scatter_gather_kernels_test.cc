// CPU kernels of runtime/cpu/scatter_gather.cc: GatherElements, ScatterElements (and Scatter),
// GatherND, ScatterND, GatherElementsGrad and GatherNDGrad. Expected tensors are computed by hand
// (the ONNX spec's examples among them); duplicates, negative indices and out-of-range indices
// are each exercised.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::i64s;
using testing::patterned;
using testing::run;
using testing::run1;
using testing::same_tensor;
using testing::try_run;

Tensor i32s(Shape shape, const std::vector<double>& values) {
  return Tensor::from_doubles(DType::kI32, std::move(shape), values);
}

Tensor f32s(Shape shape, const std::vector<float>& values) {
  return Tensor::from_f32(std::move(shape), values);
}

// The status of a run that must fail with an InvalidArgument error containing `what`.
void expect_index_error(const std::string& text, const std::vector<Tensor>& inputs,
                        const std::string& what, const std::string& op) {
  absl::StatusOr<std::vector<Tensor>> out = try_run(text, inputs);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find(what), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find(op), std::string::npos) << out.status();
}

// ---- GatherElements ---------------------------------------------------------------------------

TEST(GatherElementsKernel, OnnxExampleOnAxis1) {
  const Tensor out = run1(R"(graph g(%x: f32[2,2], %i: i64[2,2]) {
    %y = GatherElements<axis=1>(%x, %i) : f32[2,2]
    return %y
  })",
                          {f32s({2, 2}, {1, 2, 3, 4}), i64s({2, 2}, {0, 0, 1, 0})});
  EXPECT_TRUE(same_tensor(out, f32s({2, 2}, {1, 1, 4, 3})));
}

TEST(GatherElementsKernel, NegativeI32IndicesOnAxis0WithFewerRows) {
  // The ONNX example 2 ([[4,8,3],[7,2,3]]) with its indices written from the back.
  const Tensor out =
      run1(R"(graph g(%x: i64[3,3], %i: i32[2,3]) {
    %y = GatherElements(%x, %i) : i64[2,3]
    return %y
  })",
           {i64s({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), i32s({2, 3}, {-2, 2, 0, -1, 0, -3})});
  EXPECT_TRUE(same_tensor(out, i64s({2, 3}, {4, 8, 3, 7, 2, 3})));
}

TEST(GatherElementsKernel, MovesBytesOfEveryElementSize) {
  for (DType dtype : {DType::kBool, DType::kF16, DType::kF64, DType::kF8E4M3FN}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor data = patterned(dtype, {2, 3});
    const std::string type = testing::type_text(dtype, {2, 2});
    const Tensor out =
        run1(str_cat("graph g(%x: ", testing::type_text(dtype, {2, 3}),
                     ", %i: i64[2,2]) {\n  %y = GatherElements<axis=1>(%x, %i) : ", type,
                     "\n  return %y\n}"),
             {data, i64s({2, 2}, {2, 0, -1, 1})});
    // out[r][c] = data[r][i[r][c]]: elements 2, 0, 5, 4 of the data.
    Tensor expected(TensorType{dtype, {2, 2}});
    const int64_t size = dtype_size(dtype);
    const int64_t from[] = {2, 0, 5, 4};
    for (int k = 0; k < 4; ++k) {
      std::memcpy(expected.mutable_bytes().data() + k * size, data.bytes().data() + from[k] * size,
                  size);
    }
    EXPECT_TRUE(same_tensor(out, expected));
  }
}

TEST(GatherElementsKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  const std::string text = R"(graph g(%x: f32[2,3], %i: i64[2,2]) {
    %y = GatherElements<axis=1>(%x, %i) : f32[2,2]
    return %y
  })";
  for (int64_t bad : {3, -4}) {
    expect_index_error(text, {f32s({2, 3}, {0, 1, 2, 3, 4, 5}), i64s({2, 2}, {0, 1, 2, bad})},
                       str_cat("index ", bad,
                               " (element 3 of the indices) is out of range for "
                               "axis 1 of size 3"),
                       "GatherElements");
  }
}

// ---- ScatterElements, Scatter -----------------------------------------------------------------

std::string scatter_elements_text(std::string_view op, std::string_view attrs, int64_t opset) {
  return str_cat("graph g(%x: f32[1,5], %i: i64[1,4], %u: f32[1,4]) opset(", opset,
                 ") {\n  %y = ", op, "<axis=1", attrs, ">(%x, %i, %u) : f32[1,5]\n  return %y\n}");
}

TEST(ScatterElementsKernel, WritesUpdatesAndTheLastDuplicateWins) {
  const Tensor data = f32s({1, 5}, {1, 2, 3, 4, 5});
  const Tensor indices = i64s({1, 4}, {1, 3, -1, 1});
  const Tensor updates = f32s({1, 4}, {10, 20, 30, 40});
  const Tensor want = f32s({1, 5}, {1, 40, 3, 20, 30});
  EXPECT_TRUE(same_tensor(
      run1(scatter_elements_text("ScatterElements", "", 13), {data, indices, updates}), want));
  // The deprecated Scatter (opsets 9-10) is the same op.
  EXPECT_TRUE(
      same_tensor(run1(scatter_elements_text("Scatter", "", 10), {data, indices, updates}), want));
}

TEST(ScatterElementsKernel, ReductionsCombineDuplicatesInIndexOrder) {
  const Tensor data = f32s({1, 5}, {1, 2, 3, 4, 5});
  const Tensor indices = i64s({1, 4}, {1, 1, 3, 0});
  const Tensor updates = f32s({1, 4}, {5, 1.5f, -2, 7});
  const struct {
    const char* reduction;
    std::vector<float> want;
  } cases[] = {
      {"add", {8, 8.5f, 3, 2, 5}},
      {"mul", {7, 15, 3, -8, 5}},
      {"max", {7, 5, 3, 4, 5}},
      {"min", {1, 1.5f, 3, -2, 5}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.reduction);
    const Tensor out = run1(
        scatter_elements_text("ScatterElements", str_cat(", reduction=\"", c.reduction, "\""), 18),
        {data, indices, updates});
    EXPECT_TRUE(same_tensor(out, f32s({1, 5}, c.want)));
  }
}

TEST(ScatterElementsKernel, F16AddRoundsEachUpdate) {
  // 2048 + 1 + 1 in f16: each sum rounds to even (2049 -> 2048), so the result stays 2048, where
  // one rounding of the f32 sum would give 2050.
  const Tensor data = Tensor::from_doubles(DType::kF16, {2}, {2048, 0});
  const Tensor updates = Tensor::from_doubles(DType::kF16, {2}, {1, 1});
  const Tensor out = run1(R"(graph g(%x: f16[2], %i: i64[2], %u: f16[2]) opset(18) {
    %y = ScatterElements<reduction="add">(%x, %i, %u) : f16[2]
    return %y
  })",
                          {data, i64s({2}, {0, 0}), updates});
  EXPECT_TRUE(same_tensor(out, Tensor::from_doubles(DType::kF16, {2}, {2048, 0})));
}

TEST(ScatterElementsKernel, IntegerAddWrapsAndAxis0NegativeIndices) {
  const Tensor out = run1(R"(graph g(%x: i32[3,2], %i: i64[2,2], %u: i32[2,2]) opset(16) {
    %y = ScatterElements<reduction="add">(%x, %i, %u) : i32[3,2]
    return %y
  })",
                          {i32s({3, 2}, {2147483647, 1, 2, 3, 4, 5}), i64s({2, 2}, {0, -1, -3, 2}),
                           i32s({2, 2}, {1, 10, 100, 1000})});
  // (0,0) += 1 (wraps) then += 100; (2,1) += 10 then += 1000.
  EXPECT_TRUE(same_tensor(out, i32s({3, 2}, {-2147483648.0 + 100, 1, 2, 3, 4, 1015})));
}

TEST(ScatterElementsKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  expect_index_error(
      scatter_elements_text("ScatterElements", "", 13),
      {f32s({1, 5}, {1, 2, 3, 4, 5}), i64s({1, 4}, {0, 1, 5, 2}), f32s({1, 4}, {1, 2, 3, 4})},
      "index 5 (element 2 of the indices) is out of range for axis 1 of size 5", "ScatterElements");
}

// ---- GatherND ---------------------------------------------------------------------------------

TEST(GatherNDKernel, OnnxExamples) {
  const Tensor data = i64s({2, 2}, {0, 1, 2, 3});
  // Elements, then rows.
  EXPECT_TRUE(same_tensor(run1(R"(graph g(%x: i64[2,2], %i: i64[2,2]) {
    %y = GatherND(%x, %i) : i64[2]
    return %y
  })",
                               {data, i64s({2, 2}, {0, 0, 1, 1})}),
                          i64s({2}, {0, 3})));
  EXPECT_TRUE(same_tensor(run1(R"(graph g(%x: i64[2,2], %i: i64[2,1]) {
    %y = GatherND(%x, %i) : i64[2,2]
    return %y
  })",
                               {data, i64s({2, 1}, {1, 0})}),
                          i64s({2, 2}, {2, 3, 0, 1})));
  // batch_dims 1: each batch picks its own row.
  EXPECT_TRUE(same_tensor(run1(R"(graph g(%x: i64[2,2,2], %i: i32[2,1]) {
    %y = GatherND<batch_dims=1>(%x, %i) : i64[2,2]
    return %y
  })",
                               {i64s({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i32s({2, 1}, {1, -2})}),
                          i64s({2, 2}, {2, 3, 4, 5})));
}

TEST(GatherNDKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  expect_index_error(R"(graph g(%x: f32[2,3], %i: i64[2,2]) {
    %y = GatherND(%x, %i) : f32[2]
    return %y
  })",
                     {f32s({2, 3}, {0, 1, 2, 3, 4, 5}), i64s({2, 2}, {1, 2, 0, -4})},
                     "index -4 (element 3 of the indices) is out of range for axis 1 of size 3",
                     "GatherND");
}

// ---- ScatterND --------------------------------------------------------------------------------

std::string scatter_nd_text(std::string_view attrs) {
  return str_cat("graph g(%x: f32[8], %i: i64[4,1], %u: f32[4]) opset(18) {\n  %y = ScatterND",
                 attrs, "(%x, %i, %u) : f32[8]\n  return %y\n}");
}

TEST(ScatterNDKernel, OnnxExampleAndReductionsOverDuplicates) {
  const Tensor data = f32s({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor updates = f32s({4}, {9, 10, 11, 12});
  EXPECT_TRUE(same_tensor(run1(scatter_nd_text(""), {data, i64s({4, 1}, {4, 3, 1, 7}), updates}),
                          f32s({8}, {1, 11, 3, 10, 9, 6, 7, 12})));
  // Index 0 three times (once as -8), then the last element.
  const Tensor duplicates = i64s({4, 1}, {0, -8, 0, -1});
  const struct {
    const char* reduction;
    std::vector<float> want;
  } cases[] = {
      {"none", {11, 2, 3, 4, 5, 6, 7, 12}}, {"add", {31, 2, 3, 4, 5, 6, 7, 20}},
      {"mul", {990, 2, 3, 4, 5, 6, 7, 96}}, {"max", {11, 2, 3, 4, 5, 6, 7, 12}},
      {"min", {1, 2, 3, 4, 5, 6, 7, 8}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.reduction);
    const Tensor out = run1(scatter_nd_text(str_cat("<reduction=\"", c.reduction, "\">")),
                            {data, duplicates, updates});
    EXPECT_TRUE(same_tensor(out, f32s({8}, c.want)));
  }
}

TEST(ScatterNDKernel, WritesRowSlices) {
  const Tensor out = run1(
      R"(graph g(%x: i64[3,2], %i: i32[2,1], %u: i64[2,2]) {
    %y = ScatterND(%x, %i, %u) : i64[3,2]
    return %y
  })",
      {i64s({3, 2}, {0, 1, 2, 3, 4, 5}), i32s({2, 1}, {-1, 0}), i64s({2, 2}, {10, 11, 20, 21})});
  EXPECT_TRUE(same_tensor(out, i64s({3, 2}, {20, 21, 2, 3, 10, 11})));
}

TEST(ScatterNDKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  expect_index_error(
      scatter_nd_text(""),
      {f32s({8}, {1, 2, 3, 4, 5, 6, 7, 8}), i64s({4, 1}, {0, 8, 1, 2}), f32s({4}, {1, 2, 3, 4})},
      "index 8 (element 1 of the indices) is out of range for axis 0 of size 8", "ScatterND");
}

// ---- GatherElementsGrad, GatherNDGrad ---------------------------------------------------------

TEST(GatherElementsGradKernel, SumsDuplicatesIntoZeros) {
  // dY[r][c] goes to dX[i[r][c]][c] (axis 0).
  const std::string text = R"(graph g(%dy: f32[2,3], %i: i64[2,3]) opset(17, ampc:1) {
    %dx = ampc.GatherElementsGrad<shape=[3,3]>(%dy, %i) : f32[3,3]
    return %dx
  })";
  const Tensor out =
      run1(text, {f32s({2, 3}, {1, 2, 3, 4, 5, 6}), i64s({2, 3}, {1, 2, 0, -2, 0, 0})});
  EXPECT_TRUE(same_tensor(out, f32s({3, 3}, {0, 5, 9, 5, 0, 0, 0, 2, 0})));
}

TEST(GatherElementsGradKernel, Bf16SumsInF32AndRoundsOnce) {
  // 256 + 1 + 1 in bf16 steps would stay 256; summed in f32 it is 258, which bf16 holds.
  const Tensor dy = Tensor::from_doubles(DType::kBF16, {3}, {256, 1, 1});
  const Tensor out = run1(R"(graph g(%dy: bf16[3], %i: i64[3]) opset(17, ampc:1) {
    %dx = ampc.GatherElementsGrad<shape=[2]>(%dy, %i) : bf16[2]
    return %dx
  })",
                          {dy, i64s({3}, {1, 1, 1})});
  EXPECT_TRUE(same_tensor(out, Tensor::from_doubles(DType::kBF16, {2}, {0, 258})));
}

TEST(GatherNDGradKernel, SumsRepeatedRowsIntoZeros) {
  const Tensor out = run1(R"(graph g(%dy: f32[3,2], %i: i64[3,1]) opset(17, ampc:1) {
    %dx = ampc.GatherNDGrad<shape=[2,2]>(%dy, %i) : f32[2,2]
    return %dx
  })",
                          {f32s({3, 2}, {1, 2, 3, 4, 5, 6}), i64s({3, 1}, {1, 0, -1})});
  EXPECT_TRUE(same_tensor(out, f32s({2, 2}, {3, 4, 6, 8})));
}

TEST(GatherNDGradKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  expect_index_error(R"(graph g(%dy: f32[2,2], %i: i64[2,1]) opset(17, ampc:1) {
    %dx = ampc.GatherNDGrad<shape=[2,2]>(%dy, %i) : f32[2,2]
    return %dx
  })",
                     {f32s({2, 2}, {1, 2, 3, 4}), i64s({2, 1}, {0, 2})},
                     "index 2 (element 1 of the indices) is out of range for axis 0 of size 2",
                     "GatherNDGrad");
}

}  // namespace
}  // namespace ampc
