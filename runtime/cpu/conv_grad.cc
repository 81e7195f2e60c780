// The gradients of Conv (ampc domain, built by ops/conv_grad.cc): ConvGradData(dY, W) -> dX and
// ConvGradFilter(X, dY) -> dW, over 1, 2 and 3 spatial dims with strides, explicit pads,
// dilations and groups, as the GEMM core plus im2col / col2im.
//
// Both treat as many images at once as runtime/cpu/im2col.h's budget holds (one batch of
// products, one parallel im2col or col2im), which changes no sum.
// ConvGradData, per image: group g's columns = W_g^T [patch, M / group] x dY_g [M / group, out]
// (the GEMM core), then col2im adds each column entry into the input element its kernel offset
// read in the forward pass (padding taps are dropped). col2im runs in parallel over channels, each
// channel's sums in a fixed order (kernel offset, then output position).
// ConvGradFilter: per image, group g's dW_g += dY_g [M / group, out] x col_g^T [out, patch] with
// col the forward's im2col matrix; images are added in order.
// Accumulation contract: products accumulate in the f32 GEMM core (f64 for f64) in its fixed
// tile order; the col2im sums and the sum over images run in the compute type (f32 for f16/bf16);
// f16/bf16 results are rounded once at the end. The bits do not depend on the thread count.
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"
#include "runtime/cpu/im2col.h"
#include "runtime/cpu/onednn_conv.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {
namespace {

struct ConvGradShape {
  Window window;
  int64_t group = 1;
  int64_t out_channels = 0;  // M
  int64_t patch = 0;         // C / group * kernel_size
  int64_t col_rows() const { return window.channels * window.kernel_size(); }
};

// X [N, C, in...], W [M, C / group, k...], dY [N, M, out...].
ConvGradShape conv_grad_shape(const Node& node, const Shape& x, const Shape& w, const Shape& y) {
  ConvGradShape s;
  s.window = resolve_window(node, x, y, std::vector<int64_t>(w.begin() + 2, w.end()));
  s.group = node.int_attr("group");
  s.out_channels = w[0];
  s.patch = w[1] * s.window.kernel_size();
  return s;
}

// ---- ConvGradData(dY, W) -> dX ---------------------------------------------------------------

ConvGradShape data_shape(const Node& node) {
  return conv_grad_shape(node, node.output(0)->shape(), node.operand(1)->shape(),
                         node.operand(0)->shape());
}

template <typename T>
int64_t data_workspace_for(const ConvGradShape& s) {
  using C = gemm_t<T>;
  const Window& w = s.window;
  const int64_t images = images_per_batch(w, sizeof(C));
  int64_t bytes = WorkspaceCarver::bytes_for<C>(images * s.col_rows() * w.out_size());
  if constexpr (needs_staging_v<T>) {
    bytes += WorkspaceCarver::bytes_for<float>(s.out_channels * s.patch);                 // W
    bytes += WorkspaceCarver::bytes_for<float>(w.batch * s.out_channels * w.out_size());  // dY
    bytes += WorkspaceCarver::bytes_for<float>(images * w.channels * w.in_size());        // dX
  }
  return bytes;
}

template <typename T>
absl::Status conv_grad_data(const KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.state != nullptr) return run_onednn_conv(ctx);
  }
  using C = gemm_t<T>;
  const ConvGradShape s = data_shape(ctx.node);
  const Window& w = s.window;
  const int64_t m_group = s.out_channels / s.group, out_size = w.out_size();
  const int64_t in_image = w.channels * w.in_size();
  const int64_t images = images_per_batch(w, sizeof(C));
  const int64_t col_size = s.col_rows() * out_size;
  WorkspaceCarver carver(ctx.workspace);
  const C* dy = staged_operand(ctx.input(0).in<T>(), carver);
  const C* weights = staged_operand(ctx.input(1).in<T>(), carver);
  C* col = carver.take<C>(images * col_size).data();
  std::span<T> dx = ctx.output(0).out<T>();
  C* acc = nullptr;
  if constexpr (needs_staging_v<T>) acc = carver.take<float>(images * in_image).data();

  // Image i, group g: W_g [m_group, patch] transposed times dY_g [m_group, out] gives its col
  // rows.
  const GemmDims dims{.m = s.patch, .n = out_size, .k = m_group, .trans_a = true};
  for (int64_t first = 0; first < w.batch; first += images) {
    const int64_t count = std::min(images, w.batch - first);
    GemmBatch products;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t g = 0; g < s.group; ++g) {
        products.a_offsets.push_back(g * m_group * s.patch);
        products.b_offsets.push_back((first + i) * s.out_channels * out_size +
                                     g * m_group * out_size);
        products.c_offsets.push_back(i * col_size + g * s.patch * out_size);
      }
    }
    gemm(dims, products, weights, dy, col);
    if constexpr (needs_staging_v<T>) {
      col2im(col, w, acc, count);
      round_into(acc, dx.subspan(first * in_image, count * in_image));
    } else {
      col2im(col, w, dx.data() + first * in_image, count);
    }
  }
  return absl::OkStatus();
}

int64_t data_workspace(const Node& node) {
  const ConvGradShape s = data_shape(node);
  switch (node.operand(0)->dtype()) {
    case DType::kF64:
      return data_workspace_for<double>(s);
    case DType::kF16:
      return data_workspace_for<Float16>(s);
    case DType::kBF16:
      return data_workspace_for<BFloat16>(s);
    default:
      return data_workspace_for<float>(s);
  }
}

// ---- ConvGradFilter(X, dY) -> dW -------------------------------------------------------------

ConvGradShape filter_shape(const Node& node) {
  return conv_grad_shape(node, node.operand(0)->shape(), node.output(0)->shape(),
                         node.operand(1)->shape());
}

template <typename T>
int64_t filter_workspace_for(const ConvGradShape& s) {
  using C = gemm_t<T>;
  const Window& w = s.window;
  const int64_t images = images_per_batch(w, sizeof(C));
  int64_t bytes = WorkspaceCarver::bytes_for<C>(images * s.col_rows() * w.out_size());
  bytes += WorkspaceCarver::bytes_for<C>(images * s.out_channels * s.patch);  // their products
  if constexpr (needs_staging_v<T>) {
    bytes += WorkspaceCarver::bytes_for<float>(w.batch * s.out_channels * w.out_size());  // dY
    bytes += WorkspaceCarver::bytes_for<float>(s.out_channels * s.patch);  // the sum over images
  }
  return bytes;
}

template <typename T>
absl::Status conv_grad_filter(const KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.state != nullptr) return run_onednn_conv(ctx);
  }
  using C = gemm_t<T>;
  const ConvGradShape s = filter_shape(ctx.node);
  const Window& w = s.window;
  const int64_t m_group = s.out_channels / s.group, out_size = w.out_size();
  const int64_t weights = s.out_channels * s.patch;
  const int64_t images = images_per_batch(w, sizeof(C));
  const int64_t col_size = s.col_rows() * out_size;
  WorkspaceCarver carver(ctx.workspace);
  const T* x = ctx.input(0).in<T>().data();
  const C* dy = staged_operand(ctx.input(1).in<T>(), carver);
  C* col = carver.take<C>(images * col_size).data();
  C* product = carver.take<C>(images * weights).data();
  std::span<T> dw = ctx.output(0).out<T>();
  C* acc = nullptr;
  if constexpr (needs_staging_v<T>) {
    acc = carver.take<float>(weights).data();
  } else {
    acc = dw.data();
  }

  // Image i, group g: dY_g [m_group, out] times its col rows [patch, out] transposed.
  const GemmDims dims{.m = m_group, .n = s.patch, .k = out_size, .trans_b = true};
  if (w.batch == 0) std::fill_n(acc, weights, C(0));
  for (int64_t first = 0; first < w.batch; first += images) {
    const int64_t count = std::min(images, w.batch - first);
    im2col(x, w, col, first, count);
    GemmBatch products;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t g = 0; g < s.group; ++g) {
        products.a_offsets.push_back((first + i) * s.out_channels * out_size +
                                     g * m_group * out_size);
        products.b_offsets.push_back(i * col_size + g * s.patch * out_size);
        products.c_offsets.push_back(i * weights + g * m_group * s.patch);
      }
    }
    gemm(dims, products, dy, col, product);
    // The images' products added in image order, element by element.
    parallel_for(weights, 1 << 12, [&](int64_t begin, int64_t end) {
      for (int64_t i = 0; i < count; ++i) {
        const C* p = product + i * weights;
        if (first + i == 0) {
          std::copy(p + begin, p + end, acc + begin);
        } else {
          for (int64_t e = begin; e < end; ++e) acc[e] += p[e];
        }
      }
    });
  }
  if constexpr (needs_staging_v<T>) round_into(acc, dw);
  return absl::OkStatus();
}

int64_t filter_workspace(const Node& node) {
  const ConvGradShape s = filter_shape(node);
  switch (node.operand(0)->dtype()) {
    case DType::kF64:
      return filter_workspace_for<double>(s);
    case DType::kF16:
      return filter_workspace_for<Float16>(s);
    case DType::kBF16:
      return filter_workspace_for<BFloat16>(s);
    default:
      return filter_workspace_for<float>(s);
  }
}

absl::StatusOr<std::unique_ptr<KernelState>> init_onednn_data(const KernelContext& ctx) {
  return make_onednn_conv(ctx, ConvPass::kGradData);
}

absl::StatusOr<std::unique_ptr<KernelState>> init_onednn_filter(const KernelContext& ctx) {
  return make_onednn_conv(ctx, ConvPass::kGradFilter);
}

// Both gradients in every float type; in f32 oneDNN's kernel runs where it has one
// (runtime/cpu/onednn_conv.h).
void register_conv_grad_kernels(KernelRegistry& r) {
  const KernelDef data = ampc_kernel_def("ConvGradData", {.workspace_bytes = &data_workspace});
  add_kernels<double, Float16, BFloat16>(r, data, []<typename T>() { return &conv_grad_data<T>; });
  KernelDef data_f32 = data;
  data_f32.init = &init_onednn_data;
  add_kernels<float>(r, data_f32, []<typename T>() { return &conv_grad_data<T>; });
  const KernelDef filter =
      ampc_kernel_def("ConvGradFilter", {.workspace_bytes = &filter_workspace});
  add_kernels<double, Float16, BFloat16>(r, filter,
                                         []<typename T>() { return &conv_grad_filter<T>; });
  KernelDef filter_f32 = filter;
  filter_f32.init = &init_onednn_filter;
  add_kernels<float>(r, filter_f32, []<typename T>() { return &conv_grad_filter<T>; });
}

static KernelRegistration kConvGradKernels(&register_conv_grad_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
