// Benchmarks of the CPU backend (Google Benchmark; not a test, run by hand):
//   build/tests/ampc_benchmarks [--benchmark_filter=...]
// The f32 forward pass of each model in models/, and the GEMM kernel (MatMul f32 and f16).
// Times are wall-clock (the kernels run on every core). docs/benchmarks.md records the figures
// and the machine.
#include <random>

#include "benchmark/benchmark.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "runtime/npy.h"
#include "runtime/session.h"

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

// An n x n x n MatMul of `dtype` through a session (kernel, upcast and rounding included).
void gemm(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  const std::string type = str_cat(dtype_name(dtype), "[", n, ",", n, "]");
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      parse_graph(str_cat("graph g(%a: ", type, ", %b: ", type,
                          ") {\n  %c = MatMul(%a, %b) : ", type, "\n  return %c\n}"));
  if (!graph.ok()) {
    state.SkipWithError(std::string(graph.status().message()).c_str());
    return;
  }
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(*std::move(graph));
  if (!session.ok()) {
    state.SkipWithError(std::string(session.status().message()).c_str());
    return;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1, 1);
  std::vector<double> values(n * n);
  for (double& v : values) v = uniform(rng);
  const Tensor operand = Tensor::from_doubles(dtype, {n, n}, values);
  (void)(*session)->set_input("a", operand);
  (void)(*session)->set_input("b", operand);
  for (auto _ : state) {
    if (absl::Status ran = (*session)->run(); !ran.ok()) {
      state.SkipWithError(std::string(ran.message()).c_str());
      return;
    }
  }
  // The operations of one iteration, times the iterations, over the elapsed time.
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
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

}  // namespace
}  // namespace ampc::runtime

BENCHMARK_MAIN();
