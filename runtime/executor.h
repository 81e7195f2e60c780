// The executor: runs a Plan on any Backend.
//
// It allocates one region per arena class on the backend, copies the initializers in, builds
// every step's KernelContext once (the arenas never move), makes the state of stateful kernels
// (KernelDef::init) and sizes the workspace arena for the largest need. A run launches the steps
// in plan order, then waits for the backend once and turns what a kernel recorded in the device
// error word into a Status naming the node (or leaves the waiting to a later finish(), so that
// a training loop runs step after step without the host waiting). Everything the sessions read or
// write goes through the backend's copies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "runtime/backend.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace ampc::runtime {

struct ExecutorOptions {
  // After each step, fill the buffers of values no later step reads with 0xff bytes (NaN in each
  // float type), so a planning error shows up as wrong results. For tests.
  bool poison_freed_buffers = false;
  // After each step, check its float outputs for inf and NaN (SessionOptions::check_numerics).
  // In a training step with loss scaling (a `found_inf` output), a non-finite value fails the
  // run only when the scaler did not handle it: when the step was not skipped, or when a state
  // update (such as BatchNorm's running statistics) is non-finite even so.
  bool check_numerics = false;
  // Initializers that live in another executor's memory on the same backend, by name: read
  // there, never copied in (Plan: PlanOptions::shared_initializers).
  std::map<std::string, std::byte*, std::less<>> shared_initializers = {};
  // Record the first run as a graph of the backend (a CUDA graph) and replay it on later runs:
  // one launch for every kernel. What changes between runs must be device memory the kernels
  // read (inputs, the random stream), which it is. Ignored with check_numerics and
  // poison_freed_buffers (they work between kernels) and on backends without graphs; a run the
  // backend cannot record runs as it is, and graph_status() says why.
  bool use_graph = false;
  // Time every step: wait for the device after each kernel and add the wall time from its launch
  // to its end to the step's total; on destruction, print the totals per op and the slowest
  // nodes to stderr. The waits make the run slower and keep graphs off: for finding where a
  // step's time goes, never for measuring it. On when the environment sets AMPC_PROFILE=1
  // (create() refuses a value other than 0 or 1).
  bool profile = false;
};

class Executor {
 public:
  // `graph` and `plan` must outlive the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> create(const Graph& graph, const Plan& plan,
                                                          std::shared_ptr<Backend> backend,
                                                          ExecutorOptions options = {});
  ~Executor();

  // Runs every step on the values bound so far, drawing random ops from `random_stream`, and
  // waits for them: launch() then finish().
  absl::Status run(uint64_t random_stream);
  // Queues every step without waiting for the device (the CPU runs them before it returns). A
  // kernel that fails when launched fails it; what kernels record in the device error word is
  // reported by finish(). With check_numerics it waits, as run() does.
  // `inside_window`: KernelContext::inside_window for this run (a graph with collectives marked
  // `window` records one CUDA graph for each).
  absl::Status launch(uint64_t random_stream, bool inside_window = false);
  // Waits for the work queued on the backend and turns the first data error recorded since the
  // last wait into a Status naming the node.
  absl::Status finish();

  // Copies host bytes (exactly the value's size) into the buffer of `value`.
  absl::Status write(const Value* value, std::span<const uint8_t> bytes);
  // Binds graph input `input` to memory the caller lends (host memory, on a backend that
  // reads_host_memory()): the kernels read it there, with no copy, until end_loans(). It must
  // hold the input's bytes, aligned to its element size, and must not be a graph output.
  void lend(const Value* input, const std::byte* data);
  // Binds a lent input, or every one, back to its own buffer (whose contents are then stale).
  void end_loan(const Value* input);
  void end_loans();
  // A host copy of the buffer of `value`.
  absl::StatusOr<Tensor> read(const Value* value) const;
  // Copies the buffer of `from` over the buffer of `to` (same byte size), on the device.
  absl::Status copy(const Value* from, const Value* to);

  Backend& backend() const { return *backend_; }
  // Whether runs replay a recorded graph; why not, when one was asked for and could not be made.
  bool uses_graph() const { return recorded_[0] != nullptr || recorded_[1] != nullptr; }
  const absl::Status& graph_status() const { return graph_status_; }
  // Where `value` lives on the device.
  std::byte* address_of(const Value* value) const { return address(value); }
  // Bytes allocated on the device for each arena class.
  int64_t arena_bytes(ArenaKind arena) const;

 private:
  Executor(const Graph& graph, const Plan& plan, std::shared_ptr<Backend> backend,
           ExecutorOptions options);
  absl::Status allocate_and_bind();
  std::byte* address(const Value* value) const;
  // What --check-numerics reads of a step's float inputs before it runs: whether any holds a
  // NaN or an inf, and each one's range for the message.
  struct NumericInputs {
    bool nan = false;
    bool inf = false;
    std::vector<std::string> ranges;
  };
  absl::StatusOr<NumericInputs> numeric_inputs(int step) const;
  absl::Status check_numerics(int step, const NumericInputs& inputs) const;
  // Makes the stream wait for the asynchronous steps step `s` reads (s == steps: all of them).
  absl::Status join_before(size_t s);
  // Finds the joins once the states are made.
  void plan_joins();
  // After a run of a loss-scaled step that met `first_non_finite`: OK when the step was skipped
  // and every state update is finite.
  absl::Status settle_skipped_numerics(const absl::Status& first_non_finite) const;
  absl::Status data_error(const DeviceError& error) const;
  // ExecutorOptions::profile: the table printed on destruction.
  void print_profile() const;

  const Graph& graph_;
  const Plan& plan_;
  std::shared_ptr<Backend> backend_;
  ExecutorOptions options_;
  // A loss-scaled training step's overflow flag (skipped step), or null.
  const Value* found_inf_;
  std::unordered_map<const Value*, std::byte*> shared_;
  // Graph inputs bound to lent memory (lend()), and where each input is an operand: (step, index).
  std::unordered_map<const Value*, std::byte*> lent_;
  std::unordered_map<const Value*, std::vector<std::pair<int, int>>> input_uses_;
  DeviceMemory arenas_[kNumArenas];
  std::vector<KernelContext> contexts_;
  std::vector<std::unique_ptr<KernelState>> states_;
  // Per step: the asynchronous steps (KernelState::asynchronous) it joins before it runs; and
  // every asynchronous step, joined at the end of a run.
  std::vector<std::vector<int>> joins_;
  std::vector<int> asynchronous_steps_;
  bool random_stream_set_ = false;
  uint64_t random_stream_ = 0;
  // The recorded run (ExecutorOptions::use_graph), or null.
  // The recorded graphs: [1] of runs inside an accumulation window, when the graph has collectives
  // marked `window` (else every run uses [0]).
  void* recorded_[2] = {nullptr, nullptr};
  bool graph_tried_[2] = {false, false};
  bool has_window_collectives_ = false;
  // ExecutorOptions::profile: seconds per step over every run, and the runs.
  std::vector<double> step_seconds_;
  int64_t profiled_runs_ = 0;
  absl::Status graph_status_;
  // Queues every step's kernel (no checks between them); `capturing` while a graph records.
  absl::Status launch_steps(uint64_t random_stream, bool inside_window, bool capturing);
};

}  // namespace ampc::runtime
