// Which rank this process is, read from the environment the launchers people already use set:
//
//   torchrun (and `ampc train --nproc`): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   Open MPI's mpirun:                   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                                        OMPI_COMM_WORLD_LOCAL_RANK
//
// The ranks meet through the TCP store rank 0 serves at MASTER_ADDR:MASTER_PORT (mpirun does not
// set them: export them to every rank, as PyTorch asks too), or through files in AMPC_STORE_DIR
// when that is set (a directory every rank can reach, empty when the group forms).
// GLOO_SOCKET_IFNAME (PyTorch's name) picks the network interface the ranks' connections use;
// without it they use this machine's host name, or the loopback when the store is local.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ampc/status.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime::comm {

struct RankEnvironment {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  std::string launcher;  // "torchrun" or "Open MPI", for messages
  std::string master_addr;
  int master_port = 0;
  std::string store_directory;  // AMPC_STORE_DIR
  std::string interface;        // GLOO_SOCKET_IFNAME
};

// Reads a variable: null when unset. (std::getenv, or a map in tests.)
using EnvironmentReader = std::function<const char*(const char* name)>;

// The rank this environment describes; nullopt when it names no group (a single process). A
// Status names the variable that is missing or malformed.
absl::StatusOr<std::optional<RankEnvironment>> read_rank_environment(const EnvironmentReader& read);

// Joins the group `env` describes: through Gloo, or with `engine` "nccl" through NCCL on GPU
// `env.local_rank` (formed over a Gloo group, which also carries the host-memory collectives;
// runtime/cuda/nccl_communicator.h). NCCL fails with a message where ampc was built without CUDA
// or the GPU is missing.
absl::StatusOr<std::unique_ptr<Communicator>> connect_rank(const RankEnvironment& env,
                                                           std::chrono::milliseconds timeout,
                                                           std::string_view engine = "gloo");

// A group of one rank, this process, through `engine` (as connect_rank), met in a fresh
// temporary directory that is removed once the group is formed: a session given it trains
// data-parallel through the communicator, for measuring what the communicator costs.
absl::StatusOr<std::unique_ptr<Communicator>> connect_alone(std::string_view engine,
                                                            std::chrono::milliseconds timeout);

}  // namespace ampc::runtime::comm
