// Benchmarks of the CPU backend (Google Benchmark; not a test, run by hand):
//   build/tests/ampc_benchmarks [--benchmark_filter=...]
// The f32 forward pass of each model in models/, BatchNormalizationGrad, the GEMM kernel (MatMul
// f32 and f16), and Gloo's all-reduce between two ranks of this machine.
// Times are wall-clock (the kernels run on every core). docs/benchmarks.md records the figures
// and the machine.
#include <random>
#include <thread>

#include "benchmark/benchmark.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace ampc::runtime {
namespace {

std::string source_path(const std::string& relative) {
  return std::string(AMPC_SOURCE_DIR) + "/" + relative;
}

void model_forward(benchmark::State& state, const std::string& model) {
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::load(source_path("models/" + model + ".onnx"));
  absl::StatusOr<std::map<std::string, Tensor>> arrays =
      read_npz(source_path("models/" + model + ".ref.npz"));
  if (!session.ok() || !arrays.ok()) {
    state.SkipWithError("cannot load the model or its reference inputs");
    return;
  }
  for (const auto& [name, tensor] : *arrays) {
    if (!name.starts_with("output.") && !name.starts_with("grad.")) {
      (void)(*session)->set_input(name, tensor);
    }
  }
  for (auto _ : state) {
    if (absl::Status ran = (*session)->run(); !ran.ok()) {
      state.SkipWithError(std::string(ran.message()).c_str());
      return;
    }
  }
  state.counters["activation_arena_KiB"] =
      static_cast<double>((*session)->plan().arena_bytes(ArenaKind::kActivations)) / 1024;
}
BENCHMARK_CAPTURE(model_forward, mlp, std::string("mlp"))
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(model_forward, cnn, std::string("cnn"))
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(model_forward, tiny_gpt, std::string("tiny_gpt"))
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// A session of the text IR graph `text`; null, the benchmark skipped with the error, when it
// cannot be made.
std::unique_ptr<InferenceSession> session_of(benchmark::State& state, const std::string& text) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = parse_graph(text);
  if (!graph.ok()) {
    state.SkipWithError(std::string(graph.status().message()).c_str());
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(*std::move(graph));
  if (!session.ok()) {
    state.SkipWithError(std::string(session.status().message()).c_str());
    return nullptr;
  }
  return *std::move(session);
}

// Runs `session` once per iteration of `state`.
void run_each_iteration(benchmark::State& state, InferenceSession& session) {
  for (auto _ : state) {
    if (absl::Status ran = session.run(); !ran.ok()) {
      state.SkipWithError(std::string(ran.message()).c_str());
      return;
    }
  }
}

// An n x n x n MatMul of `dtype` through a session (kernel, upcast and rounding included).
void gemm(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  const std::string type = str_cat(dtype_name(dtype), "[", n, ",", n, "]");
  std::unique_ptr<InferenceSession> session =
      session_of(state, str_cat("graph g(%a: ", type, ", %b: ", type,
                                ") {\n  %c = MatMul(%a, %b) : ", type, "\n  return %c\n}"));
  if (session == nullptr) return;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(n * n);
  for (double& v : values) v = uniform(rng);
  const Tensor operand = Tensor::from_doubles(dtype, {n, n}, values);
  (void)session->set_input("a", operand);
  (void)session->set_input("b", operand);
  run_each_iteration(state, *session);
  // The operations of one iteration, times the iterations, over the elapsed time.
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
// BatchNormalizationGrad in training mode over X [32, 64, 32, 32] of `dtype` (2M elements; f32
// statistics): the batch statistics, dScale and dB, then dX.
void batch_norm_grad(benchmark::State& state, DType dtype) {
  const Shape shape = {32, 64, 32, 32};
  const std::string type = str_cat(dtype_name(dtype), "[32,64,32,32]");
  std::unique_ptr<InferenceSession> session = session_of(
      state, str_cat("graph g(%dy: ", type, ", %x: ", type,
                     ", %scale: f32[64], %mean: f32[64], %var: f32[64]) {\n"
                     "  %dx, %dscale, %db = ampc.BatchNormalizationGrad<training_mode=1>(%dy, %x, "
                     "%scale, %mean, %var) : ",
                     type, ", f32[64], f32[64]\n  return %dx, %dscale, %db\n}"));
  if (session == nullptr) return;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(num_elements(shape));
  for (double& v : values) v = uniform(rng);
  const Tensor data = Tensor::from_doubles(dtype, shape, values);
  const Tensor channel = Tensor::from_doubles(DType::kF32, {64}, std::vector<double>(64, 1.0));
  (void)session->set_input("dy", data);
  (void)session->set_input("x", data);
  for (const char* name : {"scale", "mean", "var"}) (void)session->set_input(name, channel);
  run_each_iteration(state, *session);
}
BENCHMARK_CAPTURE(batch_norm_grad, f32, DType::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(batch_norm_grad, bf16, DType::kBF16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_CAPTURE(gemm, f32, DType::kF32)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(gemm, f16, DType::kF16)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Gloo's ring all-reduce of an f32 bucket of `state.range(0)` MiB between 2 ranks of this machine
// (threads, over the loopback), as data-parallel training sums its gradients: seconds per
// all-reduce, and the bus bandwidth (NCCL's busbw: bytes * 2 (n - 1) / n per second).
void gloo_all_reduce(benchmark::State& state) {
  constexpr int kRanks = 2;
  constexpr int kCalls = 20;  // per benchmark run, after one warm-up call
  const int64_t count = state.range(0) * (int64_t{1} << 20) / 4;
  const testing::StoreDirectory store;
  auto join = [&](int rank) {
    comm::GlooOptions options;
    options.rank = rank;
    options.size = kRanks;
    options.store_directory = store.path();
    return comm::connect_gloo(options);
  };
  std::thread peer([&] {
    absl::StatusOr<std::unique_ptr<comm::Communicator>> group = join(1);
    if (!group.ok()) return;
    std::vector<float> data(static_cast<size_t>(count), 1.0f);
    for (int i = 0; i < (kCalls + 1) * static_cast<int>(state.max_iterations); ++i) {
      if (!(*group)->all_reduce_now(data.data(), count, DType::kF32, comm::ReduceOp::kSum).ok()) {
        return;
      }
    }
  });
  absl::StatusOr<std::unique_ptr<comm::Communicator>> group = join(0);
  if (!group.ok()) {
    state.SkipWithError(std::string(group.status().message()).c_str());
    peer.join();
    return;
  }
  std::vector<float> data(static_cast<size_t>(count), 1.0f);
  for (auto _ : state) {
    state.PauseTiming();
    (void)(*group)->all_reduce_now(data.data(), count, DType::kF32, comm::ReduceOp::kSum);
    state.ResumeTiming();
    for (int i = 0; i < kCalls; ++i) {
      (void)(*group)->all_reduce_now(data.data(), count, DType::kF32, comm::ReduceOp::kSum);
    }
  }
  peer.join();
  const double bytes =
      static_cast<double>(count) * 4 * kCalls * static_cast<double>(state.iterations());
  state.counters["busbw_GB"] =
      benchmark::Counter(bytes * 2 * (kRanks - 1) / kRanks / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(gloo_all_reduce)
    ->Arg(1)
    ->Arg(25)
    ->Arg(100)
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace ampc::runtime

BENCHMARK_MAIN();
