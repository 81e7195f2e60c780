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
  for (const Value* init : step.initializers()) {
    if (init->name() == kAccumulationStepsName) {
      return absl::UnimplementedError(
          "data-parallel training of a step that accumulates gradients (ampc compile "
          "--accumulate) is not supported yet");
    }
  }
  for (const Value* grad : grads) {
    if (grad->producer() == nullptr) {
      return absl::InvalidArgumentError(
          str_cat("gradient '", grad->name(), "' is not computed by the step's backward"));
    }
  }
  return grads;
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

}  // namespace

absl::StatusOr<int> insert_gradient_all_reduce(Graph& step, const DataParallelOptions& options) {
  if (options.ranks < 2) {
    return absl::InvalidArgumentError(
        str_cat("data-parallel training needs 2 or more ranks, not ", options.ranks));
  }
  AMPC_ASSIGN_OR_RETURN(std::vector<Value*> grads, optimizer_gradients(step));
  AMPC_RETURN_IF_ERROR(scale_seed(step, options.ranks));
  std::unordered_set<const Value*> wanted(grads.begin(), grads.end());

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
    // Right after the last producer: before the node that followed it (null: the end).
    const size_t after = position.at(bucket.last_producer) + 1;
    Node* before = after < order.size() ? order[after] : nullptr;
    Node* sum = step.create_node(kAmpcDomain, "AllReduce",
                                 std::vector<Value*>(bucket.grads.begin(), bucket.grads.end()),
                                 types, {}, before);
    sum->set_name(str_cat("data_parallel/AllReduce.", added));
    for (size_t i = 0; i < bucket.grads.size(); ++i) {
      Value* grad = bucket.grads[i];
      Value* reduced = sum->output(static_cast<int>(i));
      reduced->set_name(step.unique_value_name(str_cat(grad->name(), ".all_ranks")));
      const std::vector<Use> uses = grad->uses();
      for (const Use& use : uses) {
        if (use.user != sum) use.user->set_operand(use.operand, reduced);
      }
    }
    ++added;
  }

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
