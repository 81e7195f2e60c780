#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "compiler/strings.h"
#include "fmt/format.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime {
namespace {

// Every byte 0xff: a NaN in each float type, -1 in each signed integer type.
constexpr std::byte kPoison{0xff};

// "[min, max]" of the finite elements, and how many are not finite.
std::string value_range(const Tensor& tensor) {
  double low = INFINITY;
  double high = -INFINITY;
  int64_t bad = 0;
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const double x = tensor.element_as_double(i);
    if (!std::isfinite(x)) {
      ++bad;
      continue;
    }
    low = std::min(low, x);
    high = std::max(high, x);
  }
  std::string text = low <= high ? fmt::format("in [{:g}, {:g}]", low, high) : "no finite value";
  if (bad > 0) text += str_cat(", ", bad, " not finite");
  return text;
}

bool is_checked_float(const TensorArg& arg) {
  return arg.present() && is_arithmetic_float(arg.dtype());
}

const Value* graph_output(const Graph& graph, std::string_view name) {
  for (const Value* output : graph.outputs()) {
    if (output != nullptr && output->name() == name) return output;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Executor>> Executor::create(const Graph& graph, const Plan& plan,
                                                           std::shared_ptr<Backend> backend,
                                                           ExecutorOptions options) {
  AMPC_CHECK(backend != nullptr);
  if (const char* profile = std::getenv("AMPC_PROFILE"); profile != nullptr) {
    const std::string_view value(profile);
    if (value != "0" && value != "1" && !value.empty()) {
      return absl::InvalidArgumentError(
          str_cat("AMPC_PROFILE=", value,
                  ": expected 1 (print where each run's time goes when the session ends) or 0"));
    }
    options.profile |= value == "1";
  }
  std::unique_ptr<Executor> executor(
      new Executor(graph, plan, std::move(backend), std::move(options)));
  AMPC_RETURN_IF_ERROR(executor->allocate_and_bind());
  return executor;
}

Executor::Executor(const Graph& graph, const Plan& plan, std::shared_ptr<Backend> backend,
                   ExecutorOptions options)
    : graph_(graph),
      plan_(plan),
      backend_(std::move(backend)),
      options_(std::move(options)),
      found_inf_(graph_output(graph, "found_inf")) {
  for (const Node* node : graph_.node_list()) {
    if (node->domain() == kAmpcDomain && int_attr_or(*node, "window", 0) != 0) {
      has_window_collectives_ = true;
    }
  }
  for (const Value* init : graph_.initializers()) {
    auto it = options_.shared_initializers.find(init->name());
    if (it != options_.shared_initializers.end()) shared_[init] = it->second;
  }
}

// States may hold library objects made on the device; they go before the memory they describe.
Executor::~Executor() {
  if (options_.profile && profiled_runs_ > 0) print_profile();
  for (void* recorded : recorded_) {
    if (recorded != nullptr) backend_->destroy_graph(recorded);
  }
  states_.clear();
}

absl::Status Executor::allocate_and_bind() {
  for (ArenaKind arena : {ArenaKind::kParameters, ArenaKind::kActivations}) {
    AMPC_ASSIGN_OR_RETURN(
        arenas_[static_cast<int>(arena)],
        backend_->allocate(plan_.arena_bytes(arena), str_cat(arena_name(arena), " arena")));
  }
  for (const Value* init : graph_.initializers()) {
    if (shared_.contains(init)) continue;  // its owner holds the value
    const std::span<const uint8_t> bytes = init->initializer()->bytes();
    AMPC_RETURN_IF_ERROR(
        backend_->copy_to_device(address(init), bytes.data(), static_cast<int64_t>(bytes.size())));
  }
  // Kernels make their library state (cuBLASLt descriptors, cuDNN graphs) on the current device.
  AMPC_RETURN_IF_ERROR(backend_->make_current());
  ExecutionContext* exec = &backend_->context();
  const std::vector<PlanStep>& steps = plan_.steps();
  int64_t workspace_bytes = plan_.arena_bytes(ArenaKind::kWorkspace);
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    const Node& node = *steps[s].node;
    KernelContext ctx{.node = node, .inputs = {}, .outputs = {}, .workspace = {}};
    ctx.exec = exec;
    ctx.step = s;
    for (const Value* operand : node.operands()) {
      if (operand != nullptr && operand->kind() == Value::Kind::kGraphInput) {
        input_uses_[operand].emplace_back(s, static_cast<int>(ctx.inputs.size()));
      }
      ctx.inputs.push_back(operand ? TensorArg{&operand->type(), address(operand)} : TensorArg{});
    }
    for (int i = 0; i < node.num_outputs(); ++i) {
      const Value* output = node.has_output(i) ? node.output(i) : nullptr;
      ctx.outputs.push_back(output ? TensorArg{&output->type(), address(output)} : TensorArg{});
    }
    std::unique_ptr<KernelState> state;
    if (steps[s].kernel->init != nullptr) {
      absl::StatusOr<std::unique_ptr<KernelState>> made = steps[s].kernel->init(ctx);
      if (!made.ok()) {
        return absl::Status(made.status().code(),
                            str_cat(node.describe(), ": ", made.status().message()));
      }
      state = *std::move(made);
      if (state != nullptr) workspace_bytes = std::max(workspace_bytes, state->workspace_bytes);
    }
    ctx.state = state.get();
    states_.push_back(std::move(state));
    contexts_.push_back(std::move(ctx));
  }
  plan_joins();
  const int workspace = static_cast<int>(ArenaKind::kWorkspace);
  AMPC_ASSIGN_OR_RETURN(arenas_[workspace], backend_->allocate(workspace_bytes, "workspace arena"));
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    int64_t bytes = steps[s].workspace_bytes;
    if (states_[s] != nullptr) bytes = std::max(bytes, states_[s]->workspace_bytes);
    contexts_[s].workspace = std::span<std::byte>(arenas_[workspace].data(), bytes);
  }
  return absl::OkStatus();
}

void Executor::plan_joins() {
  const std::vector<PlanStep>& steps = plan_.steps();
  joins_.assign(steps.size(), {});
  std::unordered_map<const Node*, int> asynchronous;  // producer node -> its step
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    if (states_[s] == nullptr || !states_[s]->asynchronous()) continue;
    asynchronous_steps_.push_back(s);
    asynchronous.emplace(steps[s].node, s);
    // An output nothing reads is freed at once: its memory may be reused by the next step.
    const Node& node = *steps[s].node;
    for (int i = 0; i < node.num_outputs(); ++i) {
      if (node.has_output(i) && node.output(i)->is_dead() &&
          s + 1 < static_cast<int>(steps.size())) {
        joins_[s + 1].push_back(s);
        break;
      }
    }
  }
  if (asynchronous.empty()) return;
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    for (const Value* operand : steps[s].node->operands()) {
      if (operand == nullptr || operand->producer() == nullptr) continue;
      const auto it = asynchronous.find(operand->producer());
      if (it == asynchronous.end()) continue;
      std::vector<int>& joins = joins_[s];
      if (std::find(joins.begin(), joins.end(), it->second) == joins.end()) {
        joins.push_back(it->second);
      }
    }
  }
}

absl::Status Executor::join_before(size_t s) {
  const std::vector<int>& joining = s < joins_.size() ? joins_[s] : asynchronous_steps_;
  for (int step : joining) {
    if (absl::Status joined = states_[step]->join(backend_->context()); !joined.ok()) {
      return absl::Status(joined.code(),
                          str_cat(plan_.steps()[step].node->describe(), ": ", joined.message()));
    }
  }
  return absl::OkStatus();
}

int64_t Executor::arena_bytes(ArenaKind arena) const {
  return arenas_[static_cast<int>(arena)].bytes();
}

std::byte* Executor::address(const Value* value) const {
  if (!lent_.empty()) {
    if (auto it = lent_.find(value); it != lent_.end()) return it->second;
  }
  if (!shared_.empty()) {
    if (auto it = shared_.find(value); it != shared_.end()) return it->second;
  }
  const int b = plan_.buffer_of(value);
  AMPC_CHECK(b >= 0);
  const Buffer& buffer = plan_.buffers()[b];
  return arenas_[static_cast<int>(buffer.arena)].data() + buffer.offset;
}

absl::Status Executor::write(const Value* value, std::span<const uint8_t> bytes) {
  AMPC_CHECK(static_cast<int64_t>(bytes.size()) == value->type().byte_size());
  return backend_->copy_to_device(address(value), bytes.data(), static_cast<int64_t>(bytes.size()));
}

void Executor::lend(const Value* input, const std::byte* data) {
  AMPC_CHECK(backend_->reads_host_memory() && input->kind() == Value::Kind::kGraphInput &&
             !input->is_graph_output() && data != nullptr);
  // Kernels never write a graph input (the planner puts no output over one), so the lent memory
  // is only read, whatever the pointer's constness.
  auto* lent = const_cast<std::byte*>(data);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  lent_[input] = lent;
  if (auto it = input_uses_.find(input); it != input_uses_.end()) {
    for (const auto& [step, operand] : it->second) contexts_[step].inputs[operand].data = lent;
  }
}

void Executor::end_loan(const Value* input) {
  if (lent_.erase(input) == 0) return;
  if (auto it = input_uses_.find(input); it != input_uses_.end()) {
    for (const auto& [step, operand] : it->second) {
      contexts_[step].inputs[operand].data = address(input);
    }
  }
}

void Executor::end_loans() {
  while (!lent_.empty()) end_loan(lent_.begin()->first);
}

absl::StatusOr<Tensor> Executor::read(const Value* value) const {
  Tensor tensor(value->type());
  const std::span<uint8_t> bytes = tensor.mutable_bytes();
  AMPC_RETURN_IF_ERROR(
      backend_->copy_to_host(bytes.data(), address(value), static_cast<int64_t>(bytes.size())));
  return tensor;
}

absl::Status Executor::copy(const Value* from, const Value* to) {
  AMPC_CHECK(from->type().byte_size() == to->type().byte_size());
  if (address(to) == address(from)) return absl::OkStatus();  // an update made in place
  return backend_->copy_on_device(address(to), address(from), to->type().byte_size());
}

absl::Status Executor::run(uint64_t random_stream) {
  AMPC_RETURN_IF_ERROR(launch(random_stream));
  return finish();
}

absl::Status Executor::launch(uint64_t random_stream, bool inside_window) {
  AMPC_RETURN_IF_ERROR(backend_->make_current());
  // A failed communicator (a rank that stopped) must not be given more collectives: a recorded
  // graph's would run on an aborted one.
  comm::Communicator* group = backend_->context().communicator;
  if (group != nullptr) AMPC_RETURN_IF_ERROR(group->health());
  if (!random_stream_set_ || random_stream != random_stream_) {
    AMPC_RETURN_IF_ERROR(backend_->set_random_stream(random_stream));
    random_stream_ = random_stream;
    random_stream_set_ = true;
  }
  const bool graphs = options_.use_graph && !options_.check_numerics &&
                      !options_.poison_freed_buffers && !options_.profile;
  // Collectives marked `window` run differently inside a window: their own recording.
  inside_window = inside_window && has_window_collectives_;
  const int kind = inside_window ? 1 : 0;
  void*& recorded = recorded_[kind];
  if (graphs && recorded == nullptr && !graph_tried_[kind] && graph_status_.ok()) {
    // Record the steps once; the recording runs nothing, so the graph is launched below.
    graph_tried_[kind] = true;
    graph_status_ = backend_->begin_capture();
    if (graph_status_.ok()) {
      const absl::Status status = launch_steps(random_stream, inside_window, /*capturing=*/true);
      absl::StatusOr<void*> graph = backend_->end_capture();
      if (!status.ok()) return status;  // a kernel that fails at launch fails eagerly too
      if (graph.ok()) {
        recorded = *graph;
      } else {
        graph_status_ = graph.status();
      }
    }
  }
  if (recorded != nullptr) {
    AMPC_RETURN_IF_ERROR(backend_->launch_graph(recorded));
    // The graph's collectives were queued without the communicator: it follows the replay.
    if (group != nullptr && !asynchronous_steps_.empty()) {
      AMPC_RETURN_IF_ERROR(group->follow(backend_->context().stream, "a replay of the step"));
    }
    return absl::OkStatus();
  }
  if (!options_.check_numerics && !options_.poison_freed_buffers && !options_.profile) {
    return launch_steps(random_stream, inside_window, /*capturing=*/false);
  }
  const std::vector<PlanStep>& steps = plan_.steps();
  if (options_.profile) {
    step_seconds_.resize(steps.size());
    ++profiled_runs_;
    // What earlier work is still queued is not the first step's.
    AMPC_ASSIGN_OR_RETURN(const DeviceError error, backend_->synchronize());
    if (error.code != kNoDeviceError) return data_error(error);
  }
  absl::Status first_non_finite;
  for (size_t s = 0; s < steps.size(); ++s) {
    contexts_[s].random_stream = random_stream;
    contexts_[s].inside_window = inside_window;
    absl::Status status = join_before(s);
    // The inputs are read before the node runs: it may write an output over one of them.
    std::optional<NumericInputs> inputs;
    if (status.ok() && options_.check_numerics && first_non_finite.ok()) {
      absl::StatusOr<NumericInputs> read_inputs = numeric_inputs(static_cast<int>(s));
      if (read_inputs.ok()) {
        inputs = *std::move(read_inputs);
      } else {
        status = read_inputs.status();
      }
    }
    const auto start = std::chrono::steady_clock::now();
    if (status.ok()) status = steps[s].kernel->fn(contexts_[s]);
    // The checks read the outputs at once: no overlap here.
    if (status.ok() && states_[s] != nullptr && states_[s]->asynchronous()) {
      status = states_[s]->join(backend_->context());
    }
    if (status.ok() && options_.profile) {
      absl::StatusOr<DeviceError> waited = backend_->synchronize();
      if (!waited.ok()) return waited.status();
      if (waited->code != kNoDeviceError) return data_error(*waited);
      step_seconds_[s] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (!status.ok()) {
      // Work queued before the failure (on every stream) must not outlive this call unreported.
      (void)join_before(steps.size());
      (void)backend_->synchronize();
      return absl::Status(status.code(),
                          str_cat(steps[s].node->describe(), ": ", status.message()));
    }
    if (options_.check_numerics && first_non_finite.ok()) {
      absl::Status numerics = check_numerics(static_cast<int>(s), *inputs);
      if (found_inf_ == nullptr) AMPC_RETURN_IF_ERROR(numerics);
      first_non_finite = std::move(numerics);
    }
    if (options_.poison_freed_buffers) {
      for (int b : steps[s].freed_buffers) {
        const Buffer& buffer = plan_.buffers()[b];
        AMPC_RETURN_IF_ERROR(backend_->fill(
            arenas_[static_cast<int>(buffer.arena)].data() + buffer.offset, kPoison, buffer.bytes));
      }
    }
  }
  AMPC_RETURN_IF_ERROR(join_before(steps.size()));
  if (!options_.check_numerics) return absl::OkStatus();
  // The numerics checks waited for every step already; a data error still comes first.
  AMPC_RETURN_IF_ERROR(finish());
  if (!first_non_finite.ok()) return settle_skipped_numerics(first_non_finite);
  return absl::OkStatus();
}

absl::Status Executor::launch_steps(uint64_t random_stream, bool inside_window, bool capturing) {
  const std::vector<PlanStep>& steps = plan_.steps();
  for (size_t s = 0; s <= steps.size(); ++s) {
    // Past the last step: every asynchronous step joins the stream, so the run (or the
    // recording) ends with all of its work on the stream.
    absl::Status status = join_before(s);
    if (status.ok() && s < steps.size()) {
      contexts_[s].random_stream = random_stream;
      contexts_[s].inside_window = inside_window;
      status = steps[s].kernel->fn(contexts_[s]);
    }
    if (!status.ok()) {
      // Work queued before the failure, on every stream, must not outlive this call unreported
      // (a recording queued nothing, but must end with every stream it forked joined).
      if (s < steps.size()) (void)join_before(steps.size());
      if (!capturing) (void)backend_->synchronize();
      if (s == steps.size()) return status;
      return absl::Status(status.code(),
                          str_cat(steps[s].node->describe(), ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::finish() {
  AMPC_ASSIGN_OR_RETURN(const DeviceError error, backend_->synchronize());
  if (error.code != kNoDeviceError) return data_error(error);
  return absl::OkStatus();
}

absl::Status Executor::settle_skipped_numerics(const absl::Status& first_non_finite) const {
  AMPC_ASSIGN_OR_RETURN(const Tensor skipped, read(found_inf_));
  if (skipped.element_as_double(0) == 0) {
    return absl::Status(first_non_finite.code(), str_cat(first_non_finite.message(),
                                                         " (the loss scaler did not skip the "
                                                         "step: its gradients were finite)"));
  }
  for (const Graph::StateUpdate& update : graph_.state_updates()) {
    const Value* value = graph_output(graph_, update.update);
    if (value == nullptr || !is_arithmetic_float(value->dtype())) continue;
    AMPC_ASSIGN_OR_RETURN(const Tensor next, read(value));
    for (int64_t i = 0; i < next.num_elements(); ++i) {
      if (std::isfinite(next.element_as_double(i))) continue;
      return absl::OutOfRangeError(
          str_cat("--check-numerics: the loss scaler skipped the step, but state '", update.state,
                  "' would still become non-finite (element ", i,
                  "), which skipping does not "
                  "undo; it began with: ",
                  first_non_finite.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::data_error(const DeviceError& error) const {
  const std::vector<PlanStep>& steps = plan_.steps();
  const std::string where = error.step >= 0 && error.step < static_cast<int>(steps.size())
                                ? steps[error.step].node->describe()
                                : std::string("a kernel");
  return absl::InvalidArgumentError(str_cat(where, ": ", describe_device_error(error)));
}

void Executor::print_profile() const {
  const std::vector<PlanStep>& steps = plan_.steps();
  struct OpTotal {
    int64_t nodes = 0;
    double seconds = 0;
  };
  std::map<std::string, OpTotal> per_op;
  double total = 0;
  std::vector<int> order(steps.size());
  for (int s = 0; s < static_cast<int>(steps.size()); ++s) {
    const Node& node = *steps[s].node;
    OpTotal& op = per_op[node.domain().empty() ? node.op_type()
                                               : str_cat(node.domain(), ".", node.op_type())];
    ++op.nodes;
    op.seconds += step_seconds_[s];
    total += step_seconds_[s];
    order[s] = s;
  }
  std::vector<std::pair<std::string, OpTotal>> ops(per_op.begin(), per_op.end());
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return step_seconds_[a] > step_seconds_[b]; });
  const double runs = static_cast<double>(profiled_runs_);
  std::string out = fmt::format(
      "ampc profile ({} device, {} runs of {} steps; each kernel waited for, so the sum is a "
      "bound): {:.3f} ms a run\n{:>10}  {:>6}  {:>6}  op\n",
      device_name(backend_->device()), profiled_runs_, steps.size(), total / runs * 1e3, "ms a run",
      "%", "nodes");
  for (const auto& [op, figures] : ops) {
    out += fmt::format("{:>10.3f}  {:>5.1f}%  {:>6}  {}\n", figures.seconds / runs * 1e3,
                       total > 0 ? 100 * figures.seconds / total : 0.0, figures.nodes, op);
  }
  out += "the slowest nodes:\n";
  for (size_t k = 0; k < std::min<size_t>(order.size(), 15); ++k) {
    const Node& node = *steps[order[k]].node;
    std::string types;
    for (int o = 0; o < node.num_outputs(); ++o) {
      if (!node.has_output(o)) continue;
      types += str_cat(types.empty() ? "" : ", ", type_to_string(node.output(o)->type()));
    }
    out += fmt::format("{:>10.3f}  {} -> {}\n", step_seconds_[order[k]] / runs * 1e3,
                       node.describe(), types);
  }
  std::fputs(out.c_str(), stderr);
}

// The first NaN among a step's float outputs when no float input holds a NaN, or inf when none
// holds an inf, described with its inputs' ranges. What a node makes of non-finite inputs of
// the same kind is theirs: a -inf an attention mask holds on purpose, and what it spreads to
// (the masked scores), is no error; a NaN made of it (inf - inf) is.
absl::StatusOr<Executor::NumericInputs> Executor::numeric_inputs(int step) const {
  const KernelContext& ctx = contexts_[step];
  NumericInputs inputs;
  for (int k = 0; k < static_cast<int>(ctx.inputs.size()); ++k) {
    if (!is_checked_float(ctx.inputs[k])) continue;
    AMPC_ASSIGN_OR_RETURN(const Tensor in, read(ctx.node.operand(k)));
    for (int64_t i = 0; i < in.num_elements() && !(inputs.nan && inputs.inf); ++i) {
      const double x = in.element_as_double(i);
      inputs.nan |= std::isnan(x);
      inputs.inf |= std::isinf(x);
    }
    inputs.ranges.push_back(str_cat("%", ctx.node.operand(k)->name(), " ",
                                    type_to_string(in.type()), " ", value_range(in)));
  }
  return inputs;
}

absl::Status Executor::check_numerics(int step, const NumericInputs& inputs) const {
  const KernelContext& ctx = contexts_[step];
  const Node& node = ctx.node;
  if (inputs.nan && inputs.inf) return absl::OkStatus();
  for (int o = 0; o < static_cast<int>(ctx.outputs.size()); ++o) {
    if (!is_checked_float(ctx.outputs[o])) continue;
    AMPC_ASSIGN_OR_RETURN(const Tensor out, read(node.output(o)));
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      const double x = out.element_as_double(i);
      if (std::isfinite(x) || (std::isnan(x) ? inputs.nan : inputs.inf)) continue;
      return absl::OutOfRangeError(str_cat(
          "--check-numerics: ", node.describe(), " wrote ", std::isnan(x) ? "NaN" : "inf",
          " to output ", o, " %", node.output(o)->name(), " (", type_to_string(out.type()),
          ") at element ", i,
          "; its float inputs: ", inputs.ranges.empty() ? "none" : str_join(inputs.ranges, "; ")));
    }
  }
  return absl::OkStatus();
}

}  // namespace ampc::runtime
