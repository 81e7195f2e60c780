// ampc loads NCCL only when it is asked for (runtime/cuda/nccl_library.h), not with its runtime:
// a Python process that imports ampc before torch must let torch load its own libnccl.so.2.
// Needs the CUDA build, not a GPU: ncclGetVersion runs without one.
#include "gtest/gtest.h"

#ifdef AMPC_HAVE_CUDA
#include "runtime/cuda/nccl_communicator.h"
#endif

namespace ampc::runtime {
namespace {

TEST(NcclLibrary, IsLoadedOnFirstUseNotWithTheRuntime) {
#ifndef AMPC_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  // This executable links ampc's runtime, which has run its static initializers (the kernel
  // registries) by now: no NCCL yet.
  EXPECT_FALSE(cuda::nccl_loaded_in_process());
  absl::StatusOr<int> version = cuda::nccl_version();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_GE(*version, 21900) << "NCCL 2.19 or later";  // 2.19.0's code is 21900
  EXPECT_TRUE(cuda::nccl_loaded_in_process());
#endif
}

}  // namespace
}  // namespace ampc::runtime
