// Host-side helpers of the CUDA backend: CUDA, cuBLASLt and cuDNN return codes as a Status that
// names the call, and the element types the kernels are written over.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string_view>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "runtime/cuda/kernels.h"
#include "runtime/kernel.h"

namespace ampc::runtime::cuda {

absl::Status cuda_status(cudaError_t code, std::string_view call);
absl::Status cublas_status(cublasStatus_t code, std::string_view call);
absl::Status cudnn_status(cudnnStatus_t code, std::string_view call);

// Returns from the enclosing function with a Status naming the call when it fails.
#define AMPC_CUDA_RETURN_IF_ERROR(call) \
  AMPC_RETURN_IF_ERROR(::ampc::runtime::cuda::cuda_status((call), #call))
#define AMPC_CUBLAS_RETURN_IF_ERROR(call) \
  AMPC_RETURN_IF_ERROR(::ampc::runtime::cuda::cublas_status((call), #call))
#define AMPC_CUDNN_RETURN_IF_ERROR(call) \
  AMPC_RETURN_IF_ERROR(::ampc::runtime::cuda::cudnn_status((call), #call))

// The launch error of the kernels just queued (cudaGetLastError), naming them.
absl::Status launch_status(std::string_view kernels);

// The kernels' element type for `dtype`.
std::optional<Elem> elem_of(DType dtype);

inline cudaStream_t stream_of(const KernelContext& ctx) {
  return static_cast<cudaStream_t>(ctx.exec->stream);
}

// A CUDA KernelDef of the standard-domain op `op` for `dtypes`, running `fn`.
KernelDef cuda_kernel_def(std::string op, std::vector<DType> dtypes, KernelFn fn,
                          int in_place_operand = -1);

// The same for an op of the ampc domain (the training step's), with its load-time init.
KernelDef cuda_ampc_kernel_def(std::string op, std::vector<DType> dtypes, KernelFn fn,
                               KernelInitFn init = nullptr, int in_place_operand = -1);

// The element types the CUDA kernels cover for float ops, and for ops on numbers.
inline const std::vector<DType> kCudaFloatTypes = {DType::kF32, DType::kF16, DType::kBF16};
inline const std::vector<DType> kCudaNumericTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                     DType::kI64, DType::kI32};

// The kernels' element type of a tensor (every DType has one).
inline Elem elem(const TensorArg& arg) { return *elem_of(arg.dtype()); }

// The launch status of `ctx`'s kernels, naming the op.
absl::Status launched(cudaError_t code, const KernelContext& ctx);

// The value of operand `index`, which the CUDA kernel reads once, at load: it must be an
// initializer (a constant); Unimplemented naming `what` otherwise.
absl::StatusOr<const Tensor*> constant_operand(const KernelContext& ctx, int index,
                                               std::string_view what);

}  // namespace ampc::runtime::cuda
