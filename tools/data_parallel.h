// Data-parallel `ampc train`: starting local ranks (`--nproc N`), joining the group a launcher
// (torchrun, mpirun, --nproc) started this process in, and each rank's shard of a batch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ampc/status.h"
#include "ampc/tensor.h"
#include "runtime/batch_data.h"
#include "runtime/comm/communicator.h"
#include "runtime/session.h"

namespace ampc {

// Runs this command line again as `nproc` processes on this machine (without --nproc), as
// ranks 0 .. nproc-1 of one group meeting in a fresh temporary directory, and waits for them. A
// rank that fails makes the launcher stop the others (SIGTERM): the exit code is 0 when every
// rank succeeded, else the first failed rank's, after a message naming each rank that failed on
// its own. A stop signal (SIGINT, SIGTERM, SIGHUP) to the launcher is passed on to every rank,
// which saves its checkpoint and stops; the ranks end with the launcher (SIGTERM).
int run_local_ranks(int nproc);

// This process's rank, when a launcher's environment names one (runtime/comm/launch.h).
struct RankGroup {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // its place on this machine: the GPU it uses
  std::shared_ptr<runtime::comm::Communicator> communicator;
};
// `engine`: "gloo" or "nccl" (runtime/comm/launch.h's connect_rank).
absl::StatusOr<std::optional<RankGroup>> join_launched_group(int64_t timeout_seconds,
                                                             std::string_view engine);

// The batches of the data file `path` for `ranks` ranks of a model whose batch inputs are
// `inputs`: each batch is the global batch, each batch input's dim 0 times `ranks`, of which rank
// r takes rows r*B to r*B+B-1 (shard); an input without a batch dim cannot be sharded. An error
// about the file's shapes says so.
absl::StatusOr<runtime::BatchData> load_global_batches(const std::string& path,
                                                       std::vector<runtime::TensorInfo> inputs,
                                                       int ranks);

// Rank `rank` of `ranks`' rows of a global batch: rows r * B / N .. (r + 1) * B / N - 1.
std::map<std::string, Tensor> shard(const std::map<std::string, Tensor>& batch, int rank,
                                    int ranks);

}  // namespace ampc
