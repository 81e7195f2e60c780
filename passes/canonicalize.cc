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
//   - Slices of one value along one axis (step 1, known bounds) that do not overlap and cover at
//     least half of it become one Split (the gaps outputs nothing reads), and Gathers from one
//     table (an initializer or graph input) by every piece of a Split of their indices become
//     one Gather and a Split of its result. An unrolled loop over a batch (PyTorch's
//     EmbeddingBag, a scripted loop) slices it into rows this way; Slice's and Gather's
//     gradients are each a tensor of the whole input, so per row they cost the batch's size
//     squared (2 GiB at 2048 bags of 8), where a Split's gradient is one Concat and one
//     Gather's one scatter. Then a Concat, along the Split's axis, of one reduction (ReduceSum,
//     ReduceMean or ReduceMax over that axis, its dim kept or dropped and put back by
//     Unsqueeze) of each of the Split's equal pieces in order is one Reshape of the Split's
//     input that makes the pieces an axis, and one reduction over it: the bags' sums, means or
//     maxima at once.
//   - Log(Sigmoid(x)), as PyTorch's exporters write F.logsigmoid (and the binary cross-entropy
//     with logits, DPO's loss), becomes -Softplus(-x), the form PyTorch computes it in: Sigmoid
//     underflows to 0 below -88 in f32 (-17 in f16), where the composition gives -inf and its
//     gradient 1/0. Log(1 - Sigmoid(x)) (the constant 1, of the Sigmoid's shape), the other term
//     of TorchScript's binary cross-entropy with logits, becomes -Softplus(x): 1 - Sigmoid(x)
//     is 0 from x = 17 in f32, so a confident right answer (target 1) gave 0 * log(0) = NaN.
//     (Other readers of the Sigmoid, or of 1 - Sigmoid, keep them.)
// Assumes: the graph verifies. Initializers and nodes that become unread are left to dce.
// Numerics: none but the log-sigmoids', which are the values log(sigmoid(x)) and
//   log(1 - sigmoid(x)) round to where the compositions lose them; no other value changes (Identity
//   is exact; a moved value is copied exactly, and f64 values, which a float attribute would round,
//   are not moved; Split and Gather move the same elements as the Slices and Gathers they replace;
//   the merged reduction reduces each piece's elements along the same axis, of the same length and
//   inner stride, so in the same order: tests/passes/canonicalize_test.cc checks the results bit
//   for bit).
#include <algorithm>
#include <unordered_set>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "passes/mask_data.h"
#include "passes/passes.h"

namespace ampc {
namespace {

// Whether removing `identity` keeps the graph's interface (see the file comment).
bool identity_removable(const Node& identity) {
  return !identity.output(0)->is_graph_output() || identity.operand(0)->can_take_output_name();
}

// Identity, or a node its OpDef says is the identity from input 0 to output 0 and whose other
// outputs nothing reads. The node has operand 0 and output 0.
bool is_identity(const Node& node) {
  if (node.domain() == kOnnxDomain && node.op_type() == "Identity") {
    return node.int_attr("stop_gradient") == 0;  // a detach() is not removable
  }
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

// ---- Slices as a Split, Gathers by a Split's pieces as one Gather ------------------------------

bool only_read_by(const Value* value, const Node* reader) {
  return !value->is_graph_output() && value->uses().size() == 1 &&
         value->uses().front().user == reader;
}

bool is_onnx_op(const Node* node, std::string_view op_type) {
  return node != nullptr && node->domain() == kOnnxDomain && node->op_type() == op_type;
}

// `replacement` takes `old`'s uses and its name (so the text IR reads the same), `old` a fresh
// one until dce removes it.
void take_over(Graph& graph, Value* old, Value* replacement) {
  const std::string name = old->name();
  old->replace_all_uses_with(replacement);
  old->set_name(graph.unique_value_name(str_cat(name, "/replaced")));
  replacement->set_name(name);
}

// A Slice of one axis with step 1 and bounds known at compile time: [begin, end) of `axis`.
struct AxisSlice {
  Node* node = nullptr;
  int64_t axis = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

std::optional<AxisSlice> axis_slice(Node& node) {
  if (!is_onnx_op(&node, "Slice") || !node.has_output(0) || node.output(0)->is_dead()) {
    return std::nullopt;
  }
  const Tensor* args[4] = {};  // starts, ends, axes, steps
  for (int i = 1; i <= 4; ++i) {
    if (!node.has_operand(i)) continue;
    args[i - 1] = node.operand(i)->initializer();
    if (args[i - 1] == nullptr || !args[i - 1]->has_data() || args[i - 1]->num_elements() != 1) {
      return std::nullopt;
    }
  }
  if (args[0] == nullptr || args[1] == nullptr) return std::nullopt;
  if (args[3] != nullptr && args[3]->element_as_i64(0) != 1) return std::nullopt;
  const Shape& shape = node.operand(0)->shape();
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t axis = args[2] != nullptr ? args[2]->element_as_i64(0) : 0;
  if (axis < -rank || axis >= rank) return std::nullopt;
  if (axis < 0) axis += rank;
  const int64_t dim = shape[axis];
  // ONNX's rule for step 1: negative bounds count from the back, then clamp to [0, dim].
  const auto bound = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
  const int64_t begin = bound(args[0]->element_as_i64(0));
  const int64_t end = bound(args[1]->element_as_i64(0));
  if (end <= begin) return std::nullopt;
  return AxisSlice{&node, axis, begin, end};
}

// `node`, a Slice, and the other Slices of its input along its axis, as one Split (see the file
// comment). `node` is the first of them in the graph (they are visited in order), so the Split
// goes before it. `examined`: the values whose Slices were looked at in this run; each value's
// are looked at once, so a value sliced N ways costs N, not N squared, when they do not merge.
bool merge_slices(Graph& graph, Node& node, std::unordered_set<const Value*>& examined) {
  const std::optional<AxisSlice> first = axis_slice(node);
  if (!first) return false;
  Value* data = node.operand(0);
  if (!examined.insert(data).second) return false;
  std::vector<AxisSlice> slices;
  for (const Use& use : data->uses()) {
    if (use.operand != 0) continue;
    std::optional<AxisSlice> slice = axis_slice(*use.user);
    if (slice && slice->axis == first->axis) slices.push_back(*slice);
  }
  if (slices.size() < 2) return false;
  std::sort(slices.begin(), slices.end(),
            [](const AxisSlice& a, const AxisSlice& b) { return a.begin < b.begin; });
  const int64_t dim = data->shape()[first->axis];
  int64_t covered = 0;
  for (size_t k = 0; k < slices.size(); ++k) {
    if (k > 0 && slices[k].begin < slices[k - 1].end) return false;
    covered += slices[k].end - slices[k].begin;
  }
  if (2 * covered < dim) return false;  // a Split would copy more than twice what they read
  std::vector<int64_t> sizes;
  std::vector<std::optional<TensorType>> types;
  std::vector<const AxisSlice*> pieces;  // per output: its Slice, or null for a gap
  const auto add_piece = [&](int64_t size, const AxisSlice* slice) {
    TensorType type = data->type();
    type.shape[first->axis] = size;
    sizes.push_back(size);
    types.push_back(type);  // a gap too: ONNX's Split has an output per size
    pieces.push_back(slice);
  };
  int64_t position = 0;
  for (const AxisSlice& slice : slices) {
    if (slice.begin > position) add_piece(slice.begin - position, nullptr);
    add_piece(slice.end - slice.begin, &slice);
    position = slice.end;
  }
  if (position < dim) add_piece(dim - position, nullptr);
  Node* split = graph.create_node(
      kOnnxDomain, "Split", {data}, types,
      {{"axis", AttrValue(first->axis)}, {"split", AttrValue(std::move(sizes))}}, &node);
  split->set_name(str_cat(node.name().empty() ? data->name() : node.name(), "/split"));
  for (size_t k = 0; k < pieces.size(); ++k) {
    Value* piece = split->output(static_cast<int>(k));
    if (pieces[k] != nullptr) {
      take_over(graph, pieces[k]->node->output(0), piece);
    } else {
      piece->set_name(graph.unique_value_name(str_cat(data->name(), "/unread")));
    }
  }
  return true;
}

// Gathers from one table by every piece of `split` (their indices) as one Gather by the Split's
// input and a Split of its result along the same axis (see the file comment).
bool merge_gathers(Graph& graph, Node& split) {
  if (!is_onnx_op(&split, "Split") || split.find_attr("split") == nullptr ||
      split.ints_attr("split").size() != static_cast<size_t>(split.num_outputs()) ||
      !is_integer(split.operand(0)->dtype())) {
    return false;
  }
  std::vector<Node*> gathers(split.num_outputs(), nullptr);
  const Node* model = nullptr;  // the first Gather, whose table and attributes all share
  for (int k = 0; k < split.num_outputs(); ++k) {
    if (!split.has_output(k) || split.output(k)->is_dead()) continue;
    const Value* piece = split.output(k);
    if (piece->is_graph_output() || piece->uses().size() != 1) return false;
    Node* gather = piece->uses().front().user;
    if (!is_onnx_op(gather, "Gather") || piece->uses().front().operand != 1) {
      return false;
    }
    if (model == nullptr) model = gather;
    if (gather->operand(0) != model->operand(0) || gather->attrs() != model->attrs()) return false;
    gathers[k] = gather;
  }
  Value* table = model != nullptr ? model->operand(0) : nullptr;
  if (table == nullptr || table->producer() != nullptr ||
      std::count(gathers.begin(), gathers.end(), nullptr) + 2 > split.num_outputs()) {
    return false;
  }
  const Shape& table_shape = table->shape();
  const auto rank = static_cast<int64_t>(table_shape.size());
  int64_t axis = model->find_attr("axis") != nullptr ? model->int_attr("axis") : 0;
  if (axis < 0) axis += rank;
  Value* indices = split.operand(0);
  Shape shape(table_shape.begin(), table_shape.begin() + axis);
  shape.insert(shape.end(), indices->shape().begin(), indices->shape().end());
  shape.insert(shape.end(), table_shape.begin() + axis + 1, table_shape.end());
  Node* gather = graph.create_node(kOnnxDomain, "Gather", {table, indices},
                                   {TensorType{table->dtype(), shape}}, model->attrs(), &split);
  gather->set_name(str_cat(model->name().empty() ? indices->name() : model->name(), "/merged"));
  gather->output(0)->set_name(graph.unique_value_name(str_cat(table->name(), "/rows")));
  const auto split_rank = static_cast<int64_t>(indices->shape().size());
  int64_t split_axis = split.int_attr("axis");
  if (split_axis < 0) split_axis += split_rank;
  const std::vector<int64_t>& sizes = split.ints_attr("split");
  std::vector<std::optional<TensorType>> types;
  for (size_t k = 0; k < gathers.size(); ++k) {
    TensorType type{table->dtype(), shape};
    type.shape[axis + split_axis] = sizes[k];
    types.push_back(type);  // an unread piece too: ONNX's Split has an output per size
  }
  Node* rows = graph.create_node(
      kOnnxDomain, "Split", {gather->output(0)}, types,
      {{"axis", AttrValue(axis + split_axis)}, {"split", *split.find_attr("split")}}, &split);
  rows->set_name(str_cat(gather->name(), "/split"));
  for (size_t k = 0; k < gathers.size(); ++k) {
    Value* piece = rows->output(static_cast<int>(k));
    if (gathers[k] != nullptr) {
      take_over(graph, gathers[k]->output(0), piece);
    } else {
      piece->set_name(graph.unique_value_name(str_cat(gather->output(0)->name(), "/unread")));
    }
  }
  return true;
}

// The reduction behind operand `k` of `concat` (along `axis`): a ReduceSum, ReduceMean or
// ReduceMax over that one axis that keeps its dim, or drops it for an Unsqueeze to put back; or
// null.
const Node* piece_reduction(const Node& concat, int k, int64_t axis) {
  const Value* value = concat.operand(k);
  const Node* producer = value->producer();
  if (!only_read_by(value, &concat)) return nullptr;
  const bool unsqueezed = is_onnx_op(producer, "Unsqueeze");
  if (unsqueezed) {
    const AttrValue* axes = producer->find_attr("axes");
    if (axes == nullptr || *axes != AttrValue(std::vector<int64_t>{axis}) ||
        producer->num_operands() != 1 || !only_read_by(producer->operand(0), producer)) {
      return nullptr;
    }
    producer = producer->operand(0)->producer();
  }
  if (!is_onnx_op(producer, "ReduceSum") && !is_onnx_op(producer, "ReduceMean") &&
      !is_onnx_op(producer, "ReduceMax")) {
    return nullptr;
  }
  const AttrValue* axes = producer->find_attr("axes");
  if (producer->num_operands() != 1 || axes == nullptr ||
      *axes != AttrValue(std::vector<int64_t>{axis}) ||
      producer->int_attr("keepdims") != (unsqueezed ? 0 : 1)) {
    return nullptr;
  }
  return producer;
}

// A Concat of the reductions of a Split's equal pieces, in order, along the Split's axis, as one
// Reshape and one reduction (see the file comment).
bool merge_reductions(Graph& graph, Node& concat) {
  if (!is_onnx_op(&concat, "Concat") || concat.num_operands() < 2 || !concat.has_output(0)) {
    return false;
  }
  const auto rank = static_cast<int64_t>(concat.output(0)->shape().size());
  int64_t axis = concat.int_attr("axis");
  if (axis < 0) axis += rank;
  const Node* first = nullptr;  // the first piece's reduction, which every one repeats
  const Node* split = nullptr;
  for (int k = 0; k < concat.num_operands(); ++k) {
    const Node* reduction = piece_reduction(concat, k, axis);
    if (reduction == nullptr) return false;
    const Value* input = reduction->operand(0);
    if (k == 0) {
      first = reduction;
      split = input->producer();
    }
    if (!is_onnx_op(split, "Split") || input->producer() != split ||
        input->producer_output() != k || !only_read_by(input, reduction) ||
        reduction->op_type() != first->op_type() || reduction->attrs() != first->attrs()) {
      return false;
    }
  }
  Value* data = split->operand(0);
  const Shape& shape = data->shape();
  int64_t split_axis = split->int_attr("axis");
  if (split_axis < 0) split_axis += static_cast<int64_t>(shape.size());
  if (split_axis != axis || split->num_outputs() != concat.num_operands()) return false;
  const int64_t size = split->output(0)->shape()[axis];
  for (int k = 0; k < split->num_outputs(); ++k) {
    if (!split->has_output(k) || split->output(k)->shape()[axis] != size) return false;
  }
  Shape grouped(shape.begin(), shape.begin() + axis);
  grouped.push_back(split->num_outputs());
  grouped.push_back(size);
  grouped.insert(grouped.end(), shape.begin() + axis + 1, shape.end());
  Value* target =
      graph.add_initializer(graph.unique_value_name(str_cat(data->name(), "/grouped_shape")),
                            Tensor::from_i64({static_cast<int64_t>(grouped.size())}, grouped));
  target->set_constant(true);
  Node* reshape = graph.create_node(kOnnxDomain, "Reshape", {data, target},
                                    {TensorType{data->dtype(), grouped}}, {}, &concat);
  reshape->output(0)->set_name(graph.unique_value_name(str_cat(data->name(), "/grouped")));
  Attributes attrs = first->attrs();
  attrs["axes"] = AttrValue(std::vector<int64_t>{axis + 1});
  attrs["keepdims"] = AttrValue(int64_t{0});
  Node* reduce = graph.create_node(kOnnxDomain, first->op_type(), {reshape->output(0)},
                                   {concat.output(0)->type()}, std::move(attrs), &concat);
  reduce->set_name(concat.name().empty() ? str_cat(data->name(), "/reduced") : concat.name());
  take_over(graph, concat.output(0), reduce->output(0));
  return true;
}

// Log(Sigmoid(x)) as -Softplus(-x), Log(1 - Sigmoid(x)) as -Softplus(x) (see the file comment).
bool stable_log_sigmoid(Graph& graph, Node& log) {
  if (!is_onnx_op(&log, "Log") || log.num_operands() != 1 ||
      !is_arithmetic_float(log.output(0)->dtype())) {
    return false;
  }
  Node* read = log.operand(0)->producer();  // the Sigmoid, or 1 - Sigmoid
  const bool complement = is_onnx_op(read, "Sub") && constant_scalar(read->operand(0)) == 1.0;
  Node* sigmoid = complement ? read->operand(1)->producer() : read;
  // Of the Sigmoid's shape: a constant that broadcasts it to more elements stays as it is.
  if (!is_onnx_op(sigmoid, "Sigmoid") || sigmoid->output(0)->type() != log.output(0)->type()) {
    return false;
  }
  // A Log nothing reads (the one a rewrite left for dce) is left alone, so the pass reaches a
  // fixed point without dce too.
  const std::vector<Value*>& outputs = graph.outputs();
  if (log.output(0)->uses().empty() &&
      std::find(outputs.begin(), outputs.end(), log.output(0)) == outputs.end()) {
    return false;
  }
  const TensorType type = log.output(0)->type();
  const std::string name = log.name().empty() ? log.output(0)->name() : log.name();
  const std::string form = complement ? "/log_one_minus_sigmoid" : "/log_sigmoid";
  Value* softplus_input = sigmoid->operand(0);
  if (!complement) {
    Node* negated = graph.create_node(kOnnxDomain, "Neg", {softplus_input}, {type}, {}, &log);
    negated->set_name(str_cat(name, form, "/neg_x"));
    negated->output(0)->set_name(graph.unique_value_name(str_cat(name, "/neg_x")));
    softplus_input = negated->output(0);
  }
  Node* softplus = graph.create_node(kOnnxDomain, "Softplus", {softplus_input}, {type}, {}, &log);
  softplus->set_name(str_cat(name, form, "/softplus"));
  softplus->output(0)->set_name(graph.unique_value_name(str_cat(name, "/softplus")));
  Node* result = graph.create_node(kOnnxDomain, "Neg", {softplus->output(0)}, {type}, {}, &log);
  result->set_name(name);
  log.set_name(str_cat(name, "/replaced"));  // until dce removes it
  take_over(graph, log.output(0), result->output(0));
  return true;
}

class CanonicalizePass final : public Pass {
 public:
  std::string_view name() const override { return "canonicalize"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    bool changed = false;
    std::unordered_set<const Value*> sliced;  // merge_slices' `examined`
    for (Node* node : graph.node_list()) {
      if (remove_identity(graph, *node)) {
        changed = true;
        continue;
      }
      const bool moved = move_constant_inputs_to_attrs(*node);
      const bool dropped = drop_trailing_omitted_operands(*node);
      const bool merged = merge_slices(graph, *node, sliced) || merge_gathers(graph, *node) ||
                          merge_reductions(graph, *node) || stable_log_sigmoid(graph, *node);
      changed = changed || moved || dropped || merged;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_canonicalize_pass() { return std::make_unique<CanonicalizePass>(); }

}  // namespace ampc
