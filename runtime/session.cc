#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ampc/float_types.h"
#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"

namespace ampc::runtime {
namespace {

std::string expected_inputs(const Graph& graph) {
  std::vector<std::string> parts;
  for (const Value* input : graph.inputs()) {
    parts.push_back(str_cat(input->name(), ": ", type_to_string(input->type())));
  }
  return str_join(parts, ", ");
}

// Each name's first position in `values`. The keys view the values' own names.
InferenceSession::NameIndex index_names(const std::vector<Value*>& values) {
  InferenceSession::NameIndex positions;
  positions.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) positions.emplace(values[i]->name(), i);
  return positions;
}

// The first of `values` named `name`, found through `positions` (index_names(values)).
const Value* find_named(const std::vector<Value*>& values,
                        const InferenceSession::NameIndex& positions, std::string_view name) {
  const auto it = positions.find(name);
  return it == positions.end() ? nullptr : values[it->second];
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::load(
    const std::string& onnx_path, SessionOptions options) {
  ImportOptions import_options{
      .input_shapes = options.shapes, .dims = options.dims, .data_shapes = options.data_shapes};
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_file(onnx_path, import_options));
  return create(std::move(graph), std::move(options));
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::create(
    std::unique_ptr<Graph> graph, SessionOptions options, std::shared_ptr<Backend> backend,
    SharedInitializers shared) {
  Diagnostics diagnostics;
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, CompileOptions{}, diagnostics));
  if (graph->outputs().empty()) {
    return absl::InvalidArgumentError(str_cat("graph '", graph->name(), "' has no outputs"));
  }
  if (backend == nullptr) {
    AMPC_ASSIGN_OR_RETURN(
        backend, create_backend(options.device, BackendOptions{.device_index = options.device_index,
                                                               .allow_tf32 = options.allow_tf32}));
  }
  options.device = backend->device();
  {
    const NameIndex initializers = index_names(graph->initializers());
    std::erase_if(shared, [&](const auto& entry) {
      return !initializers.contains(entry.first) || entry.second == nullptr;
    });
  }
  PlanOptions plan_options{
      .reuse_memory = options.reuse_memory,
      .update_state_in_place = options.update_state_in_place && !options.check_numerics};
  for (const auto& [name, address] : shared) plan_options.shared_initializers.insert(name);
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                        Plan::build(*graph, options.device, plan_options));
  std::unique_ptr<InferenceSession> session(new InferenceSession(
      std::move(graph), std::move(plan), std::move(options), std::move(backend)));
  AMPC_ASSIGN_OR_RETURN(
      session->executor_,
      Executor::create(
          *session->graph_, *session->plan_, session->backend_,
          ExecutorOptions{.poison_freed_buffers = session->options_.poison_freed_buffers,
                          .check_numerics = session->options_.check_numerics,
                          .shared_initializers = std::move(shared),
                          .use_graph = session->options_.cuda_graph}));
  return session;
}

InferenceSession::InferenceSession(std::unique_ptr<Graph> graph, std::unique_ptr<Plan> plan,
                                   SessionOptions options, std::shared_ptr<Backend> backend)
    : graph_(std::move(graph)),
      plan_(std::move(plan)),
      options_(std::move(options)),
      backend_(std::move(backend)),
      input_positions_(index_names(graph_->inputs())),
      output_positions_(index_names(graph_->outputs())),
      initializer_positions_(index_names(graph_->initializers())) {
  input_bound_.assign(graph_->inputs().size(), false);
  input_lent_.assign(graph_->inputs().size(), false);
}

// The executor goes first: its kernel states and arenas belong to the backend.
InferenceSession::~InferenceSession() { executor_.reset(); }

std::vector<TensorInfo> InferenceSession::inputs() const {
  std::vector<TensorInfo> infos;
  for (const Value* input : graph_->inputs()) infos.push_back({input->name(), input->type()});
  return infos;
}

std::vector<TensorInfo> InferenceSession::outputs() const {
  std::vector<TensorInfo> infos;
  for (const Value* output : graph_->outputs()) infos.push_back({output->name(), output->type()});
  return infos;
}

absl::StatusOr<int> InferenceSession::input_index(std::string_view name,
                                                  const TensorView& value) const {
  const auto it = input_positions_.find(name);
  if (it == input_positions_.end()) {
    return absl::NotFoundError(
        str_cat("the graph has no input '", name, "'; its inputs are ", expected_inputs(*graph_)));
  }
  const Value* input = graph_->inputs()[it->second];
  if (value.type != input->type()) {
    return absl::InvalidArgumentError(str_cat("input '", name, "' must be ",
                                              type_to_string(input->type()), ", not ",
                                              type_to_string(value.type)));
  }
  if (value.data == nullptr && input->type().byte_size() > 0) {
    return absl::InvalidArgumentError(str_cat("input '", name, "' has no data"));
  }
  return static_cast<int>(it->second);
}

absl::Status InferenceSession::set_input(std::string_view name, const TensorView& value) {
  AMPC_ASSIGN_OR_RETURN(const int i, input_index(name, value));
  const Value* input = graph_->inputs()[static_cast<size_t>(i)];
  // A copy replaces a loan of this input (its lent memory is read no more).
  if (input_lent_[static_cast<size_t>(i)]) executor_->end_loan(input);
  AMPC_RETURN_IF_ERROR(executor_->write(input, value.bytes()));
  input_bound_[static_cast<size_t>(i)] = true;
  input_lent_[static_cast<size_t>(i)] = false;
  return absl::OkStatus();
}

absl::Status InferenceSession::lend_input(std::string_view name, const TensorView& value) {
  AMPC_ASSIGN_OR_RETURN(const int i, input_index(name, value));
  const Value* input = graph_->inputs()[static_cast<size_t>(i)];
  const auto address = reinterpret_cast<uintptr_t>(value.data);
  const bool in_place = backend().reads_host_memory() && !input->is_graph_output() &&
                        value.data != nullptr &&
                        address % static_cast<uintptr_t>(dtype_size(input->dtype())) == 0;
  if (in_place) {
    executor_->lend(input, static_cast<const std::byte*>(value.data));
  } else {
    if (input_lent_[static_cast<size_t>(i)]) executor_->end_loan(input);
    AMPC_RETURN_IF_ERROR(executor_->write(input, value.bytes()));
  }
  input_bound_[static_cast<size_t>(i)] = true;
  input_lent_[static_cast<size_t>(i)] = true;
  return absl::OkStatus();
}

absl::Status InferenceSession::run() {
  AMPC_RETURN_IF_ERROR(launch());
  absl::Status finished = finish();
  if (!finished.ok()) has_run_ = false;  // its outputs are not what the graph computes
  return finished;
}

absl::Status InferenceSession::finish() { return executor_->finish(); }

absl::Status InferenceSession::launch() {
  for (size_t i = 0; i < graph_->inputs().size(); ++i) {
    if (!input_bound_[i]) {
      release_lent_inputs();
      return absl::FailedPreconditionError(str_cat("input '", graph_->inputs()[i]->name(),
                                                   "' is not set; the inputs are ",
                                                   expected_inputs(*graph_)));
    }
  }
  has_run_ = false;
  const absl::Status launched = executor_->launch(random_stream_, inside_window_);
  // The lender may reuse its memory now: on the CPU the kernels have run; elsewhere it was copied.
  release_lent_inputs();
  AMPC_RETURN_IF_ERROR(launched);
  has_run_ = true;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> InferenceSession::output(std::string_view name) const {
  if (const Value* output = find_named(graph_->outputs(), output_positions_, name)) {
    if (!has_run_) {
      return absl::FailedPreconditionError(
          str_cat("output '", name, "' is not available: the session has not run"));
    }
    return executor_->read(output);
  }
  std::vector<std::string> names;
  for (const Value* output : graph_->outputs()) names.push_back(output->name());
  return absl::NotFoundError(
      str_cat("the graph has no output '", name, "'; its outputs are ", str_join(names, ", ")));
}

absl::StatusOr<std::byte*> InferenceSession::output_address(std::string_view name) const {
  const Value* output = find_named(graph_->outputs(), output_positions_, name);
  if (output == nullptr)
    return absl::NotFoundError(str_cat("the graph has no output '", name, "'"));
  return executor_->address_of(output);
}

absl::StatusOr<Tensor> InferenceSession::initializer(std::string_view name) const {
  const Value* init = find_named(graph_->initializers(), initializer_positions_, name);
  if (init == nullptr)
    return absl::NotFoundError(str_cat("the graph has no initializer '", name, "'"));
  return executor_->read(init);
}

absl::StatusOr<std::byte*> InferenceSession::initializer_address(std::string_view name) const {
  const Value* init = find_named(graph_->initializers(), initializer_positions_, name);
  if (init == nullptr)
    return absl::NotFoundError(str_cat("the graph has no initializer '", name, "'"));
  return executor_->address_of(init);
}

absl::Status InferenceSession::set_initializer(std::string_view name, const TensorView& value) {
  const Value* init = find_named(graph_->initializers(), initializer_positions_, name);
  if (init == nullptr)
    return absl::NotFoundError(str_cat("the graph has no initializer '", name, "'"));
  if (value.type != init->type()) {
    return absl::InvalidArgumentError(str_cat("initializer '", name, "' is ",
                                              type_to_string(init->type()), ", not ",
                                              type_to_string(value.type)));
  }
  if (value.data == nullptr && init->type().byte_size() > 0) {
    return absl::InvalidArgumentError(
        str_cat("the value for initializer '", name, "' has no data"));
  }
  return executor_->write(init, value.bytes());
}

absl::Status InferenceSession::copy_output_to_initializer(std::string_view output,
                                                          std::string_view state) {
  const Value* from = find_named(graph_->outputs(), output_positions_, output);
  const Value* to = find_named(graph_->initializers(), initializer_positions_, state);
  if (from == nullptr || to == nullptr || from->type() != to->type()) {
    return absl::InvalidArgumentError(
        str_cat("cannot copy output '", output, "' over initializer '", state, "'"));
  }
  if (!has_run_) return absl::FailedPreconditionError("the session has not run");
  return executor_->copy(from, to);
}

void InferenceSession::release_lent_inputs() {
  executor_->end_loans();
  for (size_t i = 0; i < input_lent_.size(); ++i) {
    if (input_lent_[i]) input_bound_[i] = input_lent_[i] = false;
  }
}

absl::Status InferenceSession::lend_inputs(const TensorViews& inputs) {
  for (const auto& [name, value] : inputs) {
    if (absl::Status lent = lend_input(name, value); !lent.ok()) {
      release_lent_inputs();
      return lent;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> InferenceSession::run(const TensorViews& inputs) {
  AMPC_RETURN_IF_ERROR(lend_inputs(inputs));
  AMPC_RETURN_IF_ERROR(run());
  std::map<std::string, Tensor> outputs;
  for (const Value* output : graph_->outputs()) {
    AMPC_ASSIGN_OR_RETURN(outputs[output->name()], this->output(output->name()));
  }
  return outputs;
}

}  // namespace ampc::runtime
