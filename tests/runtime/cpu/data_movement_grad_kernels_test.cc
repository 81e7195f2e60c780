// CPU kernels of runtime/cpu/data_movement_grad.cc: SliceGrad and GatherGrad (ampc domain).
// SliceGrad is checked against the positions the (separately tested) Slice kernel reads, found by
// slicing a tensor whose elements are their own positions; GatherGrad against a naive scatter-add
// in f64 over values whose sums are exact, so every dtype's result is the f64 sum rounded once.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "tests/runtime/cpu/kernel_test_util.h"

namespace ampc {
namespace {

using testing::exact_values;
using testing::on_cpu_threads;
using testing::run;
using testing::same_tensor;
using testing::try_run;
using testing::type_text;

constexpr DType kFloatDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};

std::string ints_text(const std::vector<int64_t>& values) {
  return str_cat("[", str_join(values, ", "), "]");
}

Tensor only_output(std::vector<Tensor> outputs) {
  return outputs.size() == 1 ? outputs[0] : Tensor();
}

// ---- SliceGrad --------------------------------------------------------------------------------

struct SliceCase {
  Shape shape;
  std::vector<int64_t> starts, ends, axes, steps;  // axes/steps empty: omitted
  DType index_type = DType::kI64;
};

// The slice arguments as initializers, and the operand list `%s, %e, %a, %t` (with `_`).
std::string slice_args_text(const SliceCase& c, std::string* operands) {
  std::string inits;
  std::vector<std::string> names;
  const std::pair<const char*, const std::vector<int64_t>*> args[] = {
      {"s", &c.starts}, {"e", &c.ends}, {"a", &c.axes}, {"t", &c.steps}};
  for (const auto& [name, values] : args) {
    if (values->empty()) {
      names.push_back("_");
      continue;
    }
    inits += str_cat("  init %", name, ": ",
                     type_text(c.index_type, {static_cast<int64_t>(values->size())}), " = ",
                     ints_text(*values), "\n");
    names.push_back(str_cat("%", name));
  }
  while (names.back() == "_") names.pop_back();
  *operands = str_join(names, ", ");
  return inits;
}

// Flat positions of the input that each output element of the Slice reads (by slicing
// 0, 1, 2, ... as f64), and the sliced shape.
std::pair<std::vector<int64_t>, Shape> slice_positions(const SliceCase& c, Shape out_shape) {
  std::string operands;
  const std::string inits = slice_args_text(c, &operands);
  std::vector<double> iota(num_elements(c.shape));
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = i;
  const Tensor read = only_output(run(
      str_cat("graph g(%x: ", type_text(DType::kF64, c.shape), ") {\n", inits, "  %y = Slice(%x, ",
              operands, ") : ", type_text(DType::kF64, out_shape), "\n  return %y\n}"),
      {Tensor::from_doubles(DType::kF64, c.shape, iota)}));
  std::vector<int64_t> positions;
  for (double p : read.to_double_vector()) positions.push_back(static_cast<int64_t>(p));
  return {positions, out_shape};
}

Tensor run_slice_grad(const SliceCase& c, const Tensor& dy) {
  std::string operands;
  const std::string inits = slice_args_text(c, &operands);
  return only_output(
      run(str_cat("graph g(%dy: ", type_text(dy.dtype(), dy.shape()), ") opset(17, ampc:1) {\n",
                  inits, "  %dx = ampc.SliceGrad<shape=", ints_text(c.shape), ">(%dy, ", operands,
                  ") : ", type_text(dy.dtype(), c.shape), "\n  return %dx\n}"),
          {dy}));
}

TEST(SliceGradKernel, PutsDyWhereSliceReadsAndZerosElsewhereForEveryFloatDType) {
  const std::vector<std::pair<SliceCase, Shape>> cases = {
      {{{2, 4}, {1, 0}, {2, 3}, {0, 1}, {1, 2}}, {1, 2}},
      {{{2, 4}, {0, 1}, {-1, 1000}, {}, {}}, {1, 3}},
      {{{5, 3}, {-1}, {INT64_MIN}, {0}, {-1}}, {5, 3}},
      {{{3, 4, 5}, {4, -1}, {0, -4}, {-1, 0}, {-2, -2}, DType::kI32}, {2, 4, 2}},
      {{{3, 4, 5}, {1}, {INT64_MAX}, {1}, {INT64_MAX}}, {3, 1, 5}},
      {{{4, 6}, {0, 5}, {4, 0}, {0, 1}, {3, -2}}, {2, 3}},
  };
  for (const auto& [c, out_shape] : cases) {
    const auto [positions, shape] = slice_positions(c, out_shape);
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " slice of ", shape_to_string(c.shape), " starts ",
                           ints_text(c.starts), " steps ", ints_text(c.steps)));
      const std::vector<double> values = exact_values(num_elements(out_shape), 3);
      const Tensor dx = run_slice_grad(c, Tensor::from_doubles(dtype, out_shape, values));
      std::vector<double> expected(num_elements(c.shape), 0.0);
      for (size_t o = 0; o < positions.size(); ++o) expected[positions[o]] = values[o];
      EXPECT_TRUE(same_tensor(dx, Tensor::from_doubles(dtype, c.shape, expected)));
    }
  }
}

TEST(SliceGradKernel, EmptySliceGivesZeros) {
  const SliceCase c{{3, 4}, {2}, {2}, {1}, {}};
  const Tensor dx = run_slice_grad(c, Tensor(TensorType{DType::kF32, {3, 0}}));
  EXPECT_TRUE(same_tensor(dx, Tensor(TensorType{DType::kF32, {3, 4}})));
}

TEST(SliceGradKernel, LargeScatterIsTheSameOnOneThreadAndMany) {
  const SliceCase c{{64, 40, 96}, {63, 1}, {INT64_MIN, 95}, {0, 2}, {-1, 2}};
  const Shape out_shape = {64, 40, 47};
  const auto [positions, shape] = slice_positions(c, out_shape);
  const std::vector<double> values = exact_values(num_elements(out_shape), 4);
  const Tensor dy = Tensor::from_doubles(DType::kBF16, out_shape, values);
  std::vector<double> expected(num_elements(c.shape), 0.0);
  for (size_t o = 0; o < positions.size(); ++o) expected[positions[o]] = values[o];
  const Tensor want = Tensor::from_doubles(DType::kBF16, c.shape, expected);
  EXPECT_TRUE(same_tensor(on_cpu_threads(1, [&] { return run_slice_grad(c, dy); }), want));
  EXPECT_TRUE(same_tensor(on_cpu_threads(4, [&] { return run_slice_grad(c, dy); }), want));
}

TEST(SliceGradKernel, ArgumentsThatDoNotSliceDyOutOfTheShapeAreAnError) {
  // The ends input is a graph input, so inference cannot check it; the kernel does.
  const absl::StatusOr<std::vector<Tensor>> out =
      try_run(R"(graph g(%dy: f32[1,2], %e: i64[2]) opset(17, ampc:1) {
    init %s: i64[2] = [0, 0]
    %dx = ampc.SliceGrad<shape=[2, 4]>(%dy, %s, %e) : f32[2,4]
    return %dx
  })",
              {Tensor::from_f32({1, 2}, {1, 2}), Tensor::from_i64({2}, {2, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("do not slice"), std::string::npos) << out.status();
}

// ---- GatherGrad -------------------------------------------------------------------------------

// dX[outer, wrap(indices[j]), inner] summed over j, in f64, for dY shaped as Gather's output.
std::vector<double> naive_gather_grad(const std::vector<double>& dy, const Shape& shape,
                                      int64_t axis, const std::vector<int64_t>& indices) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t dim = shape[axis];
  const int64_t count = indices.size();
  std::vector<double> dx(num_elements(shape), 0.0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t row = indices[j] < 0 ? indices[j] + dim : indices[j];
      for (int64_t i = 0; i < inner; ++i) {
        dx[(o * dim + row) * inner + i] += dy[(o * count + j) * inner + i];
      }
    }
  }
  return dx;
}

struct GatherCase {
  Shape shape;
  int64_t axis;
  Shape indices_shape;
  std::vector<int64_t> indices;
  std::optional<int64_t> padding_idx = std::nullopt;
};

Shape gathered_shape(const GatherCase& c) {
  const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis;
  Shape out(c.shape.begin(), c.shape.begin() + axis);
  out.insert(out.end(), c.indices_shape.begin(), c.indices_shape.end());
  out.insert(out.end(), c.shape.begin() + axis + 1, c.shape.end());
  return out;
}

absl::StatusOr<std::vector<Tensor>> try_gather_grad(const GatherCase& c, const Tensor& dy,
                                                    DType index_type = DType::kI64) {
  return try_run(
      str_cat("graph g(%dy: ", type_text(dy.dtype(), dy.shape()), ") opset(17, ampc:1) {\n",
              "  init %i: ", type_text(index_type, c.indices_shape), " = ", ints_text(c.indices),
              "\n  %dx = ampc.GatherGrad<axis=", c.axis, ", shape=", ints_text(c.shape),
              c.padding_idx ? str_cat(", padding_idx=", *c.padding_idx) : "",
              ">(%dy, %i) : ", type_text(dy.dtype(), c.shape), "\n  return %dx\n}"),
      {dy});
}

Tensor run_gather_grad(const GatherCase& c, const Tensor& dy, DType index_type) {
  absl::StatusOr<std::vector<Tensor>> out = try_gather_grad(c, dy, index_type);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? only_output(*std::move(out)) : Tensor();
}

TEST(GatherGradKernel, RepeatedAndNegativeIndicesSumForEveryFloatDType) {
  const std::vector<GatherCase> cases = {
      {{5, 3}, 0, {2, 3}, {0, 4, -1, 2, 0, -5}},  // row 0 three times, row 4 twice, row 1 never
      {{2, 4, 3}, 1, {5}, {3, 1, 3, -4, 1}},
      {{2, 4, 3}, -2, {}, {-1}},  // a scalar index drops the axis
      {{3, 4}, -1, {2, 2}, {1, -1, 1, 1}},
      {{6, 1000}, 0, {4}, {5, 0, 5, 5}},  // rows wider than one work item's columns
  };
  for (const GatherCase& c : cases) {
    const Shape dy_shape = gathered_shape(c);
    // Integers up to 15 times 2^-2..2^2: sums of a few are exact in f64 and f32, so the kernel's
    // f32 sum rounded once equals the f64 sum rounded once.
    const std::vector<double> dy = exact_values(num_elements(dy_shape), 11);
    const std::vector<double> dx = naive_gather_grad(
        dy, c.shape, c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis,
        c.indices);
    for (DType dtype : kFloatDTypes) {
      for (DType index_type : {DType::kI64, DType::kI32}) {
        SCOPED_TRACE(str_cat(dtype_name(dtype), " ", dtype_name(index_type), " shape ",
                             shape_to_string(c.shape), " axis ", c.axis));
        const Tensor got =
            run_gather_grad(c, Tensor::from_doubles(dtype, dy_shape, dy), index_type);
        EXPECT_TRUE(same_tensor(got, Tensor::from_doubles(dtype, c.shape, dx)));
      }
    }
  }
}

TEST(GatherGradKernel, F16SumsInF32AndRoundsOnce) {
  // 1 + 2^-11 + 2^-11: adding in f16 would round each partial sum back to 1 (ties to even); the
  // f32 sum is 1 + 2^-10, an f16 value.
  const GatherCase c{{2}, 0, {3}, {1, 1, 1}};
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tiny = dtype == DType::kF16 ? 0x1p-11 : 0x1p-8;
    const Tensor got =
        run_gather_grad(c, Tensor::from_doubles(dtype, {3}, {1.0, tiny, tiny}), DType::kI64);
    EXPECT_TRUE(same_tensor(got, Tensor::from_doubles(dtype, {2}, {0.0, 1.0 + 2 * tiny})));
  }
}

TEST(GatherGradKernel, TiedEmbeddingSumIsTheSameOnOneThreadAndMany) {
  std::vector<int64_t> indices(300);
  for (size_t j = 0; j < indices.size(); ++j) indices[j] = (j * 7) % 50 - (j % 3 == 0 ? 50 : 0);
  const GatherCase c{{50, 700}, 0, {300}, indices};
  const Shape dy_shape = gathered_shape(c);
  const Tensor dy =
      Tensor::from_doubles(DType::kF32, dy_shape, testing::random_values(300 * 700, 5));
  auto gather_grad = [&] { return run_gather_grad(c, dy, DType::kI64); };
  const Tensor one_thread = on_cpu_threads(1, gather_grad);
  const Tensor four_threads = on_cpu_threads(4, gather_grad);
  EXPECT_TRUE(same_tensor(one_thread, four_threads));
  // And the value: within f32 rounding of the f64 sum.
  const std::vector<double> expected =
      naive_gather_grad(dy.to_double_vector(), c.shape, 0, indices);
  testing::expect_near_all(one_thread, expected, 1e-5);
}

// PyTorch's embedding backward with a padding_idx leaves that row zero: the indices that pick it
// (negative ones too, once wrapped) add nothing; the other rows are the plain sums.
TEST(GatherGradKernel, PaddingRowGetsNothing) {
  const std::vector<GatherCase> cases = {
      {{5, 3}, 0, {2, 3}, {0, 4, -1, 2, 0, -5}, 0},  // row 0 picked three times
      {{2, 4, 3}, 1, {5}, {3, 1, 3, -4, 1}, 3},
      {{2, 4, 3}, 1, {5}, {3, 1, 3, -4, 1}, 2},  // a row no index picks
      {{6, 1000}, 0, {4}, {5, 0, 5, 5}, 5},
  };
  for (const GatherCase& c : cases) {
    const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis;
    const Shape dy_shape = gathered_shape(c);
    const std::vector<double> dy = exact_values(num_elements(dy_shape), 7);
    std::vector<double> dx = naive_gather_grad(dy, c.shape, axis, c.indices);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= c.shape[d];
    for (size_t d = axis + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) dx[(o * c.shape[axis] + *c.padding_idx) * inner + i] = 0;
    }
    for (DType dtype : kFloatDTypes) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " shape ", shape_to_string(c.shape), " padding ",
                           *c.padding_idx));
      const Tensor got = run_gather_grad(c, Tensor::from_doubles(dtype, dy_shape, dy), DType::kI32);
      EXPECT_TRUE(same_tensor(got, Tensor::from_doubles(dtype, c.shape, dx)));
    }
  }
}

TEST(GatherGradKernel, PaddingIdxOutsideTheAxisIsAnError) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(
      "graph g(%dy: f32[2, 2], %i: i64[2]) opset(17, ampc:1) {\n"
      "  %dx = ampc.GatherGrad<axis=0, shape=[3, 2], padding_idx=3>(%dy, %i) : f32[3, 2]\n"
      "  return %dx\n}");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const absl::Status verified = verify(**graph);
  EXPECT_NE(verified.message().find("padding_idx 3 is not a row"), std::string::npos) << verified;
}

TEST(GatherGradKernel, OutOfRangeIndexIsAnErrorNamingIt) {
  const GatherCase c{{3, 2}, 0, {2}, {1, 3}};
  const absl::StatusOr<std::vector<Tensor>> out =
      try_gather_grad(c, Tensor(TensorType{DType::kF32, {2, 2}}));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("index 3"), std::string::npos) << out.status();
}

}  // namespace
}  // namespace ampc
