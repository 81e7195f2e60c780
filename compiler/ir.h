// The graph IR: a Graph owns Nodes and Values; every Value knows its one producer and its uses.
//
// Edges change only through Node::set_operand (and the helpers built on it), so use lists are
// always right. Nodes are kept in a topological order; names are labels, made unique on export.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/tensor.h"
#include "compiler/attribute.h"

namespace ampc {

class Graph;
class Node;
struct OpDef;
struct IrTestAccess;  // defined by the verifier tests, to break invariants on purpose

// The standard ONNX domain is spelled "" everywhere in the IR ("ai.onnx" is mapped to it).
inline constexpr std::string_view kOnnxDomain = "";
// ampc's own ops (gradients, loss scaling, optimizers).
inline constexpr std::string_view kAmpcDomain = "ampc";
// The opset a graph gets when it names none (the text IR's default).
inline constexpr int64_t kDefaultOnnxOpset = 17;

// One operand slot of a node that reads a value.
struct Use {
  Node* user = nullptr;
  int operand = 0;
  bool operator==(const Use&) const = default;
};

// The precision a node was given and why. Filled by the autocast pass; empty before.
struct PrecisionDecision {
  std::optional<DType> compute;
  std::optional<DType> accumulate;
  std::string reason;

  bool empty() const { return !compute && !accumulate && reason.empty(); }
  bool operator==(const PrecisionDecision&) const = default;
};

class Value {
 public:
  enum class Kind { kGraphInput, kInitializer, kNodeOutput };

  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name);
  const TensorType& type() const { return type_; }
  void set_type(TensorType type) { type_ = std::move(type); }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }

  Kind kind() const { return kind_; }
  Graph* graph() const { return graph_; }
  // The node that produces this value and which of its outputs it is; null for graph inputs and
  // initializers.
  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }

  // Node operands reading this value (graph outputs are not uses; see is_graph_output).
  const std::vector<Use>& uses() const { return uses_; }
  bool is_graph_output() const { return graph_output_count_ > 0; }
  // True when nothing reads the value: no node operand and no graph output.
  bool is_dead() const { return uses_.empty() && !is_graph_output(); }

  // The data of an initializer; null for other values.
  const Tensor* initializer() const { return kind_ == Kind::kInitializer ? &data_ : nullptr; }
  // An initializer that is a constant of the program (a folded Constant node or shape
  // arithmetic, a constant a pass added), not a weight: autodiff never trains it.
  bool is_constant() const { return is_constant_; }
  void set_constant(bool constant) { is_constant_ = constant; }
  // What the exporter declared an initializer (PyTorch's graph signature, or the doc_string
  // ampc.torch.export_training writes), where the file says: a parameter, which trains even where
  // it looks like a constant the exporter lifted (a scalar), a buffer (register_buffer: a rotary
  // frequency table, a fixed bias), or a frozen parameter (requires_grad=False: a pretrained
  // backbone); autodiff trains the last two only when --trainable names them.
  enum class Declared { kUnknown, kParameter, kBuffer, kFrozenParameter };
  Declared declared() const { return declared_; }
  void set_declared(Declared declared) { declared_ = declared; }
  bool is_buffer() const { return declared_ == Declared::kBuffer; }
  bool is_frozen_parameter() const { return declared_ == Declared::kFrozenParameter; }
  // Whether the module this came from does not train it: a buffer or a frozen parameter.
  bool is_declared_untrained() const { return is_buffer() || is_frozen_parameter(); }
  // "parameter", "buffer" or "frozen parameter" (what inspect prints, and a compiled file's
  // doc_string records), "" for kUnknown.
  static std::string_view declared_name(Declared declared);

  // Whether a graph output this value replaces can take its name: a node output that is no graph
  // output yet (a graph input or an initializer has a name of the interface already).
  bool can_take_output_name() const { return kind_ == Kind::kNodeOutput && !is_graph_output(); }
  // Points every use (node operands and graph outputs) at `other`. When this value is a graph
  // output and other->can_take_output_name(), `other` takes this value's name, so the graph's
  // interface keeps its names.
  void replace_all_uses_with(Value* other);

 private:
  friend class Graph;
  friend class Node;
  friend struct IrTestAccess;
  Value(Graph* graph, Kind kind, std::string name, TensorType type)
      : graph_(graph), kind_(kind), name_(std::move(name)), type_(std::move(type)) {}

  Graph* graph_;
  Kind kind_;
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  int producer_output_ = -1;
  std::vector<Use> uses_;
  int graph_output_count_ = 0;  // how many entries of the graph's outputs are this value
  std::list<std::unique_ptr<Value>>::iterator position_;  // graph inputs and initializers
  Tensor data_;                                           // initializers only
  bool is_constant_ = false;
  Declared declared_ = Declared::kUnknown;
};

class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  const std::string& domain() const { return domain_; }
  const std::string& op_type() const { return op_type_; }
  // The registered definition for this op at the graph's opset, or null for an unknown op.
  const OpDef* def() const { return def_; }
  Graph* graph() const { return graph_; }

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }

  // Operands; an omitted optional input is null.
  int num_operands() const { return static_cast<int>(operands_.size()); }
  Value* operand(int i) const { return operands_.at(i); }
  const std::vector<Value*>& operands() const { return operands_; }
  bool has_operand(int i) const { return i < num_operands() && operands_[i] != nullptr; }
  // The one mutator of edges: points operand `i` at `value` (null omits it), fixing use lists.
  void set_operand(int i, Value* value);
  void append_operand(Value* value);
  // Drops operands from index `count` on.
  void truncate_operands(int count);

  // Outputs; an omitted optional output is null.
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  Value* output(int i) const { return outputs_.at(i).get(); }
  bool has_output(int i) const { return i < num_outputs() && outputs_[i] != nullptr; }

  const Attributes& attrs() const { return attrs_; }
  Attributes& mutable_attrs() { return attrs_; }
  const AttrValue* find_attr(std::string_view name) const;
  // The attribute's value, or its OpDef default. The attribute must exist in one of the two and
  // have the asked kind (import validates this), else it is an internal error.
  int64_t int_attr(std::string_view name) const;
  float float_attr(std::string_view name) const;
  const std::string& string_attr(std::string_view name) const;
  const std::vector<int64_t>& ints_attr(std::string_view name) const;
  const std::vector<float>& floats_attr(std::string_view name) const;
  const Tensor& tensor_attr(std::string_view name) const;
  DType dtype_attr(std::string_view name) const;

  const PrecisionDecision& precision() const { return precision_; }
  PrecisionDecision& mutable_precision() { return precision_; }

  // Why the import that wrote this node keeps it fp32 whatever autocast's lists say (a lowered
  // op's coordinate arithmetic: GridSample's), or empty. Autocast honours it like --fp32-nodes;
  // it lives while the model is compiled and is not written to files.
  const std::string& fp32_pin() const { return fp32_pin_; }
  void set_fp32_pin(std::string why) { fp32_pin_ = std::move(why); }

  // "node 'fc1/MatMul' (MatMul)", for messages.
  std::string describe() const;

 private:
  friend class Graph;
  friend struct IrTestAccess;
  Node(Graph* graph, std::string domain, std::string op_type, const OpDef* def)
      : graph_(graph), domain_(std::move(domain)), op_type_(std::move(op_type)), def_(def) {}
  const AttrValue& attr_or_default(std::string_view name) const;

  Graph* graph_;
  std::string domain_;
  std::string op_type_;
  const OpDef* def_;
  std::string name_;
  std::string doc_string_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> outputs_;
  Attributes attrs_;
  PrecisionDecision precision_;
  std::string fp32_pin_;
  std::list<std::unique_ptr<Node>>::iterator position_;
};

class Graph {
 public:
  explicit Graph(std::string name = "main");
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A deep copy: same nodes, values, names, attributes and decisions, in the same order.
  std::unique_ptr<Graph> clone() const;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Opset imports by domain ("" is the standard domain).
  const std::map<std::string, int64_t, std::less<>>& opset_imports() const { return opsets_; }
  void set_opset(std::string domain, int64_t version);
  // The opset of `domain`; kDefaultOnnxOpset for the standard domain when none was set, 1 for
  // others.
  int64_t opset(std::string_view domain) const;

  Value* add_input(std::string name, TensorType type);
  Value* add_initializer(std::string name, Tensor data);
  // Replaces an initializer's data; the type follows the data.
  void set_initializer_data(Value* initializer, Tensor data);
  // Removes an input or initializer that nothing reads.
  void erase_graph_value(Value* value);
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& initializers() const { return initializers_; }

  const std::vector<Value*>& outputs() const { return outputs_; }
  void add_output(Value* value);
  void set_output(int i, Value* value);
  void erase_output(int i);

  // A training graph's state (parameters, optimizer moments, step counter, running statistics):
  // after each run, the graph output named `update` is written over the initializer named
  // `state`. Kept by name, since rewrites keep graph-output names but may replace the values.
  struct StateUpdate {
    std::string state;
    std::string update;
    bool operator==(const StateUpdate&) const = default;
  };
  const std::vector<StateUpdate>& state_updates() const { return state_updates_; }
  void add_state_update(std::string state, std::string update) {
    state_updates_.push_back({std::move(state), std::move(update)});
  }

  // A compiled training model is its eval graph with the training step beside it (the file's
  // ModelProto.graph and training_info[0].algorithm; docs/training-graph.md). The step is a
  // complete graph of its own: it holds copies of the parameters it shares with the eval graph.
  const Graph* training_step() const { return training_step_.get(); }
  Graph* mutable_training_step() { return training_step_.get(); }
  void set_training_step(std::unique_ptr<Graph> step) { training_step_ = std::move(step); }
  std::unique_ptr<Graph> take_training_step() { return std::move(training_step_); }

  // Key/value strings saved with the model (ONNX metadata_props), e.g. the training recipe.
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }
  void set_metadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
  }
  void erase_metadata(std::string_view key) {
    if (auto it = metadata_.find(key); it != metadata_.end()) metadata_.erase(it);
  }

  // Creates a node of `op_type` in `domain`, reading `operands`, with one output per entry of
  // `output_types` (nullopt: an omitted optional output). It is inserted before `before`, or
  // appended when `before` is null. Outputs are unnamed until set_name.
  Node* create_node(std::string_view domain, std::string_view op_type,
                    const std::vector<Value*>& operands,
                    const std::vector<std::optional<TensorType>>& output_types,
                    Attributes attrs = {}, Node* before = nullptr);
  // Removes a node whose outputs nothing reads.
  void erase_node(Node* node);
  // Moves `node` to just before `before` (null: to the end).
  void move_node(Node* node, Node* before);

  // Nodes in order. Do not erase while iterating this; iterate node_list() instead.
  const std::list<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Node*> node_list() const;
  int num_nodes() const { return static_cast<int>(nodes_.size()); }

  // A name not used by any value of the graph yet, made from `hint`: the hint itself, else
  // `hint.K` with the smallest K >= 1 that is free. Amortized constant time (the graph keeps its
  // names; see name_counts_).
  std::string unique_value_name(std::string_view hint) const;

 private:
  friend class Value;
  // Keeps name_counts_ and next_suffix_ right when a value of this graph takes, changes or
  // drops a name (`delta` +1 or -1).
  void count_name(const std::string& name, int delta);
  std::string name_;
  std::map<std::string, int64_t, std::less<>> opsets_;
  std::list<std::unique_ptr<Value>> graph_values_;  // inputs and initializers
  std::vector<Value*> inputs_;
  std::vector<Value*> initializers_;
  std::vector<Value*> outputs_;
  std::vector<StateUpdate> state_updates_;
  std::unique_ptr<Graph> training_step_;
  std::map<std::string, std::string, std::less<>> metadata_;
  std::list<std::unique_ptr<Node>> nodes_;
  // How many live values (inputs, initializers, node outputs) carry each name: names are labels,
  // so two values may share one. And per hint of unique_value_name, a K such that every
  // `hint.J` with 1 <= J < K is in use (lowered when one of them is freed), so the search for a
  // free suffix starts there instead of at 1.
  std::unordered_map<std::string, int> name_counts_;
  mutable std::unordered_map<std::string, int64_t> next_suffix_;
};

}  // namespace ampc
