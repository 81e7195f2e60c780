#include <cuda_runtime.h>

#include "runtime/cuda/device.h"

namespace ampc::cuda {

std::vector<DeviceInfo> list_devices() {
  int count = 0;
  // No driver or no device reads as zero devices: the CPU backend still works there.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return {};
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
    devices.push_back(DeviceInfo{i, props.name, props.major, props.minor, props.totalGlobalMem});
  }
  return devices;
}

}  // namespace ampc::cuda
