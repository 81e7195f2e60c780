// Control flow at import (compiler/onnx_lowering.h): If and Loop.
//
// ampc runs static graphs, so control flow is resolved while the model is imported: an If by
// its condition (or, decided at run time, by a Where of both branches' outputs), a Loop by
// unrolling it. Both import the nodes of their subgraphs through the importer, so a subgraph's
// nodes are lowered, typed and folded as the model's own are, and a condition the body computes
// from the iteration number and shapes is known when it is read.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_ragged.h"

namespace ampc::onnx_io {
namespace {

using lowering::has_input;
using lowering::tensor_input;

using Renaming = std::unordered_map<std::string, std::string>;

// The graph attributes of `proto`, by name; any other attribute is an error.
absl::StatusOr<std::unordered_map<std::string, const onnx::GraphProto*>> graph_attributes(
    const onnx::NodeProto& proto, const std::string& label, const std::vector<std::string>& names) {
  std::unordered_map<std::string, const onnx::GraphProto*> graphs;
  for (const onnx::AttributeProto& attr : proto.attribute()) {
    if (std::find(names.begin(), names.end(), attr.name()) == names.end()) {
      return invalid(str_cat(label, ": attribute '", attr.name(), "' is not an attribute of ",
                             proto.op_type(), " (it has ", str_join(names, ", "), ")"));
    }
    if (attr.type() != onnx::AttributeProto::GRAPH || !attr.has_g()) {
      return invalid(str_cat(label, ": attribute '", attr.name(), "' must be a graph"));
    }
    graphs[attr.name()] = &attr.g();
  }
  for (const std::string& name : names) {
    if (!graphs.contains(name))
      return invalid(str_cat(label, ": attribute '", name, "' is missing"));
  }
  return graphs;
}

// A subgraph reads the enclosing graphs' values by name; its initializers (which PyTorch's
// dynamo exporter writes for constants) become Constant nodes, through the graphs nested in it.
absl::StatusOr<onnx::GraphProto> with_constant_nodes(const onnx::GraphProto& graph,
                                                     const std::string& what) {
  if (graph.sparse_initializer_size() > 0) {
    return absl::UnimplementedError(
        str_cat(what,
                " has sparse initializers; ampc takes a subgraph's constants as dense "
                "initializers or Constant nodes"));
  }
  onnx::GraphProto copy = graph;
  copy.clear_initializer();
  copy.clear_node();
  for (const onnx::TensorProto& initializer : graph.initializer()) {
    onnx::NodeProto* node = copy.add_node();
    node->set_op_type("Constant");
    node->set_name(initializer.name());
    node->add_output(initializer.name());
    onnx::AttributeProto* value = node->add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = initializer;
    value->mutable_t()->clear_name();
  }
  for (const onnx::NodeProto& node : graph.node()) {
    onnx::NodeProto* added = copy.add_node();
    *added = node;
    for (onnx::AttributeProto& attribute : *added->mutable_attribute()) {
      if (attribute.has_g()) {
        AMPC_ASSIGN_OR_RETURN(*attribute.mutable_g(), with_constant_nodes(attribute.g(), what));
      }
    }
  }
  return copy;
}

// One bool condition's value; an error naming `what` when it is not one bool known at import.
absl::StatusOr<bool> known_condition(const Value* value, const std::string& what,
                                     ImportSink& sink) {
  if (value->type().num_elements() != 1 || value->dtype() != DType::kBool) {
    return invalid(str_cat(what, " must be one bool, got ", type_to_string(value->type())));
  }
  const Tensor* known = sink.known_value(value);
  if (known == nullptr || !known->has_data()) {
    return absl::UnimplementedError(
        str_cat(what,
                " is computed at run time; ampc runs static graphs, so control flow needs "
                "conditions known at import (from constants, shapes and loop counters)"));
  }
  return known->element_as_i64(0) != 0;
}

bool is_loop(const onnx::NodeProto& node) {
  return node.op_type() == "Loop" && (node.domain().empty() || node.domain() == "ai.onnx");
}

// Every value name `graph` defines (its inputs and its nodes' outputs), with those of the graphs
// nested in its nodes but a nested Loop's body, whose names its own unrolling renames (under the
// nested Loop's name, which holds this iteration's).
void collect_defined(const onnx::GraphProto& graph, std::unordered_set<std::string>& names) {
  for (const onnx::ValueInfoProto& input : graph.input()) names.insert(input.name());
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& output : node.output()) {
      if (!output.empty()) names.insert(output);
    }
    if (is_loop(node)) continue;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) collect_defined(attr.g(), names);
      for (const onnx::GraphProto& nested : attr.graphs()) collect_defined(nested, names);
    }
  }
}

void rename(std::string& name, const Renaming& renamed) {
  if (auto it = renamed.find(name); it != renamed.end()) name = it->second;
}

// Renames `graph`'s values by `renamed` (names not in it are the enclosing graphs' and stay),
// and prefixes its nodes' names with `prefix`, through the nested graphs (a nested Loop's body:
// only its references to this graph's values; its unrolling names the rest).
void rename_graph(onnx::GraphProto& graph, const Renaming& renamed, const std::string& prefix) {
  for (onnx::ValueInfoProto& input : *graph.mutable_input()) rename(*input.mutable_name(), renamed);
  for (onnx::ValueInfoProto& output : *graph.mutable_output()) {
    rename(*output.mutable_name(), renamed);
  }
  graph.clear_value_info();
  for (onnx::NodeProto& node : *graph.mutable_node()) {
    for (std::string& input : *node.mutable_input()) rename(input, renamed);
    for (std::string& output : *node.mutable_output()) rename(output, renamed);
    if (!node.name().empty() && !prefix.empty()) node.set_name(str_cat(prefix, node.name()));
    const std::string nested_prefix = is_loop(node) ? "" : prefix;
    for (onnx::AttributeProto& attr : *node.mutable_attribute()) {
      if (attr.has_g()) rename_graph(*attr.mutable_g(), renamed, nested_prefix);
      for (onnx::GraphProto& nested : *attr.mutable_graphs()) {
        rename_graph(nested, renamed, nested_prefix);
      }
    }
  }
}

// A tensor or sequence the graph has defined under `name`; an error naming `what` otherwise.
absl::Status check_defined(const std::string& name, const std::string& what, ImportSink& sink) {
  if (sink.tensor(name) != nullptr || sink.is_sequence(name)) return absl::OkStatus();
  if (const std::string* why = sink.why_undefined(name)) {
    return absl::UnimplementedError(str_cat(what, " is '", name, "', ", *why));
  }
  return invalid(str_cat(what, " is '", name, "', which is not defined before it"));
}

// The trip count M when the Loop has one; an error when it is not one integer known at import.
absl::StatusOr<std::optional<int64_t>> trip_count(const onnx::NodeProto& proto,
                                                  const std::string& label, ImportSink& sink) {
  if (!has_input(proto, 0)) return std::nullopt;
  AMPC_ASSIGN_OR_RETURN(Value * value, tensor_input(proto, 0, label, sink));
  const std::string what = str_cat(label, ": its trip count '", proto.input(0), "'");
  if (value->type().num_elements() != 1 ||
      (value->dtype() != DType::kI64 && value->dtype() != DType::kI32)) {
    return invalid(str_cat(what, " must be one int64, got ", type_to_string(value->type())));
  }
  const Tensor* known = sink.known_value(value);
  if (known == nullptr || !known->has_data()) {
    return absl::UnimplementedError(
        str_cat(what,
                " is computed at run time; ampc runs static graphs, so it unrolls a Loop "
                "whose trip count is known at import (from constants and shapes)"));
  }
  return known->element_as_i64(0);
}

// `branch` (then_branch or else_branch of the If `proto`) checked: no inputs, one output per
// output of the If; with its constants as nodes.
absl::StatusOr<onnx::GraphProto> checked_branch(const onnx::NodeProto& proto,
                                                const std::string& label,
                                                const onnx::GraphProto& graph,
                                                const std::string& taken) {
  const std::string what = str_cat(label, ": its ", taken);
  AMPC_ASSIGN_OR_RETURN(onnx::GraphProto branch, with_constant_nodes(graph, what));
  if (branch.input_size() > 0) {
    return invalid(str_cat(what, " has inputs; an If's branches have none"));
  }
  if (branch.output_size() != proto.output_size()) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; its ", taken, " has ",
                           branch.output_size()));
  }
  return branch;
}

// A fresh name under `prefix` for each of `defined`, unused in the graph and distinct.
Renaming fresh_names(const std::unordered_set<std::string>& defined, const std::string& prefix,
                     ImportSink& sink) {
  Renaming renamed;
  std::unordered_set<std::string> taken;
  for (const std::string& name : defined) {
    std::string fresh = sink.fresh_name(str_cat(prefix, name));
    for (int n = 1; taken.contains(fresh); ++n) {
      fresh = sink.fresh_name(str_cat(prefix, name, "_", n));
    }
    taken.insert(fresh);
    renamed[name] = std::move(fresh);
  }
  return renamed;
}

// `graph`'s values renamed to fresh names under `prefix`, its nodes' names prefixed.
onnx::GraphProto renamed_copy(const onnx::GraphProto& graph, const std::string& prefix,
                              ImportSink& sink) {
  std::unordered_set<std::string> defined;
  collect_defined(graph, defined);
  onnx::GraphProto copy = graph;
  rename_graph(copy, fresh_names(defined, prefix, sink), prefix);
  return copy;
}

// What names the values and nodes `proto` (an If or a Loop) makes: its name, else its first
// output's, else its op.
std::string hint_of(const onnx::NodeProto& proto) {
  if (!proto.name().empty()) return proto.name();
  if (proto.output_size() > 0 && !proto.output(0).empty()) return proto.output(0);
  return proto.op_type();
}

// Every value name `graph` reads, through every graph nested in its nodes.
void collect_read(const onnx::GraphProto& graph, std::unordered_set<std::string>& names) {
  for (const onnx::ValueInfoProto& output : graph.output()) names.insert(output.name());
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input()) {
      if (!input.empty()) names.insert(input);
    }
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) collect_read(attr.g(), names);
      for (const onnx::GraphProto& nested : attr.graphs()) collect_read(nested, names);
    }
  }
}

// The values `graph` (through its nested graphs) slices with a start or end not known at import.
void collect_sliced_by_data(const onnx::GraphProto& graph, ImportSink& sink,
                            std::unordered_set<std::string>& names) {
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() == "Slice" && node.input_size() >= 3) {
      for (int i = 1; i <= 2; ++i) {
        const Value* bound = sink.tensor(node.input(i));
        if (bound == nullptr || sink.known_value(bound) == nullptr) names.insert(node.input(0));
      }
    }
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) collect_sliced_by_data(attr.g(), sink, names);
      for (const onnx::GraphProto& nested : attr.graphs()) {
        collect_sliced_by_data(nested, sink, names);
      }
    }
  }
}

// Float inputs whose values decide an op's output shape (Range's bounds and step, Resize's and
// Upsample's roi and scales): import needs them known, and no gradient flows through them.
bool shape_deciding_float_input(const onnx::NodeProto& node, int index) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") return false;
  const std::string& op = node.op_type();
  return op == "Range" || ((op == "Resize" || op == "Upsample") && (index == 1 || index == 2));
}

// The value names `branch` reads where a guard may stand: its outputs, its nodes' inputs but
// those shape_deciding_float_input names, and everything its nested graphs read.
void collect_guardable_reads(const onnx::GraphProto& branch,
                             std::unordered_set<std::string>& names) {
  for (const onnx::ValueInfoProto& output : branch.output()) names.insert(output.name());
  for (const onnx::NodeProto& node : branch.node()) {
    for (int i = 0; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && !shape_deciding_float_input(node, i)) {
        names.insert(node.input(i));
      }
    }
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.has_g()) collect_read(attr.g(), names);
      for (const onnx::GraphProto& nested : attr.graphs()) collect_read(nested, names);
    }
  }
}

// Makes the gradient of an If decided at run time reach only what the taken branch reads: each
// float value `branch` reads from outside it is read through Where(cond, v, detached v) in the
// then_branch and Where(cond, detached v, v) in the else_branch (detached: an Identity autodiff
// takes no gradient through). Forward, that is v, bit for bit; backward, v's gradient from the
// branch is Where(cond, g, 0) (or Where(cond, 0, g)). Both branches run, backward too, so
// without it a 0 from Where's rule meets the untaken branch's own NaN or inf (the derivative of
// a Sqrt of a negative weight it never uses) and makes NaN of the shared value's gradient.
// Program constants take no gradient and are read as they are, and so is a value where it decides
// a shape (shape_deciding_float_input), which must stay known.
absl::Status guard_outer_reads(onnx::GraphProto& branch, Value* cond, bool then,
                               const std::string& prefix, ImportSink& sink) {
  std::unordered_set<std::string> defined, read, sliced_by_data;
  collect_defined(branch, defined);
  collect_guardable_reads(branch, read);
  collect_sliced_by_data(branch, sink, sliced_by_data);
  std::vector<std::string> outer;
  for (const std::string& name : read) {
    if (defined.contains(name)) continue;
    const Value* value = sink.tensor(name);
    if (value == nullptr || !is_arithmetic_float(value->dtype())) continue;
    if (value->initializer() != nullptr && value->is_constant()) continue;
    // A value known at import that no float initializer reaches (a scale computed from shapes)
    // takes no gradient and keeps being known (Resize's scales, Range's bounds).
    if (sink.known_value(value) != nullptr && !reads_float_initializer(value, sink)) continue;
    // A bag, or the data of a Slice of run-time bounds, stays as onnx_ragged.h reads it (a
    // Loop's per-bag Ifs, an empty bag's zeros or its reduction, merge into one segment
    // reduction, which takes the gradient of the bags that exist only).
    const RaggedValues& ragged = sink.ragged();
    if (ragged.slice(name) != nullptr || ragged.bag(value) != nullptr ||
        ragged.mask_indices(name) != nullptr || sliced_by_data.contains(name)) {
      continue;
    }
    outer.push_back(name);
  }
  std::sort(outer.begin(), outer.end());  // the names the guards take, in one order
  Renaming guarded;
  for (const std::string& name : outer) {
    Value* value = sink.tensor(name);
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> detached,
                          sink.emit("Identity", {value}, {{"stop_gradient", AttrValue(int64_t{1})}},
                                    {sink.fresh_name(str_cat(prefix, name, "/detached"))},
                                    str_cat(prefix, name, "/detach")));
    std::vector<Value*> operands = {cond, value, detached[0]};
    if (!then) std::swap(operands[1], operands[2]);
    AMPC_ASSIGN_OR_RETURN(
        std::vector<Value*> selected,
        sink.emit("Where", std::move(operands), {}, {sink.fresh_name(str_cat(prefix, name))},
                  str_cat(prefix, name, "/guard")));
    guarded[name] = selected[0]->name();
  }
  for (onnx::ValueInfoProto& output : *branch.mutable_output()) {
    rename(*output.mutable_name(), guarded);
  }
  for (onnx::NodeProto& node : *branch.mutable_node()) {
    for (int i = 0; i < node.input_size(); ++i) {
      if (!shape_deciding_float_input(node, i)) rename(*node.mutable_input(i), guarded);
    }
    for (onnx::AttributeProto& attr : *node.mutable_attribute()) {
      if (attr.has_g()) rename_graph(*attr.mutable_g(), guarded, "");
      for (onnx::GraphProto& nested : *attr.mutable_graphs()) rename_graph(nested, guarded, "");
    }
  }
  return absl::OkStatus();
}

// An If whose condition is computed at run time: both branches imported (under fresh names) and
// each output selected by the condition with Where, which needs the branches' outputs to be
// tensors of one type. Both are computed, so this holds for branches without side effects,
// which ONNX's are; a gradient reaches only the selected branch: Where's rule for the outputs,
// guard_outer_reads for what the branches read.
absl::Status lower_selected_if(const onnx::NodeProto& proto, const std::string& label, Value* cond,
                               ImportSink& sink) {
  AMPC_ASSIGN_OR_RETURN(auto branches,
                        graph_attributes(proto, label, {"then_branch", "else_branch"}));
  const std::string hint = hint_of(proto);
  if (!cond->shape().empty()) {
    AMPC_ASSIGN_OR_RETURN(
        std::vector<Value*> no_dims,
        sink.emit("Constant", {}, {{"value", AttrValue(Tensor::from_i64({0}, {}))}},
                  {sink.fresh_name(str_cat(hint, "/scalar"))}, hint));
    AMPC_ASSIGN_OR_RETURN(std::vector<Value*> scalar,
                          sink.emit("Reshape", {cond, no_dims[0]}, {},
                                    {sink.fresh_name(str_cat(hint, "/condition"))}, hint));
    cond = scalar[0];
  }
  std::vector<onnx::GraphProto> copies;
  for (const std::string taken : {"then_branch", "else_branch"}) {
    AMPC_ASSIGN_OR_RETURN(const onnx::GraphProto branch,
                          checked_branch(proto, label, *branches.at(taken), taken));
    const std::string prefix = str_cat(hint, "/", taken, "/");
    copies.push_back(renamed_copy(branch, prefix, sink));
    AMPC_RETURN_IF_ERROR(
        guard_outer_reads(copies.back(), cond, taken == "then_branch", prefix, sink));
    for (const onnx::NodeProto& node : copies.back().node()) {
      AMPC_RETURN_IF_ERROR(sink.import_node(node));
    }
  }
  for (int i = 0; i < proto.output_size(); ++i) {
    if (proto.output(i).empty()) continue;
    Value* then_value = sink.tensor(copies[0].output(i).name());
    Value* else_value = sink.tensor(copies[1].output(i).name());
    const std::string what =
        str_cat(label, ": its condition '", proto.input(0),
                "' is computed at run time, so ampc computes both branches and selects each "
                "output with Where; output ",
                i);
    if (then_value == nullptr || else_value == nullptr) {
      for (const onnx::GraphProto& copy : copies) {
        AMPC_RETURN_IF_ERROR(check_defined(copy.output(i).name(), what, sink));
      }
      return absl::UnimplementedError(str_cat(what, " is a sequence; Where selects tensors"));
    }
    if (then_value->type() != else_value->type()) {
      return absl::UnimplementedError(
          str_cat(what, " is ", type_to_string(then_value->type()), " in the then_branch and ",
                  type_to_string(else_value->type()),
                  " in the else_branch; ampc runs static graphs, so both must have one type"));
    }
    AMPC_RETURN_IF_ERROR(sink.emit("Where", {cond, then_value, else_value}, {}, {proto.output(i)},
                                   str_cat(hint, "/select_", i))
                             .status());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status lower_static_if(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink) {
  if (proto.input_size() != 1 || proto.input(0).empty()) {
    return invalid(str_cat(label, " has ", proto.input_size(), " inputs; If has one (cond)"));
  }
  AMPC_ASSIGN_OR_RETURN(Value * cond, tensor_input(proto, 0, label, sink));
  const std::string cond_what = str_cat(label, ": its condition '", proto.input(0), "'");
  if (cond->type().num_elements() == 1 && cond->dtype() == DType::kBool &&
      sink.known_value(cond) == nullptr) {
    return lower_selected_if(proto, label, cond, sink);
  }
  AMPC_ASSIGN_OR_RETURN(const bool then, known_condition(cond, cond_what, sink));
  AMPC_ASSIGN_OR_RETURN(auto branches,
                        graph_attributes(proto, label, {"then_branch", "else_branch"}));
  const std::string taken = then ? "then_branch" : "else_branch";
  AMPC_ASSIGN_OR_RETURN(const onnx::GraphProto branch,
                        checked_branch(proto, label, *branches.at(taken), taken));
  const std::string what = str_cat(label, ": its ", taken);
  for (const onnx::NodeProto& node : branch.node()) AMPC_RETURN_IF_ERROR(sink.import_node(node));
  for (int i = 0; i < proto.output_size(); ++i) {
    if (proto.output(i).empty()) continue;
    const std::string& result = branch.output(i).name();
    if (alias_ragged(proto.output(i), result, sink)) continue;
    AMPC_RETURN_IF_ERROR(check_defined(result, str_cat(what, "'s output ", i), sink));
    AMPC_RETURN_IF_ERROR(sink.bind(proto.output(i), result, proto.name()));
  }
  return absl::OkStatus();
}

absl::Status unroll_static_loop(const onnx::NodeProto& proto, const std::string& label,
                                ImportSink& sink) {
  if (proto.input_size() < 2) {
    return invalid(str_cat(label, " has ", proto.input_size(),
                           " inputs; Loop has a trip count and a condition (either may be "
                           "an empty name), then its loop-carried values"));
  }
  AMPC_ASSIGN_OR_RETURN(auto graphs, graph_attributes(proto, label, {"body"}));
  const std::string what = str_cat(label, ": its body");
  AMPC_ASSIGN_OR_RETURN(const onnx::GraphProto body, with_constant_nodes(*graphs.at("body"), what));
  const int carried = proto.input_size() - 2;
  if (body.input_size() != carried + 2) {
    return invalid(str_cat(what, " has ", body.input_size(), " inputs; a Loop with ", carried,
                           " loop-carried values has ", carried + 2,
                           " (the iteration number, the condition, the values)"));
  }
  if (body.output_size() < carried + 1) {
    return invalid(str_cat(what, " has ", body.output_size(), " outputs; a Loop with ", carried,
                           " loop-carried values has at least ", carried + 1,
                           " (the condition, the values, then the scan outputs)"));
  }
  const int scans = body.output_size() - carried - 1;
  if (proto.output_size() > carried + scans) {
    return invalid(str_cat(label, " has ", proto.output_size(), " outputs; its body gives ",
                           carried, " loop-carried values and ", scans, " scan outputs"));
  }
  AMPC_ASSIGN_OR_RETURN(const std::optional<int64_t> trips, trip_count(proto, label, sink));
  const bool conditioned = has_input(proto, 1);
  bool running = true;
  if (conditioned) {
    AMPC_ASSIGN_OR_RETURN(Value * cond, tensor_input(proto, 1, label, sink));
    AMPC_ASSIGN_OR_RETURN(
        running,
        known_condition(cond, str_cat(label, ": its condition '", proto.input(1), "'"), sink));
  } else if (!trips) {
    return invalid(str_cat(label, " has neither a trip count nor a condition, so it never ends"));
  }
  // The names the loop-carried values have now: the Loop's inputs, then each iteration's.
  std::vector<std::string> current;
  for (int k = 0; k < carried; ++k) {
    const std::string value_what = str_cat(label, ": loop-carried value ", k);
    if (proto.input(k + 2).empty()) return invalid(str_cat(value_what, " is missing"));
    AMPC_RETURN_IF_ERROR(check_defined(proto.input(k + 2), value_what, sink));
    current.push_back(proto.input(k + 2));
  }

  std::unordered_set<std::string> defined;
  collect_defined(body, defined);
  const std::string hint = hint_of(proto);
  std::vector<std::vector<Value*>> scanned(scans);
  int64_t i = 0;
  for (; running && (!trips || i < *trips); ++i) {
    if (i == kMaxLoopIterations) {
      return absl::UnimplementedError(str_cat(
          label, " runs more than ", kMaxLoopIterations,
          " iterations; ampc unrolls a Loop at import, one copy of its body per iteration"));
    }
    // The body's values get names under the Loop and the iteration, unused in the graph.
    const std::string prefix = str_cat(hint, "/", i, "/");
    Renaming renamed = fresh_names(defined, prefix, sink);
    const std::string& counter = body.input(0).name();
    if (!counter.empty()) {
      AMPC_RETURN_IF_ERROR(sink.emit("Constant", {},
                                     {{"value", AttrValue(Tensor::from_i64({}, {i}))}},
                                     {renamed.at(counter)}, str_cat(prefix, "iteration"))
                               .status());
    }
    const std::string& cond_in = body.input(1).name();
    if (!cond_in.empty()) {
      AMPC_RETURN_IF_ERROR(
          sink.emit("Constant", {},
                    {{"value", AttrValue(Tensor::from_doubles(DType::kBool, {}, {1.0}))}},
                    {renamed.at(cond_in)}, str_cat(prefix, "condition"))
              .status());
    }
    for (int k = 0; k < carried; ++k) {
      if (!body.input(k + 2).name().empty()) renamed[body.input(k + 2).name()] = current[k];
    }
    onnx::GraphProto copy = body;
    rename_graph(copy, renamed, prefix);
    for (const onnx::NodeProto& node : copy.node()) AMPC_RETURN_IF_ERROR(sink.import_node(node));

    for (int k = 0; k < carried; ++k) {
      current[k] = copy.output(k + 1).name();
      AMPC_RETURN_IF_ERROR(
          check_defined(current[k], str_cat(what, "'s output ", k + 1, " at iteration ", i), sink));
    }
    for (int j = 0; j < scans; ++j) {
      const int output = carried + 1 + j;
      const std::string scan_what =
          str_cat(what, "'s scan output ", output, " ('", body.output(output).name(), "')");
      Value* value = sink.tensor(copy.output(output).name());
      if (value == nullptr) {
        AMPC_RETURN_IF_ERROR(check_defined(copy.output(output).name(),
                                           str_cat(scan_what, " at iteration ", i), sink));
        return absl::UnimplementedError(str_cat(scan_what, " is a sequence; a Loop scans tensors"));
      }
      if (!scanned[j].empty() && value->type() != scanned[j].front()->type()) {
        return invalid(str_cat(scan_what, " is ", type_to_string(scanned[j].front()->type()),
                               " at iteration 0 and ", type_to_string(value->type()),
                               " at iteration ", i, "; a scan output keeps its type"));
      }
      scanned[j].push_back(value);
    }
    if (conditioned) {
      const std::string& cond_out = copy.output(0).name();
      AMPC_RETURN_IF_ERROR(
          check_defined(cond_out, str_cat(what, "'s condition output at iteration ", i), sink));
      Value* cond = sink.tensor(cond_out);
      if (cond == nullptr) {
        return invalid(str_cat(what, "'s condition output '", body.output(0).name(),
                               "' is a sequence; it must be one bool"));
      }
      AMPC_ASSIGN_OR_RETURN(
          running, known_condition(cond,
                                   str_cat(what, "'s condition output '", body.output(0).name(),
                                           "' after iteration ", i),
                                   sink));
    }
  }

  for (int k = 0; k < carried && k < proto.output_size(); ++k) {
    if (!proto.output(k).empty()) {
      AMPC_RETURN_IF_ERROR(sink.bind(proto.output(k), current[k], proto.name()));
    }
  }
  for (int j = 0; j < scans && carried + j < proto.output_size(); ++j) {
    const std::string& out = proto.output(carried + j);
    if (out.empty()) continue;
    if (scanned[j].empty()) {
      // Only what reads it fails: ampc's values have static shapes.
      sink.leave_undefined(out, str_cat("the scan output of ", label,
                                        ", which runs no iteration, so it has no shape"));
      continue;
    }
    std::vector<Value*> rows;
    for (size_t n = 0; n < scanned[j].size(); ++n) {
      AMPC_ASSIGN_OR_RETURN(
          std::vector<Value*> row,
          sink.emit("Unsqueeze", {scanned[j][n]}, {{"axes", AttrValue(std::vector<int64_t>{0})}},
                    {sink.fresh_name(str_cat(out, "/", n))}, str_cat(hint, "/scan/", n)));
      rows.push_back(row[0]);
    }
    AMPC_ASSIGN_OR_RETURN(const bool merged, concat_bags(rows, 0, out, proto.name(), sink));
    if (merged) continue;
    AMPC_RETURN_IF_ERROR(
        sink.emit("Concat", rows, {{"axis", AttrValue(int64_t{0})}}, {out}, proto.name()).status());
  }
  return absl::OkStatus();
}

}  // namespace ampc::onnx_io
