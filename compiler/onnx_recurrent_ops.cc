// LSTM, GRU and RNN (what PyTorch's nn.LSTM, nn.GRU and nn.RNN export as), unrolled at import
// over their static sequence length into the ops ONNX defines them with: one MatMul of the whole
// input sequence by each direction's input weights, then per time step a MatMul by the recurrent
// weights, the gates (Slice), their activations and the element-wise cell update. Every backend
// runs them and autodiff differentiates them (backpropagation through time) with no kernels of
// their own. Both layouts, the three directions, initial states, peepholes (LSTM), GRU's
// linear_before_reset either way, `clip`, and the activations Sigmoid, Tanh and Relu are
// supported; sequence_lens only when every length is the whole sequence (known at compile time:
// packed sequences of other lengths are not), and LSTM's input_forget only at 0.
#include <map>
#include <optional>
#include <utility>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Recurrence {
  Cell cell = Cell::kRnn;
  int gates = 1;  // RNN 1, GRU 3 (z, r, h), LSTM 4 (i, o, f, c)
  int64_t hidden = 0;
  int directions = 1;
  bool reverse = false;  // direction "reverse" (one direction, backwards in time)
  bool batch_first = false;
  bool linear_before_reset = false;
  std::optional<float> clip;
  // Per direction (`per_direction` each): RNN f; GRU f, g; LSTM f, g, h (ONNX's names).
  std::vector<std::string> activations;
  size_t per_direction = 1;
  Value* x = nullptr;  // the inputs, as imported
  Value* w = nullptr;
  Value* r = nullptr;
  Value* b = nullptr;
  Value* initial_h = nullptr;
  Value* initial_c = nullptr;
  Value* peepholes = nullptr;
};

// The attributes ONNX types as lists of floats or strings, which read_attributes does not read.
absl::StatusOr<std::vector<std::string>> read_activations(const onnx::NodeProto& proto,
                                                          const std::string& label,
                                                          onnx::NodeProto& rest) {
  std::vector<std::string> activations;
  rest = proto;
  rest.clear_attribute();
  for (const onnx::AttributeProto& attr : proto.attribute()) {
    if (attr.name() == "activations") {
      activations.assign(attr.strings().begin(), attr.strings().end());
    } else if (attr.name() == "activation_alpha" || attr.name() == "activation_beta") {
      return absl::UnimplementedError(
          str_cat(label, ": attribute '", attr.name(),
                  "' is not supported (activations with parameters: Sigmoid, Tanh and Relu are)"));
    } else {
      *rest.add_attribute() = attr;
    }
  }
  return activations;
}

absl::StatusOr<Recurrence> read_recurrence(const onnx::NodeProto& proto, const std::string& label,
                                           ImportSink& sink) {
  Recurrence rec;
  const std::string& op = proto.op_type();
  rec.cell = op == "LSTM" ? Cell::kLstm : op == "GRU" ? Cell::kGru : Cell::kRnn;
  rec.gates = rec.cell == Cell::kLstm ? 4 : rec.cell == Cell::kGru ? 3 : 1;
  onnx::NodeProto rest;
  AMPC_ASSIGN_OR_RETURN(std::vector<std::string> activations, read_activations(proto, label, rest));
  std::map<std::string, onnx::AttributeProto::AttributeType, std::less<>> known = {
      {"clip", onnx::AttributeProto::FLOAT},
      {"direction", onnx::AttributeProto::STRING},
      {"hidden_size", onnx::AttributeProto::INT},
      {"layout", onnx::AttributeProto::INT}};
  if (rec.cell == Cell::kLstm) known.emplace("input_forget", onnx::AttributeProto::INT);
  if (rec.cell == Cell::kGru) known.emplace("linear_before_reset", onnx::AttributeProto::INT);
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs, read_attributes(rest, label, known));
  rec.hidden = attrs.i("hidden_size", 0);
  if (rec.hidden < 1) return invalid(str_cat(label, ": hidden_size must be set and >= 1"));
  const std::string direction = attrs.s("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return invalid(str_cat(label, ": direction is \"", direction,
                           "\"; it must be \"forward\", \"reverse\" or \"bidirectional\""));
  }
  rec.directions = direction == "bidirectional" ? 2 : 1;
  rec.reverse = direction == "reverse";
  const int64_t layout = attrs.i("layout", 0);
  if (layout != 0 && layout != 1) {
    return invalid(str_cat(label, ": layout is ", layout, "; it must be 0 or 1"));
  }
  rec.batch_first = layout == 1;
  rec.linear_before_reset = attrs.i("linear_before_reset", 0) != 0;
  if (attrs.i("input_forget", 0) != 0) {
    return absl::UnimplementedError(str_cat(label, ": input_forget = 1 is not supported"));
  }
  if (attrs.floats.contains("clip")) rec.clip = attrs.f("clip", 0);
  if (rec.clip && !(*rec.clip > 0)) {
    return invalid(str_cat(label, ": clip is ", *rec.clip, "; it must be > 0"));
  }
  rec.per_direction = rec.cell == Cell::kLstm ? 3 : rec.cell == Cell::kGru ? 2 : 1;
  const size_t per_direction = rec.per_direction;
  if (activations.empty()) {
    for (int d = 0; d < rec.directions; ++d) {
      if (rec.cell != Cell::kRnn) activations.push_back("Sigmoid");
      activations.push_back("Tanh");
      if (rec.cell == Cell::kLstm) activations.push_back("Tanh");
    }
  }
  if (activations.size() != per_direction * static_cast<size_t>(rec.directions)) {
    return invalid(str_cat(label, ": activations lists ", activations.size(), " functions; ", op,
                           " takes ", per_direction, " per direction"));
  }
  for (const std::string& name : activations) {
    if (name != "Sigmoid" && name != "Tanh" && name != "Relu") {
      return absl::UnimplementedError(str_cat(label, ": activation '", name,
                                              "' is not supported (Sigmoid, Tanh and Relu are)"));
    }
  }
  rec.activations = std::move(activations);

  AMPC_ASSIGN_OR_RETURN(rec.x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(rec.w, tensor_input(proto, 1, label, sink));
  AMPC_ASSIGN_OR_RETURN(rec.r, tensor_input(proto, 2, label, sink));
  if (has_input(proto, 3)) {
    AMPC_ASSIGN_OR_RETURN(rec.b, tensor_input(proto, 3, label, sink));
  }
  if (has_input(proto, 5)) {
    AMPC_ASSIGN_OR_RETURN(rec.initial_h, tensor_input(proto, 5, label, sink));
  }
  if (rec.cell == Cell::kLstm && has_input(proto, 6)) {
    AMPC_ASSIGN_OR_RETURN(rec.initial_c, tensor_input(proto, 6, label, sink));
  }
  if (rec.cell == Cell::kLstm && has_input(proto, 7)) {
    AMPC_ASSIGN_OR_RETURN(rec.peepholes, tensor_input(proto, 7, label, sink));
  }
  const Shape& x = rec.x->shape();
  if (x.size() != 3 || !is_arithmetic_float(rec.x->dtype())) {
    return invalid(str_cat(label, ": X is ", type_to_string(rec.x->type()),
                           "; it must be a float tensor of rank 3"));
  }
  const int64_t steps = x[rec.batch_first ? 1 : 0];
  const int64_t batch = x[rec.batch_first ? 0 : 1];
  const int64_t g = rec.gates * rec.hidden;
  auto check = [&](const Value* value, const char* name, const Shape& want) -> absl::Status {
    if (value == nullptr || value->shape() == want) return absl::OkStatus();
    return invalid(str_cat(label, ": ", name, " is ", shape_to_string(value->shape()),
                           "; it must be ", shape_to_string(want)));
  };
  const int64_t dirs = rec.directions;
  AMPC_RETURN_IF_ERROR(check(rec.w, "W", {dirs, g, x[2]}));
  AMPC_RETURN_IF_ERROR(check(rec.r, "R", {dirs, g, rec.hidden}));
  AMPC_RETURN_IF_ERROR(check(rec.b, "B", {dirs, 2 * g}));
  const Shape state =
      rec.batch_first ? Shape{batch, dirs, rec.hidden} : Shape{dirs, batch, rec.hidden};
  AMPC_RETURN_IF_ERROR(check(rec.initial_h, "initial_h", state));
  // PyTorch's dynamo exporter writes nn.LSTM(proj_size=P) as an LSTM of hidden_size P whose
  // initial cell state keeps the real hidden size: ONNX's LSTM has no projection.
  if (rec.initial_c != nullptr && rec.initial_c->shape().size() == 3 &&
      rec.initial_c->shape().back() > rec.hidden) {
    return invalid(str_cat(
        label, ": initial_c is ", shape_to_string(rec.initial_c->shape()), " and initial_h ",
        shape_to_string(state), ": a cell state wider than hidden_size ", rec.hidden,
        " is what PyTorch's exporter writes for nn.LSTM(proj_size=", rec.hidden,
        "), which ONNX's LSTM cannot express (it has no projection); the file does not compute "
        "the module. Export the LSTM without proj_size (and project with a Linear)"));
  }
  AMPC_RETURN_IF_ERROR(check(rec.initial_c, "initial_c", state));
  AMPC_RETURN_IF_ERROR(check(rec.peepholes, "P", {dirs, 3 * rec.hidden}));
  if (has_input(proto, 4)) {
    AMPC_ASSIGN_OR_RETURN(Value * lengths, tensor_input(proto, 4, label, sink));
    const Tensor* known_lengths = sink.known_value(lengths);
    bool whole = known_lengths != nullptr;
    for (int64_t i = 0; whole && i < known_lengths->num_elements(); ++i) {
      whole = known_lengths->element_as_i64(i) == steps;
    }
    if (!whole) {
      return absl::UnimplementedError(
          str_cat(label, ": sequence_lens '", proto.input(4),
                  "' must be known at compile time and equal the sequence length (", steps,
                  ") for every row: sequences of other lengths (packed sequences) are not "
                  "supported"));
    }
  }
  return rec;
}

// Emits the unrolled recurrence into the node's outputs.
class Unroller {
 public:
  Unroller(const Recurrence& rec, Emitter& e) : rec_(rec), e_(e) {}

  absl::Status run() {
    Value* x = rec_.x;
    if (rec_.batch_first) {
      AMPC_ASSIGN_OR_RETURN(x, e_.transpose(x, {1, 0, 2}));
    }
    steps_ = x->shape()[0];
    batch_ = x->shape()[1];
    std::vector<Value*> ys, hs, cs;
    for (int d = 0; d < rec_.directions; ++d) {
      AMPC_RETURN_IF_ERROR(direction(x, d, ys, hs, cs));
    }
    // Y [steps, directions, batch, hidden] (batch first: [batch, steps, directions, hidden]),
    // Y_h and Y_c [directions, batch, hidden] ([batch, directions, hidden]).
    if (!e_.output(0).empty()) {
      AMPC_ASSIGN_OR_RETURN(Value * y, concat(ys, 1));
      AMPC_RETURN_IF_ERROR(
          finish(y, rec_.batch_first ? std::vector<int64_t>{2, 0, 1, 3} : std::vector<int64_t>{},
                 e_.output(0)));
    }
    const std::vector<int64_t> state_perm =
        rec_.batch_first ? std::vector<int64_t>{1, 0, 2} : std::vector<int64_t>{};
    if (!e_.output(1).empty()) {
      AMPC_ASSIGN_OR_RETURN(Value * h, concat(hs, 0));
      AMPC_RETURN_IF_ERROR(finish(h, state_perm, e_.output(1)));
    }
    if (rec_.cell == Cell::kLstm && !e_.output(2).empty()) {
      AMPC_ASSIGN_OR_RETURN(Value * c, concat(cs, 0));
      AMPC_RETURN_IF_ERROR(finish(c, state_perm, e_.output(2)));
    }
    return absl::OkStatus();
  }

 private:
  // The i64 constant `values` shaped `shape`, made once and shared by every step that reads it
  // (most of the unrolled graph would otherwise be the same few constants).
  absl::StatusOr<Value*> constant(const Shape& shape, std::vector<int64_t> values) {
    auto [it, added] = constants_.try_emplace(std::pair(shape, values), nullptr);
    if (added) {
      AMPC_ASSIGN_OR_RETURN(it->second, e_.constant(Tensor::from_i64(shape, std::move(values))));
    }
    return it->second;
  }

  absl::StatusOr<Value*> index(Value* value, int64_t i, int64_t axis = 0) {
    AMPC_ASSIGN_OR_RETURN(Value * at, constant({}, {i}));
    return e_.op("Gather", {value, at}, {{"axis", AttrValue(axis)}});
  }

  // Columns [first, first + count) of a 2-D value.
  absl::StatusOr<Value*> columns(Value* value, int64_t first, int64_t count) {
    AMPC_ASSIGN_OR_RETURN(Value * starts, constant({1}, {first}));
    AMPC_ASSIGN_OR_RETURN(Value * ends, constant({1}, {first + count}));
    AMPC_ASSIGN_OR_RETURN(Value * axes, constant({1}, {-1}));
    return e_.op("Slice", {value, starts, ends, axes});
  }

  absl::StatusOr<Value*> unsqueeze(Value* value, int64_t axis) {
    return e_.op("Unsqueeze", {value}, {{"axes", AttrValue(std::vector<int64_t>{axis})}});
  }

  absl::StatusOr<Value*> concat(const std::vector<Value*>& values, int64_t axis) {
    if (values.size() == 1) return values[0];
    return e_.op("Concat", values, {{"axis", AttrValue(axis)}});
  }

  absl::Status finish(Value* value, const std::vector<int64_t>& perm, const std::string& name) {
    if (!perm.empty()) {
      return e_.op("Transpose", {value}, {{"perm", AttrValue(perm)}}, name).status();
    }
    return e_.op("Identity", {value}, {}, name).status();
  }

  // `f`(x), clipped first when the node says so.
  absl::StatusOr<Value*> activate(const std::string& f, Value* x) {
    if (rec_.clip) {
      AMPC_ASSIGN_OR_RETURN(Value * low, e_.scalar(-*rec_.clip, x->dtype()));
      AMPC_ASSIGN_OR_RETURN(Value * high, e_.scalar(*rec_.clip, x->dtype()));
      AMPC_ASSIGN_OR_RETURN(x, e_.op("Clip", {x, low, high}));
    }
    return e_.op(f, {x});
  }

  absl::StatusOr<Value*> add(Value* a, Value* b) {
    if (b == nullptr) return a;
    return e_.op("Add", {a, b});
  }
  absl::StatusOr<Value*> mul(Value* a, Value* b) { return e_.op("Mul", {a, b}); }

  absl::Status direction(Value* x, int d, std::vector<Value*>& ys, std::vector<Value*>& hs,
                         std::vector<Value*>& cs) {
    const int64_t hidden = rec_.hidden;
    const int64_t g = rec_.gates * hidden;
    const std::string* f = &rec_.activations[static_cast<size_t>(d) * rec_.per_direction];
    AMPC_ASSIGN_OR_RETURN(Value * w, index(rec_.w, d));  // [g, input]
    AMPC_ASSIGN_OR_RETURN(Value * w_t, e_.transpose(w, {1, 0}));
    AMPC_ASSIGN_OR_RETURN(Value * r, index(rec_.r, d));  // [g, hidden]
    AMPC_ASSIGN_OR_RETURN(Value * r_t, e_.transpose(r, {1, 0}));
    Value* input_bias = nullptr;
    Value* recurrent_bias = nullptr;
    if (rec_.b != nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * b, index(rec_.b, d));  // [2g]
      AMPC_ASSIGN_OR_RETURN(Value * b_row, unsqueeze(b, 0));
      AMPC_ASSIGN_OR_RETURN(input_bias, columns(b_row, 0, g));
      AMPC_ASSIGN_OR_RETURN(recurrent_bias, columns(b_row, g, g));
    }
    // Every step's input projection at once: [steps, batch, g].
    AMPC_ASSIGN_OR_RETURN(Value * projected, e_.op("MatMul", {x, w_t}));
    AMPC_ASSIGN_OR_RETURN(projected, add(projected, input_bias));
    // GRU's candidate reads its recurrent part apart from the others (linear_before_reset).
    Value* r_zr_t = nullptr;
    Value* r_h_t = nullptr;
    Value* bias_zr = nullptr;
    Value* bias_h = nullptr;
    if (rec_.cell == Cell::kGru) {
      AMPC_ASSIGN_OR_RETURN(r_zr_t, columns(r_t, 0, 2 * hidden));
      AMPC_ASSIGN_OR_RETURN(r_h_t, columns(r_t, 2 * hidden, hidden));
      if (recurrent_bias != nullptr) {
        AMPC_ASSIGN_OR_RETURN(bias_zr, columns(recurrent_bias, 0, 2 * hidden));
        AMPC_ASSIGN_OR_RETURN(bias_h, columns(recurrent_bias, 2 * hidden, hidden));
      }
    } else if (recurrent_bias != nullptr) {
      AMPC_ASSIGN_OR_RETURN(projected, add(projected, recurrent_bias));
    }
    std::vector<Value*> peephole(3, nullptr);  // i, o, f
    if (rec_.peepholes != nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * p, index(rec_.peepholes, d));
      AMPC_ASSIGN_OR_RETURN(Value * p_row, unsqueeze(p, 0));
      for (int k = 0; k < 3; ++k) {
        AMPC_ASSIGN_OR_RETURN(peephole[static_cast<size_t>(k)], columns(p_row, k * hidden, hidden));
      }
    }
    Value* h = nullptr;
    Value* c = nullptr;
    AMPC_ASSIGN_OR_RETURN(h, initial(rec_.initial_h, d, x->dtype()));
    if (rec_.cell == Cell::kLstm) {
      AMPC_ASSIGN_OR_RETURN(c, initial(rec_.initial_c, d, x->dtype()));
    }

    const bool backwards = rec_.reverse || d == 1;
    std::vector<Value*> outputs(static_cast<size_t>(steps_), nullptr);
    for (int64_t s = 0; s < steps_; ++s) {
      const int64_t t = backwards ? steps_ - 1 - s : s;
      AMPC_ASSIGN_OR_RETURN(Value * xt, index(projected, t));  // [batch, g]
      if (rec_.cell == Cell::kRnn) {
        AMPC_ASSIGN_OR_RETURN(Value * hr, e_.op("MatMul", {h, r_t}));
        AMPC_ASSIGN_OR_RETURN(Value * pre, add(xt, hr));
        AMPC_ASSIGN_OR_RETURN(h, activate(f[0], pre));
      } else if (rec_.cell == Cell::kGru) {
        AMPC_ASSIGN_OR_RETURN(Value * hr, e_.op("MatMul", {h, r_zr_t}));
        AMPC_ASSIGN_OR_RETURN(hr, add(hr, bias_zr));
        AMPC_ASSIGN_OR_RETURN(Value * xz, columns(xt, 0, hidden));
        AMPC_ASSIGN_OR_RETURN(Value * xr, columns(xt, hidden, hidden));
        AMPC_ASSIGN_OR_RETURN(Value * xh, columns(xt, 2 * hidden, hidden));
        AMPC_ASSIGN_OR_RETURN(Value * hz, columns(hr, 0, hidden));
        AMPC_ASSIGN_OR_RETURN(Value * hrr, columns(hr, hidden, hidden));
        AMPC_ASSIGN_OR_RETURN(Value * z_pre, add(xz, hz));
        AMPC_ASSIGN_OR_RETURN(Value * z, activate(f[0], z_pre));
        AMPC_ASSIGN_OR_RETURN(Value * r_pre, add(xr, hrr));
        AMPC_ASSIGN_OR_RETURN(Value * reset, activate(f[0], r_pre));
        Value* recurrent = nullptr;
        if (rec_.linear_before_reset) {
          AMPC_ASSIGN_OR_RETURN(Value * hh, e_.op("MatMul", {h, r_h_t}));
          AMPC_ASSIGN_OR_RETURN(hh, add(hh, bias_h));
          AMPC_ASSIGN_OR_RETURN(recurrent, mul(reset, hh));
        } else {
          AMPC_ASSIGN_OR_RETURN(Value * rh, mul(reset, h));
          AMPC_ASSIGN_OR_RETURN(recurrent, e_.op("MatMul", {rh, r_h_t}));
          AMPC_ASSIGN_OR_RETURN(recurrent, add(recurrent, bias_h));
        }
        AMPC_ASSIGN_OR_RETURN(Value * h_pre, add(xh, recurrent));
        AMPC_ASSIGN_OR_RETURN(Value * candidate, activate(f[1], h_pre));
        // h = (1 - z) * candidate + z * h = candidate + z * (h - candidate)
        AMPC_ASSIGN_OR_RETURN(Value * kept, e_.op("Sub", {h, candidate}));
        AMPC_ASSIGN_OR_RETURN(Value * moved, mul(z, kept));
        AMPC_ASSIGN_OR_RETURN(h, add(candidate, moved));
      } else {
        AMPC_ASSIGN_OR_RETURN(Value * hr, e_.op("MatMul", {h, r_t}));
        AMPC_ASSIGN_OR_RETURN(Value * pre, add(xt, hr));
        std::vector<Value*> gate(4);  // i, o, f, c
        for (int k = 0; k < 4; ++k) {
          AMPC_ASSIGN_OR_RETURN(gate[static_cast<size_t>(k)], columns(pre, k * hidden, hidden));
        }
        auto peep = [&](Value* value, int k, Value* cell) -> absl::StatusOr<Value*> {
          if (peephole[static_cast<size_t>(k)] == nullptr) return value;
          AMPC_ASSIGN_OR_RETURN(Value * term, mul(peephole[static_cast<size_t>(k)], cell));
          return add(value, term);
        };
        AMPC_ASSIGN_OR_RETURN(Value * i_pre, peep(gate[0], 0, c));
        AMPC_ASSIGN_OR_RETURN(Value * i, activate(f[0], i_pre));
        AMPC_ASSIGN_OR_RETURN(Value * f_pre, peep(gate[2], 2, c));
        AMPC_ASSIGN_OR_RETURN(Value * forget, activate(f[0], f_pre));
        AMPC_ASSIGN_OR_RETURN(Value * candidate, activate(f[1], gate[3]));
        AMPC_ASSIGN_OR_RETURN(Value * kept, mul(forget, c));
        AMPC_ASSIGN_OR_RETURN(Value * added, mul(i, candidate));
        AMPC_ASSIGN_OR_RETURN(c, add(kept, added));
        AMPC_ASSIGN_OR_RETURN(Value * o_pre, peep(gate[1], 1, c));
        AMPC_ASSIGN_OR_RETURN(Value * o, activate(f[0], o_pre));
        AMPC_ASSIGN_OR_RETURN(Value * squashed, activate(f[2], c));
        AMPC_ASSIGN_OR_RETURN(h, mul(o, squashed));
      }
      AMPC_ASSIGN_OR_RETURN(outputs[static_cast<size_t>(t)], unsqueeze(h, 0));
    }
    if (!e_.output(0).empty()) {
      AMPC_ASSIGN_OR_RETURN(Value * y, concat(outputs, 0));  // [steps, batch, hidden]
      AMPC_ASSIGN_OR_RETURN(y, unsqueeze(y, 1));
      ys.push_back(y);
    }
    AMPC_ASSIGN_OR_RETURN(Value * last_h, unsqueeze(h, 0));
    hs.push_back(last_h);
    if (c != nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * last_c, unsqueeze(c, 0));
      cs.push_back(last_c);
    }
    return absl::OkStatus();
  }

  // Direction d's initial state [batch, hidden]: from `given`, or zeros.
  absl::StatusOr<Value*> initial(Value* given, int d, DType dtype) {
    if (given == nullptr) {
      return e_.constant(Tensor(TensorType{dtype, {batch_, rec_.hidden}}));
    }
    return index(given, d, rec_.batch_first ? 1 : 0);
  }

  const Recurrence& rec_;
  Emitter& e_;
  std::map<std::pair<Shape, std::vector<int64_t>>, Value*> constants_;
  int64_t steps_ = 0;
  int64_t batch_ = 0;
};

}  // namespace

absl::Status lower_recurrent(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(Recurrence rec, read_recurrence(proto, label, sink));
  const int outputs = rec.cell == Cell::kLstm ? 3 : 2;
  if (proto.output_size() > outputs) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; ", proto.op_type(),
                           " has ", outputs));
  }
  Emitter e(proto, label, sink);
  Unroller unroller(rec, e);
  return unroller.run();
}

}  // namespace ampc::onnx_io::lowering
