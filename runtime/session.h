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
#include <unordered_map>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/options.h"
#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "runtime/backend.h"
#include "runtime/executor.h"
#include "runtime/kernel.h"
#include "runtime/plan.h"

namespace ampc::runtime {

using ampc::SessionOptions;
using ampc::TensorInfo;

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
  // Positions in a list of graph values by name (the first of each name).
  using NameIndex = std::unordered_map<std::string_view, size_t>;
  static absl::StatusOr<std::unique_ptr<InferenceSession>> create(
      std::unique_ptr<Graph> graph, SessionOptions options = {},
      std::shared_ptr<Backend> backend = nullptr, SharedInitializers shared = {});
  ~InferenceSession();

  std::vector<TensorInfo> inputs() const;
  std::vector<TensorInfo> outputs() const;

  // Copies `value` into the input `name`; its dtype and shape must match the input's. The input
  // stays set across runs.
  absl::Status set_input(std::string_view name, const TensorView& value);
  // Sets the input `name` for the next launch only, from memory the caller lends until that
  // launch returns. Where the backend reads host memory (the CPU) and `value.data` is aligned to
  // the element size, the kernels read it in place: no copy (backend().counters() counts none).
  // Elsewhere it is copied as set_input does.
  absl::Status lend_input(std::string_view name, const TensorView& value);
  // lend_input for each of `inputs`; on an error none of them stays lent.
  absl::Status lend_inputs(const TensorViews& inputs);
  // Ends the loans of lend_input that no launch has taken: those inputs are unset again.
  void release_lent_inputs();
  // Runs the graph on the bound inputs. Every input must have been set (set_input: once, values
  // stay bound across runs; lend_input: before each run).
  absl::Status run();
  // run() without the wait: queues the graph on the backend and returns (the CPU runs it before
  // it returns). Data errors the kernels record on the device (an index out of range) are
  // reported by the next finish() or run(); reading an output or initializer waits for the run
  // but does not report them. Lent inputs are released when it returns, whatever it returns.
  absl::Status launch();
  absl::Status finish();
  // A copy of output `name` after the last run.
  absl::StatusOr<Tensor> output(std::string_view name) const;

  // Reads or replaces an initializer (a weight, an optimizer moment) held by the session. The
  // replacement must have the initializer's type.
  absl::StatusOr<Tensor> initializer(std::string_view name) const;
  absl::Status set_initializer(std::string_view name, const TensorView& value);
  // The device memory of initializer `name`, for a session on the same backend to read (see
  // create); valid while this session lives. A training step's state is updated there.
  absl::StatusOr<std::byte*> initializer_address(std::string_view name) const;
  // The device memory of output `name` (what the last run wrote there), for copies on the device.
  absl::StatusOr<std::byte*> output_address(std::string_view name) const;
  // Copies graph output `output` (after a run) over initializer `state`; both have one type.
  absl::Status copy_output_to_initializer(std::string_view output, std::string_view state);

  // The random stream the next runs draw from (KernelContext::random_stream; 0 by default).
  void set_random_stream(uint64_t stream) { random_stream_ = stream; }
  uint64_t random_stream() const { return random_stream_; }
  // Whether the next runs are inside an accumulation window, not its last run
  // (KernelContext::inside_window; false by default).
  void set_inside_window(bool inside) { inside_window_ = inside; }

  // Lends `inputs` by name (lend_input), runs, and returns every output by name.
  absl::StatusOr<std::map<std::string, Tensor>> run(const TensorViews& inputs);

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
  // graph_'s inputs, outputs and initializers by name, indexed once: a training step looks up
  // each of its (tens of thousands of) state tensors by name, at load and every step. The keys
  // view graph_'s own names, which nothing changes after the session is made.
  NameIndex input_positions_;
  NameIndex output_positions_;
  NameIndex initializer_positions_;
  // The graph input `name` whose type `value` must have; an error naming the input otherwise.
  absl::StatusOr<int> input_index(std::string_view name, const TensorView& value) const;

  std::vector<bool> input_bound_;
  std::vector<bool> input_lent_;  // set for the next launch only
  bool has_run_ = false;
  uint64_t random_stream_ = 0;
  bool inside_window_ = false;
};

}  // namespace ampc::runtime
