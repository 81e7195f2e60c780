// The collective ops data-parallel training inserts into a training step (passes/data_parallel).
//
// AllReduce<mean>(g1, ..., gn) -> (r1, ..., rn): each ri is the element-wise sum over the ranks
//   of the data-parallel group of gi (mean = 1: that sum times 1 / size, rounded once), in f32
//   (f64 when the operands are f64): every rank's gi converted to f32 exactly, summed over the
//   ranks in f32 in the communicator's fixed order (every rank gets the same bits). One node is
//   one bucket: one collective for all of its operands. In a group of one (no communicator) ri
//   is gi converted to f32.
//   Its gradient is the same reduction of the outputs' gradients (every rank's loss reads every
//   rank's gi through the sum), each converted back to gi's dtype. The data-parallel rewrite
//   inserts it after autodiff, so training never differentiates it; the rule is the math.
//
// The sharded optimizer (ZeRO stage 1, passes/data_parallel.h) cuts every tensor it shards the same
// way: flattened, zero-padded to ranks * shard elements, shard = ceil(elements / ranks), and rank
// r's block is elements r * shard .. (r + 1) * shard - 1. `ranks` is an attribute, so the graph
// is the same on every rank; which block a rank takes is its place in the group at run time.
//
// ReduceScatter<ranks>(g1, ..., gn) -> (s1, ..., sn): si is this rank's block of the element-wise
//   sum over the ranks of gi cut as above, in f32 (f64 for f64 operands), every rank's gi
//   converted to f32 exactly and summed in the communicator's fixed order. One collective.
// Shard<ranks>(x) -> this rank's block of x cut as above, in x's dtype (a copy).
// AllGather<shape>(s1, ..., sn[, k1, ..., kn]) -> (x1, ..., xn): xi is the first prod(shape_i)
//   elements of every rank's si in rank order, shaped shape_i (the shapes concatenated in
//   `shape`, each prefixed by its rank: [rank_1, dims_1..., rank_2, dims_2...]), in si's dtype.
//   One collective; it moves bytes, so the result is each rank's values exactly. The optional
//   kept values ki, of xi's type, are what xi was before (the state the gather updates: a
//   parameter, or its low-precision copy): a kernel may write xi over ki, and with `window` they
//   are the outputs on a run inside the window (below).
// In a group of one (no communicator) they are a flatten (and conversion), a flatten and a
// reshape.
// window = 1 on AllReduce and ReduceScatter (the data-parallel rewrite sets it on the sums of an
//   accumulation window's running gradient sums, and on what only the window's last run reads):
//   on a run inside the window, not its last (KernelContext::inside_window), nothing is
//   communicated and each output is what a group of one gives, this rank's own values: gi in
//   f32 (AllReduce, `mean` or not), this rank's block of gi in f32 (ReduceScatter). On AllGather
//   (which then has its kept values) each xi is ki: the parameters change on the window's last
//   run only, so the gather would give them back unchanged. On the window's last run, and on
//   every run of a step that does not accumulate, they are as above. A
//   group whose size is not `ranks` is an error when the node runs. Their gradients are
// their adjoints (ReduceScatter's and Shard's an AllGather, AllGather's a ReduceScatter); the
// data-parallel rewrite inserts them after autodiff, so training never differentiates them.
#include "compiler/grad_builder.h"
#include "ops/op_util.h"

namespace ampc::ops {
namespace {

// The elements of each rank's block of a tensor of `elements` cut for `ranks`.
int64_t shard_elements(int64_t elements, int64_t ranks) { return (elements + ranks - 1) / ranks; }

absl::StatusOr<int64_t> ranks_attr(const InferenceContext& ctx) {
  const int64_t ranks = ctx.int_attr("ranks");
  if (ranks < 1) return absl::InvalidArgumentError(str_cat("ranks must be >= 1, not ", ranks));
  return ranks;
}

// AllReduce's and ReduceScatter's operands: one output each, all f64 or none. Returns the
// dtype they are reduced in (f64 or f32).
absl::StatusOr<DType> reduced_dtype(const InferenceContext& ctx) {
  if (ctx.num_inputs() == 0 || ctx.num_outputs() != ctx.num_inputs()) {
    return absl::InvalidArgumentError(str_cat("one output per operand: ", ctx.num_inputs(),
                                              " operands, ", ctx.num_outputs(), " outputs"));
  }
  const bool f64 = ctx.input_type(0).dtype == DType::kF64;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const DType dtype = ctx.input_type(i).dtype;
    if ((dtype == DType::kF64) != f64) {
      return absl::InvalidArgumentError(
          str_cat("operand ", i, " is ", dtype_name(dtype), " and operand 0 ",
                  dtype_name(ctx.input_type(0).dtype), ": f64 is reduced only with f64"));
    }
  }
  return f64 ? DType::kF64 : DType::kF32;
}

absl::Status infer_reduce_scatter(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(int64_t ranks, ranks_attr(ctx));
  AMPC_ASSIGN_OR_RETURN(DType dtype, reduced_dtype(ctx));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    ctx.set_output(i, TensorType{dtype, {shard_elements(ctx.input_type(i).num_elements(), ranks)}});
  }
  return absl::OkStatus();
}

absl::Status infer_shard(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(int64_t ranks, ranks_attr(ctx));
  const TensorType& in = ctx.input_type(0);
  ctx.set_output(0, TensorType{in.dtype, {shard_elements(in.num_elements(), ranks)}});
  return absl::OkStatus();
}

// AllGather's `shape`, unpacked into one shape per operand.
absl::StatusOr<std::vector<Shape>> all_gather_shapes(const std::vector<int64_t>& packed,
                                                     int count) {
  std::vector<Shape> shapes;
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    if (at >= packed.size() || packed[at] < 0 ||
        packed[at] > static_cast<int64_t>(packed.size() - at - 1)) {
      return absl::InvalidArgumentError(
          str_cat("shape must hold one [rank, dims...] per operand: ", count, " operands"));
    }
    shapes.emplace_back(packed.begin() + static_cast<int64_t>(at) + 1,
                        packed.begin() + static_cast<int64_t>(at) + 1 + packed[at]);
    at += 1 + static_cast<size_t>(packed[at]);
  }
  if (at != packed.size()) {
    return absl::InvalidArgumentError(
        str_cat("shape holds more than one [rank, dims...] per operand: ", count, " operands"));
  }
  return shapes;
}

absl::Status infer_all_gather(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(int64_t ranks, ranks_attr(ctx));
  const int blocks = ctx.num_outputs();
  const bool kept = ctx.num_inputs() == 2 * blocks;
  if (blocks == 0 || (ctx.num_inputs() != blocks && !kept)) {
    return absl::InvalidArgumentError(
        str_cat("one output per block (and at most one kept value per output): ", ctx.num_inputs(),
                " operands, ", blocks, " outputs"));
  }
  if (ctx.int_attr("window") != 0 && !kept) {
    return absl::InvalidArgumentError(
        "window = 1 needs the kept values (what each output keeps inside the window)");
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<Shape> shapes,
                        all_gather_shapes(ctx.ints_attr("shape"), blocks));
  for (int i = 0; i < blocks; ++i) {
    const TensorType& in = ctx.input_type(i);
    const int64_t elements = num_elements(shapes[i]);
    if (in.shape.size() != 1 || in.shape[0] != shard_elements(elements, ranks)) {
      return absl::InvalidArgumentError(
          str_cat("operand ", i, " ", shape_to_string(in.shape), " is not one rank's block of ",
                  shape_to_string(shapes[i]), " over ", ranks, " ranks ([",
                  shard_elements(elements, ranks), "])"));
    }
    const TensorType gathered{in.dtype, shapes[i]};
    if (kept && ctx.input_type(blocks + i) != gathered) {
      return absl::InvalidArgumentError(str_cat("kept value ", i, " (operand ", blocks + i, ") is ",
                                                type_to_string(ctx.input_type(blocks + i)),
                                                ", not the gathered ", type_to_string(gathered)));
    }
    ctx.set_output(i, gathered);
  }
  return absl::OkStatus();
}

absl::Status infer_all_reduce(InferenceContext& ctx) {
  AMPC_ASSIGN_OR_RETURN(DType dtype, reduced_dtype(ctx));
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    ctx.set_output(i, TensorType{dtype, ctx.input_type(i).shape});
  }
  return absl::OkStatus();
}

// `grad` (f32 or f64) as `dtype`.
Value* in_dtype(GradBuilder& b, Value* grad, DType dtype) {
  return grad->dtype() == dtype ? grad : b.op("Cast", {grad}, {{"to", dtype}});
}

absl::StatusOr<Grads> all_reduce_grad(GradBuilder& b) {
  Grads grads(b.node().num_operands(), nullptr);
  const Attributes attrs = b.node().attrs();
  for (int i = 0; i < b.node().num_operands(); ++i) {
    if (!b.needs_grad(i)) continue;
    Value* grad = b.ampc_op("AllReduce", {b.grad_of_output_or_zeros(i)}, attrs);
    grads[i] = in_dtype(b, grad, b.input(i)->dtype());
  }
  return grads;
}

OpDef all_reduce() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "AllReduce";
  def.summary =
      "the sum (mean=1: the mean) of every operand over the ranks of a data-parallel group, in "
      "f32, in one collective";
  def.inputs = {variadic_input("operands", {DType::kF16, DType::kBF16, DType::kF32, DType::kF64})};
  def.outputs = {variadic_input("reduced")};
  def.attrs = {flag_attr("mean", 0), flag_attr("window", 0)};
  def.infer = infer_all_reduce;
  def.gradient = all_reduce_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"one f32 gradient", {TensorType{DType::kF32, {3}}}, {}, {}, {TensorType{DType::kF32, {3}}}},
      {"f16 and bf16 gradients in, f32 out",
       {TensorType{DType::kF16, {2, 2}}, TensorType{DType::kBF16, {5}}},
       {},
       {},
       {TensorType{DType::kF32, {2, 2}}, TensorType{DType::kF32, {5}}}},
      {"the mean of a loss",
       {TensorType{DType::kF32, {}}},
       {},
       {{"mean", int64_t{1}}},
       {TensorType{DType::kF32, {}}}},
  };
  return def;
}

// AllGather's `shape` attribute for one operand shaped `shape`.
std::vector<int64_t> packed_shape(const Shape& shape) {
  std::vector<int64_t> packed = {static_cast<int64_t>(shape.size())};
  packed.insert(packed.end(), shape.begin(), shape.end());
  return packed;
}

// The collectives' gradients are their adjoints, with parameters replicated on every rank and
// the loss the sum of the ranks': ReduceScatter's and Shard's are the AllGather of the blocks'
// gradients (each rank's block comes back to its place), AllGather's the ReduceScatter of the
// gathered tensor's gradient.
absl::StatusOr<Grads> gather_grad(GradBuilder& b) {
  Grads grads(b.node().num_operands(), nullptr);
  const int64_t ranks = b.node().int_attr("ranks");
  for (int i = 0; i < b.node().num_operands(); ++i) {
    if (!b.needs_grad(i)) continue;
    Value* gathered = b.ampc_op("AllGather", {b.grad_of_output_or_zeros(i)},
                                {{"ranks", ranks}, {"shape", packed_shape(b.input(i)->shape())}});
    grads[i] = in_dtype(b, gathered, b.input(i)->dtype());
  }
  return grads;
}

// The kept values get zeros: the outputs are the gathered blocks (inside an accumulation
// window, where they are the kept values, nothing differentiates).
absl::StatusOr<Grads> scatter_grad(GradBuilder& b) {
  Grads grads(b.node().num_operands(), nullptr);
  const int64_t ranks = b.node().int_attr("ranks");
  for (int i = b.node().num_outputs(); i < b.node().num_operands(); ++i) {
    if (b.needs_grad(i)) grads[i] = b.constant(Tensor(b.input(i)->type()));
  }
  for (int i = 0; i < b.node().num_outputs(); ++i) {
    if (!b.needs_grad(i)) continue;
    Value* block = b.ampc_op("ReduceScatter", {b.grad_of_output_or_zeros(i)}, {{"ranks", ranks}});
    grads[i] = in_dtype(b, block, b.input(i)->dtype());
  }
  return grads;
}

OpDef reduce_scatter() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "ReduceScatter";
  def.summary =
      "this rank's block of the sum over the ranks of every operand, flattened and cut into "
      "`ranks` blocks, in f32, in one collective";
  def.inputs = {variadic_input("operands", {DType::kF16, DType::kBF16, DType::kF32, DType::kF64})};
  def.outputs = {variadic_input("blocks")};
  def.attrs = {attr("ranks", int64_t{1}), flag_attr("window", 0)};
  def.infer = infer_reduce_scatter;
  def.gradient = gather_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"one f32 gradient in a group of one",
       {TensorType{DType::kF32, {2, 3}}},
       {},
       {},
       {TensorType{DType::kF32, {6}}}},
      {"f16 and f32 gradients",
       {TensorType{DType::kF16, {5}}, TensorType{DType::kF32, {2, 2}}},
       {},
       {},
       {TensorType{DType::kF32, {5}}, TensorType{DType::kF32, {4}}}},
  };
  return def;
}

OpDef shard() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "Shard";
  def.summary = "this rank's block of the operand, flattened and cut into `ranks` blocks";
  def.inputs = {input("x", kFloatTypes)};
  def.outputs = {input("block")};
  def.attrs = {attr("ranks", int64_t{1})};
  def.infer = infer_shard;
  def.gradient = gather_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"a weight in a group of one",
       {TensorType{DType::kF32, {3, 2}}},
       {},
       {},
       {TensorType{DType::kF32, {6}}}},
      {"an f16 vector", {TensorType{DType::kF16, {5}}}, {}, {}, {TensorType{DType::kF16, {5}}}},
  };
  return def;
}

OpDef all_gather() {
  OpDef def;
  def.domain = std::string(kAmpcDomain);
  def.name = "AllGather";
  def.summary = "every rank's block of each operand, concatenated in rank order and reshaped";
  def.inputs = {variadic_input("blocks_and_kept", kFloatTypes)};
  def.outputs = {variadic_input("gathered")};
  def.attrs = {attr("ranks", int64_t{1}), required_attr("shape", AttrKind::kInts),
               flag_attr("window", 0)};
  def.infer = infer_all_gather;
  def.gradient = scatter_grad;
  def.autocast.category = AutocastCategory::kDeny;
  def.samples = {
      {"two weights in a group of one",
       {TensorType{DType::kF32, {6}}, TensorType{DType::kF32, {4}}},
       {},
       {{"shape", std::vector<int64_t>{2, 3, 2, 1, 4}}},
       {TensorType{DType::kF32, {3, 2}}, TensorType{DType::kF32, {4}}}},
      {"an f16 matrix",
       {TensorType{DType::kF16, {4}}},
       {},
       {{"shape", std::vector<int64_t>{2, 2, 2}}},
       {TensorType{DType::kF16, {2, 2}}}},
      {"an f16 copy kept inside an accumulation window",
       {TensorType{DType::kF16, {4}}, TensorType{DType::kF16, {2, 2}}},
       {},
       {{"shape", std::vector<int64_t>{2, 2, 2}}, {"window", int64_t{1}}},
       {TensorType{DType::kF16, {2, 2}}}},
  };
  return def;
}

void register_collective_ops(OpRegistry& registry) {
  registry.add(all_reduce());
  registry.add(reduce_scatter());
  registry.add(shard());
  registry.add(all_gather());
}

const OpRegistration kCollectiveOps(&register_collective_ops);

}  // namespace
}  // namespace ampc::ops
