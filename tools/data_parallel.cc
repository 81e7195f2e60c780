// Data-parallel `ampc train`; tools/data_parallel.h.
#include "tools/data_parallel.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <thread>

#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "runtime/comm/launch.h"

extern char** environ;

namespace {
// A stop signal (SIGINT, SIGTERM, SIGHUP) the launcher received and has not passed on yet.
std::atomic<int> launcher_signal{0};
}  // namespace

extern "C" void on_launcher_signal(int signal) { launcher_signal.store(signal); }

namespace ampc {
namespace {

// This process's command line, from /proc/self/cmdline.
std::vector<std::string> own_arguments() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> arguments;
  std::string current;
  for (char c : all) {
    if (c == '\0') {
      arguments.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  return arguments;
}

// `arguments` without `--nproc N` / `--nproc=N`.
std::vector<std::string> without_nproc(const std::vector<std::string>& arguments) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (arguments[i].starts_with("--nproc=")) continue;
    kept.push_back(arguments[i]);
  }
  return kept;
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return str_cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str_cat("was killed by SIG", sigabbrev_np(WTERMSIG(status)));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int run_local_ranks(int nproc) {
  const absl::StatusOr<std::string> made = make_temporary_directory("ampc_ranks_");
  if (!made.ok()) {
    std::cerr << "ampc: error: --nproc: a rendezvous directory: " << made.status().message()
              << "\n";
    return 1;
  }
  const std::string store = *made;
  const std::vector<std::string> arguments = without_nproc(own_arguments());
  // The ranks run in process groups of their own and end with the launcher, so a stop signal
  // reaches them once, through the launcher, whether it came from the terminal (Ctrl-C) or was
  // sent to the launcher alone (a scheduler, kill, a hang-up); each rank then stops after its
  // step and saves its checkpoint, as one `ampc train` does.
  const pid_t launcher = getpid();
  constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
  for (int signal : kStopSignals) std::signal(signal, on_launcher_signal);
  std::vector<pid_t> ranks(nproc, -1);
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::cerr << "ampc: error: --nproc: cannot start rank " << rank << ": "
                << std::strerror(errno) << "\n";
      for (pid_t started : ranks) {
        if (started > 0) kill(started, SIGTERM);
      }
      break;
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(128 + SIGTERM);  // it ended before prctl
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("AMPC_STORE_DIR", store.c_str(), 1);
      std::vector<char*> argv;
      for (const std::string& argument : arguments)
        argv.push_back(const_cast<char*>(argument.c_str()));
      argv.push_back(nullptr);
      execve("/proc/self/exe", argv.data(), environ);
      std::cerr << "ampc: error: --nproc: cannot run rank " << rank << ": " << std::strerror(errno)
                << "\n";
      _exit(127);
    }
    ranks[rank] = pid;
  }
  // Waits for every rank, passing stop signals on; after the first failure the others are asked
  // to stop (SIGTERM), and each rank that failed on its own is named. Polled, so that a signal
  // that arrives between two checks is not left waiting for a rank to end.
  int result = 0;
  int running = 0;
  for (pid_t pid : ranks) running += pid > 0 ? 1 : 0;
  if (running < nproc) result = 1;
  std::vector<bool> stopped(nproc, false);
  int passed_on = 0;  // the last stop signal passed on to the ranks
  std::vector<std::string> failures;
  while (running > 0) {
    if (const int signal = launcher_signal.exchange(0); signal != 0) {
      passed_on = signal;
      if (result == 0) result = 128 + signal;
      for (pid_t pid : ranks) {
        if (pid > 0) kill(pid, signal);
      }
    }
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done == 0 || (done < 0 && errno == EINTR)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (done < 0) break;
    const auto it = std::find(ranks.begin(), ranks.end(), done);
    if (it == ranks.end()) continue;
    const int rank = static_cast<int>(it - ranks.begin());
    ranks[rank] = -1;
    --running;
    if (exit_code(status) == 0) continue;
    const bool asked = (stopped[rank] && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
                       (passed_on != 0 && exit_code(status) == 128 + passed_on);
    if (!asked) {
      failures.push_back(str_cat("rank ", rank, " of ", nproc, " ", describe_exit(status)));
    }
    if (result != 0) continue;
    result = exit_code(status);
    for (int other = 0; other < nproc; ++other) {
      if (ranks[other] > 0) {
        kill(ranks[other], SIGTERM);
        stopped[other] = true;
      }
    }
  }
  for (int signal : kStopSignals) std::signal(signal, SIG_DFL);
  for (const std::string& failure : failures) std::cerr << "ampc: error: " << failure << "\n";
  std::error_code ignored;
  std::filesystem::remove_all(store, ignored);
  return result;
}

absl::StatusOr<std::optional<RankGroup>> join_launched_group(int64_t timeout_seconds,
                                                             std::string_view engine) {
  AMPC_ASSIGN_OR_RETURN(
      std::optional<runtime::comm::RankEnvironment> env,
      runtime::comm::read_rank_environment([](const char* name) { return std::getenv(name); }));
  if (!env || env->size == 1) return std::optional<RankGroup>();
  AMPC_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::comm::Communicator> communicator,
      runtime::comm::connect_rank(*env, std::chrono::seconds(timeout_seconds), engine));
  RankGroup group;
  group.rank = env->rank;
  group.size = env->size;
  group.local_rank = env->local_rank;
  group.communicator = std::move(communicator);
  return std::optional<RankGroup>(std::move(group));
}

absl::StatusOr<runtime::BatchData> load_global_batches(const std::string& path,
                                                       std::vector<runtime::TensorInfo> inputs,
                                                       int ranks) {
  const int64_t rows =
      inputs.empty() || inputs.front().type.shape.empty() ? 0 : inputs.front().type.shape.front();
  for (runtime::TensorInfo& input : inputs) {
    if (input.type.shape.empty()) {
      return absl::InvalidArgumentError(str_cat(
          "input '", input.name, "' has no batch dimension to share between ", ranks, " ranks"));
    }
    input.type.shape[0] *= ranks;
  }
  absl::StatusOr<runtime::BatchData> data = runtime::BatchData::load(path, inputs);
  if (data.ok()) return data;
  return absl::Status(
      data.status().code(),
      str_cat(data.status().message(), " (with ", ranks,
              " ranks, each batch of --data is a global batch of ", ranks, " x the model's ", rows,
              " rows, and rank r takes rows ", rows, "r to ", rows, "r+", rows - 1, ")"));
}

std::map<std::string, Tensor> shard(const std::map<std::string, Tensor>& batch, int rank,
                                    int ranks) {
  std::map<std::string, Tensor> part;
  for (const auto& [name, tensor] : batch) {
    Shape shape = tensor.shape();
    const int64_t rows = shape[0] / ranks;
    const std::span<const uint8_t> bytes = tensor.bytes();
    const int64_t row_bytes = shape[0] == 0 ? 0 : static_cast<int64_t>(bytes.size()) / shape[0];
    shape[0] = rows;
    const int64_t first = rank * rows * row_bytes;
    part.emplace(name, Tensor(TensorType{tensor.dtype(), shape},
                              std::vector<uint8_t>(bytes.begin() + first,
                                                   bytes.begin() + first + rows * row_bytes)));
  }
  return part;
}

}  // namespace ampc
