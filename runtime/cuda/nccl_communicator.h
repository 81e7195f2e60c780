// The NCCL communicator: collectives between GPUs (one per rank) through NCCL, over NVLink,
// PCIe, InfiniBand or sockets, whichever NCCL finds between the ranks.
//
// It is formed over a host group (Gloo, gloo_communicator.h), which carries NCCL's bootstrap
// (rank 0's ncclUniqueId, broadcast to every rank) and, afterwards, every collective on host
// memory: a collective on device memory runs on NCCL, one on host memory on the host group
// (the start-up checks, the state broadcast and the evaluation's sums are host-side). So one
// communicator serves the whole session, and `engine()` is "nccl".
//
// Two ways to queue a device collective:
//   - the Communicator calls return a Work; they run on the communicator's own stream, and
//     wait() polls it until the collective finished, failed, or outlasted the timeout;
//   - the `*_on(stream, ...)` calls queue on the caller's stream, and no host thread waits for
//     them: the CUDA kernels of ampc.AllReduce and the sharded optimizer's collectives queue on
//     communication_stream() after making it wait for the backend's stream (and join it back
//     with an event), so all of a rank's NCCL collectives run on one stream, in the order every
//     rank queued them.
// A watchdog thread checks NCCL's asynchronous error state and the collectives queued on
// streams: a peer that failed or a collective that outlasts the timeout aborts the NCCL
// communicator (its kernels return, so no stream is left hanging), and health() and every later
// call fail with a Status naming this rank, the group and the collective.
#pragma once

#include <chrono>
#include <memory>

#include "ampc/status.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime::cuda {

// NCCL's version (ncclGetVersion's code: 22809 for 2.28.9), loading NCCL on the first call; an
// error when it cannot be loaded. ampc loads NCCL (runtime/cuda/nccl_library.h) only when the
// first NCCL communicator is made or this is called, so that a process that loads ampc before
// PyTorch keeps PyTorch's own NCCL.
absl::StatusOr<int> nccl_version();
// Whether a libnccl is mapped into this process.
bool nccl_loaded_in_process();

struct NcclOptions {
  // The GPU this rank uses (its local rank on its machine); the sessions given this communicator
  // must run on it.
  int device = 0;
  // How long a collective may take before the rank gives up.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

class NcclCommunicator final : public comm::Communicator {
 public:
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string_view engine() const override { return "nccl"; }
  // On device memory: f32, f64, f16, bf16, i32, i64, i8, u8 (NCCL's types); on host memory, the
  // host group's.
  bool supports(DType dtype) const override;
  absl::Status health() const override;
  // The watchdog follows the work queued on `stream` so far: a replayed CUDA graph holding this
  // communicator's collectives gets the timeout too.
  absl::Status follow(void* stream, std::string_view what) override;

  std::unique_ptr<comm::Work> all_reduce(void* data, int64_t count, DType dtype,
                                         comm::ReduceOp op) override;
  std::unique_ptr<comm::Work> broadcast(void* data, int64_t count, DType dtype, int root) override;
  std::unique_ptr<comm::Work> all_gather(const void* send, void* gathered, int64_t count,
                                         DType dtype) override;
  std::unique_ptr<comm::Work> reduce_scatter(const void* send, void* received, int64_t count,
                                             DType dtype, comm::ReduceOp op) override;

  // Queue on `stream` (a cudaStream_t on device()); the buffers are device memory. An error
  // only when the collective could not be queued (a failed communicator, a refused type).
  absl::Status all_reduce_on(void* stream, void* data, int64_t count, DType dtype,
                             comm::ReduceOp op);
  absl::Status reduce_scatter_on(void* stream, const void* send, void* received, int64_t count,
                                 DType dtype, comm::ReduceOp op);
  absl::Status all_gather_on(void* stream, const void* send, void* gathered, int64_t count,
                             DType dtype);

  int device() const;
  // The stream the Work calls queue on: a cudaStream_t on device(), for collectives that
  // overlap the backend's stream (joined to it with events).
  void* communication_stream() const;

  struct State;

 private:
  NcclCommunicator(int rank, int size, std::unique_ptr<State> state);
  friend absl::StatusOr<std::unique_ptr<comm::Communicator>> connect_nccl(
      std::unique_ptr<comm::Communicator> host_group, const NcclOptions& options);

  std::unique_ptr<State> state_;
};

// Forms the NCCL group of `host_group`'s ranks on `options.device`. Fails, naming this rank,
// when there is no such GPU, when NCCL cannot form the group, or when rank 0 could not make the
// group's id (every rank then fails).
absl::StatusOr<std::unique_ptr<comm::Communicator>> connect_nccl(
    std::unique_ptr<comm::Communicator> host_group, const NcclOptions& options);

}  // namespace ampc::runtime::cuda
