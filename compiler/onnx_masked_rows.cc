// The rows a boolean mask selects, `x[mask]` (compiler/onnx_ragged.h).
//
// PyTorch exports `x[mask]` (and masked_select) as NonZero(mask) transposed into coordinates,
// then GatherND(x, coordinates); the dynamo exporter writes a mask of rank 1 as a Gather-like
// chain (Squeeze, Max, Shape, Expand, Unsqueeze, Concat) before its GatherND. The result has as
// many rows as the mask has true elements, a shape ampc's static graphs cannot hold. So the
// importer keeps it as the whole of `x` (its leading mask dimensions flattened into one axis of
// rows, the rows left out set to zero) with the flattened mask, and maps what reads it onto the
// whole:
// - ops that treat rows independently run on the whole source: element-wise ops and activations
//   (other operands are selections of the same mask or constant along the rows), MatMul and Gemm
//   with the selection as the left operand, Softmax, LayerNormalization and reductions whose
//   axes leave the rows alone, Transpose, Squeeze and Unsqueeze that keep them first, a Reshape
//   to [-1, ...] and Flatten that keep them whole;
// - SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss read the whole scores with the labels
//   of the rows left out set to the ignore index, so a mean divides by the rows selected;
// - ReduceSum, ReduceMean, ReduceMax and ReduceMin across the rows reduce the whole source with
//   the rows left out set to the reduction's identity; a mean divides by the count of true
//   elements (times the other axes reduced), so an empty selection gives NaN, as in PyTorch.
// The rows left out hold whatever the ops make of zeros (log(0) = -inf), never read forward;
// backward, the masked reduction gives them a zero gradient, and the Where that zeroed them at
// the selection drops whatever the ops' gradients made of that (0 * inf), as PyTorch's gather
// never computes them.
#include <algorithm>
#include <numeric>
#include <set>

#include "compiler/onnx_masked_rows_internal.h"

namespace ampc::onnx_io {
namespace masked_rows_internal {

using lowering::has_input;

std::string selection_why(const std::string& name, const RaggedSlice& rows) {
  return str_cat("rows of ", rows.selected,
                 " (x[mask]: their count depends on the data); ampc runs static graphs, so it "
                 "supports such rows only where ops that treat them independently and then a loss "
                 "or a reduction over the rows read them; '",
                 name, "' is read otherwise");
}

std::string indices_why(const std::string& name, const MaskIndices& indices) {
  return str_cat("the indices of the true elements of mask '", indices.mask->name(),
                 "' (NonZero, whose shape depends on the data); ampc runs static graphs, so it "
                 "supports them only where they select rows (x[mask]: GatherND or Gather); '",
                 name, "' is read otherwise");
}

bool same_mask(const Value* a, const Value* b, ImportSink& sink, int depth) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr || a->type() != b->type() || depth == 0) return false;
  const Tensor* known_a = sink.known_value(a);
  const Tensor* known_b = sink.known_value(b);
  if (known_a != nullptr || known_b != nullptr) {
    return known_a != nullptr && known_b != nullptr && known_a->has_data() && known_b->has_data() &&
           *known_a == *known_b;
  }
  const Node* x = a->producer();
  const Node* y = b->producer();
  if (x == nullptr || y == nullptr || a->producer_output() != b->producer_output() ||
      x->domain() != y->domain() || x->op_type() != y->op_type() || x->attrs() != y->attrs() ||
      x->num_operands() != y->num_operands()) {
    return false;
  }
  for (int i = 0; i < x->num_operands(); ++i) {
    if (!same_mask(x->operand(i), y->operand(i), sink, depth - 1)) return false;
  }
  return true;
}

absl::Status define_rows(const std::string& name, const RaggedSlice& rows, ImportSink& sink) {
  sink.ragged().add_slice(name, rows);
  sink.leave_undefined(name, selection_why(name, rows));
  return absl::OkStatus();
}

absl::Status define_indices(const std::string& name, const MaskIndices& indices, ImportSink& sink) {
  sink.ragged().add_mask_indices(name, indices);
  sink.leave_undefined(name, indices_why(name, indices));
  return absl::OkStatus();
}

const RaggedSlice* rows_of(const onnx::NodeProto& proto, int i, ImportSink& sink) {
  if (i >= proto.input_size() || proto.input(i).empty()) return nullptr;
  const RaggedSlice* slice = sink.ragged().slice(proto.input(i));
  return slice != nullptr && slice->mask != nullptr ? slice : nullptr;
}

const MaskIndices* indices_of(const onnx::NodeProto& proto, int i, ImportSink& sink) {
  if (i >= proto.input_size() || proto.input(i).empty()) return nullptr;
  return sink.ragged().mask_indices(proto.input(i));
}

absl::Status unsupported(const std::string& label, const std::string& why) {
  return absl::UnimplementedError(str_cat(label, " reads ", why));
}

std::optional<std::vector<int64_t>> known_ints(const onnx::NodeProto& proto, int i,
                                               ImportSink& sink) {
  if (!has_input(proto, i)) return std::nullopt;
  Value* value = sink.tensor(proto.input(i));
  const Tensor* known = value == nullptr ? nullptr : sink.known_value(value);
  if (known == nullptr || !known->has_data()) return std::nullopt;
  return known->to_i64_vector();
}

int64_t int_attr(const onnx::NodeProto& proto, std::string_view name, int64_t fallback) {
  for (const onnx::AttributeProto& a : proto.attribute()) {
    if (a.name() == name && a.type() == onnx::AttributeProto::INT) return a.i();
  }
  return fallback;
}

std::optional<std::vector<int64_t>> ints_attr(const onnx::NodeProto& proto, std::string_view name) {
  for (const onnx::AttributeProto& a : proto.attribute()) {
    if (a.name() == name && a.type() == onnx::AttributeProto::INTS) {
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    }
  }
  return std::nullopt;
}

std::optional<std::vector<int64_t>> normalized(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    a += a < 0 ? rank : 0;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

absl::StatusOr<std::optional<std::vector<int64_t>>> axes_of(const onnx::NodeProto& proto,
                                                            int64_t since, const std::string& label,
                                                            ImportSink& sink) {
  if (sink.opset() < since) return ints_attr(proto, "axes");
  if (!has_input(proto, 1)) return std::optional<std::vector<int64_t>>();
  std::optional<std::vector<int64_t>> axes = known_ints(proto, 1, sink);
  if (!axes)
    return absl::UnimplementedError(str_cat(label, ": axes must be known at compile time"));
  return axes;
}

absl::StatusOr<Value*> flat_mask(Emitter& e, Value* mask, ImportSink& sink) {
  Value*& flat = sink.ragged().made("MaskRows", {mask}, "");
  if (flat == nullptr) {
    AMPC_ASSIGN_OR_RETURN(flat, e.cast(mask, DType::kBool));
    if (mask->shape().size() != 1) {
      AMPC_ASSIGN_OR_RETURN(flat, e.reshape(flat, Shape{mask->type().num_elements()}));
    }
  }
  return flat;
}

absl::StatusOr<Value*> row_mask(Emitter& e, Value* mask, size_t rank) {
  if (rank == 1) return mask;
  Shape shape(rank, 1);
  shape[0] = mask->shape()[0];
  return e.reshape(mask, shape);
}

namespace {

using ragged_internal::one_of;
using ragged_internal::reduction_identity;

// Ops that apply to each element alone (input 0; any other input is a parameter constant along
// the rows, such as Clip's bounds or PRelu's slope).
constexpr std::string_view kUnaryOps[] = {
    "Abs",         "Neg",       "Exp",   "Log",   "Sqrt",     "Reciprocal",
    "Relu",        "Sigmoid",   "Tanh",  "Erf",   "Softplus", "Softsign",
    "Sin",         "Cos",       "Floor", "Ceil",  "Round",    "Sign",
    "Not",         "IsNaN",     "IsInf", "Cast",  "CastLike", "Identity",
    "LeakyRelu",   "Elu",       "Selu",  "Celu",  "Gelu",     "Mish",
    "HardSigmoid", "HardSwish", "Clip",  "PRelu", "Dropout",  "ThresholdedRelu"};
// Element-wise ops of several operands, broadcast.
constexpr std::string_view kBroadcastOps[] = {
    "Add", "Sub", "Mul",  "Div",         "Pow",           "Max",  "Min",
    "Mod", "Sum", "Mean", "Where",       "Equal",         "Less", "Greater",
    "And", "Or",  "Xor",  "LessOrEqual", "GreaterOrEqual"};
constexpr std::string_view kMaskedReductions[] = {"ReduceSum", "ReduceMean", "ReduceMax",
                                                  "ReduceMin"};
constexpr std::string_view kAxisOps[] = {"Softmax", "LogSoftmax", "Hardmax", "LayerNormalization"};
constexpr std::string_view kLosses[] = {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"};

// ---- What reads selected rows ----

// The rows every selection `proto` reads selects; an error when two select different rows.
absl::StatusOr<const RaggedSlice*> common_rows(const onnx::NodeProto& proto,
                                               const std::string& label, ImportSink& sink) {
  const RaggedSlice* first = nullptr;
  for (int i = 0; i < proto.input_size(); ++i) {
    const RaggedSlice* rows = rows_of(proto, i, sink);
    if (rows == nullptr) {
      if (!proto.input(i).empty() && sink.ragged().slice(proto.input(i)) != nullptr) {
        return absl::UnimplementedError(
            str_cat(label,
                    " combines rows selected by a mask with a slice whose bounds are "
                    "computed at run time"));
      }
      continue;
    }
    if (first != nullptr && !same_mask(rows->mask, first->mask, sink)) {
      return absl::UnimplementedError(str_cat(label, " combines rows selected by different masks (",
                                              first->selected, " and ", rows->selected,
                                              "); ampc maps element-wise ops onto rows "
                                              "of the same mask"));
    }
    first = first == nullptr ? rows : first;
  }
  return first;
}

// Whether `proto` (not a reduction across the rows, not a loss) maps row i of its selected
// inputs to row i of its outputs, given its attributes and the ranks of its inputs; "" when it
// does, else why not.
std::string why_not_row_wise(const onnx::NodeProto& proto, const RaggedSlice& rows,
                             ImportSink& sink) {
  const std::string& op = proto.op_type();
  const auto rank = static_cast<int64_t>(rows.source->shape().size());
  // Every operand that is not a selection must broadcast along the rows: of a lower rank, or
  // of one element along axis 0 at the same rank.
  const auto broadcasts = [&](int first) {
    for (int i = first; i < proto.input_size(); ++i) {
      if (proto.input(i).empty()) continue;
      if (rows_of(proto, i, sink) != nullptr) {
        if (static_cast<int64_t>(sink.ragged().slice(proto.input(i))->source->shape().size()) !=
            rank) {
          return false;
        }
        continue;
      }
      const Value* v = sink.tensor(proto.input(i));
      if (v == nullptr) return false;
      const auto r = static_cast<int64_t>(v->shape().size());
      if (r > rank || (r == rank && v->shape()[0] != 1)) return false;
    }
    return true;
  };
  if (one_of(op, kUnaryOps)) {
    if (rows_of(proto, 0, sink) == nullptr || !broadcasts(1)) return "its other inputs vary by row";
    return "";
  }
  if (one_of(op, kBroadcastOps)) {
    return broadcasts(0) ? "" : "an operand of another rank varies along the rows";
  }
  if (rows_of(proto, 0, sink) == nullptr) return "the selection is not its first input";
  for (int i = 1; i < proto.input_size(); ++i) {
    if (rows_of(proto, i, sink) != nullptr && op != "Concat") {
      return "it reads the selection as an input other than the first";
    }
  }
  if (one_of(op, kAxisOps)) {
    const int64_t fallback = op == "LayerNormalization" || sink.opset() >= 13 ? -1 : 1;
    const int64_t axis = int_attr(proto, "axis", fallback);
    if ((axis < 0 ? axis + rank : axis) <= 0) return "it works across the rows (axis 0)";
    return broadcasts(1) ? "" : "its other inputs vary by row";
  }
  if (op == "MatMul") {
    const Value* b = sink.tensor(proto.input(1));
    if (rank < 2 || b == nullptr || b->shape().size() > 2) {
      return "a MatMul keeps the rows only for selected rows of rank 2 or more times a matrix";
    }
    return "";
  }
  if (op == "Gemm") {
    if (int_attr(proto, "transA", 0) != 0) return "Gemm transposes the selection (transA)";
    return broadcasts(2) && rows_of(proto, 1, sink) == nullptr ? "" : "its C varies by row";
  }
  if (op == "Transpose") {
    const std::optional<std::vector<int64_t>> perm = ints_attr(proto, "perm");
    if ((perm && !perm->empty() && (*perm)[0] == 0) || (!perm && rank == 1)) return "";
    return "it moves the rows from axis 0";
  }
  if (op == "Concat") {
    const int64_t axis = int_attr(proto, "axis", 0);
    if ((axis < 0 ? axis + rank : axis) <= 0) return "it concatenates along the rows";
    for (int i = 0; i < proto.input_size(); ++i) {
      if (rows_of(proto, i, sink) == nullptr) return "it concatenates rows with a tensor";
    }
    return "";
  }
  if (op == "Flatten") {
    return int_attr(proto, "axis", 1) == 1 ? "" : "it does not keep the rows on axis 0";
  }
  return str_cat(op, " is not among the ops ampc maps onto selected rows");
}

// Squeeze, Unsqueeze and Reshape: row-wise when they keep axis 0 as the rows.
absl::StatusOr<std::string> why_not_row_wise_shape(const onnx::NodeProto& proto,
                                                   const RaggedSlice& rows,
                                                   const std::string& label, ImportSink& sink) {
  const std::string& op = proto.op_type();
  const auto rank = static_cast<int64_t>(rows.source->shape().size());
  if (op == "Reshape") {
    const std::optional<std::vector<int64_t>> shape = known_ints(proto, 1, sink);
    if (!shape || shape->empty() || (*shape)[0] != -1) {
      return std::string("a Reshape keeps the rows only to a known shape [-1, ...]");
    }
    const int64_t rest =
        std::accumulate(shape->begin() + 1, shape->end(), int64_t{1}, std::multiplies<>());
    const Shape& in = rows.source->shape();
    const int64_t in_rest =
        std::accumulate(in.begin() + 1, in.end(), int64_t{1}, std::multiplies<>());
    return rest == in_rest && std::find(shape->begin(), shape->end(), 0) == shape->end()
               ? std::string()
               : std::string("the Reshape does not keep each row's elements together");
  }
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, axes_of(proto, 13, label, sink));
  if (!axes) return std::string("it names no axes");
  const int64_t out_rank = op == "Unsqueeze" ? rank + static_cast<int64_t>(axes->size()) : rank;
  const std::optional<std::vector<int64_t>> sorted = normalized(*axes, out_rank);
  if (!sorted) return invalid(str_cat(label, ": an axis is out of range"));
  return sorted->front() == 0 ? std::string("it works on axis 0, the rows") : std::string();
}

// A row-wise op: the same node on the whole sources; its outputs select the same rows.
absl::Status lower_row_wise(const onnx::NodeProto& proto, const RaggedSlice& rows,
                            ImportSink& sink) {
  onnx::NodeProto whole = proto;
  for (int i = 0; i < proto.input_size(); ++i) {
    if (const RaggedSlice* r = rows_of(proto, i, sink)) whole.set_input(i, r->source->name());
  }
  if (proto.op_type() == "Reshape") {
    // The whole source's rows in place of -1, as a constant input.
    std::vector<int64_t> shape = *known_ints(proto, 1, sink);
    shape[0] = rows.source->shape()[0];
    Emitter e(proto, "", sink);
    AMPC_ASSIGN_OR_RETURN(
        Value * target, e.constant(Tensor::from_i64({static_cast<int64_t>(shape.size())}, shape)));
    whole.set_input(1, target->name());
  }
  std::vector<std::string> outputs;
  for (int i = 0; i < proto.output_size(); ++i) {
    if (proto.output(i).empty()) continue;
    outputs.push_back(sink.fresh_name(str_cat(proto.output(i), "/all_rows")));
    whole.set_output(i, outputs.back());
  }
  whole.set_name(proto.name().empty() ? "" : str_cat(proto.name(), "/all_rows"));
  AMPC_RETURN_IF_ERROR(sink.import_node(whole));
  for (int i = 0, k = 0; i < proto.output_size(); ++i) {
    if (proto.output(i).empty()) continue;
    Value* out = sink.tensor(outputs[static_cast<size_t>(k++)]);
    if (out == nullptr || out->shape().empty() || out->shape()[0] != rows.source->shape()[0]) {
      return absl::InternalError(str_cat("the whole rows of '", proto.output(i), "' lost axis 0"));
    }
    AMPC_RETURN_IF_ERROR(define_rows(
        proto.output(i), RaggedSlice{.source = out, .mask = rows.mask, .selected = rows.selected},
        sink));
  }
  return absl::OkStatus();
}

// A reduction whose axes include the rows: the whole source with the rows left out set to the
// identity; a mean divides by the count of rows selected times the other axes' sizes.
absl::Status lower_reduction(const onnx::NodeProto& proto, const std::string& label,
                             const RaggedSlice& rows, std::vector<int64_t> axes, ImportSink& sink) {
  const std::string& op = proto.op_type();
  Value* source = rows.source;
  if (!is_arithmetic_float(source->dtype()) && op != "ReduceSum") {
    return absl::UnimplementedError(str_cat(label, ": ", op,
                                            " of rows selected by a mask needs float data; it is ",
                                            dtype_name(source->dtype())));
  }
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * keep, row_mask(e, rows.mask, source->shape().size()));
  AMPC_ASSIGN_OR_RETURN(Value * identity, e.scalar(reduction_identity(op), source->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * masked, e.op("Where", {keep, source, identity}));
  const bool keepdims = int_attr(proto, "keepdims", 1) != 0;
  Attributes attrs = {{"axes", AttrValue(axes)}, {"keepdims", AttrValue(int64_t{keepdims})}};
  const std::string_view reduce = op == "ReduceMean" ? std::string_view("ReduceSum") : op;
  if (op != "ReduceMean") {
    return e.op(reduce, {masked}, std::move(attrs), proto.output(0)).status();
  }
  AMPC_ASSIGN_OR_RETURN(Value * sum, e.op(reduce, {masked}, std::move(attrs)));
  int64_t per_row = 1;
  for (int64_t a : axes) per_row *= a == 0 ? 1 : source->shape()[static_cast<size_t>(a)];
  AMPC_ASSIGN_OR_RETURN(Value * selected, e.cast(rows.mask, source->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * count,
                        e.op("ReduceSum", {selected}, {{"keepdims", AttrValue(int64_t{0})}}));
  if (per_row != 1) {
    AMPC_ASSIGN_OR_RETURN(Value * n, e.scalar(static_cast<double>(per_row), source->dtype()));
    AMPC_ASSIGN_OR_RETURN(count, e.op("Mul", {count, n}));
  }
  return e.op("Div", {sum, count}, {}, proto.output(0)).status();
}

absl::Status lower_reduce(const onnx::NodeProto& proto, const std::string& label,
                          const RaggedSlice& rows, ImportSink& sink) {
  const int64_t since = proto.op_type() == "ReduceSum" ? 13 : 18;
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                        axes_of(proto, since, label, sink));
  const auto rank = static_cast<int64_t>(rows.source->shape().size());
  if (!axes || axes->empty()) {
    if (axes && int_attr(proto, "noop_with_empty_axes", 0) != 0) {
      return sink.bind(proto.output(0), proto.input(0), proto.name());  // stays a selection
    }
    axes = std::vector<int64_t>(static_cast<size_t>(rank));
    std::iota(axes->begin(), axes->end(), 0);
  }
  const std::optional<std::vector<int64_t>> sorted = normalized(*axes, rank);
  if (!sorted) return invalid(str_cat(label, ": an axis is out of range"));
  if (sorted->front() == 0) return lower_reduction(proto, label, rows, *sorted, sink);
  return lower_row_wise(proto, rows, sink);
}

// The losses: the whole scores, with the labels of the rows left out set to the ignore index.
absl::Status lower_loss(const onnx::NodeProto& proto, const std::string& label,
                        const RaggedSlice& rows, ImportSink& sink) {
  const RaggedSlice* scores = rows_of(proto, 0, sink);
  const RaggedSlice* labels = rows_of(proto, 1, sink);
  if (scores == nullptr || labels == nullptr) {
    return unsupported(label, selection_why(proto.input(scores == nullptr ? 0 : 1), rows));
  }
  if (has_input(proto, 2) && rows_of(proto, 2, sink) != nullptr) {
    return unsupported(label, selection_why(proto.input(2), rows));
  }
  // Any negative index is no class; the node's own ignore index serves when it has one.
  int64_t ignore = -100;
  bool has_ignore = false;
  for (const onnx::AttributeProto& a : proto.attribute()) {
    if (a.name() == "ignore_index") {
      ignore = a.i();
      has_ignore = true;
    }
  }
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * keep, row_mask(e, labels->mask, labels->source->shape().size()));
  AMPC_ASSIGN_OR_RETURN(Value * ignored,
                        e.scalar(static_cast<double>(ignore), labels->source->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * kept_labels, e.op("Where", {keep, labels->source, ignored}));
  onnx::NodeProto whole = proto;
  whole.set_input(0, scores->source->name());
  whole.set_input(1, kept_labels->name());
  if (!has_ignore) {
    onnx::AttributeProto* a = whole.add_attribute();
    a->set_name("ignore_index");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(ignore);
  }
  std::string reduction = "mean";
  for (const onnx::AttributeProto& a : proto.attribute()) {
    if (a.name() == "reduction") reduction = a.s();
  }
  // A reduced loss is the node's output; a loss per row, and the log-probabilities, select rows.
  std::vector<std::pair<int, std::string>> selected;
  for (int i = 0; i < proto.output_size(); ++i) {
    if (proto.output(i).empty() || (i == 0 && reduction != "none")) continue;
    selected.emplace_back(i, sink.fresh_name(str_cat(proto.output(i), "/all_rows")));
    whole.set_output(i, selected.back().second);
  }
  AMPC_RETURN_IF_ERROR(sink.import_node(whole));
  for (const auto& [i, name] : selected) {
    AMPC_RETURN_IF_ERROR(define_rows(
        proto.output(i),
        RaggedSlice{.source = sink.tensor(name), .mask = rows.mask, .selected = rows.selected},
        sink));
  }
  return absl::OkStatus();
}

absl::Status lower_rows_op(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(const RaggedSlice* rows, common_rows(proto, label, sink));
  const std::string& op = proto.op_type();
  const auto first_selection = [&]() -> std::string {
    for (int i = 0; i < proto.input_size(); ++i) {
      if (rows_of(proto, i, sink) != nullptr) return proto.input(i);
    }
    return "";
  };
  if (op == "Gather" && rows_of(proto, 1, sink) != nullptr && rows_of(proto, 0, sink) == nullptr &&
      int_attr(proto, "axis", 0) == 0) {
    // A table's rows looked up by selected indices: the lookup of the whole indices.
    return lower_row_wise(proto, *rows, sink);
  }
  if (op == "CastLike" && rows_of(proto, 0, sink) == nullptr) {
    // Only the selection's element type is read: the whole source has it.
    onnx::NodeProto whole = proto;
    whole.set_input(1, rows->source->name());
    return sink.import_node(whole);
  }
  if (one_of(op, kMaskedReductions)) {
    if (rows_of(proto, 0, sink) == nullptr) {
      return unsupported(label, selection_why(first_selection(), *rows));
    }
    return lower_reduce(proto, label, *rows, sink);
  }
  if (one_of(op, kLosses)) return lower_loss(proto, label, *rows, sink);
  std::string why;
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Reshape") {
    if (rows_of(proto, 0, sink) == nullptr) {
      return unsupported(label, selection_why(first_selection(), *rows));
    }
    AMPC_ASSIGN_OR_RETURN(why, why_not_row_wise_shape(proto, *rows, label, sink));
  } else {
    why = why_not_row_wise(proto, *rows, sink);
  }
  if (!why.empty()) {
    return unsupported(label, str_cat(selection_why(first_selection(), *rows), " (", why, ")"));
  }
  return lower_row_wise(proto, *rows, sink);
}

bool reads_rows(const onnx::NodeProto& proto, ImportSink& sink) {
  for (int i = 0; i < proto.input_size(); ++i) {
    if (rows_of(proto, i, sink) != nullptr) return true;
  }
  return false;
}

}  // namespace
}  // namespace masked_rows_internal

using masked_rows_internal::lower_indices_op;
using masked_rows_internal::lower_nonzero;
using masked_rows_internal::lower_rows_op;
using masked_rows_internal::reads_indices;
using masked_rows_internal::reads_rows;

bool reads_or_makes_masked_rows(const onnx::NodeProto& proto, ImportSink& sink) {
  if (proto.output_size() < 1 || proto.output(0).empty()) return false;
  if (proto.op_type() == "NonZero") {
    Value* mask = proto.input_size() == 1 ? sink.tensor(proto.input(0)) : nullptr;
    return mask != nullptr && !mask->shape().empty();
  }
  return reads_indices(proto, sink) || reads_rows(proto, sink);
}

absl::Status lower_masked_rows(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink) {
  if (proto.op_type() == "NonZero") return lower_nonzero(proto, label, sink);
  if (reads_indices(proto, sink)) return lower_indices_op(proto, label, sink);
  return lower_rows_op(proto, label, sink);
}

}  // namespace ampc::onnx_io
