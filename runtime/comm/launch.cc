// The launchers' environment; runtime/comm/launch.h.
#include "runtime/comm/launch.h"

#include <charconv>
#include <filesystem>
#include <string_view>

#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "runtime/comm/gloo_communicator.h"
#include "runtime/cuda_library.h"

namespace ampc::runtime::comm {
namespace {

// Variable `name` as an integer in [low, high]; nullopt when unset.
absl::StatusOr<std::optional<int>> read_int(const EnvironmentReader& read, const char* name,
                                            int low, int high) {
  const char* text = read(name);
  if (text == nullptr) return std::optional<int>();
  const std::string_view view(text);
  int value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (error != std::errc() || end != view.data() + view.size() || value < low || value > high) {
    return absl::InvalidArgumentError(str_cat("environment variable ", name, "='", view,
                                              "' is not an integer in [", low, ", ", high, "]"));
  }
  return std::optional<int>(value);
}

}  // namespace

absl::StatusOr<std::optional<RankEnvironment>> read_rank_environment(
    const EnvironmentReader& read) {
  struct Names {
    const char* launcher;
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  constexpr Names kLaunchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
  };
  for (const Names& names : kLaunchers) {
    if (read(names.rank) == nullptr && read(names.size) == nullptr) continue;
    constexpr int kMaxRanks = 1 << 20;
    AMPC_ASSIGN_OR_RETURN(const std::optional<int> size, read_int(read, names.size, 1, kMaxRanks));
    AMPC_ASSIGN_OR_RETURN(const std::optional<int> rank, read_int(read, names.rank, 0, kMaxRanks));
    if (!size || !rank) {
      return absl::InvalidArgumentError(
          str_cat("the environment sets ", size ? names.size : names.rank, " but not ",
                  size ? names.rank : names.size, " (", names.launcher, "'s variables)"));
    }
    if (*rank >= *size) {
      return absl::InvalidArgumentError(
          str_cat(names.rank, "=", *rank, " is not a rank of ", names.size, "=", *size));
    }
    AMPC_ASSIGN_OR_RETURN(const std::optional<int> local,
                          read_int(read, names.local_rank, 0, kMaxRanks));
    RankEnvironment env;
    env.launcher = names.launcher;
    env.rank = *rank;
    env.size = *size;
    env.local_rank = local.value_or(0);
    if (const char* iface = read("GLOO_SOCKET_IFNAME"); iface != nullptr) env.interface = iface;
    if (const char* dir = read("AMPC_STORE_DIR"); dir != nullptr && *dir != '\0') {
      env.store_directory = dir;
    } else if (env.size > 1) {
      const char* addr = read("MASTER_ADDR");
      AMPC_ASSIGN_OR_RETURN(const std::optional<int> port, read_int(read, "MASTER_PORT", 1, 65535));
      if (addr == nullptr || *addr == '\0' || !port) {
        return absl::InvalidArgumentError(str_cat(
            "rank ", env.rank, " of ", env.size, " (", names.launcher,
            "): set MASTER_ADDR and MASTER_PORT (where rank 0 serves the rendezvous store), or "
            "AMPC_STORE_DIR (a directory every rank can reach)"));
      }
      env.master_addr = addr;
      env.master_port = *port;
    }
    return std::optional<RankEnvironment>(std::move(env));
  }
  return std::optional<RankEnvironment>();
}

absl::StatusOr<std::unique_ptr<Communicator>> connect_rank(const RankEnvironment& env,
                                                           std::chrono::milliseconds timeout,
                                                           std::string_view engine) {
  if (engine != "gloo" && engine != "nccl") {
    return absl::InvalidArgumentError(
        str_cat("no communicator engine '", engine, "' (gloo or nccl)"));
  }
  GlooOptions options;
  options.rank = env.rank;
  options.size = env.size;
  options.store_directory = env.store_directory;
  options.master_addr = env.master_addr;
  options.master_port = env.master_port;
  options.interface = env.interface;
  options.timeout = timeout;
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host_group, connect_gloo(options));
  if (engine == "gloo") return host_group;
  const absl::StatusOr<const CudaLibrary*> cuda = cuda_library();
  if (!cuda.ok()) {
    return absl::Status(cuda.status().code(),
                        str_cat("rank ", env.rank, " of ", env.size,
                                ": NCCL needs the CUDA backend: ", cuda.status().message(),
                                "; use the gloo communicator"));
  }
  return (*cuda)->connect_nccl(std::move(host_group), env.local_rank, timeout);
}

absl::StatusOr<std::unique_ptr<Communicator>> connect_alone(std::string_view engine,
                                                            std::chrono::milliseconds timeout) {
  absl::StatusOr<std::string> store = make_temporary_directory("ampc_group_");
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        str_cat("a group of one rank: ", store.status().message()));
  }
  RankEnvironment env;
  env.store_directory = *store;
  absl::StatusOr<std::unique_ptr<Communicator>> group = connect_rank(env, timeout, engine);
  std::error_code ignored;
  std::filesystem::remove_all(*store, ignored);
  return group;
}

}  // namespace ampc::runtime::comm
