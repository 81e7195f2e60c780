// CUDA device discovery.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "compiler/status.h"

namespace ampc::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  size_t total_memory_bytes = 0;
};

// The visible CUDA devices; empty (not an error) on a machine without a GPU or driver.
std::vector<DeviceInfo> list_devices();

// Why no CUDA device can be used, as the CUDA runtime says it ("no CUDA-capable device is
// detected", "CUDA driver version is insufficient..."); OK when one can.
absl::Status cuda_availability();

}  // namespace ampc::cuda
