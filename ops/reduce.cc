// Reductions: ReduceMean, ReduceSum, ReduceMax over a set of axes (ArgMax, ArgMin and the scan
// CumSum along one),
// keeping the reduced axes as size 1 (keepdims) or dropping them.
//
// The axes are an attribute until the opset where they became an optional input (ReduceSum 13,
// ReduceMean and ReduceMax 18); both forms are accepted at every opset (AttrAsInput), and the
// input form must be a compile-time constant. No axes reduce over everything, unless
// noop_with_empty_axes asks for the identity.
//
// Gradients compose standard ops: the output gradient, reshaped to the keepdims form, is
// expanded back over the reduced axes (divided by their size for ReduceMean; for ReduceMax
// routed to the maximal elements, shared evenly among ties, as PyTorch's amax does; with the
// extension attribute gradient_to_first, to the first maximal element along the one reduced
// axis, as PyTorch's max(dim) and min(dim) do, which return that element's index).
#include <algorithm>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

absl::Status infer_reduce(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  if (in.dtype == DType::kBool && ctx.node().op_type() == "ReduceMax" && ctx.opset() < 20) {
    return absl::InvalidArgumentError(
        str_cat("ReduceMax accepts bool input from opset 20; the model's opset is ", ctx.opset()));
  }
  AMPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes,
                        ctx.ints_attr_or_input("axes", 1));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  std::vector<int64_t> reduced;
  if (axes && !axes->empty()) {
    AMPC_ASSIGN_OR_RETURN(reduced, normalize_axes(*axes, rank));
  } else if (ctx.int_attr("noop_with_empty_axes") != 0) {
    ctx.set_output(0, in);
    return absl::OkStatus();
  } else {
    for (int64_t d = 0; d < rank; ++d) reduced.push_back(d);
  }
  const bool keepdims = ctx.int_attr("keepdims") != 0;
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    const bool is_reduced = std::find(reduced.begin(), reduced.end(), d) != reduced.end();
    if (!is_reduced) {
      shape.push_back(in.shape[d]);
    } else if (keepdims) {
      shape.push_back(1);
    }
  }
  ctx.set_output(0, TensorType{in.dtype, std::move(shape)});
  return absl::OkStatus();
}

// What a gradient rule needs of a reduction: the reduced axes (none: the identity) and the
// input's shape with them set to 1 (the keepdims form of the output).
struct Reduced {
  std::vector<int64_t> axes;
  Shape kept_shape;
};

absl::StatusOr<Reduced> reduced_axes(const GradBuilder& b) {
  const Node& node = b.node();
  std::vector<int64_t> axes;
  if (node.find_attr("axes") != nullptr) {
    axes = node.ints_attr("axes");
  } else if (b.has_input(1)) {
    const Tensor* value = b.input(1)->initializer();
    if (value == nullptr) {
      return absl::UnimplementedError("the axes input must be a constant to differentiate");
    }
    axes = value->to_i64_vector();
  }
  const Shape& shape = b.input(0)->shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  Reduced reduced;
  if (!axes.empty()) {
    AMPC_ASSIGN_OR_RETURN(reduced.axes, normalize_axes(axes, rank));
  } else if (node.int_attr("noop_with_empty_axes") == 0) {
    for (int64_t d = 0; d < rank; ++d) reduced.axes.push_back(d);
  }
  reduced.kept_shape = shape;
  for (int64_t d : reduced.axes) reduced.kept_shape[d] = 1;
  return reduced;
}

// `value` (shaped like the node's output) in the keepdims form.
Value* kept(GradBuilder& b, Value* value, const Shape& kept_shape) {
  if (value->shape() == kept_shape) return value;
  return b.op("Reshape", {value, b.int64s(kept_shape)});
}

// `value` (keepdims form) stretched over the input's shape.
Value* expanded(GradBuilder& b, Value* value) {
  const Shape& shape = b.input(0)->shape();
  if (value->shape() == shape) return value;
  return b.op("Expand", {value, b.int64s(shape)});
}

// d/dx sum = 1 on every reduced element: dx = expand(dy).
absl::StatusOr<Grads> reduce_sum_grad(GradBuilder& b) {
  AMPC_ASSIGN_OR_RETURN(Reduced reduced, reduced_axes(b));
  if (reduced.axes.empty()) return Grads{b.grad_of_output(0)};
  return Grads{expanded(b, kept(b, b.grad_of_output(0), reduced.kept_shape))};
}

// d/dx mean = 1 / count: dx = expand(dy / count), count the number of reduced elements.
absl::StatusOr<Grads> reduce_mean_grad(GradBuilder& b) {
  AMPC_ASSIGN_OR_RETURN(Reduced reduced, reduced_axes(b));
  Value* grad = b.grad_of_output(0);
  if (reduced.axes.empty()) return Grads{grad};
  int64_t count = 1;
  for (int64_t d : reduced.axes) count *= b.input(0)->shape()[d];
  grad = b.op("Div", {grad, b.scalar(static_cast<double>(count), grad->dtype())});
  return Grads{expanded(b, kept(b, grad, reduced.kept_shape))};
}

// d/dx max: dy goes to the elements equal to the maximum, split evenly among ties:
// dx = (x == y) * dy / count(x == y).
// With gradient_to_first and one reduced axis: dy goes to the element ArgMax picks (the first
// of ties), dx = (position == argmax) * dy.
absl::StatusOr<Grads> reduce_max_grad(GradBuilder& b) {
  AMPC_ASSIGN_OR_RETURN(Reduced reduced, reduced_axes(b));
  Value* grad = b.grad_of_output(0);
  if (reduced.axes.empty()) return Grads{grad};
  if (b.node().int_attr("gradient_to_first") != 0 && reduced.axes.size() == 1) {
    const int64_t axis = reduced.axes[0];
    const Shape& shape = b.input(0)->shape();
    Value* first = b.op("ArgMax", {b.input(0)}, {{"axis", axis}, {"keepdims", int64_t{1}}});
    std::vector<int64_t> positions(shape[axis]);
    for (int64_t i = 0; i < shape[axis]; ++i) positions[i] = i;
    std::vector<int64_t> along(shape.size(), 1);
    along[axis] = shape[axis];
    Value* picked = b.op("Equal", {b.op("Reshape", {b.int64s(positions), b.int64s(along)}), first});
    return Grads{b.op("Where", {picked, expanded(b, kept(b, grad, reduced.kept_shape)),
                                b.scalar(0, grad->dtype())})};
  }
  Value* is_max =
      b.op("Cast", {b.op("Equal", {b.input(0), kept(b, b.output(0), reduced.kept_shape)})},
           {{"to", grad->dtype()}});
  Value* ties = b.op("ReduceSum", {is_max}, {{"axes", reduced.axes}, {"keepdims", int64_t{1}}});
  Value* share = b.op("Div", {kept(b, grad, reduced.kept_shape), ties});
  return Grads{b.op("Mul", {is_max, share})};
}

OpDef reduction(std::string name, std::string summary, int axes_input_since,
                std::vector<DType> dtypes, AutocastCategory category, GradFn gradient) {
  OpDef def;
  def.name = std::move(name);
  // Opset 1's definition, as later ones: opset 11 allows negative axes (which ampc accepts at
  // any opset, a widening), later ones widen types and move the axes to an input.
  def.since_opset = 1;
  def.summary = std::move(summary);
  def.inputs = {input("data", std::move(dtypes)), optional_input("axes", {DType::kI64})};
  def.outputs = {input("reduced")};
  def.attrs = {flag_attr("keepdims", 1), flag_attr("noop_with_empty_axes", 0),
               optional_attr("axes", AttrKind::kInts)};
  def.attrs_as_inputs = {{"axes", 1, axes_input_since}};
  def.infer = infer_reduce;
  def.autocast.category = category;
  def.gradient = std::move(gradient);
  def.samples = {
      {"all axes, keepdims", {f32({2, 3, 4})}, {}, {}, {f32({1, 1, 1})}},
      {"axes attribute, no keepdims",
       {f32({2, 3, 4})},
       {},
       {{"axes", std::vector<int64_t>{-1, 0}}, {"keepdims", int64_t{0}}},
       {f32({3})}},
      {"constant axes input",
       {f32({2, 3, 4}), TensorType{DType::kI64, {1}}},
       {{1, Tensor::from_i64({1}, {1})}},
       {},
       {f32({2, 1, 4})}},
      {"empty axes, noop",
       {f32({2, 3}), TensorType{DType::kI64, {0}}},
       {{1, Tensor::from_i64({0}, {})}},
       {{"noop_with_empty_axes", int64_t{1}}},
       {f32({2, 3})}},
      {"all axes, no keepdims", {f32({3, 4})}, {}, {{"keepdims", int64_t{0}}}, {f32({})}},
      {"one axis, no keepdims",
       {f32({2, 3, 4})},
       {},
       {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}},
       {f32({2, 4})}},
      {"middle axes of 4-D, keepdims",
       {f32({2, 3, 2, 4})},
       {},
       {{"axes", std::vector<int64_t>{1, -2}}},
       {f32({2, 1, 1, 4})}},
      {"size-1 axis", {f32({3, 1})}, {}, {{"axes", std::vector<int64_t>{1}}}, {f32({3, 1})}},
  };
  return def;
}

// ArgMax / ArgMin: the index (i64) of the largest / smallest element along `axis`, the first
// one (the last with select_last_index) among equals; a NaN counts as the extreme, as numpy's.
absl::Status infer_arg_reduce(InferenceContext& ctx) {
  const TensorType& in = ctx.input_type(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> axis, normalize_axes({ctx.int_attr("axis")}, rank));
  if (in.shape[axis[0]] == 0) {
    return absl::InvalidArgumentError(str_cat("axis ", ctx.int_attr("axis"), " has no elements"));
  }
  Shape shape = in.shape;
  if (ctx.int_attr("keepdims") != 0) {
    shape[axis[0]] = 1;
  } else {
    shape.erase(shape.begin() + axis[0]);
  }
  ctx.set_output(0, TensorType{DType::kI64, std::move(shape)});
  return absl::OkStatus();
}

OpDef arg_reduction(std::string name, std::string summary) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = 1;  // negative axes (11) widen; select_last_index (12) defaults to opset 1's
  def.summary = std::move(summary);
  def.inputs = {input("data", kNumericTypes)};
  def.outputs = {input("reduced")};
  def.attrs = {attr("axis", int64_t{0}), flag_attr("keepdims", 1),
               flag_attr("select_last_index", 0)};
  def.infer = infer_arg_reduce;
  def.autocast.category = AutocastCategory::kClear;  // picks an index: exact in any dtype
  const TensorType indices{DType::kI64, {2, 1}};
  def.samples = {
      {"default axis 0, keepdims", {f32({3, 4})}, {}, {}, {TensorType{DType::kI64, {1, 4}}}},
      {"last axis, no keepdims",
       {f32({2, 3, 4})},
       {},
       {{"axis", int64_t{-1}}, {"keepdims", int64_t{0}}},
       {TensorType{DType::kI64, {2, 3}}}},
      {"i64 data, last index",
       {TensorType{DType::kI64, {2, 5}}},
       {},
       {{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}},
       {indices}},
  };
  return def;
}

// CumSum(x, axis): running sums along axis (exclusive: without the element itself; reverse: from
// the end). `axis` is a 0-D or one-element integer tensor read at run time.
absl::Status infer_cumsum(InferenceContext& ctx) {
  const TensorType& axis = ctx.input_type(1);
  if (axis.num_elements() != 1 || axis.shape.size() > 1) {
    return absl::InvalidArgumentError(
        str_cat("axis must be a scalar or a one-element tensor, got ", type_to_string(axis)));
  }
  if (const Tensor* value = ctx.input_value(1); value != nullptr && value->has_data()) {
    AMPC_RETURN_IF_ERROR(normalize_axes({value->element_as_i64(0)},
                                        static_cast<int64_t>(ctx.input_type(0).shape.size()))
                             .status());
  }
  ctx.set_output(0, ctx.input_type(0));
  return absl::OkStatus();
}

// The gradient of a running sum is the running sum of dy the other way, just as exclusive:
// d/dx_j sum_{i >= j} dy_i (inclusive) or sum_{i > j} dy_i (exclusive).
absl::StatusOr<Grads> cumsum_grad(GradBuilder& b) {
  const Node& node = b.node();
  Value* dx = b.op("CumSum", {b.grad_of_output(0), b.input(1)},
                   {{"exclusive", node.int_attr("exclusive")},
                    {"reverse", int64_t{node.int_attr("reverse") == 0}}});
  return Grads{dx, nullptr};
}

OpDef cumsum() {
  OpDef def;
  def.name = "CumSum";
  def.since_opset = 11;  // f16 and bf16 from 14
  def.summary = "running sums along axis";
  def.inputs = {input("x", kNumericTypes), input("axis", {DType::kI32, DType::kI64})};
  def.outputs = {input("y")};
  def.attrs = {flag_attr("exclusive", 0), flag_attr("reverse", 0)};
  def.infer = infer_cumsum;
  def.gradient = cumsum_grad;
  def.no_gradient_inputs = {1};
  // A long sum of low-precision terms loses precision and overflows: fp32.
  def.autocast.category = AutocastCategory::kDeny;
  const TensorType axis{DType::kI64, {}};
  def.samples = {
      {"last axis", {f32({2, 5}), axis}, {{1, Tensor::from_i64({}, {1})}}, {}, {f32({2, 5})}},
      {"exclusive, reversed, first axis",
       {f32({4, 3}), axis},
       {{1, Tensor::from_i64({}, {0})}},
       {{"exclusive", int64_t{1}}, {"reverse", int64_t{1}}},
       {f32({4, 3})}},
      {"negative axis as a one-element tensor",
       {f32({2, 3, 2}), TensorType{DType::kI64, {1}}},
       {{1, Tensor::from_i64({1}, {-2})}},
       {{"exclusive", int64_t{1}}},
       {f32({2, 3, 2})}},
  };
  return def;
}

void register_reduce_ops(OpRegistry& registry) {
  // Sums and means of many low-precision terms lose precision and overflow: fp32.
  registry.add(reduction("ReduceMean", "mean over the axes", 18, kNumericTypes,
                         AutocastCategory::kDeny, reduce_mean_grad));
  registry.add(reduction("ReduceSum", "sum over the axes", 13, kNumericTypes,
                         AutocastCategory::kDeny, reduce_sum_grad));
  // A maximum picks one of its inputs: exact in any dtype.
  std::vector<DType> max_types = kNumericTypes;
  max_types.push_back(DType::kBool);
  OpDef reduce_max = reduction("ReduceMax", "maximum over the axes", 18, max_types,
                               AutocastCategory::kClear, reduce_max_grad);
  AttrSpec to_first = flag_attr("gradient_to_first", 0);
  to_first.extension = true;  // read from PyTorch's aten.max.dim and aten.min.dim
  reduce_max.attrs.push_back(to_first);
  registry.add(std::move(reduce_max));
  registry.add(arg_reduction("ArgMax", "index of the largest element along axis"));
  registry.add(arg_reduction("ArgMin", "index of the smallest element along axis"));
  registry.add(cumsum());
}

const OpRegistration kReduceOps(&register_reduce_ops);

}  // namespace
}  // namespace ampc::ops
