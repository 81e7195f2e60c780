// CPU kernels of runtime/cpu/data_movement.cc: Concat, Split, Gather, Slice, Transpose, Trilu.
// Expected tensors are written by hand or built one element at a time by a naive index mapping
// in this file; dtypes of every element size (bool and fp8 included) show the kernels move
// bytes without converting them.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::i64s;
using testing::on_cpu_threads;
using testing::patterned;
using testing::run;
using testing::run1;
using testing::same_tensor;
using testing::try_run;
using testing::type_text;

// 0, 1, 2, ... as i64: an element's value is its position in the input.
Tensor iota(Shape shape) {
  std::vector<int64_t> values(num_elements(shape));
  for (size_t i = 0; i < values.size(); ++i) values[i] = i;
  return Tensor::from_i64(std::move(shape), values);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// The tensor of `type` whose element at multi-index o is the element of `in` at flat index
// source(o), or zero when source returns -1; one element at a time.
Tensor naive_move(const Tensor& in, const TensorType& type,
                  const std::function<int64_t(const std::vector<int64_t>&)>& source) {
  Tensor out(type);
  const int size = dtype_size(type.dtype);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const int64_t from = source(unravel(i, type.shape));
    for (int b = 0; b < size; ++b) {
      out.mutable_bytes()[i * size + b] = from < 0 ? 0 : in.bytes()[from * size + b];
    }
  }
  return out;
}

std::string ints_text(const std::vector<int64_t>& values) {
  return str_cat("[", str_join(values, ", "), "]");
}

// ---- Transpose --------------------------------------------------------------------------------

TEST(TransposeKernel, FourDimPermutationsMatchNaiveIndexMappingForEveryDType) {
  const Shape in_shape = {2, 3, 4, 5};
  // The input's last dim moved inward (tiled), kept last, and moved outward.
  for (const std::vector<int64_t>& perm :
       {std::vector<int64_t>{2, 0, 3, 1}, {2, 1, 0, 3}, {3, 1, 2, 0}}) {
    Shape out_shape(4);
    for (int d = 0; d < 4; ++d) out_shape[d] = in_shape[perm[d]];
    for (DType dtype : kAllDTypes) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " perm ", ints_text(perm)));
      const Tensor in = patterned(dtype, in_shape);
      const Tensor out = run1(str_cat("graph g(%x: ", type_text(dtype, in_shape), ") {\n",
                                      "  %y = Transpose<perm=", ints_text(perm),
                                      ">(%x) : ", type_text(dtype, out_shape), "\n  return %y\n}"),
                              {in});
      // Output dim d walks input dim perm[d].
      const Tensor expected = naive_move(in, {dtype, out_shape}, [&](const auto& o) {
        std::vector<int64_t> i(4);
        for (int d = 0; d < 4; ++d) i[perm[d]] = o[d];
        return ravel(i, in_shape);
      });
      EXPECT_TRUE(same_tensor(out, expected));
    }
  }
}

TEST(TransposeKernel, DefaultPermReversesDims) {
  // [[0,1,2],[3,4,5]] of shape [1,2,3] reversed to [3,2,1].
  const Tensor out = run1(R"(graph g(%x: i64[1,2,3]) {
    %y = Transpose(%x) : i64[3,2,1]
    return %y
  })",
                          {iota({1, 2, 3})});
  EXPECT_TRUE(same_tensor(out, i64s({3, 2, 1}, {0, 3, 1, 4, 2, 5})));
}

TEST(TransposeKernel, LargeTransposeIsTheSameOnOneThreadAndMany) {
  const Shape in_shape = {64, 48, 96};
  const Tensor in = patterned(DType::kF32, in_shape);
  const std::string text = R"(graph g(%x: f32[64,48,96]) {
    %y = Transpose<perm=[2, 0, 1]>(%x) : f32[96,64,48]
    return %y
  })";
  const Tensor expected = naive_move(in, {DType::kF32, {96, 64, 48}}, [&](const auto& o) {
    return ravel({o[1], o[2], o[0]}, in_shape);
  });
  auto transpose = [&] { return run1(text, {in}); };
  const Tensor one_thread = on_cpu_threads(1, transpose);
  const Tensor four_threads = on_cpu_threads(4, transpose);
  EXPECT_TRUE(same_tensor(one_thread, expected));
  EXPECT_TRUE(same_tensor(four_threads, expected));
}

// ---- Concat -----------------------------------------------------------------------------------

TEST(ConcatKernel, JoinsAlongEachAxisIncludingNegative) {
  const Shape a_shape = {2, 3, 4};
  for (int64_t axis : {0, 1, 2, -1, -3}) {
    SCOPED_TRACE(str_cat("axis ", axis));
    const int64_t d = axis < 0 ? axis + 3 : axis;
    Shape b_shape = a_shape;
    b_shape[d] = 2;
    Shape out_shape = a_shape;
    out_shape[d] += 2;
    const Tensor a = iota(a_shape);
    Tensor b = iota(b_shape);
    for (int64_t i = 0; i < b.num_elements(); ++i) b.set_element_i64(i, 1000 + i);
    const Tensor out =
        run1(str_cat("graph g(%a: ", type_text(DType::kI64, a_shape),
                     ", %b: ", type_text(DType::kI64, b_shape), ") {\n  %y = Concat<axis=", axis,
                     ">(%a, %b) : ", type_text(DType::kI64, out_shape), "\n  return %y\n}"),
             {a, b});
    Tensor expected(TensorType{DType::kI64, out_shape});
    for (int64_t i = 0; i < expected.num_elements(); ++i) {
      std::vector<int64_t> o = unravel(i, out_shape);
      if (o[d] < a_shape[d]) {
        expected.set_element_i64(i, ravel(o, a_shape));
      } else {
        o[d] -= a_shape[d];
        expected.set_element_i64(i, 1000 + ravel(o, b_shape));
      }
    }
    EXPECT_TRUE(same_tensor(out, expected));
  }
}

TEST(ConcatKernel, MovesBf16AndBoolBytesAndSkipsEmptyInputs) {
  for (DType dtype : {DType::kBF16, DType::kBool, DType::kF8E4M3FN, DType::kF64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor a = patterned(dtype, {2, 1});
    const Tensor b = patterned(dtype, {2, 0});
    const Tensor c = patterned(dtype, {2, 2});
    const Tensor out =
        run1(str_cat("graph g(%a: ", type_text(dtype, {2, 1}), ", %b: ", type_text(dtype, {2, 0}),
                     ", %c: ", type_text(dtype, {2, 2}),
                     ") {\n  %y = Concat<axis=1>(%a, %b, %c) : ", type_text(dtype, {2, 3}),
                     "\n  return %y\n}"),
             {a, b, c});
    // Row r: a[r], c[r, 0], c[r, 1].
    Tensor expected(TensorType{dtype, {2, 3}});
    const int size = dtype_size(dtype);
    auto put = [&](int64_t to, const Tensor& from, int64_t at) {
      for (int i = 0; i < size; ++i)
        expected.mutable_bytes()[to * size + i] = from.bytes()[at * size + i];
    };
    put(0, a, 0), put(1, c, 0), put(2, c, 1), put(3, a, 1), put(4, c, 2), put(5, c, 3);
    EXPECT_TRUE(same_tensor(out, expected));
  }
}

// ---- Split ------------------------------------------------------------------------------------

TEST(SplitKernel, NumOutputsGivesEqualPartsWithASmallerLast) {
  const std::vector<Tensor> out = run(R"(graph g(%x: i64[7]) opset(18) {
    %a, %b, %c = Split<num_outputs=3>(%x) : i64[3], i64[3], i64[1]
    return %a, %b, %c
  })",
                                      {iota({7})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(same_tensor(out[0], i64s({3}, {0, 1, 2})));
  EXPECT_TRUE(same_tensor(out[1], i64s({3}, {3, 4, 5})));
  EXPECT_TRUE(same_tensor(out[2], i64s({1}, {6})));
}

TEST(SplitKernel, ExplicitSizesInputAlongNegativeAxis) {
  const std::vector<Tensor> out = run(R"(graph g(%x: i64[2,6]) {
    init %s: i64[3] = [1, 0, 5]
    %a, %b, %c = Split<axis=-1>(%x, %s) : i64[2,1], i64[2,0], i64[2,5]
    return %a, %b, %c
  })",
                                      {iota({2, 6})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(same_tensor(out[0], i64s({2, 1}, {0, 6})));
  EXPECT_TRUE(same_tensor(out[1], i64s({2, 0}, {})));
  EXPECT_TRUE(same_tensor(out[2], i64s({2, 5}, {1, 2, 3, 4, 5, 7, 8, 9, 10, 11})));
}

TEST(SplitKernel, OmittedOutputStillTakesItsPiece) {
  const std::vector<Tensor> out = run(R"(graph g(%x: i64[6]) {
    init %s: i64[3] = [1, 2, 3]
    %a, _, %c = Split(%x, %s) : i64[1], _, i64[3]
    return %a, %c
  })",
                                      {iota({6})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(same_tensor(out[0], i64s({1}, {0})));
  EXPECT_TRUE(same_tensor(out[1], i64s({3}, {3, 4, 5})));
}

TEST(SplitKernel, SplitAttributeOfOldOpsetAndEqualSplitOfOutputs) {
  const std::vector<Tensor> sized = run(R"(graph g(%x: i64[5,2]) opset(11) {
    %a, %b = Split<split=[2, 3]>(%x) : i64[2,2], i64[3,2]
    return %a, %b
  })",
                                        {iota({5, 2})});
  ASSERT_EQ(sized.size(), 2u);
  EXPECT_TRUE(same_tensor(sized[0], i64s({2, 2}, {0, 1, 2, 3})));
  EXPECT_TRUE(same_tensor(sized[1], i64s({3, 2}, {4, 5, 6, 7, 8, 9})));

  const Tensor in = patterned(DType::kBF16, {2, 4});
  const std::vector<Tensor> halves = run(R"(graph g(%x: bf16[2,4]) {
    %a, %b = Split<axis=1>(%x) : bf16[2,2], bf16[2,2]
    return %a, %b
  })",
                                         {in});
  ASSERT_EQ(halves.size(), 2u);
  for (int64_t half = 0; half < 2; ++half) {
    EXPECT_TRUE(same_tensor(halves[half], naive_move(in, {DType::kBF16, {2, 2}}, [&](auto o) {
                              return o[0] * 4 + half * 2 + o[1];
                            })));
  }
}

// ---- Gather -----------------------------------------------------------------------------------

TEST(GatherKernel, EmbeddingLookupWithMatrixOfIndices) {
  // Rows 2, 0 / 0, 1 of a [3,2] table.
  const Tensor out = run1(R"(graph g(%x: i64[3,2], %i: i64[2,2]) {
    %y = Gather(%x, %i) : i64[2,2,2]
    return %y
  })",
                          {iota({3, 2}), i64s({2, 2}, {2, 0, 0, 1})});
  EXPECT_TRUE(same_tensor(out, i64s({2, 2, 2}, {4, 5, 0, 1, 0, 1, 2, 3})));
}

TEST(GatherKernel, NegativeIndicesCountFromTheBackOnInnerAxis) {
  // Columns -1 (= 3) and 1 of [[0,1,2,3],[4,5,6,7]], i32 indices, axis -1.
  Tensor indices(TensorType{DType::kI32, {2}});
  indices.set_element_i64(0, -1);
  indices.set_element_i64(1, 1);
  const Tensor out = run1(R"(graph g(%x: i64[2,4], %i: i32[2]) {
    %y = Gather<axis=-1>(%x, %i) : i64[2,2]
    return %y
  })",
                          {iota({2, 4}), indices});
  EXPECT_TRUE(same_tensor(out, i64s({2, 2}, {3, 1, 7, 5})));
}

TEST(GatherKernel, ScalarIndexOnMiddleAxisOfBoolAndF16) {
  for (DType dtype : {DType::kBool, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor in = patterned(dtype, {2, 5, 3});
    const Tensor out =
        run1(str_cat("graph g(%x: ", type_text(dtype, {2, 5, 3}),
                     ", %i: i64[]) {\n  %y = Gather<axis=1>(%x, %i) : ", type_text(dtype, {2, 3}),
                     "\n  return %y\n}"),
             {in, i64s({}, {-2})});
    EXPECT_TRUE(same_tensor(out, naive_move(in, {dtype, {2, 3}}, [&](auto o) {
                              return ravel({o[0], 3, o[1]}, {2, 5, 3});
                            })));
  }
}

TEST(GatherKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  const std::string text = R"(graph g(%x: f32[4,2], %i: i64[3]) {
    %y = Gather(%x, %i) : f32[3,2]
    return %y
  })";
  const Tensor data = Tensor::from_f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  for (int64_t bad : {4, -5}) {
    absl::StatusOr<std::vector<Tensor>> out = try_run(text, {data, i64s({3}, {0, bad, 1})});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(str_cat("index ", bad,
                                                  " (element 1 of the indices) is "
                                                  "out of range for axis 0 of size 4")),
              std::string::npos)
        << out.status();
    EXPECT_NE(out.status().message().find("Gather"), std::string::npos) << out.status();
  }
}

// ---- Slice ------------------------------------------------------------------------------------

// Runs Slice on `in` with constant starts, ends and (when not empty) axes and steps, of `index`
// type; the output shape is what inference gives.
Tensor run_slice(const Tensor& in, const Shape& out_shape, const std::vector<int64_t>& starts,
                 const std::vector<int64_t>& ends, const std::vector<int64_t>& axes = {},
                 const std::vector<int64_t>& steps = {}, DType index = DType::kI64) {
  const std::string n = str_cat(dtype_name(index), "[", starts.size(), "]");
  std::string text =
      str_cat("graph g(%x: ", type_to_string(in.type()), ") {\n", "  init %s: ", n, " = ",
              ints_text(starts), "\n  init %e: ", n, " = ", ints_text(ends), "\n");
  std::string operands = "%x, %s, %e";
  if (!axes.empty()) text += str_cat("  init %a: ", n, " = ", ints_text(axes), "\n");
  if (!steps.empty()) text += str_cat("  init %t: ", n, " = ", ints_text(steps), "\n");
  if (!axes.empty() || !steps.empty()) operands += axes.empty() ? ", _" : ", %a";
  if (!steps.empty()) operands += ", %t";
  text += str_cat("  %y = Slice(", operands, ") : ", type_text(in.dtype(), out_shape),
                  "\n  return %y\n}");
  return run1(text, {in});
}

TEST(SliceKernel, OnnxExamplesWithStepsAndClampedEnds) {
  const Tensor data = i64s({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_TRUE(
      same_tensor(run_slice(data, {1, 2}, {1, 0}, {2, 3}, {0, 1}, {1, 2}), i64s({1, 2}, {5, 7})));
  EXPECT_TRUE(same_tensor(run_slice(data, {1, 3}, {0, 1}, {-1, 1000}), i64s({1, 3}, {2, 3, 4})));
}

TEST(SliceKernel, NegativeStepsReverseAndClampBothEnds) {
  const Tensor data = iota({10});
  // INT64_MIN end with step -1 runs through element 0.
  EXPECT_TRUE(same_tensor(run_slice(data, {10}, {-1}, {INT64_MIN}, {0}, {-1}),
                          i64s({10}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0})));
  EXPECT_TRUE(same_tensor(run_slice(data, {3}, {8}, {1}, {0}, {-3}), i64s({3}, {8, 5, 2})));
  // A start past the end clamps to dim - 1, an end before the front to "before element 0".
  EXPECT_TRUE(same_tensor(run_slice(data, {3}, {100}, {-100}, {0}, {-4}), i64s({3}, {9, 5, 1})));
  EXPECT_TRUE(same_tensor(run_slice(data, {1}, {-1}, {-11}, {0}, {INT64_MIN}), i64s({1}, {9})));
}

TEST(SliceKernel, EndsBeyondBoundsAndInt64MaxEndsClampToTheDim) {
  const Tensor data = iota({10});
  EXPECT_TRUE(same_tensor(run_slice(data, {3}, {7}, {1000}), i64s({3}, {7, 8, 9})));
  EXPECT_TRUE(
      same_tensor(run_slice(data, {5}, {1}, {INT64_MAX}, {0}, {2}), i64s({5}, {1, 3, 5, 7, 9})));
  EXPECT_TRUE(
      same_tensor(run_slice(data, {1}, {2}, {INT64_MAX}, {0}, {INT64_MAX}), i64s({1}, {2})));
  EXPECT_TRUE(same_tensor(run_slice(data, {2}, {-1000}, {2}), i64s({2}, {0, 1})));
}

TEST(SliceKernel, EmptyWindowsGiveEmptyOutputs) {
  const Tensor data = iota({10});
  EXPECT_TRUE(same_tensor(run_slice(data, {0}, {5}, {2}), i64s({0}, {})));
  EXPECT_TRUE(same_tensor(run_slice(data, {0}, {2}, {5}, {0}, {-1}), i64s({0}, {})));
  EXPECT_TRUE(same_tensor(run_slice(data, {0}, {10}, {INT64_MAX}), i64s({0}, {})));
}

TEST(SliceKernel, NegativeAxesAndI32IndicesOnBool) {
  const Tensor in = patterned(DType::kBool, {3, 4});
  // Columns -3 and -2 (1 and 2) of every row.
  const Tensor out = run_slice(in, {3, 2}, {-3}, {-1}, {-1}, {}, DType::kI32);
  EXPECT_TRUE(same_tensor(out, naive_move(in, {DType::kBool, {3, 2}},
                                          [](const auto& o) { return o[0] * 4 + 1 + o[1]; })));
}

TEST(SliceKernel, ScalarStartsAndEndsCountAsOneElement) {
  // As ONNX Runtime reads them (PyTorch's TorchScript exporter writes them inside Loops).
  const Tensor out = run1(
      "graph g(%x: i64[3,4]) {\n"
      "  init %s: i64[] = [1]\n  init %e: i64[] = [3]\n  init %a: i64[] = [-1]\n"
      "  %y = Slice(%x, %s, %e, %a) : i64[3,2]\n  return %y\n}",
      {iota({3, 4})});
  EXPECT_TRUE(same_tensor(out, i64s({3, 2}, {1, 2, 5, 6, 9, 10})));
}

TEST(SliceKernel, StepsOnSeveralAxesOfBf16MatchNaiveIndexing) {
  const Shape shape = {4, 5, 6};
  const Tensor in = patterned(DType::kBF16, shape);
  // Axis 2: 5, 3, 1 (start -1, step -2); axis 0: 1, 3 (step 2); axis 1 untouched.
  const Tensor out = run_slice(in, {2, 5, 3}, {-1, 1}, {-100, 4}, {2, 0}, {-2, 2});
  EXPECT_TRUE(same_tensor(out, naive_move(in, {DType::kBF16, {2, 5, 3}}, [&](const auto& o) {
                            return ravel({1 + 2 * o[0], o[1], 5 - 2 * o[2]}, shape);
                          })));
}

// ---- Trilu ------------------------------------------------------------------------------------

// Trilu of the [3,5] matrix 1..15 with `attrs` and k (none when absent).
Tensor run_trilu_3x5(std::string_view attrs, std::optional<int64_t> k) {
  std::vector<int64_t> values(15);
  for (int i = 0; i < 15; ++i) values[i] = i + 1;
  const std::string k_init = k ? str_cat("  init %k: i64[] = [", *k, "]\n") : "";
  return run1(str_cat("graph g(%x: i64[3,5]) {\n", k_init, "  %y = Trilu", attrs, "(%x",
                      k ? ", %k" : "", ") : i64[3,5]\n  return %y\n}"),
              {i64s({3, 5}, values)});
}

TEST(TriluKernel, UpperKeepsFromDiagonalKOnNonSquare) {
  EXPECT_TRUE(same_tensor(run_trilu_3x5("", std::nullopt),
                          i64s({3, 5}, {1, 2, 3, 4, 5, 0, 7, 8, 9, 10, 0, 0, 13, 14, 15})));
  EXPECT_TRUE(same_tensor(run_trilu_3x5("", 1),
                          i64s({3, 5}, {0, 2, 3, 4, 5, 0, 0, 8, 9, 10, 0, 0, 0, 14, 15})));
  EXPECT_TRUE(same_tensor(run_trilu_3x5("<upper=1>", -1),
                          i64s({3, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 12, 13, 14, 15})));
  EXPECT_TRUE(same_tensor(run_trilu_3x5("", 10), i64s({3, 5}, std::vector<int64_t>(15, 0))));
}

TEST(TriluKernel, LowerKeepsUpToDiagonalKOnNonSquare) {
  EXPECT_TRUE(same_tensor(run_trilu_3x5("<upper=0>", std::nullopt),
                          i64s({3, 5}, {1, 0, 0, 0, 0, 6, 7, 0, 0, 0, 11, 12, 13, 0, 0})));
  EXPECT_TRUE(same_tensor(run_trilu_3x5("<upper=0>", 2),
                          i64s({3, 5}, {1, 2, 3, 0, 0, 6, 7, 8, 9, 0, 11, 12, 13, 14, 15})));
  EXPECT_TRUE(same_tensor(run_trilu_3x5("<upper=0>", -1),
                          i64s({3, 5}, {0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 11, 12, 0, 0, 0})));
}

TEST(TriluKernel, BatchedTallMatricesOfF16AndBool) {
  const Shape shape = {2, 4, 3};
  for (DType dtype : {DType::kF16, DType::kBool}) {
    for (int64_t upper : {0, 1}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " upper=", upper));
      const Tensor in = patterned(dtype, shape);
      const Tensor out = run1(str_cat("graph g(%x: ", type_text(dtype, shape), ") {\n",
                                      "  init %k: i64[] = [-1]\n  %y = Trilu<upper=", upper,
                                      ">(%x, %k) : ", type_text(dtype, shape), "\n  return %y\n}"),
                              {in});
      // Element (b, i, j) stays where j - i >= -1 (upper) or j - i <= -1 (lower).
      EXPECT_TRUE(same_tensor(out, naive_move(in, {dtype, shape}, [&](const auto& o) {
                                const bool keep = upper ? o[2] - o[1] >= -1 : o[2] - o[1] <= -1;
                                return keep ? ravel(o, shape) : -1;
                              })));
    }
  }
}

// Pad beyond the ONNX test data: a crop (negative pads) next to a widening, a constant value,
// an axes operand, and an integer dtype; every element checked against the definition.
TEST(PadKernel, CropsWidensAndPadsChosenAxes) {
  const Tensor x = Tensor::from_i64({2, 3}, {1, 2, 3, 4, 5, 6});
  // Axis 0: one row before, none after; axis 1: drop the first column, add two after.
  std::vector<Tensor> y = run(R"(
    graph g(%x: i64[2,3]) opset(17) {
      init %pads: i64[4] = [1, -1, 0, 2]
      init %value: i64[] = [9]
      %y = Pad(%x, %pads, %value) : i64[3,4]
      return %y
    })",
                              {x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].to_double_vector(), (std::vector<double>{9, 9, 9, 9, 2, 3, 9, 9, 5, 6, 9, 9}));
  // Axis 1 only, through the axes operand (opset 18), in edge mode.
  y = run(R"(
    graph g(%x: i64[2,3]) opset(18) {
      init %pads: i64[2] = [-1, 2]
      init %axes: i64[1] = [-1]
      %y = Pad<mode="edge">(%x, %pads, _, %axes) : i64[2,4]
      return %y
    })",
          {x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].to_double_vector(), (std::vector<double>{2, 3, 3, 3, 5, 6, 6, 6}));
}

// Wrap (opset 19, PyTorch's circular padding): an index before the axis reads from its end, one
// past it from its start, as numpy.pad(mode="wrap") does (the expected values are numpy's);
// pads up to the whole axis.
TEST(PadKernel, WrapTakesTheOtherEndOfTheAxis) {
  const Tensor x = Tensor::from_i64({2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> y = run(R"(
    graph g(%x: i64[2,3]) opset(19) {
      init %pads: i64[4] = [1, 3, 2, 1]
      %y = Pad<mode="wrap">(%x, %pads) : i64[5,7]
      return %y
    })",
                              {x});
  ASSERT_EQ(y.size(), 1u);
  // Rows: x[1], x[0], x[1], x[0], x[1]; columns: 3 before (the whole row), 1 after.
  EXPECT_EQ(y[0].to_double_vector(),
            (std::vector<double>{4, 5, 6, 4, 5, 6, 4, 1, 2, 3, 1, 2, 3, 1, 4, 5, 6, 4,
                                 5, 6, 4, 1, 2, 3, 1, 2, 3, 1, 4, 5, 6, 4, 5, 6, 4}));
  // A crop beside a wrap of the same axis has two readings (PyTorch wraps around the cropped
  // axis, numpy refuses), so it is refused.
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(R"(
    graph g(%x: i64[2,3]) opset(19) {
      init %pads: i64[4] = [0, -1, 0, 2]
      %y = Pad<mode="wrap">(%x, %pads) : i64[2,4]
      return %y
    })");
  const absl::Status status = graph.ok() ? verify(**graph) : graph.status();
  EXPECT_TRUE(absl::StrContains(status.message(), "not beside a crop")) << status;
}

}  // namespace
}  // namespace ampc
