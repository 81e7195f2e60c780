// data-parallel; passes/data_parallel.h says what it rewrites.
#include "passes/data_parallel.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

}  // namespace

absl::StatusOr<int> insert_gradient_all_reduce(Graph& step, const DataParallelOptions& options) {
  if (options.ranks < 2) {
    return absl::InvalidArgumentError(
        str_cat("data-parallel training needs 2 or more ranks, not ", options.ranks));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<Value*> grads, optimizer_gradients(step));
  AMPC_RETURN_IF_ERROR(scale_seed(step, options.ranks));
  std::unordered_set<const Value*> wanted;
  // The nodes that turn each summed value into the optimizer's gradient: they move after the sum.
  std::unordered_map<const Value*, std::vector<Node*>> chains;
  std::unordered_set<const Node*> chain_nodes;
  for (Value*& grad : grads) {
    std::vector<Node*> chain;
    grad = computed_from(grad, chain);
    wanted.insert(grad);
    chain_nodes.insert(chain.begin(), chain.end());
    chains[grad] = std::move(chain);
  }
  // With accumulation, the gradient a run reads is its window's running sum so far: the state
  // update that carries it to the next run (`<p>.grad_sum.next`) keeps this rank's sum.
  std::unordered_set<std::string_view> sum_updates;
  for (const Graph::StateUpdate& update : step.state_updates()) {
    if (update.state.ends_with(str_cat(kGradSuffix, kSumSuffix))) {
      sum_updates.insert(update.update);
    }
  }

  // The gradients in the order the backward produces them, cut into buckets; each bucket ends
  // at the node that produces its last gradient.
  struct Bucket {
    std::vector<Value*> grads;
    Node* last_producer = nullptr;
  };
  std::vector<Bucket> buckets(1);
  int64_t bytes = 0;
  std::unordered_set<const Value*> taken;
  const std::vector<Node*> order = step.node_list();
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  for (Node* node : order) {
    for (int i = 0; i < node->num_outputs(); ++i) {
      Value* out = node->has_output(i) ? node->output(i) : nullptr;
      if (out == nullptr || !wanted.contains(out) || !taken.insert(out).second) continue;
      if (bytes >= options.bucket_bytes) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().grads.push_back(out);
      buckets.back().last_producer = node;
      bytes += out->type().num_elements() * 4;
    }
  }

  int added = 0;
  for (const Bucket& bucket : buckets) {
    if (bucket.grads.empty()) continue;
    std::vector<std::optional<TensorType>> types;
    for (const Value* grad : bucket.grads) {
      types.push_back(
          TensorType{grad->dtype() == DType::kF64 ? DType::kF64 : DType::kF32, grad->shape()});
    }
    // Right after the last producer: before the node that followed it, past the chains that
    // move after the sum (null: the end).
    size_t after = position.at(bucket.last_producer) + 1;
    while (after < order.size() && chain_nodes.contains(order[after])) ++after;
    Node* before = after < order.size() ? order[after] : nullptr;
    Node* sum = step.create_node(kAmpcDomain, "AllReduce",
                                 std::vector<Value*>(bucket.grads.begin(), bucket.grads.end()),
                                 types, {}, before);
    sum->set_name(str_cat("data_parallel/AllReduce.", added));
    for (size_t i = 0; i < bucket.grads.size(); ++i) {
      Value* grad = bucket.grads[i];
      Value* reduced = sum->output(static_cast<int>(i));
      reduced->set_name(step.unique_value_name(str_cat(grad->name(), ".all_ranks")));
      if (grad->dtype() != reduced->dtype()) {
        // Back to the gradient's dtype, rounded once: one rank's gradient over the whole batch
        // (a sum in f32 rounded once), out of range where that one is.
        Node* cast = step.create_node(kOnnxDomain, "Cast", {reduced}, {grad->type()},
                                      {{"to", grad->dtype()}}, before);
        cast->set_name(str_cat(sum->name(), "/Cast"));
        cast->mutable_precision() = sum->precision();
        reduced = cast->output(0);
        reduced->set_name(step.unique_value_name(
            str_cat(grad->name(), ".all_ranks.", dtype_name(grad->dtype()))));
      }
      const std::vector<Use> uses = grad->uses();
      for (const Use& use : uses) {
        if (use.user == sum || use.user == reduced->producer() ||
            reads_into_state_update(*use.user, sum_updates)) {
          continue;
        }
        use.user->set_operand(use.operand, reduced);
      }
      for (Node* node : chains.at(grad)) step.move_node(node, before);
    }
    ++added;
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
    ++added;
    break;
  }
  return added;
}

}  // namespace ampc
