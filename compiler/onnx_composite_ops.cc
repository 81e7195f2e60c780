// Ops that are short compositions of ops ampc has, lowered at import so that every backend runs
// them and autodiff differentiates them with no new kernels: Sum and Mean (Adds), Shrink and
// ThresholdedRelu (comparisons and Where), Hardmax (ArgMax against positions), GlobalMaxPool
// (ReduceMax), LRN (AveragePool over channels), EyeLike (a constant), MaxUnpool
// (ScatterElements), ReverseSequence (Gather), Swish and SwiGLU (Sigmoid and Muls) and CumProd
// (a scan of Muls). Each follows ONNX's definition and its node tests; where they disagree with
// PyTorch's layer of the same name, the note at the lowering says how.
#include <cmath>
#include <numeric>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

absl::Status expect_float(const std::string& label, std::string_view what, Value* value) {
  if (is_arithmetic_float(value->dtype())) return absl::OkStatus();
  return invalid(
      str_cat(label, ": ", what, " is ", dtype_name(value->dtype()), "; it must be float"));
}

absl::Status expect_outputs(const onnx::NodeProto& proto, const std::string& label, int count) {
  if (proto.output_size() <= count) return absl::OkStatus();
  return invalid(
      str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(), " has ", count));
}

}  // namespace

// Sum(x0, x1, ...) = ((x0 + x1) + x2) + ..., broadcast together (opset 8; before, the inputs
// share one shape, which broadcasting accepts too); Mean divides that sum by the count, as ONNX's
// reference does, so each is bit-exact.
absl::Status lower_sum_or_mean(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink) {
  AMPC_RETURN_IF_ERROR(read_attributes(proto, label, {}).status());
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  if (proto.input_size() == 0)
    return invalid(str_cat(label, " has no inputs; it needs one or more"));
  std::vector<Value*> terms;
  for (int i = 0; i < proto.input_size(); ++i) {
    AMPC_ASSIGN_OR_RETURN(Value * term, tensor_input(proto, i, label, sink));
    AMPC_RETURN_IF_ERROR(expect_float(label, str_cat("input ", i), term));
    if (!terms.empty() && term->dtype() != terms[0]->dtype()) {
      return invalid(str_cat(label, ": input ", i, " is ", dtype_name(term->dtype()),
                             " and input 0 is ", dtype_name(terms[0]->dtype()),
                             "; they must be one type"));
    }
    terms.push_back(term);
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const bool mean = proto.op_type() == "Mean";
  if (terms.size() == 1 && !mean) return e.op("Identity", {terms[0]}, {}, e.output(0)).status();
  Value* total = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    const bool last = k + 1 == terms.size();
    AMPC_ASSIGN_OR_RETURN(total,
                          e.op("Add", {total, terms[k]}, {}, last && !mean ? e.output(0) : ""));
  }
  if (!mean) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(Value * count,
                        e.scalar(static_cast<double>(terms.size()), terms[0]->dtype()));
  return e.op("Div", {total, count}, {}, e.output(0)).status();
}

// Shrink(x) = x + bias where x < -lambd, x - bias where x > lambd, 0 between (PyTorch's
// hardshrink is bias 0, softshrink bias = lambd). The gradient is 1 outside and 0 between.
// lambd and bias are rounded to x's type, as the reference's arithmetic in that type does.
absl::Status lower_shrink(const onnx::NodeProto& proto, const std::string& label,
                          ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"bias", onnx::AttributeProto::FLOAT},
                                         {"lambd", onnx::AttributeProto::FLOAT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "input", x));
  const float lambd = attrs.f("lambd", 0.5f);
  const float bias = attrs.f("bias", 0.0f);
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(Value * low, e.scalar(-lambd, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * high, e.scalar(lambd, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * shift, e.scalar(bias, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * below, e.op("Less", {x, low}));
  AMPC_ASSIGN_OR_RETURN(Value * above, e.op("Greater", {x, high}));
  AMPC_ASSIGN_OR_RETURN(Value * raised, e.op("Add", {x, shift}));
  AMPC_ASSIGN_OR_RETURN(Value * lowered, e.op("Sub", {x, shift}));
  AMPC_ASSIGN_OR_RETURN(Value * upper, e.op("Where", {above, lowered, zero}));
  return e.op("Where", {below, raised, upper}, {}, e.output(0)).status();
}

// ThresholdedRelu(x) = x where x > alpha, else 0.
absl::Status lower_thresholded_relu(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"alpha", onnx::AttributeProto::FLOAT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "input", x));
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(Value * alpha, e.scalar(attrs.f("alpha", 1.0f), x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * above, e.op("Greater", {x, alpha}));
  return e.op("Where", {above, x, zero}, {}, e.output(0)).status();
}

// Hardmax: 1 at the first largest element along the axis, 0 elsewhere (a NaN counts as the
// largest, as numpy's argmax in ONNX's reference). Before opset 13 the input is read as 2-D
// [d0 * .. * d(axis-1), d(axis) * .. * d(r-1)] (axis 1 by default) and the maximum is over its
// rows; from 13 it is over the one axis (-1 by default). No gradient reaches the input.
absl::Status lower_hardmax(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"axis", onnx::AttributeProto::INT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "input", x));
  const Shape shape = x->shape();
  const auto rank = static_cast<int64_t>(shape.size());
  const bool coerced = sink.opset() < 13;
  int64_t axis = attrs.i("axis", coerced ? 1 : -1);
  // Coerced, axis may be r (one row per element); otherwise it names an axis.
  if (axis < -rank || axis > (coerced ? rank : rank - 1) || (!coerced && rank == 0)) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for input of rank ", rank));
  }
  if (axis < 0) axis += rank;
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  Value* rows = x;
  if (coerced) {
    const auto product = [&](int64_t from, int64_t to) {
      return std::accumulate(shape.begin() + from, shape.begin() + to, int64_t{1},
                             std::multiplies<>());
    };
    AMPC_ASSIGN_OR_RETURN(rows, e.reshape(x, {product(0, axis), product(axis, rank)}));
    axis = 1;
  }
  const int64_t length = rows->shape()[static_cast<size_t>(axis)];
  if (length == 0) return e.op("Identity", {x}, {}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(
      Value * first,
      e.op("ArgMax", {rows}, {{"axis", AttrValue(axis)}, {"keepdims", AttrValue(int64_t{1})}}));
  AMPC_ASSIGN_OR_RETURN(Value * position,
                        positions(e, length, static_cast<size_t>(axis), rows->shape().size()));
  AMPC_ASSIGN_OR_RETURN(Value * hit, e.op("Equal", {position, first}));
  if (!coerced) return e.op("Cast", {hit}, {{"to", AttrValue(x->dtype())}}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * ones, e.cast(hit, x->dtype()));
  return e.reshape(ones, shape, e.output(0)).status();
}

// GlobalMaxPool: the maximum over every spatial axis, kept as 1s.
absl::Status lower_global_max_pool(const onnx::NodeProto& proto, const std::string& label,
                                   ImportSink& sink) {
  AMPC_RETURN_IF_ERROR(read_attributes(proto, label, {}).status());
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "X", x));
  const auto rank = static_cast<int64_t>(x->shape().size());
  if (rank < 3) {
    return invalid(str_cat(label, ": X is ", shape_to_string(x->shape()),
                           "; it must be [N, C, D1, ...] with one or more spatial axes"));
  }
  std::vector<int64_t> spatial(static_cast<size_t>(rank - 2));
  std::iota(spatial.begin(), spatial.end(), int64_t{2});
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  return e
      .op("ReduceMax", {x}, {{"axes", AttrValue(spatial)}, {"keepdims", AttrValue(int64_t{1})}},
          e.output(0))
      .status();
}

// LRN (local response normalization across channels):
//   y[n, c, ...] = x[n, c, ...] / (bias + alpha / size * sum(x[n, c', ...]^2))^beta
// over c' from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), within [0, C). The window
// sum is an AveragePool over the channels (counting the padding, so it is the sum / size), as
// PyTorch's nn.LocalResponseNorm computes it; for an even size PyTorch's window starts one
// channel earlier than ONNX's, which is followed here.
absl::Status lower_lrn(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"alpha", onnx::AttributeProto::FLOAT},
                                         {"beta", onnx::AttributeProto::FLOAT},
                                         {"bias", onnx::AttributeProto::FLOAT},
                                         {"size", onnx::AttributeProto::INT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "X", x));
  if (!attrs.ints.contains("size")) return invalid(str_cat(label, ": attribute 'size' is missing"));
  const int64_t size = attrs.i("size", 1);
  if (size < 1) return invalid(str_cat(label, ": size is ", size, "; it must be at least 1"));
  const Shape& shape = x->shape();
  if (shape.size() < 2) {
    return invalid(str_cat(label, ": X is ", shape_to_string(shape),
                           "; it must be [N, C, ...] with a channel axis"));
  }
  const int64_t rest =
      std::accumulate(shape.begin() + 2, shape.end(), int64_t{1}, std::multiplies<>());
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const DType dtype = x->dtype();
  AMPC_ASSIGN_OR_RETURN(Value * squared, e.op("Mul", {x, x}));
  AMPC_ASSIGN_OR_RETURN(Value * planes, e.reshape(squared, {shape[0], 1, shape[1], rest}));
  const std::vector<int64_t> pads = {(size - 1) / 2, 0, size / 2, 0};
  AMPC_ASSIGN_OR_RETURN(Value * mean,
                        e.op("AveragePool", {planes},
                             {{"kernel_shape", AttrValue(std::vector<int64_t>{size, 1})},
                              {"pads", AttrValue(pads)},
                              {"count_include_pad", AttrValue(int64_t{1})}}));
  AMPC_ASSIGN_OR_RETURN(Value * window, e.reshape(mean, shape));
  AMPC_ASSIGN_OR_RETURN(Value * alpha, e.scalar(attrs.f("alpha", 1e-4f), dtype));
  AMPC_ASSIGN_OR_RETURN(Value * bias, e.scalar(attrs.f("bias", 1.0f), dtype));
  AMPC_ASSIGN_OR_RETURN(Value * beta, e.scalar(attrs.f("beta", 0.75f), dtype));
  AMPC_ASSIGN_OR_RETURN(Value * scaled, e.op("Mul", {window, alpha}));
  AMPC_ASSIGN_OR_RETURN(Value * base, e.op("Add", {scaled, bias}));
  AMPC_ASSIGN_OR_RETURN(Value * divisor, e.op("Pow", {base, beta}));
  return e.op("Div", {x, divisor}, {}, e.output(0)).status();
}

// EyeLike: a 2-D constant shaped like the input (whose values are not read), 1 on diagonal k,
// in `dtype` (the input's type when absent).
absl::Status lower_eye_like(const onnx::NodeProto& proto, const std::string& label,
                            ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(proto, label,
                                                              {{"dtype", onnx::AttributeProto::INT},
                                                               {"k", onnx::AttributeProto::INT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * like, tensor_input(proto, 0, label, sink));
  const Shape& shape = like->shape();
  if (shape.size() != 2) {
    return invalid(str_cat(label, ": input is ", shape_to_string(shape), "; it must be 2-D"));
  }
  DType dtype = like->dtype();
  if (attrs.ints.contains("dtype")) {
    AMPC_ASSIGN_OR_RETURN(dtype, element_type_attr(attrs.i("dtype", 0), str_cat(label, ": dtype")));
  }
  const int64_t k = attrs.i("k", 0);
  std::vector<double> values(static_cast<size_t>(shape[0] * shape[1]), 0.0);
  for (int64_t row = 0; row < shape[0]; ++row) {
    if (row + k >= 0 && row + k < shape[1])
      values[static_cast<size_t>(row * shape[1] + row + k)] = 1;
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  return e
      .op("Constant", {}, {{"value", AttrValue(Tensor::from_doubles(dtype, shape, values))}},
          e.output(0))
      .status();
}

// MaxUnpool(X, I[, output_shape]): X's values written at the positions I holds (MaxPool's
// indices: into the whole tensor of the unpooled shape, (((n * C + c) * D1 + d1) * D2 + ...),
// zeros elsewhere. The unpooled shape is (D - 1) * stride - pad_begin - pad_end + kernel per
// spatial axis; a larger output_shape (which must be known at compile time) appends zeros at
// the end of each axis, as ONNX's reference and node tests do. A position written twice (by
// overlapping windows) takes one of its values. X's gradient gathers dY at the positions.
absl::Status lower_max_unpool(const onnx::NodeProto& proto, const std::string& label,
                              ImportSink& sink) {
  using onnx::AttributeProto;
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"kernel_shape", AttributeProto::INTS},
                                         {"pads", AttributeProto::INTS},
                                         {"strides", AttributeProto::INTS}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * indices, tensor_input(proto, 1, label, sink));
  const Shape& shape = x->shape();
  if (shape.size() < 3) {
    return invalid(str_cat(label, ": X is ", shape_to_string(shape),
                           "; it must be [N, C, D1, ...] with one or more spatial axes"));
  }
  if (indices->dtype() != DType::kI64 || indices->shape() != shape) {
    return invalid(str_cat(label, ": I is ", type_to_string(indices->type()),
                           "; it must be i64 shaped like X ", shape_to_string(shape)));
  }
  const size_t n = shape.size() - 2;
  if (!attrs.int_lists.contains("kernel_shape")) {
    return invalid(str_cat(label, ": attribute 'kernel_shape' is missing"));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                        per_axis(attrs, "kernel_shape", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> strides, per_axis(attrs, "strides", n, 1, 1, label));
  AMPC_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_axis(attrs, "pads", 2 * n, 0, 0, label));
  Shape unpooled = {shape[0], shape[1]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t d = (shape[i + 2] - 1) * strides[i] - pads[i] - pads[i + n] + kernel[i];
    if (d < 1) {
      return invalid(str_cat(label, ": spatial axis ", i, " unpools to ", d,
                             " positions; kernel, strides and pads leave none"));
    }
    unpooled.push_back(d);
  }
  Shape out_shape = unpooled;
  if (has_input(proto, 2)) {
    AMPC_ASSIGN_OR_RETURN(std::vector<double> given, known_floats(proto, 2, label, sink));
    out_shape.assign(given.begin(), given.end());
    bool fits = out_shape.size() == unpooled.size() && out_shape[0] == unpooled[0] &&
                out_shape[1] == unpooled[1];
    for (size_t i = 0; fits && i < out_shape.size(); ++i) fits = out_shape[i] >= unpooled[i];
    if (!fits) {
      return invalid(str_cat(label, ": output_shape is ", shape_to_string(out_shape),
                             "; it must keep N and C and hold the unpooled shape ",
                             shape_to_string(unpooled)));
    }
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const int64_t count = num_elements(shape);
  const int64_t total = num_elements(unpooled);
  AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
  AMPC_ASSIGN_OR_RETURN(Value * size, e.constant(Tensor::from_i64({1}, {total})));
  AMPC_ASSIGN_OR_RETURN(Value * zeros, e.op("Expand", {zero, size}));
  AMPC_ASSIGN_OR_RETURN(Value * flat_x, e.reshape(x, {count}));
  AMPC_ASSIGN_OR_RETURN(Value * flat_i, e.reshape(indices, {count}));
  AMPC_ASSIGN_OR_RETURN(Value * written, e.op("ScatterElements", {zeros, flat_i, flat_x},
                                              {{"axis", AttrValue(int64_t{0})}}));
  const bool grown = out_shape != unpooled;
  AMPC_ASSIGN_OR_RETURN(Value * y, e.reshape(written, unpooled, grown ? "" : e.output(0)));
  if (!grown) return absl::OkStatus();
  std::vector<int64_t> zeros_after(2 * out_shape.size(), 0);  // at the end of each axis
  for (size_t i = 0; i < out_shape.size(); ++i)
    zeros_after[out_shape.size() + i] = out_shape[i] - unpooled[i];
  return e.pad(y, std::move(zeros_after), e.output(0)).status();
}

// ReverseSequence(input, sequence_lens): along time_axis, the first sequence_lens[b] positions
// of batch entry b reversed, the rest kept. sequence_lens is read at run time: the position read
// is lens[b] - 1 - t where t < lens[b], else t; the input's (t, b) entries are rows of a Gather
// (whose gradient adds back into the rows read). ONNX leaves a length beyond the time axis
// undefined; ampc reverses the whole axis for it (never reading another entry's rows), and a
// length of 0 or less reverses nothing, as for 0.
absl::Status lower_reverse_sequence(const onnx::NodeProto& proto, const std::string& label,
                                    ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"batch_axis", onnx::AttributeProto::INT},
                                         {"time_axis", onnx::AttributeProto::INT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * lens, tensor_input(proto, 1, label, sink));
  const int64_t batch_axis = attrs.i("batch_axis", 1);
  const int64_t time_axis = attrs.i("time_axis", 0);
  if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0))) {
    return invalid(str_cat(label, ": batch_axis ", batch_axis, " and time_axis ", time_axis,
                           "; they must be 0 and 1, one each"));
  }
  const Shape& shape = x->shape();
  if (shape.size() < 2) {
    return invalid(str_cat(label, ": input is ", shape_to_string(shape),
                           "; it must have a batch and a time axis"));
  }
  const int64_t batch = shape[static_cast<size_t>(batch_axis)];
  if ((lens->dtype() != DType::kI64 && lens->dtype() != DType::kI32) ||
      lens->shape() != Shape{batch}) {
    return invalid(str_cat(label, ": sequence_lens is ", type_to_string(lens->type()),
                           "; it must be i64 [", batch, "], one length per batch entry"));
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const auto ta = static_cast<size_t>(time_axis);
  const auto ba = static_cast<size_t>(batch_axis);
  AMPC_ASSIGN_OR_RETURN(Value * t, positions(e, shape[ta], ta, 2));
  AMPC_ASSIGN_OR_RETURN(Value * wide, e.cast(lens, DType::kI64));
  Shape per_batch(2, 1);
  per_batch[ba] = batch;
  AMPC_ASSIGN_OR_RETURN(Value * steps, e.constant(Tensor::from_i64({}, {shape[ta]})));
  AMPC_ASSIGN_OR_RETURN(Value * beyond, e.op("Greater", {wide, steps}));
  AMPC_ASSIGN_OR_RETURN(Value * bounded, e.op("Where", {beyond, steps, wide}));
  AMPC_ASSIGN_OR_RETURN(Value * length, e.reshape(bounded, per_batch));
  AMPC_ASSIGN_OR_RETURN(Value * one, e.constant(Tensor::from_i64({}, {1})));
  AMPC_ASSIGN_OR_RETURN(Value * last, e.op("Sub", {length, one}));
  AMPC_ASSIGN_OR_RETURN(Value * reversed, e.op("Sub", {last, t}));
  AMPC_ASSIGN_OR_RETURN(Value * inside, e.op("Less", {t, length}));
  AMPC_ASSIGN_OR_RETURN(Value * read, e.op("Where", {inside, reversed, t}));
  // Row (i0, i1) of x as [d0 * d1, ...] is i0 * d1 + i1; entry (t, b) reads row `read` of its b.
  AMPC_ASSIGN_OR_RETURN(Value * b, positions(e, batch, ba, 2));
  const int64_t time_stride = time_axis == 0 ? shape[1] : 1;
  const int64_t batch_stride = batch_axis == 0 ? shape[1] : 1;
  AMPC_ASSIGN_OR_RETURN(Value * t_stride, e.constant(Tensor::from_i64({}, {time_stride})));
  AMPC_ASSIGN_OR_RETURN(Value * b_stride, e.constant(Tensor::from_i64({}, {batch_stride})));
  AMPC_ASSIGN_OR_RETURN(Value * time_offset, e.op("Mul", {read, t_stride}));
  AMPC_ASSIGN_OR_RETURN(Value * batch_offset, e.op("Mul", {b, b_stride}));
  AMPC_ASSIGN_OR_RETURN(Value * offset, e.op("Add", {time_offset, batch_offset}));
  const int64_t row_count = shape[0] * shape[1];
  AMPC_ASSIGN_OR_RETURN(Value * row, e.reshape(offset, {row_count}));
  Shape row_shape(shape.begin() + 1, shape.end());
  row_shape[0] = row_count;
  AMPC_ASSIGN_OR_RETURN(Value * rows, e.reshape(x, row_shape));
  AMPC_ASSIGN_OR_RETURN(Value * gathered,
                        e.op("Gather", {rows, row}, {{"axis", AttrValue(int64_t{0})}}));
  return e.reshape(gathered, shape, e.output(0)).status();
}

// Swish(x) = x * Sigmoid(alpha * x) (opset 24; at alpha 1 PyTorch's SiLU, lowered to the
// Mul(x, Sigmoid(x)) PyTorch's exporters write for it); SwiGLU(a, b) = Swish(a) * b (opset 28),
// a and b of one shape. alpha is rounded to x's type, as the reference's arithmetic in that type
// does.
absl::Status lower_swish(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label, {{"alpha", onnx::AttributeProto::FLOAT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  const bool gated = proto.op_type() == "SwiGLU";
  const int operands = gated ? 2 : 1;
  if (proto.input_size() != operands) {
    return invalid(str_cat(label, " has ", proto.input_size(), " inputs; ", proto.op_type(),
                           " has ", operands));
  }
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_RETURN_IF_ERROR(expect_float(label, "input 0", x));
  Value* value = nullptr;
  if (gated) {
    AMPC_ASSIGN_OR_RETURN(value, tensor_input(proto, 1, label, sink));
    if (value->type() != x->type()) {
      return invalid(str_cat(label, ": the gate A is ", type_to_string(x->type()),
                             " and the value B is ", type_to_string(value->type()),
                             "; SwiGLU takes them of one type and shape (it does not broadcast)"));
    }
  }
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  Value* argument = x;
  if (const float alpha = attrs.f("alpha", 1.0F); alpha != 1.0F) {
    AMPC_ASSIGN_OR_RETURN(Value * scale, e.scalar(alpha, x->dtype()));
    AMPC_ASSIGN_OR_RETURN(argument, e.op("Mul", {x, scale}));
  }
  AMPC_ASSIGN_OR_RETURN(Value * gate, e.op("Sigmoid", {argument}));
  if (!gated) return e.op("Mul", {x, gate}, {}, e.output(0)).status();
  AMPC_ASSIGN_OR_RETURN(Value * swish, e.op("Mul", {x, gate}));
  return e.op("Mul", {swish, value}, {}, e.output(0)).status();
}

// CumProd(x, axis) (opset 26): the running product along `axis` by a scan of log2(n) steps, each
// multiplying y by y shifted s places along the axis (ones shifted in), s = 1, 2, 4, ...;
// `exclusive` shifts x one place first, `reverse` runs it on x reversed along the axis (a Gather)
// and reverses back. The products are grouped differently from a left-to-right product (a
// rounding per factor either way), and autodiff differentiates the Muls, so a zero among the
// factors gets the gradient it should. The axis must be known at compile time.
absl::Status lower_cum_prod(const onnx::NodeProto& proto, const std::string& label,
                            ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"exclusive", onnx::AttributeProto::INT},
                                         {"reverse", onnx::AttributeProto::INT}}));
  AMPC_RETURN_IF_ERROR(expect_outputs(proto, label, 1));
  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  const DType dtype = x->dtype();
  if (!is_arithmetic_float(dtype) && dtype != DType::kI64 && dtype != DType::kI32) {
    return invalid(str_cat(label, ": input is ", dtype_name(dtype),
                           "; ampc takes CumProd of float, i64 and i32 data"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * axis_value, tensor_input(proto, 1, label, sink));
  if ((axis_value->dtype() != DType::kI64 && axis_value->dtype() != DType::kI32) ||
      axis_value->type().num_elements() != 1) {
    return invalid(str_cat(label, ": axis is ", type_to_string(axis_value->type()),
                           "; it must be an int32 or int64 scalar"));
  }
  const Tensor* known_axis = sink.known_value(axis_value);
  if (known_axis == nullptr) {
    return absl::UnimplementedError(
        str_cat(label, ": axis '", proto.input(1), "' must be known at compile time"));
  }
  const Shape& shape = x->type().shape;
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t axis = known_axis->element_as_i64(0);
  if (axis < -rank || axis >= rank) {
    return invalid(str_cat(label, ": axis ", axis, " is out of range for an input of rank ", rank));
  }
  if (axis < 0) axis += rank;
  for (const char* flag : {"exclusive", "reverse"}) {
    if (const int64_t v = attrs.i(flag, 0); v != 0 && v != 1) {
      return invalid(str_cat(label, ": attribute '", flag, "' is ", v, "; it must be 0 or 1"));
    }
  }
  const bool exclusive = attrs.i("exclusive", 0) != 0;
  const bool reverse = attrs.i("reverse", 0) != 0;
  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const int64_t n = shape[static_cast<size_t>(axis)];
  if (n == 0 || (n == 1 && !exclusive)) return e.op("Identity", {x}, {}, e.output(0)).status();

  const Attributes along = {{"axis", AttrValue(axis)}};
  const auto flip = [&](Value* t, std::string output = "") -> absl::StatusOr<Value*> {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = n - 1 - i;
    AMPC_ASSIGN_OR_RETURN(Value * indices, e.constant(Tensor::from_i64({n}, order)));
    return e.op("Gather", {t, indices}, along, std::move(output));
  };
  // t's first n - s entries along the axis after s ones (a Pad with 1); all ones when s = n.
  AMPC_ASSIGN_OR_RETURN(Value * one, e.scalar(1, dtype));
  const auto shift = [&](Value* t, int64_t s) -> absl::StatusOr<Value*> {
    if (s == n) {
      AMPC_ASSIGN_OR_RETURN(Value * dims, e.constant(Tensor::from_i64({rank}, shape)));
      return e.op("Expand", {one, dims});
    }
    AMPC_ASSIGN_OR_RETURN(Value * starts, e.constant(Tensor::from_i64({1}, {0})));
    AMPC_ASSIGN_OR_RETURN(Value * ends, e.constant(Tensor::from_i64({1}, {n - s})));
    AMPC_ASSIGN_OR_RETURN(Value * axes, e.constant(Tensor::from_i64({1}, {axis})));
    AMPC_ASSIGN_OR_RETURN(Value * kept, e.op("Slice", {t, starts, ends, axes}));
    std::vector<int64_t> pads(2 * static_cast<size_t>(rank), 0);
    pads[static_cast<size_t>(axis)] = s;
    AMPC_ASSIGN_OR_RETURN(Value * amounts, e.constant(Tensor::from_i64({2 * rank}, pads)));
    return e.op("Pad", {kept, amounts, one});
  };
  Value* y = x;
  if (reverse) {
    AMPC_ASSIGN_OR_RETURN(y, flip(y));
  }
  if (exclusive) {
    AMPC_ASSIGN_OR_RETURN(y, shift(y, 1));
  }
  for (int64_t s = 1; s < n; s *= 2) {
    AMPC_ASSIGN_OR_RETURN(Value * earlier, shift(y, s));
    AMPC_ASSIGN_OR_RETURN(y, e.op("Mul", {y, earlier}));
  }
  if (reverse) return flip(y, e.output(0)).status();
  return e.op("Identity", {y}, {}, e.output(0)).status();
}

}  // namespace ampc::onnx_io::lowering
