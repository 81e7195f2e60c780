// The backend seam: what a device gives the runtime.
//
// A Backend owns one device's memory (one allocation per arena class), the copies between host
// and device memory, and the ExecutionContext every kernel receives. One executor
// (runtime/executor.h) runs a plan on any backend; sessions never touch device memory except
// through the backend's copies.
//
// Ordering: every operation a backend queues (copies, fills, kernels launched on its stream)
// runs in the order it was queued. copy_to_device returns as soon as the source may be reused
// (the CUDA backend stages it through pinned memory); copy_to_host returns when the bytes are on
// the host. synchronize() waits for everything queued and reports what kernels recorded in the
// device error word since the last call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ampc/options.h"
#include "ampc/status.h"
#include "compiler/strings.h"
#include "runtime/device_error.h"

namespace ampc::runtime {

using ampc::Device;  // ampc/options.h
using ampc::device_name;
using ampc::parse_device;

class Backend;

// What a recorded device error means, in words (without the node, which the caller names).
std::string describe_device_error(const DeviceError& error);

// One allocation on a backend. Move-only; returns its memory to the backend when destroyed.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Backend* backend, std::byte* data, int64_t bytes)
      : backend_(backend), data_(data), bytes_(bytes) {}
  DeviceMemory(DeviceMemory&& other) noexcept { *this = std::move(other); }
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  ~DeviceMemory() { reset(); }

  std::byte* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  void reset();

 private:
  Backend* backend_ = nullptr;
  std::byte* data_ = nullptr;
  int64_t bytes_ = 0;
};

// Where a kernel runs. The backend owns it; every KernelContext points at it. CUDA handles are
// opaque here so that this header needs no CUDA include.
namespace comm {
class Communicator;
}  // namespace comm

struct ExecutionContext {
  Device device = Device::kCpu;
  void* stream = nullptr;    // cudaStream_t
  void* cublaslt = nullptr;  // cublasLtHandle_t
  void* cudnn = nullptr;     // cudnnHandle_t
  // Library scratch (cuBLASLt, cuDNN) in device memory, shared by every node of every session
  // on this backend: kernels on one stream never run at the same time.
  std::byte* library_workspace = nullptr;
  int64_t library_workspace_bytes = 0;
  // Device memory where kernels record the first data-dependent failure (device_error.h).
  DeviceError* error = nullptr;
  // Device memory holding the random stream of the current run (what Dropout draws from), so
  // that a replayed CUDA graph draws new masks when only this word changes.
  const uint64_t* random_stream = nullptr;
  // f32 GEMMs and convolutions may use TF32 tensor cores (`--allow-tf32`).
  bool allow_tf32 = false;
  // The data-parallel group the collective ops (ampc.AllReduce) reduce over; null: a group
  // of one. Owned by whoever set it (SessionOptions::communicator), which outlives the runs.
  comm::Communicator* communicator = nullptr;
};

struct BackendOptions {
  int device_index = 0;  // which GPU
  bool allow_tf32 = false;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // For messages: "cpu", "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB)".
  virtual std::string describe() const = 0;

  // One zero-filled allocation of at least `bytes` bytes, aligned for any element type and
  // vector access. `what` names it in the error when the device cannot supply it ("activation
  // arena"); the message gives the bytes asked for and, where the device knows, the bytes free.
  virtual absl::StatusOr<DeviceMemory> allocate(int64_t bytes, std::string_view what) = 0;

  // Copies `bytes` host bytes to the device. Counted (counters()).
  absl::Status copy_to_device(std::byte* device, const void* host, int64_t bytes) {
    ++counters_.copies_to_device;
    counters_.bytes_to_device += bytes;
    return do_copy_to_device(device, host, bytes);
  }
  // Whether kernels on this device read host memory as it is (the CPU): a session then binds an
  // input the caller lends (ampc::TensorView) in place of copying it.
  virtual bool reads_host_memory() const { return false; }
  // Waits for the work queued before it, then copies. Counted (counters()).
  absl::Status copy_to_host(void* host, const std::byte* device, int64_t bytes) {
    ++counters_.copies_to_host;
    counters_.bytes_to_host += bytes;
    return do_copy_to_host(host, device, bytes);
  }
  // Copies between device regions, which must not overlap unless they are the same region.
  virtual absl::Status copy_on_device(std::byte* to, const std::byte* from, int64_t bytes) = 0;
  virtual absl::Status fill(std::byte* device, std::byte value, int64_t bytes) = 0;
  // Makes this backend's device the calling thread's current one (CUDA), before kernels launch.
  virtual absl::Status make_current() { return absl::OkStatus(); }
  // Makes `stream` the random stream the next kernels read (ExecutionContext::random_stream).
  virtual absl::Status set_random_stream(uint64_t stream) = 0;

  // Waits for everything queued. Returns the first data error a kernel recorded since the last
  // call (DeviceError::code == kNone when there was none) and clears it; a Status for a device
  // failure (a faulting kernel, a lost device). Counted (counters()).
  absl::StatusOr<DeviceError> synchronize() {
    ++counters_.synchronizations;
    return do_synchronize();
  }

  // Graph capture (CUDA graphs): between begin_capture() and end_capture() the work queued on the
  // backend is recorded instead of run; end_capture() returns the recorded work, ready to replay
  // with launch_graph() (which queues all of it at once; the replays read device memory as it is
  // then). A backend without graphs returns Unimplemented; a capture that met something it cannot
  // record returns the reason from end_capture(), and nothing was run.
  virtual absl::Status begin_capture() {
    return absl::UnimplementedError(
        str_cat("the ", device_name(device()), " device has no graphs"));
  }
  virtual absl::StatusOr<void*> end_capture() {
    return absl::UnimplementedError(
        str_cat("the ", device_name(device()), " device has no graphs"));
  }
  virtual absl::Status launch_graph(void* /*graph*/) {
    return absl::UnimplementedError(
        str_cat("the ", device_name(device()), " device has no graphs"));
  }
  virtual void destroy_graph(void* /*graph*/) {}

  // What made the host wait for the device since the backend was made: each synchronize() and
  // each copy_to_host() (which waits for the work queued before it). A training loop that reads
  // its figures only at log points makes none between them (tests/runtime/step_log_test.cc).
  // And what was copied to the device: nothing for a batch the CPU reads in place
  // (tests/runtime/lent_input_test.cc).
  struct Counters {
    int64_t synchronizations = 0;
    int64_t copies_to_host = 0;
    int64_t bytes_to_host = 0;
    int64_t copies_to_device = 0;
    int64_t bytes_to_device = 0;
  };
  const Counters& counters() const { return counters_; }

  ExecutionContext& context() { return context_; }

 protected:
  friend class DeviceMemory;
  // Frees what allocate returned: its data and its bytes, as the DeviceMemory holds them.
  virtual void deallocate(std::byte* data, int64_t bytes) = 0;
  virtual absl::Status do_copy_to_device(std::byte* device, const void* host, int64_t bytes) = 0;
  virtual absl::Status do_copy_to_host(void* host, const std::byte* device, int64_t bytes) = 0;
  virtual absl::StatusOr<DeviceError> do_synchronize() = 0;

  ExecutionContext context_;

 private:
  Counters counters_;
};

// The backend for `device`. Fails with the reason when the device cannot be used: no GPU, no
// driver, or a build without CUDA.
// Each call makes a new backend; sessions that share device memory share one backend.
absl::StatusOr<std::shared_ptr<Backend>> create_backend(Device device,
                                                        const BackendOptions& options = {});

// Makes `device`'s kernels resolvable in KernelRegistry::global(): the CPU's always are; the
// CUDA backend's are once its library is loaded (runtime/cuda_library.h), which this does, or
// fails saying why it cannot be (no GPU is needed to resolve and plan).
absl::Status load_kernels(Device device);

}  // namespace ampc::runtime
