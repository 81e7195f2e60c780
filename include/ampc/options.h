// How a session runs: the device and the options every session takes.
//
// Part of ampc's public API (installed under <prefix>/include/ampc/, docs/runtime-api.md).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "ampc/dtype.h"

namespace ampc {

namespace runtime::comm {
class Communicator;  // a data-parallel group (runtime/comm/communicator.h, not installed yet)
}  // namespace runtime::comm

enum class Device { kCpu, kCuda };
std::string_view device_name(Device device);
// "cpu" or "cuda" (case-sensitive, as the CLI spells them).
absl::StatusOr<Device> parse_device(std::string_view name);

struct SessionOptions {
  // The backend the session runs on. A graph with a node that has no kernel on it fails to load,
  // naming the node, the op and the dtype.
  Device device = Device::kCpu;
  // Which GPU, for Device::kCuda.
  int device_index = 0;
  // f32 MatMul, Gemm and Conv may use TF32 tensor cores on CUDA (10 mantissa bits per product
  // instead of 23); off by default, as in PyTorch. The CPU backend ignores it.
  bool allow_tf32 = false;
  // Fixes symbolic input dimensions, as `--shape NAME:8x3x32x32` does for `ampc compile`...
  std::map<std::string, Shape, std::less<>> shapes = {};
  // ... and every input dim of a name, as `--dim batch=32` does.
  std::map<std::string, int64_t, std::less<>> dims = {};
  // The shapes of the arrays the session will run on, by input name: they fix the dims the file
  // leaves dynamic that `shapes` and `dims` do not (`ampc run` passes its inputs' shapes).
  std::map<std::string, Shape, std::less<>> data_shapes = {};
  // Reuse activation memory between values whose lifetimes do not overlap (on by default; off
  // gives every value its own buffer, for debugging).
  bool reuse_memory = true;
  // After each node, fill the buffers of values no later node reads with a NaN pattern, so a
  // planning error shows up as wrong results instead of passing silently. For tests.
  bool poison_freed_buffers = false;
  // After each node, check its float outputs for inf and NaN; the first one found fails run()
  // with the node's name and op, the output's dtype and the first bad element, and the range of
  // each float input (`ampc train --check-numerics`). Costs a pass over every output. State
  // updates are then not written over their state (as with update_state_in_place false), so a
  // run it stops leaves the state as it was.
  bool check_numerics = false;
  // Write each state update over its state where the planner can; false keeps every update
  // apart and copies it over its state after the run (for tests and debugging).
  bool update_state_in_place = true;
  // On CUDA, record the first run as a CUDA graph and replay it (`ampc train --cuda-graph`, on by
  // default there for one process: bit for bit the run without, on an H200 since 2026-12-01).
  bool cuda_graph = false;
  // Data-parallel training (TrainingSession): this rank's group (Gloo, or NCCL for a cuda
  // session). The step averages its gradients and its logged loss over the group (a group of one
  // included: then it is the single rank's step, bit for bit), and the session starts from rank
  // 0's state (docs/distributed.md). Null: one rank, no communicator.
  std::shared_ptr<runtime::comm::Communicator> communicator = nullptr;
  // With more than one rank: BatchNorm's batch statistics over every rank's shard together
  // (SyncBatchNorm; the group trains as one rank with the whole batch would), or false: each
  // rank's own (`ampc train --local-batch-norm`).
  bool sync_batch_norm = true;
  // With more than one rank: ZeRO stage 1 (`ampc train --shard-optimizer`). Each rank keeps and
  // updates one block of every optimizer moment, and of the f32 master weights of every
  // parameter the forward reads only in f16 or bf16 (through a persistent copy in that dtype);
  // checkpoints hold the whole state, so a resume may change the number of ranks.
  bool shard_optimizer = false;
};

// A named graph input or output and its type.
struct TensorInfo {
  std::string name;
  TensorType type;
};

}  // namespace ampc
