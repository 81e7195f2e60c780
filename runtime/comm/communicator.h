// Collective communication between the ranks of a data-parallel run.
//
// A Communicator joins the `size()` ranks of one group (one process each) and runs collectives
// over memory of the rank's backend: all-reduce (sum, max), broadcast, all-gather and
// reduce-scatter. Each call queues its collective and returns a Work to wait on: Gloo
// (gloo_communicator.h) runs them on a worker thread of its own, NCCL on the backend's stream.
// Collectives run in the order they were queued, and every rank must queue the same sequence
// (same kinds, counts, types and roots); the buffers must stay valid, and unread and unwritten by
// anyone else, until their Work is waited on.
//
// Results are the same bits on every rank. Sums run in the element type (f32 gradients are summed
// in f32), in an order fixed by the group's size, not by timing.
//
// A failure (a peer that closed its connection or died, a collective that outlasted the timeout)
// fails that Work and every later one with a Status that says which rank saw what; the
// communicator cannot be used after that.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "ampc/dtype.h"
#include "ampc/status.h"

namespace ampc::runtime::comm {

enum class ReduceOp { kSum, kMax };

std::string_view reduce_op_name(ReduceOp op);

// A queued collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished on this rank; its outcome.
  virtual absl::Status wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "gloo" or "nccl".
  virtual std::string_view engine() const = 0;
  // Whether the engine reduces `dtype` (every engine: f32, f64, f16, i32, i64, u8).
  virtual bool supports(DType dtype) const = 0;
  // Ok while the communicator works; else the failure that broke it (a collective that failed
  // or outlasted the timeout, found by the engine, not only by a wait).
  virtual absl::Status health() const { return absl::OkStatus(); }
  // For engines whose collectives run on a device stream: `what`, the work queued on `stream`
  // (a cudaStream_t) so far, must finish within the timeout, else the communicator fails (a
  // replayed CUDA graph's collectives were queued without a call to follow). Else ignored.
  virtual absl::Status follow(void* /*stream*/, std::string_view /*what*/) {
    return absl::OkStatus();
  }

  // `data` (count elements) becomes the element-wise `op` of every rank's `data`.
  virtual std::unique_ptr<Work> all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  // `data` (count elements) becomes rank `root`'s.
  virtual std::unique_ptr<Work> broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // `gathered` (size() * count elements) receives rank r's `send` (count elements) at r * count.
  virtual std::unique_ptr<Work> all_gather(const void* send, void* gathered, int64_t count,
                                           DType dtype) = 0;
  // `send` holds size() * count elements; `received` (count elements) becomes the element-wise
  // `op` over the ranks of their block number rank().
  virtual std::unique_ptr<Work> reduce_scatter(const void* send, void* received, int64_t count,
                                               DType dtype, ReduceOp op) = 0;

  // The blocking forms: queue, then wait.
  absl::Status all_reduce_now(void* data, int64_t count, DType dtype, ReduceOp op) {
    return all_reduce(data, count, dtype, op)->wait();
  }
  absl::Status broadcast_now(void* data, int64_t count, DType dtype, int root) {
    return broadcast(data, count, dtype, root)->wait();
  }

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

}  // namespace ampc::runtime::comm
