// canonicalize: one spelling for things ONNX lets a model say in several ways.
//
// Rewrites, per node in order:
//   - Identity is removed: its output's uses read its input instead. When the output is a graph
//     output, the input takes over the output's name if it is a plain node output; an Identity
//     whose input is a graph input, an initializer or another graph output, and whose output is a
//     graph output, is kept (the interface needs both names). So is any node its OpDef::identity
//     says is the identity from input 0 to output 0 (Dropout with a ratio of 0, which PyTorch's
//     training-mode exports write for `attention_dropout=0.0`), when nothing reads its other
//     outputs.
//   - Opset normalization: for each OpDef::attrs_as_inputs entry (ReduceSum/ReduceMean axes,
//     Squeeze/Unsqueeze axes, Split's split, ...) whose input the node passes as an initializer,
//     the value moves into the attribute and the input is dropped, so later passes read one
//     form. Export writes the input form back for opsets that want it.
//   - Omitted optional operands at the end of the operand list are dropped.
// Assumes: the graph verifies. Initializers that become unread are left to dce.
// Numerics: none; no value changes (Identity is exact; a moved value is copied exactly, and
//   f64 values, which a float attribute would round, are not moved).
#include "compiler/op_def.h"
#include "passes/passes.h"

namespace ampc {
namespace {

// Whether removing `identity` keeps the graph's interface (see the file comment).
bool identity_removable(const Node& identity) {
  const Value* input = identity.operand(0);
  if (!identity.output(0)->is_graph_output()) return true;
  return input->kind() == Value::Kind::kNodeOutput && !input->is_graph_output();
}

// Identity, or a node its OpDef says is the identity from input 0 to output 0 and whose other
// outputs nothing reads. The node has operand 0 and output 0.
bool is_identity(const Node& node) {
  if (node.domain() == kOnnxDomain && node.op_type() == "Identity") return true;
  if (node.def() == nullptr || !node.def()->identity || !node.def()->identity(node)) return false;
  for (int i = 1; i < node.num_outputs(); ++i) {
    if (node.has_output(i) && !node.output(i)->is_dead()) return false;
  }
  return node.operand(0)->type() == node.output(0)->type();
}

bool remove_identity(Graph& graph, Node& node) {
  if (!node.has_operand(0) || !node.has_output(0)) return false;
  if (!is_identity(node) || !identity_removable(node)) return false;
  node.output(0)->replace_all_uses_with(node.operand(0));
  graph.erase_node(&node);
  return true;
}

// The attribute of `kind` holding `value`'s elements; nullopt when they do not fit it.
std::optional<AttrValue> attr_from_tensor(const Tensor& value, AttrKind kind) {
  const bool ints = is_integer(value.dtype());
  // f64 values would round in a (f32) float attribute; they stay inputs.
  const bool floats = is_float(value.dtype()) && value.dtype() != DType::kF64;
  switch (kind) {
    case AttrKind::kInts:
      if (ints) return AttrValue(value.to_i64_vector());
      break;
    case AttrKind::kInt:
      if (ints && value.num_elements() == 1) return AttrValue(value.element_as_i64(0));
      break;
    case AttrKind::kFloats:
      if (floats) {
        std::vector<float> elements;
        for (double element : value.to_double_vector()) {
          elements.push_back(static_cast<float>(element));
        }
        return AttrValue(std::move(elements));
      }
      break;
    case AttrKind::kFloat:
      if (floats && value.num_elements() == 1) {
        return AttrValue(static_cast<float>(value.element_as_double(0)));
      }
      break;
    default:
      break;
  }
  return std::nullopt;
}

bool move_constant_inputs_to_attrs(Node& node) {
  if (node.def() == nullptr) return false;
  bool changed = false;
  for (const AttrAsInput& entry : node.def()->attrs_as_inputs) {
    if (!node.has_operand(entry.input) || node.find_attr(entry.attr) != nullptr) continue;
    const Tensor* value = node.operand(entry.input)->initializer();
    const AttrSpec* spec = node.def()->find_attr(entry.attr);
    if (value == nullptr || !value->has_data() || spec == nullptr) continue;
    std::optional<AttrValue> attr = attr_from_tensor(*value, spec->kind);
    if (!attr) continue;
    node.mutable_attrs()[entry.attr] = *std::move(attr);
    node.set_operand(entry.input, nullptr);
    changed = true;
  }
  return changed;
}

bool drop_trailing_omitted_operands(Node& node) {
  int count = node.num_operands();
  const int min_count = node.def() ? node.def()->min_inputs() : 0;
  while (count > min_count && !node.has_operand(count - 1)) --count;
  if (count == node.num_operands()) return false;
  node.truncate_operands(count);
  return true;
}

class CanonicalizePass final : public Pass {
 public:
  std::string_view name() const override { return "canonicalize"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    bool changed = false;
    for (Node* node : graph.node_list()) {
      if (remove_identity(graph, *node)) {
        changed = true;
        continue;
      }
      const bool moved = move_constant_inputs_to_attrs(*node);
      const bool dropped = drop_trailing_omitted_operands(*node);
      changed = changed || moved || dropped;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_canonicalize_pass() { return std::make_unique<CanonicalizePass>(); }

}  // namespace ampc
