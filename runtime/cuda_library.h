// The CUDA backend is a library of its own, libampc_cuda (runtime/cuda/), which this runtime
// loads the first time something asks for the cuda device: a cuda backend, a plan or the kernel
// list for cuda, an NCCL communicator. A process that stays on the CPU never maps the CUDA
// libraries (cuBLASLt, cuDNN and NVRTC cost about 0.12 s and 260 MB of resident memory at each
// start), and ampc's CPU half runs where they are not installed.
//
// libampc_cuda registers its kernels in KernelRegistry::global() and hands over its entry points
// (provide_cuda_library) at static initialization, the same whether it was loaded here or linked
// into the program (the gpu tests link it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "runtime/backend.h"

namespace ampc::runtime {

namespace comm {
class Communicator;
}

// What ampc_runtime calls in libampc_cuda.
struct CudaLibrary {
  // cuda::make_cuda_backend (runtime/cuda/cuda_backend.h).
  absl::StatusOr<std::shared_ptr<Backend>> (*make_backend)(const BackendOptions& options);
  // cuda::connect_nccl (runtime/cuda/nccl_communicator.h) on GPU `device`.
  absl::StatusOr<std::unique_ptr<comm::Communicator>> (*connect_nccl)(
      std::unique_ptr<comm::Communicator> host_group, int device,
      std::chrono::milliseconds timeout);
  // ampc::cuda::device_memory_in_use and peak_matrix_tflops (runtime/cuda/device.h).
  absl::StatusOr<int64_t> (*device_memory_in_use)(int device);
  std::optional<double> (*peak_matrix_tflops)(int device, DType dtype);
};

// libampc_cuda's entry points, loading it (once, from the folder this runtime library was loaded
// from) on the first call. Fails, for good, with the file and the loader's reason (a CUDA library
// that is not installed) when it cannot be loaded, or when this ampc was built without CUDA.
absl::StatusOr<const CudaLibrary*> cuda_library();

// Called by libampc_cuda at its static initialization.
void provide_cuda_library(const CudaLibrary& library);

}  // namespace ampc::runtime
