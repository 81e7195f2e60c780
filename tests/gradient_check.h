// Gradient checks: the gradients autodiff builds, run on the CPU backend in f64, against central
// differences of the loss.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"
#include "compiler/verifier.h"
#include "passes/passes.h"
#include "runtime/interpreter.h"

namespace ampc::testing {

struct GradientCheck {
  // The worst, over the differentiated inputs, of |analytic - numeric| / max(|numeric|, 1e-3)
  // measured as vector norms per input.
  double max_relative_error = 0;
  std::string worst_input;
  int inputs_checked = 0;
};

// Differentiates the output `loss` of `graph` with respect to the graph inputs whose names match
// `wrt` (a regex) and compares each gradient with central differences (step `h`) at `inputs`
// (one tensor per graph input, in order). The graph is not changed.
inline absl::StatusOr<GradientCheck> check_gradients(const Graph& graph,
                                                     const std::vector<Tensor>& inputs,
                                                     const std::string& wrt, double h = 1e-6) {
  std::unique_ptr<Graph> backward = graph.clone();
  AutodiffOptions options;
  options.trainable = wrt;
  options.include_graph_inputs = true;
  Diagnostics diagnostics;
  // As the training step does before autodiff: PyTorch's safe softmax (which the Attention op's
  // expansion writes too) gets its gradient, 0 on rows that keep no key.
  AMPC_RETURN_IF_ERROR(
      make_safe_softmax_pass()->run(*backward, PassContext{&diagnostics}).status());
  AMPC_ASSIGN_OR_RETURN(bool changed,
                        make_autodiff_pass(options)->run(*backward, PassContext{&diagnostics}));
  if (!changed) return absl::InvalidArgumentError("autodiff added no gradient");
  AMPC_RETURN_IF_ERROR(verify(*backward));
  AMPC_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, runtime::interpret_graph(*backward, inputs));
  std::map<std::string, const Tensor*> by_name;
  for (size_t i = 0; i < outputs.size(); ++i) by_name[backward->outputs()[i]->name()] = &outputs[i];

  int loss_index = -1;
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    if (graph.outputs()[i]->name() == options.loss) loss_index = static_cast<int>(i);
  }
  if (loss_index < 0) return absl::NotFoundError("no output 'loss'");
  auto loss_at = [&](const std::vector<Tensor>& at) -> absl::StatusOr<double> {
    AMPC_ASSIGN_OR_RETURN(std::vector<Tensor> forward, runtime::interpret_graph(graph, at));
    return forward[loss_index].element_as_double(0);
  };

  GradientCheck result;
  const std::regex pattern(wrt);
  for (size_t k = 0; k < graph.inputs().size(); ++k) {
    const Value* input = graph.inputs()[k];
    if (!std::regex_search(input->name(), pattern) || !is_float(input->dtype())) continue;
    auto grad = by_name.find(input->name() + ".grad");
    if (grad == by_name.end()) {
      return absl::NotFoundError(str_cat("no gradient output for '", input->name(), "'"));
    }
    double diff_norm = 0;
    double numeric_norm = 0;
    std::vector<Tensor> at = inputs;
    for (int64_t j = 0; j < input->type().num_elements(); ++j) {
      const double x = inputs[k].element_as_double(j);
      at[k].set_element(j, x + h);
      AMPC_ASSIGN_OR_RETURN(const double up, loss_at(at));
      at[k].set_element(j, x - h);
      AMPC_ASSIGN_OR_RETURN(const double down, loss_at(at));
      at[k].set_element(j, x);
      const double numeric = (up - down) / (2 * h);
      const double analytic = grad->second->element_as_double(j);
      diff_norm += (analytic - numeric) * (analytic - numeric);
      numeric_norm += numeric * numeric;
    }
    const double error = std::sqrt(diff_norm) / std::max(std::sqrt(numeric_norm), 1e-3);
    ++result.inputs_checked;
    // A NaN (a NaN gradient or loss) is the worst error, which no tolerance passes.
    if (!std::isnan(result.max_relative_error) &&
        (std::isnan(error) || error >= result.max_relative_error)) {
      result.max_relative_error = error;
      result.worst_input = input->name();
    }
  }
  return result;
}

// Every output of `graph` after autodiff (the loss, and `v.grad` for each trainable initializer
// and float graph input v), run by the CPU interpreter at `inputs` (one per graph input), by
// name; `graph` gets the backward. For the conventions at kinks, ties and zeros, which central
// differences cannot check.
inline absl::StatusOr<std::map<std::string, std::vector<double>>> outputs_with_gradients(
    Graph& graph, const std::vector<Tensor>& inputs) {
  AutodiffOptions options;
  options.include_graph_inputs = true;
  Diagnostics diagnostics;
  AMPC_RETURN_IF_ERROR(make_autodiff_pass(options)->run(graph, PassContext{&diagnostics}).status());
  AMPC_RETURN_IF_ERROR(verify(graph));
  AMPC_ASSIGN_OR_RETURN(std::vector<Tensor> outputs, runtime::interpret_graph(graph, inputs));
  std::map<std::string, std::vector<double>> values;
  for (size_t i = 0; i < outputs.size(); ++i) {
    values[graph.outputs()[i]->name()] = outputs[i].to_double_vector();
  }
  return values;
}

// Uniform values in [low, high] of `type` (float), seeded.
inline Tensor random_tensor(const TensorType& type, std::mt19937& rng, double low, double high) {
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<double> values(type.num_elements());
  for (double& v : values) v = uniform(rng);
  return Tensor::from_doubles(type.dtype, type.shape, values);
}

// check_gradients on an ONNX model (`bytes`) imported and canonicalized as a compile does before
// autodiff (the lowerings' Constant nodes become the initializers gradient rules read, such as
// Pad's pads), at inputs drawn in [-1.5, 1.5] from `seed`.
inline absl::StatusOr<GradientCheck> check_onnx_gradients(const std::string& bytes,
                                                          const std::string& wrt, uint32_t seed) {
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_bytes(bytes, "model.onnx"));
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  AMPC_RETURN_IF_ERROR(pipeline.run(*graph, PassContext{}).status());
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  for (const Value* input : graph->inputs()) {
    inputs.push_back(random_tensor(input->type(), rng, -1.5, 1.5));
  }
  return check_gradients(*graph, inputs, wrt);
}

}  // namespace ampc::testing
