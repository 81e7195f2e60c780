// Benchmarks of the CUDA backend beside the hardware's bounds (Google Benchmark; not a test):
//   build/tests/ampc_cuda_benchmarks [--benchmark_filter=...]
// - gemm/<dtype>/<n>: an n x n x n MatMul through an InferenceSession (cuBLASLt, the algorithm
//   chosen at load) in TFLOP/s, beside cublas/<dtype>/<n>: cuBLAS's own best on the same shape
//   (cublasGemmEx, f32 accumulation), the bound the kernel should reach 95% of;
// - cast, element-wise (Add, Gelu), Softmax and LayerNormalization over 2^26 elements in GB/s
//   (bytes read + written per run), beside memcpy: a device-to-device cudaMemcpyAsync of the same
//   bytes, the bound element-wise kernels should reach 85% of.
// Each run of a session ends with one synchronization (to read the device error word), so one
// iteration is `kRunsPerIteration` runs, timed by the wall clock; the rates count only the
// kernels' work, so the per-run synchronization is charged against them.
// - nccl_all_reduce/<MiB>: NCCL's all-reduce of an f32 bucket, one rank on this GPU.
// docs/benchmarks.md records the figures, the device and the command.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

#include "benchmark/benchmark.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "runtime/comm/launch.h"
#include "runtime/executor.h"
#include "runtime/session.h"

namespace ampc::runtime {
namespace {

constexpr int kRunsPerIteration = 20;

bool have_gpu() {
  static const bool present = create_backend(Device::kCuda).ok();
  return present;
}

// The benchmarks' data: small nonzero values, 1/64 in every float type, no overflow in any op
// (zeros would run faster than real data on the matrix units).
Tensor pattern(const TensorType& type) {
  Tensor value(type);
  for (int64_t i = 0; i < value.num_elements(); ++i) value.set_element(i, (i % 7 - 3) / 64.0);
  return value;
}

// A session on CUDA for `text`, with every input bound to `pattern`; null (and the benchmark
// skipped) when it cannot load.
std::unique_ptr<InferenceSession> cuda_session(benchmark::State& state, const std::string& text) {
  if (!have_gpu()) {
    state.SkipWithError("no usable CUDA device");
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  if (!graph.ok()) {
    state.SkipWithError(std::string(graph.status().message()).c_str());
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(*std::move(graph), SessionOptions{.device = Device::kCuda});
  if (!session.ok()) {
    state.SkipWithError(std::string(session.status().message()).c_str());
    return nullptr;
  }
  for (const TensorInfo& input : (*session)->inputs()) {
    (void)(*session)->set_input(input.name, pattern(input.type));
  }
  return *std::move(session);
}

// Times the iteration's runs with the wall clock around them (each run ends synchronized).
void time_runs(benchmark::State& state, InferenceSession& session) {
  if (absl::Status warm = session.run(); !warm.ok()) {  // first run: lazy library setup
    state.SkipWithError(std::string(warm.message()).c_str());
    return;
  }
  for (auto _ : state) {
    for (int r = 0; r < kRunsPerIteration; ++r) {
      if (absl::Status ran = session.run(); !ran.ok()) {
        state.SkipWithError(std::string(ran.message()).c_str());
        return;
      }
    }
  }
}

void gemm(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  const std::string type = str_cat(dtype_name(dtype), "[", n, ",", n, "]");
  std::unique_ptr<InferenceSession> session =
      cuda_session(state, str_cat("graph g(%a: ", type, ", %b: ", type,
                                  ") {\n  %c = MatMul(%a, %b) : ", type, "\n  return %c\n}"));
  if (session == nullptr) return;
  time_runs(state, *session);
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * kRunsPerIteration * 1e-12 * state.iterations(),
                         benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(gemm, f16, DType::kF16)
    ->Arg(4096)
    ->Arg(8192)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm, bf16, DType::kBF16)
    ->Arg(4096)
    ->Arg(8192)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm, f32, DType::kF32)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

// cuBLAS's own GEMM on the same shape and types, timed the same way (wall clock around
// kRunsPerIteration calls and a synchronization).
void cublas(benchmark::State& state, cudaDataType type, DType dtype) {
  if (!have_gpu()) {
    state.SkipWithError("no usable CUDA device");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  const size_t element = type == CUDA_R_32F ? 4 : 2;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  cublasHandle_t handle = nullptr;
  const size_t bytes = element * n * n;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
      cudaMalloc(&c, bytes) != cudaSuccess || cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cannot set up cuBLAS");
    return;
  }
  // The sessions' inputs.
  const Tensor data = pattern(TensorType{dtype, Shape{state.range(0), state.range(0)}});
  cudaMemcpy(a, data.bytes().data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(b, data.bytes().data(), bytes, cudaMemcpyHostToDevice);
  const float alpha = 1;
  const float beta = 0;
  auto call = [&] {
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, type, n, b, type, n,
                        &beta, c, type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  call();
  cudaDeviceSynchronize();
  for (auto _ : state) {
    for (int r = 0; r < kRunsPerIteration; ++r) call();
    cudaDeviceSynchronize();
  }
  state.counters["TFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * kRunsPerIteration * 1e-12 * state.iterations(),
                         benchmark::Counter::kIsRate);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}
BENCHMARK_CAPTURE(cublas, f16, CUDA_R_16F, DType::kF16)
    ->Arg(4096)
    ->Arg(8192)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(cublas, bf16, CUDA_R_16BF, DType::kBF16)
    ->Arg(4096)
    ->Arg(8192)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(cublas, f32, CUDA_R_32F, DType::kF32)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

constexpr int64_t kElements = int64_t{1} << 26;

// One op over kElements elements; `bytes_per_element` read + written per element.
void bandwidth(benchmark::State& state, const std::string& body, double bytes_per_element) {
  std::unique_ptr<InferenceSession> session = cuda_session(state, body);
  if (session == nullptr) return;
  time_runs(state, *session);
  state.counters["GB/s"] = benchmark::Counter(
      bytes_per_element * kElements * kRunsPerIteration * 1e-9 * state.iterations(),
      benchmark::Counter::kIsRate);
}

const std::string kRows = "[65536,1024]";  // kElements as rows of 1024

void cast_f32_to_f16(benchmark::State& state) {
  bandwidth(
      state,
      "graph g(%x: f32" + kRows + ") {\n  %y = Cast<to=f16>(%x) : f16" + kRows + "\n  return %y\n}",
      6);
}
void add_f16(benchmark::State& state) {
  bandwidth(state,
            "graph g(%x: f16" + kRows + ", %z: f16" + kRows + ") {\n  %y = Add(%x, %z) : f16" +
                kRows + "\n  return %y\n}",
            6);
}
void gelu_bf16(benchmark::State& state) {
  bandwidth(state,
            "graph g(%x: bf16" + kRows + ") opset(20) {\n  %y = Gelu(%x) : bf16" + kRows +
                "\n  return %y\n}",
            4);
}
void softmax_f16(benchmark::State& state) {
  bandwidth(state,
            "graph g(%x: f16" + kRows + ") {\n  %y = Softmax<axis=-1>(%x) : f16" + kRows +
                "\n  return %y\n}",
            4);
}
void layer_norm_f16(benchmark::State& state) {
  bandwidth(state,
            "graph g(%x: f16" + kRows +
                ", %s: f16[1024], %b: f16[1024]) {\n"
                "  %y = LayerNormalization<axis=-1>(%x, %s, %b) : f16" +
                kRows + "\n  return %y\n}",
            4);
}
BENCHMARK(cast_f32_to_f16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(add_f16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(gelu_bf16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(softmax_f16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(layer_norm_f16)->Unit(benchmark::kMillisecond)->UseRealTime();

// What a session run costs beyond its kernels (the launch, the synchronization and the read of
// the device error word), measured on a one-element Add: subtract it from a run's time for the
// kernels' own.
void session_run_overhead(benchmark::State& state) {
  std::unique_ptr<InferenceSession> session =
      cuda_session(state, "graph g(%x: f32[1]) {\n  %y = Add(%x, %x) : f32[1]\n  return %y\n}");
  if (session == nullptr) return;
  time_runs(state, *session);
  state.counters["us/run"] =
      benchmark::Counter(kRunsPerIteration * state.iterations() * 1e-6,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(session_run_overhead)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The bound: copying the same bytes device to device (read + write counted, as above).
void memcpy_device(benchmark::State& state) {
  if (!have_gpu()) {
    state.SkipWithError("no usable CUDA device");
    return;
  }
  const size_t bytes = static_cast<size_t>(kElements) * 2;  // one f16 tensor
  void* from = nullptr;
  void* to = nullptr;
  if (cudaMalloc(&from, bytes) != cudaSuccess || cudaMalloc(&to, bytes) != cudaSuccess) {
    state.SkipWithError("cannot allocate");
    return;
  }
  cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
  for (auto _ : state) {
    for (int r = 0; r < kRunsPerIteration; ++r) {
      cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, nullptr);
    }
    cudaDeviceSynchronize();
  }
  state.counters["GB/s"] = benchmark::Counter(
      2.0 * bytes * kRunsPerIteration * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  cudaFree(from);
  cudaFree(to);
}
BENCHMARK(memcpy_device)->Unit(benchmark::kMillisecond)->UseRealTime();

// NCCL's all-reduce of an f32 bucket of `state.range(0)` MiB on this GPU, as a group of one rank
// (one GPU is what a lent machine has): the time of one all-reduce and its algorithm bandwidth
// (bucket bytes / time). Bus bandwidth, nccl-tests' figure for comparing machines, is the
// algorithm bandwidth times 2 (N - 1) / N: 0 for one rank, so the figure here is NCCL's cost per
// call and per byte, not the link's.
void nccl_all_reduce(benchmark::State& state) {
  if (!have_gpu()) {
    state.SkipWithError("no usable CUDA device");
    return;
  }
  absl::StatusOr<std::unique_ptr<comm::Communicator>> group =
      comm::connect_alone("nccl", std::chrono::seconds(60));
  if (!group.ok()) {
    state.SkipWithError(std::string(group.status().message()).c_str());
    return;
  }
  const int64_t count = state.range(0) * (1 << 20) / 4;
  void* bucket = nullptr;
  if (cudaMalloc(&bucket, static_cast<size_t>(count) * 4) != cudaSuccess) {
    state.SkipWithError("cannot allocate");
    return;
  }
  cudaMemset(bucket, 0, static_cast<size_t>(count) * 4);
  for (auto _ : state) {
    const absl::Status done =
        (*group)->all_reduce_now(bucket, count, DType::kF32, comm::ReduceOp::kSum);
    if (!done.ok()) {
      state.SkipWithError(std::string(done.message()).c_str());
      break;
    }
  }
  state.counters["algbw GB/s"] = benchmark::Counter(
      static_cast<double>(count) * 4 * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  cudaFree(bucket);
}
BENCHMARK(nccl_all_reduce)->Arg(1)->Arg(25)->Arg(256)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ampc::runtime

BENCHMARK_MAIN();
