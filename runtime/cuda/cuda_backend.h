// The CUDA backend: arenas in device memory (cudaMalloc, one allocation per arena class), one
// non-blocking stream on which every copy and kernel is queued, cuBLASLt and cuDNN handles bound
// to it, a library workspace, the device error word and the random-stream word in device memory.
// Host-to-device copies are staged through pinned memory and return once the source may be
// reused; device-to-host copies return when the bytes have arrived.
#pragma once

#include <memory>

#include "runtime/backend.h"

namespace ampc::runtime::cuda {

// Fails with the CUDA reason when there is no usable device (no driver, no GPU, an index out of
// range) or a library cannot start.
absl::StatusOr<std::shared_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

}  // namespace ampc::runtime::cuda
