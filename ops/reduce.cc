// Reductions: ReduceMean, ReduceSum, ReduceMax over a set of axes, keeping the reduced axes as
// size 1 (keepdims) or dropping them.
//
// The axes are an attribute until the opset where they became an optional input (ReduceSum 13,
// ReduceMean and ReduceMax 18); both forms are accepted at every opset (AttrAsInput), and the
// input form must be a compile-time constant. No axes reduce over everything, unless
// noop_with_empty_axes asks for the identity.
#include <algorithm>

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

TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }

OpDef reduction(std::string name, std::string summary, int axes_input_since,
                std::vector<DType> dtypes, AutocastCategory category) {
  OpDef def;
  def.name = std::move(name);
  // Opset 11 introduced negative axes; later versions only widen types and move the axes.
  def.since_opset = 11;
  def.summary = std::move(summary);
  def.inputs = {input("data", std::move(dtypes)), optional_input("axes", {DType::kI64})};
  def.outputs = {input("reduced")};
  def.attrs = {attr("keepdims", int64_t{1}), attr("noop_with_empty_axes", int64_t{0}),
               optional_attr("axes", AttrKind::kInts)};
  def.attrs_as_inputs = {{"axes", 1, axes_input_since}};
  def.infer = infer_reduce;
  def.autocast.category = category;
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
  };
  return def;
}

void register_reduce_ops(OpRegistry& registry) {
  // Sums and means of many low-precision terms lose precision and overflow: fp32.
  registry.add(
      reduction("ReduceMean", "mean over the axes", 18, kNumericTypes, AutocastCategory::kDeny));
  registry.add(
      reduction("ReduceSum", "sum over the axes", 13, kNumericTypes, AutocastCategory::kDeny));
  // A maximum picks one of its inputs: exact in any dtype.
  std::vector<DType> max_types = kNumericTypes;
  max_types.push_back(DType::kBool);
  registry.add(
      reduction("ReduceMax", "maximum over the axes", 18, max_types, AutocastCategory::kClear));
}

const OpRegistration kRegistration(&register_reduce_ops);

}  // namespace
}  // namespace ampc::ops
