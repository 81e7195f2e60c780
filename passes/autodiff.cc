// autodiff: appends the backward graph, from the scalar loss to every trainable value.
//
// Rewrites: for each trainable value p (by default every float initializer the loss depends on
//   that is not a program constant such as a folded Constant node, Value::is_constant, holds no
//   mask fill (inf, NaN or the type's largest magnitude, passes/mask_data.h): an exporter's
//   folded attention mask is data, and is not a lifted constant: a scalar (rank 0: an exponent,
//   an epsilon), or a one-element tensor named as torch.onnx's dynamo exporter names the
//   constants it lifts (val_<n>: an attention's √scale), unless the file declares it a
//   parameter, and is not what the file declares a buffer or a frozen parameter (PyTorch's graph
//   signature, the doc_string ampc.torch.export_training writes: Value::declared) nor, in a file
//   that declares its parameters, an undeclared tensor of one repeated value (an exporter's
//   folded torch.ones/zeros/full); --trainable names a lifted constant, a buffer, a frozen
//   parameter or such a tensor to train it),
//   adds nodes computing d loss / d p and a graph output `<p>.grad` holding it. Nodes are walked
//   in reverse order; each one some gradient flows into calls its op's gradient rule
//   (OpDef::gradient, see compiler/grad_builder.h). The walker, not the rules, undoes
//   broadcasting (a gradient shaped like a broadcast output is summed back to the input's shape)
//   and sums the gradients of a value with several readers, in reader order.
// Assumes: a verified graph with static shapes; the loss is a graph output with one element.
//   Integer and bool values, and inputs an op lists in no_gradient_inputs, get no gradient.
//   A trainable candidate the loss does not depend on is reported and left without gradient;
//   lifted constants, buffers and frozen parameters the loss depends on, and trained
//   initializers a file with a signature does not declare, are named in warnings.
// Numerics: the seed is 1 in the loss's dtype; each gradient has its value's dtype. The forward
//   graph is unchanged.
#include <algorithm>
#include <cmath>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "compiler/grad_builder.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "passes/mask_data.h"
#include "passes/passes.h"

namespace ampc {
namespace {

bool is_float_value(const Value* value) { return is_arithmetic_float(value->dtype()); }

bool listed(const std::vector<int>& list, int i) {
  return std::find(list.begin(), list.end(), i) != list.end();
}

// Whether a gradient can flow back from `node`'s output `i`.
bool differentiable_output(const Node& node, int i) {
  if (!node.has_output(i) || !is_float_value(node.output(i))) return false;
  return node.def() == nullptr || !listed(node.def()->no_gradient_outputs, i);
}

// An Identity that is PyTorch's detach() (its extension attribute stop_gradient).
bool stops_gradient(const Node& node) {
  return node.domain() == kOnnxDomain && node.op_type() == "Identity" && node.def() != nullptr &&
         node.int_attr("stop_gradient") != 0;
}

// Whether a gradient can flow from `node`'s output into its operand `i`.
bool differentiable_operand(const Node& node, int i) {
  if (!node.has_operand(i) || !is_float_value(node.operand(i))) return false;
  if (stops_gradient(node)) return false;
  // An op without a definition is reported when a gradient reaches it.
  return node.def() == nullptr || !listed(node.def()->no_gradient_inputs, i);
}

class Walker {
 public:
  Walker(Graph& graph, const AutodiffOptions& options, const PassContext& context)
      : graph_(graph), options_(options), context_(context) {}

  absl::StatusOr<bool> run() {
    AMPC_ASSIGN_OR_RETURN(Value * loss, find_loss());
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> candidates, trainable_candidates());
    mark_active(candidates);
    mark_reaching(loss);
    if (std::vector<std::string> held = reaching_loss(held_constant_); !held.empty()) {
      context_.warn(str_cat("lifted constants ", str_join(held, ", "),
                            " are taken as constants and not trained (name them in --trainable "
                            "to train them)"));
    }
    if (std::vector<std::string> held = reaching_loss(held_buffers_); !held.empty()) {
      context_.warn(str_cat("buffers ", str_join(held, ", "),
                            " are not trained, as in PyTorch (the exporter declared them "
                            "buffers; name them in --trainable to train them)"));
    }
    if (std::vector<std::string> held = reaching_loss(held_frozen_); !held.empty()) {
      context_.warn(str_cat("parameters ", str_join(held, ", "),
                            " are not trained, as in PyTorch (the file declares them frozen: "
                            "requires_grad=False; name them in --trainable to train them)"));
    }
    std::vector<Value*> trainable;
    for (Value* candidate : candidates) {
      if (reaches_loss_.contains(candidate) && active_.contains(candidate)) {
        trainable.push_back(candidate);
      } else if (reaches_an_output(candidate)) {
        // A weight of another head, say: worth a word. A buffer that only feeds comparisons,
        // indices or shapes (an attention mask) is data, and silently not trained.
        context_.warn(str_cat("'", candidate->name(), "' does not affect '", loss->name(),
                              "'; it gets no gradient and stays frozen"));
      }
    }
    warn_undeclared(trainable);
    warn_lost_padding(trainable);
    if (trainable.empty()) return false;

    add_contribution(loss, seed(loss));
    const std::vector<Node*> forward = graph_.node_list();
    for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
      AMPC_RETURN_IF_ERROR(backprop(**it));
    }
    for (Value* value : trainable) {
      Value* grad = total_gradient(value);
      if (grad == nullptr) continue;  // cannot happen for a value that reaches the loss
      AMPC_ASSIGN_OR_RETURN(grad, name_graph_output(grad, str_cat(value->name(), kGradSuffix)));
      graph_.add_output(grad);
    }
    return true;
  }

 private:
  absl::StatusOr<Value*> find_loss() {
    for (Value* output : graph_.outputs()) {
      if (output->name() != options_.loss) continue;
      if (!is_float_value(output) || output->type().num_elements() != 1) {
        return absl::InvalidArgumentError(str_cat("the loss '", options_.loss,
                                                  "' must be a float scalar, but it is ",
                                                  type_to_string(output->type())));
      }
      return output;
    }
    std::vector<std::string> names;
    for (const Value* output : graph_.outputs()) names.push_back(output->name());
    return absl::NotFoundError(str_cat("the graph has no output '", options_.loss,
                                       "' to differentiate; its outputs are ",
                                       str_join(names, ", "),
                                       " (ampc compile and ampc bench take the loss's name with "
                                       "--loss)"));
  }

  absl::StatusOr<std::vector<Value*>> trainable_candidates() {
    std::optional<std::regex> trainable;
    std::optional<std::regex> freeze;
    try {
      if (!options_.trainable.empty()) trainable.emplace(options_.trainable);
      if (!options_.freeze.empty()) freeze.emplace(options_.freeze);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(str_cat("bad --trainable/--freeze regex: ", e.what()));
    }
    std::vector<Value*> candidates;
    auto consider = [&](Value* value) {
      if (!is_float_value(value)) return;
      if (trainable && !std::regex_search(value->name(), *trainable)) return;
      if (freeze && std::regex_search(value->name(), *freeze)) return;
      candidates.push_back(value);
    };
    std::vector<std::string> scalars;
    std::vector<std::string> buffers;
    std::vector<std::string> frozen;
    const bool declares = declares_parameters(graph_);
    for (Value* init : graph_.initializers()) {
      if (init->is_constant() || only_read_without_gradient(*init)) continue;
      const bool named = trainable && std::regex_search(init->name(), *trainable);
      // A filled constant the file's signature does not declare (mask_data.h): data.
      if (declares && !named && init->declared() == Value::Declared::kUnknown &&
          holds_one_value(*init)) {
        continue;
      }
      if (!named && init->declared() != Value::Declared::kParameter &&
          only_read_as_hyperparameter(*init)) {
        continue;
      }
      if (init->is_declared_untrained() && !named) {
        if (is_float_value(init) && (!freeze || !std::regex_search(init->name(), *freeze))) {
          (init->is_buffer() ? buffers : frozen).push_back(init->name());
        }
        continue;
      }
      // A lifted constant (passes/mask_data.h) is far more often an exporter's constant than a
      // parameter: trained only by name.
      if (is_float_value(init) && is_lifted_constant(*init) && !named &&
          init->declared() != Value::Declared::kParameter &&
          (!freeze || !std::regex_search(init->name(), *freeze))) {
        scalars.push_back(init->name());
        continue;
      }
      if (holds_mask_fill(*init)) {
        // An additive attention mask an exporter folded into an initializer (0 and -inf, or
        // the type's lowest value) is data: a step would turn its infinities into NaN, or
        // move the mask.
        if (named) {
          context_.warn(
              str_cat("'", init->name(),
                      "' holds inf, NaN or its type's largest values, so it is data (a mask), "
                      "not a parameter; it stays frozen"));
        }
        continue;
      }
      consider(init);
    }
    if (options_.include_graph_inputs) {
      for (Value* input : graph_.inputs()) consider(input);
    }
    held_constant_ = std::move(scalars);
    held_buffers_ = std::move(buffers);
    held_frozen_ = std::move(frozen);
    return candidates;
  }

  // A trained initializer the exporter computed from parameters trains apart from them, another
  // model than PyTorch's, worth a warning naming it:
  //  - where the file declares its parameters (PyTorch's graph signature), one it does not
  //    declare was made by the exporter's optimizer (a weight folded into its transpose, a
  //    lookup of a position table, an expression);
  //  - where it declares nothing, the TorchScript exporter's constant folding (its default
  //    do_constant_folding=True) names what it computed onnx::<reader>_<n>.
  //  In both, a Linear's weight read transposed by a MatMul or Gemm is common and harmless (the
  //  file has no other copy, or tie-folded-weights ties the two) and not named; an arithmetic
  //  fold (RWKV's 1 - p) is not harmless.
  void warn_undeclared(const std::vector<Value*>& trainable) const {
    if (!options_.trainable.empty()) return;
    const bool declares = declares_parameters(graph_);
    std::vector<std::string> made;
    for (const Value* value : trainable) {
      if (value->initializer() == nullptr) continue;
      const bool folded = declares ? value->declared() == Value::Declared::kUnknown
                                   : value->name().starts_with("onnx::");
      if (folded && !only_read_as_weight(*value)) {
        made.push_back(value->name());
      }
    }
    if (made.empty()) return;
    context_.warn(str_cat(
        "initializers ", str_join(made, ", "), " train as parameters, but ",
        declares ? "the exported program does not declare them (PyTorch's graph signature): the "
                   "exporter's optimizer made them from parameters, buffers or constants: a "
                   "lookup of one that the file holds nowhere else trains as PyTorch's, but an "
                   "expression (1 - p, p / 2) or a second copy trains another model; export with "
                   "torch.onnx.export(..., optimize=False)"
                 : "the TorchScript exporter computed them from the model's parameters (its "
                   "do_constant_folding=True): a reshape of one that the file holds nowhere else "
                   "trains as PyTorch's, but an expression (1 - p, p / 2) or a second copy trains "
                   "another model; export with torch.onnx.export(..., do_constant_folding=False)",
        ", or name what trains with --trainable"));
  }

  // nn.Embedding(padding_idx=r) starts row r at zeros and never moves it; a TorchScript file
  // cannot say so (dynamo's metadata does: Gather's padding_idx), and the row trains. A trained
  // table such a file gathers rows of, with one or two all-zero rows (MPNet pads two tables), is
  // named in a warning.
  void warn_lost_padding(const std::vector<Value*>& trainable) const {
    if (!options_.trainable.empty() || declares_parameters(graph_)) return;
    std::vector<std::string> tables;
    for (const Value* table : trainable) {
      const Tensor* data = table->initializer();
      if (data == nullptr || !data->has_data() || table->type().shape.size() != 2 ||
          table->type().shape[0] < 3) {
        continue;
      }
      const bool gathered =
          std::any_of(table->uses().begin(), table->uses().end(), [](const Use& use) {
            return use.user->domain().empty() && use.user->op_type() == "Gather" &&
                   use.operand == 0 && use.user->find_attr("padding_idx") == nullptr &&
                   (use.user->find_attr("axis") == nullptr || use.user->int_attr("axis") == 0);
          });
      if (!gathered) continue;
      const int64_t rows = table->type().shape[0];
      const int64_t width = table->type().shape[1];
      std::vector<int64_t> zero_rows;
      for (int64_t r = 0; r < rows && zero_rows.size() <= 2; ++r) {
        bool zero = true;
        for (int64_t c = 0; c < width && zero; ++c)
          zero = data->element_as_double(r * width + c) == 0;
        if (zero) zero_rows.push_back(r);
      }
      if (!zero_rows.empty() && zero_rows.size() <= 2) {
        tables.push_back(str_cat(table->name(), " (row ", str_join(zero_rows, ", "), ")"));
      }
    }
    if (tables.empty()) return;
    context_.warn(str_cat(
        "embedding tables ", str_join(tables, ", "),
        " hold all-zero rows, as nn.Embedding(padding_idx=...) starts its padding row, which "
        "PyTorch never trains; a TorchScript export does not carry padding_idx, so here those rows "
        "train when a batch holds their index: export with torch.onnx.export(..., dynamo=True), "
        "which keeps it"));
  }

  // Those of the initializers `names` the loss depends on.
  std::vector<std::string> reaching_loss(const std::vector<std::string>& names) const {
    std::vector<std::string> reaching;
    for (const std::string& name : names) {
      const auto it = std::find_if(graph_.initializers().begin(), graph_.initializers().end(),
                                   [&](const Value* v) { return v->name() == name; });
      if (it != graph_.initializers().end() && reaches_loss_.contains(*it)) {
        reaching.push_back(name);
      }
    }
    return reaching;
  }

  // An initializer every reader takes through an operand that has no gradient (BatchNorm's
  // running statistics) is state or data, not a parameter: not a candidate, and not worth a
  // warning.
  static bool only_read_without_gradient(const Value& value) {
    if (value.uses().empty()) return false;
    // Whether `use` may carry a gradient back (through a Cast: whether what reads it may).
    return std::none_of(value.uses().begin(), value.uses().end(), [](const Use& use) {
      if (use.user->def() == nullptr) return true;
      if (listed(use.user->def()->no_gradient_inputs, use.operand) || stops_gradient(*use.user)) {
        return false;
      }
      return !is_cast(*use.user) || !only_read_without_gradient(*use.user->output(0));
    });
  }

  // An initializer every reader takes as a hyperparameter (Clip's bounds), directly or through
  // Casts (autocast's, under --precision).
  static bool only_read_as_hyperparameter(const Value& value) {
    if (value.uses().empty()) return false;
    return std::all_of(value.uses().begin(), value.uses().end(), [](const Use& use) {
      if (is_cast(*use.user)) return only_read_as_hyperparameter(*use.user->output(0));
      return use.user->def() != nullptr &&
             listed(use.user->def()->hyperparameter_inputs, use.operand);
    });
  }

  // An initializer every reader takes as a MatMul's or Gemm's weight (operand 1), directly or
  // through Casts.
  static bool only_read_as_weight(const Value& value) {
    return std::all_of(value.uses().begin(), value.uses().end(), [](const Use& use) {
      if (is_cast(*use.user)) return only_read_as_weight(*use.user->output(0));
      return use.user->domain().empty() && use.operand == 1 &&
             (use.user->op_type() == "MatMul" || use.user->op_type() == "Gemm");
    });
  }

  static bool is_cast(const Node& node) {
    return node.domain().empty() && node.op_type() == "Cast";
  }

  // The nodes a gradient rule just added (the tail of the node list after the first `first`)
  // compute in the dtype of what they produce; autocast's decision of the forward node is their
  // reason.
  void describe_gradient_nodes(const Node& forward, int first) {
    if (forward.precision().empty()) return;  // compiled without mixed precision
    const std::string label = forward.name().empty() ? forward.op_type() : forward.name();
    auto tail = graph_.nodes().end();
    for (int i = first; i < graph_.num_nodes(); ++i) --tail;
    for (; tail != graph_.nodes().end(); ++tail) {
      Node& n = **tail;
      if (!n.precision().empty()) continue;
      PrecisionDecision d;
      for (int k = 0; k < n.num_outputs() && !d.compute; ++k) {
        if (n.has_output(k) && is_float_value(n.output(k))) d.compute = n.output(k)->dtype();
      }
      // As autocast records it for a forward node: the op's, not the forward node's (a bias Add's
      // gradient is a ReduceSum, which accumulates in fp32).
      if ((n.def() != nullptr && n.def()->autocast.category == AutocastCategory::kAllow) ||
          accumulates_in_fp32(n)) {
        d.accumulate = DType::kF32;
      }
      d.reason = str_cat("gradient of ", label);
      n.mutable_precision() = std::move(d);
    }
  }

  // Whether a graph output depends on `value` through differentiable operands.
  static bool reaches_an_output(const Value* value) {
    std::vector<const Value*> work = {value};
    std::unordered_set<const Value*> seen = {value};
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      if (v->is_graph_output()) return true;
      for (const Use& use : v->uses()) {
        if (!differentiable_operand(*use.user, use.operand)) continue;
        for (int i = 0; i < use.user->num_outputs(); ++i) {
          if (differentiable_output(*use.user, i) && seen.insert(use.user->output(i)).second) {
            work.push_back(use.user->output(i));
          }
        }
      }
    }
    return false;
  }

  // Values that depend on a candidate through differentiable operands.
  void mark_active(const std::vector<Value*>& candidates) {
    active_.insert(candidates.begin(), candidates.end());
    for (const auto& node : graph_.nodes()) {
      bool active = false;
      for (int i = 0; i < node->num_operands() && !active; ++i) {
        active = differentiable_operand(*node, i) && active_.contains(node->operand(i));
      }
      if (!active) continue;
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (differentiable_output(*node, i)) active_.insert(node->output(i));
      }
    }
  }

  // Values the loss depends on through differentiable operands.
  void mark_reaching(Value* loss) {
    reaches_loss_.insert(loss);
    const std::vector<Node*> nodes = graph_.node_list();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const Node& node = **it;
      bool reaches = false;
      for (int i = 0; i < node.num_outputs() && !reaches; ++i) {
        reaches = differentiable_output(node, i) && reaches_loss_.contains(node.output(i));
      }
      if (!reaches) continue;
      for (int i = 0; i < node.num_operands(); ++i) {
        if (differentiable_operand(node, i)) reaches_loss_.insert(node.operand(i));
      }
    }
  }

  bool needs_grad(const Value* value) const {
    return active_.contains(value) && reaches_loss_.contains(value);
  }

  Value* seed(Value* loss) {
    Value* one = graph_.add_initializer(
        graph_.unique_value_name(str_cat(loss->name(), kGradSeedSuffix)),
        Tensor::from_doubles(loss->dtype(), loss->shape(), std::vector<double>(1, 1.0)));
    one->set_constant(true);
    return one;
  }

  void add_contribution(const Value* value, Value* grad) { contributions_[value].push_back(grad); }

  // The sum of the gradients flowing into `value`, in the order they were added (one node per
  // extra term); null when none flows.
  Value* total_gradient(const Value* value) {
    auto it = contributions_.find(value);
    if (it == contributions_.end() || it->second.empty()) return nullptr;
    std::vector<Value*>& terms = it->second;
    Value* sum = terms[0];
    for (size_t k = 1; k < terms.size(); ++k) {
      Node* add = graph_.create_node(kOnnxDomain, "Add", {sum, terms[k]}, {value->type()});
      add->set_name(str_cat(value->name(), "/grad/sum"));
      add->output(0)->set_name(graph_.unique_value_name(value->name() + ".grad_sum"));
      sum = add->output(0);
    }
    terms.assign(1, sum);
    return sum;
  }

  absl::Status backprop(Node& node) {
    const int nodes_before = graph_.num_nodes();
    std::vector<Value*> output_grads;
    bool any_grad = false;
    for (int i = 0; i < node.num_outputs(); ++i) {
      Value* grad = differentiable_output(node, i) ? total_gradient(node.output(i)) : nullptr;
      output_grads.push_back(grad);
      any_grad |= grad != nullptr;
    }
    std::vector<bool> wanted;
    bool any_wanted = false;
    for (int i = 0; i < node.num_operands(); ++i) {
      wanted.push_back(differentiable_operand(node, i) && needs_grad(node.operand(i)));
      any_wanted |= wanted.back();
    }
    if (!any_grad || !any_wanted) return absl::OkStatus();
    if (node.def() == nullptr || !node.def()->gradient) {
      return absl::UnimplementedError(
          str_cat(node.describe(), ": op ", node.op_type(),
                  " has no gradient rule, and the loss depends on a trainable value through it"));
    }
    GradBuilder builder(graph_, node, std::move(output_grads), wanted);
    absl::StatusOr<Grads> grads = node.def()->gradient(builder);
    if (!grads.ok()) {
      return absl::Status(grads.status().code(),
                          str_cat(node.describe(), ": gradient: ", grads.status().message()));
    }
    AMPC_RETURN_IF_ERROR(with_node(node, builder.status()));
    for (int i = 0; i < node.num_operands(); ++i) {
      if (!wanted[i]) continue;
      Value* grad = i < static_cast<int>(grads->size()) ? (*grads)[i] : nullptr;
      const Value* operand = node.operand(i);
      if (grad == nullptr) {
        return absl::InternalError(
            str_cat(node.describe(), ": the gradient rule gives input ", i, " no gradient"));
      }
      grad = builder.reduce_to_shape(grad, operand->shape());
      AMPC_RETURN_IF_ERROR(with_node(node, builder.status()));
      if (grad->type() != operand->type()) {
        return absl::InternalError(str_cat(node.describe(), ": the gradient of input ", i, " is ",
                                           type_to_string(grad->type()), ", not ",
                                           type_to_string(operand->type())));
      }
      add_contribution(operand, grad);
    }
    describe_gradient_nodes(node, nodes_before);
    return absl::OkStatus();
  }

  static absl::Status with_node(const Node& node, const absl::Status& status) {
    if (status.ok()) return status;
    return absl::Status(status.code(), str_cat(node.describe(), ": gradient: ", status.message()));
  }

  // A graph output named `name`: the gradient itself when it is a fresh node output, else an
  // Identity of it (an initializer or a value that is already an output, such as the seed).
  absl::StatusOr<Value*> name_graph_output(Value* grad, const std::string& name) {
    if (grad->kind() != Value::Kind::kNodeOutput || grad->is_graph_output()) {
      Node* identity = graph_.create_node(kOnnxDomain, "Identity", {grad}, {grad->type()});
      grad = identity->output(0);
    }
    grad->set_name(graph_.unique_value_name(name));
    return grad;
  }

  Graph& graph_;
  const AutodiffOptions& options_;
  const PassContext& context_;
  std::unordered_set<const Value*> active_;
  std::unordered_set<const Value*> reaches_loss_;
  // Initializers left out of the default trainable set, by name: lifted constants, and what the
  // exporter declared buffers or frozen parameters.
  std::vector<std::string> held_constant_;
  std::vector<std::string> held_buffers_;
  std::vector<std::string> held_frozen_;
  std::unordered_map<const Value*, std::vector<Value*>> contributions_;
};

class AutodiffPass final : public Pass {
 public:
  explicit AutodiffPass(AutodiffOptions options) : options_(std::move(options)) {}
  std::string_view name() const override { return "autodiff"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) override {
    return Walker(graph, options_, context).run();
  }

 private:
  AutodiffOptions options_;
};

}  // namespace

std::unique_ptr<Pass> make_autodiff_pass(AutodiffOptions options) {
  return std::make_unique<AutodiffPass>(std::move(options));
}

}  // namespace ampc
