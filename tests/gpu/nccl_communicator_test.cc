// The NCCL communicator (runtime/cuda/nccl_communicator.h) on one GPU, as a group of one rank:
// NCCL allows one rank per GPU, so this is what one GPU can show. Its collectives on device
// memory run on NCCL (into separate receive buffers, so each must move the data), host memory
// goes to the host group, a type NCCL lacks is refused, and a collective queued on a stream is
// ordered with that stream's work. Then the data-parallel step through NCCL: a group of one sums
// nothing, so it trains bit for bit as a session without a communicator, as the host-staged
// (Gloo) path does, and as itself recorded as a CUDA graph.
#include "runtime/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ampc/float_types.h"
#include "gtest/gtest.h"
#include "runtime/comm/launch.h"
#include "tests/runtime/data_parallel_test_util.h"
#include "tests/test_util.h"

namespace ampc::runtime::data_parallel_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device"

// A group of one rank through `engine` ("gloo" or "nccl", on GPU 0).
std::shared_ptr<comm::Communicator> group_of_one(const std::string& engine) {
  absl::StatusOr<std::unique_ptr<comm::Communicator>> group =
      comm::connect_alone(engine, std::chrono::seconds(60));
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::shared_ptr<comm::Communicator>(*std::move(group)) : nullptr;
}

// Device memory holding `values`.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& values) : size_(values.size()) {
    EXPECT_EQ(cudaMalloc(&data_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { (void)cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* data() { return static_cast<T*>(data_); }
  size_t bytes() const { return size_ * sizeof(T); }
  std::vector<T> read() const {
    std::vector<T> values(size_);
    EXPECT_EQ(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return values;
  }

 private:
  void* data_ = nullptr;
  size_t size_;
};

// The bits of each element, so NaN patterns and signed zeros compare too.
template <typename T>
std::vector<std::vector<uint8_t>> bits(const std::vector<T>& values) {
  std::vector<std::vector<uint8_t>> out;
  for (const T& value : values) {
    const auto* first = reinterpret_cast<const uint8_t*>(&value);
    out.emplace_back(first, first + sizeof(T));
  }
  return out;
}

TEST(NcclCommunicator, CollectivesOnDeviceMemoryRunOnNccl) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<comm::Communicator> group = group_of_one("nccl");
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->engine(), "nccl");
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {1.5f, -2.0f, 3e38f, -0.0f, 1e-45f};
  for (comm::ReduceOp op : {comm::ReduceOp::kSum, comm::ReduceOp::kMax}) {
    DeviceBuffer<float> data(values);
    ASSERT_TRUE(group->all_reduce_now(data.data(), 5, DType::kF32, op).ok());
    EXPECT_EQ(bits(data.read()), bits(values)) << comm::reduce_op_name(op);
  }
  // f16 and bf16: NCCL's own types (Gloo has no bf16).
  const std::vector<BFloat16> halves = {BFloat16(0.5f), BFloat16(-3.0f), BFloat16(1e30f)};
  DeviceBuffer<BFloat16> bf16(halves);
  ASSERT_TRUE(group->all_reduce_now(bf16.data(), 3, DType::kBF16, comm::ReduceOp::kSum).ok());
  EXPECT_EQ(bits(bf16.read()), bits(halves));
  const std::vector<Float16> f16_values = {Float16(0.5f), Float16(-65504.0f)};
  DeviceBuffer<Float16> f16(f16_values);
  ASSERT_TRUE(group->all_reduce_now(f16.data(), 2, DType::kF16, comm::ReduceOp::kMax).ok());
  EXPECT_EQ(bits(f16.read()), bits(f16_values));

  DeviceBuffer<float> broadcast(values);
  ASSERT_TRUE(group->broadcast_now(broadcast.data(), 5, DType::kF32, 0).ok());
  EXPECT_EQ(bits(broadcast.read()), bits(values));

  // Into buffers that start as NaN: the collective must write them.
  DeviceBuffer<float> send(values);
  DeviceBuffer<float> gathered(std::vector<float>(5, nan));
  ASSERT_TRUE(group->all_gather(send.data(), gathered.data(), 5, DType::kF32)->wait().ok());
  EXPECT_EQ(bits(gathered.read()), bits(values));
  DeviceBuffer<float> received(std::vector<float>(5, nan));
  ASSERT_TRUE(
      group->reduce_scatter(send.data(), received.data(), 5, DType::kF32, comm::ReduceOp::kSum)
          ->wait()
          .ok());
  EXPECT_EQ(bits(received.read()), bits(values));
  EXPECT_TRUE(group->health().ok()) << group->health();
}

TEST(NcclCommunicator, HostMemoryGoesThroughTheHostGroup) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<comm::Communicator> group = group_of_one("nccl");
  ASSERT_NE(group, nullptr);
  std::vector<int64_t> counts = {3, -4};
  ASSERT_TRUE(group->all_reduce_now(counts.data(), 2, DType::kI64, comm::ReduceOp::kSum).ok());
  EXPECT_EQ(counts, (std::vector<int64_t>{3, -4}));
  // On the host, bf16 is Gloo's to refuse; on the device, NCCL takes it (above).
  std::vector<BFloat16> host(2, BFloat16(1.0f));
  const absl::Status refused =
      group->all_reduce_now(host.data(), 2, DType::kBF16, comm::ReduceOp::kSum);
  EXPECT_FALSE(refused.ok());
}

TEST(NcclCommunicator, ATypeNcclLacksIsRefusedNamingIt) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<comm::Communicator> group = group_of_one("nccl");
  ASSERT_NE(group, nullptr);
  DeviceBuffer<uint8_t> flags(std::vector<uint8_t>{1, 0});
  const absl::Status refused =
      group->all_reduce_now(flags.data(), 2, DType::kBool, comm::ReduceOp::kMax);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("NCCL has no element type bool"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("rank 0 of 1"), std::string::npos) << refused;
  // A refusal queues nothing: the communicator still works.
  EXPECT_TRUE(group->health().ok()) << group->health();
}

TEST(NcclCommunicator, ACollectiveOnAStreamFollowsTheStreamsWork) {
  SKIP_WITHOUT_GPU();
  std::shared_ptr<comm::Communicator> group = group_of_one("nccl");
  ASSERT_NE(group, nullptr);
  auto& nccl = dynamic_cast<cuda::NcclCommunicator&>(*group);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  DeviceBuffer<int32_t> send(std::vector<int32_t>(1000, 7));
  DeviceBuffer<int32_t> gathered(std::vector<int32_t>(1000, 0));
  // The stream first sets the buffer to bytes of 1; the gather must see them, not the 7s.
  ASSERT_EQ(cudaMemsetAsync(send.data(), 1, send.bytes(), stream), cudaSuccess);
  ASSERT_TRUE(nccl.all_gather_on(stream, send.data(), gathered.data(), 1000, DType::kI32).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(gathered.read(), std::vector<int32_t>(1000, 0x01010101));
  ASSERT_TRUE(
      nccl.all_reduce_on(stream, gathered.data(), 1000, DType::kI32, comm::ReduceOp::kSum).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(gathered.read(), std::vector<int32_t>(1000, 0x01010101));
  (void)cudaStreamDestroy(stream);
  EXPECT_TRUE(group->health().ok()) << group->health();
}

// Every step's figures and the final state, bit for bit.
void expect_identical(const RunLog& a, const RunLog& b) {
  ASSERT_EQ(a.stats.size(), b.stats.size());
  for (size_t step = 0; step < a.stats.size(); ++step) {
    EXPECT_EQ(bits(std::vector<double>{a.stats[step].loss}),
              bits(std::vector<double>{b.stats[step].loss}))
        << "step " << step + 1;
    EXPECT_EQ(bits(std::vector<double>{a.stats[step].grad_norm}),
              bits(std::vector<double>{b.stats[step].grad_norm}))
        << "step " << step + 1;
    EXPECT_EQ(a.stats[step].skipped_steps, b.stats[step].skipped_steps) << "step " << step + 1;
  }
  ASSERT_EQ(a.state.size(), b.state.size());
  for (const auto& [name, value] : a.state) EXPECT_EQ(bits(value), bits(b.state.at(name))) << name;
}

RunLog train_in(const Recipe& recipe, std::shared_ptr<comm::Communicator> group) {
  absl::StatusOr<std::unique_ptr<TrainingSession>> session =
      open(recipe, whole_batch(recipe), std::move(group));
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? train(recipe, **session, 0, 1, 0.05f) : RunLog{};
}

std::vector<Recipe> recipes() {
  return {
      Recipe{.optimizer = OptimizerOptions::Kind::kAdamW, .device = Device::kCuda},
      Recipe{.fp16 = true, .loss_scale = LossScaleOptions{}, .device = Device::kCuda},
      Recipe{.optimizer = OptimizerOptions::Kind::kAdamW,
             .shard_optimizer = true,
             .device = Device::kCuda},
      // Sharded f32 master weights read through f16 copies: the AllGather moves f16 and f32
      // blocks in one call.
      Recipe{.fp16 = true,
             .optimizer = OptimizerOptions::Kind::kAdamW,
             .loss_scale = LossScaleOptions{},
             .shard_optimizer = true,
             .device = Device::kCuda},
      // Accumulating 2 micro-batches: the gradients' collectives skip the window's first run
      // (a second CUDA graph records it).
      Recipe{
          .fp16 = true, .loss_scale = LossScaleOptions{}, .accumulate = 2, .device = Device::kCuda},
      Recipe{.optimizer = OptimizerOptions::Kind::kAdamW,
             .accumulate = 2,
             .shard_optimizer = true,
             .device = Device::kCuda}};
}

std::string describe(const Recipe& recipe) {
  return str_cat(recipe.fp16 ? "fp16" : "f32", recipe.shard_optimizer ? ", sharded" : "",
                 recipe.accumulate > 1 ? str_cat(", accumulating ", recipe.accumulate) : "");
}

TEST(NcclDataParallel, OneNcclRankTrainsBitForBitAsTheHostStagedPathAndAsNoGroup) {
  SKIP_WITHOUT_GPU();
  for (const Recipe& recipe : recipes()) {
    SCOPED_TRACE(describe(recipe));
    const RunLog nccl = train_in(recipe, group_of_one("nccl"));
    ASSERT_EQ(nccl.stats.size(), static_cast<size_t>(kSteps));
    expect_identical(nccl, train_in(recipe, group_of_one("gloo")));
    if (!recipe.shard_optimizer) expect_identical(nccl, train_in(recipe, nullptr));
  }
}

TEST(NcclDataParallel, AStepRecordedAsACudaGraphTrainsAsTheEagerStep) {
  SKIP_WITHOUT_GPU();
  for (Recipe recipe : recipes()) {
    SCOPED_TRACE(describe(recipe));
    const RunLog eager = train_in(recipe, group_of_one("nccl"));
    recipe.cuda_graph = true;
    expect_identical(train_in(recipe, group_of_one("nccl")), eager);
  }
}

}  // namespace
}  // namespace ampc::runtime::data_parallel_testing
