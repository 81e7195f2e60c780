// The reductions ampc has no kernel of its own for, expanded at import into the ops ONNX defines
// them with (so every backend runs them and autodiff differentiates them with no new kernels or
// gradient rules): ReduceL1 = ReduceSum(Abs), ReduceL2 = Sqrt(ReduceSum(x * x)) (0, with no
// gradient, where the sum is 0, as PyTorch's norm), ReduceSumSquare,
// ReduceLogSum = Log(ReduceSum), ReduceLogSumExp (max-shifted, as PyTorch's logsumexp), and
// ReduceMin = -ReduceMax(-x) on floats (negation is exact, so the result is bit for bit). A
// ReduceMin or ReduceProd whose input is known at compile time (shape arithmetic: the element
// count PyTorch's var() and std() divide by is ReduceProd(Gather(Shape(x)))) becomes its value,
// unless that value is read from a float initializer of the file (a parameter, which trains);
// ReduceProd of a value computed at run time is a tree of products per reduced axis: the two
// halves multiplied (Slice, Mul), an odd length's last position carried over (Concat), until one
// position is left; Mul's gradient is the other factor, so zeros get exact gradients (no division
// by the product), and the Muls are pinned fp32 under autocast (Node::fp32_pin), as PyTorch's
// autocast runs prod in fp32 (products overflow fp16 quickly). TopK (float data, K known at
// compile time) is K rounds of ArgMax (ArgMin for the smallest), each taking the first of equal
// elements as ONNX's TopK does and masking it to -inf (+inf) for the next, its values gathered
// from the input (GatherElements), so their gradient reaches the taken elements only; K rounds
// cost K passes over the input: meant for the small K of mixture-of-experts routing.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_metadata.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

// A reduction's operand and what it reduces: `axes` (nullopt: every axis) and `keepdims`.
struct Reduction {
  Value* x = nullptr;
  std::optional<std::vector<int64_t>> axes;
  bool keepdims = true;
  bool noop = false;  // noop_with_empty_axes with no axes: the output is the (mapped) input
};

absl::StatusOr<Reduction> read_reduction(const onnx::NodeProto& proto, const std::string& label,
                                         ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"axes", onnx::AttributeProto::INTS},
                                         {"keepdims", onnx::AttributeProto::INT},
                                         {"noop_with_empty_axes", onnx::AttributeProto::INT}}));
  if (proto.output_size() > 1) {
    return invalid(
        str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(), " has one"));
  }
  Reduction r;
  AMPC_ASSIGN_OR_RETURN(r.x, tensor_input(proto, 0, label, sink));
  if (auto it = attrs.int_lists.find("axes"); it != attrs.int_lists.end()) r.axes = it->second;
  if (has_input(proto, 1)) {
    AMPC_ASSIGN_OR_RETURN(Value * axes_value, tensor_input(proto, 1, label, sink));
    const Tensor* known = sink.known_value(axes_value);
    if (known == nullptr) {
      return absl::UnimplementedError(
          str_cat(label, ": axes '", proto.input(1), "' must be known at compile time"));
    }
    r.axes = known->to_i64_vector();
  }
  if (r.axes && r.axes->empty()) r.axes.reset();
  r.keepdims = attrs.i("keepdims", 1) != 0;
  r.noop = !r.axes && attrs.i("noop_with_empty_axes", 0) != 0;
  const int64_t rank = static_cast<int64_t>(r.x->shape().size());
  if (r.axes) {
    for (int64_t& axis : *r.axes) {
      if (axis < -rank || axis >= rank) {
        return invalid(str_cat(label, ": axis ", axis, " is out of range for rank ", rank));
      }
      if (axis < 0) axis += rank;
    }
  }
  return r;
}

absl::Status float_operand(const Reduction& r, const std::string& label) {
  if (is_arithmetic_float(r.x->dtype())) return absl::OkStatus();
  return invalid(str_cat(label, ": data is ", dtype_name(r.x->dtype()), "; it must be float"));
}

// `op`(ReduceSum or ReduceMax) of `x` as `r` says, into the node's output.
absl::StatusOr<Value*> reduce(Emitter& e, std::string_view op, Value* x, const Reduction& r,
                              bool keepdims, std::string output = "", Attributes attrs = {}) {
  if (r.noop) return e.op("Identity", {x}, {}, std::move(output));
  attrs.emplace("keepdims", AttrValue(int64_t{keepdims ? 1 : 0}));
  if (r.axes) attrs.emplace("axes", AttrValue(*r.axes));
  return e.op(op, {x}, std::move(attrs), std::move(output));
}

// The reduction of a value known at compile time, element by element in index order: int64
// arithmetic for integer types, double for floats (rounded once to the dtype). An empty
// reduction gives the identity (`none`).
struct FoldOp {
  std::function<double(double, double)> f;
  std::function<int64_t(int64_t, int64_t)> i;
  double none_f;
  int64_t none_i;
};

// Which axes of a rank-`rank` operand `r` reduces (none for a noop), and the output's shape.
std::vector<bool> reduced_axes(const Reduction& r, size_t rank) {
  std::vector<bool> reduced(rank, !r.axes.has_value() && !r.noop);  // noop holds no axes
  if (r.axes) {
    for (int64_t axis : *r.axes) reduced[static_cast<size_t>(axis)] = true;
  }
  return reduced;
}

Shape reduced_shape(const Shape& in, const std::vector<bool>& reduced, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(in[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

Tensor fold(const Tensor& x, const Reduction& r, const FoldOp& op) {
  const Shape& in = x.shape();
  const size_t rank = in.size();
  const std::vector<bool> reduced = reduced_axes(r, rank);
  const Shape out_shape = reduced_shape(in, reduced, r.keepdims);
  Tensor out(TensorType{x.dtype(), out_shape});
  const bool integer = !is_arithmetic_float(x.dtype());
  std::vector<bool> started(static_cast<size_t>(out.num_elements()), false);
  std::vector<double> doubles(started.size());
  std::vector<int64_t> ints(started.size());
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < x.num_elements(); ++e) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (!reduced[d]) at = at * in[d] + index[d];
    }
    const auto o = static_cast<size_t>(at);
    if (integer) {
      ints[o] = started[o] ? op.i(ints[o], x.element_as_i64(e)) : x.element_as_i64(e);
    } else {
      doubles[o] = started[o] ? op.f(doubles[o], x.element_as_double(e)) : x.element_as_double(e);
    }
    started[o] = true;
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < in[d]) break;
      index[d] = 0;
    }
  }
  for (size_t o = 0; o < started.size(); ++o) {
    if (integer) {
      out.set_element_i64(static_cast<int64_t>(o), started[o] ? ints[o] : op.none_i);
    } else {
      out.set_element(static_cast<int64_t>(o), started[o] ? doubles[o] : op.none_f);
    }
  }
  return out;
}

// ReduceProd of a value computed at run time (see the file comment).
absl::Status product_tree(Emitter& e, const Reduction& r, const std::string& label, int64_t opset) {
  if (opset < 10) {
    return absl::UnimplementedError(
        str_cat(label,
                ": ReduceProd of a value computed at run time needs opset 10 or later "
                "(Slice with inputs); the model imports opset ",
                opset));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  if (r.noop) return e.op("Identity", {r.x}, {}, e.output(0)).status();
  const Shape& in = r.x->shape();
  const std::vector<bool> reduced = reduced_axes(r, in.size());
  const Shape kept = reduced_shape(in, reduced, /*keepdims=*/true);
  const Shape out = reduced_shape(in, reduced, r.keepdims);
  std::vector<int64_t> axes;
  for (size_t a = 0; a < in.size(); ++a) {
    if (reduced[a]) axes.push_back(static_cast<int64_t>(a));
  }
  const bool empty = std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return in[a] == 0; });
  if (empty) {  // the product of nothing is 1
    TensorType type{r.x->dtype(), out};
    std::vector<double> ones(static_cast<size_t>(type.num_elements()), 1.0);
    return e
        .op("Constant", {}, {{"value", AttrValue(Tensor::from_doubles(type.dtype, out, ones))}},
            e.output(0))
        .status();
  }
  e.pin_fp32(str_cat("product of ", label, " stays fp32"));
  auto slice = [&](Value* v, int64_t axis, int64_t begin, int64_t end) -> absl::StatusOr<Value*> {
    AMPC_ASSIGN_OR_RETURN(Value * starts, e.constant(Tensor::from_i64({1}, {begin})));
    AMPC_ASSIGN_OR_RETURN(Value * ends, e.constant(Tensor::from_i64({1}, {end})));
    AMPC_ASSIGN_OR_RETURN(Value * along, e.constant(Tensor::from_i64({1}, {axis})));
    return e.op("Slice", {v, starts, ends, along});
  };
  Value* v = r.x;
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    const int64_t axis = *it;
    for (int64_t n = in[axis]; n > 1;) {
      const int64_t half = n / 2;
      AMPC_ASSIGN_OR_RETURN(Value * first, slice(v, axis, 0, half));
      AMPC_ASSIGN_OR_RETURN(Value * second, slice(v, axis, half, 2 * half));
      AMPC_ASSIGN_OR_RETURN(Value * product, e.op("Mul", {first, second}));
      if (n % 2 == 1) {
        AMPC_ASSIGN_OR_RETURN(Value * last, slice(v, axis, n - 1, n));
        AMPC_ASSIGN_OR_RETURN(product,
                              e.op("Concat", {product, last}, {{"axis", AttrValue(axis)}}));
      }
      v = product;
      n = half + n % 2;
    }
  }
  e.pin_fp32("");
  if (out == kept) return e.op("Identity", {v}, {}, e.output(0)).status();
  return e.reshape(v, out, e.output(0)).status();
}

}  // namespace

absl::Status lower_reduce_via_sum(const onnx::NodeProto& proto, const std::string& label,
                                  ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Reduction r, read_reduction(proto, label, sink));
  AMPC_RETURN_IF_ERROR(float_operand(r, label));
  Emitter e(proto, label, sink);
  const std::string& op = proto.op_type();
  Value* x = r.x;
  if (op == "ReduceL1") {
    AMPC_ASSIGN_OR_RETURN(x, e.op("Abs", {x}));
  } else if (op == "ReduceL2" || op == "ReduceSumSquare") {
    AMPC_ASSIGN_OR_RETURN(x, e.op("Mul", {x, x}));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  if (op == "ReduceL1" || op == "ReduceSumSquare") {
    return reduce(e, "ReduceSum", x, r, r.keepdims, e.output(0)).status();
  }
  AMPC_ASSIGN_OR_RETURN(Value * sum, reduce(e, "ReduceSum", x, r, r.keepdims));
  if (op == "ReduceLogSum") return e.op("Log", {sum}, {}, e.output(0)).status();
  // The norm of zeros is 0 with gradient 0, as PyTorch's norm backward masks it (sqrt's would
  // be 0 * inf = NaN, which F.normalize of a zero row would spread to every parameter): the
  // square root of a sum that is 0 is taken of 1 and replaced by 0, so no gradient reaches it.
  const DType dtype = sum->dtype();
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, dtype));
  AMPC_ASSIGN_OR_RETURN(Value * one, e.scalar(1, dtype));
  AMPC_ASSIGN_OR_RETURN(Value * empty, e.op("Equal", {sum, zero}));
  AMPC_ASSIGN_OR_RETURN(Value * nonzero, e.op("Where", {empty, one, sum}));
  AMPC_ASSIGN_OR_RETURN(Value * root, e.op("Sqrt", {nonzero}));
  return e.op("Where", {empty, zero, root}, {}, e.output(0)).status();
}

absl::Status lower_reduce_min_or_prod(const onnx::NodeProto& proto, const std::string& label,
                                      ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Reduction r, read_reduction(proto, label, sink));
  Emitter e(proto, label, sink);
  const bool prod = proto.op_type() == "ReduceProd";
  if (const Tensor* known = sink.known_value(r.x);
      known != nullptr && !onnx_io::reads_float_initializer(r.x, sink)) {
    if (e.output(0).empty()) return absl::OkStatus();
    const FoldOp product{std::multiplies<double>(), std::multiplies<int64_t>(), 1.0, 1};
    const FoldOp minimum{[](double a, double b) { return std::isnan(b) ? b : std::min(a, b); },
                         [](int64_t a, int64_t b) { return std::min(a, b); },
                         std::numeric_limits<double>::infinity(),
                         std::numeric_limits<int64_t>::max()};
    Tensor value = fold(*known, r, prod ? product : minimum);
    return e.op("Constant", {}, {{"value", AttrValue(std::move(value))}}, e.output(0)).status();
  }
  if (prod) return product_tree(e, r, label, sink.opset());
  // The minimum is the mirrored maximum of the mirrored data, under a mirror that reverses the
  // order and is its own inverse: -x for floats, ~x = (all ones) - x for integers (exact: it
  // cannot overflow, unlike -x at the type's minimum), NOT for bool.
  const DType dtype = r.x->dtype();
  auto mirror = [&](Value* v, const std::string& output) -> absl::StatusOr<Value*> {
    if (is_arithmetic_float(dtype)) return e.op("Neg", {v}, {}, output);
    if (dtype == DType::kBool) return e.op("Not", {v}, {}, output);
    AMPC_ASSIGN_OR_RETURN(Value * ones, e.scalar(dtype == DType::kU8 ? 255 : -1, dtype));
    return e.op("Sub", {ones, v}, {}, output);
  };
  if (!is_arithmetic_float(dtype) && !is_integer(dtype) && dtype != DType::kBool) {
    return absl::UnimplementedError(str_cat(label, ": ReduceMin of ", dtype_name(dtype),
                                            " data computed at run time is not supported"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * mirrored, mirror(r.x, ""));
  // min(dim)'s gradient goes to the first minimum (compiler/onnx_metadata.h), the first maximum
  // of the mirrored data.
  Attributes recorded;
  for (const auto& [name, value] : torch_recorded_attrs(proto)) {
    if (name == "gradient_to_first") recorded.emplace(name, AttrValue(value));
  }
  AMPC_ASSIGN_OR_RETURN(Value * max,
                        reduce(e, "ReduceMax", mirrored, r, r.keepdims, "", std::move(recorded)));
  if (e.output(0).empty()) return absl::OkStatus();
  return mirror(max, e.output(0)).status();
}

absl::Status lower_top_k(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"axis", onnx::AttributeProto::INT},
                                         {"largest", onnx::AttributeProto::INT},
                                         {"sorted", onnx::AttributeProto::INT}}));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * k_value, tensor_input(proto, 1, label, sink));
  if (!is_arithmetic_float(x->dtype())) {
    return absl::UnimplementedError(
        str_cat(label, ": TopK of ", dtype_name(x->dtype()), " data is not supported (float is)"));
  }
  const Tensor* known_k = sink.known_value(k_value);
  if (known_k == nullptr || known_k->num_elements() != 1) {
    return absl::UnimplementedError(
        str_cat(label, ": K '", proto.input(1), "' must be one value known at compile time"));
  }
  const int64_t k = known_k->element_as_i64(0);
  const auto rank = static_cast<int64_t>(x->shape().size());
  int64_t axis = attrs.i("axis", -1);
  if (rank == 0 || axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for rank ", rank));
  }
  if (axis < 0) axis += rank;
  const int64_t extent = x->shape()[static_cast<size_t>(axis)];
  if (k < 1 || k > extent) {
    return invalid(str_cat(label, ": K is ", k, "; it must be 1 to ", extent,
                           " (the input's extent along axis ", axis, ")"));
  }
  const bool largest = attrs.i("largest", 1) != 0;
  Emitter e(proto, label, sink);
  const Attributes along = {{"axis", AttrValue(axis)}};
  Value* left = x;  // the elements not taken yet; taken ones masked to -inf (+inf)
  std::vector<Value*> taken;
  for (int64_t round = 0; round < k; ++round) {
    AMPC_ASSIGN_OR_RETURN(Value * index,
                          e.op(largest ? "ArgMax" : "ArgMin", {left},
                               {{"axis", AttrValue(axis)}, {"keepdims", AttrValue(int64_t{1})}}));
    taken.push_back(index);
    if (round + 1 == k) break;
    const double masked = largest ? -std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::infinity();
    const Shape& shape = index->shape();
    AMPC_ASSIGN_OR_RETURN(
        Value * fill, e.constant(Tensor::from_doubles(
                          x->dtype(), shape,
                          std::vector<double>(static_cast<size_t>(num_elements(shape)), masked))));
    AMPC_ASSIGN_OR_RETURN(left, e.op("ScatterElements", {left, index, fill}, along));
  }
  Value* indices = taken[0];
  if (taken.size() > 1) {
    AMPC_ASSIGN_OR_RETURN(indices, e.op("Concat", taken, along, e.output(1)));
  } else if (!e.output(1).empty()) {
    AMPC_ASSIGN_OR_RETURN(indices, e.op("Identity", {indices}, {}, e.output(1)));
  }
  if (e.output(0).empty()) return absl::OkStatus();
  return e.op("GatherElements", {x, indices}, along, e.output(0)).status();
}

absl::Status lower_reduce_log_sum_exp(const onnx::NodeProto& proto, const std::string& label,
                                      ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Reduction r, read_reduction(proto, label, sink));
  AMPC_RETURN_IF_ERROR(float_operand(r, label));
  Emitter e(proto, label, sink);
  if (r.noop) {
    if (e.output(0).empty()) return absl::OkStatus();
    return e.op("Identity", {r.x}, {}, e.output(0)).status();
  }
  Value* x = r.x;
  AMPC_ASSIGN_OR_RETURN(Value * max, reduce(e, "ReduceMax", x, r, /*keepdims=*/true));
  AMPC_ASSIGN_OR_RETURN(Value * infinite, e.op("IsInf", {max}));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * shift, e.op("Where", {infinite, zero, max}));
  AMPC_ASSIGN_OR_RETURN(Value * shifted, e.op("Sub", {x, shift}));
  AMPC_ASSIGN_OR_RETURN(Value * exp, e.op("Exp", {shifted}));
  AMPC_ASSIGN_OR_RETURN(Value * sum, reduce(e, "ReduceSum", exp, r, /*keepdims=*/true));
  AMPC_ASSIGN_OR_RETURN(Value * log, e.op("Log", {sum}));
  if (r.keepdims) {
    if (e.output(0).empty()) return absl::OkStatus();
    return e.op("Add", {log, shift}, {}, e.output(0)).status();
  }
  AMPC_ASSIGN_OR_RETURN(Value * kept, e.op("Add", {log, shift}));
  if (e.output(0).empty()) return absl::OkStatus();
  if (!r.axes) {
    AMPC_ASSIGN_OR_RETURN(Value * to, e.constant(Tensor::from_i64({0}, {})));
    return e.op("Reshape", {kept, to}, {}, e.output(0)).status();
  }
  return e.op("Squeeze", {kept}, {{"axes", AttrValue(*r.axes)}}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering
