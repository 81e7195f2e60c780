// ONNX export: Graph -> ModelProto, generic over each op's OpDef, but for ops whose ONNX form
// differs from ampc's: ampc.ConvGradData (written as ConvTranspose), BatchNormalization in
// training mode (the running statistics as outputs, which before opset 14 also say the mode),
// Dropout before 12 (training mode written as outputs) and Split from 18 (num_outputs).
//
// Names are labels in the IR, so export makes them unique (first claimant keeps its name, the
// others get a deterministic fresh one). Attributes that the graph's opset takes as inputs
// (OpDef::attrs_as_inputs) are written as initializers. Every node's precision decision
// goes into its doc_string, where import finds it again. Large initializers may go to a data
// file beside the model (ONNX external data), as PyTorch writes models over 2 GiB.
#include <filesystem>
#include <map>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ampc/version.h"
#include "compiler/file_util.h"
#include "compiler/onnx_common.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_metadata.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "google/protobuf/arena.h"

namespace ampc {
namespace {

// The IR version written: the newest that libonnx 1.12's checker accepts.
constexpr int64_t kExportIrVersion = 8;

// The weights an export writes beside the model (ONNX external data): the tensors' bytes in
// order, each at an offset aligned to kAlignment, all in one file.
struct ExternalData {
  static constexpr uint64_t kAlignment = 64;
  std::string location;  // the data file's name, relative to the model's folder
  std::vector<std::span<const uint8_t>> pieces;
  uint64_t size = 0;

  void add(const Tensor& tensor, onnx::TensorProto* proto) {
    static constexpr uint8_t kZeros[kAlignment] = {};
    if (const uint64_t pad = (kAlignment - size % kAlignment) % kAlignment; pad > 0) {
      pieces.emplace_back(kZeros, pad);
      size += pad;
    }
    for (int64_t dim : tensor.shape()) proto->add_dims(dim);
    proto->set_data_type(to_onnx_dtype(tensor.dtype()));
    proto->set_data_location(onnx::TensorProto::EXTERNAL);
    const auto entry = [&](const char* key, std::string value) {
      onnx::StringStringEntryProto* e = proto->add_external_data();
      e->set_key(key);
      e->set_value(std::move(value));
    };
    entry("location", location);
    entry("offset", std::to_string(size));
    entry("length", std::to_string(tensor.bytes().size()));
    pieces.push_back(tensor.bytes());
    size += tensor.bytes().size();
  }
};

class Exporter {
 public:
  // `outer`: the graph whose initializers this one may read by name (the eval graph, for the
  // training step); shared initializers are written there only.
  explicit Exporter(const Graph* outer = nullptr) : outer_(outer) {
    if (outer_ == nullptr) return;
    for (const Value* init : outer_->initializers())
      outer_initializers_.try_emplace(init->name(), init);
  }

  // Initializers of kExternalDataMinBytes or more go to `data` instead of the model.
  void set_external(ExternalData* data) { external_ = data; }

  absl::StatusOr<std::string> run(const Graph& graph) {
    // On an arena: a large model is hundreds of thousands of small messages, which the arena
    // allocates in blocks and frees at once.
    google::protobuf::Arena arena;
    onnx::ModelProto& model = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
    model.set_ir_version(kExportIrVersion);
    model.set_producer_name("ampc");
    model.set_producer_version(AMPC_VERSION_STRING);
    write_opsets(graph, model);
    for (const auto& [key, value] : graph.metadata()) {
      onnx::StringStringEntryProto* entry = model.add_metadata_props();
      entry->set_key(key);
      entry->set_value(value);
    }
    AMPC_RETURN_IF_ERROR(write_graph(graph, *model.mutable_graph()));
    if (const Graph* step = graph.training_step()) {
      onnx::TrainingInfoProto* training = model.add_training_info();
      // The step must not reuse a name the eval graph's file defines (the initializers export
      // invents for attributes taken as inputs included): it would shadow it.
      Exporter step_exporter(&graph);
      step_exporter.external_ = external_;
      step_exporter.reserved_.insert(taken_.begin(), taken_.end());
      AMPC_RETURN_IF_ERROR(step_exporter.write_graph(*step, *training->mutable_algorithm()));
      AMPC_RETURN_IF_ERROR(step_exporter.write_update_binding(*step, *training));
    } else if (!graph.state_updates().empty()) {
      return absl::InvalidArgumentError(
          str_cat("graph '", graph.name(),
                  "' updates state but is not stored as a training step of an eval graph"));
    }
    std::string bytes;
    if (!model.SerializeToString(&bytes)) {
      return absl::InvalidArgumentError(
          str_cat("graph '", graph.name(), "' does not fit in one ONNX file (2 GiB limit)"));
    }
    return bytes;
  }

  absl::Status write_graph(const Graph& graph, onnx::GraphProto& proto) {
    assign_names(graph);
    proto.set_name(graph.name());
    for (const Value* input : graph.inputs()) write_value_info(input, proto.add_input());
    for (const Value* init : graph.initializers()) {
      const Tensor* data = init->initializer();
      if (!data->has_data()) {
        return absl::InvalidArgumentError(
            str_cat("initializer '", init->name(), "' has no data (elided in text IR)"));
      }
      AMPC_ASSIGN_OR_RETURN(bool shared, is_shared(*init));
      if (shared) continue;
      onnx::TensorProto* tensor = proto.add_initializer();
      tensor->set_name(names_.at(init));
      if (init->is_constant()) {
        tensor->set_doc_string(std::string(onnx_io::kConstantDoc));
      } else if (init->declared() != Value::Declared::kUnknown) {
        tensor->set_doc_string(onnx_io::declared_doc(init->declared()));
      }
      if (external_ != nullptr && data->type().byte_size() >= kExternalDataMinBytes) {
        external_->add(*data, tensor);
      } else {
        onnx_io::tensor_to_proto(*data, tensor);
      }
    }
    for (const auto& node : graph.nodes()) AMPC_RETURN_IF_ERROR(write_node(*node, proto));
    for (const Value* output : graph.outputs()) write_value_info(output, proto.add_output());
    for (const auto& node : graph.nodes()) {
      for (int i = 0; i < node->num_outputs(); ++i) {
        const Value* value = node->output(i);
        if (value != nullptr && !value->is_graph_output()) {
          write_value_info(value, proto.add_value_info());
        }
      }
    }
    return absl::OkStatus();
  }

  // Graph::state_updates as TrainingInfoProto.update_binding: initializer name -> output name.
  absl::Status write_update_binding(const Graph& step, onnx::TrainingInfoProto& training) const {
    std::unordered_map<std::string_view, const Value*> output_named;
    for (const Value* value : step.outputs()) output_named[value->name()] = value;  // last wins
    for (const Graph::StateUpdate& update : step.state_updates()) {
      auto it = output_named.find(update.update);
      const Value* output = it == output_named.end() ? nullptr : it->second;
      if (output == nullptr || names_.at(output) != update.update) {
        return absl::InvalidArgumentError(str_cat("the training step updates '", update.state,
                                                  "' from '", update.update,
                                                  "', which is not one of its outputs"));
      }
      onnx::StringStringEntryProto* binding = training.add_update_binding();
      binding->set_key(update.state);
      binding->set_value(update.update);
    }
    return absl::OkStatus();
  }

 private:
  // Every value in definition order keeps its name when it is the first to claim it; an empty
  // or repeated name becomes a fresh one.
  void assign_names(const Graph& graph) {
    std::vector<const Value*> values(graph.inputs().begin(), graph.inputs().end());
    values.insert(values.end(), graph.initializers().begin(), graph.initializers().end());
    for (const auto& node : graph.nodes()) {
      for (int i = 0; i < node->num_outputs(); ++i) {
        if (node->has_output(i)) values.push_back(node->output(i));
      }
    }
    for (const Value* value : values) reserved_.insert(value->name());
    if (outer_ != nullptr) {
      for (const Value* value : outer_->initializers()) reserved_.insert(value->name());
    }
    for (const Value* value : values) {
      const std::string& name = value->name();
      names_[value] = !name.empty() && taken_.insert(name).second ? name : fresh_name(name);
    }
  }

  // An initializer of the training step that the eval graph holds too (same name): written once,
  // in the eval graph, so both must agree.
  absl::StatusOr<bool> is_shared(const Value& init) const {
    auto it = outer_initializers_.find(init.name());
    if (it == outer_initializers_.end()) return false;
    if (!(*it->second->initializer() == *init.initializer())) {
      return absl::InvalidArgumentError(
          str_cat("initializer '", init.name(),
                  "' differs between the eval graph and the training step; a shared "
                  "parameter must have one value"));
    }
    return true;
  }

  std::string fresh_name(std::string_view hint) {
    const std::string base = hint.empty() ? "t" : std::string(hint);
    for (int k = 1;; ++k) {
      std::string candidate = str_cat(base, ".", k);
      if (!reserved_.contains(candidate) && taken_.insert(candidate).second) return candidate;
    }
  }

  // One opset_import for the whole file, so the eval graph and the training step must agree.
  static void write_opsets(const Graph& graph, onnx::ModelProto& model) {
    std::map<std::string, int64_t, std::less<>> opsets = graph.opset_imports();
    // Every domain a node uses is imported, the standard one always.
    opsets.emplace("", graph.opset(""));
    for (const Graph* g : {&graph, graph.training_step()}) {
      if (g == nullptr) continue;
      for (const auto& [domain, version] : g->opset_imports()) opsets.emplace(domain, version);
      for (const auto& node : g->nodes()) {
        if (!is_conv_grad_data(*node)) opsets.emplace(node->domain(), g->opset(node->domain()));
      }
    }
    for (const auto& [domain, version] : opsets) {
      onnx::OperatorSetIdProto* opset = model.add_opset_import();
      opset->set_domain(domain);
      opset->set_version(version);
    }
  }

  void write_value_info(const Value* value, onnx::ValueInfoProto* info) {
    info->set_name(names_.at(value));
    onnx_io::type_to_proto(value->type(), info->mutable_type());
  }

  // ampc.ConvGradData(dY, W) is ONNX's ConvTranspose(dY, W) exactly: the same strides, pads,
  // dilations and group, and output_padding making its output the input_shape attribute (less
  // than a stride, since input_shape's convolution gives dY). Written so, a file runs anywhere
  // and reads back (import lowers ConvTranspose to ConvGradData) as it was.
  static bool is_conv_grad_data(const Node& node) {
    return node.domain() == kAmpcDomain && node.op_type() == "ConvGradData";
  }

  static void write_conv_transpose_attrs(const Node& node, onnx::NodeProto& proto) {
    const Shape& dy = node.operand(0)->shape();
    const Shape& w = node.operand(1)->shape();
    const std::vector<int64_t>& x = node.ints_attr("input_shape");
    const size_t n = dy.size() - 2;
    auto per_axis = [&](std::string_view name, int64_t fill) {
      const AttrValue* value = node.find_attr(name);
      return value != nullptr ? std::get<std::vector<int64_t>>(*value)
                              : std::vector<int64_t>(name == "pads" ? 2 * n : n, fill);
    };
    const std::vector<int64_t> strides = per_axis("strides", 1);
    const std::vector<int64_t> dilations = per_axis("dilations", 1);
    const std::vector<int64_t> pads = per_axis("pads", 0);
    std::vector<int64_t> output_padding(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t full = strides[i] * (dy[i + 2] - 1) + (w[i + 2] - 1) * dilations[i] + 1;
      output_padding[i] = x[i + 2] - (full - pads[i] - pads[i + n]);
    }
    write_attr("strides", AttrValue(strides), proto.add_attribute());
    write_attr("pads", AttrValue(pads), proto.add_attribute());
    write_attr("dilations", AttrValue(dilations), proto.add_attribute());
    write_attr("group", AttrValue(node.int_attr("group")), proto.add_attribute());
    write_attr("output_padding", AttrValue(output_padding), proto.add_attribute());
  }

  static bool is_batch_norm(const Node& node) {
    return node.domain() == kOnnxDomain && node.op_type() == "BatchNormalization";
  }

  // BatchNormalization at opsets 9-13 has no training_mode attribute: the file marks training
  // mode by the mean and var outputs (compiler/onnx_legacy_ops.cc reads them back).
  static bool is_batch_norm_before_14(const Node& node) {
    return is_batch_norm(node) && node.graph()->opset(kOnnxDomain) < 14;
  }

  // In training mode ONNX's BatchNormalization names its running statistics as outputs: all
  // five before opset 14 (its checker allows one or five), exactly three from 14 (training_mode
  // 1 with one output, as a training model read from PyTorch's dynamo exporter has it, fails
  // the checker and onnxruntime). Outputs ampc does not use get fresh names that nothing in the
  // file reads (saved_mean and saved_var name nothing ampc computes).
  void write_batch_norm_outputs(const Node& node, onnx::NodeProto& proto) {
    if (node.int_attr("training_mode") == 0) return;
    static constexpr const char* kSuffixes[] = {"", ".mean", ".var", ".saved_mean", ".saved_var"};
    const int outputs = is_batch_norm_before_14(node) ? 5 : 3;
    while (proto.output_size() < outputs) proto.add_output("");
    for (int i = 1; i < outputs; ++i) {
      if (proto.output(i).empty())
        proto.set_output(i, fresh_name(str_cat(node.name(), kSuffixes[i])));
    }
  }

  // Dropout before opset 12 has no ratio or training_mode input: the file marks training by the
  // mask output (compiler/onnx_legacy_ops.cc reads it back), and ratio is an attribute.
  static bool is_dropout_before_12(const Node& node) {
    return node.domain() == kOnnxDomain && node.op_type() == "Dropout" &&
           node.graph()->opset(kOnnxDomain) < 12;
  }

  // The data of `value` when the file holds it: an initializer's or a Constant node's.
  static const Tensor* known_data(const Value* value) {
    if (const Tensor* data = value->initializer(); data != nullptr && data->has_data()) {
      return data;
    }
    const Node* producer = value->producer();
    if (producer != nullptr && producer->domain() == kOnnxDomain &&
        producer->op_type() == "Constant" && producer->find_attr("value") != nullptr) {
      return &producer->tensor_attr("value");
    }
    return nullptr;
  }

  absl::Status write_dropout_mode(const Node& node, onnx::NodeProto& proto) {
    const int64_t opset = node.graph()->opset(kOnnxDomain);
    auto unwritable = [&](std::string_view what) {
      return absl::FailedPreconditionError(str_cat(node.describe(), ": ", what,
                                                   ", which Dropout cannot say before opset 12 "
                                                   "(the file's opset is ",
                                                   opset, ")"));
    };
    bool training = false;
    if (node.has_operand(2)) {
      const Tensor* flag = known_data(node.operand(2));
      if (flag == nullptr) return unwritable("its training_mode is computed at run time");
      training = flag->element_as_i64(0) != 0;
    }
    if (node.has_operand(1)) {
      const Tensor* ratio = known_data(node.operand(1));
      if (ratio == nullptr) return unwritable("its ratio is computed at run time");
      write_attr("ratio", AttrValue(static_cast<float>(ratio->element_as_double(0))),
                 proto.add_attribute());
    }
    proto.mutable_input()->DeleteSubrange(1, proto.input_size() - 1);
    if (!training) {
      if (node.has_output(1)) return unwritable("its mask is read outside training mode");
      return absl::OkStatus();
    }
    if (proto.output_size() < 2) proto.add_output("");
    if (proto.output(1).empty()) proto.set_output(1, fresh_name(str_cat(node.name(), ".mask")));
    return absl::OkStatus();
  }

  absl::Status write_node(const Node& node, onnx::GraphProto& graph) {
    onnx::NodeProto* proto = graph.add_node();
    const bool conv_transpose = is_conv_grad_data(node);
    proto->set_op_type(conv_transpose ? "ConvTranspose" : node.op_type());
    proto->set_domain(conv_transpose ? "" : node.domain());
    proto->set_name(node.name());
    std::string doc = node.doc_string();
    if (!node.precision().empty()) {
      if (!doc.empty()) doc += "\n";
      doc += onnx_io::precision_to_line(node.precision());
    }
    if (!doc.empty()) proto->set_doc_string(doc);
    std::vector<std::string> inputs;
    for (const Value* operand : node.operands())
      inputs.push_back(operand ? names_.at(operand) : "");
    std::unordered_set<std::string> as_inputs;
    AMPC_RETURN_IF_ERROR(write_attrs_as_inputs(node, graph, inputs, as_inputs));
    for (const std::string& input : inputs) proto->add_input(input);
    for (int i = 0; i < node.num_outputs(); ++i) {
      proto->add_output(node.has_output(i) ? names_.at(node.output(i)) : "");
    }
    if (conv_transpose) {
      write_conv_transpose_attrs(node, *proto);
      return absl::OkStatus();
    }
    const bool legacy_batch_norm = is_batch_norm_before_14(node);
    if (is_batch_norm(node)) write_batch_norm_outputs(node, *proto);
    const bool legacy_dropout = is_dropout_before_12(node);
    if (legacy_dropout) AMPC_RETURN_IF_ERROR(write_dropout_mode(node, *proto));
    for (const auto& [name, value] : node.attrs()) {
      if (const AttrSpec* spec = node.def() != nullptr ? node.def()->find_attr(name) : nullptr;
          spec != nullptr && spec->extension) {
        AMPC_CHECK(attr_kind(value) == AttrKind::kInt);
        onnx_io::add_metadata_prop(*proto, onnx_io::extension_attr_key(name),
                                   str_cat(std::get<int64_t>(value)));
        continue;
      }
      if (as_inputs.contains(name) || (legacy_batch_norm && name == "training_mode") ||
          (legacy_dropout && name == "ratio" && node.has_operand(1))) {
        continue;
      }
      write_attr(name, value, proto->add_attribute());
    }
    if (needs_num_outputs(node)) {
      write_attr("num_outputs", AttrValue(int64_t{node.num_outputs()}), proto->add_attribute());
    }
    return absl::OkStatus();
  }

  // A Split without sizes cuts its input into equal parts, one per output, up to opset 17; from
  // 18 it must say how many (num_outputs): a graph legalize-opset raised from 17 to 22 (bf16
  // Conv beside a GLU's Split) gets the attribute here.
  static bool needs_num_outputs(const Node& node) {
    return node.domain() == kOnnxDomain && node.op_type() == "Split" &&
           node.graph()->opset(kOnnxDomain) >= 18 && !node.has_operand(1) &&
           node.find_attr("split") == nullptr && node.find_attr("num_outputs") == nullptr;
  }

  // The tensor an attribute becomes when its opset takes it as an input: integer lists (axes,
  // split) as 1-D int64, a float (Dropout's ratio) as an f32 scalar.
  static absl::StatusOr<Tensor> attr_as_tensor(const Node& node, const AttrAsInput& form,
                                               const AttrValue& value) {
    if (const auto* list = std::get_if<std::vector<int64_t>>(&value)) {
      return Tensor::from_i64({static_cast<int64_t>(list->size())}, *list);
    }
    if (const auto* scalar = std::get_if<int64_t>(&value)) return Tensor::from_i64({1}, {*scalar});
    if (const auto* real = std::get_if<float>(&value)) return Tensor::from_f32({}, {*real});
    return absl::InternalError(str_cat(node.describe(), ": attribute '", form.attr, "' of kind ",
                                       attr_kind_name(attr_kind(value)), " cannot become input ",
                                       form.input));
  }

  // Moves the attributes that the node's opset takes as inputs into initializers.
  absl::Status write_attrs_as_inputs(const Node& node, onnx::GraphProto& graph,
                                     std::vector<std::string>& inputs,
                                     std::unordered_set<std::string>& moved) {
    if (node.def() == nullptr) return absl::OkStatus();
    const int64_t opset = node.graph()->opset(node.domain());
    for (const AttrAsInput& form : node.def()->attrs_as_inputs) {
      const AttrValue* value = node.find_attr(form.attr);
      if (value == nullptr || form.since_opset > opset) continue;
      if (form.input < static_cast<int>(inputs.size()) && !inputs[form.input].empty()) {
        return absl::InvalidArgumentError(str_cat(node.describe(), " has both attribute '",
                                                  form.attr, "' and input ", form.input, "; opset ",
                                                  opset, " takes it as an input only"));
      }
      AMPC_ASSIGN_OR_RETURN(Tensor data, attr_as_tensor(node, form, *value));
      const std::string hint = node.has_output(0) ? names_.at(node.output(0)) : node.name();
      const std::string name = fresh_name(str_cat(hint, ".", form.attr));
      onnx::TensorProto* tensor = graph.add_initializer();
      tensor->set_name(name);
      onnx_io::tensor_to_proto(data, tensor);
      if (static_cast<int>(inputs.size()) <= form.input) inputs.resize(form.input + 1);
      inputs[form.input] = name;
      moved.insert(form.attr);
    }
    return absl::OkStatus();
  }

  static void write_attr(const std::string& name, const AttrValue& value,
                         onnx::AttributeProto* attr) {
    attr->set_name(name);
    std::visit(
        [attr](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t>) {
            attr->set_type(onnx::AttributeProto::INT);
            attr->set_i(v);
          } else if constexpr (std::is_same_v<T, DType>) {
            attr->set_type(onnx::AttributeProto::INT);
            attr->set_i(to_onnx_dtype(v));
          } else if constexpr (std::is_same_v<T, float>) {
            attr->set_type(onnx::AttributeProto::FLOAT);
            attr->set_f(v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            attr->set_type(onnx::AttributeProto::STRING);
            attr->set_s(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            attr->set_type(onnx::AttributeProto::INTS);
            for (int64_t x : v) attr->add_ints(x);
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            attr->set_type(onnx::AttributeProto::FLOATS);
            for (float x : v) attr->add_floats(x);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            attr->set_type(onnx::AttributeProto::STRINGS);
            for (const std::string& x : v) attr->add_strings(x);
          } else {
            static_assert(std::is_same_v<T, Tensor>);
            attr->set_type(onnx::AttributeProto::TENSOR);
            onnx_io::tensor_to_proto(v, attr->mutable_t());
          }
        },
        value);
  }

  const Graph* outer_;
  // The eval graph's initializers by name (the first of a name), for the training step's export.
  std::unordered_map<std::string_view, const Value*> outer_initializers_;
  ExternalData* external_ = nullptr;  // set: large initializers go there
  std::unordered_map<const Value*, std::string> names_;
  std::unordered_set<std::string> reserved_;  // every name the graph uses
  std::unordered_set<std::string> taken_;     // names given out so far
};

}  // namespace

absl::StatusOr<std::string> export_onnx_bytes(const Graph& graph) {
  Exporter exporter;
  return exporter.run(graph);
}

namespace {

int64_t initializer_bytes(const Graph& graph) {
  int64_t total = 0;
  for (const Value* init : graph.initializers()) total += init->type().byte_size();
  if (const Graph* step = graph.training_step()) total += initializer_bytes(*step);
  return total;
}

}  // namespace

absl::Status export_onnx_file(const Graph& graph, const std::string& path,
                              const ExportOptions& options) {
  const bool external = options.external_data == ExportOptions::ExternalData::kAlways ||
                        (options.external_data == ExportOptions::ExternalData::kAuto &&
                         initializer_bytes(graph) > options.auto_threshold_bytes);
  if (!external) {
    AMPC_ASSIGN_OR_RETURN(std::string bytes, export_onnx_bytes(graph));
    return write_file_atomically(path, bytes);
  }
  const std::string data_path = path + ".data";
  ExternalData data;
  data.location = std::filesystem::path(data_path).filename().string();
  Exporter exporter;
  exporter.set_external(&data);
  AMPC_ASSIGN_OR_RETURN(std::string bytes, exporter.run(graph));
  // The weights first: a model file never refers to data that is not there.
  AMPC_RETURN_IF_ERROR(write_file_atomically(data_path, data.pieces));
  if (absl::Status status = write_file_atomically(path, bytes); !status.ok()) {
    std::error_code ignored;
    std::filesystem::remove(data_path, ignored);
    return status;
  }
  return absl::OkStatus();
}

}  // namespace ampc
