// InferenceSession: the public API for running a graph.
//
//   #include "runtime/session.h"
//
//   absl::StatusOr<std::unique_ptr<ampc::runtime::InferenceSession>> session =
//       ampc::runtime::InferenceSession::load("model.onnx");
//   if (!session.ok()) { /* report session.status() */ }
//   absl::Status bound = (*session)->set_input("x", x_tensor);
//   absl::Status ran = (*session)->run();
//   absl::StatusOr<ampc::Tensor> logits = (*session)->output("logits");
//
// Loading imports the file, runs the compile pipeline (canonicalization, static shapes), plans
// memory and resolves every node's kernel, so a graph that loads runs. docs/runtime-api.md has a
// complete example.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/dtype.h"
#include "compiler/ir.h"
#include "compiler/status.h"
#include "compiler/tensor.h"
#include "runtime/backend.h"
#include "runtime/executor.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace ampc::runtime {

struct SessionOptions {
  // The backend the session runs on. A graph with a node that has no kernel on it fails to load,
  // naming the node, the op and the dtype.
  Device device = Device::kCpu;
  // Which GPU, for Device::kCuda.
  int device_index = 0;
  // f32 MatMul, Gemm and Conv may use TF32 tensor cores on CUDA (10 mantissa bits per product
  // instead of 23); off by default, as in PyTorch. The CPU backend ignores it.
  bool allow_tf32 = false;
  // Fixes symbolic input dimensions, as `--shape NAME:8x3x32x32` does for `ampc compile`.
  std::map<std::string, Shape, std::less<>> shapes = {};
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
  // Write each state update over its state where the planner can (PlanOptions); false keeps
  // every update apart and copies it over its state after the run (for tests and debugging).
  bool update_state_in_place = true;
  // On CUDA, record the first run as a CUDA graph and replay it (ExecutorOptions::use_graph;
  // `ampc train --cuda-graph on`). Off by default until the graphs have run on a GPU.
  bool cuda_graph = false;
  // Data-parallel training (TrainingSession): this rank's group. With more than one rank, the
  // step averages its gradients and its logged loss over the group (passes/data_parallel.h),
  // and the session starts from rank 0's state. Null: one rank.
  std::shared_ptr<comm::Communicator> communicator = nullptr;
  // With more than one rank: BatchNorm's batch statistics over every rank's shard together
  // (SyncBatchNorm; the group trains as one rank with the whole batch would), or false: each
  // rank's own (`ampc train --local-batch-norm`).
  bool sync_batch_norm = true;
  // With more than one rank: ZeRO stage 1 (`ampc train --shard-optimizer`). Each rank keeps and
  // updates one block of every optimizer moment (passes/data_parallel.h); checkpoints hold the
  // whole moments, so a resume may change the number of ranks.
  bool shard_optimizer = false;
};

// A named graph input or output and its type.
struct TensorInfo {
  std::string name;
  TensorType type;
};

class InferenceSession {
 public:
  // Imports and compiles an ONNX file, plans it and resolves its kernels.
  static absl::StatusOr<std::unique_ptr<InferenceSession>> load(const std::string& onnx_path,
                                                                SessionOptions options = {});
  // Same, for a graph already in memory (it is compiled in place first). Sessions given one
  // `backend` share its device (a training step and its eval graph); without one, the session
  // makes its own for options.device.
  // `shared` binds initializers, by name, to memory of another session on `backend`
  // (initializer_address), which this one reads and never writes; that memory must hold a value
  // of the initializer's type. Names the graph has no initializer for are ignored.
  using SharedInitializers = std::map<std::string, std::byte*, std::less<>>;
  static absl::StatusOr<std::unique_ptr<InferenceSession>> create(
      std::unique_ptr<Graph> graph, SessionOptions options = {},
      std::shared_ptr<Backend> backend = nullptr, SharedInitializers shared = {});
  ~InferenceSession();

  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;

  // Copies `value` into the input `name`; its dtype and shape must match the input's.
  absl::Status set_input(std::string_view name, const Tensor& value);
  // Runs the graph on the bound inputs. Every input must have been set (once; values stay bound
  // across runs).
  absl::Status run();
  // run() without the wait: queues the graph on the backend and returns (the CPU runs it before
  // it returns). Data errors the kernels record on the device (an index out of range) are
  // reported by the next finish() or run(); reading an output or initializer waits for the run
  // but does not report them.
  absl::Status launch();
  absl::Status finish();
  // A copy of output `name` after the last run.
  absl::StatusOr<Tensor> output(std::string_view name) const;

  // Reads or replaces an initializer (a weight, an optimizer moment) held by the session. The
  // replacement must have the initializer's type.
  absl::StatusOr<Tensor> initializer(std::string_view name) const;
  absl::Status set_initializer(std::string_view name, const Tensor& value);
  // The device memory of initializer `name`, for a session on the same backend to read (see
  // create); valid while this session lives. A training step's state is updated there.
  absl::StatusOr<std::byte*> initializer_address(std::string_view name) const;
  // The device memory of output `name` (what the last run wrote there), for copies on the device.
  absl::StatusOr<std::byte*> output_address(std::string_view name) const;
  // Copies graph output `output` (after a run) over initializer `state`; both have one type.
  absl::Status copy_output_to_initializer(std::string_view output, std::string_view state);

  // The random stream the next runs draw from (KernelContext::random_stream; 0 by default).
  void set_random_stream(uint64_t stream) { random_stream_ = stream; }

  // Binds `inputs` by name, runs, and returns every output by name.
  absl::StatusOr<std::map<std::string, Tensor>> run(const std::map<std::string, Tensor>& inputs);

  const Graph& graph() const { return *graph_; }
  const Plan& plan() const { return *plan_; }
  Backend& backend() const { return executor_->backend(); }
  // Whether runs replay a recorded CUDA graph (SessionOptions::cuda_graph), and if one was asked
  // for and could not be made, why.
  bool uses_graph() const { return executor_->uses_graph(); }
  const absl::Status& graph_status() const { return executor_->graph_status(); }
  const std::shared_ptr<Backend>& shared_backend() const { return backend_; }

 private:
  InferenceSession(std::unique_ptr<Graph> graph, std::unique_ptr<Plan> plan, SessionOptions options,
                   std::shared_ptr<Backend> backend);

  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Plan> plan_;
  SessionOptions options_;
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<Executor> executor_;
  std::vector<bool> input_bound_;
  bool has_run_ = false;
  uint64_t random_stream_ = 0;
};

}  // namespace ampc::runtime
