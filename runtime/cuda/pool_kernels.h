// Launchers of the own kernels behind the window and normalization ops (pool_kernels.cu, nvcc,
// C++17): MaxPool and AveragePool walking each output's window, BatchNormalization's
// per-channel statistics and normalization, and the two copies the library-backed kernels
// need around cuBLASLt and cuDNN (Gemm's broadcast C, Conv's asymmetric padding). Plain data
// only: the host code (pool.cc, conv.cc, matmul.cc) resolves attributes and shapes at load.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/cuda/kernels.h"

namespace ampc::runtime::cuda {

// A sliding window widened to 3 spatial dims as runtime/cpu/window.h does (leading dims of size
// 1, kernel 1, stride 1, no pads). Window o along dim d reads input positions
// o * stride[d] - pad_begin[d] + j * dilation[d], j in [0, kernel[d]).
struct PoolWindow {
  int64_t planes = 0;  // N * C: one (image, channel) plane per index
  int64_t in[3] = {1, 1, 1};
  int64_t out[3] = {1, 1, 1};
  int64_t kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t dilation[3] = {1, 1, 1};
  int64_t pad_begin[3] = {0, 0, 0};
  int64_t pad_end[3] = {0, 0, 0};
};

// MaxPool of `type` (f32, f16, bf16, i8, u8) with runtime/cpu/pool.cc's rules: taps in padding
// never win, the first maximum in row-major scan order is taken, the first NaN wins, a window
// with no tap inside X gives the lowest value and index -1. `indices` (may be null) are flat
// offsets into X, row-major or, with `column_major` (storage_order=1), column-major per plane.
cudaError_t launch_max_pool(Elem type, const void* x, void* y, int64_t* indices,
                            const PoolWindow& window, bool column_major, cudaStream_t stream);

// AveragePool of `type` (f32, f16, bf16): the taps inside X summed in scan order in f32, divided
// once by their count, or with `count_include_pad` by the taps inside the padded input; NaN for a
// window that counts nothing.
cudaError_t launch_average_pool(Elem type, const void* x, void* y, const PoolWindow& window,
                                bool count_include_pad, cudaStream_t stream);

// MaxPoolGrad(dY, X) and AveragePoolGrad(dY) -> dX over `window` (X's shape in `in`, dY's in
// `out`): every dY element added into the tap MaxPool took (its window's maximum, by the rule
// above), or divided by AveragePool's count and added into each tap inside X. One thread per dX
// element adds its windows' shares in output order in f32 and rounds once: the CPU's bits.
cudaError_t launch_max_pool_grad(Elem type, const void* dy, const void* x, void* dx,
                                 const PoolWindow& window, cudaStream_t stream);
cudaError_t launch_average_pool_grad(Elem type, const void* dy, void* dx, const PoolWindow& window,
                                     bool count_include_pad, cudaStream_t stream);

// BatchNormalization over X [batch, channels, spatial] of `x_type`; scale and B of `param_type`,
// input_mean and input_var (and the running statistics written) of `stats_type`; all f32, f16 or
// bf16. Per channel, in f32 as runtime/cpu/normalization.cc:
//   y = (x - mean) / sqrt(var + epsilon) * scale + B
// with the given statistics in inference, or in training the batch mean and biased variance
// (written to running_mean / running_var, each may be null, as
// input * momentum + batch * (1 - momentum)). `table` is device scratch of
// batch_norm_table_floats(channels) floats. Y may be X's buffer.
struct BatchNormShape {
  int64_t batch = 0;
  int64_t channels = 0;
  int64_t spatial = 0;
  float epsilon = 0;
  float momentum = 0;
  bool training = false;
};

inline int64_t batch_norm_table_floats(int64_t channels) { return 4 * channels; }

cudaError_t launch_batch_norm(Elem x_type, Elem param_type, Elem stats_type, const void* x,
                              const void* scale, const void* bias, const void* input_mean,
                              const void* input_var, void* y, void* running_mean, void* running_var,
                              float* table, const BatchNormShape& shape, cudaStream_t stream);

// dst[r * cols + c] = src[r * row_stride + c * col_stride] for a [rows, cols] matrix of
// `element_bytes`-byte elements (a stride of 0 broadcasts): Gemm's C broadcast into Y.
cudaError_t launch_broadcast_matrix_copy(int element_bytes, const void* src, void* dst,
                                         int64_t rows, int64_t cols, int64_t row_stride,
                                         int64_t col_stride, cudaStream_t stream);

// Copies `planes` images of `in` [3 dims] into images of `out` dims, image element (i0, i1, i2)
// landing at (i0 + pad_begin[0], ...), zeros around: Conv's asymmetric pads made explicit.
cudaError_t launch_conv_input_pad(int element_bytes, const void* x, void* padded, int64_t planes,
                                  const int64_t (&in)[3], const int64_t (&out)[3],
                                  const int64_t (&pad_begin)[3], cudaStream_t stream);

// The inverse: each image of `out` dims at pad_begin copied to `in` dims (ConvGradData's dX
// from the gradient of the padded X).
cudaError_t launch_conv_input_crop(int element_bytes, const void* padded, void* x, int64_t planes,
                                   const int64_t (&in)[3], const int64_t (&out)[3],
                                   const int64_t (&pad_begin)[3], cudaStream_t stream);

}  // namespace ampc::runtime::cuda
