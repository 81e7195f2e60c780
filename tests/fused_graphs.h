// Random element-wise graphs for the fusion tests (tests/passes/fuse_elementwise_test.cc on the
// CPU, tests/gpu/fused_cuda_test.cc on CUDA), and inputs full of the values ops treat specially.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ampc/tensor.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "passes/fuse_elementwise.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

namespace ampc::testing {

// A random graph of element-wise nodes over %x0..%x2 (f32[3,64]) and %b (f32[64]): each node
// reads earlier values, with casts to f16 and bf16 between them; the last value and about a
// third of the others are outputs.
inline std::string random_elementwise_graph(std::mt19937& rng) {
  static const char* const kUnary[] = {"Relu", "Sigmoid", "Tanh",       "Exp",
                                       "Neg",  "Abs",     "Erf",        "Softplus",
                                       "Sqrt", "Log",     "Reciprocal", "HardSwish"};
  static const char* const kBinary[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  const char* const kTypes[] = {"f32", "f16", "bf16"};
  std::vector<std::pair<std::string, std::string>> values = {
      {"x0", "f32"}, {"x1", "f32"}, {"x2", "f32"}};
  std::string body;
  std::vector<std::string> outputs;
  const auto pick_of = [&](const std::string& dtype) {
    std::vector<std::string> names;
    for (const auto& [name, t] : values) {
      if (t == dtype) names.push_back(name);
    }
    return names[std::uniform_int_distribution<size_t>(0, names.size() - 1)(rng)];
  };
  const int count = std::uniform_int_distribution<int>(4, 14)(rng);
  for (int k = 0; k < count; ++k) {
    const std::string name = str_cat("v", k);
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    const std::string& from =
        values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)].second;
    std::string dtype = from;
    if (kind <= 2) {
      dtype = kTypes[std::uniform_int_distribution<int>(0, 2)(rng)];
      body +=
          str_cat("%", name, " = Cast<to=", dtype, ">(%", pick_of(from), ") : ", dtype, "[3,64]\n");
    } else if (kind <= 5) {
      body += str_cat("%", name, " = ", kUnary[std::uniform_int_distribution<int>(0, 11)(rng)],
                      "(%", pick_of(from), ") : ", dtype, "[3,64]\n");
    } else if (kind == 6 && from == "f32") {
      body += str_cat("%", name, " = Add(%", pick_of(from), ", %b) : f32[3,64]\n");
    } else if (kind == 7) {
      const std::string cond = str_cat("c", k);
      body += str_cat("%", cond, " = Less(%", pick_of(from), ", %", pick_of(from),
                      ") : bool[3,64]\n", "%", name, " = Where(%", cond, ", %", pick_of(from),
                      ", %", pick_of(from), ") : ", dtype, "[3,64]\n");
    } else {
      body += str_cat("%", name, " = ", kBinary[std::uniform_int_distribution<int>(0, 6)(rng)],
                      "(%", pick_of(from), ", %", pick_of(from), ") : ", dtype, "[3,64]\n");
    }
    values.push_back({name, dtype});
    if (k + 1 == count || std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
      outputs.push_back("%" + name);
    }
  }
  return str_cat(
      "graph g(%x0: f32[3,64], %x1: f32[3,64], %x2: f32[3,64], %b: f32[64]) opset(17) {\n", body,
      "return ", str_join(outputs, ", "), "\n}");
}

// Inputs with every kind of value the ops treat specially: zeros of both signs, infinities,
// NaN, tiny and huge magnitudes, and ordinary values.
inline Tensor special_input(std::mt19937& rng, Shape shape) {
  const double kSpecial[] = {0.0,  -0.0,    INFINITY, -INFINITY, NAN, 1e-30, -1e-8,
                             1e30, 65504.0, 70000.0,  -3.5,      0.5, 1.0,   -1.0};
  std::vector<double> values(num_elements(shape));
  for (double& v : values) {
    v = std::uniform_int_distribution<int>(0, 3)(rng) == 0
            ? kSpecial[std::uniform_int_distribution<int>(0, 13)(rng)]
            : std::normal_distribution<double>(0.0, 3.0)(rng);
  }
  return Tensor::from_doubles(DType::kF32, std::move(shape), values);
}

// Whether `a` and `b` have the same type and bits, except that a NaN equals any NaN: which
// payload and sign an operation on two NaNs returns is not IEEE's to say (x86 returns the first
// operand's, and a vectorized loop may swap a commutative op's operands), so the numeric
// contract's "bit-exact" leaves NaN payloads out.
inline bool same_bits_but_nan_payloads(const Tensor& a, const Tensor& b) {
  if (a.type() != b.type()) return false;
  if (a == b) return true;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double x = a.element_as_double(i);
    const double y = b.element_as_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::memcmp(&x, &y, sizeof x) != 0) return false;  // -0.0 and 0.0 differ too
  }
  return true;
}

// Runs `trials` random graphs unfused and fused on `device` and expects the same bits from both;
// returns how many fused nodes the pass made (so a test can check that fusion happened).
inline int expect_fusion_keeps_bits(uint32_t seed, int trials, runtime::Device device,
                                    FuseElementwiseOptions options = {}) {
  std::mt19937 rng(seed);
  int fused_nodes = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const std::string text = random_elementwise_graph(rng);
    SCOPED_TRACE(text);
    std::unique_ptr<Graph> plain = parse_or_fail(text);
    std::unique_ptr<Graph> fused = parse_or_fail(text);
    if (plain == nullptr || fused == nullptr) return fused_nodes;
    Diagnostics diagnostics;
    const absl::StatusOr<bool> changed =
        make_fuse_elementwise_pass(options)->run(*fused, PassContext{&diagnostics});
    EXPECT_TRUE(changed.ok()) << changed.status();
    for (const auto& node : fused->nodes()) fused_nodes += node->op_type() == "FusedElementwise";
    const std::vector<Tensor> inputs = {special_input(rng, {3, 64}), special_input(rng, {3, 64}),
                                        special_input(rng, {3, 64}), special_input(rng, {64})};
    absl::StatusOr<std::vector<Tensor>> want = runtime::interpret_graph(*plain, inputs, device);
    absl::StatusOr<std::vector<Tensor>> got = runtime::interpret_graph(*fused, inputs, device);
    if (!want.ok() || !got.ok()) {
      ADD_FAILURE() << "unfused: " << want.status() << "; fused: " << got.status();
      continue;
    }
    EXPECT_EQ(want->size(), got->size());
    for (size_t i = 0; i < std::min(want->size(), got->size()); ++i) {
      EXPECT_TRUE(same_bits_but_nan_payloads((*want)[i], (*got)[i])) << "output " << i;
    }
  }
  return fused_nodes;
}

}  // namespace ampc::testing
