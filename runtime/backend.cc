#include "runtime/backend.h"

#include "compiler/strings.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda_library.h"

namespace ampc {

std::string_view device_name(Device device) {
  switch (device) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

absl::StatusOr<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return absl::InvalidArgumentError(str_cat("unknown device '", name, "': expected cpu or cuda"));
}

namespace runtime {

std::string describe_device_error(const DeviceError& error) {
  switch (error.code) {
    case kIndexOutOfRange:
      return str_cat("index ", error.value, " (element ", error.element,
                     " of the indices) is out of range [", -error.bound, ", ", error.bound, ")");
    case kLabelOutOfRange:
      return str_cat("label ", error.value, " (element ", error.element,
                     " of the labels) is out of range [0, ", error.bound,
                     ") and is not the ignore_index");
    case kDivisionByZero:
      return str_cat("integer division by zero (operand 1 'B' has a zero) at output element ",
                     error.element);
    case kZeroToNegativePower:
      return str_cat("integer Pow of 0 to a negative power at output element ", error.element);
    case kInvalidDropoutRatio:
      return "the Dropout ratio is not in [0, 1)";
    case kInvalidProbability:
      return str_cat("the probability at element ", error.element,
                     " of input 0 'input' is not in [0, 1]");
    default:
      return str_cat("unknown device error code ", error.code);
  }
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    backend_ = other.backend_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.backend_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceMemory::reset() {
  if (backend_ != nullptr && data_ != nullptr) backend_->deallocate(data_, bytes_);
  backend_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<std::shared_ptr<Backend>> create_backend(Device device,
                                                        const BackendOptions& options) {
  switch (device) {
    case Device::kCpu:
      return cpu::make_cpu_backend();
    case Device::kCuda: {
      const absl::StatusOr<const CudaLibrary*> cuda = cuda_library();
      if (!cuda.ok()) {
        return absl::Status(cuda.status().code(),
                            str_cat("the cuda device is not available: ", cuda.status().message()));
      }
      return (*cuda)->make_backend(options);
    }
  }
  return absl::InvalidArgumentError("unknown device");
}

absl::Status load_kernels(Device device) {
  if (device == Device::kCuda) return cuda_library().status();
  return absl::OkStatus();
}

}  // namespace runtime
}  // namespace ampc
