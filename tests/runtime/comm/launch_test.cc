// Joining a group the way launchers start ranks: the TCP rendezvous store
// (runtime/comm/tcp_store.h) and the torchrun / Open MPI environment (runtime/comm/launch.h).
// Ranks are threads of this process; the store serves on the loopback at a free port.
#include "runtime/comm/launch.h"

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/comm/tcp_store.h"
#include "tests/runtime/comm/comm_test_util.h"
#include "tests/test_util.h"

namespace ampc::runtime::comm {
namespace {

using std::chrono::milliseconds;

std::vector<char> bytes(std::string_view text) { return {text.begin(), text.end()}; }

TEST(TcpStore, ClientsSeeEachOthersKeysAndAGetWaitsForItsSet) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto a = TcpStore::connect("127.0.0.1", port, milliseconds(5000));
  auto b = TcpStore::connect("localhost", port, milliseconds(5000));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  (*a)->set("x", bytes("first"));
  EXPECT_EQ((*b)->get("x"), bytes("first"));
  (*b)->set("x", bytes("second value"));
  EXPECT_EQ((*a)->get("x"), bytes("second value"));
  // b waits for a key a sets later.
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    (*a)->set("late", std::vector<char>(100000, 'z'));
  });
  EXPECT_EQ((*b)->get("late"), std::vector<char>(100000, 'z'));
  setter.join();
  (*a)->set("empty", {});
  (*b)->wait({"x", "late", "empty"});
  EXPECT_TRUE((*b)->get("empty").empty());
}

TEST(TcpStore, AKeyNobodySetsTimesOutNamingTheKeyAndTheAddress) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::start(0);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = TcpStore::connect("127.0.0.1", (*server)->port(), milliseconds(300));
  ASSERT_TRUE(client.ok()) << client.status();
  try {
    (*client)->get("never");
    ADD_FAILURE() << "no timeout";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'never'"), std::string::npos) << message;
    EXPECT_NE(message.find(str_cat("127.0.0.1:", (*server)->port())), std::string::npos) << message;
  }
}

TEST(TcpStore, AClientWaitsForTheServerToStartAndGivesUpAtItsTimeout) {
  const int port = testing::free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(300));
    server = *TcpStoreServer::start(port);
  });
  auto client = TcpStore::connect("127.0.0.1", port, milliseconds(10000));
  late.join();
  EXPECT_TRUE(client.ok()) << client.status();

  const int nobody = testing::free_port();
  auto alone = TcpStore::connect("127.0.0.1", nobody, milliseconds(200));
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(alone.status().message().find(str_cat("127.0.0.1:", nobody)), std::string::npos)
      << alone.status();
}

// ---- The launchers' environment ----------------------------------------------------------------

EnvironmentReader reader(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](const char* name) -> const char* {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  };
}

TEST(RankEnvironment, ReadsTorchrunsVariables) {
  auto env = read_rank_environment(reader({{"RANK", "3"},
                                           {"WORLD_SIZE", "8"},
                                           {"LOCAL_RANK", "1"},
                                           {"MASTER_ADDR", "10.0.0.7"},
                                           {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->launcher, "torchrun");
  EXPECT_EQ((*env)->rank, 3);
  EXPECT_EQ((*env)->size, 8);
  EXPECT_EQ((*env)->local_rank, 1);
  EXPECT_EQ((*env)->master_addr, "10.0.0.7");
  EXPECT_EQ((*env)->master_port, 29500);
}

TEST(RankEnvironment, ReadsOpenMpisVariablesWithAStoreDirectory) {
  auto env = read_rank_environment(reader({{"OMPI_COMM_WORLD_RANK", "1"},
                                           {"OMPI_COMM_WORLD_SIZE", "2"},
                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                           {"AMPC_STORE_DIR", "/shared/run7"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->launcher, "Open MPI");
  EXPECT_EQ((*env)->rank, 1);
  EXPECT_EQ((*env)->size, 2);
  EXPECT_EQ((*env)->store_directory, "/shared/run7");
}

TEST(RankEnvironment, NoVariablesMeanOneProcess) {
  auto env = read_rank_environment(reader({{"MASTER_ADDR", "x"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->has_value());
}

TEST(RankEnvironment, MissingOrMalformedVariablesAreNamed) {
  struct Case {
    std::map<std::string, std::string> variables;
    std::string expected;
  };
  const Case cases[] = {
      {{{"RANK", "0"}}, "sets RANK but not WORLD_SIZE"},
      {{{"WORLD_SIZE", "2"}}, "sets WORLD_SIZE but not RANK"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "RANK=2 is not a rank of WORLD_SIZE=2"},
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one' is not an integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "set MASTER_ADDR and MASTER_PORT"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "MASTER_PORT='70000' is not an integer in [1, 65535]"},
  };
  for (const Case& c : cases) {
    auto env = read_rank_environment(reader(c.variables));
    ASSERT_FALSE(env.ok()) << c.expected;
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(env.status().message().find(c.expected), std::string::npos) << env.status();
  }
}

// Four ranks started with torchrun's variables meet through rank 0's TCP store and reduce.
TEST(RankEnvironment, RanksStartedLikeTorchrunFormAGroupThroughTheTcpStore) {
  const int size = 4;
  const std::string port = std::to_string(testing::free_port());
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      auto env = read_rank_environment(reader({{"RANK", std::to_string(rank)},
                                               {"WORLD_SIZE", std::to_string(size)},
                                               {"LOCAL_RANK", std::to_string(rank)},
                                               {"MASTER_ADDR", "127.0.0.1"},
                                               {"MASTER_PORT", port}}));
      ASSERT_TRUE(env.ok() && env->has_value()) << env.status();
      absl::StatusOr<std::unique_ptr<Communicator>> group =
          connect_rank(**env, milliseconds(30000));
      ASSERT_TRUE(group.ok()) << group.status();
      std::vector<int64_t> value = {rank + 1, 10};
      ASSERT_TRUE((*group)->all_reduce_now(value.data(), 2, DType::kI64, ReduceOp::kSum).ok());
      EXPECT_EQ(value, (std::vector<int64_t>{1 + 2 + 3 + 4, 40}));
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

TEST(RankEnvironment, ARankWhoseStoreNeverAppearsFailsWithinTheTimeout) {
  RankEnvironment env;
  env.rank = 1;
  env.size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = testing::free_port();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Communicator>> group = connect_rank(env, milliseconds(500));
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("rank 1 of 2"), std::string::npos) << group.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(RankEnvironment, AnUnknownEngineIsRefused) {
  testing::StoreDirectory store;
  RankEnvironment env;
  env.store_directory = store.path();
  absl::StatusOr<std::unique_ptr<Communicator>> group = connect_rank(env, milliseconds(500), "mpi");
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(group.status().message().find("no communicator engine 'mpi'"), std::string::npos)
      << group.status();
}

// Where NCCL cannot run (no GPU here, or no CUDA in this build), every rank of a NCCL group fails
// with a message naming it, and none waits for the others: rank 0 sends its failure with the id.
// (tests/gpu/nccl_communicator_test.cc forms NCCL groups where a GPU is.)
TEST(RankEnvironment, NcclWithoutAGpuFailsOnEveryRankNamingIt) {
  if (testing::cuda_device_present()) GTEST_SKIP() << "a GPU is here: NCCL can form the group";
  testing::StoreDirectory store;
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> ranks;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RankEnvironment env;
      env.rank = rank;
      env.size = 2;
      env.store_directory = store.path();
      statuses[rank] = connect_rank(env, milliseconds(30000), "nccl").status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(statuses[rank].ok());
    EXPECT_NE(statuses[rank].message().find(str_cat("rank ", rank, " of 2")), std::string::npos)
        << statuses[rank];
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

}  // namespace
}  // namespace ampc::runtime::comm
