// ONNX import of one graph: GraphProto -> Graph, generic over each op's OpDef (no per-op code);
// compiler/onnx_import.cc reads the model around it (the file, opset conversion, training_info).
//
// Every malformed piece (unknown op or attribute, wrong data size, dangling name, dynamic dim)
// becomes a Status that names the node or value, never a check failure. Output types come from
// the ops' inference, run node by node with one TypePropagator so that shape arithmetic resolves
// as nodes arrive.
#include "compiler/onnx_graph_import.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "compiler/onnx_buffer_updates.h"
#include "compiler/onnx_common.h"
#include "compiler/onnx_detach.h"
#include "compiler/onnx_input_types.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_lowering.h"
#include "compiler/onnx_metadata.h"
#include "compiler/onnx_op_lookup.h"
#include "compiler/onnx_opset_conversion.h"
#include "compiler/onnx_optimizer_folds.h"
#include "compiler/onnx_ragged.h"
#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "compiler/verifier.h"

namespace ampc::onnx_io {
namespace {

// "node 'fc1' (MatMul)" or "node MatMul producing 'y'": the same words Node::describe uses.
std::string describe_proto(const onnx::NodeProto& node) {
  const std::string op = node.domain().empty() || node.domain() == "ai.onnx"
                             ? node.op_type()
                             : str_cat(node.domain(), ".", node.op_type());
  if (!node.name().empty()) return str_cat("node '", node.name(), "' (", op, ")");
  if (node.output_size() > 0) return str_cat("node ", op, " producing '", node.output(0), "'");
  return str_cat("node ", op);
}

class Importer : public onnx_io::ImportSink {
 public:
  // `outer`: the graph whose initializers this one may read by name (the eval graph, when
  // importing the training step); each one read is copied in, so the result stands alone.
  Importer(const ImportOptions& options, std::string base_dir, const Graph* outer = nullptr)
      : options_(options), base_dir_(std::move(base_dir)), outer_(outer) {}

  absl::StatusOr<std::unique_ptr<Graph>> run_graph(const onnx::ModelProto& model,
                                                   const onnx::GraphProto& graph) {
    graph_ = std::make_unique<Graph>(graph.name().empty() ? "main" : graph.name());
    AMPC_RETURN_IF_ERROR(import_opsets(model));
    AMPC_RETURN_IF_ERROR(import_initializers(graph));
    AMPC_RETURN_IF_ERROR(import_inputs(graph));
    if (model.functions_size() == 0) {
      for (const onnx::NodeProto& node : graph.node()) AMPC_RETURN_IF_ERROR(import_node(node));
    } else {
      std::map<std::string, int64_t, std::less<>> opsets = graph_->opset_imports();
      AMPC_ASSIGN_OR_RETURN(std::vector<onnx::NodeProto> nodes,
                            onnx_io::inline_functions(model, graph, opsets));
      for (const auto& [domain, version] : opsets) graph_->set_opset(domain, version);
      for (const onnx::NodeProto& node : nodes) AMPC_RETURN_IF_ERROR(import_node(node));
    }
    AMPC_RETURN_IF_ERROR(import_outputs(graph));
    if (options_.buffer_updates) {
      AMPC_RETURN_IF_ERROR(onnx_io::import_buffer_updates(graph, *this, *graph_));
    }
    AMPC_RETURN_IF_ERROR(verify(*graph_));
    if (const std::vector<std::string> folded = folds_.folded_batch_norms(); !folded.empty()) {
      graph_->set_metadata(onnx_io::kFoldedBatchNormsKey, str_join(folded, ", "));
    }
    if (!shadowed_.empty()) {
      graph_->set_metadata(onnx_io::kShadowedNamesKey, str_join(shadowed_, ", "));
    }
    if (const std::vector<std::string> missing = missing_parameters(graph); !missing.empty()) {
      graph_->set_metadata(onnx_io::kMissingParametersKey, str_join(missing, ", "));
    }
    return std::move(graph_);
  }

 private:
  // The parameters `graph`'s signature declares and a node's FX node reads (%p_w) that are not
  // in the imported graph (after the optimizer folds' copies) and that no node reading them
  // holds in another form: an initializer the signature does not declare, of floats not all
  // equal (a transposed or concatenated weight the optimizer folded, which trains as the
  // parameter would). What is left was removed (a zero bias) or became uniform constants.
  std::vector<std::string> missing_parameters(const onnx::GraphProto& graph) {
    const std::unordered_map<std::string, std::string> names =
        onnx_io::torch_names_by_fx_name(graph);
    const std::unordered_map<std::string, Value::Declared> declared =
        onnx_io::torch_signature(graph);
    auto stands_in = [&](const std::string& input) {
      auto it = values_.find(input);
      if (it == values_.end() || it->second->kind() != Value::Kind::kInitializer ||
          it->second->declared() != Value::Declared::kUnknown ||
          !is_arithmetic_float(it->second->dtype())) {
        return false;
      }
      const Tensor& data = *it->second->initializer();
      for (int64_t i = 1; i < data.num_elements(); ++i) {
        if (data.element_as_double(i) != data.element_as_double(0)) return true;
      }
      return false;
    };
    std::map<std::string, bool> read;  // parameter -> whether a reader holds it in another form
    for (const onnx::NodeProto& node : graph.node()) {
      const std::optional<std::string> fx = onnx_io::torch_fx_node(node);
      if (!fx) continue;
      for (const std::string& arg : onnx_io::torch_tensor_args(*fx)) {
        const auto name = names.find(arg);
        if (name == names.end() || values_.contains(name->second)) continue;
        const auto kind = declared.find(name->second);
        if (kind == declared.end() || kind->second != Value::Declared::kParameter) continue;
        bool& held = read[name->second];
        held = held || std::any_of(node.input().begin(), node.input().end(), stands_in);
      }
    }
    std::vector<std::string> missing;
    for (const auto& [name, held] : read) {
      if (!held) missing.push_back(name);
    }
    return missing;
  }

  absl::Status import_opsets(const onnx::ModelProto& model) {
    std::unordered_set<std::string> seen;
    for (const onnx::OperatorSetIdProto& opset : model.opset_import()) {
      const std::string domain = opset.domain() == "ai.onnx" ? "" : opset.domain();
      if (!seen.insert(domain).second) {
        return invalid(
            str_cat("opset_import lists domain '", onnx_io::domain_label(domain), "' twice"));
      }
      if (opset.version() < 1) {
        return invalid(str_cat("opset_import gives domain '", onnx_io::domain_label(domain),
                               "' version ", opset.version(), "; versions start at 1"));
      }
      if (domain.empty() && opset.version() > onnx_io::kNewestOnnxOpset) {
        return invalid(str_cat("opset_import gives ai.onnx version ", opset.version(),
                               "; ampc implements ai.onnx up to opset ", onnx_io::kNewestOnnxOpset,
                               " (export the model again at opset ", onnx_io::kNewestOnnxOpset,
                               " or lower)"));
      }
      graph_->set_opset(domain, opset.version());
    }
    return absl::OkStatus();
  }

  // Binds `name` to `value`; ONNX values are defined once.
  absl::Status define(const std::string& name, Value* value, std::string_view definer) {
    if (!values_.emplace(name, value).second) {
      return invalid(str_cat(definer, " defines value '", name, "', which is already defined"));
    }
    return absl::OkStatus();
  }

  // Binds a node's output `name` to `value`. A name an initializer already has is shadowed from
  // here on: PyTorch's dynamo exporter (optimize=False) names a node's output after its FX node
  // and an initializer after its buffer or parameter, so a buffer `index` or `mean` and an
  // aten.index or aten.mean call give two values one name, which ONNX forbids (its checker and
  // onnxruntime refuse the file). Read in node order, as ONNX's reference evaluator reads it (and
  // gives PyTorch's results), the nodes before the output read the initializer and those after
  // it the output; so the output gets a fresh name here, the initializer keeps its own (a
  // parameter's name is what --trainable and checkpoints know), and the name is recorded for the
  // training-step pass to warn of (kShadowedNamesKey). Any other redefinition is an error.
  absl::Status define_output(const std::string& name, Value* value, std::string_view definer) {
    auto it = values_.find(name);
    if (it == values_.end() || it->second->kind() != Value::Kind::kInitializer) {
      value->set_name(name);
      return define(name, value, definer);
    }
    const std::string fresh = fresh_name(name);
    value->set_name(fresh);
    AMPC_RETURN_IF_ERROR(define(fresh, value, definer));  // may rehash: `it` is stale
    values_[name] = value;
    shadowed_.push_back(name);
    return absl::OkStatus();
  }

  absl::Status import_initializers(const onnx::GraphProto& graph) {
    // Sparse initializers, dense (named by their values, as ONNX names them), after the others.
    std::vector<onnx::TensorProto> densified;
    for (const onnx::SparseTensorProto& sparse : graph.sparse_initializer()) {
      const std::string what = str_cat("sparse initializer '", sparse.values().name(), "'");
      AMPC_ASSIGN_OR_RETURN(Tensor data,
                            onnx_io::tensor_from_sparse_proto(sparse, what, base_dir_));
      onnx::TensorProto& proto = densified.emplace_back();
      onnx_io::tensor_to_proto(data, &proto);
      proto.set_name(sparse.values().name());
    }
    const std::unordered_map<std::string, Value::Declared> declared =
        onnx_io::torch_signature(graph);
    const int count = graph.initializer_size() + static_cast<int>(densified.size());
    for (int i = 0; i < count; ++i) {
      const onnx::TensorProto& proto =
          i < graph.initializer_size()
              ? graph.initializer(i)
              : densified[static_cast<size_t>(i - graph.initializer_size())];
      if (proto.name().empty()) return invalid(str_cat("initializer #", i, " has no name"));
      const std::string what = str_cat("initializer '", proto.name(), "'");
      if (outer_value(proto.name()) != nullptr) {
        return invalid(str_cat(what, " of the training step shadows the eval graph's"));
      }
      AMPC_ASSIGN_OR_RETURN(Tensor data, onnx_io::tensor_from_proto(proto, what, base_dir_));
      Value* value = graph_->add_initializer(proto.name(), std::move(data));
      value->set_constant(proto.doc_string() == onnx_io::kConstantDoc);
      // The file's own record first, then PyTorch's graph signature.
      if (const Value::Declared doc = onnx_io::declared_from_doc(proto.doc_string());
          doc != Value::Declared::kUnknown) {
        value->set_declared(doc);
      } else if (auto it = declared.find(proto.name()); it != declared.end()) {
        value->set_declared(it->second);
      }
      AMPC_RETURN_IF_ERROR(define(proto.name(), value, what));
    }
    folds_.read_graph(graph);
    return absl::OkStatus();
  }

  absl::Status import_inputs(const onnx::GraphProto& graph) {
    // Files older than IR 4 list initializers as inputs too; the initializer is the value.
    std::vector<const onnx::ValueInfoProto*> inputs;
    for (int i = 0; i < graph.input_size(); ++i) {
      const onnx::ValueInfoProto& info = graph.input(i);
      if (info.name().empty()) return invalid(str_cat("graph input #", i, " has no name"));
      auto existing = values_.find(info.name());
      if (existing != values_.end() && existing->second->kind() == Value::Kind::kInitializer) {
        continue;
      }
      inputs.push_back(&info);
    }
    AMPC_ASSIGN_OR_RETURN(std::vector<TensorType> types,
                          onnx_io::graph_input_types(inputs, options_));
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& name = inputs[i]->name();
      AMPC_RETURN_IF_ERROR(
          define(name, graph_->add_input(name, types[i]), str_cat("graph input '", name, "'")));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Value*>> node_operands(const onnx::NodeProto& proto,
                                                    const std::string& label) {
    std::vector<Value*> operands;
    for (const std::string& name : proto.input()) {
      if (name.empty()) {
        operands.push_back(nullptr);  // an omitted optional input
        continue;
      }
      Value* value = find_value(name);
      if (value == nullptr && lowering_.is_sequence(name)) {
        return absl::UnimplementedError(
            str_cat(label, " reads sequence '", name, "' (defined by ", lowering_.defined_by(name),
                    "); ampc lowers sequences to tensors at import, so only ",
                    str_join(onnx_io::ops_lowered_at_import(), ", "), " may read one"));
      }
      if (auto why = undefined_.find(name); value == nullptr && why != undefined_.end()) {
        return absl::UnimplementedError(str_cat(label, " reads '", name, "', ", why->second));
      }
      if (value == nullptr) {
        return invalid(str_cat(label, " reads value '", name,
                               "', which is not defined before it (ONNX requires nodes in "
                               "topological order)"));
      }
      operands.push_back(value);
    }
    // Trailing omitted inputs say nothing; dropping them keeps one form per node.
    while (!operands.empty() && operands.back() == nullptr) operands.pop_back();
    return operands;
  }

  absl::Status import_node(const onnx::NodeProto& given) override {
    AMPC_ASSIGN_OR_RETURN(std::optional<onnx::NodeProto> dense, densified_constant(given));
    const onnx::NodeProto& proto = dense ? *dense : given;
    AMPC_ASSIGN_OR_RETURN(std::optional<onnx::NodeProto> rewired, detached_.read(proto, *this));
    const onnx::NodeProto& read = rewired ? *rewired : proto;
    const std::vector<std::pair<int, std::string>> unmerged = folds_.read(read, *this);
    if (unmerged.empty()) return import_node_as_read(read);
    // Parameters the dynamo exporter's optimizer merged, each a copy of the one it kept.
    onnx::NodeProto rewritten = read;
    for (const auto& [input, parameter] : unmerged) {
      if (parameter.empty()) {  // a constant the optimizer merged into a parameter
        const Value* kept = find_value(read.input(input));
        const std::string name = fresh_name(str_cat(read.input(input), ".constant"));
        Value* copy = graph_->add_initializer(name, *kept->initializer());
        copy->set_constant(true);
        values_.emplace(name, copy);
        rewritten.set_input(input, name);
        continue;
      }
      if (find_value(parameter) == nullptr) {
        const Value* kept = find_value(read.input(input));
        Value* copy = graph_->add_initializer(parameter, *kept->initializer());
        copy->set_declared(kept->declared());
        values_.emplace(parameter, copy);
      }
      rewritten.set_input(input, parameter);
    }
    return import_node_as_read(rewritten);
  }

  // A Constant given by `sparse_value` as one given by the dense `value` it stands for; nullopt
  // for every other node.
  absl::StatusOr<std::optional<onnx::NodeProto>> densified_constant(
      const onnx::NodeProto& proto) const {
    if (proto.op_type() != "Constant" || !(proto.domain().empty() || proto.domain() == "ai.onnx")) {
      return std::nullopt;
    }
    for (int i = 0; i < proto.attribute_size(); ++i) {
      const onnx::AttributeProto& attr = proto.attribute(i);
      if (attr.name() != "sparse_value") continue;
      AMPC_ASSIGN_OR_RETURN(Tensor data,
                            onnx_io::tensor_from_sparse_proto(
                                attr.sparse_tensor(),
                                str_cat(describe_proto(proto), ": its sparse_value"), base_dir_));
      onnx::NodeProto dense = proto;
      onnx::AttributeProto* value = dense.mutable_attribute(i);
      value->Clear();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      onnx_io::tensor_to_proto(data, value->mutable_t());
      return dense;
    }
    return std::nullopt;
  }

  absl::Status import_node_as_read(const onnx::NodeProto& proto) {
    const std::string label = describe_proto(proto);
    const std::string domain = proto.domain() == "ai.onnx" ? "" : proto.domain();
    if (onnx_io::reads_or_makes_ragged(proto, *this)) {
      return lower(proto, [&] { return onnx_io::lower_ragged(proto, label, *this); });
    }
    if (onnx_io::lowered_at_import(domain, proto.op_type()) && domain_listed(domain)) {
      return lower(proto, [&] { return lowering_.lower(proto, label, *this); });
    }
    if (domain.empty() && domain_listed(domain) &&
        onnx_io::legacy_form_lowered(proto.op_type(), graph_->opset(domain))) {
      return lower(proto, [&] { return onnx_io::lower_legacy_form(proto, label, *this); });
    }
    if (domain.empty() && proto.op_type() == "SoftmaxCrossEntropyLoss" && proto.input_size() > 1) {
      const Value* labels = find_value(proto.input(1));
      const bool soft = labels != nullptr && is_arithmetic_float(labels->dtype());
      const double smoothing = onnx_io::torch_label_smoothing(proto);
      if (soft || smoothing > 0) {
        return lower(proto, [&] {
          return soft ? onnx_io::lower_soft_target_cross_entropy(proto, label, *this, smoothing)
                      : onnx_io::lower_label_smoothed_cross_entropy(proto, label, *this, smoothing);
        });
      }
    }
    AMPC_ASSIGN_OR_RETURN(const OpDef* def, onnx_io::find_op_def(proto, domain, *graph_, label));
    AMPC_ASSIGN_OR_RETURN(
        Attributes attrs,
        onnx_io::node_attrs(proto, *def, graph_->opset(def->domain), base_dir_, label));
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> operands, node_operands(proto, label));
    if (domain.empty() && proto.op_type() == "Conv") drop_computed_zero_bias(operands);
    std::vector<std::string> output_names(proto.output().begin(), proto.output().end());
    std::string doc = proto.doc_string();
    std::optional<PrecisionDecision> decision = onnx_io::take_precision_line(doc);
    AMPC_ASSIGN_OR_RETURN(Node * node,
                          add_node(domain, proto.op_type(), std::move(operands), std::move(attrs),
                                   output_names, proto.name(), label));
    AMPC_CHECK(node->def() == def);
    if (decision) node->mutable_precision() = *std::move(decision);
    node->set_doc_string(std::move(doc));
    return absl::OkStatus();
  }

  // A Conv bias of zeros computed from constants (not a parameter, nor read from one) adds
  // nothing whatever its shape, so it is dropped: PyTorch's dynamo exporter writes a Conv3d
  // without bias with one of shape [M, 2], which ONNX's Conv does not allow.
  void drop_computed_zero_bias(std::vector<Value*>& operands) {
    if (operands.size() < 3 || operands[2] == nullptr) return;
    const Tensor* bias = known_value(operands[2]);
    if (bias == nullptr || !bias->has_data() ||
        onnx_io::reads_float_initializer(operands[2], *this)) {
      return;
    }
    for (int64_t i = 0; i < bias->num_elements(); ++i) {
      if (bias->element_as_double(i) != 0.0) return;
    }
    operands.resize(2);
  }

  // Runs `lowering` with `proto` as the node being lowered, then restores the node lowered
  // before (an If's branch and a Loop's body lower nodes of their own inside theirs).
  template <typename Lowering>
  absl::Status lower(const onnx::NodeProto& proto, Lowering lowering) {
    const onnx::NodeProto* outer = std::exchange(lowered_, &proto);
    absl::Status status = lowering();
    lowered_ = outer;
    return status;
  }

  bool domain_listed(const std::string& domain) const {
    return graph_->opset_imports().contains(domain);
  }

  // Creates a node and binds its outputs to `output_names` ("" for an output not produced),
  // then infers their types.
  absl::StatusOr<Node*> add_node(const std::string& domain, std::string_view op_type,
                                 std::vector<Value*> operands, Attributes attrs,
                                 const std::vector<std::string>& output_names,
                                 const std::string& node_name, const std::string& label) {
    int num_outputs = static_cast<int>(output_names.size());
    while (num_outputs > 0 && output_names[num_outputs - 1].empty()) --num_outputs;
    // Placeholder types: the real ones come from inference once the node exists.
    std::vector<std::optional<TensorType>> placeholders;
    for (int i = 0; i < num_outputs; ++i) {
      placeholders.push_back(output_names[i].empty() ? std::nullopt
                                                     : std::optional<TensorType>(TensorType{}));
    }
    Node* node = graph_->create_node(domain, op_type, operands, placeholders, std::move(attrs));
    node->set_name(node_name);
    for (int i = 0; i < num_outputs; ++i) {
      if (!node->has_output(i)) continue;
      AMPC_RETURN_IF_ERROR(define_output(output_names[i], node->output(i), label));
    }
    AMPC_ASSIGN_OR_RETURN(std::vector<std::optional<TensorType>> types, propagator_.visit(*node));
    for (int i = 0; i < num_outputs; ++i) {
      if (!node->has_output(i)) continue;
      // Shapes computed from values in the file (Expand, ConstantOfShape) can be absurd; later
      // stages multiply dims, so their sizes must not overflow.
      if (!onnx_io::checked_num_elements(types[i]->shape)) {
        return invalid(str_cat(label, ": output ", i, " ('", output_names[i],
                               "') would have shape ", shape_to_string(types[i]->shape),
                               ", which is too large"));
      }
      node->output(i)->set_type(*types[i]);
    }
    return node;
  }

  // ---- onnx_io::ImportSink, for the ops lowered at import ----

  Value* tensor(const std::string& name) override { return find_value(name); }

  const Tensor* known_value(const Value* value) override {
    if (value->kind() == Value::Kind::kInitializer) return value->initializer();
    return propagator_.known_value(value);
  }

  absl::StatusOr<std::vector<Value*>> emit_in(std::string_view domain, std::string_view op_type,
                                              std::vector<Value*> operands, Attributes attrs,
                                              const std::vector<std::string>& output_names,
                                              const std::string& node_name) override {
    const std::string label = str_cat("node '", node_name, "' (lowered to ",
                                      domain.empty() ? "" : str_cat(domain, "."), op_type, ")");
    if (!domain.empty() && !graph_->opset_imports().contains(domain)) {
      graph_->set_opset(std::string(domain), 1);
    }
    const int64_t opset = graph_->opset(domain);
    const OpDef* def = OpRegistry::global().find(domain, op_type, opset);
    if (def == nullptr) {
      return absl::UnimplementedError(
          str_cat(label, ": ", op_type, " is not supported at opset ", opset));
    }
    // Integer attributes this opset takes as inputs become constant initializers read as
    // inputs, so the node reads as a file of that opset would have written it.
    for (const AttrAsInput& form : def->attrs_as_inputs) {
      auto it = attrs.find(form.attr);
      if (opset < form.since_opset || it == attrs.end() ||
          attr_kind(it->second) != AttrKind::kInts) {
        continue;
      }
      const auto& values = std::get<std::vector<int64_t>>(it->second);
      const std::string name = fresh_name(str_cat(node_name, "/", form.attr));
      Value* constant = graph_->add_initializer(
          name, Tensor::from_i64({static_cast<int64_t>(values.size())}, values));
      constant->set_constant(true);
      AMPC_RETURN_IF_ERROR(define(name, constant, label));
      if (static_cast<int>(operands.size()) <= form.input) operands.resize(form.input + 1);
      operands[form.input] = constant;
      attrs.erase(it);
    }
    AMPC_ASSIGN_OR_RETURN(Node * node, add_node(std::string(domain), op_type, std::move(operands),
                                                std::move(attrs), output_names, node_name, label));
    // A lowering to one node names it as the lowered node: it keeps that node's doc_string and
    // precision decision too (ConvTranspose written back from ConvGradData).
    if (lowered_ != nullptr && !node_name.empty() && node_name == lowered_->name()) {
      std::string doc = lowered_->doc_string();
      if (std::optional<PrecisionDecision> decision = onnx_io::take_precision_line(doc)) {
        node->mutable_precision() = *std::move(decision);
      }
      node->set_doc_string(std::move(doc));
    }
    std::vector<Value*> outputs;
    for (int i = 0; i < node->num_outputs(); ++i) outputs.push_back(node->output(i));
    return outputs;
  }

  int64_t opset() override { return graph_->opset(""); }

  void leave_undefined(const std::string& name, std::string why) override {
    undefined_.insert_or_assign(name, std::move(why));
  }

  const std::string* why_undefined(const std::string& name) const override {
    auto it = undefined_.find(name);
    return it == undefined_.end() ? nullptr : &it->second;
  }

  bool is_sequence(const std::string& name) const override { return lowering_.is_sequence(name); }

  absl::Status bind(const std::string& name, const std::string& existing,
                    const std::string& node_name) override {
    if (lowering_.is_sequence(existing)) {
      return lowering_.alias(name, existing, str_cat("node '", node_name, "'"));
    }
    Value* value = find_value(existing);
    if (value == nullptr) {
      return absl::InternalError(str_cat("binds '", name, "' to undefined '", existing, "'"));
    }
    return emit("Identity", {value}, {}, {name}, node_name).status();
  }

  onnx_io::RaggedValues& ragged() override { return ragged_; }

  std::string fresh_name(std::string_view hint) override {
    std::string name(hint);
    for (int n = 1; values_.contains(name) || lowering_.is_sequence(name); ++n) {
      name = str_cat(hint, "_", n);
    }
    return name;
  }

  absl::Status import_outputs(const onnx::GraphProto& graph) {
    for (int i = 0; i < graph.output_size(); ++i) {
      const std::string& name = graph.output(i).name();
      if (name.empty()) return invalid(str_cat("graph output #", i, " has no name"));
      Value* value = find_value(name);
      if (value == nullptr && lowering_.is_sequence(name)) {
        return absl::UnimplementedError(str_cat("graph output '", name, "' is a sequence (from ",
                                                lowering_.defined_by(name),
                                                "); ampc supports tensor outputs only"));
      }
      if (auto why = undefined_.find(name); value == nullptr && why != undefined_.end()) {
        return absl::UnimplementedError(str_cat("graph output '", name, "' is ", why->second));
      }
      if (value == nullptr) {
        return invalid(
            str_cat("graph output '", name, "' is not produced by any node, input or initializer"));
      }
      graph_->add_output(value);
    }
    return absl::OkStatus();
  }

  // The outer graph's (first) initializer named `name`, or null; indexed on first use.
  const Value* outer_value(const std::string& name) {
    if (outer_ == nullptr) return nullptr;
    if (outer_initializers_.empty()) {
      for (const Value* init : outer_->initializers()) {
        outer_initializers_.try_emplace(init->name(), init);
      }
    }
    auto it = outer_initializers_.find(name);
    return it == outer_initializers_.end() ? nullptr : it->second;
  }

  // The value `name` is bound to, or a copy of the outer graph's initializer of that name, or
  // null.
  Value* find_value(const std::string& name) {
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    const Value* outer = outer_value(name);
    if (outer == nullptr) return nullptr;
    Value* copy = graph_->add_initializer(name, *outer->initializer());
    copy->set_constant(outer->is_constant());
    copy->set_declared(outer->declared());
    values_.emplace(name, copy);
    return copy;
  }

  ImportOptions options_;  // a copy: callers pass temporaries
  std::string base_dir_;
  const Graph* outer_;
  std::unordered_map<std::string, const Value*> outer_initializers_;  // outer_value's index
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, Value*> values_;
  std::vector<std::string> shadowed_;  // initializer names a node output redefined (define_output)
  onnx_io::DetachedInputs detached_;
  onnx_io::OptimizerFolds folds_;
  TypePropagator propagator_;
  onnx_io::ImportLowering lowering_;
  onnx_io::RaggedValues ragged_;
  // Outputs of lowered nodes that ampc does not compute, and why (ImportSink::leave_undefined).
  std::unordered_map<std::string, std::string> undefined_;
  // The node being lowered (import_node), while its lowering emits nodes.
  const onnx::NodeProto* lowered_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> import_graph(const onnx::ModelProto& model,
                                                    const onnx::GraphProto& graph,
                                                    const ImportOptions& options,
                                                    const std::string& base_dir,
                                                    const Graph* outer) {
  absl::StatusOr<std::unique_ptr<Graph>> imported =
      Importer(options, base_dir, outer).run_graph(model, graph);
  if (imported.ok() && &graph == &model.graph()) {
    (*imported)->set_metadata(kSourceProducerKey, model.producer_name());
  }
  return imported;
}

}  // namespace ampc::onnx_io
