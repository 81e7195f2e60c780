// CUDA device discovery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"

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

// The device's dense peak for matrix work in `dtype`, in TFLOP/s: SMs x boost clock x FLOPs per
// SM per clock of its architecture (tensor cores for f16 and bf16, the FP32 units for f32);
// nullopt for an architecture or dtype without a figure here (sm_80 and sm_90 have one).
std::optional<double> peak_matrix_tflops(int index, DType dtype);

// Bytes of device memory in use on the device now (total less free), for a measured footprint.
absl::StatusOr<int64_t> device_memory_in_use(int index);

}  // namespace ampc::cuda
