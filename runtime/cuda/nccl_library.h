// NCCL, loaded when the first NCCL communicator is made rather than when ampc's runtime is
// (internal to runtime/cuda; nccl_communicator.h has what others need).
//
// Linking libnccl.so.2 would load it with the runtime: in a Python process that imports ampc
// before torch, torch's libtorch_cuda.so then finds a libnccl.so.2 already loaded (the system's)
// and binds to it instead of its own, failing on any function the older one lacks. Loaded on
// first use, NCCL is whichever libnccl.so.2 the process has (torch's, if it loaded one), else the
// one the dynamic linker finds, else the one ampc was built against.
#pragma once

#include <nccl.h>

#include "absl/status/statusor.h"

namespace ampc::runtime::cuda {

// The NCCL functions ampc calls, each named as NCCL names it.
struct NcclLibrary {
  decltype(&::ncclGetVersion) ncclGetVersion = nullptr;
  decltype(&::ncclGetUniqueId) ncclGetUniqueId = nullptr;
  decltype(&::ncclCommInitRank) ncclCommInitRank = nullptr;
  decltype(&::ncclCommDestroy) ncclCommDestroy = nullptr;
  decltype(&::ncclCommAbort) ncclCommAbort = nullptr;
  decltype(&::ncclCommGetAsyncError) ncclCommGetAsyncError = nullptr;
  decltype(&::ncclGetErrorString) ncclGetErrorString = nullptr;
  decltype(&::ncclGetLastError) ncclGetLastError = nullptr;
  decltype(&::ncclAllReduce) ncclAllReduce = nullptr;
  decltype(&::ncclBroadcast) ncclBroadcast = nullptr;
  decltype(&::ncclAllGather) ncclAllGather = nullptr;
  decltype(&::ncclReduceScatter) ncclReduceScatter = nullptr;
};

// NCCL, loaded on the first call (later calls return the same); an error naming the library or
// the function that could not be found.
absl::StatusOr<const NcclLibrary*> nccl_library();

}  // namespace ampc::runtime::cuda
