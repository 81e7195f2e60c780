// GridSample (opsets 16 and 20), lowered at import onto ops ampc already has, so every backend
// runs it and autodiff differentiates it, with respect to X and to the grid, with no new kernels.
//
// X is [N, C, D1 .. Dr] and the grid [N, O1 .. Or, r], whose last axis holds normalized
// coordinates in [-1, 1] in reverse axis order (x for the last spatial axis first). Following
// ONNX's definition (its reference implementation, which follows PyTorch's grid sampler):
//  1. each coordinate is unnormalized: ((g + 1) * d - 1) / 2, or (g + 1) / 2 * (d - 1) with
//     align_corners; nearest rounds it, halves to even;
//  2. with border or reflection padding, a coordinate outside [-0.5, d - 0.5] ([0, d - 1] with
//     align_corners) is clamped to [0, d - 1] or reflected into that range;
//  3. the taps around it (floor(x) and floor(x) + 1 for linear; floor(x) - 1 .. floor(x) + 2 for
//     cubic, Keys' kernel with a = -0.75; the coordinate itself for nearest) read X where they
//     fall inside; outside, zeros padding reads 0, border the edge, reflection the reflected
//     position.
// The lowering: X transposed to [N * D1 * .. * Dr, C]; per axis, the coordinate arithmetic on
// the grid's component and, per tap, the padded index and the tap's weight; per combination of
// taps (2^r, 4^r or 1), one Gather of X's rows at the flattened index, times the product of the
// axes' weights; the sum transposed back to [N, C, O1 .. Or]. Taps outside X under zeros padding
// get weight 0 through a Where, so they pass no gradient either. Reflected tap indices come from a
// table computed here (a tap lies at most two positions beyond the padded coordinate's range).
//
// The arithmetic on the grid is pinned fp32 (Node::fp32_pin): in fp16 a coordinate of 500 is
// only known to 0.25 of a pixel, and the interpolation weights are its fraction. PyTorch's grid
// sampler computes its coordinates in fp32 too. The Gathers follow X; the weighted sum, reading
// fp32 weights, is fp32.
#include <algorithm>
#include <cmath>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/strings.h"

namespace ampc::onnx_io::lowering {
namespace {

enum class SampleMode { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

// Taps are looked up for positions floor(x) + offset in [-kMargin, d + kMargin): floor(x) is
// clipped to [-3, d + 1] first, and offsets run from -1 to 2.
constexpr int64_t kMargin = 4;

// ONNX's reflection of `x` into [lo, hi], by the nearer border until inside.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range == 0) return lo;
  if (x >= lo && x <= hi) return x;
  const bool below = x < lo;
  const double dx = below ? lo - x : x - hi;
  const double n = std::floor(dx / range);
  const double r = dx - n * range;
  const bool even = std::fmod(n, 2) == 0;
  return below == even ? lo + r : hi - r;
}

struct Axis {
  int64_t size = 1;
  double lo = 0;  // the range coordinates are padded into, and reflected about
  double hi = 0;
};

// Emits the arithmetic of one lowering, in the grid's float type.
class GridEmitter {
 public:
  GridEmitter(Emitter& e, DType dtype) : e_(e), dtype_(dtype) {}

  absl::StatusOr<Value*> scalar(double v) { return e_.scalar(v, dtype_); }
  absl::StatusOr<Value*> binary(std::string_view op, Value* a, Value* b) {
    return e_.op(op, {a, b});
  }
  absl::StatusOr<Value*> with_scalar(std::string_view op, Value* a, double b) {
    AMPC_ASSIGN_OR_RETURN(Value * c, scalar(b));
    return binary(op, a, c);
  }
  absl::StatusOr<Value*> scalar_with(std::string_view op, double a, Value* b) {
    AMPC_ASSIGN_OR_RETURN(Value * c, scalar(a));
    return binary(op, c, b);
  }
  absl::StatusOr<Value*> unary(std::string_view op, Value* a) { return e_.op(op, {a}); }
  absl::StatusOr<Value*> where(Value* condition, Value* a, Value* b) {
    return e_.op("Where", {condition, a, b});
  }

  // Keys' cubic kernel near the tap (|u| <= 1) and far from it (1 < |u| < 2), a = -0.75, as
  // ONNX's reference evaluates it.
  absl::StatusOr<Value*> cubic_near(Value* u) {
    constexpr double a = -0.75;
    AMPC_ASSIGN_OR_RETURN(Value * v, with_scalar("Mul", u, a + 2));
    AMPC_ASSIGN_OR_RETURN(v, with_scalar("Sub", v, a + 3));
    AMPC_ASSIGN_OR_RETURN(v, binary("Mul", v, u));
    AMPC_ASSIGN_OR_RETURN(v, binary("Mul", v, u));
    return with_scalar("Add", v, 1);
  }
  absl::StatusOr<Value*> cubic_far(Value* u) {
    constexpr double a = -0.75;
    AMPC_ASSIGN_OR_RETURN(Value * v, with_scalar("Mul", u, a));
    AMPC_ASSIGN_OR_RETURN(v, with_scalar("Sub", v, 5 * a));
    AMPC_ASSIGN_OR_RETURN(v, binary("Mul", v, u));
    AMPC_ASSIGN_OR_RETURN(v, with_scalar("Add", v, 8 * a));
    AMPC_ASSIGN_OR_RETURN(v, binary("Mul", v, u));
    return with_scalar("Sub", v, 4 * a);
  }

  // ONNX's reflection (reflect() above) of every element of `x` outside [lo, hi].
  absl::StatusOr<Value*> reflect_outside(Value* x, Value* outside, const Axis& axis) {
    const double range = axis.hi - axis.lo;
    if (range == 0) {
      AMPC_ASSIGN_OR_RETURN(Value * lo, scalar(axis.lo));
      return where(outside, lo, x);
    }
    AMPC_ASSIGN_OR_RETURN(Value * below, with_scalar("Less", x, axis.lo));
    AMPC_ASSIGN_OR_RETURN(Value * under, scalar_with("Sub", axis.lo, x));
    AMPC_ASSIGN_OR_RETURN(Value * over, with_scalar("Sub", x, axis.hi));
    AMPC_ASSIGN_OR_RETURN(Value * dx, where(below, under, over));
    AMPC_ASSIGN_OR_RETURN(Value * n, with_scalar("Div", dx, range));
    AMPC_ASSIGN_OR_RETURN(n, unary("Floor", n));
    AMPC_ASSIGN_OR_RETURN(Value * whole, with_scalar("Mul", n, range));
    AMPC_ASSIGN_OR_RETURN(Value * r, binary("Sub", dx, whole));
    AMPC_ASSIGN_OR_RETURN(Value * two, scalar(2));
    AMPC_ASSIGN_OR_RETURN(Value * parity,
                          e_.op("Mod", {n, two}, {{"fmod", AttrValue(int64_t{1})}}));
    AMPC_ASSIGN_OR_RETURN(Value * even, with_scalar("Equal", parity, 0));
    AMPC_ASSIGN_OR_RETURN(Value * from_lo, binary("Equal", below, even));
    AMPC_ASSIGN_OR_RETURN(Value * up, with_scalar("Add", r, axis.lo));
    AMPC_ASSIGN_OR_RETURN(Value * down, scalar_with("Sub", axis.hi, r));
    AMPC_ASSIGN_OR_RETURN(Value * reflected, where(from_lo, up, down));
    return where(outside, reflected, x);
  }

 private:
  Emitter& e_;
  DType dtype_;
};

// One axis's taps: for each, X's index along the axis, its weight (null for nearest), and
// whether it lies inside X (null unless zeros padding).
struct Tap {
  Value* index = nullptr;
  Value* weight = nullptr;
  Value* inside = nullptr;
};

}  // namespace

absl::Status lower_grid_sample(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink) {
  using onnx::AttributeProto;
  const int64_t opset = sink.opset();
  AMPC_ASSIGN_OR_RETURN(NodeAttributes attrs,
                        read_attributes(proto, label,
                                        {{"align_corners", AttributeProto::INT},
                                         {"mode", AttributeProto::STRING},
                                         {"padding_mode", AttributeProto::STRING}}));
  if (proto.output_size() > 1) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; GridSample has one"));
  }
  // Opset 20 renamed bilinear and bicubic and allowed any number of spatial axes.
  const bool renamed = opset >= 20;
  const std::string linear = renamed ? "linear" : "bilinear";
  const std::string cubic = renamed ? "cubic" : "bicubic";
  const std::string mode_name = attrs.s("mode", linear);
  SampleMode mode = SampleMode::kNearest;
  if (mode_name == linear) {
    mode = SampleMode::kLinear;
  } else if (mode_name == cubic) {
    mode = SampleMode::kCubic;
  } else if (mode_name != "nearest") {
    return invalid(str_cat(label, ": mode '", mode_name, "' is not one of ", linear, ", nearest, ",
                           cubic, " (opset ", opset, ")"));
  }
  const std::string padding_name = attrs.s("padding_mode", "zeros");
  Padding padding = Padding::kZeros;
  if (padding_name == "border") {
    padding = Padding::kBorder;
  } else if (padding_name == "reflection") {
    padding = Padding::kReflection;
  } else if (padding_name != "zeros") {
    return invalid(str_cat(label, ": padding_mode '", padding_name,
                           "' is not one of zeros, border, reflection"));
  }
  const int64_t align_attr = attrs.i("align_corners", 0);
  if (align_attr != 0 && align_attr != 1) {
    return invalid(str_cat(label, ": align_corners is ", align_attr, "; it must be 0 or 1"));
  }
  const bool align = align_attr == 1;

  AMPC_ASSIGN_OR_RETURN(Value * x, tensor_input(proto, 0, label, sink));
  AMPC_ASSIGN_OR_RETURN(Value * grid, tensor_input(proto, 1, label, sink));
  const Shape& xs = x->shape();
  const Shape& gs = grid->shape();
  const auto rank = static_cast<int64_t>(xs.size());
  if (renamed ? rank < 3 : rank != 4) {
    return invalid(str_cat(label, ": X is ", shape_to_string(xs), "; GridSample at opset ", opset,
                           renamed ? " needs [N, C, D1, ...]" : " needs [N, C, H, W]"));
  }
  const int64_t r = rank - 2;
  if (static_cast<int64_t>(gs.size()) != rank || gs[0] != xs[0] || gs[rank - 1] != r) {
    std::string want = str_cat("[", xs[0]);
    for (int64_t i = 1; i <= r; ++i) want += str_cat(", O", i);
    want += str_cat(", ", r, "]");
    return invalid(str_cat(label, ": the grid is ", shape_to_string(gs), "; for X ",
                           shape_to_string(xs), " it must be ", want));
  }
  if (!is_arithmetic_float(grid->dtype())) {
    return invalid(
        str_cat(label, ": the grid is ", dtype_name(grid->dtype()), "; it must be a float type"));
  }
  if (mode != SampleMode::kNearest && !is_arithmetic_float(x->dtype())) {
    return invalid(str_cat(label, ": X is ", dtype_name(x->dtype()), "; ", mode_name,
                           " interpolation needs a float type"));
  }
  for (int64_t a = 0; a < rank; ++a) {
    if (xs[a] == 0 || gs[a] == 0) {
      return invalid(str_cat(label, ": X ", shape_to_string(xs), " and the grid ",
                             shape_to_string(gs), " must not be empty"));
    }
  }

  Emitter e(proto, label, sink);
  if (e.output(0).empty()) return absl::OkStatus();
  const int64_t batch = xs[0];
  const int64_t channels = xs[1];
  // The rows to gather, one per output position: [N, O1 .. Or]. The coordinates, indices and
  // weights computed on the way are [N, O1 .. Or, 1] (the grid's slices).
  const Shape index_shape(gs.begin(), gs.end() - 1);

  // X's rows: [N * D1 * .. * Dr, C].
  std::vector<int64_t> to_rows = {0};
  for (int64_t a = 2; a < rank; ++a) to_rows.push_back(a);
  to_rows.push_back(1);
  int64_t positions = 1;
  for (int64_t a = 2; a < rank; ++a) positions *= xs[a];
  AMPC_ASSIGN_OR_RETURN(Value * rows, e.transpose(x, to_rows));
  AMPC_ASSIGN_OR_RETURN(rows, e.reshape(rows, {batch * positions, channels}));

  e.pin_fp32(str_cat("sampling coordinates of ", label, " stay fp32"));
  GridEmitter g(e, grid->dtype());
  std::vector<std::vector<Tap>> taps(r);  // by spatial axis (X's order)
  int64_t stride = 1;
  std::vector<int64_t> strides(r);
  for (int64_t i = r - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= xs[2 + i];
  }
  for (int64_t i = 0; i < r; ++i) {
    Axis axis;
    axis.size = xs[2 + i];
    const auto d = static_cast<double>(axis.size);
    axis.lo = align ? 0 : -0.5;
    axis.hi = align ? d - 1 : d - 0.5;
    // The grid's component for this axis (reverse order): [N, O1 .. Or, 1].
    const int64_t component = r - 1 - i;
    AMPC_ASSIGN_OR_RETURN(Value * starts, e.constant(Tensor::from_i64({1}, {component})));
    AMPC_ASSIGN_OR_RETURN(Value * ends, e.constant(Tensor::from_i64({1}, {component + 1})));
    AMPC_ASSIGN_OR_RETURN(Value * axes, e.constant(Tensor::from_i64({1}, {rank - 1})));
    AMPC_ASSIGN_OR_RETURN(Value * coord, e.op("Slice", {grid, starts, ends, axes}));
    AMPC_ASSIGN_OR_RETURN(coord, g.with_scalar("Add", coord, 1));
    if (align) {
      AMPC_ASSIGN_OR_RETURN(coord, g.with_scalar("Mul", coord, (d - 1) / 2));
    } else {
      AMPC_ASSIGN_OR_RETURN(coord, g.with_scalar("Mul", coord, d));
      AMPC_ASSIGN_OR_RETURN(coord, g.with_scalar("Sub", coord, 1));
      AMPC_ASSIGN_OR_RETURN(coord, g.with_scalar("Mul", coord, 0.5));
    }
    if (mode == SampleMode::kNearest) {
      AMPC_ASSIGN_OR_RETURN(coord, g.unary("Round", coord));
    }
    if (padding != Padding::kZeros) {
      AMPC_ASSIGN_OR_RETURN(Value * below, g.with_scalar("Less", coord, axis.lo));
      AMPC_ASSIGN_OR_RETURN(Value * above, g.with_scalar("Greater", coord, axis.hi));
      AMPC_ASSIGN_OR_RETURN(Value * outside, g.binary("Or", below, above));
      if (padding == Padding::kBorder) {
        AMPC_ASSIGN_OR_RETURN(Value * zero, g.scalar(0));
        AMPC_ASSIGN_OR_RETURN(Value * last, g.scalar(d - 1));
        AMPC_ASSIGN_OR_RETURN(Value * clamped, e.op("Clip", {coord, zero, last}));
        AMPC_ASSIGN_OR_RETURN(coord, g.where(outside, clamped, coord));
      } else {
        AMPC_ASSIGN_OR_RETURN(coord, g.reflect_outside(coord, outside, axis));
      }
    }
    // The base tap, floor(x) (x itself for nearest), as an integer in [-3, d + 1]: clipping
    // moves only bases whose taps (offsets -1 to 2) all lie outside X, and keeps them outside;
    // NaN (whose output is NaN through its weights, or a tap that reads 0) becomes -3.
    Value* base = coord;
    Value* fraction = nullptr;
    if (mode != SampleMode::kNearest) {
      AMPC_ASSIGN_OR_RETURN(base, g.unary("Floor", coord));
      AMPC_ASSIGN_OR_RETURN(fraction, g.binary("Sub", coord, base));
    }
    AMPC_ASSIGN_OR_RETURN(Value * low, g.scalar(-3));
    AMPC_ASSIGN_OR_RETURN(Value * high, g.scalar(d + 1));
    AMPC_ASSIGN_OR_RETURN(Value * clipped, e.op("Clip", {base, low, high}));
    AMPC_ASSIGN_OR_RETURN(Value * nan, g.unary("IsNaN", base));
    AMPC_ASSIGN_OR_RETURN(clipped, g.where(nan, low, clipped));
    AMPC_ASSIGN_OR_RETURN(Value * base_index, e.cast(clipped, DType::kI64));

    // The taps' offsets from the base and their weights.
    std::vector<int64_t> offsets;
    std::vector<Value*> weights;
    if (mode == SampleMode::kNearest) {
      offsets = {0};
      weights = {nullptr};
    } else if (mode == SampleMode::kLinear) {
      offsets = {0, 1};
      AMPC_ASSIGN_OR_RETURN(Value * w0, g.scalar_with("Sub", 1, fraction));
      weights = {w0, fraction};
    } else {
      offsets = {-1, 0, 1, 2};
      AMPC_ASSIGN_OR_RETURN(Value * t1, g.with_scalar("Add", fraction, 1));
      AMPC_ASSIGN_OR_RETURN(Value * t2, g.scalar_with("Sub", 1, fraction));
      AMPC_ASSIGN_OR_RETURN(Value * t3, g.scalar_with("Sub", 2, fraction));
      AMPC_ASSIGN_OR_RETURN(Value * w0, g.cubic_far(t1));
      AMPC_ASSIGN_OR_RETURN(Value * w1, g.cubic_near(fraction));
      AMPC_ASSIGN_OR_RETURN(Value * w2, g.cubic_near(t2));
      AMPC_ASSIGN_OR_RETURN(Value * w3, g.cubic_far(t3));
      weights = {w0, w1, w2, w3};
    }
    // Reflection's tap positions, by position + kMargin.
    Value* reflected_table = nullptr;
    if (padding == Padding::kReflection) {
      std::vector<int64_t> table;
      for (int64_t p = -kMargin; p < axis.size + kMargin; ++p) {
        const auto at = static_cast<int64_t>(reflect(static_cast<double>(p), axis.lo, axis.hi));
        table.push_back(std::clamp<int64_t>(at, 0, axis.size - 1));
      }
      AMPC_ASSIGN_OR_RETURN(reflected_table, e.constant(Tensor::from_i64(
                                                 {static_cast<int64_t>(table.size())}, table)));
    }
    AMPC_ASSIGN_OR_RETURN(Value * first, e.constant(Tensor::from_i64({}, {0})));
    AMPC_ASSIGN_OR_RETURN(Value * last, e.constant(Tensor::from_i64({}, {axis.size - 1})));
    for (size_t k = 0; k < offsets.size(); ++k) {
      Tap tap;
      tap.weight = weights[k];
      if (padding == Padding::kReflection) {
        AMPC_ASSIGN_OR_RETURN(Value * slot_offset,
                              e.constant(Tensor::from_i64({}, {offsets[k] + kMargin})));
        AMPC_ASSIGN_OR_RETURN(Value * slot, e.op("Add", {base_index, slot_offset}));
        AMPC_ASSIGN_OR_RETURN(tap.index, e.op("Gather", {reflected_table, slot}));
      } else {
        AMPC_ASSIGN_OR_RETURN(Value * offset, e.constant(Tensor::from_i64({}, {offsets[k]})));
        AMPC_ASSIGN_OR_RETURN(Value * position, e.op("Add", {base_index, offset}));
        AMPC_ASSIGN_OR_RETURN(tap.index, e.op("Clip", {position, first, last}));
        if (padding == Padding::kZeros) {
          AMPC_ASSIGN_OR_RETURN(Value * from_first, e.op("GreaterOrEqual", {position, first}));
          AMPC_ASSIGN_OR_RETURN(Value * to_last, e.op("LessOrEqual", {position, last}));
          AMPC_ASSIGN_OR_RETURN(tap.inside, e.op("And", {from_first, to_last}));
          if (tap.weight != nullptr) {
            AMPC_ASSIGN_OR_RETURN(Value * zero, g.scalar(0));
            AMPC_ASSIGN_OR_RETURN(tap.weight, g.where(tap.inside, tap.weight, zero));
          }
        }
      }
      if (strides[i] != 1) {
        AMPC_ASSIGN_OR_RETURN(Value * step, e.constant(Tensor::from_i64({}, {strides[i]})));
        AMPC_ASSIGN_OR_RETURN(tap.index, e.op("Mul", {tap.index, step}));
      }
      taps[i].push_back(tap);
    }
  }

  // Row n * D1 * .. * Dr of X's rows starts sample n.
  Shape per_sample(rank, 1);
  per_sample[0] = batch;
  std::vector<int64_t> starts(batch);
  for (int64_t n = 0; n < batch; ++n) starts[n] = n * positions;
  AMPC_ASSIGN_OR_RETURN(Value * sample_start, e.constant(Tensor::from_i64(per_sample, starts)));

  // Every combination of one tap per axis: its row index, its weight (the product of the taps'),
  // and for nearest with zeros padding whether it is inside X.
  struct Combination {
    Value* index = nullptr;
    Value* weight = nullptr;
    Value* inside = nullptr;
  };
  // `op` of the factors so far (null: none) and `factor` (null: none).
  auto combine = [&g](std::string_view op, Value* so_far, Value* factor) -> absl::StatusOr<Value*> {
    if (so_far == nullptr || factor == nullptr) return so_far == nullptr ? factor : so_far;
    return g.binary(op, so_far, factor);
  };
  std::vector<Combination> combinations;
  std::vector<size_t> pick(r, 0);
  for (int64_t i = 0; i >= 0;) {
    Combination c{.index = sample_start};
    for (int64_t a = 0; a < r; ++a) {
      const Tap& tap = taps[a][pick[a]];
      AMPC_ASSIGN_OR_RETURN(c.index, e.op("Add", {c.index, tap.index}));
      AMPC_ASSIGN_OR_RETURN(c.weight, combine("Mul", c.weight, tap.weight));
      // Linear and cubic taps outside X already weigh 0.
      if (mode == SampleMode::kNearest) {
        AMPC_ASSIGN_OR_RETURN(c.inside, combine("And", c.inside, tap.inside));
      }
    }
    combinations.push_back(c);
    for (i = r - 1; i >= 0 && ++pick[i] == taps[i].size(); --i) pick[i] = 0;
  }

  // The Gathers of X and the weighted sum follow X (and the weights).
  e.pin_fp32("");
  Value* sum = nullptr;
  for (const Combination& c : combinations) {
    AMPC_ASSIGN_OR_RETURN(Value * index, e.reshape(c.index, index_shape));
    AMPC_ASSIGN_OR_RETURN(Value * term, e.op("Gather", {rows, index}));  // [N, O1 .. Or, C]
    if (c.weight != nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * weight, e.cast(c.weight, x->dtype()));
      AMPC_ASSIGN_OR_RETURN(term, e.op("Mul", {term, weight}));
    } else if (c.inside != nullptr) {
      AMPC_ASSIGN_OR_RETURN(Value * zero, e.scalar(0, x->dtype()));
      AMPC_ASSIGN_OR_RETURN(term, e.op("Where", {c.inside, term, zero}));
    }
    if (sum == nullptr) {
      sum = term;
    } else {
      AMPC_ASSIGN_OR_RETURN(sum, e.op("Add", {sum, term}));
    }
  }
  std::vector<int64_t> to_channels_first = {0, r + 1};
  for (int64_t a = 1; a <= r; ++a) to_channels_first.push_back(a);
  return e.op("Transpose", {sum}, {{"perm", AttrValue(std::move(to_channels_first))}}, e.output(0))
      .status();
}

}  // namespace ampc::onnx_io::lowering
