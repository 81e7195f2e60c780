// The NCCL communicator; runtime/cuda/nccl_communicator.h says what it does.
//
// NCCL runs in its default (blocking) mode: a call returns once its collective is queued on the
// stream. What may hang is the collective on the GPU, when a peer never joins it; the watchdog
// (or a Work's wait) finds that by its deadline and calls ncclCommAbort, which makes NCCL's
// kernels return, and the communicator's failure is kept for every later call. Forming the group
// (ncclCommInitRank) and the first collective, where NCCL connects to its peers, block on the
// host until the peers take part: the Gloo group formed first shows every rank is alive, and a
// rank that dies later is stopped by its launcher (`ampc train --nproc` and torchrun stop the
// other ranks when one fails).
#include "runtime/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>

#include "compiler/strings.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/nccl_library.h"

namespace ampc::runtime::cuda {
namespace {

// The NCCL functions, once connect_nccl has loaded them (every other caller runs after it).
const NcclLibrary& nccl() { return **nccl_library(); }

using Clock = std::chrono::steady_clock;

std::optional<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kI8:
      return ncclInt8;
    case DType::kU8:
      return ncclUint8;
    default:
      return std::nullopt;
  }
}

ncclRedOp_t nccl_op(comm::ReduceOp op) { return op == comm::ReduceOp::kSum ? ncclSum : ncclMax; }

// Whether `pointer` is memory the GPU addresses (device or managed), not host memory.
bool on_device(const void* pointer) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    (void)cudaGetLastError();  // a plain host pointer on an old driver: not an error to keep
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

class DoneWork final : public comm::Work {
 public:
  explicit DoneWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

// A collective queued on a stream that the watchdog watches: done when its event is.
struct Pending {
  cudaEvent_t event = nullptr;
  Clock::time_point deadline;
  std::string what;
};

struct NcclCommunicator::State {
  std::unique_ptr<comm::Communicator> host;  // the bootstrap and the host-memory collectives
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;  // the Work calls' stream
  std::chrono::milliseconds timeout{};
  std::string who;  // "rank r of n (nccl)", for messages

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Pending> pending;  // guarded by mutex
  absl::Status failure;         // guarded by mutex: the first failure
  bool aborted = false;         // guarded by mutex
  bool stopping = false;        // guarded by mutex
  std::thread watchdog;
  // Held shared by every NCCL call on `comm` and exclusively by the abort: in blocking mode NCCL
  // must not free the communicator under a call in progress. A call that blocks (NCCL connecting
  // to a peer that is gone) delays the abort, not the failure: later calls fail at once.
  std::shared_mutex calls;

  // Keeps `status` (the first failure) and aborts the NCCL communicator, now or (when a call is
  // in progress) at the watchdog's next look. Holds `mutex`.
  void fail_locked(absl::Status status) {
    if (failure.ok()) failure = std::move(status);
    abort_locked();
  }
  void abort_locked() {
    if (aborted || comm == nullptr || !calls.try_lock()) return;
    aborted = true;
    (void)nccl().ncclCommAbort(comm);
    calls.unlock();
  }

  // The failure NCCL reports asynchronously (a peer that failed), if any. Holds `mutex`.
  void check_async_locked() {
    if (aborted) return;
    ncclResult_t async = ncclSuccess;
    if (nccl().ncclCommGetAsyncError(comm, &async) != ncclSuccess) return;
    if (async == ncclSuccess || async == ncclInProgress) return;
    fail_locked(
        absl::UnavailableError(str_cat(who, ": NCCL failed: ", nccl().ncclGetErrorString(async),
                                       " (", nccl().ncclGetLastError(comm), ")")));
  }

  void watch() {
    (void)cudaSetDevice(device);
    std::unique_lock lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::milliseconds(50));
      if (!failure.ok()) {
        abort_locked();  // if a call was in progress before
        continue;
      }
      check_async_locked();
      while (failure.ok() && !pending.empty()) {
        Pending& oldest = pending.front();
        const cudaError_t done = cudaEventQuery(oldest.event);
        if (done == cudaSuccess) {
          (void)cudaEventDestroy(oldest.event);
          pending.pop_front();
          continue;
        }
        if (done != cudaErrorNotReady) {
          fail_locked(absl::Status(
              cuda_status(done, "cudaEventQuery").code(),
              str_cat(who, ": ", oldest.what, " failed on the GPU: ", cudaGetErrorString(done))));
        } else if (Clock::now() > oldest.deadline) {
          fail_locked(absl::DeadlineExceededError(
              str_cat(who, ": ", oldest.what, " did not finish within ", timeout.count(),
                      " ms (--comm-timeout): a rank stopped or never reached it")));
        }
        break;
      }
    }
  }

  absl::Status health() {
    std::lock_guard lock(mutex);
    return failure;
  }

  // Queues `collective` (an NCCL call on `on`) named `what`. Its end is followed through an
  // event: given to the caller in `done`, or (null) to the watchdog. An error when it could not
  // be queued. The mutex is not held during the call, which may block (NCCL connects to the
  // peers at the first collective), so that the watchdog can still abort.
  template <typename Call>
  absl::Status enqueue(cudaStream_t on, const std::string& what, Call&& collective,
                       cudaEvent_t* done) {
    ncclResult_t queued;
    {
      std::shared_lock calling(calls);
      if (absl::Status now = health(); !now.ok()) return now;
      queued = collective(on);
    }
    std::lock_guard lock(mutex);
    if (!failure.ok()) return failure;
    if (queued != ncclSuccess) {
      absl::Status error =
          absl::InternalError(str_cat(who, ": ", what, ": ", nccl().ncclGetErrorString(queued),
                                      " (", nccl().ncclGetLastError(comm), ")"));
      fail_locked(error);
      return error;
    }
    // Inside a CUDA graph's recording nothing runs yet: no event to follow (the watchdog still
    // sees NCCL's asynchronous errors when the graph runs).
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(on, &capturing) != cudaSuccess ||
        capturing != cudaStreamCaptureStatusNone) {
      return absl::OkStatus();
    }
    cudaEvent_t event = nullptr;
    AMPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    if (const cudaError_t recorded = cudaEventRecord(event, on); recorded != cudaSuccess) {
      (void)cudaEventDestroy(event);
      return cuda_status(recorded, "cudaEventRecord");
    }
    if (done != nullptr) {
      *done = event;  // the Work's wait follows it
    } else {
      pending.push_back({event, Clock::now() + timeout, what});
    }
    return absl::OkStatus();
  }

  // Gives the watchdog the work queued on `on` so far, named `what`, with the timeout.
  absl::Status follow(cudaStream_t on, std::string what) {
    cudaEvent_t event = nullptr;
    AMPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    if (const cudaError_t recorded = cudaEventRecord(event, on); recorded != cudaSuccess) {
      (void)cudaEventDestroy(event);
      return cuda_status(recorded, "cudaEventRecord");
    }
    std::lock_guard lock(mutex);
    pending.push_back({event, Clock::now() + timeout, std::move(what)});
    return failure;
  }
};

namespace {

// A collective on the communicator's own stream: wait() polls its event until it is done, the
// communicator failed, or the deadline passed (which aborts the communicator).
class NcclWork final : public comm::Work {
 public:
  NcclWork(NcclCommunicator::State& state, cudaEvent_t event, std::string what)
      : state_(state), event_(event), what_(std::move(what)) {}
  ~NcclWork() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }

  absl::Status wait() override {
    if (event_ == nullptr) return state_.health();
    const Clock::time_point deadline = Clock::now() + state_.timeout;
    while (true) {
      const cudaError_t done = cudaEventQuery(event_);
      if (done == cudaSuccess) break;
      if (done != cudaErrorNotReady) return cuda_status(done, str_cat(state_.who, ": ", what_));
      if (absl::Status health = state_.health(); !health.ok()) return health;
      if (Clock::now() > deadline) {
        std::lock_guard lock(state_.mutex);
        state_.fail_locked(absl::DeadlineExceededError(
            str_cat(state_.who, ": ", what_, " did not finish within ", state_.timeout.count(),
                    " ms (--comm-timeout): a rank stopped or never reached it")));
        return state_.failure;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    (void)cudaEventDestroy(event_);
    event_ = nullptr;
    return state_.health();
  }

 private:
  NcclCommunicator::State& state_;
  cudaEvent_t event_;
  std::string what_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(int rank, int size, std::unique_ptr<State> state)
    : Communicator(rank, size), state_(std::move(state)) {
  state_->watchdog = std::thread([s = state_.get()] { s->watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  (void)cudaSetDevice(state_->device);
  // Destroying a communicator under a running collective is undefined: what is queued on the
  // communication stream finishes first, under the watchdog, whose timeout aborts it instead.
  const absl::Status followed = state_->follow(state_->stream, "the collectives queued last");
  {
    std::unique_lock lock(state_->mutex);
    while (followed.ok() && state_->failure.ok() && !state_->pending.empty()) {
      state_->wake.wait_for(lock, std::chrono::milliseconds(10));
    }
    state_->stopping = true;
  }
  state_->wake.notify_all();
  state_->watchdog.join();
  bool aborted;
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->failure.ok()) state_->abort_locked();  // no call is in progress now
    aborted = state_->aborted;
    for (Pending& pending : state_->pending) {
      if (aborted) (void)cudaEventSynchronize(pending.event);  // aborted kernels return
      (void)cudaEventDestroy(pending.event);
    }
    state_->pending.clear();
  }
  if (!aborted) (void)nccl().ncclCommDestroy(state_->comm);
  (void)cudaStreamDestroy(state_->stream);
}

int NcclCommunicator::device() const { return state_->device; }

void* NcclCommunicator::communication_stream() const { return state_->stream; }

absl::Status NcclCommunicator::follow(void* stream, std::string_view what) {
  return state_->follow(static_cast<cudaStream_t>(stream), std::string(what));
}

bool NcclCommunicator::supports(DType dtype) const { return nccl_type(dtype).has_value(); }

absl::Status NcclCommunicator::health() const {
  if (absl::Status own = state_->health(); !own.ok()) return own;
  return state_->host->health();
}

namespace {

// One collective: its name for messages, its element type, and the NCCL call that queues it.
struct Collective {
  std::string what;
  DType dtype;
  std::function<ncclResult_t(ncclDataType_t, ncclComm_t, cudaStream_t)> call;
};

Collective all_reduce_of(void* data, int64_t count, DType dtype, comm::ReduceOp op) {
  return {str_cat("all-reduce (", comm::reduce_op_name(op), ") of ", count, " ", dtype_name(dtype)),
          dtype, [=](ncclDataType_t type, ncclComm_t comm, cudaStream_t on) {
            return nccl().ncclAllReduce(data, data, static_cast<size_t>(count), type, nccl_op(op),
                                        comm, on);
          }};
}

Collective broadcast_of(void* data, int64_t count, DType dtype, int root) {
  return {str_cat("broadcast from rank ", root, " of ", count, " ", dtype_name(dtype)), dtype,
          [=](ncclDataType_t type, ncclComm_t comm, cudaStream_t on) {
            return nccl().ncclBroadcast(data, data, static_cast<size_t>(count), type, root, comm,
                                        on);
          }};
}

Collective all_gather_of(const void* send, void* gathered, int64_t count, DType dtype) {
  return {str_cat("all-gather of ", count, " ", dtype_name(dtype)), dtype,
          [=](ncclDataType_t type, ncclComm_t comm, cudaStream_t on) {
            return nccl().ncclAllGather(send, gathered, static_cast<size_t>(count), type, comm, on);
          }};
}

Collective reduce_scatter_of(const void* send, void* received, int64_t count, DType dtype,
                             comm::ReduceOp op) {
  return {
      str_cat("reduce-scatter (", comm::reduce_op_name(op), ") of ", count, " ", dtype_name(dtype)),
      dtype, [=](ncclDataType_t type, ncclComm_t comm, cudaStream_t on) {
        return nccl().ncclReduceScatter(send, received, static_cast<size_t>(count), type,
                                        nccl_op(op), comm, on);
      }};
}

// Queues `collective` on `on`: an error when NCCL lacks its type or it could not be queued.
// With `done`, the caller follows its end through that event; else the watchdog does.
absl::Status queue(NcclCommunicator::State& state, cudaStream_t on, const Collective& collective,
                   cudaEvent_t* done) {
  const std::optional<ncclDataType_t> type = nccl_type(collective.dtype);
  if (!type) {
    return absl::InvalidArgumentError(str_cat(state.who, ": ", collective.what,
                                              ": NCCL has no element type ",
                                              dtype_name(collective.dtype)));
  }
  return state.enqueue(
      on, collective.what,
      [&](cudaStream_t stream) { return collective.call(*type, state.comm, stream); }, done);
}

// `collective` on the communicator's own stream, as a Work.
std::unique_ptr<comm::Work> queue_work(NcclCommunicator::State& state,
                                       const Collective& collective) {
  cudaEvent_t event = nullptr;
  absl::Status queued = queue(state, state.stream, collective, &event);
  if (!queued.ok()) return std::make_unique<DoneWork>(std::move(queued));
  return std::make_unique<NcclWork>(state, event, collective.what);
}

}  // namespace

std::unique_ptr<comm::Work> NcclCommunicator::all_reduce(void* data, int64_t count, DType dtype,
                                                         comm::ReduceOp op) {
  if (!on_device(data)) return state_->host->all_reduce(data, count, dtype, op);
  return queue_work(*state_, all_reduce_of(data, count, dtype, op));
}

std::unique_ptr<comm::Work> NcclCommunicator::broadcast(void* data, int64_t count, DType dtype,
                                                        int root) {
  if (!on_device(data)) return state_->host->broadcast(data, count, dtype, root);
  return queue_work(*state_, broadcast_of(data, count, dtype, root));
}

std::unique_ptr<comm::Work> NcclCommunicator::all_gather(const void* send, void* gathered,
                                                         int64_t count, DType dtype) {
  if (!on_device(gathered)) return state_->host->all_gather(send, gathered, count, dtype);
  return queue_work(*state_, all_gather_of(send, gathered, count, dtype));
}

std::unique_ptr<comm::Work> NcclCommunicator::reduce_scatter(const void* send, void* received,
                                                             int64_t count, DType dtype,
                                                             comm::ReduceOp op) {
  if (!on_device(received)) return state_->host->reduce_scatter(send, received, count, dtype, op);
  return queue_work(*state_, reduce_scatter_of(send, received, count, dtype, op));
}

absl::Status NcclCommunicator::all_reduce_on(void* stream, void* data, int64_t count, DType dtype,
                                             comm::ReduceOp op) {
  return queue(*state_, static_cast<cudaStream_t>(stream), all_reduce_of(data, count, dtype, op),
               nullptr);
}

absl::Status NcclCommunicator::reduce_scatter_on(void* stream, const void* send, void* received,
                                                 int64_t count, DType dtype, comm::ReduceOp op) {
  return queue(*state_, static_cast<cudaStream_t>(stream),
               reduce_scatter_of(send, received, count, dtype, op), nullptr);
}

absl::Status NcclCommunicator::all_gather_on(void* stream, const void* send, void* gathered,
                                             int64_t count, DType dtype) {
  return queue(*state_, static_cast<cudaStream_t>(stream),
               all_gather_of(send, gathered, count, dtype), nullptr);
}

absl::StatusOr<std::unique_ptr<comm::Communicator>> connect_nccl(
    std::unique_ptr<comm::Communicator> host_group, const NcclOptions& options) {
  AMPC_CHECK(host_group != nullptr);
  const int rank = host_group->rank();
  const int size = host_group->size();
  const std::string who = str_cat("rank ", rank, " of ", size, " (nccl)");
  // Every rank takes part in the id's broadcast whatever it finds here, so that a rank without
  // its GPU fails alone and rank 0's failure reaches the others instead of leaving them waiting.
  int devices = 0;
  absl::Status usable = cuda_status(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (usable.ok() && (options.device < 0 || options.device >= devices)) {
    usable = absl::InvalidArgumentError(
        str_cat("GPU ", options.device, " does not exist (this ", "machine has ", devices, ")"));
  }
  if (usable.ok()) usable = cuda_status(cudaSetDevice(options.device), "cudaSetDevice");
  if (usable.ok()) usable = nccl_library().status();
  // One flag byte (rank 0 made the id) and the id.
  std::array<uint8_t, 1 + sizeof(ncclUniqueId)> message{};
  ncclUniqueId id{};
  if (rank == 0 && usable.ok()) {
    const ncclResult_t made = nccl().ncclGetUniqueId(&id);
    if (made == ncclSuccess) {
      message[0] = 1;
      std::memcpy(message.data() + 1, &id, sizeof(id));
    } else {
      usable = absl::UnavailableError(str_cat("ncclGetUniqueId: ", nccl().ncclGetErrorString(made),
                                              " (", nccl().ncclGetLastError(nullptr), ")"));
    }
  }
  AMPC_RETURN_IF_ERROR(host_group->broadcast_now(
      message.data(), static_cast<int64_t>(message.size()), DType::kU8, 0));
  if (!usable.ok()) {
    return absl::Status(usable.code(),
                        str_cat(who, " on GPU ", options.device, ": ", usable.message()));
  }
  if (message[0] != 1) {
    return absl::UnavailableError(
        str_cat(who, ": rank 0 could not make the NCCL group's id (its own error says why)"));
  }
  std::memcpy(&id, message.data() + 1, sizeof(id));

  auto state = std::make_unique<NcclCommunicator::State>();
  state->host = std::move(host_group);
  state->device = options.device;
  state->timeout = options.timeout;
  state->who = who;
  const ncclResult_t formed = nccl().ncclCommInitRank(&state->comm, size, id, rank);
  if (formed != ncclSuccess) {
    return absl::UnavailableError(str_cat(who, " on GPU ", options.device,
                                          ": ncclCommInitRank: ", nccl().ncclGetErrorString(formed),
                                          " (", nccl().ncclGetLastError(nullptr), ")"));
  }
  if (const cudaError_t made = cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking);
      made != cudaSuccess) {
    (void)nccl().ncclCommDestroy(state->comm);
    return cuda_status(made, "cudaStreamCreateWithFlags");
  }
  return std::unique_ptr<comm::Communicator>(new NcclCommunicator(rank, size, std::move(state)));
}

}  // namespace ampc::runtime::cuda
