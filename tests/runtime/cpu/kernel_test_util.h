// What the CPU kernel tests share: running a graph (or one node) written in text IR through the
// interpreter, building and reading tensors, random and exact test values, the f16/bf16
// references' "upcast to f32, round once" helpers, and running on a chosen number of threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

namespace ampc::testing {

// ---- Running graphs ---------------------------------------------------------------------------

// Parses and verifies `text` (a failure fails the test) and interprets it on `inputs`.
inline absl::StatusOr<std::vector<Tensor>> try_run(std::string_view text,
                                                   const std::vector<Tensor>& inputs = {}) {
  std::unique_ptr<Graph> graph = parse_or_fail(text);
  if (!graph) return absl::InvalidArgumentError("graph did not parse");
  return runtime::interpret_graph(*graph, inputs);
}

// The same; a failure fails the test and gives no outputs.
inline std::vector<Tensor> run(std::string_view text, const std::vector<Tensor>& inputs = {}) {
  absl::StatusOr<std::vector<Tensor>> outputs = try_run(text, inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status() << "\n" << text;
  return outputs.ok() ? *std::move(outputs) : std::vector<Tensor>{};
}

// The only output of a graph.
inline Tensor run1(std::string_view text, const std::vector<Tensor>& inputs = {}) {
  std::vector<Tensor> outputs = run(text, inputs);
  return outputs.size() == 1 ? outputs[0] : Tensor();
}

inline Tensor i64s(Shape shape, const std::vector<int64_t>& values) {
  return Tensor::from_i64(std::move(shape), values);
}

// The text IR of a graph of the one node `%y0, ... = op<attrs>(%x0, ...) : outputs...` at
// `opset`, whose operands are graph inputs of types `inputs` (nullopt: an omitted operand `_`).
inline std::string one_node_graph(std::string_view op, std::string_view attrs,
                                  const std::vector<std::optional<TensorType>>& inputs,
                                  const std::vector<TensorType>& outputs,
                                  int64_t opset = kDefaultOnnxOpset) {
  std::vector<std::string> params, operands, results, result_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      operands.push_back("_");
      continue;
    }
    params.push_back(str_cat("%x", i, ": ", type_to_string(*inputs[i])));
    operands.push_back(str_cat("%x", i));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    results.push_back(str_cat("%y", i));
    result_types.push_back(type_to_string(outputs[i]));
  }
  return str_cat("graph g(", str_join(params, ", "), ") opset(", opset, ") {\n  ",
                 str_join(results, ", "), " = ", op, attrs.empty() ? "" : str_cat("<", attrs, ">"),
                 "(", str_join(operands, ", "), ") : ", str_join(result_types, ", "), "\n  return ",
                 str_join(results, ", "), "\n}\n");
}

// Runs `op<attrs>(inputs...)` with outputs of types `outputs` at `opset`.
inline absl::StatusOr<std::vector<Tensor>> try_node(std::string_view op, std::string_view attrs,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<TensorType>& outputs,
                                                    int64_t opset = kDefaultOnnxOpset) {
  std::vector<std::optional<TensorType>> types;
  for (const Tensor& input : inputs) types.push_back(input.type());
  return try_run(one_node_graph(op, attrs, types, outputs, opset), inputs);
}

// The same; a failure fails the test and gives zeros of the output types.
inline std::vector<Tensor> run_node(std::string_view op, std::string_view attrs,
                                    const std::vector<Tensor>& inputs,
                                    const std::vector<TensorType>& outputs,
                                    int64_t opset = kDefaultOnnxOpset) {
  absl::StatusOr<std::vector<Tensor>> result = try_node(op, attrs, inputs, outputs, opset);
  EXPECT_TRUE(result.ok()) << op << "<" << attrs << ">: " << result.status();
  if (result.ok()) return *std::move(result);
  std::vector<Tensor> zeros;
  for (const TensorType& type : outputs) zeros.emplace_back(type);
  return zeros;
}

// try_node and run_node for a node with one output.
inline absl::StatusOr<Tensor> try_op(std::string_view op, std::string_view attrs,
                                     const std::vector<Tensor>& inputs, const TensorType& output,
                                     int64_t opset = kDefaultOnnxOpset) {
  AMPC_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, try_node(op, attrs, inputs, {output}, opset));
  return std::move(outputs.at(0));
}
inline Tensor run_op(std::string_view op, std::string_view attrs, const std::vector<Tensor>& inputs,
                     const TensorType& output, int64_t opset = kDefaultOnnxOpset) {
  return run_node(op, attrs, inputs, {output}, opset).at(0);
}

// fn() with the CPU kernels on `threads` threads; afterwards, one per core again.
template <typename Fn>
auto on_cpu_threads(int threads, Fn&& fn) {
  runtime::cpu::set_cpu_threads(threads);
  struct Restore {
    ~Restore() { runtime::cpu::set_cpu_threads(0); }
  } restore;
  return fn();
}

// ---- Tensors ----------------------------------------------------------------------------------

// The text IR spelling of the tensor type `dtype`[shape].
inline std::string type_text(DType dtype, const Shape& shape) {
  return type_to_string(TensorType{dtype, shape});
}

// A tensor of `dtype` whose elements are `values`, stored as T (which has dtype's size).
template <typename T>
Tensor typed_tensor(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t(TensorType{dtype, std::move(shape)});
  std::span<T> data = t.mutable_data<T>();
  EXPECT_EQ(data.size(), values.size());
  std::copy(values.begin(), values.begin() + std::min(data.size(), values.size()), data.begin());
  return t;
}
template <typename T>
Tensor typed_tensor(DType dtype, const std::vector<T>& values) {
  return typed_tensor<T>(dtype, {static_cast<int64_t>(values.size())}, values);
}

template <typename T>
std::vector<T> elements(const Tensor& t) {
  std::span<const T> data = t.data<T>();
  return {data.begin(), data.end()};
}

// A tensor whose elements have distinct bytes (bool: 0/1 in an irregular pattern), so a moved
// element is recognized by its bits.
inline Tensor patterned(DType dtype, Shape shape) {
  Tensor tensor(TensorType{dtype, std::move(shape)});
  const int size = dtype_size(dtype);
  std::span<uint8_t> bytes = tensor.mutable_bytes();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const uint64_t word = (static_cast<uint64_t>(i) + 1) * 0x9e3779b97f4a7c15ull;
    for (int b = 0; b < size; ++b) {
      bytes[i * size + b] = dtype == DType::kBool ? (i % 3 == 1) : uint8_t(word >> (56 - 8 * b));
    }
  }
  return tensor;
}

// Same type and bits; on a difference, names the first differing element.
inline ::testing::AssertionResult same_tensor(const Tensor& actual, const Tensor& expected) {
  if (actual == expected) return ::testing::AssertionSuccess();
  if (actual.type() != expected.type()) {
    return ::testing::AssertionFailure() << "got " << type_to_string(actual.type()) << ", expected "
                                         << type_to_string(expected.type());
  }
  const int size = dtype_size(actual.dtype());
  int64_t i = 0;
  while (std::memcmp(actual.bytes().data() + i * size, expected.bytes().data() + i * size, size) ==
         0) {
    ++i;
  }
  return ::testing::AssertionFailure()
         << type_to_string(actual.type()) << " differs first at element " << i << ": got "
         << actual.element_as_double(i) << ", expected " << expected.element_as_double(i);
}

// Each element of `y` within `tolerance` of `expected`, relative with a floor of `tolerance`.
inline void expect_near_all(const Tensor& y, const std::vector<double>& expected,
                            double tolerance) {
  ASSERT_EQ(y.num_elements(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(y.element_as_double(i), expected[i], tolerance * (1 + std::abs(expected[i])))
        << "element " << i;
  }
}

// Calls f(index) for every index of `dims` in row-major order.
inline void for_each_index(const Shape& dims, const std::function<void(const Shape&)>& f) {
  Shape index(dims.size(), 0);
  if (num_elements(dims) == 0) return;
  while (true) {
    f(index);
    size_t d = dims.size();
    while (d > 0 && ++index[d - 1] == dims[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

// ---- Values -----------------------------------------------------------------------------------

// `count` draws of shift + scale * N(0, 1).
inline std::vector<double> random_values(int64_t count, uint32_t seed, double scale = 1,
                                         double shift = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> values(count);
  for (double& v : values) v = shift + scale * normal(rng);
  return values;
}

// Small integers times powers of two (m * 2^e, |m| <= max_mantissa, |e| <= max_exponent): the
// products and partial sums of short dot products are exact in f32, so any summation order gives
// the same result (and, with the defaults, every value is exact in bf16).
inline std::vector<double> exact_values(int64_t count, uint32_t seed, int max_mantissa = 15,
                                        int max_exponent = 2) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> mantissa(-max_mantissa, max_mantissa),
      exponent(-max_exponent, max_exponent);
  std::vector<double> values(count);
  for (double& v : values) v = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

// ---- f16 / bf16 references: upcast to f32, compute, round once --------------------------------

// The bits of an f16/bf16 tensor (none, with a failure, for anything else: a failed run).
inline std::vector<uint16_t> bits_of(const Tensor& t) {
  if (t.dtype() != DType::kF16 && t.dtype() != DType::kBF16) {
    ADD_FAILURE() << "expected an f16 or bf16 result, got " << type_to_string(t.type());
    return {};
  }
  std::span<const uint16_t> bits = t.data<uint16_t>();
  return {bits.begin(), bits.end()};
}
inline std::vector<uint16_t> bits_of(const std::vector<Float16>& values) {
  std::vector<uint16_t> bits;
  for (Float16 h : values) bits.push_back(h.bits);
  return bits;
}
inline std::vector<uint16_t> bits_of(const std::vector<BFloat16>& values) {
  std::vector<uint16_t> bits;
  for (BFloat16 h : values) bits.push_back(h.bits);
  return bits;
}

// The elements of an f16/bf16 tensor, upcast (exactly) to f32.
inline std::vector<float> upcast(const Tensor& t) {
  std::vector<float> out;
  for (const uint16_t bits : bits_of(t)) {
    out.push_back(t.dtype() == DType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits));
  }
  return out;
}

// Every element as f32 (exact for f16, bf16 and f32 tensors).
inline std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> values;
  for (double v : t.to_double_vector()) values.push_back(static_cast<float>(v));
  return values;
}

// The f32 value rounded once to f16 or bf16 bits (to nearest even).
inline uint16_t round_to(DType dtype, float value) {
  return dtype == DType::kF16 ? f32_to_f16_bits(value) : f32_to_bf16_bits(value);
}

// f32 values rounded once to `dtype` (an f32 is exact in f64, so from_doubles rounds once).
inline Tensor rounded(DType dtype, const Shape& shape, const std::vector<float>& values) {
  return Tensor::from_doubles(dtype, shape, std::vector<double>(values.begin(), values.end()));
}

}  // namespace ampc::testing
