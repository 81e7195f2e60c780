// The backend seam: the CPU backend's memory and copies, the executor's stateful kernels (state
// made once at load, its workspace provided), the device error word turned into a Status naming
// the node, and the CUDA backend's clear refusal where no GPU can be used.
#include "runtime/backend.h"

#include <cstring>
#include <fstream>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "runtime/interpreter.h"
#include "runtime/kernel.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

using ::testing::HasSubstr;

TEST(CpuBackend, AllocatesZeroedMemoryAndCopiesBothWays) {
  absl::StatusOr<std::shared_ptr<Backend>> backend = create_backend(Device::kCpu);
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<DeviceMemory> memory = (*backend)->allocate(100, "test buffer");
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_GE(memory->bytes(), 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->data()) % 64, 0u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(memory->data()[i], std::byte{0});

  const std::vector<uint8_t> pattern = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE((*backend)->copy_to_device(memory->data(), pattern.data(), 8).ok());
  ASSERT_TRUE((*backend)->copy_on_device(memory->data() + 8, memory->data(), 8).ok());
  ASSERT_TRUE((*backend)->fill(memory->data() + 16, std::byte{0xff}, 4).ok());
  std::vector<uint8_t> back(20);
  ASSERT_TRUE((*backend)->copy_to_host(back.data(), memory->data(), 20).ok());
  EXPECT_EQ(back, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7,   8,   1,   2,
                                        3, 4, 5, 6, 7, 8, 255, 255, 255, 255}));
  absl::StatusOr<DeviceError> error = (*backend)->synchronize();
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->code, kNoDeviceError);
}

TEST(CpuBackend, AnAllocationItCannotMakeNamesWhatAndHowMuch) {
  std::shared_ptr<Backend> backend = *create_backend(Device::kCpu);
  absl::StatusOr<DeviceMemory> huge =
      backend->allocate(std::numeric_limits<int64_t>::max() / 2, "activation arena");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), HasSubstr("activation arena"));
  EXPECT_THAT(huge.status().message(), HasSubstr("4611686018427387904"));
  EXPECT_FALSE(backend->allocate(-1, "workspace arena").ok());
}

TEST(Backend, TheRandomStreamWordHoldsWhatWasSet) {
  std::shared_ptr<Backend> backend = *create_backend(Device::kCpu);
  ASSERT_TRUE(backend->set_random_stream(42).ok());
  EXPECT_EQ(*backend->context().random_stream, 42u);
  EXPECT_EQ(parse_device("cuda").value(), Device::kCuda);
  EXPECT_THAT(std::string(parse_device("gpu").status().message()), HasSubstr("'gpu'"));
}

// Whether a shared library whose file name contains `name` is mapped into this process.
bool mapped(std::string_view name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

// Taken before main, after every library this test links has initialized.
const bool kCudaMappedAtStart = mapped("libcublasLt") || mapped("libampc_cuda");

// The CUDA backend is a library of its own (runtime/cuda_library.h): a process that only uses the
// CPU never maps it or the CUDA libraries, and the first request for the cuda device loads it
// (no GPU is needed to load it and resolve its kernels).
TEST(CudaLibrary, IsLoadedOnlyWhenTheCudaDeviceIsAskedFor) {
  EXPECT_FALSE(kCudaMappedAtStart);
  // Alone in its process (as CTest runs it), nothing before it can have asked for cuda.
  const bool alone = ::testing::UnitTest::GetInstance()->test_to_run_count() == 1;
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(testing::parse_or_fail(R"(
        graph g(%x: f32[4]) {
          %y = Relu(%x) : f32[4]
          return %y
        })"));
  ASSERT_TRUE(session.ok()) << session.status();
  if (alone) {
    EXPECT_FALSE(mapped("libampc_cuda"));
    EXPECT_FALSE(mapped("libcublasLt"));
    EXPECT_FALSE(mapped("libcudnn"));
    EXPECT_EQ(KernelRegistry::global().find("", "Relu", Device::kCuda, DType::kF32), nullptr);
  }
  const absl::Status loaded = load_kernels(Device::kCuda);
#if defined(AMPC_HAVE_CUDA)
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_TRUE(mapped("libampc_cuda"));
  EXPECT_TRUE(mapped("libcublasLt"));
  EXPECT_NE(KernelRegistry::global().find("", "Relu", Device::kCuda, DType::kF32), nullptr);
  // The CPU session made before still runs: its kernels did not move when the CUDA ones came.
  EXPECT_NE(KernelRegistry::global().find("", "Relu", Device::kCpu, DType::kF32), nullptr);
#else
  EXPECT_THAT(loaded.message(), HasSubstr("built without CUDA"));
#endif
  absl::StatusOr<std::map<std::string, Tensor>> out =
      (*session)->run({{"x", Tensor::from_f32({4}, {-1, 2, -3, 4})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("y"), Tensor::from_f32({4}, {0, 2, 0, 4}));
}

// Where the CUDA backend cannot start (no GPU or driver here, or no CUDA in the build), it says
// why instead of failing later.
TEST(CudaBackend, WithoutAUsableGpuCreationSaysWhy) {
  if (testing::cuda_device_present()) GTEST_SKIP() << "a GPU is present";
  absl::StatusOr<std::shared_ptr<Backend>> backend = create_backend(Device::kCuda);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(backend.status().message(),
              ::testing::AnyOf(HasSubstr("no usable CUDA device"), HasSubstr("without CUDA")));

  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[4]) {
      %y = Relu(%x) : f32[4]
      return %y
    })");
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(std::move(graph), SessionOptions{.device = Device::kCuda});
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnavailable);
}

// ---- Stateful kernels and the device error word, through test ops on the CPU --------------------

struct CountingState : KernelState {
  int inits = 0;
  int runs = 0;
};
int g_inits = 0;

// ampc.TestStateful: y = x + (the number of runs so far, including this one); its state asks for
// 1000 bytes of workspace, which the kernel checks it got.
absl::StatusOr<std::unique_ptr<KernelState>> init_counting(const KernelContext& ctx) {
  auto state = std::make_unique<CountingState>();
  state->inits = ++g_inits;
  state->workspace_bytes = 1000;
  EXPECT_NE(ctx.exec, nullptr);
  return state;
}

absl::Status run_counting(const KernelContext& ctx) {
  auto* state = static_cast<CountingState*>(ctx.state);
  if (state == nullptr) return absl::InternalError("no state");
  if (ctx.workspace.size() < 1000) return absl::InternalError("workspace too small");
  std::memset(ctx.workspace.data(), 0x5a, 1000);  // the workspace is writable
  ++state->runs;
  const std::span<const float> x = ctx.input(0).in<float>();
  const std::span<float> y = ctx.output(0).out<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] + static_cast<float>(state->runs);
  return absl::OkStatus();
}

// ampc.TestIndexError: records "index 7 (element 3) out of range [-5, 5)" in the error word and
// returns OK, as a device kernel would.
absl::Status run_index_error(const KernelContext& ctx) {
  record_device_error(ctx.exec->error, kIndexOutOfRange, ctx.step, 3, 7, 5);
  record_device_error(ctx.exec->error, kIndexOutOfRange, ctx.step, 4, 9, 5);  // not the first
  std::memcpy(ctx.output(0).data, ctx.input(0).data, ctx.output(0).byte_size());
  return absl::OkStatus();
}

void register_test_ops() {
  static const bool registered = [] {
    testing::register_passthrough_op("TestStateful");
    testing::register_passthrough_op("TestIndexError");
    KernelDef stateful;
    stateful.domain = "ampc";
    stateful.op = "TestStateful";
    stateful.dtypes = {DType::kF32};
    stateful.fn = &run_counting;
    stateful.init = &init_counting;
    KernelRegistry::global().add(stateful);
    KernelDef index_error = stateful;
    index_error.op = "TestIndexError";
    index_error.fn = &run_index_error;
    index_error.init = nullptr;
    KernelRegistry::global().add(index_error);
    return true;
  }();
  (void)registered;
}

TEST(Executor, MakesKernelStateOnceAtLoadAndProvidesItsWorkspace) {
  register_test_ops();
  g_inits = 0;
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) {
      %y = ampc.TestStateful(%x) : f32[2]
      %z = ampc.TestStateful(%y) : f32[2]
      return %z
    })");
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(g_inits, 2);  // one state per node, made at load
  EXPECT_GE((*session)->plan().arena_bytes(ArenaKind::kWorkspace), 0);
  for (int run = 1; run <= 3; ++run) {
    absl::StatusOr<std::map<std::string, Tensor>> out =
        (*session)->run({{"x", Tensor::from_f32({2}, {10, 20})}});
    ASSERT_TRUE(out.ok()) << out.status();
    // Each node adds its own run count: x + run + run.
    EXPECT_EQ(out->at("z"), Tensor::from_f32({2}, {10.0f + 2 * run, 20.0f + 2 * run}));
  }
  EXPECT_EQ(g_inits, 2);
}

TEST(Executor, ADeviceErrorIsReportedAfterTheRunNamingTheNode) {
  register_test_ops();
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
    graph g(%x: f32[2]) {
      %y = Relu(%x) : f32[2]
      %z = ampc.TestIndexError(%y) : f32[2]
      return %z
    })");
  std::unique_ptr<Graph> copy = graph->clone();
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> out =
      (*session)->run({{"x", Tensor::from_f32({2}, {1, 2})}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("TestIndexError"));
  EXPECT_THAT(out.status().message(),
              HasSubstr("index 7 (element 3 of the indices) is out of range [-5, 5)"));
  // The interpreter reads the word the same way.
  absl::StatusOr<std::vector<Tensor>> interpreted =
      interpret_graph(*copy, {Tensor::from_f32({2}, {1, 2})});
  ASSERT_FALSE(interpreted.ok());
  EXPECT_THAT(interpreted.status().message(), HasSubstr("index 7"));
}

}  // namespace
}  // namespace ampc::runtime
