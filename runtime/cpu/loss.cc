// CPU kernels for SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// Scores are [N, C] or [N, C, d1, ..., dk], labels [N] or [N, d1, ..., dk] (i64 or i32), the
// optional weights [C]. A sample is one (n, d1, ..., dk); its loss is
//   NegativeLogLikelihoodLoss: -input[n, t, d] * w[t]
//   SoftmaxCrossEntropyLoss:   -log_prob[n, t, d] * w[t], log_prob = LogSoftmax over C
// with t its label and w[t] = 1 without weights; a sample whose label is ignore_index has loss 0
// and weight 0. reduction "none" writes the per-sample losses, "sum" their sum, "mean" their sum
// divided by the sum of the sample weights (the number of non-ignored samples without weights;
// all samples ignored gives 0 / 0 = NaN, as in ONNX's reference). A label outside [0, C) that
// is not ignore_index is an error naming the label and its position.
//
// Numerics (f32 for f16, bf16 and f32 scores; f64 for f64): log_prob is computed per sample
// exactly as the LogSoftmax kernel does it along C, m = max, s = sum of exp(x - m) in class
// order, log_prob = (x - m) - log(s), so SoftmaxCrossEntropyLoss's log_prob output equals
// LogSoftmax<axis=1> bit for bit. The per-sample losses stay in the compute type; sum and mean
// add them (and the weights) in row-major sample order in pairwise_sum.h's order (blocks of 64,
// then pairwise), divide once and round once.
// Samples are spread over threads; the reduction runs on one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cpu/class_labels.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/pairwise_sum.h"
#include "runtime/cpu/slicing.h"
#include "runtime/cpu/vector_math.h"

namespace ampc::runtime::cpu {
namespace {

// Per-sample losses and weights in the compute type, then output 0 as `reduction` asks.
template <typename T>
struct SampleLosses {
  std::vector<compute_t<T>> loss, weight;
};

template <typename T>
void write_reduced(const KernelContext& ctx, const SampleLosses<T>& samples, bool weighted) {
  using C = compute_t<T>;
  std::span<T> out = ctx.output(0).out<T>();
  const std::string& reduction = ctx.node.string_attr("reduction");
  if (reduction == "none") {
    for (size_t s = 0; s < samples.loss.size(); ++s) out[s] = store<T>(samples.loss[s]);
    return;
  }
  PairwiseSum<C> losses;
  for (C loss : samples.loss) losses.add(loss);
  C sum = losses.total();
  if (reduction == "mean") {
    if (weighted) {
      PairwiseSum<C> weights;
      for (C weight : samples.weight) weights.add(weight);
      sum /= weights.total();
    } else {
      // Every kept sample has weight 1: count them in an integer, exact past 2^24 samples.
      const int64_t counted = std::count(samples.weight.begin(), samples.weight.end(), C(1));
      sum /= static_cast<C>(counted);
    }
  }
  out[0] = store<T>(sum);
}

template <typename T>
absl::Status softmax_cross_entropy(const KernelContext& ctx) {
  using C = compute_t<T>;
  const ClassLayout layout = class_layout(ctx.input(0).shape());
  const std::vector<int64_t> labels = index_values(ctx.input(1));
  const std::optional<int64_t> ignored = ignore_index(ctx.node);
  AMPC_RETURN_IF_ERROR(check_labels(labels, ctx.input(1).shape(), layout.classes, ignored));

  std::span<const T> scores = ctx.input(0).in<T>();
  const bool weighted = ctx.has_input(2);
  std::span<const T> weights = weighted ? ctx.input(2).in<T>() : std::span<const T>();
  std::span<T> log_prob_out = ctx.has_output(1) ? ctx.output(1).out<T>() : std::span<T>();
  const int64_t classes = layout.classes, spatial = layout.spatial;

  SampleLosses<T> samples{std::vector<C>(layout.samples), std::vector<C>(layout.samples)};
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, classes));
  parallel_for(layout.samples, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> e(classes);
    for (int64_t s = begin; s < end; ++s) {
      // Class c of sample s is at first + c * spatial.
      const int64_t first = (s / spatial) * classes * spatial + s % spatial;
      auto score = [&](int64_t c) { return load(scores[first + c * spatial]); };
      C max = -std::numeric_limits<C>::infinity();
      for (int64_t c = 0; c < classes; ++c) max = std::max(max, score(c));
      for (int64_t c = 0; c < classes; ++c) e[c] = score(c) - max;
      exp_array(e.data(), e.data(), classes);
      C sum = 0;
      for (int64_t c = 0; c < classes; ++c) sum += e[c];
      const C log_sum = std::log(sum);
      if (!log_prob_out.empty()) {
        for (int64_t c = 0; c < classes; ++c) {
          log_prob_out[first + c * spatial] = store<T>((score(c) - max) - log_sum);
        }
      }
      const int64_t label = labels[s];
      if (label == ignored) continue;  // loss and weight stay 0
      samples.weight[s] = weighted ? load(weights[label]) : C(1);
      samples.loss[s] = -((score(label) - max) - log_sum) * samples.weight[s];
    }
  });
  write_reduced<T>(ctx, samples, weighted);
  return absl::OkStatus();
}

template <typename T>
absl::Status negative_log_likelihood(const KernelContext& ctx) {
  using C = compute_t<T>;
  const ClassLayout layout = class_layout(ctx.input(0).shape());
  const std::vector<int64_t> labels = index_values(ctx.input(1));
  const std::optional<int64_t> ignored = ignore_index(ctx.node);
  AMPC_RETURN_IF_ERROR(check_labels(labels, ctx.input(1).shape(), layout.classes, ignored));

  std::span<const T> input = ctx.input(0).in<T>();
  const bool weighted = ctx.has_input(2);
  std::span<const T> weights = weighted ? ctx.input(2).in<T>() : std::span<const T>();
  const int64_t classes = layout.classes, spatial = layout.spatial;

  SampleLosses<T> samples{std::vector<C>(layout.samples), std::vector<C>(layout.samples)};
  for (int64_t s = 0; s < layout.samples; ++s) {
    const int64_t label = labels[s];
    if (label == ignored) continue;  // loss and weight stay 0
    const int64_t at = (s / spatial) * classes * spatial + label * spatial + s % spatial;
    samples.weight[s] = weighted ? load(weights[label]) : C(1);
    samples.loss[s] = -load(input[at]) * samples.weight[s];
  }
  write_reduced<T>(ctx, samples, weighted);
  return absl::OkStatus();
}

void register_loss_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("SoftmaxCrossEntropyLoss"),
      []<typename T>() { return &softmax_cross_entropy<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, kernel_def("NegativeLogLikelihoodLoss"),
      []<typename T>() { return &negative_log_likelihood<T>; });
}

static KernelRegistration kLossKernels(&register_loss_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
