// Stacks of bag reductions as one segment reduction (compiler/onnx_ragged.h).
#include <algorithm>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_ragged.h"

namespace ampc::onnx_io {
namespace {

using lowering::Emitter;
using ragged_internal::bag_lengths;
using ragged_internal::clamped_bound;
using ragged_internal::one_of;
using ragged_internal::reduction_identity;

// The element-wise ops a stack of bags may pass through (same op in every iteration).
constexpr std::string_view kStackedOps[] = {
    "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Add",
    "Sub",   "Mul",   "Div",  "Neg",         "Cast"};

// Whether `node` is `op` of axes {axis} (an attribute, or a known input from opset 13).
bool of_one_axis(const Node* node, std::string_view op, int64_t axis, ImportSink& sink) {
  if (node == nullptr || !node->domain().empty() || node->op_type() != op) return false;
  const std::vector<int64_t> one{axis};
  if (const AttrValue* axes = node->find_attr("axes")) {
    return std::get<std::vector<int64_t>>(*axes) == one;
  }
  if (node->num_operands() != 2) return false;
  const Tensor* known = sink.known_value(node->operand(1));
  return known != nullptr && known->has_data() && known->to_i64_vector() == one;
}

// What `value` is with Identity, and an Unsqueeze of a Squeeze of the same axis, looked through.
Value* look_through(Value* value, int64_t axis, ImportSink& sink) {
  for (;;) {
    const Node* node = value->producer();
    if (node == nullptr || !node->domain().empty()) return value;
    if (node->op_type() == "Identity") {
      value = node->operand(0);
      continue;
    }
    if (of_one_axis(node, "Unsqueeze", axis, sink) &&
        of_one_axis(node->operand(0)->producer(), "Squeeze", axis, sink)) {
      value = node->operand(0)->producer()->operand(0);
      continue;
    }
    return value;
  }
}

// How a stack of parts is made: a segment reduction of their bags, the same element-wise op of
// the stacked operands, runs of parts of different kinds each stacked and concatenated, or (a
// leaf) a Concat.
struct StackPlan {
  enum class Kind { kLeaf, kBags, kOp, kRuns } kind = Kind::kLeaf;
  std::vector<Value*> parts;
  std::vector<StackPlan> operands;  // kOp: one per operand; kRuns: one per run
  bool shared = false;              // a kOp operand that is one value in every part
};

bool same_form(const Node* a, const Node* b) {
  if (a == nullptr || b == nullptr || !a->domain().empty() || !b->domain().empty() ||
      a->op_type() != b->op_type() || a->num_operands() != b->num_operands() ||
      a->attrs().size() != b->attrs().size()) {
    return false;
  }
  if (a->op_type() == "Cast") {
    return std::get<DType>(a->attrs().at("to")) == std::get<DType>(b->attrs().at("to"));
  }
  return a->attrs().empty();
}

bool plan_stack(std::vector<Value*> parts, int64_t axis, ImportSink& sink, StackPlan& plan,
                int depth);

// Whether `a` and `b` can be stacked by one plan: bags of one reduction of one source, or the
// same element-wise op.
bool same_kind(const Value* a, const Value* b, ImportSink& sink) {
  const BagReduction* bag_a = sink.ragged().bag(a);
  const BagReduction* bag_b = sink.ragged().bag(b);
  if (bag_a != nullptr || bag_b != nullptr) {
    return bag_a != nullptr && bag_b != nullptr && bag_a->op == bag_b->op &&
           bag_a->bag.source == bag_b->bag.source && bag_a->bag.axis == bag_b->bag.axis;
  }
  if (a->producer() == nullptr || b->producer() == nullptr) {
    return a->producer() == nullptr && b->producer() == nullptr;
  }
  return same_form(a->producer(), b->producer());
}

// The plan for parts of one kind (same_kind), and whether it merges bags anywhere.
bool plan_uniform(const std::vector<Value*>& parts, int64_t axis, ImportSink& sink, StackPlan& plan,
                  int depth) {
  plan.parts = parts;
  const BagReduction* first = sink.ragged().bag(parts[0]);
  if (first != nullptr && first->bag.axis == axis && sink.opset() >= 16 &&
      first->bag.source->shape()[static_cast<size_t>(axis)] > 0) {
    const bool all = std::all_of(parts.begin(), parts.end(), [&](Value* part) {
      const BagReduction* bag = sink.ragged().bag(part);
      return bag != nullptr && bag->op == first->op && bag->bag.source == first->bag.source &&
             bag->bag.axis == axis;
    });
    if (all) {
      plan.kind = StackPlan::Kind::kBags;
      return true;
    }
  }
  const Node* node = parts[0]->producer();
  if (depth > 8 || node == nullptr || !one_of(node->op_type(), kStackedOps)) return false;
  for (Value* part : parts) {
    if (!same_form(node, part->producer())) return false;
  }
  const size_t rank = parts[0]->shape().size();
  bool merges = false;
  for (int k = 0; k < node->num_operands(); ++k) {
    StackPlan operand;
    std::vector<Value*> column;
    for (Value* part : parts) column.push_back(part->producer()->operand(k));
    const Shape& shape = column[0]->shape();
    const int64_t aligned = axis - static_cast<int64_t>(rank - shape.size());
    const bool along = aligned >= 0 && shape[static_cast<size_t>(aligned)] != 1;
    if (along) return false;  // a part is 1 along the axis, so its operands are
    operand.shared =
        std::all_of(column.begin(), column.end(), [&](Value* v) { return v == column[0]; });
    if (!operand.shared) {
      for (Value* v : column) {
        if (v->shape() != shape) return false;
      }
      if (aligned < 0) {
        operand.parts = column;  // no dim along the axis: raised to the part's rank, a leaf
      } else {
        merges = plan_stack(column, aligned, sink, operand, depth + 1) || merges;
      }
    }
    plan.operands.push_back(std::move(operand));
  }
  plan.kind = StackPlan::Kind::kOp;
  return merges;
}

// The plan for stacking `parts` along `axis` (runs of one kind each stacked by plan_uniform,
// then concatenated), and whether it merges bags anywhere.
bool plan_stack(std::vector<Value*> parts, int64_t axis, ImportSink& sink, StackPlan& plan,
                int depth = 0) {
  for (Value*& part : parts) part = look_through(part, axis, sink);
  std::vector<std::vector<Value*>> runs;
  for (Value* part : parts) {
    if (runs.empty() || !same_kind(runs.back().back(), part, sink)) runs.emplace_back();
    runs.back().push_back(part);
  }
  if (runs.size() == 1) return plan_uniform(parts, axis, sink, plan, depth);
  plan.kind = StackPlan::Kind::kRuns;
  plan.parts = parts;
  bool merges = false;
  for (std::vector<Value*>& run : runs) {
    StackPlan stacked;
    if (run.size() == 1) {
      stacked.parts = std::move(run);
    } else {
      merges = plan_uniform(run, axis, sink, stacked, depth + 1) || merges;
    }
    plan.operands.push_back(std::move(stacked));
  }
  return merges;
}

// A one-element integer value as element `index` of the 1-D `base` it was taken from.
struct Element {
  Value* base = nullptr;
  int64_t index = 0;
};

// The known integer of a one-element `value`, or nullopt.
std::optional<int64_t> known_index(const Value* value, ImportSink& sink) {
  if (value->type().num_elements() != 1) return std::nullopt;
  const Tensor* known = sink.known_value(value);
  if (known == nullptr || !known->has_data()) return std::nullopt;
  return known->element_as_i64(0);
}

// Which element of which vector `value` is: through Identity, Reshape, Squeeze and Unsqueeze,
// a Gather of one known index and a Slice of one known start (step 1) along axis 0, and a
// Slice of the base that starts at a known position; nullopt when it is none.
std::optional<Element> element_of(Value* value, ImportSink& sink) {
  if (value->type().num_elements() != 1) return std::nullopt;
  for (;;) {
    const Node* node = value->producer();
    if (node == nullptr || !node->domain().empty()) return std::nullopt;
    const std::string& op = node->op_type();
    if (op == "Identity" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze") {
      value = node->operand(0);
      continue;
    }
    Value* base = node->operand(0);
    if (base->shape().size() != 1 || node->num_operands() < 2) return std::nullopt;
    const int64_t length = base->shape()[0];
    std::optional<int64_t> index;
    if (op == "Gather" && (node->find_attr("axis") == nullptr || node->int_attr("axis") == 0)) {
      index = known_index(node->operand(1), sink);
    } else if (op == "Slice" && node->num_operands() <= 4) {
      index = known_index(node->operand(1), sink);  // one element out: the start is it
    }
    if (!index) return std::nullopt;
    Element element{base, *index < 0 ? *index + length : *index};
    if (element.index < 0 || element.index >= length) return std::nullopt;
    // An element of a Slice of a longer vector (step 1, a known start) is one of that vector.
    for (;;) {
      const Node* slice = element.base->producer();
      if (slice == nullptr || slice->op_type() != "Slice" || !slice->domain().empty() ||
          slice->num_operands() > 4 || slice->operand(0)->shape().size() != 1) {
        return element;
      }
      const std::optional<int64_t> start = known_index(slice->operand(1), sink);
      const int64_t outer = slice->operand(0)->shape()[0];
      if (!start) return element;
      const int64_t from = std::clamp(*start < 0 ? *start + outer : *start, int64_t{0}, outer);
      element = Element{slice->operand(0), element.index + from};
    }
  }
}

// The one-element `bounds` as one vector: each run of elements of one vector (each bag's
// bounds, taken from the offsets) a Gather of their indices, the rest one piece each,
// concatenated; in the first bound's type.
absl::StatusOr<Value*> element_vector(Emitter& e, const std::vector<Value*>& bounds,
                                      ImportSink& sink) {
  const DType dtype = bounds[0]->dtype();
  std::vector<Value*> pieces;
  Value* base = nullptr;
  std::vector<int64_t> indices;
  auto flush = [&]() -> absl::Status {
    if (indices.empty()) return absl::OkStatus();
    AMPC_ASSIGN_OR_RETURN(
        Value * at, e.constant(Tensor::from_i64({static_cast<int64_t>(indices.size())}, indices)));
    AMPC_ASSIGN_OR_RETURN(Value * gathered,
                          e.op("Gather", {base, at}, {{"axis", AttrValue(int64_t{0})}}));
    AMPC_ASSIGN_OR_RETURN(gathered, e.cast(gathered, dtype));
    pieces.push_back(gathered);
    indices.clear();
    return absl::OkStatus();
  };
  for (Value* bound : bounds) {
    const std::optional<Element> element = element_of(bound, sink);
    if (element && element->base == base) {
      indices.push_back(element->index);
      continue;
    }
    AMPC_RETURN_IF_ERROR(flush());
    if (element) {
      base = element->base;
      indices.push_back(element->index);
      continue;
    }
    AMPC_ASSIGN_OR_RETURN(Value * b, e.cast(bound, dtype));
    AMPC_ASSIGN_OR_RETURN(b, e.reshape(b, Shape{1}));
    pieces.push_back(b);
  }
  AMPC_RETURN_IF_ERROR(flush());
  if (pieces.size() == 1) return pieces[0];
  return e.op("Concat", pieces, {{"axis", AttrValue(int64_t{0})}});
}

absl::StatusOr<Value*> bound_vector(Emitter& e, const std::vector<Value*>& bounds,
                                    ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Value * vector, element_vector(e, bounds, sink));
  return e.cast(vector, DType::kI64);
}

// `value` (one element) with Identity, Reshape, Squeeze and Unsqueeze looked through.
Value* one_element_source(Value* value) {
  for (;;) {
    const Node* node = value->producer();
    if (node == nullptr || !node->domain().empty() ||
        (node->op_type() != "Identity" && node->op_type() != "Reshape" &&
         node->op_type() != "Squeeze" && node->op_type() != "Unsqueeze") ||
        node->operand(0)->type().num_elements() != 1) {
      return value;
    }
    value = node->operand(0);
  }
}

// The one-element `parts` as one vector: the same element-wise op of their operands' vectors
// when each part is that op (dynamo's `start == end` per bag), else element_vector.
absl::StatusOr<Value*> scalar_vector(Emitter& e, std::vector<Value*> parts, ImportSink& sink,
                                     int depth = 0) {
  for (Value*& part : parts) part = one_element_source(part);
  const Node* node = parts[0]->producer();
  bool uniform = depth < 8 && node != nullptr && one_of(node->op_type(), kStackedOps);
  for (Value* part : parts) {
    uniform = uniform && same_form(node, part->producer());
    for (int k = 0; uniform && k < node->num_operands(); ++k) {
      uniform = part->producer()->operand(k)->type().num_elements() == 1;
    }
  }
  if (!uniform) return element_vector(e, parts, sink);
  std::vector<Value*> operands;
  for (int k = 0; k < node->num_operands(); ++k) {
    std::vector<Value*> column;
    for (Value* part : parts) column.push_back(part->producer()->operand(k));
    if (std::all_of(column.begin(), column.end(), [&](Value* v) { return v == column[0]; })) {
      operands.push_back(column[0]);  // one element: broadcasts against the vector
      continue;
    }
    AMPC_ASSIGN_OR_RETURN(Value * vector, scalar_vector(e, std::move(column), sink, depth + 1));
    operands.push_back(vector);
  }
  AMPC_ASSIGN_OR_RETURN(Value * result, e.op(node->op_type(), operands, node->attrs()));
  return e.reshape(result, Shape{static_cast<int64_t>(parts.size())});
}

// The max (min) of each bag before opset 18, whose scatters do not reduce by max: a running
// extremum within each bag (one round per power of two below `rows`, each combining every row
// with the row that far before it when both are in one bag: bags are contiguous runs of `bag`),
// read at each bag's last row; an empty bag gives the identity.
absl::StatusOr<Value*> segment_scan(Emitter& e, std::string_view op, Value* source, int64_t axis,
                                    Value* bag, Value* start, Value* end, int64_t bags) {
  const Shape& shape = source->shape();
  const auto a = static_cast<size_t>(axis);
  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t rows = shape[a];
  Shape row_shape(shape.size(), 1);
  row_shape[a] = rows;
  Shape bag_shape(shape.size(), 1);
  bag_shape[a] = bags;
  AMPC_ASSIGN_OR_RETURN(Value * identity, e.scalar(reduction_identity(op), source->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * at_axis, e.constant(Tensor::from_i64({1}, {axis})));
  AMPC_ASSIGN_OR_RETURN(Value * from, e.constant(Tensor::from_i64({1}, {0})));
  const Attributes along = {{"axis", AttrValue(axis)}};
  const Attributes along0 = {{"axis", AttrValue(int64_t{0})}};
  const std::string_view combine = op == "ReduceMax" ? "Max" : "Min";
  Value* y = source;
  for (int64_t shift = 1; shift < rows; shift *= 2) {
    // y and the bags shifted `shift` rows along the axis; the rows shifted in hold the identity
    // and no bag (-1).
    AMPC_ASSIGN_OR_RETURN(Value * keep, e.constant(Tensor::from_i64({1}, {rows - shift})));
    AMPC_ASSIGN_OR_RETURN(Value * kept, e.op("Slice", {y, from, keep, at_axis}));
    Shape fill_shape = shape;
    fill_shape[a] = shift;
    AMPC_ASSIGN_OR_RETURN(Value * fill_dims, e.constant(Tensor::from_i64({rank}, fill_shape)));
    AMPC_ASSIGN_OR_RETURN(Value * fill, e.op("Expand", {identity, fill_dims}));
    AMPC_ASSIGN_OR_RETURN(Value * before, e.op("Concat", {fill, kept}, along));
    AMPC_ASSIGN_OR_RETURN(Value * kept_bag, e.op("Slice", {bag, from, keep}));
    AMPC_ASSIGN_OR_RETURN(Value * none,
                          e.constant(Tensor::from_i64({shift}, std::vector<int64_t>(shift, -1))));
    AMPC_ASSIGN_OR_RETURN(Value * bag_before, e.op("Concat", {none, kept_bag}, along0));
    AMPC_ASSIGN_OR_RETURN(Value * same, e.op("Equal", {bag_before, bag}));
    AMPC_ASSIGN_OR_RETURN(same, e.reshape(same, row_shape));
    AMPC_ASSIGN_OR_RETURN(Value * combined, e.op(combine, {y, before}));
    AMPC_ASSIGN_OR_RETURN(y, e.op("Where", {same, combined, y}));
  }
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * one, e.scalar(1, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * last, e.op("Sub", {end, one}));
  AMPC_ASSIGN_OR_RETURN(last, e.op("Max", {last, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * at_last, e.op("Gather", {y, last}, along));
  AMPC_ASSIGN_OR_RETURN(Value * filled, e.op("Greater", {end, start}));
  AMPC_ASSIGN_OR_RETURN(filled, e.reshape(filled, bag_shape));
  return e.op("Where", {filled, at_last, identity});
}

// The segment reduction of the bags `parts` (one source, in order) along `axis`.
absl::StatusOr<Value*> segment_reduction(Emitter& e, const std::vector<Value*>& parts, int64_t axis,
                                         ImportSink& sink) {
  const BagReduction& first = *sink.ragged().bag(parts[0]);
  Value* source = first.bag.source;
  const Shape& shape = source->shape();
  const auto a = static_cast<size_t>(axis);
  const int64_t rows = shape[a];
  const auto bags = static_cast<int64_t>(parts.size());
  // The bounds as two vectors, then clamped as Slice clamps them.
  std::vector<Value*> starts;
  std::vector<Value*> ends;
  for (Value* part : parts) {
    starts.push_back(sink.ragged().bag(part)->bag.start);
    ends.push_back(sink.ragged().bag(part)->bag.end);
  }
  Attributes along0 = {{"axis", AttrValue(int64_t{0})}};
  AMPC_ASSIGN_OR_RETURN(Value * start, bound_vector(e, starts, sink));
  AMPC_ASSIGN_OR_RETURN(Value * end, bound_vector(e, ends, sink));
  AMPC_ASSIGN_OR_RETURN(start, clamped_bound(e, start, rows, 1));
  AMPC_ASSIGN_OR_RETURN(end, clamped_bound(e, end, rows, 1));
  // Row r is in bag k = (the number of starts <= r) - 1 when r < end[k]; other rows go to an
  // extra bag `bags`, dropped after.
  AMPC_ASSIGN_OR_RETURN(
      Value * zeros, e.constant(Tensor::from_i64({rows + 1}, std::vector<int64_t>(rows + 1, 0))));
  AMPC_ASSIGN_OR_RETURN(Value * ones,
                        e.constant(Tensor::from_i64({bags}, std::vector<int64_t>(bags, 1))));
  AMPC_ASSIGN_OR_RETURN(Value * starting, e.op("ScatterElements", {zeros, start, ones},
                                               {{"axis", AttrValue(int64_t{0})},
                                                {"reduction", AttrValue(std::string("add"))}}));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * started, e.op("CumSum", {starting, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * from, e.constant(Tensor::from_i64({1}, {0})));
  AMPC_ASSIGN_OR_RETURN(Value * to, e.constant(Tensor::from_i64({1}, {rows})));
  AMPC_ASSIGN_OR_RETURN(started, e.op("Slice", {started, from, to}));
  AMPC_ASSIGN_OR_RETURN(Value * one, e.scalar(1, DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * bag, e.op("Sub", {started, one}));
  AMPC_ASSIGN_OR_RETURN(Value * last, e.scalar(static_cast<double>(bags - 1), DType::kI64));
  AMPC_ASSIGN_OR_RETURN(Value * clamped, e.op("Max", {bag, zero}));
  AMPC_ASSIGN_OR_RETURN(clamped, e.op("Min", {clamped, last}));
  AMPC_ASSIGN_OR_RETURN(Value * bag_end, e.op("Gather", {end, clamped}, along0));
  AMPC_ASSIGN_OR_RETURN(Value * row, lowering::positions(e, rows, 0, 1));
  AMPC_ASSIGN_OR_RETURN(Value * started_bag, e.op("GreaterOrEqual", {bag, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * before_end, e.op("Less", {row, bag_end}));
  AMPC_ASSIGN_OR_RETURN(Value * inside, e.op("And", {started_bag, before_end}));
  AMPC_ASSIGN_OR_RETURN(Value * outside, e.scalar(static_cast<double>(bags), DType::kI64));
  AMPC_ASSIGN_OR_RETURN(bag, e.op("Where", {inside, bag, outside}));
  Shape out_shape = shape;
  out_shape[a] = bags + 1;
  AMPC_ASSIGN_OR_RETURN(Value * identity, e.scalar(reduction_identity(first.op), source->dtype()));
  AMPC_ASSIGN_OR_RETURN(
      Value * out_dims,
      e.constant(Tensor::from_i64({static_cast<int64_t>(out_shape.size())}, out_shape)));
  AMPC_ASSIGN_OR_RETURN(Value * init, e.op("Expand", {identity, out_dims}));
  const std::string reduction = first.op == "ReduceMax"   ? "max"
                                : first.op == "ReduceMin" ? "min"
                                                          : "add";
  if (reduction != "add" && sink.opset() < 18) {
    return segment_scan(e, first.op, source, axis, bag, start, end, bags);
  }
  Value* reduced = nullptr;
  if (a == 0) {
    // Whole rows: ScatterND of [rows, 1] indices moves each row as one slice.
    AMPC_ASSIGN_OR_RETURN(bag, e.reshape(bag, Shape{rows, 1}));
    AMPC_ASSIGN_OR_RETURN(
        reduced, e.op("ScatterND", {init, bag, source}, {{"reduction", AttrValue(reduction)}}));
  } else {
    Shape row_shape(shape.size(), 1);
    row_shape[a] = rows;
    AMPC_ASSIGN_OR_RETURN(bag, e.reshape(bag, row_shape));
    AMPC_ASSIGN_OR_RETURN(Value * full_shape, e.constant(Tensor::from_i64(
                                                  {static_cast<int64_t>(shape.size())}, shape)));
    AMPC_ASSIGN_OR_RETURN(bag, e.op("Expand", {bag, full_shape}));
    AMPC_ASSIGN_OR_RETURN(reduced,
                          e.op("ScatterElements", {init, bag, source},
                               {{"axis", AttrValue(axis)}, {"reduction", AttrValue(reduction)}}));
  }
  AMPC_ASSIGN_OR_RETURN(Value * kept_to, e.constant(Tensor::from_i64({1}, {bags})));
  AMPC_ASSIGN_OR_RETURN(Value * at_axis, e.constant(Tensor::from_i64({1}, {axis})));
  AMPC_ASSIGN_OR_RETURN(reduced, e.op("Slice", {reduced, from, kept_to, at_axis}));
  if (first.op != "ReduceMean") return reduced;
  Shape bag_shape(shape.size(), 1);
  bag_shape[a] = bags;
  AMPC_ASSIGN_OR_RETURN(Value * length, bag_lengths(e, start, end, source->dtype()));
  AMPC_ASSIGN_OR_RETURN(length, e.reshape(length, bag_shape));
  return e.op("Div", {reduced, length});
}

absl::StatusOr<Value*> emit_stack(Emitter& e, const StackPlan& plan, int64_t axis,
                                  ImportSink& sink) {
  if (plan.kind == StackPlan::Kind::kBags) return segment_reduction(e, plan.parts, axis, sink);
  if (plan.kind == StackPlan::Kind::kLeaf) {
    if (plan.parts.size() == 1) return plan.parts[0];
    return e.op("Concat", plan.parts, {{"axis", AttrValue(axis)}});
  }
  if (plan.kind == StackPlan::Kind::kRuns) {
    std::vector<Value*> runs;
    for (const StackPlan& run : plan.operands) {
      AMPC_ASSIGN_OR_RETURN(Value * stacked, emit_stack(e, run, axis, sink));
      runs.push_back(stacked);
    }
    return e.op("Concat", runs, {{"axis", AttrValue(axis)}});
  }
  const Node* node = plan.parts[0]->producer();
  const size_t rank = plan.parts[0]->shape().size();
  std::vector<Value*> operands;
  for (size_t k = 0; k < plan.operands.size(); ++k) {
    const StackPlan& operand = plan.operands[k];
    if (operand.shared) {
      operands.push_back(node->operand(static_cast<int>(k)));
      continue;
    }
    const Shape& shape = operand.parts[0]->shape();
    const int64_t aligned = axis - static_cast<int64_t>(rank - shape.size());
    if (aligned >= 0) {
      AMPC_ASSIGN_OR_RETURN(Value * stacked, emit_stack(e, operand, aligned, sink));
      operands.push_back(stacked);
      continue;
    }
    if (shape.size() < rank &&
        std::all_of(operand.parts.begin(), operand.parts.end(),
                    [](const Value* v) { return v->type().num_elements() == 1; })) {
      // One element each (a condition per bag): their vector along the axis.
      AMPC_ASSIGN_OR_RETURN(Value * vector, scalar_vector(e, operand.parts, sink));
      Shape along(rank, 1);
      along[static_cast<size_t>(axis)] = static_cast<int64_t>(operand.parts.size());
      AMPC_ASSIGN_OR_RETURN(vector, e.reshape(vector, along));
      operands.push_back(vector);
      continue;
    }
    // An operand of lower rank: raised to the part's rank, then stacked as a leaf.
    StackPlan raised;
    Shape full(rank - shape.size(), 1);
    full.insert(full.end(), shape.begin(), shape.end());
    for (Value* part : operand.parts) {
      AMPC_ASSIGN_OR_RETURN(Value * r, e.reshape(part, full));
      raised.parts.push_back(r);
    }
    AMPC_ASSIGN_OR_RETURN(Value * stacked, emit_stack(e, raised, axis, sink));
    operands.push_back(stacked);
  }
  Attributes attrs = node->attrs();
  return e.op(node->op_type(), operands, std::move(attrs));
}

}  // namespace

absl::StatusOr<bool> concat_bags(const std::vector<Value*>& parts, int64_t axis,
                                 const std::string& output, const std::string& node_name,
                                 ImportSink& sink) {
  if (parts.size() < 2) return false;
  for (const Value* part : parts) {
    if (part->shape() != parts[0]->shape() || axis < 0 ||
        static_cast<size_t>(axis) >= part->shape().size() ||
        part->shape()[static_cast<size_t>(axis)] != 1) {
      return false;
    }
  }
  StackPlan plan;
  if (!plan_stack(parts, axis, sink, plan)) return false;
  onnx::NodeProto proto;
  proto.set_name(node_name);
  proto.add_output(output);
  const std::string label = str_cat("node '", node_name, "'");
  Emitter e(proto, label, sink);
  AMPC_ASSIGN_OR_RETURN(Value * stacked, emit_stack(e, plan, axis, sink));
  AMPC_RETURN_IF_ERROR(sink.bind(output, stacked->name(), node_name));
  return true;
}

}  // namespace ampc::onnx_io
