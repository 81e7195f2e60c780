#include "runtime/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "compiler/strings.h"

namespace ampc::runtime::cpu {
namespace {

// Every arena starts at a multiple of this (the planner's offsets are multiples of it too).
constexpr int64_t kAlignment = 64;

// From this size on, memory is mapped from the kernel instead of taken from the allocator: it
// comes zeroed, is given back whole when freed, and a size the machine cannot hold is refused
// at once (an allocator may reserve it without committing it, as jemalloc in the `ampc`
// executable does, and the first write would then be killed for memory instead of reported).
constexpr int64_t kMapBytes = int64_t{1} << 20;

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    context_.device = Device::kCpu;
    context_.error = &error_;
    context_.random_stream = &random_stream_;
  }

  Device device() const override { return Device::kCpu; }
  std::string describe() const override { return "cpu"; }
  bool reads_host_memory() const override { return true; }

  absl::StatusOr<DeviceMemory> allocate(int64_t bytes, std::string_view what) override {
    if (bytes < 0 || bytes > std::numeric_limits<int64_t>::max() - kAlignment) {
      return absl::ResourceExhaustedError(
          str_cat("cannot allocate ", bytes, " bytes for the ", what, ": not a valid size"));
    }
    // aligned_alloc wants a non-zero multiple of the alignment.
    const int64_t rounded =
        std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    const auto out_of_memory = [&] {
      return absl::ResourceExhaustedError(
          str_cat("out of host memory: cannot allocate ", rounded, " bytes for the ", what));
    };
    if (rounded >= kMapBytes) {
      void* memory = mmap(nullptr, static_cast<size_t>(rounded), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (memory == MAP_FAILED) return out_of_memory();
      return DeviceMemory(this, static_cast<std::byte*>(memory), rounded);
    }
    void* memory = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
    if (memory == nullptr) return out_of_memory();
    std::memset(memory, 0, static_cast<size_t>(rounded));
    return DeviceMemory(this, static_cast<std::byte*>(memory), rounded);
  }

  absl::Status do_copy_to_device(std::byte* device, const void* host, int64_t bytes) override {
    if (bytes > 0) std::memcpy(device, host, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status copy_on_device(std::byte* to, const std::byte* from, int64_t bytes) override {
    if (bytes > 0 && to != from) std::memmove(to, from, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status fill(std::byte* device, std::byte value, int64_t bytes) override {
    if (bytes > 0) std::memset(device, static_cast<int>(value), static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status set_random_stream(uint64_t stream) override {
    random_stream_ = stream;
    return absl::OkStatus();
  }

 protected:
  void deallocate(std::byte* data, int64_t bytes) override {
    if (bytes >= kMapBytes) {
      munmap(data, static_cast<size_t>(bytes));
    } else {
      std::free(data);
    }
  }
  absl::Status do_copy_to_host(void* host, const std::byte* device, int64_t bytes) override {
    if (bytes > 0) std::memcpy(host, device, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceError> do_synchronize() override {
    const DeviceError recorded = error_;
    error_ = DeviceError{};
    return recorded;
  }

 private:
  DeviceError error_;
  uint64_t random_stream_ = 0;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend() { return std::make_shared<CpuBackend>(); }

}  // namespace ampc::runtime::cpu
