// CUDA device discovery: the first piece of the CUDA backend, built when the toolkit is found.
#pragma once

#include <string>
#include <vector>

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

}  // namespace ampc::cuda
