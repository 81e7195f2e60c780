#include "runtime/session.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "compiler/compile.h"
#include "compiler/float_types.h"
#include "compiler/onnx_io.h"
#include "compiler/strings.h"

namespace ampc::runtime {
namespace {

// Every byte 0xff: a NaN in each float type, -1 in each signed integer type.
constexpr std::byte kPoison{0xff};

// Element i of a float operand as a double.
double element(const TensorArg& arg, int64_t i) {
  switch (arg.dtype()) {
    case DType::kF32:
      return arg.in<float>()[i];
    case DType::kF64:
      return arg.in<double>()[i];
    case DType::kF16:
      return static_cast<float>(arg.in<Float16>()[i]);
    case DType::kBF16:
      return static_cast<float>(arg.in<BFloat16>()[i]);
    default:
      return 0;
  }
}

bool is_checked_float(const TensorArg& arg) {
  return arg.present() && is_arithmetic_float(arg.dtype());
}

// "[min, max]" of the finite elements, and how many are not finite.
std::string value_range(const TensorArg& arg) {
  double low = INFINITY;
  double high = -INFINITY;
  int64_t bad = 0;
  for (int64_t i = 0; i < arg.num_elements(); ++i) {
    const double x = element(arg, i);
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

// The first inf or NaN among a node's float outputs, described with its inputs' ranges.
absl::Status check_numerics(const Node& node, const KernelContext& ctx) {
  for (int o = 0; o < static_cast<int>(ctx.outputs.size()); ++o) {
    const TensorArg& out = ctx.outputs[o];
    if (!is_checked_float(out)) continue;
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      const double x = element(out, i);
      if (std::isfinite(x)) continue;
      std::vector<std::string> inputs;
      for (int k = 0; k < static_cast<int>(ctx.inputs.size()); ++k) {
        if (!is_checked_float(ctx.inputs[k])) continue;
        inputs.push_back(str_cat("%", node.operand(k)->name(), " ",
                                 type_to_string(*ctx.inputs[k].type), " ",
                                 value_range(ctx.inputs[k])));
      }
      return absl::OutOfRangeError(
          str_cat("--check-numerics: ", node.describe(), " wrote ", std::isnan(x) ? "NaN" : "inf",
                  " to output ", o, " %", node.output(o)->name(), " (", type_to_string(*out.type),
                  ") at element ", i,
                  "; its float inputs: ", inputs.empty() ? "none" : str_join(inputs, "; ")));
    }
  }
  return absl::OkStatus();
}

std::string expected_inputs(const Graph& graph) {
  std::vector<std::string> parts;
  for (const Value* input : graph.inputs()) {
    parts.push_back(str_cat(input->name(), ": ", type_to_string(input->type())));
  }
  return str_join(parts, ", ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::load(
    const std::string& onnx_path, SessionOptions options) {
  ImportOptions import_options{.input_shapes = options.shapes};
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_file(onnx_path, import_options));
  return create(std::move(graph), std::move(options));
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::create(
    std::unique_ptr<Graph> graph, SessionOptions options) {
  Diagnostics diagnostics;
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, CompileOptions{}, diagnostics));
  if (graph->outputs().empty()) {
    return absl::InvalidArgumentError(str_cat("graph '", graph->name(), "' has no outputs"));
  }
  if (options.device != Device::kCpu) {
    return absl::UnimplementedError(
        str_cat("InferenceSession runs on the cpu device only, not ", device_name(options.device)));
  }
  AMPC_ASSIGN_OR_RETURN(
      std::unique_ptr<Plan> plan,
      Plan::build(*graph, options.device, PlanOptions{.reuse_memory = options.reuse_memory}));
  return std::unique_ptr<InferenceSession>(
      new InferenceSession(std::move(graph), std::move(plan), std::move(options)));
}

InferenceSession::InferenceSession(std::unique_ptr<Graph> graph, std::unique_ptr<Plan> plan,
                                   SessionOptions options)
    : graph_(std::move(graph)), plan_(std::move(plan)), options_(std::move(options)) {
  for (int a = 0; a < kNumArenas; ++a) {
    arenas_.push_back(allocate_arena(plan_->arena_bytes(static_cast<ArenaKind>(a))));
  }
  for (const Value* init : graph_->initializers()) {
    const std::span<const uint8_t> bytes = init->initializer()->bytes();
    if (!bytes.empty()) std::memcpy(address(init), bytes.data(), bytes.size());
  }
  input_bound_.assign(graph_->inputs().size(), false);
  // Each step's kernel arguments point into the arenas, which never move: build them once.
  for (const PlanStep& step : plan_->steps()) {
    KernelContext ctx{.node = *step.node, .inputs = {}, .outputs = {}, .workspace = {}};
    for (const Value* operand : step.node->operands()) {
      ctx.inputs.push_back(operand ? TensorArg{&operand->type(), address(operand)} : TensorArg{});
    }
    for (int i = 0; i < step.node->num_outputs(); ++i) {
      const Value* output = step.node->has_output(i) ? step.node->output(i) : nullptr;
      ctx.outputs.push_back(output ? TensorArg{&output->type(), address(output)} : TensorArg{});
    }
    ctx.workspace = std::span<std::byte>(arenas_[static_cast<int>(ArenaKind::kWorkspace)].get(),
                                         step.workspace_bytes);
    contexts_.push_back(std::move(ctx));
  }
}

InferenceSession::~InferenceSession() = default;

void InferenceSession::FreeAligned::operator()(std::byte* p) const { std::free(p); }

InferenceSession::ArenaMemory InferenceSession::allocate_arena(int64_t bytes) {
  // Offsets are multiples of kBufferAlignment; so is the base. (aligned_alloc wants a size that
  // is a multiple of the alignment, and a non-zero one.)
  const int64_t rounded = std::max<int64_t>(
      kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
  void* memory = std::aligned_alloc(kBufferAlignment, static_cast<size_t>(rounded));
  AMPC_CHECK(memory != nullptr);
  std::memset(memory, 0, static_cast<size_t>(rounded));
  return ArenaMemory(static_cast<std::byte*>(memory));
}

std::byte* InferenceSession::address(const Value* value) const {
  const Buffer& buffer = plan_->buffers()[plan_->buffer_of(value)];
  return arenas_[static_cast<int>(buffer.arena)].get() + buffer.offset;
}

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

absl::Status InferenceSession::set_input(std::string_view name, const Tensor& value) {
  for (size_t i = 0; i < graph_->inputs().size(); ++i) {
    const Value* input = graph_->inputs()[i];
    if (input->name() != name) continue;
    if (value.type() != input->type()) {
      return absl::InvalidArgumentError(str_cat("input '", name, "' must be ",
                                                type_to_string(input->type()), ", not ",
                                                type_to_string(value.type())));
    }
    const std::span<const uint8_t> bytes = value.bytes();
    if (!bytes.empty()) std::memcpy(address(input), bytes.data(), bytes.size());
    input_bound_[i] = true;
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      str_cat("the graph has no input '", name, "'; its inputs are ", expected_inputs(*graph_)));
}

absl::Status InferenceSession::run() {
  for (size_t i = 0; i < graph_->inputs().size(); ++i) {
    if (!input_bound_[i]) {
      return absl::FailedPreconditionError(str_cat("input '", graph_->inputs()[i]->name(),
                                                   "' is not set; the inputs are ",
                                                   expected_inputs(*graph_)));
    }
  }
  has_run_ = false;
  const std::vector<PlanStep>& steps = plan_->steps();
  for (size_t s = 0; s < steps.size(); ++s) {
    contexts_[s].random_stream = random_stream_;
    absl::Status status = steps[s].kernel->fn(contexts_[s]);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          str_cat(steps[s].node->describe(), ": ", status.message()));
    }
    if (options_.check_numerics) AMPC_RETURN_IF_ERROR(check_numerics(*steps[s].node, contexts_[s]));
    if (options_.poison_freed_buffers) {
      for (int b : steps[s].freed_buffers) {
        const Buffer& buffer = plan_->buffers()[b];
        std::memset(arenas_[static_cast<int>(buffer.arena)].get() + buffer.offset,
                    static_cast<int>(kPoison), buffer.bytes);
      }
    }
  }
  has_run_ = true;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> InferenceSession::output(std::string_view name) const {
  for (const Value* output : graph_->outputs()) {
    if (output->name() != name) continue;
    if (!has_run_) {
      return absl::FailedPreconditionError(
          str_cat("output '", name, "' is not available: the session has not run"));
    }
    Tensor tensor(output->type());
    const std::span<uint8_t> bytes = tensor.mutable_bytes();
    if (!bytes.empty()) {
      std::memcpy(bytes.data(), address(output), bytes.size());
    }
    return tensor;
  }
  std::vector<std::string> names;
  for (const Value* output : graph_->outputs()) names.push_back(output->name());
  return absl::NotFoundError(
      str_cat("the graph has no output '", name, "'; its outputs are ", str_join(names, ", ")));
}

namespace {

const Value* find_named(const std::vector<Value*>& values, std::string_view name) {
  for (const Value* value : values) {
    if (value->name() == name) return value;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<Tensor> InferenceSession::initializer(std::string_view name) const {
  const Value* init = find_named(graph_->initializers(), name);
  if (init == nullptr)
    return absl::NotFoundError(str_cat("the graph has no initializer '", name, "'"));
  Tensor tensor(init->type());
  const std::span<uint8_t> bytes = tensor.mutable_bytes();
  if (!bytes.empty()) std::memcpy(bytes.data(), address(init), bytes.size());
  return tensor;
}

absl::Status InferenceSession::set_initializer(std::string_view name, const Tensor& value) {
  const Value* init = find_named(graph_->initializers(), name);
  if (init == nullptr)
    return absl::NotFoundError(str_cat("the graph has no initializer '", name, "'"));
  if (value.type() != init->type()) {
    return absl::InvalidArgumentError(str_cat("initializer '", name, "' is ",
                                              type_to_string(init->type()), ", not ",
                                              type_to_string(value.type())));
  }
  const std::span<const uint8_t> bytes = value.bytes();
  if (!bytes.empty()) std::memcpy(address(init), bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status InferenceSession::copy_output_to_initializer(std::string_view output,
                                                          std::string_view state) {
  const Value* from = find_named(graph_->outputs(), output);
  const Value* to = find_named(graph_->initializers(), state);
  if (from == nullptr || to == nullptr || from->type() != to->type()) {
    return absl::InvalidArgumentError(
        str_cat("cannot copy output '", output, "' over initializer '", state, "'"));
  }
  if (!has_run_) return absl::FailedPreconditionError("the session has not run");
  std::memmove(address(to), address(from), static_cast<size_t>(to->type().byte_size()));
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> InferenceSession::run(
    const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, value] : inputs) AMPC_RETURN_IF_ERROR(set_input(name, value));
  AMPC_RETURN_IF_ERROR(run());
  std::map<std::string, Tensor> outputs;
  for (const Value* output : graph_->outputs()) {
    AMPC_ASSIGN_OR_RETURN(outputs[output->name()], this->output(output->name()));
  }
  return outputs;
}

}  // namespace ampc::runtime
