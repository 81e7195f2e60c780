#include "runtime/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/device.h"

namespace ampc {
namespace cuda {

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

absl::Status cuda_availability() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(str_cat("no usable CUDA device: ", cudaGetErrorString(code), " (",
                                          cudaGetErrorName(code), ")"));
  }
  if (count == 0) return absl::UnavailableError("no usable CUDA device: none is visible");
  return absl::OkStatus();
}

std::optional<double> peak_matrix_tflops(int index, DType dtype) {
  int major = 0;
  int minor = 0;
  int sms = 0;
  int clock_khz = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  // Dense FLOPs per SM per clock (NVIDIA's whitepapers: H100 SXM 989 TFLOP/s f16 at 1.83 GHz on
  // 132 SMs; A100 312 at 1.41 GHz on 108).
  int per_clock = 0;
  const bool low = dtype == DType::kF16 || dtype == DType::kBF16;
  if (major == 9 && minor == 0) per_clock = low ? 4096 : dtype == DType::kF32 ? 256 : 0;
  if (major == 8 && minor == 0) per_clock = low ? 2048 : dtype == DType::kF32 ? 128 : 0;
  if (per_clock == 0) return std::nullopt;
  return static_cast<double>(sms) * clock_khz * 1e3 * per_clock / 1e12;
}

absl::StatusOr<int64_t> device_memory_in_use(int index) {
  int current = 0;
  AMPC_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  AMPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  size_t free = 0;
  size_t total = 0;
  const cudaError_t code = cudaMemGetInfo(&free, &total);
  cudaSetDevice(current);
  AMPC_CUDA_RETURN_IF_ERROR(code);
  return static_cast<int64_t>(total - free);
}

}  // namespace cuda

namespace runtime::cuda {
namespace {

// cuBLASLt and cuDNN scratch shared by every node: cuBLAS recommends 32 MiB on Hopper.
constexpr int64_t kLibraryWorkspaceBytes = int64_t{32} << 20;
// Each half of the pinned staging buffer.
constexpr int64_t kStagingBytes = int64_t{8} << 20;

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::shared_ptr<Backend>> create(const BackendOptions& options) {
    AMPC_RETURN_IF_ERROR(ampc::cuda::cuda_availability());
    int count = 0;
    AMPC_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
    if (options.device_index < 0 || options.device_index >= count) {
      return absl::InvalidArgumentError(
          str_cat("CUDA device ", options.device_index, " does not exist: ", count, " visible"));
    }
    std::shared_ptr<CudaBackend> backend(new CudaBackend(options));
    AMPC_RETURN_IF_ERROR(backend->start());
    return backend;
  }

  ~CudaBackend() override {
    // Nothing here can report an error any more; a failing call leaves the rest to the driver.
    cudaSetDevice(index_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
    if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
    for (cudaEvent_t event : staging_done_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    if (staging_ != nullptr) cudaFreeHost(staging_);
    if (words_ != nullptr) cudaFree(words_);
    if (library_workspace_ != nullptr) cudaFree(library_workspace_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::kCuda; }

  std::string describe() const override {
    return fmt::format("cuda:{} ({}, sm_{}{}, {:.1f} GiB)", index_, properties_.name,
                       properties_.major, properties_.minor,
                       properties_.totalGlobalMem / 1073741824.0);
  }

  absl::StatusOr<DeviceMemory> allocate(int64_t bytes, std::string_view what) override {
    AMPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(index_));
    const int64_t rounded = std::max<int64_t>(256, (bytes + 255) / 256 * 256);
    void* memory = nullptr;
    const cudaError_t code = cudaMalloc(&memory, static_cast<size_t>(rounded));
    if (code != cudaSuccess) {
      cudaGetLastError();
      size_t free = 0;
      size_t total = 0;
      cudaMemGetInfo(&free, &total);
      return absl::ResourceExhaustedError(
          str_cat("out of device memory on ", describe(), ": the ", what, " needs ", rounded,
                  " bytes (", mib(rounded), "), ", free, " bytes (",
                  mib(static_cast<int64_t>(free)), ") are free (", cudaGetErrorString(code), ")"));
    }
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(memory, 0, static_cast<size_t>(rounded), stream_));
    return DeviceMemory(this, static_cast<std::byte*>(memory), rounded);
  }

  // Chunks go host -> pinned half -> device, alternating halves; a half is refilled only after
  // the copy that read it has finished, so the source is free when this returns.
  absl::Status do_copy_to_device(std::byte* device, const void* host, int64_t bytes) override {
    const auto* from = static_cast<const std::byte*>(host);
    for (int64_t done = 0; done < bytes;) {
      const int64_t chunk = std::min(kStagingBytes, bytes - done);
      AMPC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_done_[next_half_]));
      std::byte* half = staging_ + next_half_ * kStagingBytes;
      std::memcpy(half, from + done, static_cast<size_t>(chunk));
      AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device + done, half, static_cast<size_t>(chunk),
                                                cudaMemcpyHostToDevice, stream_));
      AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_done_[next_half_], stream_));
      next_half_ ^= 1;
      done += chunk;
    }
    return absl::OkStatus();
  }

  absl::Status copy_on_device(std::byte* to, const std::byte* from, int64_t bytes) override {
    if (bytes == 0 || to == from) return absl::OkStatus();
    AMPC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(to, from, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_));
    return absl::OkStatus();
  }

  absl::Status fill(std::byte* device, std::byte value, int64_t bytes) override {
    AMPC_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(device, static_cast<int>(value), static_cast<size_t>(bytes), stream_));
    return absl::OkStatus();
  }

  absl::Status begin_capture() override {
    AMPC_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    return absl::OkStatus();
  }

  absl::StatusOr<void*> end_capture() override {
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (ended != cudaSuccess) {
      cudaGetLastError();  // a capture error is not the context's
      if (graph != nullptr) cudaGraphDestroy(graph);
      return cuda_status(ended, "recording the run as a CUDA graph");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    AMPC_RETURN_IF_ERROR(cuda_status(made, "instantiating the run's CUDA graph"));
    return static_cast<void*>(exec);
  }

  absl::Status launch_graph(void* graph) override {
    AMPC_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream_));
    return absl::OkStatus();
  }

  void destroy_graph(void* graph) override {
    if (graph != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  }

  absl::Status make_current() override {
    AMPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(index_));
    return absl::OkStatus();
  }

  absl::Status set_random_stream(uint64_t stream) override {
    return copy_to_device(reinterpret_cast<std::byte*>(random_stream_word()), &stream,
                          sizeof stream);
  }

 protected:
  void deallocate(std::byte* data, int64_t /*bytes*/) override {
    // cudaFree waits for the device; kernels still reading the memory finish first.
    cudaSetDevice(index_);
    cudaFree(data);
  }

  absl::Status do_copy_to_host(void* host, const std::byte* device, int64_t bytes) override {
    auto* to = static_cast<std::byte*>(host);
    for (int64_t done = 0; done < bytes;) {
      const int64_t chunk = std::min(kStagingBytes, bytes - done);
      AMPC_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_done_[next_half_]));
      std::byte* half = staging_ + next_half_ * kStagingBytes;
      AMPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(half, device + done, static_cast<size_t>(chunk),
                                                cudaMemcpyDeviceToHost, stream_));
      AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      std::memcpy(to + done, half, static_cast<size_t>(chunk));
      done += chunk;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DeviceError> do_synchronize() override {
    AMPC_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "a kernel launch"));
    AMPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    DeviceError error;
    AMPC_RETURN_IF_ERROR(
        do_copy_to_host(&error, reinterpret_cast<const std::byte*>(error_word()), sizeof error));
    if (error.code != kNoDeviceError) {
      AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(error_word(), 0, sizeof(DeviceError), stream_));
    }
    return error;
  }

 private:
  explicit CudaBackend(const BackendOptions& options) : index_(options.device_index) {
    context_.device = Device::kCuda;
    context_.allow_tf32 = options.allow_tf32;
  }

  DeviceError* error_word() const { return reinterpret_cast<DeviceError*>(words_); }
  uint64_t* random_stream_word() const {
    return reinterpret_cast<uint64_t*>(words_ + sizeof(DeviceError));
  }

  absl::Status start() {
    AMPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(index_));
    AMPC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties_, index_));
    AMPC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    AMPC_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&cublaslt_));
    AMPC_CUDNN_RETURN_IF_ERROR(cudnnCreate(&cudnn_));
    AMPC_CUDNN_RETURN_IF_ERROR(cudnnSetStream(cudnn_, stream_));
    void* memory = nullptr;
    if (cudaMalloc(&memory, kLibraryWorkspaceBytes) != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(str_cat("out of device memory on ", describe(),
                                                  ": the library workspace needs ",
                                                  kLibraryWorkspaceBytes, " bytes"));
    }
    library_workspace_ = static_cast<std::byte*>(memory);
    AMPC_CUDA_RETURN_IF_ERROR(cudaMalloc(&memory, 256));
    words_ = static_cast<std::byte*>(memory);
    AMPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(words_, 0, 256, stream_));
    AMPC_CUDA_RETURN_IF_ERROR(cudaMallocHost(&memory, 2 * kStagingBytes));
    staging_ = static_cast<std::byte*>(memory);
    for (cudaEvent_t& event : staging_done_) {
      AMPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      AMPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream_));
    }
    context_.stream = stream_;
    context_.cublaslt = cublaslt_;
    context_.cudnn = cudnn_;
    context_.library_workspace = library_workspace_;
    context_.library_workspace_bytes = kLibraryWorkspaceBytes;
    context_.error = error_word();
    context_.random_stream = random_stream_word();
    return absl::OkStatus();
  }

  int index_ = 0;
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::byte* library_workspace_ = nullptr;
  std::byte* words_ = nullptr;  // the device error word, then the random-stream word
  std::byte* staging_ = nullptr;
  cudaEvent_t staging_done_[2] = {nullptr, nullptr};
  int next_half_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<Backend>> make_cuda_backend(const BackendOptions& options) {
  return CudaBackend::create(options);
}

}  // namespace runtime::cuda
}  // namespace ampc
