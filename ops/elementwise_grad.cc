// Gradient rules of the element-wise ops (ops/elementwise.cc), all composed of standard ops.
//
// Each rule may return a gradient shaped like the broadcast output; the autodiff walker sums it
// back to the input's shape. Rules that negate or cast a gradient reduce it first, so the extra
// op runs over the input's elements, not the output's. Where a derivative is 0 * inf, or at a
// tie or a bound, the convention is PyTorch's (named at each rule), since training runs are
// compared with PyTorch's.
#include "ops/elementwise_grad.h"

#include <algorithm>
#include <map>
#include <string>

#include "compiler/grad_builder.h"

namespace ampc::ops {
namespace {

Value* zero_like(GradBuilder& b, const Value* value) { return b.scalar(0, value->dtype()); }

// d/da (a + b) = d/db (a + b) = dy.
absl::StatusOr<Grads> add_grad(GradBuilder& b) {
  return Grads{b.grad_of_output(0), b.grad_of_output(0)};
}

// d/da (a - b) = dy, d/db (a - b) = -dy.
absl::StatusOr<Grads> sub_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  Grads grads = {dy, nullptr};
  if (b.needs_grad(1)) grads[1] = b.op("Neg", {b.reduce_to_shape(dy, b.input(1)->shape())});
  return grads;
}

// d/da (a * b) = dy * b, d/db (a * b) = dy * a.
absl::StatusOr<Grads> mul_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  Grads grads(2, nullptr);
  if (b.needs_grad(0)) grads[0] = b.op("Mul", {dy, b.input(1)});
  if (b.needs_grad(1)) grads[1] = b.op("Mul", {dy, b.input(0)});
  return grads;
}

// d/da (a / b) = dy / b, d/db (a / b) = -dy * a / b^2 = -(dy / b) * y.
absl::StatusOr<Grads> div_grad(GradBuilder& b) {
  Value* dy_over_b = b.op("Div", {b.grad_of_output(0), b.input(1)});
  Grads grads = {dy_over_b, nullptr};
  if (b.needs_grad(1)) {
    Value* product = b.op("Mul", {dy_over_b, b.output(0)});
    grads[1] = b.op("Neg", {b.reduce_to_shape(product, b.input(1)->shape())});
  }
  return grads;
}

// y = a - q b with q the truncated (fmod = 1) or floored quotient, constant almost everywhere,
// as PyTorch differentiates fmod and remainder: d/da = dy, d/db = -dy * q. q is taken as
// (a - y) / b, the integer within a few ulps.
absl::StatusOr<Grads> mod_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  Grads grads = {dy, nullptr};
  if (b.needs_grad(1)) {
    Value* quotient = b.op("Div", {b.op("Sub", {b.input(0), b.output(0)}), b.input(1)});
    grads[1] = b.op("Neg", {b.reduce_to_shape(b.op("Mul", {dy, quotient}), b.input(1)->shape())});
  }
  return grads;
}

// The exponent's value when it is a constant scalar nothing trains (a literal 2, 0.5, -1...).
const Tensor* constant_scalar_exponent(const GradBuilder& b) {
  const Tensor* value = b.input(1)->initializer();
  if (b.needs_grad(1) || value == nullptr || !value->has_data() || value->num_elements() != 1) {
    return nullptr;
  }
  return value;
}

// d/dx x^y = dz * y * x^(y-1), and 0 where y == 0 (PyTorch's pow_backward, which keeps 0^0 from
// giving 0 * inf). A constant scalar exponent is folded: x^2 gives dz * (2 * x). `exponent` is
// y in x's type (null when y is a constant scalar).
Value* pow_base_grad(GradBuilder& b, Value* exponent) {
  Value* x = b.input(0);
  const DType dtype = x->dtype();
  Value* power = nullptr;
  bool may_be_zero = true;
  if (const Tensor* known = constant_scalar_exponent(b)) {
    const double value = known->element_as_double(0);
    may_be_zero = value == 0;
    exponent = b.scalar(value, dtype);
    power = value == 2 ? x : b.op("Pow", {x, b.scalar(value - 1, dtype)});
  } else {
    power = b.op("Pow", {x, b.op("Sub", {exponent, b.scalar(1, dtype)})});
  }
  Value* grad = b.op("Mul", {b.grad_of_output(0), b.op("Mul", {exponent, power})});
  if (!may_be_zero) return grad;
  Value* zero = zero_like(b, x);
  return b.op("Where", {b.op("Equal", {exponent, zero}), zero, grad});
}

// d/dy x^y = dz * z * log(x), and 0 where x == 0 and y >= 0 (PyTorch's pow_backward_exponent,
// which keeps 0^y from giving 0 * -inf). `exponent` is y in x's type.
Value* pow_exponent_grad(GradBuilder& b, Value* exponent) {
  Value* x = b.input(0);
  Value* zero = zero_like(b, x);
  Value* grad = b.op("Mul", {b.grad_of_output(0), b.op("Mul", {b.output(0), b.op("Log", {x})})});
  Value* at_zero_base = b.op("Where", {b.op("Less", {exponent, zero}), grad, zero});
  grad = b.op("Where", {b.op("Equal", {x, zero}), at_zero_base, grad});
  // The exponent may have another float type than the base (opset 12): reduce, then cast.
  Value* y = b.input(1);
  grad = b.reduce_to_shape(grad, y->shape());
  return y->dtype() == x->dtype() ? grad : b.op("Cast", {grad}, {{"to", y->dtype()}});
}

absl::StatusOr<Grads> pow_grad(GradBuilder& b) {
  Value* y = b.input(1);
  const DType dtype = b.input(0)->dtype();
  // The exponent in the base's type (it may be an integer or another float type).
  Value* exponent = nullptr;
  if (constant_scalar_exponent(b) == nullptr) {
    exponent = y->dtype() == dtype ? y : b.op("Cast", {y}, {{"to", dtype}});
  }
  Grads grads(2, nullptr);
  if (b.needs_grad(0)) grads[0] = pow_base_grad(b, exponent);
  if (b.needs_grad(1)) grads[1] = pow_exponent_grad(b, exponent);
  return grads;
}

// d/dx sqrt(x) = dy / (2 * y).
absl::StatusOr<Grads> sqrt_grad(GradBuilder& b) {
  Value* y = b.output(0);
  return Grads{b.op("Div", {b.grad_of_output(0), b.op("Mul", {b.scalar(2, y->dtype()), y})})};
}

// d/dx exp(x) = dy * y.
absl::StatusOr<Grads> exp_grad(GradBuilder& b) {
  return Grads{b.op("Mul", {b.grad_of_output(0), b.output(0)})};
}

// d/dx log(x) = dy / x.
absl::StatusOr<Grads> log_grad(GradBuilder& b) {
  return Grads{b.op("Div", {b.grad_of_output(0), b.input(0)})};
}

// d/dx (-x) = -dy.
absl::StatusOr<Grads> neg_grad(GradBuilder& b) { return Grads{b.op("Neg", {b.grad_of_output(0)})}; }

// d/dx |x| = dy * sign(x): 0 at x == 0, as PyTorch's abs backward (dy * sgn(x)).
absl::StatusOr<Grads> abs_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* dy = b.grad_of_output(0);
  Value* zero = zero_like(b, x);
  Value* positive = b.op("Where", {b.op("Greater", {x, zero}), dy, zero});
  return Grads{b.op("Where", {b.op("Less", {x, zero}), b.op("Neg", {dy}), positive})};
}

// d/dx (1 / x) = -dy * y^2.
absl::StatusOr<Grads> reciprocal_grad(GradBuilder& b) {
  Value* y = b.output(0);
  return Grads{b.op("Neg", {b.op("Mul", {b.grad_of_output(0), b.op("Mul", {y, y})})})};
}

// d/dx_i max(x_0, ..., x_n-1) = dy / k where x_i is one of the k inputs equal to the result, 0
// elsewhere: ties share the gradient evenly, as PyTorch's maximum and minimum do for two inputs.
// Where the result is NaN no input equals it, and none gets a gradient. Min alike.
absl::StatusOr<Grads> extremum_grad(GradBuilder& b) {
  Value* dy = b.grad_of_output(0);
  const int n = b.node().num_operands();
  if (n == 1) return Grads{dy};
  Value* y = b.output(0);
  std::vector<Value*> selected;
  Value* count = nullptr;
  for (int i = 0; i < n; ++i) {
    selected.push_back(b.op("Equal", {b.input(i), y}));
    Value* one = b.op("Cast", {selected.back()}, {{"to", y->dtype()}});
    count = count == nullptr ? one : b.op("Add", {count, one});
  }
  Value* share = b.op("Div", {dy, count});
  Value* zero = zero_like(b, y);
  Grads grads(n, nullptr);
  for (int i = 0; i < n; ++i) {
    if (b.needs_grad(i)) grads[i] = b.op("Where", {selected[i], share, zero});
  }
  return grads;
}

// Clip's gradients are PyTorch's clamp's, which differ with the kind of bound:
//   - bounds stored as initializers (numbers: ReLU6's 0 and 6), read directly or through Casts,
//     are hyperparameters: x passes the gradient strictly between them and none at or beyond a
//     bound, as PyTorch 2.15's hardtanh, relu6 and clamp with number bounds do (measured at the
//     bounds);
//   - bounds computed at run time (torch.clamp with tensor bounds, which the TorchScript
//     exporter writes as Clip) get gradients, split as PyTorch 2.15's clamp backward splits
//     them (measured element by element; tests/ops/elementwise_grad_test.cc):
//       x:  1 inside (lo, hi), 1/2 at lo or at hi alone, 1 at lo == hi;
//       lo: 1 below lo, 1/2 at lo (lo < hi);  hi: 1 above hi, 1/2 at hi (lo < hi);
//       where lo > hi every element is hi, and hi gets it all. An absent bound is -inf or inf.
// The bounds are scalars (ONNX's Clip): their gradients are sums over every element.
absl::StatusOr<Grads> clip_grad(GradBuilder& b) {
  Value* x = b.input(0);
  Value* dy = b.grad_of_output(0);
  Value* lo = b.has_input(1) ? b.input(1) : nullptr;
  Value* hi = b.has_input(2) ? b.input(2) : nullptr;
  // Stored bounds may be read through Casts: autocast's, which put ReLU6's 0 and 6 in bf16
  // beside a bf16 input.
  auto computed = [](const Value* bound) {
    while (bound != nullptr && bound->initializer() == nullptr) {
      const Node* producer = bound->producer();
      if (producer == nullptr || producer->op_type() != "Cast" || !producer->domain().empty()) {
        return true;
      }
      bound = producer->operand(0);
    }
    return false;
  };
  if (!computed(lo) && !computed(hi)) {
    Value* zero = zero_like(b, x);
    Value* dx = dy;
    // Strict comparisons, which every opset has (GreaterOrEqual and LessOrEqual come at 12, and
    // Clip reads its bounds as inputs from 11); NaN gets none, as in PyTorch's clamp.
    if (hi != nullptr) dx = b.op("Where", {b.op("Less", {x, hi}), dx, zero});
    if (lo != nullptr) dx = b.op("Where", {b.op("Greater", {x, lo}), dx, zero});
    return Grads{dx, nullptr, nullptr};
  }
  const DType dtype = x->dtype();
  // 1 where `op(a, c)` holds, else 0, in x's dtype; `absent` where the bound is absent.
  auto indicator = [&](std::string_view op, Value* a, Value* c, double absent) -> Value* {
    if (a == nullptr || c == nullptr) return b.scalar(absent, dtype);
    return b.op("Cast", {b.op(op, {a, c})}, {{"to", dtype}});
  };
  Value* half = b.scalar(0.5, dtype);
  auto plus_half_of = [&](Value* sum, Value* a, Value* c) {
    return b.op("Add", {sum, b.op("Mul", {half, b.op("Mul", {a, c})})});
  };
  Value* above_lo = indicator("Greater", x, lo, 1);
  Value* at_lo = indicator("Equal", x, lo, 0);
  Value* below_hi = indicator("Less", x, hi, 1);
  Value* at_hi = indicator("Equal", x, hi, 0);
  // lo <= hi, as 1 - (lo > hi): LessOrEqual comes at opset 12.
  Value* ordered = b.op("Sub", {b.scalar(1, dtype), indicator("Greater", lo, hi, 0)});
  Value* x_share = b.op("Mul", {above_lo, below_hi});
  x_share = plus_half_of(x_share, at_lo, below_hi);
  x_share = plus_half_of(x_share, at_hi, above_lo);
  x_share = b.op("Add", {x_share, b.op("Mul", {at_lo, at_hi})});
  Grads grads{b.op("Mul", {dy, x_share}), nullptr, nullptr};
  auto bound_grad = [&](Value* share, Value* bound) {
    return b.reduce_to_shape(b.op("Mul", {dy, share}), bound->shape());
  };
  if (lo != nullptr && b.needs_grad(1)) {
    Value* share = b.op("Mul", {indicator("Less", x, lo, 0), ordered});
    grads[1] = bound_grad(plus_half_of(share, at_lo, below_hi), lo);
  }
  if (hi != nullptr && b.needs_grad(2)) {
    Value* share = b.op("Mul", {indicator("Greater", x, hi, 0), ordered});
    share = plus_half_of(share, at_hi, above_lo);
    share = b.op("Add", {share, indicator("Greater", lo, hi, 0)});
    grads[2] = bound_grad(share, hi);
  }
  return grads;
}

// d/dx where(c, x, y) = dz where c, else 0; d/dy where(c, x, y) = dz where not c.
absl::StatusOr<Grads> where_grad(GradBuilder& b) {
  Value* condition = b.input(0);
  Value* dz = b.grad_of_output(0);
  Value* zero = zero_like(b, dz);
  Grads grads(3, nullptr);
  if (b.needs_grad(1)) grads[1] = b.op("Where", {condition, dz, zero});
  if (b.needs_grad(2)) grads[2] = b.op("Where", {condition, zero, dz});
  return grads;
}

}  // namespace

GradFn elementwise_gradient(std::string_view op_type) {
  static const std::map<std::string, GradFn, std::less<>> kRules = {
      {"Add", add_grad},      {"Sub", sub_grad},      {"Mul", mul_grad},
      {"Div", div_grad},      {"Mod", mod_grad},      {"Pow", pow_grad},
      {"Sqrt", sqrt_grad},    {"Exp", exp_grad},      {"Log", log_grad},
      {"Neg", neg_grad},      {"Abs", abs_grad},      {"Reciprocal", reciprocal_grad},
      {"Min", extremum_grad}, {"Max", extremum_grad}, {"Clip", clip_grad},
      {"Where", where_grad},
  };
  auto it = kRules.find(op_type);
  return it == kRules.end() ? nullptr : it->second;
}

}  // namespace ampc::ops
