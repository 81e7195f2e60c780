// The CUDA build links and runs; on a machine without a GPU the test skips.
#include "gtest/gtest.h"
#include "runtime/cuda/device.h"

namespace ampc::cuda {
namespace {

TEST(CudaDevice, ListsDevicesWithPlausibleProperties) {
  const std::vector<DeviceInfo> devices = list_devices();
  if (devices.empty()) GTEST_SKIP() << "no CUDA device on this machine";
  for (const DeviceInfo& device : devices) {
    EXPECT_FALSE(device.name.empty());
    EXPECT_GE(device.compute_capability_major, 5);
    EXPECT_GT(device.total_memory_bytes, size_t{1} << 30);
  }
}

}  // namespace
}  // namespace ampc::cuda
