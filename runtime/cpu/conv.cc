// Conv over 1, 2 and 3 spatial dims (strides, dilations, pads or auto_pad, groups, optional
// bias) as im2col + the GEMM core. In f32, a node oneDNN has a JIT kernel for runs that instead
// (runtime/cpu/onednn_conv.h).
//
// For each image, im2col writes the input windows as a [C * kernel_size, out_size] matrix in the
// compute type (f32 for f32/f16/bf16, f64 for f64; padding reads as 0), for as many images at
// once as runtime/cpu/im2col.h's budget holds, so that one parallel loop and one batch of
// products cover them; group g's weights
// [M / group, C / group * kernel_size] times its rows of that matrix gives its output channels.
// Accumulation contract: the products accumulate in the f32 GEMM core (f64 for f64) in its fixed
// tile order (runtime/cpu/gemm_core.h), then the bias is added in the compute type
// (y = acc + b) and f16/bf16 results are rounded once.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>

#include "runtime/cpu/cpu_kernel_util.h"
#include "runtime/cpu/gemm_core.h"
#include "runtime/cpu/im2col.h"
#include "runtime/cpu/onednn_conv.h"
#include "runtime/cpu/window.h"

namespace ampc::runtime::cpu {
namespace {

struct ConvShape {
  Window window;
  int64_t group = 1;
  int64_t out_channels = 0;  // M
  int64_t patch = 0;         // C / group * kernel_size: the GEMM's K
  // A 1x1 kernel with unit strides and no pads: the image itself is the im2col matrix.
  bool pointwise = false;
};

ConvShape conv_shape(const Node& node) {
  const Shape& w = node.operand(1)->shape();
  ConvShape s;
  s.window = resolve_window(node, std::vector<int64_t>(w.begin() + 2, w.end()));
  s.group = node.int_attr("group");
  s.out_channels = w[0];
  s.patch = w[1] * s.window.kernel_size();
  const Window& win = s.window;
  s.pointwise = win.kernel_size() == 1 && win.in == win.out && win.pad_begin == Window::Dims{};
  return s;
}

template <typename T>
int64_t conv_workspace_for(const ConvShape& s) {
  using C = gemm_t<T>;
  const Window& w = s.window;
  const int64_t images = images_per_batch(w, sizeof(C));
  int64_t bytes = 0;
  if (!s.pointwise || needs_staging_v<T>) {
    bytes += WorkspaceCarver::bytes_for<C>(images * w.channels * w.kernel_size() * w.out_size());
  }
  if constexpr (needs_staging_v<T>) {
    bytes += WorkspaceCarver::bytes_for<float>(s.out_channels * s.patch);  // staged weights
    bytes += WorkspaceCarver::bytes_for<float>(images * s.out_channels * w.out_size());  // acc
  }
  return bytes;
}

int64_t conv_workspace(const Node& node) {
  const ConvShape s = conv_shape(node);
  switch (node.operand(0)->dtype()) {
    case DType::kF64:
      return conv_workspace_for<double>(s);
    case DType::kF16:
      return conv_workspace_for<Float16>(s);
    case DType::kBF16:
      return conv_workspace_for<BFloat16>(s);
    default:
      return conv_workspace_for<float>(s);
  }
}

template <typename T>
absl::Status conv(const KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx.state != nullptr) return run_onednn_conv(ctx);
  }
  using C = gemm_t<T>;
  const ConvShape s = conv_shape(ctx.node);
  const Window& w = s.window;
  const int64_t m = s.out_channels, m_group = m / s.group;
  const int64_t out_size = w.out_size(), in_image = w.channels * w.in_size();
  const bool use_image_as_col = s.pointwise && !needs_staging_v<T>;
  const int64_t images = images_per_batch(w, sizeof(C));

  WorkspaceCarver carver(ctx.workspace);
  const T* x = ctx.input(0).in<T>().data();
  std::span<T> y = ctx.output(0).out<T>();
  const C* weights = staged_operand(ctx.input(1).in<T>(), carver);
  const int64_t col_size = w.channels * w.kernel_size() * out_size;
  C* col = use_image_as_col ? nullptr : carver.take<C>(images * col_size).data();
  C* acc = nullptr;
  if constexpr (needs_staging_v<T>) acc = carver.take<float>(images * m * out_size).data();
  const T* bias = ctx.has_input(2) ? ctx.input(2).in<T>().data() : nullptr;

  // Image i of a batch, group g: weights [m_group, patch] times its col rows
  // [g * patch, (g + 1) * patch) gives its output channels.
  const GemmDims dims{.m = m_group, .n = out_size, .k = s.patch};
  for (int64_t first = 0; first < w.batch; first += images) {
    const int64_t count = std::min(images, w.batch - first);
    const C* cols = nullptr;
    if constexpr (!needs_staging_v<T>) {
      if (use_image_as_col) cols = x + first * in_image;
    }
    if (cols == nullptr) {
      im2col(x, w, col, first, count);
      cols = col;
    }
    const int64_t col_stride = use_image_as_col ? in_image : col_size;
    C* out = nullptr;
    if constexpr (needs_staging_v<T>) {
      out = acc;
    } else {
      out = y.data() + first * m * out_size;
    }
    GemmBatch products;
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t g = 0; g < s.group; ++g) {
        products.a_offsets.push_back(g * m_group * s.patch);
        products.b_offsets.push_back(i * col_stride + g * s.patch * out_size);
        products.c_offsets.push_back(i * m * out_size + g * m_group * out_size);
      }
    }
    gemm(dims, products, weights, cols, out);
    if (bias == nullptr && !needs_staging_v<T>) continue;
    T* y_first = y.data() + first * m * out_size;
    parallel_for(count * m, std::max<int64_t>(1, 16384 / out_size),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) {
                     const C b = bias ? load(bias[row % m]) : C(0);
                     for (int64_t i = row * out_size; i < (row + 1) * out_size; ++i) {
                       y_first[i] = store<T>(bias ? out[i] + b : out[i]);
                     }
                   }
                 });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KernelState>> init_onednn_conv(const KernelContext& ctx) {
  return make_onednn_conv(ctx, ConvPass::kForward);
}

void register_conv_kernels(KernelRegistry& r) {
  const KernelDef def = kernel_def("Conv", {.workspace_bytes = &conv_workspace});
  add_kernels<double, Float16, BFloat16>(r, def, []<typename T>() { return &conv<T>; });
  KernelDef f32 = def;
  f32.init = &init_onednn_conv;  // oneDNN's kernel where it has one (runtime/cpu/onednn_conv.h)
  add_kernels<float>(r, f32, []<typename T>() { return &conv<T>; });
}

static KernelRegistration kConvKernels(&register_conv_kernels);

}  // namespace
}  // namespace ampc::runtime::cpu
