#include "runtime/cuda/cuda_util.h"

#include "compiler/strings.h"

namespace ampc::runtime::cuda {

absl::Status cuda_status(cudaError_t code, std::string_view call) {
  if (code == cudaSuccess) return absl::OkStatus();
  const std::string message =
      str_cat(call, ": ", cudaGetErrorString(code), " (", cudaGetErrorName(code), ")");
  if (code == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  if (code == cudaErrorNoDevice || code == cudaErrorInsufficientDriver ||
      code == cudaErrorInvalidDevice) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

absl::Status cublas_status(cublasStatus_t code, std::string_view call) {
  if (code == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      str_cat(call, ": ", cublasLtGetStatusString(code), " (", cublasLtGetStatusName(code), ")");
  if (code == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (code == CUBLAS_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(message);
  return absl::InternalError(message);
}

absl::Status cudnn_status(cudnnStatus_t code, std::string_view call) {
  if (code == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = str_cat(call, ": ", cudnnGetErrorString(code));
  if (code == CUDNN_STATUS_NOT_SUPPORTED) return absl::UnimplementedError(message);
  if (code == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status launch_status(std::string_view kernels) {
  return cuda_status(cudaGetLastError(), str_cat("launching ", kernels));
}

absl::Status launched(cudaError_t code, const KernelContext& ctx) {
  return cuda_status(code, str_cat("launching the ", ctx.node.op_type(), " kernel"));
}

absl::StatusOr<const Tensor*> constant_operand(const KernelContext& ctx, int index,
                                               std::string_view what) {
  const Tensor* value = ctx.node.operand(index)->initializer();
  if (value == nullptr || !value->has_data()) {
    return absl::UnimplementedError(str_cat("the cuda ", ctx.node.op_type(), " kernel needs its ",
                                            what, " as an initializer (a constant)"));
  }
  return value;
}

std::optional<Elem> elem_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return Elem::kF32;
    case DType::kF16:
      return Elem::kF16;
    case DType::kBF16:
      return Elem::kBF16;
    case DType::kF64:
      return Elem::kF64;
    case DType::kI64:
      return Elem::kI64;
    case DType::kI32:
      return Elem::kI32;
    case DType::kI8:
      return Elem::kI8;
    case DType::kU8:
      return Elem::kU8;
    case DType::kBool:
      return Elem::kBool;
    case DType::kF8E4M3FN:
      return Elem::kF8E4M3FN;
    case DType::kF8E5M2:
      return Elem::kF8E5M2;
  }
  return std::nullopt;
}

KernelDef cuda_kernel_def(std::string op, std::vector<DType> dtypes, KernelFn fn,
                          int in_place_operand) {
  KernelDef def;
  def.op = std::move(op);
  def.device = Device::kCuda;
  def.dtypes = std::move(dtypes);
  def.fn = fn;
  def.in_place_operand = in_place_operand;
  return def;
}

KernelDef cuda_ampc_kernel_def(std::string op, std::vector<DType> dtypes, KernelFn fn,
                               KernelInitFn init, int in_place_operand) {
  KernelDef def = cuda_kernel_def(std::move(op), std::move(dtypes), fn, in_place_operand);
  def.domain = std::string(kAmpcDomain);
  def.init = init;
  return def;
}

}  // namespace ampc::runtime::cuda
