// Every op's gradient rule, on the op's samples, against central differences in f64 on the CPU
// backend. Each sample becomes a one-node graph (float types made f64) whose loss is
// sum_k sum(output_k * R_k) over the differentiable float outputs, with fixed random R_k, so
// every output element's gradient takes part.
#include "tests/gradient_check.h"

#include <map>
#include <set>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

// The interval each op's float inputs are drawn from: away from kinks (0 for Relu, Abs) and
// inside the domain (Log, Sqrt, a Pow base, a divisor, Asin, Acosh...). Default: |x| in [0.2, 1],
// either sign.
struct Range {
  double low;
  double high;
  bool either_sign;
};
Range input_range(const std::string& op, int input) {
  static const std::set<std::string> positive = {"Log", "Sqrt", "Reciprocal", "Pow"};
  if (positive.contains(op) && input == 0) return {0.5, 1.5, false};
  if (op == "Div" && input == 1) return {0.5, 1.5, true};
  // |a / b| < 1 everywhere: Mod is smooth there (its quotient is 0, or -1 when floored and the
  // signs differ).
  if (op == "Mod" && input == 1) return {1.5, 2.0, true};
  if (op == "Pow" && input == 1) return {0.5, 2.0, true};
  // Inside the domains, away from the poles of the derivatives at 1 (and -1).
  if (op == "Asin" || op == "Acos" || op == "Atanh") return {0.2, 0.8, true};
  if (op == "Acosh") return {1.2, 2.0, false};
  return {0.2, 1.0, true};
}

Tensor sample_value(const TensorType& type, const std::string& op, int input, std::mt19937& rng) {
  if (type.dtype == DType::kBool) {
    Tensor t(type);
    std::bernoulli_distribution coin(0.5);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_element_i64(i, coin(rng));
    return t;
  }
  if (!is_float(type.dtype)) {
    // Indices and labels: 0 or 1, valid for any axis of size 2 or more.
    Tensor t(type);
    std::uniform_int_distribution<int> pick(0, 1);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set_element_i64(i, pick(rng));
    return t;
  }
  const Range range = input_range(op, input);
  Tensor t = testing::random_tensor(type, rng, range.low, range.high);
  if (range.either_sign) {
    std::bernoulli_distribution coin(0.5);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (coin(rng)) t.set_element(i, -t.element_as_double(i));
    }
  }
  return t;
}

TensorType as_f64(TensorType type) {
  if (is_float(type.dtype)) type.dtype = DType::kF64;
  return type;
}

Tensor as_f64(const Tensor& value) {
  if (!is_float(value.dtype())) return value;
  return Tensor::from_doubles(DType::kF64, value.shape(), value.to_double_vector());
}

struct Built {
  std::unique_ptr<Graph> graph;
  std::vector<Tensor> inputs;
};

// The sample as a graph with its loss; null graph when it has no differentiable f64 output.
absl::StatusOr<Built> build_sample(const OpDef& def, const OpSample& sample, std::mt19937& rng) {
  Built built{std::make_unique<Graph>("grad_check"), {}};
  Graph& graph = *built.graph;
  if (def.domain != kOnnxDomain) graph.set_opset(def.domain, 1);
  graph.set_opset("", std::max<int64_t>(def.since_opset, kDefaultOnnxOpset));
  std::vector<Value*> operands;
  for (size_t i = 0; i < sample.inputs.size(); ++i) {
    const Tensor* constant = nullptr;
    for (const auto& [index, value] : sample.constant_inputs) {
      if (index == static_cast<int>(i)) constant = &value;
    }
    if (constant != nullptr) {
      operands.push_back(graph.add_initializer(str_cat("const", i), as_f64(*constant)));
      continue;
    }
    const TensorType type = as_f64(sample.inputs[i]);
    // Inputs that never get a gradient are named so the check does not ask for one.
    const bool fixed = std::find(def.no_gradient_inputs.begin(), def.no_gradient_inputs.end(),
                                 static_cast<int>(i)) != def.no_gradient_inputs.end();
    operands.push_back(graph.add_input(str_cat(fixed ? "fixed" : "in", i), type));
    built.inputs.push_back(sample_value(type, def.name, static_cast<int>(i), rng));
  }
  std::vector<std::optional<TensorType>> output_types;
  for (const TensorType& type : sample.outputs) output_types.push_back(as_f64(type));
  Node* node = graph.create_node(def.domain, def.name, operands, output_types, sample.attrs);
  AMPC_RETURN_IF_ERROR(infer_graph_types(graph).status());

  Value* loss = nullptr;
  for (int k = 0; k < node->num_outputs(); ++k) {
    if (!node->has_output(k) || node->output(k)->dtype() != DType::kF64) continue;
    if (std::find(def.no_gradient_outputs.begin(), def.no_gradient_outputs.end(), k) !=
        def.no_gradient_outputs.end()) {
      continue;
    }
    Value* out = node->output(k);
    Value* weights = graph.add_initializer(str_cat("weight", k),
                                           testing::random_tensor(out->type(), rng, -1, 1));
    Value* product = graph.create_node("", "Mul", {out, weights}, {out->type()})->output(0);
    Value* term = graph
                      .create_node("", "ReduceSum", {product}, {TensorType{DType::kF64, {}}},
                                   {{"keepdims", int64_t{0}}})
                      ->output(0);
    loss =
        loss == nullptr
            ? term
            : graph.create_node("", "Add", {loss, term}, {TensorType{DType::kF64, {}}})->output(0);
  }
  if (loss == nullptr) {
    built.graph = nullptr;
    return built;
  }
  loss->set_name("loss");
  graph.add_output(loss);
  return built;
}

TEST(GradientCheck, EveryGradientRuleMatchesCentralDifferencesInF64) {
  std::mt19937 rng(20261123);
  int checked = 0;
  for (const OpDef* def : OpRegistry::global().all()) {
    if (!def->gradient) continue;
    for (const OpSample& sample : def->samples) {
      SCOPED_TRACE(def->qualified_name() + " sample '" + sample.name + "'");
      absl::StatusOr<Built> built = build_sample(*def, sample, rng);
      EXPECT_TRUE(built.ok()) << built.status();
      if (!built.ok()) continue;
      if (built->graph == nullptr) continue;
      absl::StatusOr<testing::GradientCheck> result =
          testing::check_gradients(*built->graph, built->inputs, "^in[0-9]+$");
      if (!result.ok() && result.status().message() == "autodiff added no gradient") continue;
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) continue;
      EXPECT_LT(result->max_relative_error, 1e-6) << "worst input " << result->worst_input;
      ++checked;
    }
  }
  std::printf("checked %d samples\n", checked);
  EXPECT_GT(checked, 0);
}

// Ops that read and write floats are differentiable and must have a rule (internal gradient
// ops excepted). (Ops whose float inputs are all in no_gradient_inputs, or whose float outputs
// are all in no_gradient_outputs, need none.)
TEST(GradientCheck, EveryDifferentiableOpHasAGradientRule) {
  std::vector<std::string> missing;
  for (const OpDef* def : OpRegistry::global().all()) {
    // Internal gradient ops (ampc.*Grad) need a rule only for double backward, which ampc
    // does not do.
    if (def->gradient || (def->domain == kAmpcDomain && def->name.ends_with("Grad"))) continue;
    bool float_in = false;
    bool float_out = false;
    for (const OpSample& sample : def->samples) {
      for (size_t i = 0; i < sample.inputs.size(); ++i) {
        const bool excluded =
            std::find(def->no_gradient_inputs.begin(), def->no_gradient_inputs.end(),
                      static_cast<int>(i)) != def->no_gradient_inputs.end();
        float_in |= !excluded && is_float(sample.inputs[i].dtype);
      }
      for (size_t o = 0; o < sample.outputs.size(); ++o) {
        const bool excluded =
            std::find(def->no_gradient_outputs.begin(), def->no_gradient_outputs.end(),
                      static_cast<int>(o)) != def->no_gradient_outputs.end();
        float_out |= !excluded && is_float(sample.outputs[o].dtype);
      }
    }
    if (float_in && float_out) missing.push_back(def->qualified_name());
  }
  EXPECT_TRUE(missing.empty()) << "no gradient rule: " << str_join(missing, ", ");
}

}  // namespace
}  // namespace ampc
