// fuse-elementwise: chains and trees of element-wise nodes become one ampc.FusedElementwise node
// whose body (compiler/fused_body.h) computes them in one pass over memory.
//
// Rewrites: element-wise nodes over f32, f16, bf16 and bool values (arithmetic, activations and
//   their gradients, comparisons and logic, Where, casts between those types, Expand) of one
//   output shape are grouped from each consumer back to its producers. A producer joins its
//   consumer's group when every reader of its result is in the group or comes after the group's
//   last node, which is where the fused node goes; a result read outside the group becomes an
//   output of the fused node (a value read outside is never hidden in the body), and a producer
//   whose result is read before the group ends stays outside. Operands broadcast to the group's
//   shape when their dimensions other than 1 are one block of its dimensions (scalars, biases,
//   per-row factors). Reductions, shape changes and everything else end a group; a group of one
//   node stays as it is.
// With `--recompute cheap` (FuseElementwiseOptions::recompute), a producer that fails the rule
//   above because it is also read before the group (a forward activation the backward reads)
//   joins as a copy when its operands are already the group's: the group computes it again from
//   them, the node stays for its other readers, and its result is no longer kept for this group
//   (nor at all once every late reader recomputes it). No value lives longer for it.
// Assumes: static shapes; runs last, after autocast, autodiff, loss scaling and the optimizer, so
//   that it sees the casts, the backward and the update arithmetic.
// Numerics: none change. Each body instruction rounds to its node's output type, so the fused
//   node's results are bit for bit those of the nodes it replaces (tests/passes/
//   fuse_elementwise_test.cc and the trajectories of tests/runtime/fusion_test.cc).
#include "passes/fuse_elementwise.h"

#include <algorithm>
#include <queue>
#include <set>
#include <unordered_map>

#include "compiler/fused_body.h"
#include "compiler/strings.h"

namespace ampc {
namespace {

// Bounds that keep a body small: the CPU kernel's scratch is a block per slot.
constexpr int kMaxInstructions = 48;

// One node as a body instruction: which op, its parameters, which of its operands it reads.
struct Member {
  FusedOp op = FusedOp::kIdentity;
  std::vector<float> params;
  std::vector<int> operands;
};

std::optional<FusedOp> plain_op(std::string_view domain, std::string_view op) {
  static const std::unordered_map<std::string_view, FusedOp> kOnnx = {
      {"Neg", FusedOp::kNeg},
      {"Abs", FusedOp::kAbs},
      {"Sqrt", FusedOp::kSqrt},
      {"Exp", FusedOp::kExp},
      {"Log", FusedOp::kLog},
      {"Reciprocal", FusedOp::kReciprocal},
      {"Relu", FusedOp::kRelu},
      {"Sigmoid", FusedOp::kSigmoid},
      {"Tanh", FusedOp::kTanh},
      {"Erf", FusedOp::kErf},
      {"Softplus", FusedOp::kSoftplus},
      {"Softsign", FusedOp::kSoftsign},
      {"HardSwish", FusedOp::kHardSwish},
      {"Mish", FusedOp::kMish},
      {"Sin", FusedOp::kSin},
      {"Cos", FusedOp::kCos},
      {"Not", FusedOp::kNot},
      {"Add", FusedOp::kAdd},
      {"Sub", FusedOp::kSub},
      {"Mul", FusedOp::kMul},
      {"Div", FusedOp::kDiv},
      {"Pow", FusedOp::kPow},
      {"PRelu", FusedOp::kPRelu},
      {"Equal", FusedOp::kEqual},
      {"Less", FusedOp::kLess},
      {"Greater", FusedOp::kGreater},
      {"LessOrEqual", FusedOp::kLessOrEqual},
      {"GreaterOrEqual", FusedOp::kGreaterOrEqual},
      {"And", FusedOp::kAnd},
      {"Or", FusedOp::kOr},
      {"Xor", FusedOp::kXor},
      {"Where", FusedOp::kWhere},
  };
  static const std::unordered_map<std::string_view, FusedOp> kAmpc = {
      {"ReluGrad", FusedOp::kReluGrad},
  };
  const auto& table = domain.empty() ? kOnnx : kAmpc;
  if (domain != "" && domain != kAmpcDomain) return std::nullopt;
  const auto it = table.find(op);
  if (it == table.end()) return std::nullopt;
  return it->second;
}

std::optional<Member> as_member(const Node& node) {
  if (node.num_outputs() != 1 || !node.has_output(0)) return std::nullopt;
  const std::string& op = node.op_type();
  Member member;
  if (std::optional<FusedOp> plain = plain_op(node.domain(), op)) {
    member.op = *plain;
  } else if (node.domain().empty() && (op == "Min" || op == "Max") && node.num_operands() == 2) {
    member.op = op == "Min" ? FusedOp::kMin : FusedOp::kMax;
  } else if (node.domain().empty() && op == "Cast") {
    member.op = FusedOp::kCast;
  } else if (node.domain().empty() && op == "Expand") {
    member.op = FusedOp::kIdentity;
    member.operands = {0};
  } else if (node.domain().empty() && (op == "LeakyRelu" || op == "Elu" || op == "Celu")) {
    member.op = op == "LeakyRelu" ? FusedOp::kLeakyRelu
                : op == "Elu"     ? FusedOp::kElu
                                  : FusedOp::kCelu;
    member.params = {node.float_attr("alpha")};
  } else if (node.domain().empty() && op == "Selu") {
    member.op = FusedOp::kSelu;
    member.params = {node.float_attr("alpha"), node.float_attr("gamma")};
  } else if (node.domain().empty() && op == "HardSigmoid") {
    member.op = FusedOp::kHardSigmoid;
    member.params = {node.float_attr("alpha"), node.float_attr("beta")};
  } else if (node.domain().empty() && op == "Gelu") {
    const std::string& approximate = node.string_attr("approximate");
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    member.op = approximate == "none" ? FusedOp::kGeluErf : FusedOp::kGeluTanh;
  } else if (node.domain() == kAmpcDomain && op == "GeluGrad") {
    const std::string& approximate = node.string_attr("approximate");
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    member.op = approximate == "none" ? FusedOp::kGeluErfGrad : FusedOp::kGeluTanhGrad;
  } else if (node.domain() == kAmpcDomain && op == "LeakyReluGrad") {
    member.op = FusedOp::kLeakyReluGrad;
    member.params = {node.float_attr("alpha")};
  } else {
    return std::nullopt;
  }
  if (member.operands.empty()) {
    for (int i = 0; i < node.num_operands(); ++i) member.operands.push_back(i);
  }
  if (static_cast<int>(member.operands.size()) != fused_op_arity(member.op)) return std::nullopt;
  for (int i : member.operands) {
    if (!node.has_operand(i) || !fusable_dtype(node.operand(i)->dtype())) return std::nullopt;
  }
  const TensorType& out = node.output(0)->type();
  if (!fusable_dtype(out.dtype) || out.num_elements() == 0) return std::nullopt;
  if (std::any_of(out.shape.begin(), out.shape.end(), [](int64_t d) { return d < 0; })) {
    return std::nullopt;
  }
  // A cast to bool is not a rounding of the value; the other ops keep their operands' types.
  if (member.op == FusedOp::kCast && out.dtype == DType::kBool) return std::nullopt;
  return member;
}

// "Relu '/Relu' (f16: clear-list Relu ...)": a member and the decision it had.
std::string describe_member(const Node& node) {
  std::string text = str_cat(node.op_type(), " '", node.name(), "'");
  const PrecisionDecision& decision = node.precision();
  if (decision.empty()) return text;
  return str_cat(text, " (", decision.compute ? dtype_name(*decision.compute) : "-", ": ",
                 decision.reason, ")");
}

struct Group {
  std::vector<int> members;  // node indices, in graph order once sorted
  std::vector<Value*> operands;
  // Members the group recomputes (--recompute cheap): their nodes stay for their other readers.
  std::set<int> recomputed;
};

class FuseElementwisePass final : public Pass {
 public:
  explicit FuseElementwisePass(FuseElementwiseOptions options) : options_(options) {}
  std::string_view name() const override { return "fuse-elementwise"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    nodes_ = graph.node_list();
    position_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) position_[nodes_[i]] = static_cast<int>(i);
    members_.assign(nodes_.size(), std::nullopt);
    for (size_t i = 0; i < nodes_.size(); ++i) members_[i] = as_member(*nodes_[i]);
    group_of_.assign(nodes_.size(), -1);

    std::vector<Group> groups;
    for (int root = static_cast<int>(nodes_.size()) - 1; root >= 0; --root) {
      if (!members_[root] || group_of_[root] >= 0) continue;
      Group group = grow(root, static_cast<int>(groups.size()));
      if (group.members.size() < 2) {
        for (int m : group.members) group_of_[m] = -1;
        continue;
      }
      groups.push_back(std::move(group));
    }
    std::set<int> recomputed;
    for (Group& group : groups) {
      rewrite(graph, group);
      recomputed.insert(group.recomputed.begin(), group.recomputed.end());
    }
    // A recomputed node whose readers all recompute it now has none (last to first: a chain).
    for (auto it = recomputed.rbegin(); it != recomputed.rend(); ++it) {
      Node* node = nodes_[*it];
      if (group_of_[*it] < 0 && node->output(0)->is_dead()) graph.erase_node(node);
    }
    return !groups.empty();
  }

 private:
  const Shape& shape_of(int index) const { return nodes_[index]->output(0)->shape(); }

  // The group of `root` and the producers that may join it (see the file comment).
  Group grow(int root, int id) {
    Group group;
    const Shape& shape = shape_of(root);
    std::priority_queue<int> candidates;  // latest first: a node's readers are decided before it
    const auto add = [&](int index, bool recompute) -> bool {
      // Operands from outside the group after `index` joins it.
      std::vector<Value*> operands;
      for (Value* value : group.operands) {
        if (value->producer() != nodes_[index]) operands.push_back(value);
      }
      const Node& node = *nodes_[index];
      for (int i : members_[index]->operands) {
        Value* value = node.operand(i);
        if (std::find(operands.begin(), operands.end(), value) != operands.end()) continue;
        if (!broadcast_window(value->shape(), shape)) return false;
        operands.push_back(value);
      }
      if (static_cast<int>(operands.size()) > kMaxFusedOperands) return false;
      // A recomputed producer must read only what the group reads already (else a value would
      // live on to the group for it), and its result stays read outside, so it stays an operand
      // elsewhere: the group's own copy replaces it here.
      if (recompute && operands.size() > group.operands.size() - 1) return false;
      group.operands = std::move(operands);
      group.members.push_back(index);
      if (recompute) {
        group.recomputed.insert(index);
      } else {
        group_of_[index] = id;
      }
      for (int i : members_[index]->operands) {
        if (Node* producer = node.operand(i)->producer()) candidates.push(position_.at(producer));
      }
      return true;
    };
    if (!add(root, false)) return group;
    while (!candidates.empty() && static_cast<int>(group.members.size()) < kMaxInstructions) {
      const int index = candidates.top();
      candidates.pop();
      if (!members_[index] || shape_of(index) != shape || group.recomputed.contains(index)) {
        continue;
      }
      if (group_of_[index] < 0 && readers_allow(index, root, id)) {
        add(index, false);
      } else if (options_.recompute && group_of_[index] < 0 && reads_value(group, index)) {
        add(index, true);
      }
    }
    return group;
  }

  // Whether every reader of node `index`'s result is in group `id` or after `root`.
  bool readers_allow(int index, int root, int id) const {
    for (const Use& use : nodes_[index]->output(0)->uses()) {
      const int reader = position_.at(use.user);
      if (group_of_[reader] != id && reader <= root) return false;
    }
    return true;
  }

  // Whether a member of `group` reads node `index`'s result (so that it is a group operand now).
  bool reads_value(const Group& group, int index) const {
    const Value* value = nodes_[index]->output(0);
    return std::find(group.operands.begin(), group.operands.end(), value) != group.operands.end();
  }

  void rewrite(Graph& graph, Group& group) {
    std::sort(group.members.begin(), group.members.end());
    const int id = group_of_[group.members.back()];  // the root's (never recomputed)
    // Operands in the order the body first reads them, so that equal chains get equal bodies.
    std::vector<Value*> operands;
    for (int index : group.members) {
      for (int i : members_[index]->operands) {
        Value* value = nodes_[index]->operand(i);
        const bool external =
            std::find(group.operands.begin(), group.operands.end(), value) != group.operands.end();
        if (external && std::find(operands.begin(), operands.end(), value) == operands.end()) {
          operands.push_back(value);
        }
      }
    }
    group.operands = std::move(operands);
    const int num_inputs = static_cast<int>(group.operands.size());
    FusedBody body;
    body.num_inputs = num_inputs;
    std::unordered_map<const Value*, int> slot;
    for (int i = 0; i < num_inputs; ++i) slot[group.operands[i]] = i;
    std::vector<Value*> results;  // the members' results the fused node outputs
    std::vector<std::string> described;
    for (int index : group.members) {
      const Node& node = *nodes_[index];
      const Member& member = *members_[index];
      FusedInstr instr{member.op, {}, member.params, node.output(0)->dtype()};
      for (int i : member.operands) instr.args.push_back(slot.at(node.operand(i)));
      Value* result = node.output(0);
      slot[result] = body.slot_of_instr(static_cast<int>(body.instrs.size()));
      body.instrs.push_back(std::move(instr));
      const bool recomputed = group.recomputed.contains(index);
      described.push_back(recomputed ? describe_member(node) + " recomputed"
                                     : describe_member(node));
      if (recomputed) continue;  // its node stays, and its readers outside keep reading it
      // A reader the map does not know is the fused node of a group rewritten before this one.
      const bool read_outside =
          result->is_graph_output() ||
          std::any_of(result->uses().begin(), result->uses().end(), [&](const Use& use) {
            const auto it = position_.find(use.user);
            return it == position_.end() || group_of_[it->second] != id;
          });
      if (read_outside || index == group.members.back()) {
        body.outputs.push_back(slot.at(result));
        results.push_back(result);
      }
    }
    Node* root = nodes_[group.members.back()];
    std::vector<std::optional<TensorType>> output_types;
    for (const Value* result : results) output_types.push_back(result->type());
    Attributes attrs;
    attrs["body"] = body.to_string();
    attrs["shape"] = Shape(root->output(0)->shape());
    Node* fused = graph.create_node(kAmpcDomain, "FusedElementwise", group.operands, output_types,
                                    std::move(attrs), root);
    if (!root->name().empty()) fused->set_name(str_cat(root->name(), "/fused"));
    // A graph compiled with a precision policy explains every node; the fused node says which
    // nodes it holds (their own decisions are in the eval graph and the dumps before this pass).
    if (!root->precision().empty()) {
      PrecisionDecision& decision = fused->mutable_precision();
      decision.compute = root->precision().compute;
      decision.reason = str_cat("fuses ", group.members.size(),
                                " element-wise nodes: ", str_join(described, ", "));
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < results.size(); ++i) {
      names.push_back(results[i]->name());
      results[i]->replace_all_uses_with(fused->output(static_cast<int>(i)));
    }
    std::set<Value*> maybe_dead;  // Expand's shapes, now read by nothing
    for (auto it = group.members.rbegin(); it != group.members.rend(); ++it) {
      if (group.recomputed.contains(*it)) continue;
      Node* node = nodes_[*it];
      for (Value* operand : node->operands()) {
        if (operand != nullptr && operand->initializer() != nullptr) maybe_dead.insert(operand);
      }
      graph.erase_node(node);
    }
    for (size_t i = 0; i < results.size(); ++i)
      fused->output(static_cast<int>(i))->set_name(names[i]);
    for (Value* value : maybe_dead) {
      if (value->is_dead()) graph.erase_graph_value(value);
    }
  }

  FuseElementwiseOptions options_;
  std::vector<Node*> nodes_;
  std::unordered_map<const Node*, int> position_;
  std::vector<std::optional<Member>> members_;
  std::vector<int> group_of_;
};

}  // namespace

std::unique_ptr<Pass> make_fuse_elementwise_pass(FuseElementwiseOptions options) {
  return std::make_unique<FuseElementwisePass>(options);
}

}  // namespace ampc
