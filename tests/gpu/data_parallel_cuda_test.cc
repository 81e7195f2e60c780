// Data-parallel training with CUDA sessions (the collectives staged through host memory,
// runtime/cuda/collective.cc): 2 ranks, threads of this process sharing one GPU, against one
// CUDA rank with the whole batch, plain and with the sharded optimizer (ZeRO-1), and a CUDA
// session with a training-mode BatchNorm refused unless each rank keeps its own statistics.
#include <string>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/data_parallel_test_util.h"
#include "tests/test_util.h"

namespace ampc::runtime::data_parallel_testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!testing::cuda_device_present()) GTEST_SKIP() << "no usable CUDA device"

// cuBLAS sums the whole batch's and the shards' GEMMs in other orders: f32 within 1e-5.
TEST(DataParallelCuda, TwoCudaRanksTrainLikeOneCudaRankWithTheWholeBatch) {
  SKIP_WITHOUT_GPU();
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded optimizer" : "plain");
    expect_same_training(Recipe{.optimizer = OptimizerOptions::Kind::kAdamW,
                                .shard_optimizer = sharded,
                                .device = Device::kCuda},
                         2, 0.05f, 1e-5);
  }
}

TEST(DataParallelCuda, SynchronizedBatchNormIsRefusedOnCudaNamingTheFlag) {
  SKIP_WITHOUT_GPU();
  std::vector<absl::Status> statuses(2);
  on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    statuses[rank] =
        open(Recipe{.batch_norm = true, .device = Device::kCuda}, 8, std::move(group)).status();
  });
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    EXPECT_NE(status.message().find("--local-batch-norm"), std::string::npos) << status;
  }
  // With each rank's own statistics it trains.
  on_ranks(2, [&](int rank, std::shared_ptr<comm::Communicator> group) {
    absl::StatusOr<std::unique_ptr<TrainingSession>> session =
        open(Recipe{.batch_norm = true, .sync_batch_norm = false, .device = Device::kCuda}, 8,
             std::move(group));
    ASSERT_TRUE(session.ok()) << session.status();
    const RunLog run =
        train(Recipe{.batch_norm = true}, **session, rank, 2, 0.05f, /*first=*/0, /*count=*/3);
    EXPECT_EQ(run.stats.size(), 3u);
  });
}

}  // namespace
}  // namespace ampc::runtime::data_parallel_testing
