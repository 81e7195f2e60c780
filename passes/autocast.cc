// autocast: writes a precision decision on every node (Node::precision): the dtype it computes
// in, the dtype it accumulates in, and why. Nothing else changes; insert-casts acts on the
// decisions. docs/precision-policy.md walks through the algorithm with an example.
//
// Each float value is classified as the walk reaches it, in graph order:
//   low       computed in the low-precision dtype by a node
//   fp32      computed in fp32 by a node (deny, pinned, unknown op, or fp32 inputs)
//   weight    a graph input or a trainable/ordinary initializer: fp32 data from outside
//   constant  a program constant, or a constant an exporter lifted into an initializer that is
//             no buffer (passes/mask_data.h: data_by_default), every element of which the low
//             dtype holds exactly (a mask's -inf, a 0.5): it can be cast for free, so it never
//             decides anything
// At O1 a node is decided by its category (compiler/precision_policy.h):
//   allow   low; its inputs will be cast (fp32 accumulate)
//   deny    fp32
//   clear   and follow: low when every float input that is not a constant (nor one the op
//           always reads in fp32, AutocastSpec::fp32_operands) is low; fp32 when
//           any is fp32 (deny spreads forward) or a weight (reading it in low precision would
//           round it); with only constants/weights, fp32. Integer and bool inputs do not count.
//           Then, from the last node back: one of these low nodes after which no node
//           computes low, whose results only fp32 nodes read (a loss's element-wise terms
//           before its fp32 mean, as the exporters write BCEWithLogitsLoss or PoissonNLLLoss),
//           is fp32 too. Low, it would spare no cast (the cast up only moves from its result to
//           its inputs) and round its result, and its gradient, once more: where the terms of
//           a loss cancel, those roundings are most of the error. A graph output stays low, so
//           does a node of an op the policy names (--follow Softmax is taken as written) and a
//           clear node with fewer result elements than operand elements (Slice, Gather: exact
//           in any dtype, it would only move the cast to the larger tensor).
//   none    fp32, and a warning naming the op (once per op type)
// A node pinned by --fp32-nodes, or by the import that lowered an op into it (Node::fp32_pin),
// is fp32 whatever its category. O0 makes every node fp32; O2
// every node low but losses, normalizations and nodes with scalar results (the loss and the
// arithmetic on it); O3 every node low. Nodes without float data
// (shape arithmetic on integers) record that they have none.
#include <regex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/precision_policy.h"
#include "compiler/strings.h"
#include "passes/mask_data.h"
#include "passes/passes.h"

namespace ampc {
namespace {

enum class Kind { kLow, kFp32, kWeight, kConstant };

// Whether the initializer `value` is a constant of the program: made one by the compiler
// (Value::is_constant), or data an exporter lifted out of the graph that autodiff does not train
// by default (a dynamo export's val_<n> scale, a folded torch.zeros). Buffers and frozen
// parameters are data too, but state a step may change (a running statistic, or either one named
// by --trainable), so their values decide nothing.
bool is_program_constant(const Value& value, bool file_declares) {
  return value.is_constant() ||
         (!value.is_declared_untrained() && data_by_default(value, file_declares));
}

// Ops O2 keeps in fp32: losses and normalization statistics.
bool o2_keeps_fp32(const Node& node) {
  static const std::set<std::string, std::less<>> ops = {
      "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "LayerNormalization", "Softmax",
      "LogSoftmax"};
  return node.domain().empty() && ops.contains(node.op_type());
}

// Whether every float output of `node` is a scalar (one element): at O2 the loss and the arithmetic
// on it (a sum of two losses, a weight on one), kept fp32 as PyTorch computes its losses (its
// scaled gradient, 65536 by default, would overflow an f16 scalar before anything else runs).
bool only_scalar_float_outputs(const Node& node) {
  bool any = false;
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (!node.has_output(i) || !is_arithmetic_float(node.output(i)->dtype())) continue;
    if (node.output(i)->type().num_elements() != 1) return false;
    any = true;
  }
  return any;
}

class AutocastPass final : public Pass {
 public:
  explicit AutocastPass(PrecisionPolicy policy) : policy_(std::move(policy)) {}
  std::string_view name() const override { return "autocast"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    std::vector<std::pair<std::regex, const PrecisionPolicy::NodePin*>> pins;
    for (const PrecisionPolicy::NodePin& pin : policy_.fp32_nodes) {
      try {
        pins.emplace_back(std::regex(pin.regex), &pin);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(
            str_cat(pin.source, ": bad regex '", pin.regex, "': ", e.what()));
      }
    }
    std::vector<bool> pin_used(pins.size(), false);
    kinds_.clear();
    followers_.clear();
    for (const Value* input : graph.inputs()) kinds_[input] = Kind::kWeight;
    declares_ = declares_parameters(graph);
    for (const Value* init : graph.initializers()) {
      kinds_[init] =
          is_program_constant(*init, declares_) &&
                  (policy_.low == DType::kF32 || holds_exactly(*init->initializer(), policy_.low))
              ? Kind::kConstant
              : Kind::kWeight;
    }
    std::set<std::string> warned;
    for (const auto& node_ptr : graph.nodes()) {
      Node& node = *node_ptr;
      PrecisionDecision decision = decide(node, pins, pin_used, warned, context);
      const bool low = decision.compute == policy_.low && policy_.low != DType::kF32;
      for (int i = 0; i < node.num_outputs(); ++i) {
        if (node.has_output(i) && is_arithmetic_float(node.output(i)->dtype())) {
          kinds_[node.output(i)] = low ? Kind::kLow : Kind::kFp32;
        }
      }
      node.mutable_precision() = std::move(decision);
    }
    compute_fp32_after_the_last_low_node(graph);
    // A pin that matches nothing would do nothing: an error, as a flag that has no effect is.
    for (size_t i = 0; i < pins.size(); ++i) {
      if (!pin_used[i]) {
        return absl::InvalidArgumentError(str_cat(pins[i].second->source, " '",
                                                  pins[i].second->regex,
                                                  "' matches no node, so it pins nothing"));
      }
    }
    return true;
  }

 private:
  PrecisionDecision decide(
      const Node& node,
      const std::vector<std::pair<std::regex, const PrecisionPolicy::NodePin*>>& pins,
      std::vector<bool>& pin_used, std::set<std::string>& warned, const PassContext& context) {
    const std::string low_name(dtype_name(policy_.low));
    PrecisionDecision d;
    if (!has_float_data(node)) {
      d.reason = "no floating-point data";
      return d;
    }
    if (node.domain().empty() && (node.op_type() == "Shape" || node.op_type() == "Size")) {
      d.reason = "no floating-point data (reads the shape only)";
      return d;
    }
    if (has_f64_data(node)) {
      d.compute = DType::kF64;
      d.reason = "f64 data stays f64";
      return d;
    }
    if (node.op_type() == "Cast" && node.domain().empty()) {
      d.compute = node.output(0)->dtype();
      d.reason = "explicit Cast in the model";
      return d;
    }
    for (size_t i = 0; i < pins.size(); ++i) {
      if (std::regex_search(node.name(), pins[i].first)) {
        pin_used[i] = true;
        return fp32(
            str_cat("pinned by ", pins[i].second->source, " '", pins[i].second->regex, "'"));
      }
    }
    if (!node.fp32_pin().empty()) return fp32(node.fp32_pin());
    if (policy_.low == DType::kF32) return fp32("--precision fp32");
    switch (policy_.level) {
      case OptLevel::kO0:
        return fp32("O0: everything fp32");
      case OptLevel::kO3:
        return low_decision(node, str_cat("O3: everything ", low_name));
      case OptLevel::kO2:
        if (o2_keeps_fp32(node)) return fp32(str_cat("O2: ", node.op_type(), " stays fp32"));
        if (only_scalar_float_outputs(node)) {
          return fp32("O2: a scalar result (a loss, or arithmetic on losses) stays fp32");
        }
        return low_decision(node,
                            str_cat("O2: everything ", low_name, " but losses and normalization"));
      case OptLevel::kO1:
        break;
    }
    const StandIn stand_in = stands_in_for(node);
    const OpDef* def = stand_in.def != nullptr ? stand_in.def : node.def();
    const CategoryChoice choice =
        def != nullptr ? category_of(*def, policy_) : CategoryChoice{AutocastCategory::kNone, ""};
    const std::string op =
        def == nullptr ? node.op_type() : str_cat(def->qualified_name(), stand_in.form);
    const std::string what = entry_of(choice, op);
    if (const Node* product = linear_bias_of(node);
        product != nullptr && !choice.overridden && choice.category == AutocastCategory::kFollow) {
      return low_decision(
          node, str_cat(what, ": adds the bias of '", product->name(), "' (nn.Linear's, in ",
                        low_name, " with its product as F.linear's under autocast)"));
    }
    if (const Node* divide = rsqrt_reader(node); divide != nullptr) {
      const OpDef& reciprocal = *stands_in_for(*divide).def;
      const CategoryChoice as = category_of(reciprocal, policy_);
      if (as.category == AutocastCategory::kDeny) {
        return fp32(str_cat(entry_of(as, reciprocal.qualified_name()), ": the root '",
                            divide->name(), "' divides by (torch.rsqrt as TorchScript writes it)"));
      }
    }
    if (const Node* atan = arctangent_reader(node); atan != nullptr && !choice.overridden) {
      return fp32(str_cat(what, ": '", atan->name(),
                          "' takes the arctangent of its quotient (torch.atan2 as the exporters "
                          "write it; in fp16 the quotient and its gradient overflow where the "
                          "angle does not)"));
    }
    if (const Node* sum = summing_reader(node); sum != nullptr && !choice.overridden) {
      return fp32(str_cat(what, ": its products are summed in fp32 by '", sum->name(),
                          "' (a dot product's, exact in fp32 as a GEMM's)"));
    }
    switch (choice.category) {
      case AutocastCategory::kAllow:
        return low_decision(node, what);
      case AutocastCategory::kDeny:
        return fp32(what);
      case AutocastCategory::kNone:
        if (warned.insert(op).second) {
          context.warn(str_cat("op ", op,
                               " has no precision entry; its nodes stay fp32 (put it "
                               "in a list with --allow/--deny or a --policy file)"));
        }
        return fp32(str_cat("no precision entry for ", op));
      case AutocastCategory::kClear:
      case AutocastCategory::kFollow:
        return by_inputs(node, what, choice);
    }
    return fp32("?");
  }

  // The policy entry that decides `op`: "allow-list MatMul", or for a user's "deny (--deny Gelu)".
  static std::string entry_of(const CategoryChoice& choice, std::string_view op) {
    return choice.overridden
               ? str_cat(autocast_category_name(choice.category), " (", choice.source, ")")
               : str_cat(choice.source, " ", op);
  }

  // The op a node computes under another's name, whose entry decides it unless the policy names
  // the node's own op:
  //   Mul(x, x)      Pow's: the square Pow(x, 2) is, as exporters and import's lowerings write
  //                  squares (mse_loss, norms, variances); in fp16 it overflows from 256 on,
  //                  before the sum that is fp32 anyway.
  //   Div(c, x)      Reciprocal's, for a constant scalar c: the TorchScript exporter writes
  //                  torch.rsqrt as Div(1, Sqrt(x)), and PyTorch computes c / x as
  //                  x.reciprocal() * c; autocast runs both in fp32 (1 / x overflows fp16 from
  //                  x < 2^-16 on).
  struct StandIn {
    const OpDef* def = nullptr;
    const char* form = "";
  };
  StandIn stands_in_for(const Node& node) const {
    if (!node.domain().empty() || node.num_operands() != 2 ||
        policy_.ops.contains(node.op_type())) {
      return {};
    }
    const int opset = node.graph()->opset("");
    if (node.op_type() == "Mul" && node.operand(0) == node.operand(1) &&
        is_arithmetic_float(node.operand(0)->dtype())) {
      return {OpRegistry::global().find("", "Pow", opset), " (x * x)"};
    }
    if (node.op_type() == "Div" && node.operand(0) != nullptr && node.operand(1) != nullptr &&
        is_arithmetic_float(node.operand(1)->dtype()) && constant_scalar(node.operand(0)) &&
        !is_constant_kind(node.operand(1))) {
      return {OpRegistry::global().find("", "Reciprocal", opset), " (c / x)"};
    }
    return {};
  }

  // Whether `value` was classified a constant (values the walk has not reached are not).
  bool is_constant_kind(const Value* value) const {
    const auto it = kinds_.find(value);
    return it != kinds_.end() && it->second == Kind::kConstant;
  }

  // For a Sqrt every reader of which divides a constant by it (Div(c, Sqrt(x)), which
  // stands_in_for takes as Reciprocal), the first of those readers; else null. Together they are
  // torch.rsqrt, which autocast computes in fp32 from the low input.
  const Node* rsqrt_reader(const Node& node) const {
    if (node.op_type() != "Sqrt" || !node.domain().empty() || policy_.ops.contains("Sqrt")) {
      return nullptr;
    }
    return only_readers(node, [&](const Use& use) {
      return use.operand == 1 && use.user->op_type() == "Div" &&
             stands_in_for(*use.user).def != nullptr;
    });
  }

  // The first reader of `node`'s only output when there are readers and `reads` holds for each
  // use; else null.
  template <typename Reads>
  static const Node* only_readers(const Node& node, Reads reads) {
    if (node.num_outputs() != 1 || node.output(0)->uses().empty()) return nullptr;
    for (const Use& use : node.output(0)->uses()) {
      if (use.user == nullptr || !reads(use)) return nullptr;
    }
    return node.output(0)->uses().front().user;
  }

  // For an Add of a low MatMul's product and a bias, the MatMul; else null. The exporters write
  // nn.Linear on inputs of rank 3 and more (every transformer's) as MatMul by the (transposed)
  // weight, then Add of the bias [N]; F.linear under autocast adds its bias in low precision, as
  // Gemm (the rank-2 form) does, where the rule for a weight read by a follow op would keep the
  // Add, and everything after it up to the next MatMul, in fp32.
  const Node* linear_bias_of(const Node& node) const {
    if (node.op_type() != "Add" || !node.domain().empty() || node.num_operands() != 2) {
      return nullptr;
    }
    const auto is_weight = [&](const Value* v) {
      return v != nullptr && v->kind() == Value::Kind::kInitializer &&
             kinds_.at(v) == Kind::kWeight;
    };
    for (int i = 0; i < 2; ++i) {
      const Value* product = node.operand(i);
      const Value* bias = node.operand(1 - i);
      const Node* matmul = product->producer();
      if (matmul == nullptr || matmul->op_type() != "MatMul" || !matmul->domain().empty() ||
          kinds_.at(product) != Kind::kLow || !is_weight(bias) || bias->shape().size() != 1 ||
          product->shape().empty() || bias->shape()[0] != product->shape().back()) {
        continue;
      }
      const Value* weight = matmul->operand(1);
      const Node* transpose = weight->producer();
      if (transpose != nullptr && transpose->op_type() == "Transpose" &&
          transpose->domain().empty()) {
        weight = transpose->operand(0);
      }
      if (is_weight(weight) && weight->shape().size() == 2) return matmul;
    }
    return nullptr;
  }

  // In fp16, for a Div every reader of which is an Atan, the first of those; else null. The
  // exporters write atan2(y, x) as Atan(y / x) and quadrant corrections: where x is small the
  // quotient overflows fp16, or its square does in Atan's gradient 1 / (1 + u^2), where
  // PyTorch's atan2 and its gradient x / (x^2 + y^2) never form it.
  const Node* arctangent_reader(const Node& node) const {
    if (node.op_type() != "Div" || !node.domain().empty() || policy_.low != DType::kF16) {
      return nullptr;
    }
    return only_readers(node, [](const Use& use) {
      return use.user->domain().empty() && use.user->op_type() == "Atan";
    });
  }

  // For a Mul every reader of which is a fp32 sum (ReduceSum, ReduceMean: cosine similarity's
  // dot products, mse_loss's squared differences as TorchScript writes them, a masked mean), the
  // first of those readers; else null. Such a Mul is the element-wise half of a dot product,
  // whose products a GEMM computes exactly in fp32: in fp16 they overflow from 65504 (two
  // values of 256), before the sum that is fp32 anyway.
  // A Mul by a constant scales (tanh(h) * 0.5): it is no product of two values, and follows.
  const Node* summing_reader(const Node& node) const {
    if (node.op_type() != "Mul" || !node.domain().empty() || node.num_outputs() != 1 ||
        !is_arithmetic_float(node.output(0)->dtype()) || policy_.low != DType::kF16 ||
        node.num_operands() != 2 || kinds_.at(node.operand(0)) == Kind::kConstant ||
        kinds_.at(node.operand(1)) == Kind::kConstant) {
      return nullptr;
    }
    return only_readers(node, [&](const Use& use) {
      const Node& reader = *use.user;
      return reader.domain().empty() &&
             (reader.op_type() == "ReduceSum" || reader.op_type() == "ReduceMean") &&
             reader.def() != nullptr &&
             category_of(*reader.def(), policy_).category == AutocastCategory::kDeny;
    });
  }

  // clear and follow: low when all float inputs that decide are low.
  PrecisionDecision by_inputs(const Node& node, const std::string& what,
                              const CategoryChoice& choice) {
    const Value* low_input = nullptr;
    const std::vector<int> fp32_operands =
        node.def() != nullptr ? node.def()->autocast.fp32_operands : std::vector<int>{};
    for (int i = 0; i < node.num_operands(); ++i) {
      const Value* operand = node.operand(i);
      if (operand == nullptr || !is_arithmetic_float(operand->dtype())) continue;
      // Operands the op reads in fp32 whatever it computes in (BatchNorm's statistics).
      if (std::find(fp32_operands.begin(), fp32_operands.end(), i) != fp32_operands.end()) {
        continue;
      }
      switch (kinds_.at(operand)) {
        case Kind::kConstant:
          break;
        case Kind::kLow:
          if (low_input == nullptr) low_input = operand;
          break;
        case Kind::kFp32:
          return fp32(
              str_cat(what, ": input %", operand->name(), " is fp32", producer_label(operand)));
        case Kind::kWeight:
          return fp32(str_cat(
              what, ": reads fp32 %", operand->name(),
              operand->kind() == Value::Kind::kGraphInput ? " (graph input)"
              : is_program_constant(*operand, declares_)
                  ? str_cat(" (a constant ", dtype_name(policy_.low), " does not hold exactly)")
                  : std::string(" (weight)")));
      }
    }
    if (low_input == nullptr) return fp32(str_cat(what, ": only constants in"));
    // A policy entry that names the op is taken as written: step 4 leaves its nodes low.
    if (!choice.overridden) {
      followers_.emplace(&node, Follower{what, choice.category == AutocastCategory::kClear});
    }
    return low_decision(node,
                        str_cat(what, ": follows %", low_input->name(), producer_label(low_input)));
  }

  // Makes fp32 each node by_inputs made low that feeds no low node, directly or through others,
  // and that fp32 nodes read (see the top of this file), from the last node back, so that a chain
  // of them is fp32 up to the cast of its first input.
  void compute_fp32_after_the_last_low_node(Graph& graph) {
    if (followers_.empty()) return;
    const std::vector<Node*> nodes = graph.node_list();
    std::unordered_set<const Node*> feeds_low;
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node& node = **it;
      bool graph_output = false;
      const Node* fp32_reader = nullptr;
      bool low_after = false;
      for (int i = 0; i < node.num_outputs(); ++i) {
        if (!node.has_output(i)) continue;
        graph_output = graph_output || node.output(i)->is_graph_output();
        for (const Use& use : node.output(i)->uses()) {
          const std::optional<DType> compute = use.user->precision().compute;
          if (feeds_low.contains(use.user) || compute == DType::kF16 || compute == DType::kBF16) {
            low_after = true;
          } else if (compute == DType::kF32 && fp32_reader == nullptr) {
            fp32_reader = use.user;
          }
        }
      }
      if (low_after) {
        feeds_low.insert(&node);
        continue;
      }
      const auto follower = followers_.find(&node);
      if (follower == followers_.end() || graph_output || fp32_reader == nullptr ||
          (follower->second.clear && shrinks(node))) {
        continue;
      }
      node.mutable_precision() = fp32(
          str_cat(follower->second.what, ": fp32 nodes read it and none after it computes low (",
                  node_label(*fp32_reader), " reads it)"));
    }
  }

  // Whether `node` has fewer float result elements than float operand elements (Slice, Gather,
  // MaxPool): fp32, such a clear node (exact in any dtype) would only have its inputs cast up,
  // more than its results, where Reshape or Transpose moves the cast at no cost.
  static bool shrinks(const Node& node) {
    int64_t in = 0;
    int64_t out = 0;
    for (const Value* operand : node.operands()) {
      if (operand != nullptr && is_arithmetic_float(operand->dtype())) {
        in += operand->type().num_elements();
      }
    }
    for (int i = 0; i < node.num_outputs(); ++i) {
      if (node.has_output(i) && is_arithmetic_float(node.output(i)->dtype())) {
        out += node.output(i)->type().num_elements();
      }
    }
    return out < in;
  }

  static std::string producer_label(const Value* value) {
    const Node* producer = value->producer();
    return producer == nullptr ? "" : str_cat(" from ", node_label(*producer));
  }

  // "'mm'", or the op type of a node without a name.
  static std::string node_label(const Node& node) {
    return node.name().empty() ? node.op_type() : str_cat("'", node.name(), "'");
  }

  static bool has_float_data(const Node& node) {
    for (const Value* operand : node.operands()) {
      if (operand != nullptr && is_arithmetic_float(operand->dtype())) return true;
    }
    for (int i = 0; i < node.num_outputs(); ++i) {
      if (node.has_output(i) && is_arithmetic_float(node.output(i)->dtype())) return true;
    }
    return false;
  }

  static bool has_f64_data(const Node& node) {
    for (const Value* operand : node.operands()) {
      if (operand != nullptr && operand->dtype() == DType::kF64) return true;
    }
    for (int i = 0; i < node.num_outputs(); ++i) {
      if (node.has_output(i) && node.output(i)->dtype() == DType::kF64) return true;
    }
    return false;
  }

  PrecisionDecision low_decision(const Node& node, std::string reason) const {
    PrecisionDecision d;
    d.compute = policy_.low;
    const bool allow =
        node.def() != nullptr && node.def()->autocast.category == AutocastCategory::kAllow;
    if (allow || accumulates_in_fp32(node)) d.accumulate = DType::kF32;
    d.reason = std::move(reason);
    return d;
  }

  static PrecisionDecision fp32(std::string reason) {
    PrecisionDecision d;
    d.compute = DType::kF32;
    d.reason = std::move(reason);
    return d;
  }

  PrecisionPolicy policy_;
  std::unordered_map<const Value*, Kind> kinds_;
  // The nodes by_inputs made low by an entry the policy does not override: the entry that
  // decided them ("follow-list Mul"), and whether it is clear.
  struct Follower {
    std::string what;
    bool clear = false;
  };
  std::unordered_map<const Node*, Follower> followers_;
  // Whether the graph's file declares its parameters (passes/mask_data.h).
  bool declares_ = false;
};

}  // namespace

bool accumulates_in_fp32(const Node& node) {
  static const std::set<std::string, std::less<>> onnx_ops = {"ReduceSum",
                                                              "ReduceMean",
                                                              "GlobalAveragePool",
                                                              "AveragePool",
                                                              "Softmax",
                                                              "LogSoftmax",
                                                              "LayerNormalization",
                                                              "BatchNormalization",
                                                              "SoftmaxCrossEntropyLoss",
                                                              "NegativeLogLikelihoodLoss"};
  // The backward's: sums over the batch, the rows or the keys, and the scatters that add.
  static const std::set<std::string, std::less<>> ampc_ops = {"Attention",
                                                              "AttentionGrad",
                                                              "BatchNormalizationGrad",
                                                              "ConvGradData",
                                                              "ConvGradFilter",
                                                              "GatherElementsGrad",
                                                              "GatherGrad",
                                                              "GatherNDGrad",
                                                              "LayerNormalizationGrad",
                                                              "LogSoftmaxGrad",
                                                              "SoftmaxCrossEntropyLossGrad",
                                                              "SoftmaxGrad",
                                                              "SyncBatchNormalization"};
  if (node.domain().empty()) return onnx_ops.contains(node.op_type());
  return node.domain() == kAmpcDomain && ampc_ops.contains(node.op_type());
}

void describe_nodes(Graph& graph, const std::vector<Node*>& nodes, std::string_view reason) {
  const bool decided = std::any_of(graph.nodes().begin(), graph.nodes().end(),
                                   [](const auto& node) { return !node->precision().empty(); });
  if (!decided) return;
  for (Node* node : nodes) {
    if (!node->precision().empty()) continue;
    PrecisionDecision d;
    for (int i = 0; i < node->num_outputs() && !d.compute; ++i) {
      if (node->has_output(i) && is_arithmetic_float(node->output(i)->dtype())) {
        d.compute = node->output(i)->dtype();
      }
    }
    // A test of floats (IsNaN, a comparison, ArgMax) computes in what it reads.
    for (int i = 0; i < node->num_operands() && !d.compute; ++i) {
      if (node->has_operand(i) && is_arithmetic_float(node->operand(i)->dtype())) {
        d.compute = node->operand(i)->dtype();
      }
    }
    if (d.compute && accumulates_in_fp32(*node)) d.accumulate = DType::kF32;
    d.reason = d.compute ? std::string(reason) : "no floating-point data";
    node->mutable_precision() = std::move(d);
  }
}

void describe_undecided_nodes(Graph& graph, std::string_view reason) {
  describe_nodes(graph, graph.node_list(), reason);
}

std::unique_ptr<Pass> make_autocast_pass(PrecisionPolicy policy) {
  return std::make_unique<AutocastPass>(std::move(policy));
}

}  // namespace ampc
