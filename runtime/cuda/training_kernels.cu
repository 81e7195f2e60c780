// The training step's own kernels: the optimizer updates (ampc.SGD, ampc.Adam), the global
// gradient norm and clipping coefficient, and loss scaling (ampc.ScaleLoss,
// ampc.UnscaleGradients, ampc.LossScaleUpdate).
//
// The per-element math is runtime/optimizer_math.h's and runtime/numeric.h's (SgdUpdate,
// AdamUpdate, LossScaleRule), the code the CPU kernels run, so an update is bit-exact against
// the CPU but for the Python-float bias corrections (pow in f64: CUDA's is within 2 ulp of
// glibc's, which reaches a coefficient rounded to f32 rarely). Every kernel reads the learning
// rate, the step count, the loss scale and the skip flag from device memory: nothing goes to the
// host in a step, and a captured CUDA graph replays with new values. Updates may write over their
// operands (in place), so no pointer is __restrict__. Norms reduce in a fixed order
// (deterministic), not PyTorch's CPU order: within the contract's reduction tolerance of the
// CPU's.
#include "runtime/cast_math.h"
#include "runtime/cuda/kernels.h"
#include "runtime/optimizer_math.h"

namespace ampc::runtime::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

__device__ double read_scalar(const void* value, Elem type) {
  return type == Elem::kF64 ? *static_cast<const double*>(value)
                            : static_cast<double>(*static_cast<const float*>(value));
}

// step + 1 in step's own type (PyTorch's `step_t += 1` on its f32 step tensor).
__device__ double updates_including_this_one(const void* step, Elem type) {
  if (type == Elem::kF64) return *static_cast<const double*>(step) + 1.0;
  return static_cast<double>(*static_cast<const float*>(step) + 1.0f);
}

__device__ bool skipping(const UpdateScalars& scalars) {
  return (scalars.skip != nullptr && *scalars.skip != 0) ||
         (scalars.error != nullptr && scalars.error->code != kNoDeviceError);
}

template <typename T>
__device__ void copy_unless_same(const T* from, T* to, int64_t i) {
  if (from != to) to[i] = from[i];
}

template <typename T>
__global__ void sgd_kernel(int64_t n, const T* param, const T* grad, const T* buffer, T* param_out,
                           T* buffer_out, numeric::SgdHyper hyper, UpdateScalars scalars) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (skipping(scalars)) {
    for (int64_t i = first; i < n; i += stride) {
      copy_unless_same(param, param_out, i);
      if (buffer != nullptr) copy_unless_same(buffer, buffer_out, i);
    }
    return;
  }
  const numeric::SgdUpdate<T> update(hyper, read_scalar(scalars.lr, scalars.scalar_type),
                                     read_scalar(scalars.step, scalars.scalar_type) == 0);
  for (int64_t i = first; i < n; i += stride) {
    T p, b;
    update(param[i], grad[i], buffer == nullptr ? T(0) : buffer[i], p, b);
    if (buffer != nullptr) buffer_out[i] = b;
    param_out[i] = p;
  }
}

template <typename T>
__global__ void adam_kernel(int64_t n, const T* param, const T* grad, const T* exp_avg,
                            const T* exp_avg_sq, T* param_out, T* exp_avg_out, T* exp_avg_sq_out,
                            numeric::AdamHyper hyper, UpdateScalars scalars) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (skipping(scalars)) {
    for (int64_t i = first; i < n; i += stride) {
      copy_unless_same(param, param_out, i);
      copy_unless_same(exp_avg, exp_avg_out, i);
      copy_unless_same(exp_avg_sq, exp_avg_sq_out, i);
    }
    return;
  }
  const numeric::AdamUpdate<T> update(
      hyper, read_scalar(scalars.lr, scalars.scalar_type),
      updates_including_this_one(scalars.step, scalars.scalar_type));
  for (int64_t i = first; i < n; i += stride) {
    T p, m, v;
    update(param[i], grad[i], exp_avg[i], exp_avg_sq[i], p, m, v);
    exp_avg_out[i] = m;
    exp_avg_sq_out[i] = v;
    param_out[i] = p;
  }
}

// The sum of `partial` over the block's threads, in a fixed tree order; thread 0 has it.
template <typename T>
__device__ T block_sum(T partial) {
  __shared__ T sums[kThreads];
  sums[threadIdx.x] = partial;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) sums[threadIdx.x] = sums[threadIdx.x] + sums[threadIdx.x + width];
    __syncthreads();
  }
  return sums[0];
}

template <typename T>
__device__ T sum_of_squares(const T* x, int64_t n) {
  T partial = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const T square = x[i] * x[i];
    partial = partial + square;
  }
  return block_sum(partial);
}

// Part blockIdx.x of tensor blockIdx.y's sum of squares (tensor_norm_parts), into
// partials[(first + k) * kMaxNormParts + part].
template <typename T>
__global__ void tensor_norm_parts_kernel(TensorList tensors, T* partials, int first) {
  const int k = blockIdx.y;
  const int64_t n = tensors.size[k];
  const int64_t parts = tensor_norm_parts(n);
  const int64_t part = blockIdx.x;
  if (part >= parts) return;  // the whole block
  const int64_t per_part = (n + parts - 1) / parts;
  const int64_t begin = part * per_part;
  const int64_t size = begin + per_part < n ? per_part : (begin < n ? n - begin : 0);
  const T sum = sum_of_squares(static_cast<const T*>(tensors.data[k]) + begin, size);
  if (threadIdx.x == 0) partials[(first + k) * kMaxNormParts + part] = sum;
}

static_assert(kThreads >= kMaxNormParts);

// norms[first + k]: the square root of tensor k's part sums, added as a tree in part order (one
// part a thread).
template <typename T>
__global__ void tensor_norms_kernel(TensorList tensors, const T* partials, T* norms, int first) {
  const int k = blockIdx.x;
  const int64_t parts = tensor_norm_parts(tensors.size[k]);
  const T partial =
      threadIdx.x < parts ? partials[(first + k) * kMaxNormParts + threadIdx.x] : T(0);
  const T sum = block_sum(partial);
  if (threadIdx.x == 0) norms[first + k] = numeric::sqrt(sum);
}

template <typename T>
__global__ void norm_of_norms_kernel(const T* norms, int count, T* out) {
  const T sum = sum_of_squares(norms, count);
  if (threadIdx.x == 0) *out = numeric::sqrt(sum);
}

template <typename C, typename G>
__device__ C widen_to(G g) {
  return static_cast<C>(cast_math::widen(g));
}

template <typename C>
__global__ void unscale_kernel(const C* inverse, TensorList tensors, uint8_t* found) {
  const int k = blockIdx.y;
  const int64_t n = tensors.size[k];
  const C scale = *inverse;
  C* out = static_cast<C*>(tensors.out[k]);
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C g;
    switch (tensors.type[k]) {
      case Elem::kF16:
        g = widen_to<C>(static_cast<const Float16*>(tensors.data[k])[i]);
        break;
      case Elem::kBF16:
        g = widen_to<C>(static_cast<const BFloat16*>(tensors.data[k])[i]);
        break;
      case Elem::kF64:
        g = static_cast<C>(static_cast<const double*>(tensors.data[k])[i]);
        break;
      default:
        g = static_cast<C>(static_cast<const float*>(tensors.data[k])[i]);
    }
    const C u = g * scale;
    out[i] = u;
    bad = bad || !numeric::is_finite(u);
  }
  if (bad) *found = 1;  // every writer writes the same byte
}

template <typename T>
__global__ void scale_loss_kernel(const T* loss, const T* scale, T* out) {
  *out = *loss * *scale;
}

template <typename T>
__global__ void clip_coefficient_kernel(const T* norm, double max_norm, T* out) {
  const T coefficient = (T(1) / (*norm + T(1e-6))) * T(max_norm);
  *out = numeric::is_nan(coefficient) ? coefficient : (coefficient < T(1) ? coefficient : T(1));
}

__global__ void loss_scale_update_kernel(numeric::LossScaleRule rule, const float* scale,
                                         const int64_t* tracker, const uint8_t* found_inf,
                                         const int64_t* left, float* scale_out,
                                         int64_t* tracker_out, int64_t* left_out,
                                         const DeviceError* error) {
  float s = *scale;
  int64_t t = *tracker;
  int64_t l = left != nullptr ? *left : 1;
  if (error == nullptr || error->code == kNoDeviceError) rule.update(*found_inf != 0, s, t, l);
  *scale_out = s;
  *tracker_out = t;
  if (left_out != nullptr) *left_out = l;
}

}  // namespace

cudaError_t launch_sgd(Elem type, int64_t n, const void* param, const void* grad,
                       const void* buffer, void* param_out, void* buffer_out,
                       const numeric::SgdHyper& hyper, const UpdateScalars& scalars,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (type == Elem::kF64) {
    sgd_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(
        n, static_cast<const double*>(param), static_cast<const double*>(grad),
        static_cast<const double*>(buffer), static_cast<double*>(param_out),
        static_cast<double*>(buffer_out), hyper, scalars);
  } else {
    sgd_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(
        n, static_cast<const float*>(param), static_cast<const float*>(grad),
        static_cast<const float*>(buffer), static_cast<float*>(param_out),
        static_cast<float*>(buffer_out), hyper, scalars);
  }
  return cudaGetLastError();
}

cudaError_t launch_adam(Elem type, int64_t n, const void* param, const void* grad,
                        const void* exp_avg, const void* exp_avg_sq, void* param_out,
                        void* exp_avg_out, void* exp_avg_sq_out, const numeric::AdamHyper& hyper,
                        const UpdateScalars& scalars, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (type == Elem::kF64) {
    adam_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(
        n, static_cast<const double*>(param), static_cast<const double*>(grad),
        static_cast<const double*>(exp_avg), static_cast<const double*>(exp_avg_sq),
        static_cast<double*>(param_out), static_cast<double*>(exp_avg_out),
        static_cast<double*>(exp_avg_sq_out), hyper, scalars);
  } else {
    adam_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(
        n, static_cast<const float*>(param), static_cast<const float*>(grad),
        static_cast<const float*>(exp_avg), static_cast<const float*>(exp_avg_sq),
        static_cast<float*>(param_out), static_cast<float*>(exp_avg_out),
        static_cast<float*>(exp_avg_sq_out), hyper, scalars);
  }
  return cudaGetLastError();
}

cudaError_t launch_tensor_norms(Elem type, const TensorList& tensors, void* norms, void* partials,
                                int first, cudaStream_t stream) {
  if (tensors.count == 0) return cudaSuccess;
  int64_t parts = 1;
  for (int k = 0; k < tensors.count; ++k) {
    parts = tensor_norm_parts(tensors.size[k]) > parts ? tensor_norm_parts(tensors.size[k]) : parts;
  }
  const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(tensors.count));
  if (type == Elem::kF64) {
    tensor_norm_parts_kernel<double>
        <<<grid, kThreads, 0, stream>>>(tensors, static_cast<double*>(partials), first);
    tensor_norms_kernel<double><<<tensors.count, kThreads, 0, stream>>>(
        tensors, static_cast<const double*>(partials), static_cast<double*>(norms), first);
  } else {
    tensor_norm_parts_kernel<float>
        <<<grid, kThreads, 0, stream>>>(tensors, static_cast<float*>(partials), first);
    tensor_norms_kernel<float><<<tensors.count, kThreads, 0, stream>>>(
        tensors, static_cast<const float*>(partials), static_cast<float*>(norms), first);
  }
  return cudaGetLastError();
}

cudaError_t launch_norm_of_norms(Elem type, const void* norms, int count, void* out,
                                 cudaStream_t stream) {
  if (type == Elem::kF64) {
    norm_of_norms_kernel<double><<<1, kThreads, 0, stream>>>(static_cast<const double*>(norms),
                                                             count, static_cast<double*>(out));
  } else {
    norm_of_norms_kernel<float><<<1, kThreads, 0, stream>>>(static_cast<const float*>(norms), count,
                                                            static_cast<float*>(out));
  }
  return cudaGetLastError();
}

cudaError_t launch_unscale(Elem compute, const void* inverse, const TensorList& tensors,
                           uint8_t* found, cudaStream_t stream) {
  if (tensors.count == 0) return cudaSuccess;
  int64_t largest = 1;
  for (int k = 0; k < tensors.count; ++k)
    largest = tensors.size[k] > largest ? tensors.size[k] : largest;
  const dim3 grid(static_cast<unsigned>(blocks_for(largest)), static_cast<unsigned>(tensors.count));
  if (compute == Elem::kF64) {
    unscale_kernel<double>
        <<<grid, kThreads, 0, stream>>>(static_cast<const double*>(inverse), tensors, found);
  } else {
    unscale_kernel<float>
        <<<grid, kThreads, 0, stream>>>(static_cast<const float*>(inverse), tensors, found);
  }
  return cudaGetLastError();
}

cudaError_t launch_scale_loss(Elem type, const void* loss, const void* scale, void* out,
                              cudaStream_t stream) {
  if (type == Elem::kF64) {
    scale_loss_kernel<double><<<1, 1, 0, stream>>>(static_cast<const double*>(loss),
                                                   static_cast<const double*>(scale),
                                                   static_cast<double*>(out));
  } else {
    scale_loss_kernel<float><<<1, 1, 0, stream>>>(static_cast<const float*>(loss),
                                                  static_cast<const float*>(scale),
                                                  static_cast<float*>(out));
  }
  return cudaGetLastError();
}

cudaError_t launch_clip_coefficient(Elem type, const void* norm, double max_norm, void* out,
                                    cudaStream_t stream) {
  if (type == Elem::kF64) {
    clip_coefficient_kernel<double><<<1, 1, 0, stream>>>(static_cast<const double*>(norm), max_norm,
                                                         static_cast<double*>(out));
  } else {
    clip_coefficient_kernel<float>
        <<<1, 1, 0, stream>>>(static_cast<const float*>(norm), max_norm, static_cast<float*>(out));
  }
  return cudaGetLastError();
}

cudaError_t launch_loss_scale_update(const numeric::LossScaleRule& rule, const float* scale,
                                     const int64_t* tracker, const uint8_t* found_inf,
                                     const int64_t* left, float* scale_out, int64_t* tracker_out,
                                     int64_t* left_out, const DeviceError* error,
                                     cudaStream_t stream) {
  loss_scale_update_kernel<<<1, 1, 0, stream>>>(rule, scale, tracker, found_inf, left, scale_out,
                                                tracker_out, left_out, error);
  return cudaGetLastError();
}

}  // namespace ampc::runtime::cuda
