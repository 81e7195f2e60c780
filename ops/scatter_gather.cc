// The element-wise and tuple-wise index ops: GatherElements and ScatterElements (with the
// deprecated Scatter of opsets 9-10), GatherND and ScatterND, and the gradients of the two
// gathers, GatherElementsGrad and GatherNDGrad (ampc domain), which add dY into zeros shaped like
// the data at the positions the gather read. The gradient ops carry that shape as their `shape`
// attribute, so their output types are static.
//
// Indices are data: inference checks their shapes, the kernels check their values (negative ones
// count from the back). Where several updates land on one element, they apply in index order
// (row-major over the indices), so duplicates give the same result on every backend: the last one
// wins without a reduction, and the reductions combine them in that order.
//
// Autocast: the gathers and a scatter without a reduction move elements, exact in any dtype
// (clear). A scatter's reduction may compute (add, mul), so the scatters are `follow`: they run in
// low precision only when their data already is, and never cast fp32 data down to add into it
// (max and min are exact, but the category belongs to the op, not to the attribute).
#include <algorithm>

#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

using Ints = std::vector<int64_t>;

const std::vector<DType> kScatterTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                          DType::kF64, DType::kI64, DType::kI32,
                                          DType::kI8,  DType::kU8,  DType::kBool};

Tensor i64s(Shape shape, const Ints& values) { return Tensor::from_i64(std::move(shape), values); }

bool valid_shape(const Shape& shape) {
  return std::none_of(shape.begin(), shape.end(), [](int64_t dim) { return dim < 0; });
}

// ---- The element-wise form (GatherElements, ScatterElements, Scatter) -------------------------

// Indices of `indices_shape` (input 1) index `data` along `axis`: the same rank, and no larger
// than the data in the other dims. Returns the normalized axis.
absl::StatusOr<int64_t> check_elements_indices(const Shape& data, const Shape& indices,
                                               int64_t axis_attr) {
  if (data.empty()) {
    return absl::InvalidArgumentError("input 0 ('data') must have rank 1 or more, got a scalar");
  }
  AMPC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(axis_attr, data.size()));
  if (indices.size() != data.size()) {
    return absl::InvalidArgumentError(str_cat("input 1 ('indices') has shape ",
                                              shape_to_string(indices), "; it must have the rank ",
                                              data.size(), " of data ", shape_to_string(data)));
  }
  for (size_t d = 0; d < data.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && indices[d] > data[d]) {
      return absl::InvalidArgumentError(str_cat(
          "input 1 ('indices') has shape ", shape_to_string(indices), ": dim ", d, " (", indices[d],
          ") is larger than data's ", shape_to_string(data), " outside the axis ", axis));
    }
  }
  return axis;
}

absl::Status infer_gather_elements(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  const Shape& indices = ctx.input_type(1).shape;
  AMPC_RETURN_IF_ERROR(check_elements_indices(data.shape, indices, ctx.int_attr("axis")).status());
  ctx.set_output(0, TensorType{data.dtype, indices});
  return absl::OkStatus();
}

// The reductions a scatter of an opset accepts ("none" always).
absl::Status check_reduction(const InferenceContext& ctx, const std::vector<std::string>& allowed) {
  if (!ctx.has_attr("reduction") && allowed.size() == 1) return absl::OkStatus();
  const std::string& reduction = ctx.string_attr("reduction");
  if (std::find(allowed.begin(), allowed.end(), reduction) == allowed.end()) {
    return absl::InvalidArgumentError(str_cat("attribute 'reduction' is '", reduction,
                                              "'; at opset ", ctx.opset(), " it is one of '",
                                              str_join(allowed, "', '"), "'"));
  }
  if (reduction != "none" && ctx.input_type(0).dtype == DType::kBool) {
    return absl::InvalidArgumentError(
        str_cat("reduction '", reduction, "' needs numeric data; input 0 ('data') is bool"));
  }
  return absl::OkStatus();
}

// Input 2 ('updates') must have the data's element type and the shape `expected`.
absl::Status check_updates(const InferenceContext& ctx, const Shape& expected) {
  AMPC_RETURN_IF_ERROR(expect_same_dtype(ctx, 0, 2));
  const Shape& updates = ctx.input_type(2).shape;
  if (updates != expected) {
    return absl::InvalidArgumentError(str_cat("input 2 ('updates') has shape ",
                                              shape_to_string(updates), "; it must be ",
                                              shape_to_string(expected)));
  }
  return absl::OkStatus();
}

std::function<absl::Status(InferenceContext&)> infer_scatter_elements(
    std::vector<std::string> reductions) {
  return [reductions](InferenceContext& ctx) -> absl::Status {
    const TensorType& data = ctx.input_type(0);
    const Shape& indices = ctx.input_type(1).shape;
    AMPC_RETURN_IF_ERROR(
        check_elements_indices(data.shape, indices, ctx.int_attr("axis")).status());
    AMPC_RETURN_IF_ERROR(check_updates(ctx, indices));
    AMPC_RETURN_IF_ERROR(check_reduction(ctx, reductions));
    ctx.set_output(0, data);
    return absl::OkStatus();
  };
}

// ---- The tuple form (GatherND, ScatterND) -----------------------------------------------------

// The output shape of GatherND over `data` with `indices` and `batch_dims`: the indices' dims
// but the last, then the data dims the index tuples do not address.
absl::StatusOr<Shape> gather_nd_shape(const Shape& data, const Shape& indices, int64_t batch_dims) {
  if (data.empty() || indices.empty()) {
    return absl::InvalidArgumentError(
        str_cat("inputs 0 ('data') and 1 ('indices') must have rank 1 "
                "or more, got ",
                shape_to_string(data), " and ", shape_to_string(indices)));
  }
  const int64_t r = data.size();
  const int64_t q = indices.size();
  if (batch_dims < 0 || batch_dims >= std::min(r, q)) {
    return absl::InvalidArgumentError(
        str_cat("attribute 'batch_dims' is ", batch_dims, "; it must be in [0, ", std::min(r, q),
                ") for data of rank ", r, " and indices of rank ", q));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (data[d] != indices[d]) {
      return absl::InvalidArgumentError(
          str_cat("the first ", batch_dims, " (batch_dims) dims of data ", shape_to_string(data),
                  " and indices ", shape_to_string(indices), " must agree"));
    }
  }
  const int64_t k = indices.back();
  if (k < 1 || k > r - batch_dims) {
    return absl::InvalidArgumentError(
        str_cat("input 1 ('indices') has shape ", shape_to_string(indices), ": its last dim (", k,
                ") must be in [1, ", r - batch_dims, "], the data dims after batch_dims"));
  }
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + batch_dims + k, data.end());
  return out;
}

absl::Status infer_gather_nd(InferenceContext& ctx) {
  const TensorType& data = ctx.input_type(0);
  AMPC_ASSIGN_OR_RETURN(
      Shape out, gather_nd_shape(data.shape, ctx.input_type(1).shape, ctx.int_attr("batch_dims")));
  ctx.set_output(0, TensorType{data.dtype, std::move(out)});
  return absl::OkStatus();
}

std::function<absl::Status(InferenceContext&)> infer_scatter_nd(
    std::vector<std::string> reductions) {
  return [reductions](InferenceContext& ctx) -> absl::Status {
    const TensorType& data = ctx.input_type(0);
    AMPC_ASSIGN_OR_RETURN(const Shape updates,
                          gather_nd_shape(data.shape, ctx.input_type(1).shape, 0));
    AMPC_RETURN_IF_ERROR(check_updates(ctx, updates));
    AMPC_RETURN_IF_ERROR(check_reduction(ctx, reductions));
    ctx.set_output(0, data);
    return absl::OkStatus();
  };
}

// ---- Gradient rules ---------------------------------------------------------------------------

// What the rules of the two forms differ in: the gather of the form, its gradient op, and their
// attributes.
struct Form {
  const char* gather;
  const char* gather_grad;
  Attributes gather_attrs;
};

Form form_of(const GradBuilder& b) {
  const Node& node = b.node();
  if (node.op_type() == "ScatterND") return {"GatherND", "GatherNDGrad", {}};
  AMPC_CHECK(node.op_type() == "ScatterElements");
  const int64_t rank = b.input(0)->shape().size();
  const int64_t axis =
      node.int_attr("axis") < 0 ? node.int_attr("axis") + rank : node.int_attr("axis");
  return {"GatherElements", "GatherElementsGrad", {{"axis", axis}}};
}

// ScatterElements and ScatterND. Without a reduction, dData is dY where no update was written and
// dUpdates is dY gathered at the indices (PyTorch's scatter: an update a later duplicate
// overwrote still gets dY, as indices with duplicates are undefined there). With add, dData = dY.
// With max or min, an element's dY is split evenly among the values equal to the result, the
// data element's own included (PyTorch's scatter_reduce amax/amin). mul has no rule here: its
// gradient divides by the factors, and is only right with zero-aware products.
absl::StatusOr<Grads> scatter_grad(GradBuilder& b) {
  const Node& node = b.node();
  const std::string reduction =
      node.find_attr("reduction") ? node.string_attr("reduction") : std::string("none");
  const Form form = form_of(b);
  Value* dy = b.grad_of_output(0);
  Value* indices = b.input(1);
  const DType dtype = dy->dtype();
  Attributes attrs = form.gather_attrs;
  Attributes grad_attrs = form.gather_attrs;
  grad_attrs["shape"] = b.input(0)->shape();
  if (std::string_view(form.gather) == "GatherND") grad_attrs["batch_dims"] = int64_t{0};
  Grads grads(3, nullptr);
  if (reduction == "none") {
    if (b.needs_grad(0)) {
      Value* zeros = b.op("Expand", {b.scalar(0, dtype), b.int64s(b.input(2)->shape())});
      grads[0] = b.op(node.op_type(), {dy, indices, zeros}, attrs);
    }
    if (b.needs_grad(2)) grads[2] = b.op(form.gather, {dy, indices}, attrs);
    return grads;
  }
  if (reduction == "add") {
    grads[0] = dy;
    if (b.needs_grad(2)) grads[2] = b.op(form.gather, {dy, indices}, attrs);
    return grads;
  }
  if (reduction == "max" || reduction == "min") {
    Value* zero = b.scalar(0, dtype);
    Value* one = b.scalar(1, dtype);
    Value* data_hit = b.op("Equal", {b.input(0), b.output(0)});
    Value* update_hit =
        b.op("Equal", {b.input(2), b.op(form.gather, {b.output(0), indices}, attrs)});
    Value* update_count =
        b.ampc_op(form.gather_grad, {b.op("Where", {update_hit, one, zero}), indices}, grad_attrs);
    Value* count = b.op("Add", {b.op("Where", {data_hit, one, zero}), update_count});
    // Every element equals its data or some update that reached it, so count >= 1 where it is read.
    Value* share = b.op("Div", {dy, count});
    grads[0] = b.op("Where", {data_hit, share, zero});
    if (b.needs_grad(2)) {
      grads[2] = b.op("Where", {update_hit, b.op(form.gather, {share, indices}, attrs), zero});
    }
    return grads;
  }
  return absl::UnimplementedError(str_cat(node.describe(), ": no gradient for reduction '",
                                          reduction,
                                          "' (ampc differentiates none, add, max and "
                                          "min)"));
}

// ---- GatherElements ---------------------------------------------------------------------------

OpDef gather_elements_op() {
  OpDef def;
  def.name = "GatherElements";
  def.since_opset = 11;  // 13 only adds bf16
  def.summary = "out[i][j][k] = data[indices[i][j][k]][j][k] (for axis 0), negative from the back";
  def.inputs = {input("data"), input("indices", kIndexTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{0})};
  def.infer = infer_gather_elements;
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    const Shape& shape = b.input(0)->shape();
    AMPC_ASSIGN_OR_RETURN(const int64_t axis,
                          normalize_axis(b.node().int_attr("axis"), shape.size()));
    return Grads{b.ampc_op("GatherElementsGrad", {b.grad_of_output(0), b.input(1)},
                           {{"axis", axis}, {"shape", shape}}),
                 nullptr};
  };
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"ONNX example: axis 1",
       {{DType::kF32, {2, 2}}, {DType::kI64, {2, 2}}},
       {{1, i64s({2, 2}, {0, 0, 1, 0})}},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {2, 2}}}},
      {"axis 0, fewer and repeated rows, negative indices",
       {{DType::kF32, {3, 3}}, {DType::kI64, {2, 3}}},
       {{1, i64s({2, 3}, {1, 2, 0, -1, 0, -3})}},
       {},
       {{DType::kF32, {2, 3}}}},
      {"3-D axis -1, i32, narrower than the data",
       {{DType::kF16, {2, 3, 4}}, {DType::kI32, {2, 2, 5}}},
       {},
       {{"axis", int64_t{-1}}},
       {{DType::kF16, {2, 2, 5}}}},
  };
  return def;
}

// ---- ScatterElements, Scatter -----------------------------------------------------------------

OpDef scatter_elements_def(std::string name, int since, int until,
                           std::vector<std::string> reductions) {
  OpDef def;
  def.name = std::move(name);
  def.since_opset = since;
  def.until_opset = until;
  def.summary = "a copy of data with updates written (or reduced) where indices point along axis";
  def.inputs = {input("data", kScatterTypes), input("indices", kIndexTypes),
                input("updates", kScatterTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("axis", int64_t{0})};
  if (reductions.size() > 1) def.attrs.push_back(attr("reduction", std::string("none")));
  def.infer = infer_scatter_elements(reductions);
  def.autocast.category = AutocastCategory::kFollow;
  const TensorType f32_3x3{DType::kF32, {3, 3}};
  def.samples = {
      {"ONNX example: axis 1",
       {{DType::kF32, {1, 5}}, {DType::kI64, {1, 2}}, {DType::kF32, {1, 2}}},
       {{1, i64s({1, 2}, {1, 3})}},
       {{"axis", int64_t{1}}},
       {{DType::kF32, {1, 5}}}},
      {"axis 0, negative indices, narrower than the data",
       {f32_3x3, {DType::kI32, {2, 2}}, {DType::kF32, {2, 2}}},
       {{1, Tensor::from_doubles(DType::kI32, {2, 2}, {1, -3, -1, 2})}},
       {},
       {f32_3x3}},
  };
  if (reductions.size() > 1) {
    def.samples.push_back({"add, duplicate indices",
                           {f32_3x3, {DType::kI64, {3, 2}}, {DType::kF32, {3, 2}}},
                           {{1, i64s({3, 2}, {0, 2, 0, -1, 1, 2})}},
                           {{"axis", int64_t{1}}, {"reduction", std::string("add")}},
                           {f32_3x3}});
  }
  if (std::find(reductions.begin(), reductions.end(), "max") != reductions.end()) {
    def.samples.push_back({"max, duplicate indices",
                           {f32_3x3, {DType::kI64, {2, 3}}, {DType::kF32, {2, 3}}},
                           {{1, i64s({2, 3}, {1, 0, 2, 1, 0, 0})}},
                           {{"reduction", std::string("max")}},
                           {f32_3x3}});
    def.samples.push_back({"min, axis 1",
                           {f32_3x3, {DType::kI64, {3, 2}}, {DType::kF32, {3, 2}}},
                           {{1, i64s({3, 2}, {0, 0, 2, 1, 1, -1})}},
                           {{"axis", int64_t{1}}, {"reduction", std::string("min")}},
                           {f32_3x3}});
  }
  if (def.name == "Scatter") {
    // Integer data: Scatter has no gradient rule (its opsets have no GatherElements to build
    // one from), so its samples are not differentiable.
    for (OpSample& sample : def.samples) {
      sample.inputs[0].dtype = DType::kI64;
      sample.inputs[2].dtype = DType::kI64;
      sample.outputs[0].dtype = DType::kI64;
    }
  } else {
    def.gradient = scatter_grad;
  }
  return def;
}

// ---- GatherND ---------------------------------------------------------------------------------

OpDef gather_nd_op() {
  OpDef def;
  def.name = "GatherND";
  def.since_opset = 11;  // 12 adds batch_dims (default 0: opset 11's semantics), 13 bf16
  def.summary = "slices of data at the index tuples in indices' last dim, after batch_dims";
  def.inputs = {input("data"), input("indices", kIndexTypes)};
  def.outputs = {input("output")};
  def.attrs = {attr("batch_dims", int64_t{0})};
  def.infer = infer_gather_nd;
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    return Grads{b.ampc_op("GatherNDGrad", {b.grad_of_output(0), b.input(1)},
                           {{"batch_dims", b.node().int_attr("batch_dims")},
                            {"shape", b.input(0)->shape()}}),
                 nullptr};
  };
  def.autocast.category = AutocastCategory::kClear;
  def.samples = {
      {"ONNX example: rows of a matrix",
       {{DType::kF32, {2, 2}}, {DType::kI64, {2, 1}}},
       {{1, i64s({2, 1}, {1, 0})}},
       {},
       {{DType::kF32, {2, 2}}}},
      {"full tuples, repeated and negative",
       {{DType::kF32, {3, 4}}, {DType::kI64, {2, 2, 2}}},
       {{1, i64s({2, 2, 2}, {0, 1, 2, -1, 0, 1, -3, 3})}},
       {},
       {{DType::kF32, {2, 2}}}},
      {"batch_dims 1, i32",
       {{DType::kF16, {2, 3, 4}}, {DType::kI32, {2, 2, 1}}},
       {{1, Tensor::from_doubles(DType::kI32, {2, 2, 1}, {2, 0, -1, 1})}},
       {{"batch_dims", int64_t{1}}},
       {{DType::kF16, {2, 2, 4}}}},
  };
  return def;
}

// ---- ScatterND --------------------------------------------------------------------------------

OpDef scatter_nd_def(int since, int until, std::vector<std::string> reductions) {
  OpDef def;
  def.name = "ScatterND";
  def.since_opset = since;
  def.until_opset = until;
  def.summary = "a copy of data with update slices written (or reduced) at the index tuples";
  def.inputs = {input("data", kScatterTypes), input("indices", kIndexTypes),
                input("updates", kScatterTypes)};
  def.outputs = {input("output")};
  if (reductions.size() > 1) def.attrs.push_back(attr("reduction", std::string("none")));
  def.infer = infer_scatter_nd(reductions);
  def.gradient = scatter_grad;
  def.autocast.category = AutocastCategory::kFollow;
  const TensorType f32_4x3{DType::kF32, {4, 3}};
  def.samples = {
      {"ONNX example: rows",
       {f32_4x3, {DType::kI64, {2, 1}}, {DType::kF32, {2, 3}}},
       {{1, i64s({2, 1}, {3, 1})}},
       {},
       {f32_4x3}},
      {"elements, negative indices, i32",
       {f32_4x3, {DType::kI32, {3, 2}}, {DType::kF32, {3}}},
       {{1, Tensor::from_doubles(DType::kI32, {3, 2}, {0, 0, -1, 2, 2, -2})}},
       {},
       {f32_4x3}},
  };
  if (reductions.size() > 1) {
    def.samples.push_back({"add, duplicate rows",
                           {f32_4x3, {DType::kI64, {3, 1}}, {DType::kF32, {3, 3}}},
                           {{1, i64s({3, 1}, {2, 0, 2})}},
                           {{"reduction", std::string("add")}},
                           {f32_4x3}});
  }
  if (std::find(reductions.begin(), reductions.end(), "max") != reductions.end()) {
    def.samples.push_back({"max, duplicate elements",
                           {f32_4x3, {DType::kI64, {3, 2}}, {DType::kF32, {3}}},
                           {{1, i64s({3, 2}, {1, 1, 1, 1, 3, 0})}},
                           {{"reduction", std::string("max")}},
                           {f32_4x3}});
    def.samples.push_back({"min, rows",
                           {f32_4x3, {DType::kI64, {2, 1}}, {DType::kF32, {2, 3}}},
                           {{1, i64s({2, 1}, {0, -1})}},
                           {{"reduction", std::string("min")}},
                           {f32_4x3}});
  }
  return def;
}

// ---- GatherElementsGrad, GatherNDGrad ---------------------------------------------------------

// The `shape` attribute of a gather gradient: the forward data's shape.
absl::StatusOr<Shape> grad_shape(const InferenceContext& ctx) {
  const Shape& shape = ctx.ints_attr("shape");
  if (shape.empty() || !valid_shape(shape)) {
    return absl::InvalidArgumentError(str_cat("attribute 'shape' is ", shape_to_string(shape),
                                              ", not the shape of a tensor of rank 1 or more"));
  }
  return shape;
}

// dX of the `shape` attribute; dY and the indices have one shape.
absl::Status infer_gather_elements_grad(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const Shape shape, grad_shape(ctx));
  const TensorType& dy = ctx.input_type(0);
  const Shape& indices = ctx.input_type(1).shape;
  AMPC_RETURN_IF_ERROR(check_elements_indices(shape, indices, ctx.int_attr("axis")).status());
  if (dy.shape != indices) {
    return absl::InvalidArgumentError(str_cat("dY has shape ", shape_to_string(dy.shape),
                                              "; it must be the indices' ",
                                              shape_to_string(indices)));
  }
  ctx.set_output(0, TensorType{dy.dtype, shape});
  return absl::OkStatus();
}

// dX of the `shape` attribute; dY is shaped as GatherND's output on it.
absl::Status infer_gather_nd_grad(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(const Shape shape, grad_shape(ctx));
  const TensorType& dy = ctx.input_type(0);
  const Shape& indices = ctx.input_type(1).shape;
  AMPC_ASSIGN_OR_RETURN(const Shape expected,
                        gather_nd_shape(shape, indices, ctx.int_attr("batch_dims")));
  if (dy.shape != expected) {
    return absl::InvalidArgumentError(str_cat(
        "dY has shape ", shape_to_string(dy.shape), "; GatherND of ", shape_to_string(indices),
        " indices on ", shape_to_string(shape), " gives ", shape_to_string(expected)));
  }
  ctx.set_output(0, TensorType{dy.dtype, shape});
  return absl::OkStatus();
}

OpDef gather_elements_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "GatherElementsGrad";
  def.since_opset = 1;
  def.summary = "GatherElements' gradient: zeros of `shape` plus dY added at its indices";
  def.inputs = {input("dY", kFloatTypes), input("indices", kIndexTypes)};
  def.outputs = {input("dX")};
  def.attrs = {attr("axis", int64_t{0}), required_attr("shape", AttrKind::kInts)};
  def.infer = infer_gather_elements_grad;
  def.autocast.category = AutocastCategory::kClear;
  // Linear in dY: d/d(dY) = GatherElements(g) at the same indices.
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    return Grads{b.op("GatherElements", {b.grad_of_output(0), b.input(1)},
                      {{"axis", b.node().int_attr("axis")}}),
                 nullptr};
  };
  def.samples = {
      {"f32 axis 0, repeated and negative indices",
       {{DType::kF32, {2, 3}}, {DType::kI64, {2, 3}}},
       {{1, i64s({2, 3}, {1, 2, 0, -1, 2, -3})}},
       {{"shape", Ints{3, 3}}},
       {{DType::kF32, {3, 3}}}},
      {"f16 axis -1, i32",
       {{DType::kF16, {2, 2, 5}}, {DType::kI32, {2, 2, 5}}},
       {},
       {{"axis", int64_t{-1}}, {"shape", Ints{2, 3, 4}}},
       {{DType::kF16, {2, 3, 4}}}},
  };
  return def;
}

OpDef gather_nd_grad_op() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "GatherNDGrad";
  def.since_opset = 1;
  def.summary = "GatherND's gradient: zeros of `shape` plus dY's slices added at the tuples";
  def.inputs = {input("dY", kFloatTypes), input("indices", kIndexTypes)};
  def.outputs = {input("dX")};
  def.attrs = {attr("batch_dims", int64_t{0}), required_attr("shape", AttrKind::kInts)};
  def.infer = infer_gather_nd_grad;
  def.autocast.category = AutocastCategory::kClear;
  def.gradient = [](GradBuilder& b) -> absl::StatusOr<Grads> {
    return Grads{b.op("GatherND", {b.grad_of_output(0), b.input(1)},
                      {{"batch_dims", b.node().int_attr("batch_dims")}}),
                 nullptr};
  };
  def.samples = {
      {"f32 full tuples, repeated",
       {{DType::kF32, {2, 2}}, {DType::kI64, {2, 2, 2}}},
       {{1, i64s({2, 2, 2}, {0, 1, 2, -1, 0, 1, -3, 3})}},
       {{"shape", Ints{3, 4}}},
       {{DType::kF32, {3, 4}}}},
      {"bf16 batch_dims 1",
       {{DType::kBF16, {2, 2, 4}}, {DType::kI32, {2, 2, 1}}},
       {},
       {{"batch_dims", int64_t{1}}, {"shape", Ints{2, 3, 4}}},
       {{DType::kBF16, {2, 3, 4}}}},
  };
  return def;
}

void register_scatter_gather_ops(OpRegistry& registry) {
  registry.add(gather_elements_op());
  registry.add(gather_elements_grad_op());
  registry.add(scatter_elements_def("Scatter", 9, 10, {"none"}));
  registry.add(scatter_elements_def("ScatterElements", 11, 15, {"none"}));
  registry.add(scatter_elements_def("ScatterElements", 16, 17, {"none", "add", "mul"}));
  registry.add(scatter_elements_def("ScatterElements", 18, kLatestOpset,
                                    {"none", "add", "mul", "max", "min"}));
  registry.add(gather_nd_op());
  registry.add(gather_nd_grad_op());
  registry.add(scatter_nd_def(11, 15, {"none"}));
  registry.add(scatter_nd_def(16, 17, {"none", "add", "mul"}));
  registry.add(scatter_nd_def(18, kLatestOpset, {"none", "add", "mul", "max", "min"}));
}

const OpRegistration kScatterGatherOps(&register_scatter_gather_ops);

}  // namespace
}  // namespace ampc::ops
