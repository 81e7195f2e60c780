#include "compiler/ir.h"

#include <algorithm>
#include <unordered_map>

#include "ampc/status.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"

namespace ampc {

// ---- Value ------------------------------------------------------------------------------------

std::string_view Value::declared_name(Declared declared) {
  switch (declared) {
    case Declared::kParameter:
      return "parameter";
    case Declared::kBuffer:
      return "buffer";
    case Declared::kFrozenParameter:
      return "frozen parameter";
    case Declared::kUnknown:
      break;
  }
  return "";
}

void Value::set_name(std::string name) {
  graph_->count_name(name_, -1);
  name_ = std::move(name);
  graph_->count_name(name_, +1);
}

void Value::replace_all_uses_with(Value* other) {
  AMPC_CHECK(other != nullptr && other != this && other->graph_ == graph_);
  // set_operand edits uses_, so walk a copy.
  const std::vector<Use> uses = uses_;
  for (const Use& use : uses) use.user->set_operand(use.operand, other);
  if (is_graph_output()) {
    if (other->can_take_output_name()) other->set_name(name_);
    for (int i = 0; i < static_cast<int>(graph_->outputs().size()); ++i) {
      if (graph_->outputs()[i] == this) graph_->set_output(i, other);
    }
  }
}

// ---- Node -------------------------------------------------------------------------------------

Node::~Node() {
  for (int i = 0; i < num_operands(); ++i) set_operand(i, nullptr);
}

void Node::set_operand(int i, Value* value) {
  Value* old = operands_.at(i);
  if (old == value) return;
  if (old != nullptr) {
    auto it = std::find(old->uses_.begin(), old->uses_.end(), Use{this, i});
    AMPC_CHECK(it != old->uses_.end());
    old->uses_.erase(it);
  }
  operands_[i] = value;
  if (value != nullptr) {
    AMPC_CHECK(value->graph_ == graph_);
    value->uses_.push_back(Use{this, i});
  }
}

void Node::append_operand(Value* value) {
  operands_.push_back(nullptr);
  set_operand(num_operands() - 1, value);
}

void Node::truncate_operands(int count) {
  AMPC_CHECK(count >= 0 && count <= num_operands());
  for (int i = count; i < num_operands(); ++i) set_operand(i, nullptr);
  operands_.resize(count);
}

const AttrValue* Node::find_attr(std::string_view name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

const AttrValue& Node::attr_or_default(std::string_view name) const {
  if (const AttrValue* value = find_attr(name)) return *value;
  const AttrSpec* spec = def_ ? def_->find_attr(name) : nullptr;
  if (spec == nullptr || !spec->default_value) {
    std::fprintf(stderr, "%s: attribute '%.*s' has no value and no default\n", describe().c_str(),
                 static_cast<int>(name.size()), name.data());
    AMPC_CHECK(false);
  }
  return *spec->default_value;
}

namespace {
template <typename T>
const T& get_attr(const Node& node, const AttrValue& value, std::string_view name) {
  const T* typed = std::get_if<T>(&value);
  if (typed == nullptr) {
    std::fprintf(stderr, "%s: attribute '%.*s' has kind %s\n", node.describe().c_str(),
                 static_cast<int>(name.size()), name.data(),
                 std::string(attr_kind_name(attr_kind(value))).c_str());
    AMPC_CHECK(false);
  }
  return *typed;
}
}  // namespace

int64_t Node::int_attr(std::string_view name) const {
  return get_attr<int64_t>(*this, attr_or_default(name), name);
}
float Node::float_attr(std::string_view name) const {
  return get_attr<float>(*this, attr_or_default(name), name);
}
const std::string& Node::string_attr(std::string_view name) const {
  return get_attr<std::string>(*this, attr_or_default(name), name);
}
const std::vector<int64_t>& Node::ints_attr(std::string_view name) const {
  return get_attr<std::vector<int64_t>>(*this, attr_or_default(name), name);
}
const std::vector<float>& Node::floats_attr(std::string_view name) const {
  return get_attr<std::vector<float>>(*this, attr_or_default(name), name);
}
const Tensor& Node::tensor_attr(std::string_view name) const {
  return get_attr<Tensor>(*this, attr_or_default(name), name);
}
DType Node::dtype_attr(std::string_view name) const {
  return get_attr<DType>(*this, attr_or_default(name), name);
}

std::string Node::describe() const {
  const std::string op = domain_.empty() ? op_type_ : str_cat(domain_, ".", op_type_);
  if (name_.empty()) {
    const std::string first_output =
        has_output(0) ? str_cat(" producing '", output(0)->name(), "'") : "";
    return str_cat("node ", op, first_output);
  }
  return str_cat("node '", name_, "' (", op, ")");
}

// ---- Graph ------------------------------------------------------------------------------------

Graph::Graph(std::string name) : name_(std::move(name)) {}

Graph::~Graph() {
  // Drop every edge first, so destruction does not depend on the nodes being in order.
  for (const auto& node : nodes_) {
    for (int i = 0; i < node->num_operands(); ++i) node->set_operand(i, nullptr);
  }
  nodes_.clear();
}

void Graph::set_opset(std::string domain, int64_t version) {
  if (domain == "ai.onnx") domain.clear();
  opsets_[std::move(domain)] = version;
}

int64_t Graph::opset(std::string_view domain) const {
  auto it = opsets_.find(domain);
  if (it != opsets_.end()) return it->second;
  return domain.empty() ? kDefaultOnnxOpset : 1;
}

Value* Graph::add_input(std::string name, TensorType type) {
  graph_values_.push_back(std::unique_ptr<Value>(
      new Value(this, Value::Kind::kGraphInput, std::move(name), std::move(type))));
  inputs_.push_back(graph_values_.back().get());
  inputs_.back()->position_ = std::prev(graph_values_.end());
  count_name(inputs_.back()->name(), +1);
  return inputs_.back();
}

Value* Graph::add_initializer(std::string name, Tensor data) {
  TensorType type = data.type();
  graph_values_.push_back(std::unique_ptr<Value>(
      new Value(this, Value::Kind::kInitializer, std::move(name), std::move(type))));
  Value* value = graph_values_.back().get();
  value->position_ = std::prev(graph_values_.end());
  value->data_ = std::move(data);
  initializers_.push_back(value);
  count_name(value->name(), +1);
  return value;
}

void Graph::set_initializer_data(Value* initializer, Tensor data) {
  AMPC_CHECK(initializer->kind_ == Value::Kind::kInitializer && initializer->graph_ == this);
  initializer->type_ = data.type();
  initializer->data_ = std::move(data);
}

void Graph::erase_graph_value(Value* value) {
  AMPC_CHECK(value->kind_ != Value::Kind::kNodeOutput && value->is_dead());
  auto& list = value->kind_ == Value::Kind::kGraphInput ? inputs_ : initializers_;
  // From the back: passes add initializers at the end and erase them last to first, so the
  // search and the shift stay short.
  list.erase(std::prev(std::find(list.rbegin(), list.rend(), value).base()));
  count_name(value->name(), -1);
  graph_values_.erase(value->position_);
}

Node* Graph::create_node(std::string_view domain, std::string_view op_type,
                         const std::vector<Value*>& operands,
                         const std::vector<std::optional<TensorType>>& output_types,
                         Attributes attrs, Node* before) {
  std::string dom(domain == "ai.onnx" ? "" : domain);
  const OpDef* def = OpRegistry::global().find(dom, op_type, opset(dom));
  auto node = std::unique_ptr<Node>(new Node(this, std::move(dom), std::string(op_type), def));
  node->attrs_ = std::move(attrs);
  for (Value* operand : operands) node->append_operand(operand);
  for (int i = 0; i < static_cast<int>(output_types.size()); ++i) {
    if (!output_types[i]) {
      node->outputs_.push_back(nullptr);
      continue;
    }
    auto value =
        std::unique_ptr<Value>(new Value(this, Value::Kind::kNodeOutput, "", *output_types[i]));
    value->producer_ = node.get();
    value->producer_output_ = i;
    count_name(value->name(), +1);
    node->outputs_.push_back(std::move(value));
  }
  Node* raw = node.get();
  auto pos = before ? before->position_ : nodes_.end();
  raw->position_ = nodes_.insert(pos, std::move(node));
  return raw;
}

void Graph::erase_node(Node* node) {
  AMPC_CHECK(node->graph_ == this);
  for (int i = 0; i < node->num_outputs(); ++i) {
    if (node->has_output(i)) AMPC_CHECK(node->output(i)->is_dead());
  }
  for (int i = 0; i < node->num_outputs(); ++i) {
    if (node->has_output(i)) count_name(node->output(i)->name(), -1);
  }
  nodes_.erase(node->position_);
}

void Graph::move_node(Node* node, Node* before) {
  AMPC_CHECK(node != before);
  auto pos = before ? before->position_ : nodes_.end();
  nodes_.splice(pos, nodes_, node->position_);
}

std::vector<Node*> Graph::node_list() const {
  std::vector<Node*> list;
  list.reserve(nodes_.size());
  for (const auto& node : nodes_) list.push_back(node.get());
  return list;
}

// A null output (which the verifier reports) counts for no value.
void Graph::add_output(Value* value) {
  outputs_.push_back(value);
  if (value != nullptr) ++value->graph_output_count_;
}

void Graph::set_output(int i, Value* value) {
  if (outputs_.at(i) != nullptr) --outputs_[i]->graph_output_count_;
  outputs_[i] = value;
  if (value != nullptr) ++value->graph_output_count_;
}

void Graph::erase_output(int i) {
  if (outputs_.at(i) != nullptr) --outputs_[i]->graph_output_count_;
  outputs_.erase(outputs_.begin() + i);
}

namespace {

std::string suffixed(std::string_view base, int64_t k) { return str_cat(base, ".", k); }

// `name` as `base.K` with K >= 1 written without leading zeros: the form unique_value_name
// makes. Returns false for any other name.
bool split_suffix(std::string_view name, std::string_view* base, int64_t* k) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == name.size() || name[dot + 1] == '0' ||
      name.size() - dot - 1 > 18) {
    return false;
  }
  int64_t value = 0;
  for (char c : name.substr(dot + 1)) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *base = name.substr(0, dot);
  *k = value;
  return true;
}

}  // namespace

void Graph::count_name(const std::string& name, int delta) {
  if (delta > 0) {
    ++name_counts_[name];
    return;
  }
  auto it = name_counts_.find(name);
  AMPC_CHECK(it != name_counts_.end() && it->second > 0);
  if (--it->second > 0) return;
  name_counts_.erase(it);
  // `base.K` is free again: a search from `base` must not start above K.
  std::string_view base;
  int64_t k = 0;
  if (!split_suffix(name, &base, &k)) return;
  auto next = next_suffix_.find(std::string(base));
  if (next != next_suffix_.end() && k < next->second) next->second = k;
}

std::string Graph::unique_value_name(std::string_view hint) const {
  std::string base(hint.empty() ? "t" : hint);
  if (!name_counts_.contains(base)) return base;
  int64_t& k = next_suffix_.try_emplace(base, 1).first->second;
  while (name_counts_.contains(suffixed(base, k))) ++k;
  // Not k + 1: the caller may not use the name, so `base.k` stays the first candidate.
  return suffixed(base, k);
}

std::unique_ptr<Graph> Graph::clone() const {
  auto copy = std::make_unique<Graph>(name_);
  copy->opsets_ = opsets_;
  std::unordered_map<const Value*, Value*> map;
  // Inputs and initializers keep their relative order in their own lists.
  for (const Value* v : inputs_) map[v] = copy->add_input(v->name(), v->type());
  for (const Value* v : initializers_) {
    map[v] = copy->add_initializer(v->name(), v->data_);
    map[v]->is_constant_ = v->is_constant_;
    map[v]->declared_ = v->declared_;
  }
  for (const auto& node : nodes_) {
    std::vector<Value*> operands;
    for (Value* operand : node->operands()) operands.push_back(operand ? map.at(operand) : nullptr);
    std::vector<std::optional<TensorType>> types;
    for (int i = 0; i < node->num_outputs(); ++i) {
      types.push_back(node->has_output(i) ? std::optional(node->output(i)->type()) : std::nullopt);
    }
    Node* n = copy->create_node(node->domain(), node->op_type(), operands, types, node->attrs());
    n->name_ = node->name_;
    n->doc_string_ = node->doc_string_;
    n->precision_ = node->precision_;
    n->fp32_pin_ = node->fp32_pin_;
    for (int i = 0; i < node->num_outputs(); ++i) {
      if (!node->has_output(i)) continue;
      n->output(i)->set_name(node->output(i)->name());
      map[node->output(i)] = n->output(i);
    }
  }
  for (const Value* v : outputs_) copy->add_output(map.at(v));
  copy->state_updates_ = state_updates_;
  copy->metadata_ = metadata_;
  if (training_step_ != nullptr) copy->training_step_ = training_step_->clone();
  return copy;
}

}  // namespace ampc
