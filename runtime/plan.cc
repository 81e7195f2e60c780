#include "runtime/plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <utility>

#include "compiler/strings.h"
#include "runtime/backend.h"
#include "runtime/live_offsets.h"

namespace ampc::runtime {
namespace {

int64_t align_up(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// Disjoint [begin, end) ranges of arena offsets, merged as they are added (touching ones too:
// no buffer fits in a gap of 0 bytes).
class OffsetRanges {
 public:
  void add(int64_t begin, int64_t end) {
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) {
      --it;
      begin = it->first;
    }
    while (it != ranges_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }

  // The ranges from the lowest up, for a search whose offset only grows: it holds the first
  // range that ends above the offset, and steps to the next one (or searches the tree, when
  // the offset passed several) only when the offset passes it.
  class Cursor {
   public:
    explicit Cursor(const OffsetRanges& set) : set_(&set), it_(set.ranges_.begin()) {}

    // The end of the range that [offset, offset + bytes) meets, or -1 when it meets none.
    // `offset` must not decrease from one call to the next.
    int64_t blocking_end(int64_t offset, int64_t bytes) {
      const auto end = set_->ranges_.end();
      if (it_ != end && it_->second <= offset && ++it_ != end && it_->second <= offset) {
        it_ = set_->ranges_.upper_bound(offset);
        if (it_ != set_->ranges_.begin() && std::prev(it_)->second > offset) --it_;
      }
      return it_ != end && it_->first < offset + bytes ? it_->second : -1;
    }

   private:
    const OffsetRanges* set_;
    std::map<int64_t, int64_t>::const_iterator it_;
  };

 private:
  std::map<int64_t, int64_t> ranges_;  // begin -> end
};

// Where placed buffers sit, by lifetime: a segment tree over the steps in which a buffer's
// lifetime is stored at the O(log steps) nodes that cover it exactly (`own`), and in the
// merged ranges of every node above them (`below`). The buffers whose lifetimes meet [first,
// last] are then those in `below` of the nodes that cover [first, last] and in `own` of the
// nodes above those, a union of O(log steps) merged range sets. Finding the lowest offset free
// in all of them costs about a step of a cursor per range it passes, and packed buffers merge
// into one range, so planning does not grow with the square of the buffers alive at once (as
// comparing each buffer with every placed one would).
class Occupancy {
 public:
  // Lifetimes run from -1 (before the first step) to `steps` (after the last).
  explicit Occupancy(int steps) {
    while (leaves_ < steps + 2) leaves_ *= 2;
    own_.resize(2 * static_cast<size_t>(leaves_));
    below_.resize(2 * static_cast<size_t>(leaves_));
  }

  void place(const Buffer& buffer, int64_t begin, int64_t end) {
    add(1, 0, leaves_, buffer.first_step + 1, buffer.last_step + 1, begin, end);
  }

  // The lowest offset where `bytes` fit beside every placed buffer alive with `buffer`.
  int64_t lowest_free(const Buffer& buffer, int64_t bytes) {
    cursors_.clear();
    collect(1, 0, leaves_, buffer.first_step + 1, buffer.last_step + 1);
    // Round the sets, each moving the offset above its ranges in the way, until every set in a
    // row leaves it where it is. The offset only grows, so each set's cursor only steps forward.
    int64_t offset = 0;
    const size_t n = cursors_.size();
    for (size_t i = 0, clear = 0; clear < n; i = i + 1 == n ? 0 : i + 1) {
      bool moved = false;
      for (int64_t end; (end = cursors_[i].blocking_end(offset, bytes)) >= 0; moved = true) {
        offset = end;
        ++probes_;
      }
      ++probes_;
      clear = moved ? 1 : clear + 1;
    }
    return offset;
  }

  // How many ranges the searches so far have looked at: their work, counted the same on every
  // machine.
  int64_t probes() const { return probes_; }

 private:
  static OffsetRanges& at(std::vector<std::unique_ptr<OffsetRanges>>& nodes, int node) {
    if (!nodes[node]) nodes[node] = std::make_unique<OffsetRanges>();
    return *nodes[node];
  }

  // Node `node` spans steps [low, high); the lifetime is [first, last].
  void add(int node, int low, int high, int first, int last, int64_t begin, int64_t end) {
    if (last < low || first >= high) return;
    at(below_, node).add(begin, end);
    if (first <= low && high - 1 <= last) {
      at(own_, node).add(begin, end);
      return;
    }
    const int middle = (low + high) / 2;
    add(2 * node, low, middle, first, last, begin, end);
    add(2 * node + 1, middle, high, first, last, begin, end);
  }

  void collect(int node, int low, int high, int first, int last) {
    if (last < low || first >= high) return;
    if (first <= low && high - 1 <= last) {
      if (below_[node]) cursors_.emplace_back(*below_[node]);
      return;
    }
    if (own_[node]) cursors_.emplace_back(*own_[node]);
    const int middle = (low + high) / 2;
    collect(2 * node, low, middle, first, last);
    collect(2 * node + 1, middle, high, first, last);
  }

  int leaves_ = 1;
  int64_t probes_ = 0;
  std::vector<std::unique_ptr<OffsetRanges>> own_;
  std::vector<std::unique_ptr<OffsetRanges>> below_;
  std::vector<OffsetRanges::Cursor> cursors_;
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
  AMPC_RETURN_IF_ERROR(load_kernels(device));
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
        const int operand = kernel->in_place_operand_for(*node, i);
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
  // Greedy placement: buffers in some order, each at the lowest offset where it fits between
  // the buffers already placed whose lifetimes overlap its own. No order is best for every
  // graph, so three are tried and the one with the smallest arena kept (the first of equals):
  // the largest buffers first; the largest lifetime-by-size areas first; and the order in which
  // they are written (first fit in time, which packs the backward's buffers into the memory the
  // forward's activations free, in backward order). Ties keep graph order: the plan is
  // deterministic.
  //
  // First fit in time is a sweep over the steps (LiveOffsets: O(log n) a buffer, whatever the
  // graph). The other two search the segment tree of lifetimes (Occupancy), which costs a few
  // ranges looked at per level of the tree on ordinary graphs (at most 6 on the example models,
  // the zoo's and GPTs of up to 192 layers), but can grow with the buffers alive at once: where
  // tens of thousands of small buffers stay live in scattered holes (a DenseNet block's Concat
  // gradients), placing the large ones first leaves every small one a search over all of them
  // (100-250 a level), which made planning quadratic there (docs/benchmarks.md). So each may
  // look at no more than kProbesPerLevel ranges per buffer and level (Occupancy::probes, the
  // same count on every machine, so the plan stays deterministic), or it is dropped.
  constexpr int64_t kProbesPerLevel = 16;
  int64_t levels = 1;
  while ((int64_t{1} << levels) < std::ssize(steps_) + 2) ++levels;
  const int64_t budget = kProbesPerLevel * levels * std::max<int64_t>(std::ssize(activations), 64);
  const auto area = [&](int b) {
    return buffers_[b].bytes * (buffers_[b].last_step - buffers_[b].first_step + 1);
  };
  const std::vector<std::function<bool(int, int)>> orders = {
      [&](int a, int b) { return buffers_[a].bytes > buffers_[b].bytes; },
      [&](int a, int b) { return area(a) > area(b); },
      [&](int a, int b) { return buffers_[a].first_step < buffers_[b].first_step; },
  };
  std::vector<int64_t> best_offsets;
  int64_t best_bytes = -1;
  size_t best_order = 0;
  placement_orders_dropped_ = 0;
  for (const size_t o : {size_t{2}, size_t{0}, size_t{1}}) {
    std::vector<int> sequence = activations;
    std::stable_sort(sequence.begin(), sequence.end(), orders[o]);
    std::vector<int64_t> offsets(buffers_.size(), 0);
    const int64_t arena = o == 2 ? place_in_write_order(sequence, offsets)
                                 : place_in_order(sequence, budget, offsets);
    if (arena < 0) {
      ++placement_orders_dropped_;
      continue;
    }
    if (best_bytes < 0 || arena < best_bytes || (arena == best_bytes && o < best_order)) {
      best_bytes = arena;
      best_order = o;
      best_offsets = std::move(offsets);
    }
  }
  for (int b : activations) buffers_[b].offset = best_offsets[b];
  activation_bytes = std::max<int64_t>(best_bytes, 0);
}

int64_t Plan::place_in_write_order(const std::vector<int>& sequence,
                                   std::vector<int64_t>& offsets) const {
  // Placed in order of first step, a buffer meets exactly the placed ones still alive at its
  // first step: those whose last step is not before it.
  LiveOffsets live;
  using Expiry = std::pair<int, int64_t>;  // last step, offset
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> expiring;
  int64_t arena = 0;
  for (int b : sequence) {
    const Buffer& buffer = buffers_[b];
    while (!expiring.empty() && expiring.top().first < buffer.first_step) {
      live.erase(expiring.top().second);
      expiring.pop();
    }
    const int64_t bytes = align_up(buffer.bytes);
    if (bytes == 0) continue;
    offsets[b] = live.lowest_free(bytes);
    live.insert(offsets[b], offsets[b] + bytes);
    expiring.emplace(buffer.last_step, offsets[b]);
    arena = std::max(arena, offsets[b] + bytes);
  }
  return arena;
}

int64_t Plan::place_in_order(const std::vector<int>& sequence, int64_t probe_budget,
                             std::vector<int64_t>& offsets) const {
  Occupancy placed(static_cast<int>(steps_.size()));
  int64_t arena = 0;
  for (int b : sequence) {
    const Buffer& buffer = buffers_[b];
    const int64_t bytes = align_up(buffer.bytes);
    if (bytes == 0) continue;
    offsets[b] = placed.lowest_free(buffer, bytes);
    arena = std::max(arena, offsets[b] + bytes);
    placed.place(buffer, offsets[b], offsets[b] + bytes);
    if (placed.probes() > probe_budget) return -1;
  }
  return arena;
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
  if (placement_orders_dropped_ > 0) {
    out += str_cat("placement: ", placement_orders_dropped_,
                   " of the 3 greedy orders dropped over their search budget\n");
  }
  return out;
}

}  // namespace ampc::runtime
