// The Gloo communicator (runtime/comm/gloo_communicator.h): groups of 1, 2 and 4 ranks, each a
// thread of this process with its own TCP connections over the loopback, meeting in a fresh
// directory. Values are small integers, so every sum is exact and the expected results are
// written from the definitions; random f32 sums are checked to give the same bits on every rank.
// A rank that never joins and a rank that leaves make the others fail within the timeout.
#include "runtime/comm/gloo_communicator.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ampc/float_types.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace ampc::runtime::comm {
namespace {

using std::chrono::milliseconds;
using testing::StoreDirectory;

GlooOptions options_for(int rank, int size, const StoreDirectory& store,
                        milliseconds timeout = milliseconds(60000)) {
  GlooOptions options;
  options.rank = rank;
  options.size = size;
  options.store_directory = store.path();
  options.timeout = timeout;
  return options;
}

// Runs body(communicator) on `size` ranks at once, one thread each.
void on_ranks(int size, const std::function<void(Communicator&)>& body) {
  StoreDirectory store;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          connect_gloo(options_for(rank, size, store));
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), rank);
      EXPECT_EQ((*comm)->size(), size);
      EXPECT_EQ((*comm)->engine(), "gloo");
      body(**comm);
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

// Element i of rank r's buffer: (r + 1) * (i + 1), exact in every type below.
template <typename T>
std::vector<T> rank_values(int rank, int64_t count) {
  std::vector<T> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(T(static_cast<float>((rank + 1) * (i + 1))));
  return values;
}

template <typename T>
double as_double(T value) {
  return static_cast<double>(static_cast<float>(value));
}
template <>
double as_double<double>(double value) {
  return value;
}
template <>
double as_double<int64_t>(int64_t value) {
  return static_cast<double>(value);
}

template <typename T>
void check_all_reduce(Communicator& comm, DType dtype, int64_t count) {
  const int n = comm.size();
  std::vector<T> sum = rank_values<T>(comm.rank(), count);
  std::vector<T> max = sum;
  ASSERT_TRUE(comm.all_reduce_now(sum.data(), count, dtype, ReduceOp::kSum).ok());
  ASSERT_TRUE(comm.all_reduce_now(max.data(), count, dtype, ReduceOp::kMax).ok());
  for (int64_t i = 0; i < count; ++i) {
    // sum over r of (r + 1)(i + 1) = (i + 1) n (n + 1) / 2; the largest is rank n - 1's.
    EXPECT_EQ(as_double(sum[i]), static_cast<double>((i + 1) * n * (n + 1) / 2))
        << dtype_name(dtype) << " element " << i;
    EXPECT_EQ(as_double(max[i]), static_cast<double>((i + 1) * n))
        << dtype_name(dtype) << " element " << i;
  }
}

TEST(GlooCommunicator, AllReduceSumsAndMaximaInEveryDType) {
  for (int size : {1, 2, 4}) {
    SCOPED_TRACE(str_cat(size, " ranks"));
    on_ranks(size, [](Communicator& comm) {
      check_all_reduce<float>(comm, DType::kF32, 1000);
      check_all_reduce<double>(comm, DType::kF64, 7);
      check_all_reduce<Float16>(comm, DType::kF16, 50);
      check_all_reduce<int64_t>(comm, DType::kI64, 3);
      check_all_reduce<int32_t>(comm, DType::kI32, 3);
      check_all_reduce<uint8_t>(comm, DType::kU8, 5);
    });
  }
}

TEST(GlooCommunicator, BroadcastCopiesTheRootsBuffer) {
  on_ranks(4, [](Communicator& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      std::vector<float> data = rank_values<float>(comm.rank(), 33);
      ASSERT_TRUE(comm.broadcast_now(data.data(), 33, DType::kF32, root).ok());
      EXPECT_EQ(data, rank_values<float>(root, 33)) << "root " << root;
    }
  });
}

TEST(GlooCommunicator, AllGatherPlacesEachRanksBlockAtItsRank) {
  on_ranks(4, [](Communicator& comm) {
    const std::vector<int64_t> mine = rank_values<int64_t>(comm.rank(), 5);
    std::vector<int64_t> gathered(5 * comm.size(), -1);
    ASSERT_TRUE(comm.all_gather(mine.data(), gathered.data(), 5, DType::kI64)->wait().ok());
    for (int r = 0; r < comm.size(); ++r) {
      EXPECT_EQ(std::vector<int64_t>(gathered.begin() + 5 * r, gathered.begin() + 5 * (r + 1)),
                rank_values<int64_t>(r, 5));
    }
  });
}

TEST(GlooCommunicator, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  on_ranks(4, [](Communicator& comm) {
    const int n = comm.size();
    const int64_t count = 6;
    const std::vector<float> send = rank_values<float>(comm.rank(), count * n);
    std::vector<float> received(count, -1);
    ASSERT_TRUE(
        comm.reduce_scatter(send.data(), received.data(), count, DType::kF32, ReduceOp::kSum)
            ->wait()
            .ok());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t element = comm.rank() * count + i;  // in the whole buffer
      EXPECT_EQ(received[i], static_cast<float>((element + 1) * n * (n + 1) / 2));
    }
  });
}

// Collectives queued together run in order; their Works may be waited on in any order.
TEST(GlooCommunicator, QueuedCollectivesRunInTheirOrder) {
  on_ranks(2, [](Communicator& comm) {
    std::vector<float> a = rank_values<float>(comm.rank(), 100);
    std::vector<float> b = rank_values<float>(comm.rank(), 10);
    std::unique_ptr<Work> first = comm.all_reduce(a.data(), 100, DType::kF32, ReduceOp::kSum);
    std::unique_ptr<Work> second = comm.broadcast(b.data(), 10, DType::kF32, 1);
    // a's sum, then a broadcast of the summed a over it from rank 0.
    std::unique_ptr<Work> third = comm.broadcast(a.data(), 100, DType::kF32, 0);
    EXPECT_TRUE(third->wait().ok());
    EXPECT_TRUE(second->wait().ok());
    EXPECT_TRUE(first->wait().ok());
    EXPECT_EQ(b, rank_values<float>(1, 10));
    for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(a[i], static_cast<float>(3 * (i + 1)));
  });
}

TEST(GlooCommunicator, EveryRankGetsTheSameBitsOfARandomSum) {
  const int size = 4;
  const int64_t count = 4099;
  std::vector<std::vector<float>> results(size);
  on_ranks(size, [&](Communicator& comm) {
    std::mt19937 rng(100 + comm.rank());
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> data(count);
    for (float& v : data) v = value(rng);
    ASSERT_TRUE(comm.all_reduce_now(data.data(), count, DType::kF32, ReduceOp::kSum).ok());
    results[comm.rank()] = data;
  });
  for (int r = 1; r < size; ++r) {
    ASSERT_EQ(results[r].size(), results[0].size());
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)), 0)
        << "rank " << r;
  }
}

TEST(GlooCommunicator, BadRequestsFailWithoutBreakingTheGroup) {
  on_ranks(2, [](Communicator& comm) {
    std::vector<uint16_t> bf16(4);
    EXPECT_FALSE(comm.supports(DType::kBF16));
    const absl::Status refused = comm.all_reduce_now(bf16.data(), 4, DType::kBF16, ReduceOp::kSum);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find("bf16"), std::string::npos) << refused;
    std::vector<float> data(3);
    const absl::Status root = comm.broadcast_now(data.data(), 3, DType::kF32, 2);
    EXPECT_EQ(root.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(root.message().find("no rank 2"), std::string::npos) << root;
    // The group still works.
    check_all_reduce<float>(comm, DType::kF32, 8);
  });
}

TEST(GlooCommunicator, BadOptionsAreRefused) {
  StoreDirectory store;
  EXPECT_EQ(connect_gloo(options_for(2, 2, store)).status().code(),
            absl::StatusCode::kInvalidArgument);
  GlooOptions no_store = options_for(0, 1, store);
  no_store.store_directory.clear();
  const absl::Status status = connect_gloo(no_store).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rendezvous directory"), std::string::npos) << status;
}

TEST(GlooCommunicator, ARankThatNeverJoinsMakesTheOthersFailWithinTheTimeout) {
  StoreDirectory store;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      connect_gloo(options_for(0, 2, store, milliseconds(1500)));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(comm.status().message().find("rank 0 of 2"), std::string::npos) << comm.status();
  EXPECT_LT(waited, std::chrono::seconds(30));
}

TEST(GlooCommunicator, ARankThatLeavesMakesTheOthersCollectivesFail) {
  StoreDirectory store;
  // Rank 1 leaves once rank 0 has joined (had it left while rank 0 was still connecting, rank
  // 0's join would fail instead, naming the closed connection).
  std::promise<void> joined;
  std::thread leaver([&, left = joined.get_future()] {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        connect_gloo(options_for(1, 2, store, milliseconds(5000)));
    EXPECT_TRUE(comm.ok()) << comm.status();
    left.wait();
    // Leaves without another collective: its connections close.
  });
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      connect_gloo(options_for(0, 2, store, milliseconds(5000)));
  joined.set_value();
  leaver.join();
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(1 << 16, 1.0f);
  const absl::Status failed =
      (*comm)->all_reduce_now(data.data(), 1 << 16, DType::kF32, ReduceOp::kSum);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failed.message().find("rank 0 of 2"), std::string::npos) << failed;
  // Broken: a later collective fails the same way, without waiting for the timeout again.
  const absl::Status later = (*comm)->broadcast_now(data.data(), 4, DType::kF32, 0);
  EXPECT_EQ(later, failed);
}

}  // namespace
}  // namespace ampc::runtime::comm
