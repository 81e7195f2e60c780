// The passes that turn a forward model into an eval graph with a training step beside it:
//
// append-loss: for a model that outputs a prediction, adds the loss node (cross-entropy over
//   class axis 1, or mean squared error) and the graph input for the labels.
// training-step: clones the graph as its training step (Graph::training_step), then puts the
//   graph itself in eval mode: training-mode BatchNormalization reads its running statistics,
//   Dropout becomes the identity (an Identity node where its output is a graph output whose name
//   its input cannot take: a graph input's, an initializer's). Before that, each Dropout or random
//   op without a `seed` gets one of its own (the smallest not yet taken, in graph order): the
//   runtime draws from (seed, random stream, element index), so two seedless Dropouts would drop
//   the same elements, where PyTorch's draws are independent. The passes after it that should act
//   on the step are wrapped in on_training_step(). It warns about what in the file will not train
//   as the module did: a BatchNormalization in inference mode, one the exporter's optimizer folded
//   away (compiler/onnx_metadata.h, kFoldedBatchNormsKey), a scatter without a reduction whose
//   constant indices write an element twice (how PyTorch's exporters write index_add), names
//   the file gave both an initializer and a node's output (kShadowedNamesKey).
// batchnorm-state: in the step, each training-mode BatchNormalization's new running mean and
//   variance become graph outputs and state updates of its running-statistics initializers;
//   a new value with an element that is not finite leaves the statistic as it was.
//   ONNX defines the new variance from the biased batch variance; PyTorch (whose exports these
//   graphs mostly are) from the unbiased one, n/(n-1) times larger, n = elements per channel.
//   The default follows PyTorch; RunningVariance::kBiased keeps ONNX's definition.
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "compiler/onnx_buffer_updates.h"
#include "compiler/onnx_metadata.h"
#include "compiler/strings.h"
#include "ops/op_util.h"
#include "passes/passes.h"

namespace ampc {
namespace {

Value* find_output(const Graph& graph, std::string_view name) {
  for (Value* output : graph.outputs()) {
    if (output->name() == name) return output;
  }
  return nullptr;
}

Value* find_input(const Graph& graph, std::string_view name) {
  for (Value* input : graph.inputs()) {
    if (input->name() == name) return input;
  }
  return nullptr;
}

std::string output_names(const Graph& graph) {
  std::vector<std::string> names;
  for (const Value* output : graph.outputs()) {
    if (!onnx_io::is_buffer_update_output(graph, output)) names.push_back(output->name());
  }
  return names.empty() ? "none" : str_join(names, ", ");
}

Value* scalar_constant(Graph& graph, DType dtype, double value, std::string_view hint) {
  Value* constant = graph.add_initializer(graph.unique_value_name(hint),
                                          Tensor::from_doubles(dtype, {}, {value}));
  constant->set_constant(true);
  return constant;
}

class AppendLossPass final : public Pass {
 public:
  explicit AppendLossPass(LossOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "append-loss"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    if (find_output(graph, options_.loss_name) != nullptr) {
      return absl::InvalidArgumentError(str_cat("the model already has an output '",
                                                options_.loss_name, "'; train it with `--loss ",
                                                options_.loss_name, "` instead of appending one"));
    }
    AMPC_ASSIGN_OR_RETURN(Value * prediction, find_prediction(graph));
    if (!is_float(prediction->dtype())) {
      return absl::InvalidArgumentError(str_cat("the prediction '", prediction->name(), "' is ",
                                                type_to_string(prediction->type()),
                                                "; a loss needs float scores"));
    }
    AMPC_ASSIGN_OR_RETURN(Value * loss, options_.kind == LossOptions::Kind::kCrossEntropy
                                            ? cross_entropy(graph, prediction)
                                            : mean_squared_error(graph, prediction));
    loss->set_name(options_.loss_name);
    graph.add_output(loss);
    return true;
  }

 private:
  absl::StatusOr<Value*> find_prediction(const Graph& graph) const {
    if (!options_.prediction.empty()) {
      if (Value* output = find_output(graph, options_.prediction)) return output;
      return absl::InvalidArgumentError(
          str_cat("--logits names '", options_.prediction,
                  "', which is not a graph output (outputs: ", output_names(graph), ")"));
    }
    std::vector<Value*> outputs;
    for (Value* output : graph.outputs()) {
      if (!onnx_io::is_buffer_update_output(graph, output)) outputs.push_back(output);
    }
    if (outputs.size() != 1) {
      return absl::InvalidArgumentError(
          str_cat("the model has ", outputs.size(), " outputs (", output_names(graph),
                  "); say which one the loss reads with --logits NAME"));
    }
    return outputs[0];
  }

  // The label input: the graph input of that name, or a new one of `type`.
  absl::StatusOr<Value*> label_input(Graph& graph, const TensorType& type,
                                     bool integer_classes) const {
    if (options_.label_input.empty()) {
      return absl::InvalidArgumentError("appending a loss needs --label-input NAME");
    }
    Value* label = find_input(graph, options_.label_input);
    if (label == nullptr) return graph.add_input(options_.label_input, type);
    const bool ok = integer_classes
                        ? (label->dtype() == DType::kI64 || label->dtype() == DType::kI32) &&
                              label->shape() == type.shape
                        : label->type() == type;
    if (!ok) {
      return absl::InvalidArgumentError(str_cat("label input '", label->name(), "' is ",
                                                type_to_string(label->type()), "; the loss needs ",
                                                type_to_string(type)));
    }
    return label;
  }

  // SoftmaxCrossEntropyLoss(scores [N, C, d...], labels [N, d...]), mean over the batch.
  absl::StatusOr<Value*> cross_entropy(Graph& graph, Value* scores) {
    const Shape& shape = scores->shape();
    if (shape.size() < 2) {
      return absl::InvalidArgumentError(
          str_cat("cross-entropy reads scores shaped [N, C, ...] (classes on axis 1); '",
                  scores->name(), "' is ", type_to_string(scores->type())));
    }
    if (graph.opset(kOnnxDomain) < 13) {
      return absl::InvalidArgumentError(
          str_cat("cross-entropy needs SoftmaxCrossEntropyLoss (opset 13 or later); the model "
                  "imports opset ",
                  graph.opset(kOnnxDomain)));
    }
    Shape label_shape = shape;
    label_shape.erase(label_shape.begin() + 1);
    AMPC_ASSIGN_OR_RETURN(Value * label, label_input(graph, TensorType{DType::kI64, label_shape},
                                                     /*integer_classes=*/true));
    Node* node =
        graph.create_node(kOnnxDomain, "SoftmaxCrossEntropyLoss", {scores, label},
                          {TensorType{scores->dtype(), {}}}, {{"reduction", std::string("mean")}});
    node->set_name("loss/SoftmaxCrossEntropyLoss");
    return node->output(0);
  }

  // ReduceMean((prediction - target)^2) over every element, as torch.nn.MSELoss.
  absl::StatusOr<Value*> mean_squared_error(Graph& graph, Value* prediction) {
    AMPC_ASSIGN_OR_RETURN(Value * target, label_input(graph, prediction->type(), false));
    Node* diff = graph.create_node(kOnnxDomain, "Sub", {prediction, target}, {prediction->type()});
    diff->set_name("loss/Sub");
    Node* square = graph.create_node(kOnnxDomain, "Mul", {diff->output(0), diff->output(0)},
                                     {prediction->type()});
    square->set_name("loss/Mul");
    Node* mean =
        graph.create_node(kOnnxDomain, "ReduceMean", {square->output(0)},
                          {TensorType{prediction->dtype(), {}}}, {{"keepdims", int64_t{0}}});
    mean->set_name("loss/ReduceMean");
    return mean->output(0);
  }

  LossOptions options_;
};

// Replaces `node` by a BatchNormalization with the same operands and attributes, `training_mode`
// and `num_outputs` outputs (1: Y; 3: Y, running_mean, running_var). The old node's used outputs
// must exist in the new one.
Node* rebuild_batch_norm(Graph& graph, Node* node, int64_t training_mode, int num_outputs) {
  Attributes attrs = node->attrs();
  attrs["training_mode"] = training_mode;
  std::vector<std::optional<TensorType>> types;
  for (int i = 0; i < num_outputs; ++i) {
    types.push_back(i == 0 ? node->output(0)->type() : node->operand(3)->type());
  }
  Node* rebuilt = graph.create_node(node->domain(), node->op_type(), node->operands(), types,
                                    std::move(attrs), node);
  rebuilt->set_name(node->name());
  rebuilt->set_doc_string(node->doc_string());
  rebuilt->mutable_precision() = node->precision();
  std::vector<std::string> names;
  for (int i = 0; i < node->num_outputs(); ++i) {
    names.push_back(node->has_output(i) ? node->output(i)->name() : "");
    if (node->has_output(i) && i < num_outputs) {
      node->output(i)->replace_all_uses_with(rebuilt->output(i));
    }
  }
  graph.erase_node(node);
  for (int i = 0; i < num_outputs && i < static_cast<int>(names.size()); ++i) {
    if (!names[i].empty()) rebuilt->output(i)->set_name(names[i]);
  }
  return rebuilt;
}

bool used(const Node& node, int output) {
  return node.has_output(output) && !node.output(output)->is_dead();
}

// The first element of its data that a scatter without a reduction (ScatterElements, Scatter or
// ScatterND) writes more than once by its constant indices, in index order; nullopt when there
// is none, when the indices are not constants, or when an index is out of range (the kernel
// names that one). ONNX leaves which update lands undefined there.
std::optional<Shape> twice_written_element(const Node& node) {
  if (node.find_attr("reduction") && node.string_attr("reduction") != "none") return std::nullopt;
  const Tensor* indices = node.operand(1)->initializer();
  const Shape& data = node.operand(0)->shape();
  if (indices == nullptr || data.empty() || indices->shape().empty()) return std::nullopt;
  const Shape& index_shape = indices->shape();
  const bool nd = node.op_type() == "ScatterND";
  const int64_t rank = data.size();
  // ScatterND: each index is a tuple of the first `width` coordinates. ScatterElements: each
  // index is the coordinate along `axis`, the others are the index's own.
  const int64_t width = nd ? index_shape.back() : rank;
  if (width < 1 || width > rank) return std::nullopt;
  absl::StatusOr<int64_t> axis = nd ? int64_t{0} : ops::normalize_axis(node.int_attr("axis"), rank);
  if (!axis.ok()) return std::nullopt;
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 1; d > 0; --d) strides[d - 1] = strides[d] * data[d];
  const std::vector<int64_t> values = indices->to_i64_vector();
  std::vector<int64_t> at(index_shape.size(), 0);  // the coordinates of the index (row-major)
  absl::flat_hash_set<int64_t> written;
  for (size_t i = 0; i < values.size(); i += nd ? width : 1) {
    int64_t flat = 0;
    for (int64_t d = 0; d < width; ++d) {
      int64_t k = nd ? values[i + d] : d == *axis ? values[i] : at[d];
      if (k < 0) k += data[d];
      if (k < 0 || k >= data[d]) return std::nullopt;
      flat += k * strides[d];
    }
    if (!written.insert(flat).second) {
      Shape element(width);
      for (int64_t d = 0; d < width; ++d) element[d] = flat / strides[d] % data[d];
      return element;
    }
    for (int64_t d = int64_t(at.size()) - 1; d >= 0 && ++at[d] == index_shape[d]; --d) at[d] = 0;
  }
  return std::nullopt;
}

// Gives each random op of `graph` (Dropout, RandomNormalLike, ...) without a seed the smallest
// seed no random op has yet, in graph order; seeds a file sets are kept. Autodiff copies a
// forward Dropout's seed to the Dropout that draws its mask again in the backward, so this runs
// before it.
void seed_random_ops(Graph& graph) {
  std::set<int64_t> taken;
  for (const Node* node : graph.node_list()) {
    if (!ops::is_random_op(*node)) continue;
    if (std::optional<int64_t> seed = ops::random_seed(*node)) taken.insert(*seed);
  }
  int64_t next = 0;
  for (Node* node : graph.node_list()) {
    if (!ops::is_random_op(*node) || node->find_attr("seed") != nullptr) continue;
    while (taken.contains(next)) ++next;
    // Dropout's seed is an int; the others' a float, which holds these small integers exactly.
    if (node->op_type() == "Dropout") {
      node->mutable_attrs()["seed"] = next;
    } else {
      node->mutable_attrs()["seed"] = static_cast<float>(next);
    }
    taken.insert(next);
  }
}

// The buffers the module updates in place (compiler/onnx_buffer_updates.h): in the step, each
// output holding a buffer's new value becomes its state update; the eval graph, which reads the
// buffers, drops those outputs and what computes them alone.
absl::Status carry_buffer_updates(Graph& graph, Graph& step, const PassContext& context) {
  const std::vector<std::pair<std::string, std::string>> updates = onnx_io::buffer_updates(graph);
  if (updates.empty()) return absl::OkStatus();
  for (const auto& [buffer, output] : updates) {
    const Value* state = nullptr;
    for (const Value* init : step.initializers()) {
      if (init->name() == buffer) state = init;
    }
    Value* next = find_output(step, output);
    if (state == nullptr || next == nullptr) {
      return absl::InternalError(str_cat("the update of buffer '", buffer, "' is lost"));
    }
    if (next->dtype() != state->dtype()) {  // a buffer stored in f16 or bf16 (O3)
      Node* cast =
          step.create_node(kOnnxDomain, "Cast", {next}, {state->type()}, {{"to", state->dtype()}});
      cast->set_name(str_cat(buffer, "/next/Cast"));
      for (int i = 0; i < static_cast<int>(step.outputs().size()); ++i) {
        if (step.outputs()[i] == next) step.set_output(i, cast->output(0));
      }
      next->set_name(step.unique_value_name(str_cat(output, ".", dtype_name(next->dtype()))));
      cast->output(0)->set_name(output);
    }
    step.add_state_update(buffer, output);
  }
  for (int i = static_cast<int>(graph.outputs().size()) - 1; i >= 0; --i) {
    if (onnx_io::is_buffer_update_output(graph, graph.outputs()[i])) graph.erase_output(i);
  }
  graph.erase_metadata(onnx_io::kBufferUpdatesKey);
  step.erase_metadata(onnx_io::kBufferUpdatesKey);
  return make_dce_pass()->run(graph, context).status();
}

// What the importer noted in the graph's metadata about a file that will not train as the
// module did, or was read leniently (compiler/onnx_metadata.h): one warning each, naming what the
// note lists. The notes are erased once told, but for the folded batch norms, which stay.
void warn_of_import_notes(Graph& graph, const PassContext& context) {
  struct Note {
    const char* key;
    const char* before;  // the warning: before, the note's list, after
    const char* after;
    bool keep;
  };
  static constexpr Note kNotes[] = {
      {onnx_io::kFoldedBatchNormsKey, "nodes ",
       " carry the FX node of a batch norm that ran in training mode, but the file has no "
       "BatchNormalization for it: the exporter's optimizer folded it, with its running "
       "statistics, into the convolution before it (an inference model), so the step does "
       "not normalize by the batch as PyTorch's does; export with "
       "torch.onnx.export(..., optimize=False)",
       true},
      {onnx_io::kShadowedNamesKey, "the file gives the names ",
       " both to an initializer and to a later node's output, which ONNX forbids (the "
       "exporter named a buffer or parameter like an op's result): ampc reads them in node "
       "order, nodes after that output reading the output, and the initializer keeps the name",
       false},
      {onnx_io::kMissingParametersKey, "parameters ",
       " are declared by the file's graph signature and read by its nodes' FX nodes, but the "
       "file holds no initializer of them: the exporter's optimizer removed them or folded "
       "them into constants (a parameter whose value is uniform: a zero bias, a norm's ones "
       "and zeros), so they do not train as PyTorch's do; export with "
       "torch.onnx.export(..., optimize=False)",
       false},
      {onnx_io::kStaleBuffersKey, "buffers ",
       " are updated in place by the module (the graph signature says so), but the file does "
       "not hold their new values, so they keep their values from step to step",
       false},
  };
  for (const Note& note : kNotes) {
    auto it = graph.metadata().find(note.key);
    if (it == graph.metadata().end()) continue;
    context.warn(str_cat(note.before, it->second, note.after));
    if (!note.keep) graph.erase_metadata(note.key);
  }
}

class TrainingStepPass final : public Pass {
 public:
  std::string_view name() const override { return "training-step"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    if (graph.training_step() != nullptr) {
      return absl::FailedPreconditionError(
          "the model is already a training model (it has a training step)");
    }
    warn_of_import_notes(graph, context);
    seed_random_ops(graph);  // the step's random ops are its copies
    std::unique_ptr<Graph> step = graph.clone();
    step->set_name(str_cat(graph.name(), ".train_step"));
    AMPC_RETURN_IF_ERROR(carry_buffer_updates(graph, *step, context));
    for (Node* node : graph.node_list()) {
      if (node->domain() != kOnnxDomain) continue;
      if (node->op_type() == "BatchNormalization" && node->def() != nullptr &&
          node->int_attr("training_mode") == 1) {
        if (used(*node, 1) || used(*node, 2)) {
          context.warn(str_cat(node->describe(),
                               ": its running statistics are read, so the eval graph keeps "
                               "it in training mode"));
          continue;
        }
        rebuild_batch_norm(graph, node, 0, 1);
      } else if (node->op_type() == "BatchNormalization" && node->def() != nullptr) {
        context.warn(str_cat(
            node->describe(),
            ": the file has it normalize with its running statistics (inference mode), so it "
            "does in the training step too, and they do not update; a module exported in "
            "training mode says so in the file (PyTorch's dynamo exporter in the node's "
            "metadata, which ONNX's version converter drops when PyTorch converts to opset 26 "
            "or later: export at 25 or below)"));
      } else if (node->op_type() == "ScatterElements" || node->op_type() == "ScatterND" ||
                 node->op_type() == "Scatter") {
        if (const std::optional<Shape> element = twice_written_element(*node)) {
          context.warn(str_cat(
              node->describe(), ": its indices write element ", shape_to_string(*element), " of '",
              node->operand(0)->name(),
              "' more than once without a reduction, where ONNX leaves which update lands "
              "undefined (ampc keeps the last in index order). PyTorch's exporters write "
              "index_add (TorchScript), scatter_reduce 'mean' (dynamo) and, before opset 16, "
              "scatter_add and index_put(accumulate=True) this way, where PyTorch combines the "
              "updates: such a file computes another function than the module"));
        }
      } else if (node->op_type() == "Dropout" && !used(*node, 1)) {
        // The identity in eval mode. A graph output keeps its name: where the input cannot take
        // it over (a graph input, an initializer, another output), an Identity writes it.
        Value* input = node->operand(0);
        Value* output = node->output(0);
        if (output->is_graph_output() && !input->can_take_output_name()) {
          Node* identity =
              graph.create_node(kOnnxDomain, "Identity", {input}, {output->type()}, {}, node);
          identity->set_name(str_cat(node->name(), "/eval"));
          output->replace_all_uses_with(identity->output(0));
        } else {
          output->replace_all_uses_with(input);
        }
        graph.erase_node(node);
      }
    }
    graph.set_training_step(std::move(step));
    return true;
  }
};

class BatchNormStatePass final : public Pass {
 public:
  explicit BatchNormStatePass(RunningVariance variance) : variance_(variance) {}
  std::string_view name() const override { return "batchnorm-state"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    // Each running statistic's newest value so far, in graph order. A module applied to several
    // inputs (one BatchNorm over both branches of a siamese net) is several nodes reading the
    // same statistics: as in PyTorch, where each call moves the buffers in place, each node
    // moves the value the one before it left, and the last one's is the state update.
    std::vector<std::pair<Value*, Value*>> newest;  // (state, newest value)
    std::unordered_map<const Value*, size_t> index;
    auto chain = [&](Node& node, int operand, Value* state) {
      auto [it, added] = index.emplace(state, newest.size());
      if (added) {
        newest.emplace_back(state, nullptr);
      } else {
        node.set_operand(operand, newest[it->second].second);
      }
      return it->second;
    };
    bool changed = false;
    const std::vector<Node*> nodes = graph.node_list();
    for (size_t at = 0; at < nodes.size(); ++at) {
      Node* node = nodes[at];
      if (node->domain() != kOnnxDomain || node->op_type() != "BatchNormalization" ||
          node->def() == nullptr || node->int_attr("training_mode") != 1) {
        continue;
      }
      Value* mean = node->operand(3);
      Value* var = node->operand(4);
      if (mean->kind() != Value::Kind::kInitializer || var->kind() != Value::Kind::kInitializer ||
          mean->is_constant() || var->is_constant() || mean == var) {
        continue;  // statistics computed in the graph are not state
      }
      if (!node->has_output(1) || !node->has_output(2)) {
        node = rebuild_batch_norm(graph, node, 1, 3);
      }
      const size_t mean_at = chain(*node, 3, mean);
      const size_t var_at = chain(*node, 4, var);
      Value* new_mean = node->output(1);
      Value* new_var = node->output(2);
      const Shape& x = node->operand(0)->shape();
      const int64_t channels = x.size() >= 2 ? x[1] : 1;
      const int64_t n = node->operand(0)->type().num_elements() / std::max<int64_t>(channels, 1);
      if (variance_ == RunningVariance::kUnbiased && n > 1) {
        // Right after the node: a later node applying the module reads it.
        new_var =
            unbiased(graph, *node, n, var->name(), at + 1 < nodes.size() ? nodes[at + 1] : nullptr);
      }
      newest[mean_at].second = new_mean;
      newest[var_at].second = new_var;
      changed = true;
    }
    for (const auto& [state, update] : newest) {
      add_update(graph, state, finite_or_kept(graph, state, update));
    }
    describe_undecided_nodes(graph, "BatchNorm's running statistics, in their dtype");
    return changed;
  }

 private:
  // `update` where all its elements are finite, else `state` as it was. A batch whose
  // statistics are NaN or infinite (a NaN in the data, a forward that overflowed f16) would
  // leave the running statistics non-finite for every later step and the eval graph, as it
  // leaves PyTorch's; that step's gradients are non-finite too, so a loss-scaled step is skipped
  // and one without loss scaling reports a non-finite loss, and the statistics stay with the
  // weights. A finite update is taken as it is, bit for bit. The test is
  // IsNaN(ReduceSum(update * 0)): 0 * x is NaN for x NaN or infinite, else a zero, in the
  // statistics' dtype (f32; autocast has run).
  static Value* finite_or_kept(Graph& graph, Value* state, Value* update) {
    const std::string base = str_cat(state->name(), "/keep_finite/");
    auto node = [&](std::string_view op, std::vector<Value*> operands, TensorType type,
                    Attributes attrs = {}) {
      Node* created = graph.create_node(kOnnxDomain, op, operands, {type}, std::move(attrs));
      created->set_name(str_cat(base, op));
      created->output(0)->set_name(graph.unique_value_name(str_cat(base, op)));
      return created->output(0);
    };
    const TensorType& type = update->type();
    const TensorType scalar{type.dtype, {}};
    Value* zero = scalar_constant(graph, type.dtype, 0.0, str_cat(state->name(), ".zero"));
    Value* zeros = node("Mul", {update, zero}, type);
    Value* sum = node("ReduceSum", {zeros}, scalar, {{"keepdims", int64_t{0}}});
    Value* not_finite = node("IsNaN", {sum}, TensorType{DType::kBool, {}});
    return node("Where", {not_finite, state, update}, type);
  }

  // m*v + (R - m*v) * n/(n-1): R = m*v + (1-m)*batch_var is the node's running variance, so
  // this is m*v + (1-m)*batch_var*n/(n-1), the running variance from the unbiased batch variance.
  static Value* unbiased(Graph& graph, Node& node, int64_t n, const std::string& state,
                         Node* before) {
    Value* var = node.operand(4);
    const TensorType& type = var->type();
    const std::string base = node.name().empty() ? state : node.name();
    auto add = [&](std::string_view op, Value* a, Value* b) {
      Node* created = graph.create_node(kOnnxDomain, op, {a, b}, {type}, {}, before);
      created->set_name(str_cat(base, "/running_var/", op));
      return created->output(0);
    };
    Value* momentum = scalar_constant(graph, type.dtype, node.float_attr("momentum"),
                                      str_cat(state, ".momentum"));
    Value* correction =
        scalar_constant(graph, type.dtype, static_cast<double>(n) / static_cast<double>(n - 1),
                        str_cat(state, ".bessel"));
    Value* kept = add("Mul", var, momentum);
    Value* added = add("Sub", node.output(2), kept);
    return add("Add", kept, add("Mul", added, correction));
  }

  static void add_update(Graph& graph, Value* state, Value* update) {
    if (!update->is_graph_output()) {
      update->set_name(graph.unique_value_name(state->name() + ".next"));
      graph.add_output(update);
    }
    graph.add_state_update(state->name(), update->name());
  }

  RunningVariance variance_;
};

// Runs a pass on the graph's training step instead of the graph.
class OnTrainingStep final : public Pass {
 public:
  explicit OnTrainingStep(std::unique_ptr<Pass> pass) : pass_(std::move(pass)) {}
  std::string_view name() const override { return pass_->name(); }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    Graph* step = graph.mutable_training_step();
    if (step == nullptr) {
      return absl::FailedPreconditionError(
          str_cat(pass_->name(), " runs on the training step; run training-step first"));
    }
    return pass_->run(*step, context);
  }

 private:
  std::unique_ptr<Pass> pass_;
};

}  // namespace

std::unique_ptr<Pass> make_append_loss_pass(LossOptions options) {
  return std::make_unique<AppendLossPass>(std::move(options));
}

std::unique_ptr<Pass> make_training_step_pass() { return std::make_unique<TrainingStepPass>(); }

std::unique_ptr<Pass> make_batchnorm_state_pass(RunningVariance variance) {
  return std::make_unique<BatchNormStatePass>(variance);
}

std::unique_ptr<Pass> on_training_step(std::unique_ptr<Pass> pass) {
  return std::make_unique<OnTrainingStep>(std::move(pass));
}

}  // namespace ampc
