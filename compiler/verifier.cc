#include "compiler/verifier.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"

namespace ampc {
namespace {

std::string value_label(const Value* value) { return str_cat("value '", value->name(), "'"); }

// What is defined so far in a walk of the graph in order: its inputs and initializers, and the
// outputs of the nodes walked (kept as the nodes: one entry per node, not per value).
struct Defined {
  absl::flat_hash_set<const Value*> graph_values;
  absl::flat_hash_set<const Node*> nodes;

  bool contains(const Value* value) const {
    return value->producer() != nullptr ? nodes.contains(value->producer())
                                        : graph_values.contains(value);
  }
};

absl::Status check_graph_values(const Graph& graph, Defined& defined) {
  for (const Value* input : graph.inputs()) {
    if (input->graph() != &graph || input->kind() != Value::Kind::kGraphInput) {
      return absl::InternalError(
          str_cat("graph input ", value_label(input), " is not a graph input of this graph"));
    }
    defined.graph_values.insert(input);
  }
  for (const Value* init : graph.initializers()) {
    if (init->graph() != &graph || init->kind() != Value::Kind::kInitializer) {
      return absl::InternalError(
          str_cat("initializer ", value_label(init), " is not an initializer of this graph"));
    }
    if (init->initializer()->type() != init->type()) {
      return absl::InternalError(str_cat("initializer ", value_label(init), " is declared ",
                                         type_to_string(init->type()), " but holds data of type ",
                                         type_to_string(init->initializer()->type())));
    }
    defined.graph_values.insert(init);
  }
  return absl::OkStatus();
}

// Each listed use is checked to be an edge that reads its value, and listed once; then every
// edge is recorded exactly when the uses listed number the edges (each listed use is a distinct
// edge, an edge reading one value). Only when they do not is each edge looked up, to name it.
struct UseHash {
  size_t operator()(const Use& use) const { return absl::HashOf(use.user, use.operand); }
};
using UseSet = absl::flat_hash_set<Use, UseHash>;

absl::Status check_uses(const Graph& graph, const Value* value, int64_t& listed) {
  const std::vector<Use>& uses = value->uses();
  for (const Use& use : uses) {
    const bool edge_exists = use.user != nullptr && use.user->graph() == &graph &&
                             use.operand >= 0 && use.operand < use.user->num_operands() &&
                             use.user->operand(use.operand) == value;
    if (!edge_exists) {
      return absl::InternalError(
          str_cat(value_label(value), " lists a use by operand ", use.operand, " of ",
                  use.user ? use.user->describe() : "no node", " that does not read it"));
    }
  }
  const auto listed_twice = [&](const Use& use) {
    return absl::InternalError(str_cat(value_label(value), " lists operand ", use.operand, " of ",
                                       use.user->describe(), " twice"));
  };
  // Most lists are short; a long one (a learning rate read by every update) is sorted.
  if (uses.size() <= 16) {
    for (size_t i = 1; i < uses.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (uses[i] == uses[j]) return listed_twice(uses[i]);
      }
    }
  } else {
    std::vector<Use> sorted = uses;
    const auto key = [](const Use& use) { return std::pair(use.user, use.operand); };
    std::sort(sorted.begin(), sorted.end(),
              [&](const Use& a, const Use& b) { return key(a) < key(b); });
    auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    if (twice != sorted.end()) return listed_twice(*twice);
  }
  listed += static_cast<int64_t>(uses.size());
  return absl::OkStatus();
}

// The first edge that its operand's use list does not record (there is one when the uses
// listed do not number the edges).
absl::Status find_unrecorded_edge(const Graph& graph) {
  UseSet recorded;
  const auto record = [&](const Value* value) {
    recorded.insert(value->uses().begin(), value->uses().end());
  };
  for (const Value* v : graph.inputs()) record(v);
  for (const Value* v : graph.initializers()) record(v);
  for (const auto& node : graph.nodes()) {
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (node->has_output(i)) record(node->output(i));
    }
  }
  for (const auto& node : graph.nodes()) {
    for (int i = 0; i < node->num_operands(); ++i) {
      if (node->operand(i) != nullptr && !recorded.contains(Use{node.get(), i})) {
        return absl::InternalError(str_cat(node->describe(), " operand ", i, " reads ",
                                           value_label(node->operand(i)),
                                           ", whose use list does not record that read"));
      }
    }
  }
  return absl::InternalError("the graph's use lists do not number its edges");
}

absl::Status check_node_edges(const Graph& graph, const Node& node, const Defined& defined,
                              int64_t& edges) {
  if (node.graph() != &graph) {
    return absl::InternalError(str_cat(node.describe(), " belongs to another graph"));
  }
  for (int i = 0; i < node.num_operands(); ++i) {
    const Value* operand = node.operand(i);
    if (operand == nullptr) continue;
    if (operand->graph() != &graph) {
      return absl::InternalError(str_cat(node.describe(), " operand ", i, " reads ",
                                         value_label(operand), " of another graph"));
    }
    if (!defined.contains(operand)) {
      return absl::InternalError(str_cat(node.describe(), " operand ", i, " reads ",
                                         value_label(operand),
                                         " before it is defined (nodes are not in "
                                         "topological order)"));
    }
    ++edges;
  }
  for (int i = 0; i < node.num_outputs(); ++i) {
    const Value* output = node.output(i);
    if (output == nullptr) continue;
    if (output->producer() != &node || output->producer_output() != i ||
        output->kind() != Value::Kind::kNodeOutput) {
      return absl::InternalError(str_cat(node.describe(), " output ", i, " ", value_label(output),
                                         " does not name this node as its producer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status verify(const Graph& graph) {
  Defined defined;
  defined.graph_values.reserve(graph.inputs().size() + graph.initializers().size());
  defined.nodes.reserve(graph.num_nodes());
  int64_t listed_uses = 0;
  int64_t edges = 0;
  AMPC_RETURN_IF_ERROR(check_graph_values(graph, defined));
  for (const Value* v : graph.inputs()) AMPC_RETURN_IF_ERROR(check_uses(graph, v, listed_uses));
  for (const Value* v : graph.initializers()) {
    AMPC_RETURN_IF_ERROR(check_uses(graph, v, listed_uses));
  }

  TypePropagator propagator;
  for (const auto& node : graph.nodes()) {
    AMPC_RETURN_IF_ERROR(check_node_edges(graph, *node, defined, edges));
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (node->has_output(i)) {
        AMPC_RETURN_IF_ERROR(check_uses(graph, node->output(i), listed_uses));
      }
    }
    defined.nodes.insert(node.get());
    absl::StatusOr<std::vector<std::optional<TensorType>>> inferred = propagator.visit(*node);
    if (!inferred.ok()) return inferred.status();
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) continue;
      if (node->output(i)->type() != *(*inferred)[i]) {
        return absl::InternalError(str_cat(node->describe(), " output ", i, " ",
                                           value_label(node->output(i)), " has type ",
                                           type_to_string(node->output(i)->type()),
                                           " but its op infers ", type_to_string(*(*inferred)[i])));
      }
    }
  }
  if (listed_uses != edges) return find_unrecorded_edge(graph);
  for (const Value* output : graph.outputs()) {
    if (output == nullptr || output->graph() != &graph || !defined.contains(output)) {
      return absl::InternalError(str_cat("graph output ", output ? value_label(output) : "(null)",
                                         " is not defined in the graph"));
    }
  }
  absl::flat_hash_map<std::string_view, const Value*> initializer_named;
  absl::flat_hash_map<std::string_view, const Value*> output_named;
  if (!graph.state_updates().empty()) {
    for (const Value* init : graph.initializers()) initializer_named[init->name()] = init;
    for (const Value* output : graph.outputs()) output_named[output->name()] = output;
  }
  for (const Graph::StateUpdate& update : graph.state_updates()) {
    auto state_it = initializer_named.find(update.state);
    auto value_it = output_named.find(update.update);
    const Value* state = state_it == initializer_named.end() ? nullptr : state_it->second;
    const Value* value = value_it == output_named.end() ? nullptr : value_it->second;
    if (state == nullptr || value == nullptr) {
      return absl::InternalError(str_cat("state update ", update.state, " <- ", update.update,
                                         ": the state must be an initializer and the update a "
                                         "graph output"));
    }
    if (state->type() != value->type()) {
      return absl::InternalError(str_cat("state update ", update.state, " <- ", update.update, ": ",
                                         type_to_string(state->type()), " vs ",
                                         type_to_string(value->type())));
    }
  }
  if (const Graph* step = graph.training_step()) {
    absl::Status status = verify(*step);
    if (!status.ok()) {
      return absl::Status(status.code(), str_cat("training step: ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace ampc
