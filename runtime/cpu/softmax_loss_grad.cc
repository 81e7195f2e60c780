// CPU kernels for the gradients of Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss: the ampc-domain ops SoftmaxGrad, LogSoftmaxGrad,
// SoftmaxCrossEntropyLossGrad and NegativeLogLikelihoodLossGrad.
//
// Numerics (f32 for f16, bf16 and f32; f64 for f64), per row of n elements along `axis`:
//   SoftmaxGrad(dY, Y):    s = dy_0 * y_0 + ... + dy_{n-1} * y_{n-1} sequentially,
//                          dx_k = y_k * (dy_k - s)
//   LogSoftmaxGrad(dY, Y): s = dy_0 + ... + dy_{n-1} sequentially, dx_k = dy_k - exp(y_k) * s
// For a sample with label t (not ignore_index) and weight w_t (1 without weights):
//   SoftmaxCrossEntropyLossGrad: dscores_c = g * w_t * (exp(log_prob_c) - [c == t])
//   NegativeLogLikelihoodLossGrad: dinput_t = -g * w_t, every other class 0
// where g is dLoss[sample] for reduction "none", dLoss for "sum", and dLoss / W for "mean", W the
// sum of the kept samples' weights (their count without weights) added as the forward kernel
// adds it (pairwise_sum.h's order over every sample, an ignored one adding 0). With from_scores=1
// the log-probabilities are recomputed from the scores exactly as the forward kernel computes them
// ((x - m) - log(sum of exp(x - m)), in class order). Ignored samples get 0. Each output element is
// rounded once. Rows and samples are spread over threads, each computed by one; an element is
// written after its own operands were read, so the gradient may share dY's (softmax) or log_prob's
// (cross entropy) buffer.
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
#include "runtime/gradient_math.h"

namespace ampc::runtime::cpu {
namespace {

// ---- SoftmaxGrad / LogSoftmaxGrad ----------------------------------------------------------

template <typename T, bool kLog>
absl::Status softmax_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Shape& shape = ctx.input(1).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = ctx.node.int_attr("axis");
  if (axis < 0) axis += rank;
  AMPC_CHECK(axis >= 0 && axis < rank);  // inference validated it
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= shape[d];
  const int64_t n = shape[axis];

  std::span<const T> dy = ctx.input(0).in<T>();
  std::span<const T> y = ctx.input(1).in<T>();
  std::span<T> dx = ctx.output(0).out<T>();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  parallel_for(outer * inner, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      // Element k of the row is at first + k * inner.
      const int64_t first = (row / inner) * n * inner + row % inner;
      C sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = first + k * inner;
        sum += kLog ? load(dy[i]) : load(dy[i]) * load(y[i]);
      }
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = first + k * inner;
        dx[i] = store<T>(kLog ? numeric::log_softmax_grad(load(dy[i]), load(y[i]), sum)
                              : numeric::softmax_grad(load(dy[i]), load(y[i]), sum));
      }
    }
  });
  return absl::OkStatus();
}

// ---- Loss gradients ------------------------------------------------------------------------

// What each kept sample's gradient is scaled by besides its weight: dLoss per reduction.
template <typename T>
class LossScale {
 public:
  using C = compute_t<T>;
  LossScale(const KernelContext& ctx, const std::vector<int64_t>& labels,
            std::optional<int64_t> ignored, std::span<const T> weights)
      : dloss_(ctx.input(0).in<T>()), per_sample_(ctx.node.string_attr("reduction") == "none") {
    if (per_sample_) return;
    scale_ = load(dloss_[0]);
    if (ctx.node.string_attr("reduction") != "mean") return;
    if (!weights.empty()) {
      // Every sample's weight, 0 for an ignored one, in the forward kernel's order.
      PairwiseSum<C> weight_sum;
      for (int64_t label : labels) weight_sum.add(label != ignored ? load(weights[label]) : C(0));
      scale_ /= weight_sum.total();
    } else {
      const int64_t kept = std::count_if(labels.begin(), labels.end(),
                                         [&](int64_t label) { return label != ignored; });
      scale_ /= static_cast<C>(kept);
    }
  }
  C operator()(int64_t sample) const { return per_sample_ ? load(dloss_[sample]) : scale_; }

 private:
  std::span<const T> dloss_;
  bool per_sample_;
  C scale_ = 0;
};

template <typename T>
absl::Status softmax_cross_entropy_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const ClassLayout layout = class_layout(ctx.input(1).shape());
  const std::vector<int64_t> labels = index_values(ctx.input(2));
  const std::optional<int64_t> ignored = ignore_index(ctx.node);
  AMPC_RETURN_IF_ERROR(check_labels(labels, ctx.input(2).shape(), layout.classes, ignored));
  std::span<const T> weights = ctx.has_input(3) ? ctx.input(3).in<T>() : std::span<const T>();
  const LossScale<T> loss_scale(ctx, labels, ignored, weights);
  const bool from_scores = int_attr_or(ctx.node, "from_scores", 0) != 0;

  std::span<const T> in = ctx.input(1).in<T>();
  std::span<T> out = ctx.output(0).out<T>();
  const int64_t classes = layout.classes, spatial = layout.spatial;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, classes));
  parallel_for(layout.samples, grain, [&](int64_t begin, int64_t end) {
    std::vector<C> e(from_scores ? classes : 0);
    for (int64_t s = begin; s < end; ++s) {
      // Class c of sample s is at first + c * spatial.
      const int64_t first = (s / spatial) * classes * spatial + s % spatial;
      const int64_t label = labels[s];
      if (label == ignored) {
        for (int64_t c = 0; c < classes; ++c) out[first + c * spatial] = store<T>(C(0));
        continue;
      }
      // log_prob_c = (x_c - shift) - log_sum: the input itself unless from_scores.
      C shift = 0, log_sum = 0;
      if (from_scores) {
        shift = -std::numeric_limits<C>::infinity();
        for (int64_t c = 0; c < classes; ++c)
          shift = std::max(shift, load(in[first + c * spatial]));
        for (int64_t c = 0; c < classes; ++c) e[c] = load(in[first + c * spatial]) - shift;
        exp_array(e.data(), e.data(), classes);
        C sum = 0;
        for (int64_t c = 0; c < classes; ++c) sum += e[c];
        log_sum = std::log(sum);
      }
      const C factor = loss_scale(s) * (weights.empty() ? C(1) : load(weights[label]));
      for (int64_t c = 0; c < classes; ++c) {
        const int64_t i = first + c * spatial;
        const C log_prob = from_scores ? (load(in[i]) - shift) - log_sum : load(in[i]);
        out[i] = store<T>(numeric::cross_entropy_grad(factor, log_prob, c == label));
      }
    }
  });
  return absl::OkStatus();
}

template <typename T>
absl::Status negative_log_likelihood_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const ClassLayout layout = class_layout(ctx.output(0).shape());
  const std::vector<int64_t> labels = index_values(ctx.input(1));
  const std::optional<int64_t> ignored = ignore_index(ctx.node);
  AMPC_RETURN_IF_ERROR(check_labels(labels, ctx.input(1).shape(), layout.classes, ignored));
  std::span<const T> weights = ctx.has_input(2) ? ctx.input(2).in<T>() : std::span<const T>();
  const LossScale<T> loss_scale(ctx, labels, ignored, weights);

  std::span<T> out = ctx.output(0).out<T>();
  std::fill(out.begin(), out.end(), store<T>(C(0)));
  const int64_t classes = layout.classes, spatial = layout.spatial;
  for (int64_t s = 0; s < layout.samples; ++s) {
    const int64_t label = labels[s];
    if (label == ignored) continue;
    const int64_t at = (s / spatial) * classes * spatial + label * spatial + s % spatial;
    out[at] = store<T>(-loss_scale(s) * (weights.empty() ? C(1) : load(weights[label])));
  }
  return absl::OkStatus();
}

void register_softmax_loss_grad_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("SoftmaxGrad", {.in_place_operand = 0}),
      []<typename T>() { return &softmax_grad<T, false>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("LogSoftmaxGrad", {.in_place_operand = 0}),
      []<typename T>() { return &softmax_grad<T, true>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("SoftmaxCrossEntropyLossGrad", {.in_place_operand = 1}),
      []<typename T>() { return &softmax_cross_entropy_grad<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("NegativeLogLikelihoodLossGrad"),
      []<typename T>() { return &negative_log_likelihood_grad<T>; });
}

static KernelRegistration kSoftmaxLossGradKernels(&register_softmax_loss_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
