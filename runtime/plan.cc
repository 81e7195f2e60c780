#include "runtime/plan.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "compiler/strings.h"

namespace ampc::runtime {
namespace {

int64_t align_up(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// The placed buffers whose lifetimes overlap a given one, in O((k + 1) log n) for k of them
// (a scan of every placed buffer would make planning quadratic in the graph): the candidates
// sorted by first step, under a tree that keeps the largest last step of the placed ones
// below each node. Lifetimes [f, l] and [f', l'] overlap when f' <= l and l' >= f.
class LifetimeIndex {
 public:
  LifetimeIndex(const std::vector<Buffer>& buffers, std::vector<int> candidates)
      : buffers_(buffers), by_first_(std::move(candidates)) {
    std::stable_sort(by_first_.begin(), by_first_.end(),
                     [&](int a, int b) { return buffers_[a].first_step < buffers_[b].first_step; });
    position_.assign(buffers_.size(), -1);
    for (int i = 0; i < static_cast<int>(by_first_.size()); ++i) position_[by_first_[i]] = i;
    while (leaves_ < static_cast<int>(by_first_.size())) leaves_ *= 2;
    max_last_.assign(2 * static_cast<size_t>(leaves_), kNone);
  }

  void place(int buffer) {
    int node = leaves_ + position_[buffer];
    max_last_[node] = buffers_[buffer].last_step;
    for (node /= 2; node >= 1; node /= 2) {
      max_last_[node] = std::max(max_last_[2 * node], max_last_[2 * node + 1]);
    }
  }

  // Calls `visit(id)` for each placed buffer whose lifetime overlaps `buffer`'s.
  template <typename Visit>
  void for_each_overlapping(const Buffer& buffer, const Visit& visit) const {
    // Candidates [0, end) start no later than `buffer` ends.
    const auto end = std::upper_bound(
        by_first_.begin(), by_first_.end(), buffer.last_step,
        [&](int last, int candidate) { return last < buffers_[candidate].first_step; });
    descend(1, 0, leaves_, static_cast<int>(end - by_first_.begin()), buffer.first_step, visit);
  }

 private:
  static constexpr int kNone = INT_MIN;

  template <typename Visit>
  void descend(int node, int low, int high, int end, int first_step, const Visit& visit) const {
    if (low >= end || max_last_[node] == kNone || max_last_[node] < first_step) return;
    if (high - low == 1) {
      visit(by_first_[low]);
      return;
    }
    const int middle = (low + high) / 2;
    descend(2 * node, low, middle, end, first_step, visit);
    descend(2 * node + 1, middle, high, end, first_step, visit);
  }

  const std::vector<Buffer>& buffers_;
  std::vector<int> by_first_;  // candidate buffers by first step
  std::vector<int> position_;  // buffer -> index in by_first_
  int leaves_ = 1;
  std::vector<int> max_last_;  // heap-ordered tree over by_first_; kNone where nothing is placed
};

}  // namespace

std::string_view arena_name(ArenaKind arena) {
  switch (arena) {
    case ArenaKind::kParameters:
      return "parameters";
    case ArenaKind::kActivations:
      return "activations";
    case ArenaKind::kWorkspace:
      return "workspace";
  }
  return "?";
}

int Plan::buffer_of(const Value* value) const {
  auto it = buffer_of_.find(value);
  return it == buffer_of_.end() ? -1 : it->second;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::build(const Graph& graph, Device device,
                                                  const PlanOptions& options) {
  std::unique_ptr<Plan> plan(new Plan());
  const int end_step = graph.num_nodes();

  auto new_buffer = [&](const Value* value, ArenaKind arena, int first_step) {
    plan->buffers_.push_back(Buffer{.arena = arena,
                                    .offset = 0,
                                    .bytes = value->type().byte_size(),
                                    .first_step = first_step,
                                    .last_step = first_step,
                                    .values = {value}});
    const int index = static_cast<int>(plan->buffers_.size()) - 1;
    plan->buffer_of_[value] = index;
    return index;
  };
  // Extends a value's buffer to its last reader (or to the end for graph outputs).
  std::unordered_map<const Value*, int> last_reader;
  int step = 0;
  for (const auto& node : graph.nodes()) {
    for (const Value* operand : node->operands()) {
      if (operand != nullptr) last_reader[operand] = step;
    }
    ++step;
  }
  auto last_step_of = [&](const Value* value, int first_step) {
    if (value->is_graph_output()) return end_step;
    auto it = last_reader.find(value);
    return it == last_reader.end() ? first_step : it->second;
  };

  for (const Value* init : graph.initializers()) {
    const int b = new_buffer(init, ArenaKind::kParameters, -1);
    plan->buffers_[b].last_step = end_step;
    plan->buffers_[b].shared = options.shared_initializers.contains(init->name());
  }
  for (const Value* input : graph.inputs()) {
    // Inputs stay bound across runs, so their memory is never shared.
    const int b = new_buffer(input, ArenaKind::kActivations, -1);
    plan->buffers_[b].last_step = end_step;
    plan->unshared_activation_bytes_ += input->type().byte_size();
  }

  // Each state update's output and the state initializer it replaces after the run.
  std::unordered_map<const Value*, const Value*> state_of_update;
  if (options.reuse_memory && options.update_state_in_place && !graph.state_updates().empty()) {
    std::unordered_map<std::string_view, const Value*> initializers, outputs;
    for (const Value* init : graph.initializers()) initializers.emplace(init->name(), init);
    for (const Value* output : graph.outputs()) outputs.emplace(output->name(), output);
    for (const Graph::StateUpdate& update : graph.state_updates()) {
      auto state = initializers.find(update.state);
      auto next = outputs.find(update.update);
      if (state != initializers.end() && next != outputs.end() &&
          !state->second->is_graph_output() && state->second->type() == next->second->type()) {
        state_of_update[next->second] = state->second;
      }
    }
  }

  step = 0;
  for (const auto& node : graph.nodes()) {
    AMPC_ASSIGN_OR_RETURN(const KernelDef* kernel, KernelRegistry::global().resolve(*node, device));
    PlanStep planned{
        .node = node.get(), .kernel = kernel, .workspace_bytes = 0, .freed_buffers = {}};
    if (kernel->workspace_bytes != nullptr)
      planned.workspace_bytes = kernel->workspace_bytes(*node);

    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) continue;
      const Value* output = node->output(i);
      plan->unshared_activation_bytes_ += output->type().byte_size();
      int b = -1;
      if (i == 0 && options.reuse_memory && kernel->in_place_operand >= 0 &&
          node->has_operand(kernel->in_place_operand)) {
        const Value* operand = node->operand(kernel->in_place_operand);
        const int candidate = plan->buffer_of(operand);
        const Buffer& reused = plan->buffers_[candidate];
        // Element i of the output may replace element i of the operand only: a broadcast operand
        // of the output's byte size (f32[3,1,5] under bool[3,4,5]) would be overwritten before it
        // is read, so the element counts must agree too.
        if (reused.arena == ArenaKind::kActivations && reused.last_step == step &&
            reused.first_step >= 0 && reused.bytes == output->type().byte_size() &&
            operand->type().num_elements() == output->type().num_elements()) {
          b = candidate;
          plan->buffers_[b].values.push_back(output);
          plan->buffer_of_[output] = b;
        }
      }
      // A state update over its state: the node may write that operand, and nothing after it
      // reads the state (reading it at this step, element before element, is the update).
      if (auto it = state_of_update.find(output); b < 0 && it != state_of_update.end()) {
        const Value* state = it->second;
        const int operand = kernel->in_place_operand_for(i);
        auto reader = last_reader.find(state);
        if (operand >= 0 && node->has_operand(operand) && node->operand(operand) == state &&
            reader != last_reader.end() && reader->second == step) {
          b = plan->buffer_of(state);
          plan->buffers_[b].values.push_back(output);
          plan->buffer_of_[output] = b;
          plan->in_place_state_bytes_ += output->type().byte_size();
        }
      }
      if (b < 0) b = new_buffer(output, ArenaKind::kActivations, step);
      // A buffer lives until the last reader of any value stored in it.
      Buffer& buffer = plan->buffers_[b];
      buffer.last_step = std::max(buffer.last_step, last_step_of(output, step));
    }
    plan->steps_.push_back(std::move(planned));
    ++step;
  }
  // Which step frees each activation buffer.
  for (int b = 0; b < static_cast<int>(plan->buffers_.size()); ++b) {
    const Buffer& buffer = plan->buffers_[b];
    if (buffer.arena == ArenaKind::kActivations && buffer.first_step >= 0 &&
        buffer.last_step < end_step) {
      plan->steps_[buffer.last_step].freed_buffers.push_back(b);
    }
  }
  plan->assign_offsets(options.reuse_memory);
  for (const PlanStep& planned : plan->steps_) {
    plan->arena_bytes_[static_cast<int>(ArenaKind::kWorkspace)] =
        std::max(plan->arena_bytes(ArenaKind::kWorkspace), align_up(planned.workspace_bytes));
  }
  return plan;
}

void Plan::assign_offsets(bool reuse_memory) {
  int64_t& parameter_bytes = arena_bytes_[static_cast<int>(ArenaKind::kParameters)];
  int64_t& activation_bytes = arena_bytes_[static_cast<int>(ArenaKind::kActivations)];
  std::vector<int> activations;
  for (int b = 0; b < static_cast<int>(buffers_.size()); ++b) {
    Buffer& buffer = buffers_[b];
    if (buffer.shared) continue;
    if (buffer.arena == ArenaKind::kParameters) {
      buffer.offset = parameter_bytes;
      parameter_bytes += align_up(buffer.bytes);
    } else {
      activations.push_back(b);
    }
  }
  if (!reuse_memory) {
    for (int b : activations) {
      buffers_[b].offset = activation_bytes;
      activation_bytes += align_up(buffers_[b].bytes);
    }
    return;
  }
  // Greedy by size: place the largest buffers first, each at the lowest offset where it fits
  // between the buffers already placed whose lifetimes overlap its own. Ties keep graph order,
  // so the plan is deterministic.
  std::stable_sort(activations.begin(), activations.end(),
                   [&](int a, int b) { return buffers_[a].bytes > buffers_[b].bytes; });
  LifetimeIndex placed(buffers_, activations);
  std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of overlapping buffers
  for (int b : activations) {
    Buffer& buffer = buffers_[b];
    taken.clear();
    placed.for_each_overlapping(buffer, [&](int other) {
      const Buffer& o = buffers_[other];
      if (o.bytes > 0) taken.emplace_back(o.offset, o.offset + align_up(o.bytes));
    });
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + align_up(buffer.bytes) <= begin) break;
      offset = std::max(offset, end);
    }
    buffer.offset = offset;
    activation_bytes = std::max(activation_bytes, offset + align_up(buffer.bytes));
    placed.place(b);
  }
}

bool Plan::updates_in_place(const Value* update) const {
  const int b = buffer_of(update);
  return b >= 0 && buffers_[b].arena == ArenaKind::kParameters;
}

std::string Plan::summary() const {
  std::string out;
  for (int a = 0; a < kNumArenas; ++a) {
    out += str_cat(arena_name(static_cast<ArenaKind>(a)), ": ", arena_bytes_[a], " bytes\n");
  }
  int in_place = 0;
  for (const Buffer& buffer : buffers_) in_place += static_cast<int>(buffer.values.size()) - 1;
  out += str_cat("activations without sharing: ", unshared_activation_bytes_, " bytes; ",
                 buffers_.size(), " buffers, ", in_place, " values written in place (",
                 in_place_state_bytes_, " bytes of state updated in place)\n");
  return out;
}

}  // namespace ampc::runtime
