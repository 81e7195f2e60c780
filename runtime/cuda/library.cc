// libampc_cuda's entry points, handed to ampc_runtime when this library is loaded
// (runtime/cuda_library.h).
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/cuda_library.h"

namespace ampc::runtime::cuda {
namespace {

absl::StatusOr<std::unique_ptr<comm::Communicator>> connect(
    std::unique_ptr<comm::Communicator> host_group, int device, std::chrono::milliseconds timeout) {
  return connect_nccl(std::move(host_group), NcclOptions{.device = device, .timeout = timeout});
}

constexpr CudaLibrary kLibrary{
    .make_backend = &make_cuda_backend,
    .connect_nccl = &connect,
    .device_memory_in_use = &ampc::cuda::device_memory_in_use,
    .peak_matrix_tflops = &ampc::cuda::peak_matrix_tflops,
};

struct Provide {
  Provide() { provide_cuda_library(kLibrary); }
} const kProvide;

}  // namespace
}  // namespace ampc::runtime::cuda
