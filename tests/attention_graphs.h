// The attention pattern as a test graph, for the fusion tests on the CPU
// (tests/passes/fuse_attention_test.cc) and on CUDA (tests/gpu/attention_cuda_test.cc): text IR
// of MatMul, scale, causal mask, Softmax, MatMul over graph inputs q, k, v in one dtype (the
// Softmax in f32 for f16 and bf16, as autocast leaves it), with the loss sum(y * r), and the
// graph differentiated with respect to its inputs, fused or not.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/strings.h"
#include "passes/fuse_attention.h"
#include "passes/passes.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::testing {

// Initializers whose names start with "c_" are constants of the program (as folding makes
// them), not weights.
inline void mark_constants(Graph& graph) {
  for (Value* init : graph.initializers()) {
    if (init->name().starts_with("c_")) init->set_constant(true);
  }
}

struct AttentionCase {
  int64_t batch = 2, heads = 2, t = 16, d = 8, dv = 5;
  // The mask as an additive 0 / `fill` bias (Add) with Q and Kt scaled, else bool (Where) with
  // the scores scaled; none unless `masked`.
  bool masked = true;
  bool bias = false;
  std::string fill = "-inf";
  // The bias passes an Identity, so the fusion sees a value computed in the graph, not the
  // constant it would take as a bool mask (passes/fuse_attention.cc, bool_mask_of).
  bool computed_bias = false;
  // Keys 0 .. padded - 1 are masked for every query besides the causal mask (left padding): the
  // first `padded` rows keep no key.
  int64_t padded = 0;
  // Besides: query i keeps only the `window` keys up to itself (sliding-window attention), when
  // positive.
  int64_t window = 0;
  // The probabilities pass PyTorch's safe softmax, Where(IsNaN(p), 0, p), as its TorchScript
  // export of scaled_dot_product_attention with a mask writes them.
  bool safe = false;
  // Heads of K and V: `heads`, or 1 for multi-query attention (MatMul broadcasts them).
  int64_t kv_heads = 0;
  int64_t key_heads() const { return kv_heads > 0 ? kv_heads : heads; }
};

inline std::string attention_graph(DType dtype, const AttentionCase& c) {
  const std::string t(dtype_name(dtype));
  const std::string wide = dtype == DType::kF16 || dtype == DType::kBF16 ? "f32" : t;
  const auto shape = [&](int64_t last, int64_t rows, int64_t heads = 0) {
    return str_cat("[", c.batch, ",", heads > 0 ? heads : c.heads, ",", rows, ",", last, "]");
  };
  const int64_t kvh = c.key_heads();
  const std::string scores = shape(c.t, c.t);
  std::string mask;
  for (int64_t i = 0; i < c.t; ++i) {
    for (int64_t j = 0; j < c.t; ++j) {
      if (!mask.empty()) mask += ", ";
      const bool keep = j <= i && j >= c.padded && (c.window == 0 || i - j < c.window);
      mask += c.bias ? (keep ? "0.0" : c.fill) : (keep ? "true" : "false");
    }
  }
  std::string text =
      str_cat("graph g(%q: ", t, shape(c.d, c.t), ", %k: ", t, shape(c.d, c.t, kvh), ", %v: ", t,
              shape(c.dv, c.t, kvh), ", %r: ", t, shape(c.dv, c.t), ") opset(17) {\n");
  // With the bias, Q and Kt are each scaled by the scale's square root, as PyTorch exports
  // scaled_dot_product_attention; else the scores are scaled.
  text += c.bias ? str_cat("  init %c_root: ", t, "[] = [0.6123724356957945]\n")
                 : str_cat("  init %c_scale: ", t, "[] = [0.375]\n");
  if (c.masked) {
    text += str_cat("  init %c_ninf: ", t, "[] = [-inf]\n");
    text +=
        str_cat("  init %c_mask: ", c.bias ? t : "bool", "[", c.t, ",", c.t, "] = [", mask, "]\n");
  }
  text += str_cat("  %kt = Transpose<perm=[0, 1, 3, 2]>(%k) : ", t, shape(c.t, c.d, kvh), "\n");
  if (c.bias) {
    text += str_cat("  %qs = Mul(%q, %c_root) : ", t, shape(c.d, c.t), "\n");
    text += str_cat("  %kts = Mul(%kt, %c_root) : ", t, shape(c.t, c.d, kvh), "\n");
    text += str_cat("  %sc = MatMul(%qs, %kts) : ", t, scores, "\n");
  } else {
    text += str_cat("  %s = MatMul(%q, %kt) : ", t, scores, "\n");
    text += str_cat("  %sc = Mul(%s, %c_scale) : ", t, scores, "\n");
  }
  if (c.masked && c.bias && c.computed_bias) {
    text += str_cat("  %bias = Identity(%c_mask) : ", t, "[", c.t, ",", c.t, "]\n");
  }
  if (c.masked) {
    text += c.bias ? str_cat("  %sm = Add(%sc, ", c.computed_bias ? "%bias" : "%c_mask", ") : ", t,
                             scores, "\n")
                   : str_cat("  %sm = Where(%c_mask, %sc, %c_ninf) : ", t, scores, "\n");
  }
  std::string softmax_in = c.masked ? "%sm" : "%sc";
  if (wide != t) {
    text += str_cat("  %sw = Cast<to=", wide, ">(%sm) : ", wide, scores, "\n");
    softmax_in = "%sw";
  }
  text += str_cat("  %p = Softmax<axis=-1>(", softmax_in, ") : ", wide, scores, "\n");
  std::string probs = "%p";
  if (c.safe) {
    text += str_cat("  init %c_zero: ", wide, "[] = [0.0]\n");
    text += str_cat("  %nan = IsNaN(%p) : bool", scores, "\n");
    text += str_cat("  %pg = Where(%nan, %c_zero, %p) : ", wide, scores, "\n");
    probs = "%pg";
  }
  if (wide != t) {
    text += str_cat("  %pn = Cast<to=", t, ">(", probs, ") : ", t, scores, "\n");
    probs = "%pn";
  }
  text += str_cat("  %y = MatMul(", probs, ", %v) : ", t, shape(c.dv, c.t), "\n");
  text += str_cat("  %yr = Mul(%y, %r) : ", t, shape(c.dv, c.t), "\n");
  text += str_cat("  %loss = ReduceSum<keepdims=0>(%yr) : ", t, "[]\n");
  text += "  return %loss, %y\n}\n";
  return text;
}

inline Tensor as_type(const Tensor& t, DType dtype) {
  std::vector<double> values(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) values[i] = t.element_as_double(i);
  return Tensor::from_doubles(dtype, t.type().shape, values);
}

// y and the gradients of q, k and v, in f64, from the graph in `dtype`, fused or not, run on
// `device`; empty (after a test failure) when something failed.
// With `cuda_graph`, the session records its first run as a CUDA graph and the second run
// (whose results these are) replays it.
inline std::map<std::string, std::vector<double>> run_attention(
    DType dtype, const AttentionCase& c, bool fuse, const std::map<std::string, Tensor>& in,
    runtime::Device device = runtime::Device::kCpu, bool cuda_graph = false) {
  std::map<std::string, std::vector<double>> result;
  std::unique_ptr<Graph> graph = parse_or_fail(attention_graph(dtype, c));
  if (graph == nullptr) return result;
  mark_constants(*graph);
  Diagnostics diagnostics;
  PassContext context{&diagnostics};
  if (fuse) {
    absl::StatusOr<bool> fused = make_fuse_attention_pass()->run(*graph, context);
    EXPECT_TRUE(fused.ok() && *fused) << "the pattern did not fuse";
  }
  // As the training pipeline does after fuse-attention: an unfused guard's gradient is 0.
  absl::StatusOr<bool> guarded = make_safe_softmax_pass()->run(*graph, context);
  EXPECT_TRUE(guarded.ok()) << guarded.status();
  AutodiffOptions autodiff;
  autodiff.include_graph_inputs = true;
  absl::StatusOr<bool> changed = make_autodiff_pass(autodiff)->run(*graph, context);
  EXPECT_TRUE(changed.ok()) << changed.status();
  runtime::SessionOptions options;
  options.device = device;
  options.cuda_graph = cuda_graph;
  absl::StatusOr<std::unique_ptr<runtime::InferenceSession>> session =
      runtime::InferenceSession::create(std::move(graph), options);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return result;
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, tensor] : in) inputs[name] = as_type(tensor, dtype);
  absl::StatusOr<std::map<std::string, Tensor>> outputs = (*session)->run(inputs);
  if (cuda_graph && outputs.ok()) outputs = (*session)->run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return result;
  for (const std::string name : {"y", "q.grad", "k.grad", "v.grad"}) {
    const Tensor& t = outputs->at(name);
    std::vector<double>& values = result[name];
    for (int64_t i = 0; i < t.num_elements(); ++i) values.push_back(t.element_as_double(i));
  }
  return result;
}

// Inputs q, k, v, r of `c` in f64, exact in f16 and bf16 alike (multiples of 1/64 in [-2, 2]),
// so that every dtype reads the same numbers.
inline std::map<std::string, Tensor> attention_inputs(const AttentionCase& c, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(-128, 128);
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, last] : std::vector<std::pair<std::string, int64_t>>{
           {"q", c.d}, {"k", c.d}, {"v", c.dv}, {"r", c.dv}}) {
    const bool kv = name == "k" || name == "v";
    const Shape shape = {c.batch, kv ? c.key_heads() : c.heads, c.t, last};
    std::vector<double> values(num_elements(shape));
    for (double& v : values) v = pick(rng) / 64.0;
    inputs[name] = Tensor::from_doubles(DType::kF64, shape, values);
  }
  return inputs;
}

inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace ampc::testing
