// Plan: how a graph runs. The execution order, every node's kernel (resolved once), and where
// every value lives: one arena per memory class, each value at a static offset.
//
// Liveness is by step (the position of a node in the graph's topological order). A value is
// live from the step that produces it to its last reader; graph inputs and initializers live for
// the whole run and graph outputs until its end. Activation buffers whose lifetimes do not
// overlap share memory: each buffer goes at the lowest offset free for its lifetime, in three
// greedy orders (largest first, largest lifetime x size first, first written first), and the
// placement with the smallest arena is kept. On the example models' training steps that is the
// most bytes live at any one step, which no placement of the same order can beat
// (tests/runtime/plan_test.cc). An element-wise or reshaping node may write its output over an
// operand it is the last reader of (KernelDef::in_place_operand); the two values then share one
// buffer. So may a node that computes a state update over the state it updates (an optimizer's
// parameter and moments, the loss scale), which is then updated in place in the parameters
// arena (PlanOptions::update_state_in_place).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir.h"
#include "runtime/kernel.h"

namespace ampc::runtime {

enum class ArenaKind : int {
  kParameters = 0,   // initializers: weights and constants, written once at load
  kActivations = 1,  // graph inputs, intermediate values and graph outputs
  kWorkspace = 2,    // scratch of the running kernel (one node at a time)
};
inline constexpr int kNumArenas = 3;
std::string_view arena_name(ArenaKind arena);

// Offsets are multiples of this, so every buffer suits any element type and vector loads.
inline constexpr int64_t kBufferAlignment = 64;

// One region of an arena and the values stored in it (several when a node wrote in place).
struct Buffer {
  ArenaKind arena = ArenaKind::kActivations;
  int64_t offset = 0;
  int64_t bytes = 0;
  // Steps from the one that writes the buffer to its last reader, inclusive. -1 is "before the
  // first step" (inputs, initializers); steps().size() is "after the last step" (outputs).
  int first_step = 0;
  int last_step = 0;
  std::vector<const Value*> values;
  // An initializer whose memory another session owns (PlanOptions::shared_initializers): no
  // room in this plan's arenas.
  bool shared = false;
};

struct PlanStep {
  const Node* node = nullptr;
  const KernelDef* kernel = nullptr;
  int64_t workspace_bytes = 0;
  // Buffers nothing reads after this step (their memory is free for later buffers).
  std::vector<int> freed_buffers;
};

struct PlanOptions {
  // false: every value gets its own activation region (no sharing, no in-place).
  bool reuse_memory = true;
  // A state update (Graph::state_updates) is written over its state, when the node computing it
  // may write over that operand (KernelDef::in_place_operand_for) and no later node reads the
  // state: the update then needs neither memory of its own nor a copy after the run. false:
  // every update is an output of its own, copied over the state after the run, so a run that
  // stops early (--check-numerics) leaves the state as it was.
  bool update_state_in_place = true;
  // Initializers whose memory another session on the same backend owns and this one only reads
  // (an eval graph's parameters, which are its training step's state).
  std::set<std::string, std::less<>> shared_initializers = {};
};

class Plan {
 public:
  // Resolves every node's kernel on `device` and assigns every value a buffer. Fails (naming the
  // node, op and dtype) when a node has no kernel.
  static absl::StatusOr<std::unique_ptr<Plan>> build(const Graph& graph, Device device,
                                                     const PlanOptions& options = {});

  const std::vector<PlanStep>& steps() const { return steps_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // The buffer holding `value`, or -1 for a value the plan does not store (none of the graph's).
  int buffer_of(const Value* value) const;

  // Planned size of each arena.
  int64_t arena_bytes(ArenaKind arena) const { return arena_bytes_[static_cast<int>(arena)]; }
  // What the activation arena would need without any sharing: the sum of the sizes of every
  // graph input and node output.
  int64_t unshared_activation_bytes() const { return unshared_activation_bytes_; }
  // A few lines: arena sizes and the sharing achieved.
  std::string summary() const;
  // Whether `update` (a state update's output) is stored over its state.
  bool updates_in_place(const Value* update) const;
  // The bytes of the state updates stored over their state.
  int64_t in_place_state_bytes() const { return in_place_state_bytes_; }
  // How many of the placement orders tried (assign_offsets) were dropped for looking at more
  // ranges than their budget allows.
  int placement_orders_dropped() const { return placement_orders_dropped_; }

 private:
  Plan() = default;
  void assign_offsets(bool reuse_memory);
  // Each places the activation buffers of `sequence` in that order, each at the lowest offset
  // free beside the placed buffers whose lifetimes meet its own, writes their offsets and
  // returns the arena they need. place_in_write_order takes them in order of first step (a
  // sweep over the steps); place_in_order in any order, and returns -1 once its searches have
  // looked at more than `probe_budget` ranges.
  int64_t place_in_write_order(const std::vector<int>& sequence,
                               std::vector<int64_t>& offsets) const;
  int64_t place_in_order(const std::vector<int>& sequence, int64_t probe_budget,
                         std::vector<int64_t>& offsets) const;

  std::vector<PlanStep> steps_;
  std::vector<Buffer> buffers_;
  std::unordered_map<const Value*, int> buffer_of_;
  int64_t arena_bytes_[kNumArenas] = {0, 0, 0};
  int64_t unshared_activation_bytes_ = 0;
  int64_t in_place_state_bytes_ = 0;
  int placement_orders_dropped_ = 0;
};

}  // namespace ampc::runtime
