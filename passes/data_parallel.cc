// data-parallel; passes/data_parallel.h says what it rewrites.
#include "passes/data_parallel.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

bool is_ampc(const Node& node, std::string_view op) {
  return node.domain() == kAmpcDomain && node.op_type() == op;
}

// The gradients the optimizer reads, or a Status saying why the step has none to average.
absl::StatusOr<std::vector<Value*>> optimizer_gradients(Graph& step) {
  const Node* unscale = nullptr;
  const Node* norm = nullptr;
  for (const auto& node : step.nodes()) {
    if (is_ampc(*node, "UnscaleGradients")) unscale = node.get();
    if (is_ampc(*node, "GlobalNorm") && norm == nullptr) norm = node.get();
  }
  std::vector<Value*> grads;
  if (unscale != nullptr) {
    for (int i = 1; i < unscale->num_operands(); ++i) grads.push_back(unscale->operand(i));
  } else if (norm != nullptr) {
    for (int i = 0; i < norm->num_operands(); ++i) grads.push_back(norm->operand(i));
  } else {
    return absl::InvalidArgumentError(
        "data-parallel training needs a step compiled with an optimizer (ampc compile "
        "--optimizer): this one has no ampc.UnscaleGradients or ampc.GlobalNorm node");
  }
  for (const Value* grad : grads) {
    if (grad->producer() == nullptr) {
      return absl::InvalidArgumentError(
          str_cat("gradient '", grad->name(), "' is not computed by the step's backward"));
    }
  }
  return grads;
}

// Whether `node` produces one of `sum_updates` (an accumulation's Where that carries a
// window's running sum to the next run): it goes on reading this rank's gradient.
bool reads_into_state_update(const Node& node,
                             const std::unordered_set<std::string_view>& sum_updates) {
  for (int i = 0; i < node.num_outputs(); ++i) {
    if (node.has_output(i) && sum_updates.contains(node.output(i)->name())) return true;
  }
  return false;
}

// The value `grad` is a lossless copy of: back through Transpose, Reshape, Squeeze, Unsqueeze,
// Flatten, Identity and Casts from f16 or bf16 to f32, each of a value nothing else reads. The
// backward computes a low-precision weight's gradient in f16 or bf16 and then converts it (and
// transposes it, for a Gemm's weight): the sum over the ranks is taken there.
// `chain` receives the nodes from there to `grad`, in order.
Value* computed_from(Value* grad, std::vector<Node*>& chain) {
  for (;;) {
    const Node* producer = grad->producer();
    if (producer == nullptr || producer->domain() != kOnnxDomain || !producer->has_operand(0)) {
      return grad;
    }
    const std::string& op = producer->op_type();
    Value* source = producer->operand(0);
    const bool moves = op == "Transpose" || op == "Reshape" || op == "Squeeze" ||
                       op == "Unsqueeze" || op == "Flatten" || op == "Identity";
    const bool widens = op == "Cast" && grad->dtype() == DType::kF32 &&
                        (source->dtype() == DType::kF16 || source->dtype() == DType::kBF16);
    if ((!moves && !widens) || source->producer() == nullptr || source->uses().size() != 1 ||
        source->is_graph_output()) {
      return grad;
    }
    chain.insert(chain.begin(), grad->producer());
    grad = source;
  }
}

// Makes the backward's seed 1 / ranks.
absl::Status scale_seed(Graph& step, int ranks) {
  Value* seed = nullptr;
  for (Value* init : step.initializers()) {
    if (init->is_constant() && init->name().ends_with(kGradSeedSuffix) &&
        init->type().num_elements() == 1) {
      if (seed != nullptr) {
        return absl::InvalidArgumentError(str_cat("the training step has two backward seeds, '",
                                                  seed->name(), "' and '", init->name(), "'"));
      }
      seed = init;
    }
  }
  if (seed == nullptr) {
    return absl::InvalidArgumentError(
        str_cat("the training step has no backward seed (an initializer '<loss>", kGradSeedSuffix,
                "' that autodiff adds)"));
  }
  const double one = seed->initializer()->element_as_double(0);
  Value* share =
      step.add_initializer(step.unique_value_name(str_cat(seed->name(), ".share")),
                           Tensor::from_doubles(seed->dtype(), seed->shape(), {one / ranks}));
  share->set_constant(true);
  seed->replace_all_uses_with(share);
  return absl::OkStatus();
}

// The batchnorm-state pass's running variance from the unbiased batch variance multiplies by
// the constant `<running var>.bessel` = n / (n - 1), n the elements per channel: with statistics
// over every rank, n counts all the ranks' elements (each rank's step is the same graph, so
// ranks times this rank's).
void rescale_bessel_correction(Graph& step, const Node& sync, int ranks) {
  const std::string name = str_cat(sync.operand(4)->name(), ".bessel");
  Value* correction = nullptr;
  for (Value* init : step.initializers()) {
    if (init->name() == name && init->is_constant()) correction = init;
  }
  if (correction == nullptr) return;
  const Shape& x = sync.operand(0)->shape();
  const int64_t channels = x.size() >= 2 ? x[1] : 1;
  const int64_t n = sync.operand(0)->type().num_elements() / std::max<int64_t>(channels, 1) * ranks;
  Value* all_ranks = step.add_initializer(
      step.unique_value_name(str_cat(name, ".all_ranks")),
      Tensor::from_doubles(correction->dtype(), correction->shape(),
                           {static_cast<double>(n) / static_cast<double>(n - 1)}));
  all_ranks->set_constant(true);
  correction->replace_all_uses_with(all_ranks);
}

// Training-mode BatchNormalization nodes become ampc.SyncBatchNormalization, and their
// gradients take the statistics and sums over every rank.
void sync_batch_norm(Graph& step, int ranks) {
  for (Node* node : step.node_list()) {
    if (is_ampc(*node, "BatchNormalizationGrad") && node->int_attr("training_mode") != 0) {
      node->mutable_attrs()["all_ranks"] = int64_t{1};
      continue;
    }
    if (node->domain() != kOnnxDomain || node->op_type() != "BatchNormalization" ||
        node->find_attr("training_mode") == nullptr || node->int_attr("training_mode") == 0) {
      continue;
    }
    std::vector<std::optional<TensorType>> types;
    for (int i = 0; i < node->num_outputs(); ++i) {
      types.push_back(node->has_output(i) ? std::optional(node->output(i)->type()) : std::nullopt);
    }
    Attributes attrs = node->attrs();
    attrs.erase("training_mode");
    Node* sync = step.create_node(kAmpcDomain, "SyncBatchNormalization", node->operands(), types,
                                  std::move(attrs), node);
    sync->set_name(node->name());
    sync->mutable_precision() = node->precision();
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) continue;
      Value* old = node->output(i);
      const std::string name = old->name();
      old->replace_all_uses_with(sync->output(i));
      old->set_name(step.unique_value_name(str_cat(name, ".rank")));
      sync->output(i)->set_name(name);
    }
    step.erase_node(node);
    rescale_bessel_correction(step, *sync, ranks);
  }
}

// The elements of one rank's block of a tensor of `elements` (ops/collective.cc's cut).
int64_t block_elements(int64_t elements, int64_t ranks) { return (elements + ranks - 1) / ranks; }

// Gradients in the order the backward produces them, cut into buckets of about
// `bucket_bytes` (as f32); each bucket's collective goes right after the node that produces its
// last gradient, before `before` (null: the end), past the `moved` nodes that will follow it.
struct Bucket {
  std::vector<Value*> grads;
  Node* before = nullptr;
};

std::vector<Bucket> make_buckets(const Graph& step, const std::vector<Value*>& grads,
                                 int64_t bucket_bytes,
                                 const std::unordered_set<const Node*>& moved) {
  const std::unordered_set<const Value*> wanted(grads.begin(), grads.end());
  std::vector<Bucket> buckets(1);
  std::vector<const Node*> last_producers(1, nullptr);
  int64_t bytes = 0;
  std::unordered_set<const Value*> taken;
  const std::vector<Node*> order = step.node_list();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  for (Node* node : order) {
    for (int i = 0; i < node->num_outputs(); ++i) {
      Value* out = node->has_output(i) ? node->output(i) : nullptr;
      if (out == nullptr || !wanted.contains(out) || !taken.insert(out).second) continue;
      if (bytes >= bucket_bytes) {
        buckets.emplace_back();
        last_producers.push_back(nullptr);
        bytes = 0;
      }
      buckets.back().grads.push_back(out);
      last_producers.back() = node;
      bytes += out->type().num_elements() * 4;
    }
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (last_producers[b] == nullptr) continue;
    size_t after = position.at(last_producers[b]) + 1;
    while (after < order.size() && moved.contains(order[after])) ++after;
    buckets[b].before = after < order.size() ? order[after] : nullptr;
  }
  std::erase_if(buckets, [](const Bucket& bucket) { return bucket.grads.empty(); });
  return buckets;
}

// `reduced` (f32 or f64) back in `grad`'s dtype when that is f16 or bf16: rounded once, one
// rank's gradient over the whole batch (a sum in f32 rounded once), out of range where that one
// is. Placed before `before`.
Value* in_gradient_dtype(Graph& step, Value* reduced, const Value* grad, const Node& collective,
                         Node* before) {
  if (grad->dtype() == reduced->dtype()) return reduced;
  Node* cast = step.create_node(kOnnxDomain, "Cast", {reduced},
                                {TensorType{grad->dtype(), reduced->shape()}},
                                {{"to", grad->dtype()}}, before);
  cast->set_name(str_cat(collective.name(), "/Cast"));
  cast->mutable_precision() = collective.precision();
  cast->output(0)->set_name(
      step.unique_value_name(str_cat(reduced->name(), ".", dtype_name(grad->dtype()))));
  return cast->output(0);
}

// With accumulation (running sums carried to the next run), the collectives whose results only
// the window's last run reads sum on that run only: `window` (ops/collective.cc).
Attributes window_attrs(const std::unordered_set<std::string_view>& sum_updates,
                        Attributes attrs = {}) {
  if (!sum_updates.empty()) attrs["window"] = int64_t{1};
  return attrs;
}

// Every reader of `grad` but `except` and the accumulation's running sums reads `summed`.
void read_summed(Value* grad, Value* summed, const Node* except,
                 const std::unordered_set<std::string_view>& sum_updates) {
  const std::vector<Use> uses = grad->uses();
  for (const Use& use : uses) {
    if (use.user == except || reads_into_state_update(*use.user, sum_updates)) continue;
    use.user->set_operand(use.operand, summed);
  }
}

// The plain data-parallel step: every gradient summed over the ranks (ampc.AllReduce per
// bucket). Returns the collectives added.
int all_reduce_gradients(Graph& step, std::vector<Value*> grads, const DataParallelOptions& options,
                         const std::unordered_set<std::string_view>& sum_updates) {
  // The nodes that turn each summed value into the optimizer's gradient: they move after the sum.
  std::unordered_map<const Value*, std::vector<Node*>> chains;
  std::unordered_set<const Node*> chain_nodes;
  const std::vector<Value*> optimizer_grads = grads;
  for (Value*& grad : grads) {
    std::vector<Node*> chain;
    grad = computed_from(grad, chain);
    chain_nodes.insert(chain.begin(), chain.end());
    chains[grad] = std::move(chain);
  }
  // The first node that reads a summed gradient (the optimizer's first): the casts back and the
  // moved chains go right before it, not right after their sum, so that on a GPU a bucket's
  // all-reduce overlaps the rest of the backward instead of being waited for by its next node.
  const std::vector<Node*> order = step.node_list();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  size_t first_reader = order.size();
  for (const std::vector<Value*>* values : {&std::as_const(grads), &optimizer_grads}) {
    for (const Value* value : *values) {
      for (const Use& use : value->uses()) {
        if (chain_nodes.contains(use.user) || reads_into_state_update(*use.user, sum_updates)) {
          continue;
        }
        first_reader = std::min(first_reader, position.at(use.user));
      }
    }
  }
  auto at_or_end = [&](const Node* node) {
    return node == nullptr ? order.size() : position.at(node);
  };
  int added = 0;
  for (const Bucket& bucket : make_buckets(step, grads, options.bucket_bytes, chain_nodes)) {
    // A reader before this bucket's sum could not wait for it: then right after the sum.
    Node* readers_at = first_reader < order.size() && at_or_end(bucket.before) <= first_reader
                           ? order[first_reader]
                           : bucket.before;
    std::vector<std::optional<TensorType>> types;
    for (const Value* grad : bucket.grads) {
      types.push_back(
          TensorType{grad->dtype() == DType::kF64 ? DType::kF64 : DType::kF32, grad->shape()});
    }
    Node* sum = step.create_node(kAmpcDomain, "AllReduce", bucket.grads, types,
                                 window_attrs(sum_updates), bucket.before);
    sum->set_name(str_cat("data_parallel/AllReduce.", added));
    for (size_t i = 0; i < bucket.grads.size(); ++i) {
      Value* grad = bucket.grads[i];
      Value* reduced = sum->output(static_cast<int>(i));
      reduced->set_name(step.unique_value_name(str_cat(grad->name(), ".all_ranks")));
      read_summed(grad, in_gradient_dtype(step, reduced, grad, *sum, readers_at), sum, sum_updates);
      for (Node* node : chains.at(grad)) step.move_node(node, readers_at);
    }
    ++added;
  }
  return added;
}

// `value`'s readers (but `except`) and graph outputs read `replacement`, which takes its name.
void replace_value(Graph& step, Value* value, Value* replacement, const Node* except) {
  const std::vector<Use> uses = value->uses();
  for (const Use& use : uses) {
    if (use.user != except) use.user->set_operand(use.operand, replacement);
  }
  const std::string name = value->name();
  for (int i = 0; i < static_cast<int>(step.outputs().size()); ++i) {
    if (step.outputs()[i] == value) step.set_output(i, replacement);
  }
  value->set_name(step.unique_value_name(str_cat(name, ".rank")));
  replacement->set_name(name);
}

// The node after `node` in `step`'s order (null: the end).
Node* next_node(const Graph& step, const Node* node) {
  bool found = false;
  for (const auto& n : step.nodes()) {
    if (found) return n.get();
    if (n.get() == node) found = true;
  }
  return nullptr;
}

// A node of one output of `type`, right after `after`.
Node* add_after(Graph& step, Node* after, std::string_view domain, std::string_view op,
                const std::vector<Value*>& operands, const TensorType& type,
                Attributes attrs = {}) {
  Node* node =
      step.create_node(domain, op, operands, {type}, std::move(attrs), next_node(step, after));
  node->set_name(str_cat("data_parallel/", op));
  return node;
}

// ZeRO stage 1: see data_parallel.h. Adds the sharded state and the copies to `rewrite`.
absl::Status shard_optimizer(Graph& step, const std::vector<Value*>& grads,
                             const DataParallelOptions& options,
                             const std::unordered_set<std::string_view>& sum_updates,
                             DataParallelRewrite& rewrite) {
  int& collectives = rewrite.collectives;
  const int64_t ranks = options.ranks;
  std::vector<Node*> updates;
  for (Node* node : step.node_list()) {
    if (is_ampc(*node, "SGD") || is_ampc(*node, "Adam")) updates.push_back(node);
  }
  for (Node* update : updates) {
    const Value* parameter = update->operand(0);
    if (parameter->kind() != Value::Kind::kInitializer || parameter->dtype() != DType::kF32) {
      return absl::UnimplementedError(str_cat(
          "sharding the optimizer (ZeRO-1) needs f32 parameters (master weights) updated in "
          "place; ",
          update->describe(), " updates '", parameter->name(), "' (",
          type_to_string(parameter->type()),
          "), a parameter stored in low precision (compile without O3's low-precision weights)"));
    }
  }

  // The gradients: each rank gets its block of their sum.
  for (const Bucket& bucket : make_buckets(step, grads, options.bucket_bytes, {})) {
    std::vector<std::optional<TensorType>> types;
    for (const Value* grad : bucket.grads) {
      types.push_back(TensorType{grad->dtype() == DType::kF64 ? DType::kF64 : DType::kF32,
                                 {block_elements(grad->type().num_elements(), ranks)}});
    }
    Node* scatter = step.create_node(kAmpcDomain, "ReduceScatter", bucket.grads, types,
                                     window_attrs(sum_updates, {{"ranks", ranks}}), bucket.before);
    scatter->set_name(str_cat("data_parallel/ReduceScatter.", collectives++));
    for (size_t i = 0; i < bucket.grads.size(); ++i) {
      Value* grad = bucket.grads[i];
      Value* block = scatter->output(static_cast<int>(i));
      block->set_name(step.unique_value_name(str_cat(grad->name(), ".rank_block")));
      Value* reduced = in_gradient_dtype(step, block, grad, *scatter, bucket.before);
      // A gradient the backward computed in f16 or bf16 and widened (and moved) losslessly is
      // summed there by the unsharded step and rounded back once: so is its block here.
      std::vector<Node*> chain;
      const Value* origin = computed_from(grad, chain);
      if (reduced->dtype() == DType::kF32 &&
          (origin->dtype() == DType::kF16 || origin->dtype() == DType::kBF16)) {
        Value* rounded = in_gradient_dtype(step, reduced, origin, *scatter, bucket.before);
        Node* widen = step.create_node(kOnnxDomain, "Cast", {rounded},
                                       {TensorType{DType::kF32, rounded->shape()}},
                                       {{"to", DType::kF32}}, bucket.before);
        widen->set_name(str_cat(scatter->name(), "/Cast"));
        widen->mutable_precision() = scatter->precision();
        widen->output(0)->set_name(step.unique_value_name(str_cat(block->name(), ".rounded")));
        reduced = widen->output(0);
      }
      read_summed(grad, reduced, scatter, sum_updates);
    }
  }

  // Whether any block overflowed, and the global norm, over every rank's blocks.
  const TensorType scalar{DType::kF32, {}};
  for (Node* node : step.node_list()) {
    if (is_ampc(*node, "UnscaleGradients")) {
      Value* found_inf = node->output(0);
      Node* as_float =
          add_after(step, node, kOnnxDomain, "Cast", {found_inf}, scalar, {{"to", DType::kF32}});
      Node* sum = add_after(step, as_float, kAmpcDomain, "AllReduce", {as_float->output(0)}, scalar,
                            window_attrs(sum_updates));
      Value* zero = step.add_initializer(step.unique_value_name("data_parallel.zero"),
                                         Tensor::from_f32({}, {0.0f}));
      zero->set_constant(true);
      Node* any = add_after(step, sum, kOnnxDomain, "Greater", {sum->output(0), zero},
                            TensorType{DType::kBool, {}});
      replace_value(step, found_inf, any->output(0), as_float);
      ++collectives;
    }
    if (is_ampc(*node, "GlobalNorm")) {
      Value* norm = node->output(0);
      Node* square = add_after(step, node, kOnnxDomain, "Mul", {norm, norm}, scalar);
      Node* sum = add_after(step, square, kAmpcDomain, "AllReduce", {square->output(0)}, scalar,
                            window_attrs(sum_updates));
      Node* root = add_after(step, sum, kOnnxDomain, "Sqrt", {sum->output(0)}, scalar);
      replace_value(step, norm, root->output(0), square);
      ++collectives;
    }
  }

  // Each rank updates its block of every parameter and keeps its block of the moments; the
  // updated blocks are gathered into every rank's parameters, or into their low-precision
  // copies where the forward reads those (then a rank keeps only its block of the f32 master
  // weights).
  std::unordered_map<std::string_view, const Value*> in_eval;
  if (options.eval != nullptr) {
    for (const Value* init : options.eval->initializers()) in_eval[init->name()] = init;
  }
  // The parameters read through copies first (their Casts go), then the blocks.
  std::vector<std::optional<LowPrecisionCopy>> copies(updates.size());
  std::vector<Value*> copy_values(updates.size(), nullptr);
  for (size_t u = 0; u < updates.size(); ++u) {
    Value* parameter = updates[u]->operand(0);
    const auto eval_parameter = in_eval.find(parameter->name());
    copies[u] =
        low_precision_copy(*parameter, *updates[u], options.eval,
                           eval_parameter == in_eval.end() ? nullptr : eval_parameter->second);
    if (copies[u].has_value()) {
      copy_values[u] = read_through_copy(step, *parameter, *copies[u], *parameter->initializer());
    }
  }
  std::vector<Value*> blocks;
  std::vector<Value*> kept;  // per block: the state its gathered value replaces
  std::vector<int64_t> shapes;
  std::vector<std::optional<TensorType>> types;
  std::vector<const LowPrecisionCopy*> copy_of;  // per block: the copy it is gathered into
  Node* gather_at = updates.empty() ? nullptr : next_node(step, updates.back());
  rewrite.copies.reserve(updates.size());
  for (size_t u = 0; u < updates.size(); ++u) {
    Node* update = updates[u];
    Value* parameter = update->operand(0);
    const TensorType whole = parameter->type();
    const int64_t shard = block_elements(whole.num_elements(), ranks);
    const TensorType block_type{DType::kF32, {shard}};
    for (int i = 2; i < update->num_operands(); ++i) {
      Value* moment = update->operand(i);
      if (moment == nullptr || moment->kind() != Value::Kind::kInitializer ||
          moment->is_constant() || moment->type() != whole) {
        continue;
      }
      rewrite.sharded_state.push_back({moment->name(), moment->shape()});
      step.set_initializer_data(moment, Tensor(block_type));
    }
    std::optional<LowPrecisionCopy>& copy = copies[u];
    Value* block = update->output(0);  // the updated block (a graph output until gathered)
    if (copy.has_value()) {
      // The update reads and writes the block of the master weights itself.
      rewrite.sharded_state.push_back(
          {parameter->name(), parameter->shape(), *parameter->initializer()});
      step.set_initializer_data(parameter, Tensor(block_type));
      Node* cast =
          step.create_node(kOnnxDomain, "Cast", {block}, {TensorType{copy->dtype, {shard}}},
                           {{"to", copy->dtype}}, gather_at);
      cast->set_name(str_cat("data_parallel/Cast.", parameter->name()));
      cast->output(0)->set_name(step.unique_value_name(str_cat(copy->copy, ".rank_block")));
      block = cast->output(0);
      types.push_back(TensorType{copy->dtype, whole.shape});
      kept.push_back(copy_values[u]);
      rewrite.copies.push_back(*std::move(copy));
      copy_of.push_back(&rewrite.copies.back());
    } else {
      Node* cut = step.create_node(kAmpcDomain, "Shard", {parameter}, {block_type},
                                   {{"ranks", ranks}}, update);
      cut->set_name(str_cat("data_parallel/Shard.", parameter->name()));
      cut->output(0)->set_name(step.unique_value_name(str_cat(parameter->name(), ".rank_block")));
      update->set_operand(0, cut->output(0));
      types.push_back(whole);
      kept.push_back(parameter);
      copy_of.push_back(nullptr);
    }
    blocks.push_back(block);
    shapes.push_back(static_cast<int64_t>(whole.shape.size()));
    shapes.insert(shapes.end(), whole.shape.begin(), whole.shape.end());
  }
  if (!updates.empty()) {
    // The gather reads the state it replaces too: its outputs may be stored over that state,
    // and inside an accumulation window (no update) they are that state.
    std::vector<Value*> operands = blocks;
    operands.insert(operands.end(), kept.begin(), kept.end());
    Node* gather = step.create_node(
        kAmpcDomain, "AllGather", operands, types,
        window_attrs(sum_updates, {{"ranks", ranks}, {"shape", shapes}}), gather_at);
    gather->set_name("data_parallel/AllGather");
    for (size_t i = 0; i < blocks.size(); ++i) {
      Value* gathered = gather->output(static_cast<int>(i));
      if (copy_of[i] == nullptr) {
        replace_value(step, blocks[i], gathered, gather);
        continue;
      }
      // The copy's next value: new state of the step.
      const std::string next = step.unique_value_name(str_cat(copy_of[i]->copy, ".next"));
      gathered->set_name(next);
      step.add_output(gathered);
      step.add_state_update(copy_of[i]->copy, next);
    }
    ++collectives;
  }
  return infer_graph_types(step).status();
}

}  // namespace

absl::StatusOr<DataParallelRewrite> insert_gradient_all_reduce(Graph& step,
                                                               const DataParallelOptions& options) {
  if (options.ranks < 1) {
    return absl::InvalidArgumentError(
        str_cat("data-parallel training needs 1 or more ranks, not ", options.ranks));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<Value*> grads, optimizer_gradients(step));
  AMPC_RETURN_IF_ERROR(scale_seed(step, options.ranks));
  // With accumulation, the gradient a run reads is its window's running sum so far: the state
  // update that carries it to the next run (`<p>.grad_sum.next`) keeps this rank's sum.
  std::unordered_set<std::string_view> sum_updates;
  for (const Graph::StateUpdate& update : step.state_updates()) {
    if (update.state.ends_with(str_cat(kGradSuffix, kSumSuffix))) {
      sum_updates.insert(update.update);
    }
  }
  DataParallelRewrite rewrite;
  if (options.shard_optimizer) {
    AMPC_RETURN_IF_ERROR(shard_optimizer(step, grads, options, sum_updates, rewrite));
  } else {
    rewrite.collectives = all_reduce_gradients(step, grads, options, sum_updates);
  }

  if (options.sync_batch_norm) sync_batch_norm(step, options.ranks);

  // The loss the log reports: its mean over the ranks.
  for (int i = 0; i < static_cast<int>(step.outputs().size()); ++i) {
    Value* loss = step.outputs()[i];
    if (loss->name() != options.loss || loss->producer() == nullptr) continue;
    Node* mean = step.create_node(
        kAmpcDomain, "AllReduce", {loss},
        {TensorType{loss->dtype() == DType::kF64 ? DType::kF64 : DType::kF32, loss->shape()}},
        {{"mean", int64_t{1}}});
    mean->set_name("data_parallel/loss");
    const std::string name = loss->name();
    loss->set_name(step.unique_value_name(str_cat(name, ".local")));
    mean->output(0)->set_name(name);
    step.set_output(i, mean->output(0));
    ++rewrite.collectives;
    break;
  }
  return rewrite;
}

}  // namespace ampc
