// CPU kernels for the gradients of LayerNormalization and BatchNormalization: the ampc-domain
// ops LayerNormalizationGrad and BatchNormalizationGrad.
//
// Kernels are keyed on dY (X's type). BatchNormalizationGrad reads scale, mean and var in their
// own element type (f32 when X is f16 or bf16) and writes dScale and dB in scale's; everything is
// computed in X's compute type: f32 for f16, bf16 and f32, f64 for f64.
//
// LayerNormalizationGrad, per row of the n elements from `axis` on: mean and inv_std are read from
// the Mean and InvStdDev inputs when given, else recomputed exactly as the forward kernel does
// (sequential sums, inv_std = 1 / sqrt(var + epsilon)); then with xhat_j = (x_j - mean) * inv_std
// and g_j = dy_j * scale_j,
//   dx_j = inv_std * (g_j - sum(g) / n - xhat_j * sum(g * xhat) / n)
//   dscale_j = sum over rows of dy_j * xhat_j,  dB_j = sum over rows of dy_j
// (the row sums sequential in j, the column sums sequential in row order).
//
// BatchNormalizationGrad, per channel c over the m = N * D1 * ... elements (n, d) in row-major
// order: mean and var are the batch statistics recomputed as the forward kernel computes them in
// training mode (training_mode=1), else the given ones; inv_std = 1 / sqrt(var + epsilon),
// xhat = (x - mean) * inv_std,
//   dscale = sum(dy * xhat), dB = sum(dy)
//   training:  dx = scale * inv_std * (dy - dB / m - xhat * dscale / m)
//   all_ranks: the same with mean, var, m and the sums in dx over every rank of the execution
//              context's group (batch_statistics.h); dscale and dB are this rank's
//   inference: dx = scale * inv_std * dy
//
// Rows, columns and channels are spread over threads, each computed by one, so the bits do not
// depend on the thread count. All sums are taken before dX is written, and each dX element after
// its own dY element is read, so dX may share dY's buffer.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "runtime/cpu/batch_statistics.h"
#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/gradient_math.h"

namespace ampc::runtime::cpu {
namespace {

// ---- LayerNormalizationGrad ----------------------------------------------------------------

// Scale broadcast to the normalized dims `normalized`, as one value per column.
template <typename C>
std::vector<C> scale_per_column(const TensorArg& scale, const Shape& normalized) {
  const Shape& shape = scale.shape();
  const size_t offset = normalized.size() - shape.size();
  std::vector<C> columns(num_elements(normalized));
  for (int64_t j = 0; j < static_cast<int64_t>(columns.size()); ++j) {
    int64_t rest = j, at = 0, stride = 1;
    for (size_t d = normalized.size(); d-- > offset;) {
      const int64_t index = rest % normalized[d];
      rest /= normalized[d];
      if (shape[d - offset] != 1) at += index * stride;
      stride *= shape[d - offset];
    }
    columns[j] = read_as<C>(scale, at);
  }
  return columns;
}

template <typename T>
absl::Status layer_norm_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const Shape& shape = ctx.input(1).shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = ctx.node.int_attr("axis");
  if (axis < 0) axis += rank;
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? rows : n) *= shape[d];
  const C epsilon = static_cast<C>(ctx.node.float_attr("epsilon"));
  std::span<const T> dy = ctx.input(0).in<T>();
  std::span<const T> x = ctx.input(1).in<T>();
  const std::vector<C> scale =
      scale_per_column<C>(ctx.input(2), Shape(shape.begin() + axis, shape.end()));
  const bool saved = ctx.has_input(3);
  const int64_t row_grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n));

  std::vector<C> mean(rows), inv_std(rows);
  parallel_for(rows, row_grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      if (saved) {
        mean[row] = read_as<C>(ctx.input(3), row);
        inv_std[row] = read_as<C>(ctx.input(4), row);
        continue;
      }
      const T* in = x.data() + row * n;
      C sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += load(in[j]);
      mean[row] = sum / static_cast<C>(n);
      C square_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const C centered = load(in[j]) - mean[row];
        square_sum += centered * centered;
      }
      inv_std[row] = C(1) / std::sqrt(square_sum / static_cast<C>(n) + epsilon);
    }
  });

  std::span<T> dscale = ctx.output(1).out<T>();
  std::span<T> dbias = ctx.has_output(2) ? ctx.output(2).out<T>() : std::span<T>();
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, rows)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t j = begin; j < end; ++j) {
                   C scale_sum = 0, bias_sum = 0;
                   for (int64_t row = 0; row < rows; ++row) {
                     const int64_t i = row * n + j;
                     const C grad = load(dy[i]);
                     scale_sum += grad * ((load(x[i]) - mean[row]) * inv_std[row]);
                     bias_sum += grad;
                   }
                   dscale[j] = store<T>(scale_sum);
                   if (!dbias.empty()) dbias[j] = store<T>(bias_sum);
                 }
               });

  std::span<T> dx = ctx.output(0).out<T>();
  parallel_for(rows, row_grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t first = row * n;
      C grad_sum = 0, grad_xhat_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const C grad = load(dy[first + j]) * scale[j];
        grad_sum += grad;
        grad_xhat_sum += grad * ((load(x[first + j]) - mean[row]) * inv_std[row]);
      }
      const C grad_mean = grad_sum / static_cast<C>(n);
      const C grad_xhat_mean = grad_xhat_sum / static_cast<C>(n);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = first + j;
        const C xhat = (load(x[i]) - mean[row]) * inv_std[row];
        const C grad = load(dy[i]) * scale[j];
        dx[i] =
            store<T>(numeric::layer_norm_grad(grad, xhat, inv_std[row], grad_mean, grad_xhat_mean));
      }
    }
  });
  return absl::OkStatus();
}

// ---- BatchNormalizationGrad ----------------------------------------------------------------

template <typename T>
absl::Status batch_norm_grad(const KernelContext& ctx) {
  using C = compute_t<T>;
  const BatchShape shape(ctx.input(1).shape());
  const int64_t batch = shape.batch, channels = shape.channels, spatial = shape.spatial;
  const bool training = int_attr_or(ctx.node, "training_mode", 0) != 0;
  comm::Communicator* group =
      training && int_attr_or(ctx.node, "all_ranks", 0) != 0 && ctx.exec != nullptr
          ? ctx.exec->communicator
          : nullptr;
  const C epsilon = static_cast<C>(ctx.node.float_attr("epsilon"));

  std::span<const T> dy = ctx.input(0).in<T>();
  std::span<const T> x = ctx.input(1).in<T>();
  const std::vector<C> scale = read_all_as<C>(ctx.input(2));
  std::vector<C> mean = read_all_as<C>(ctx.input(3));
  std::vector<C> var = read_all_as<C>(ctx.input(4));
  C count = static_cast<C>(batch * spatial);
  if (training) {
    AMPC_ASSIGN_OR_RETURN(count, batch_statistics<T>(x, shape, group, mean, var));
  }
  std::vector<C> inv_std(channels), dscale(channels), dbias(channels);
  parallel_for(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      inv_std[c] = C(1) / std::sqrt(var[c] + epsilon);
      const C m = mean[c], s = inv_std[c];
      // One pass over dY and X for both sums.
      const std::array<C, 2> sums = shape.channel_sums<C, 2>(c, [&](int64_t i) {
        const C g = load(dy[i]);
        return std::array<C, 2>{g * ((load(x[i]) - m) * s), g};
      });
      dscale[c] = sums[0];
      dbias[c] = sums[1];
    }
  });
  // dX's sums: with all_ranks, every rank's (dScale and dB stay this rank's: the gradient
  // average sums them over the ranks).
  std::vector<C> sums(dscale);
  sums.insert(sums.end(), dbias.begin(), dbias.end());
  AMPC_RETURN_IF_ERROR(sum_over_ranks(sums, group));
  const C* total_scale = sums.data();
  const C* total_bias = sums.data() + channels;

  std::span<T> dx = ctx.output(0).out<T>();
  parallel_for(batch * channels, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, spatial)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t block = begin; block < end; ++block) {
                   const int64_t c = block % channels;
                   const C factor = scale[c] * inv_std[c];
                   const C bias_mean = total_bias[c] / count;
                   const C scale_mean = total_scale[c] / count;
                   // Locals no store can alias, so the loop vectorizes (the same operations).
                   const C m = training ? mean[c] : C(0), s = inv_std[c];
                   const T* dy_block = dy.data() + block * spatial;
                   const T* x_block = x.data() + block * spatial;
                   T* dx_block = dx.data() + block * spatial;
                   if (training) {
#pragma omp simd
                     for (int64_t i = 0; i < spatial; ++i) {
                       const C grad = load(dy_block[i]) -
                                      (bias_mean + (load(x_block[i]) - m) * s * scale_mean);
                       dx_block[i] = store<T>(factor * grad);
                     }
                   } else {
#pragma omp simd
                     for (int64_t i = 0; i < spatial; ++i) {
                       dx_block[i] = store<T>(factor * load(dy_block[i]));
                     }
                   }
                 }
               });
  for (int64_t c = 0; c < channels; ++c) {
    write_as<C>(ctx.output(1), c, dscale[c]);
    write_as<C>(ctx.output(2), c, dbias[c]);
  }
  return absl::OkStatus();
}

void register_normalization_grad_kernels(KernelRegistry& r) {
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("LayerNormalizationGrad", {.in_place_operand = 0}),
      []<typename T>() { return &layer_norm_grad<T>; });
  add_kernels<float, double, Float16, BFloat16>(
      r, ampc_kernel_def("BatchNormalizationGrad", {.in_place_operand = 0}),
      []<typename T>() { return &batch_norm_grad<T>; });
}

static KernelRegistration kNormalizationGradKernels(&register_normalization_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
