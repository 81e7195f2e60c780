// An op's sample (OpDef::samples) as a one-node graph in a chosen float dtype, with random inputs
// inside the op's domain: what the tests that run every op on every backend share.
#pragma once

#include <cmath>
#include <random>
#include <set>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"

namespace ampc::testing {

// Inputs inside each op's domain: positive for Log, Sqrt, Reciprocal and a Pow base; divisors away
// from 0; everything else in [-2, 2]. Indices and labels 0 or 1 (valid for any axis of size 2).
inline Tensor random_input(const TensorType& type, const std::string& op, int input,
                           std::mt19937& rng) {
  Tensor t(type);
  if (type.dtype == DType::kBool) {
    std::bernoulli_distribution coin(0.5);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_element_i64(i, coin(rng));
    return t;
  }
  if (!is_float(type.dtype)) {
    std::uniform_int_distribution<int> pick(0, 1);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_element_i64(i, pick(rng));
    return t;
  }
  static const std::set<std::string> positive = {"Log", "Sqrt", "Reciprocal", "Pow"};
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  std::uniform_real_distribution<double> magnitude(0.5, 2.0);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double x = uniform(rng);
    if (positive.contains(op) && input == 0) x = magnitude(rng);
    if (op == "Asin" || op == "Acos" || op == "Atanh") x *= 0.45;  // inside (-1, 1)
    if (op == "Acosh") x = 1 + magnitude(rng);                     // inside [1, inf)
    if (op == "Div" && input == 1) x = std::copysign(magnitude(rng), x);
    t.set_element(i, x);  // rounds to the dtype
  }
  return t;
}

struct SampleGraph {
  std::unique_ptr<Graph> graph;
  std::vector<Tensor> inputs;  // a value for each graph input, in order
};

// The sample as a one-node graph whose f32 operands are `dtype` (but the operands the op keeps in
// f32), with random inputs; a null graph when the op does not take those types.
inline SampleGraph sample_graph(const OpDef& def, const OpSample& sample, DType dtype,
                                std::mt19937& rng) {
  SampleGraph built{std::make_unique<Graph>("sample"), {}};
  Graph& graph = *built.graph;
  graph.set_opset("", std::max<int64_t>(def.since_opset, kDefaultOnnxOpset));
  const std::vector<int>& pinned = def.autocast.fp32_operands;
  std::vector<Value*> operands;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    const bool keep_f32 =
        std::find(pinned.begin(), pinned.end(), static_cast<int>(i)) != pinned.end();
    const Tensor* constant = nullptr;
    for (const auto& [index, value] : sample.constant_inputs) {
      if (index == static_cast<int>(i)) constant = &value;
    }
    if (constant != nullptr) {
      Tensor value = *constant;
      if (value.dtype() == DType::kF32 && !keep_f32) {
        value = Tensor::from_doubles(dtype, value.shape(), value.to_double_vector());
      }
      operands.push_back(graph.add_initializer(str_cat("const", i), value));
      continue;
    }
    TensorType type = sample.inputs[i];
    if (type.dtype == DType::kF32 && !keep_f32) type.dtype = dtype;
    operands.push_back(graph.add_input(str_cat("in", i), type));
    built.inputs.push_back(random_input(type, def.name, static_cast<int>(i), rng));
  }
  // The stated types as placeholders; inference rewrites them for the dtype.
  std::vector<std::optional<TensorType>> outputs(sample.outputs.begin(), sample.outputs.end());
  Node* node = graph.create_node(def.domain, def.name, operands, outputs, sample.attrs);
  if (!infer_graph_types(graph).ok()) {
    built.graph = nullptr;
    return built;
  }
  for (int k = 0; k < node->num_outputs(); ++k) {
    if (node->has_output(k)) graph.add_output(node->output(k));
  }
  return built;
}

}  // namespace ampc::testing
