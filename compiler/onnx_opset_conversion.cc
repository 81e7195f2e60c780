// Old models through ONNX's version converter (compiler/onnx_opset_conversion.h).
#include "compiler/onnx_opset_conversion.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ampc/status.h"
#include "compiler/strings.h"
#include "onnx/checker.h"
#include "onnx/version_converter/convert.h"

namespace ampc::onnx_io {

int64_t default_opset(const onnx::ModelProto& model) {
  for (const onnx::OperatorSetIdProto& id : model.opset_import()) {
    if (id.domain().empty() || id.domain() == "ai.onnx") return id.version();
  }
  return 0;
}

bool has_training_dropout(const onnx::ModelProto& model) {
  const auto& nodes = model.graph().node();
  return std::any_of(nodes.begin(), nodes.end(), [](const onnx::NodeProto& node) {
    return node.op_type() == "Dropout" && node.output_size() > 1 && !node.output(1).empty() &&
           (node.domain().empty() || node.domain() == "ai.onnx");
  });
}

namespace {

// Upsample (opsets 7 to 9) and Resize-10 map output position o to input coordinate o / scale
// ("asymmetric"), and their nearest mode takes the coordinate's floor when enlarging and its
// ceiling when shrinking. ONNX's converter (libonnx 1.12) leaves Resize-11's defaults on the
// Resize it writes (half_pixel, round_prefer_floor), which resample elsewhere: the linear modes
// by a quarter of a pixel. Each such Resize gets its original coordinates back; a nearest one
// gets floor or ceil when every scale enlarges or every one shrinks (scales in the file), and
// otherwise the model is not converted (ampc imports these ops in their own forms).
struct LegacyResize {
  bool nearest = false;
  std::vector<float> scales;  // Upsample-7/8's attribute; else read from the converted model
};

std::unordered_map<std::string, LegacyResize> legacy_resizes(const onnx::ModelProto& model) {
  std::unordered_map<std::string, LegacyResize> found;
  const int64_t opset = default_opset(model);
  for (const onnx::NodeProto& node : model.graph().node()) {
    const bool onnx_domain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!onnx_domain || node.output_size() == 0 ||
        !(node.op_type() == "Upsample" || (node.op_type() == "Resize" && opset == 10))) {
      continue;
    }
    LegacyResize resize;
    resize.nearest = true;  // the default mode
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.name() == "mode") resize.nearest = attr.s() == "nearest";
      if (attr.name() == "scales") resize.scales.assign(attr.floats().begin(), attr.floats().end());
    }
    found.emplace(node.output(0), std::move(resize));
  }
  return found;
}

// The f32 values of `name` when the graph holds them as an initializer or a Constant node.
std::vector<float> constant_floats(const onnx::GraphProto& graph, const std::string& name) {
  const onnx::TensorProto* tensor = nullptr;
  for (const onnx::TensorProto& init : graph.initializer()) {
    if (init.name() == name) tensor = &init;
  }
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() != "Constant" || node.output_size() != 1 || node.output(0) != name) continue;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.name() == "value") tensor = &attr.t();
    }
  }
  if (tensor == nullptr || tensor->data_type() != onnx::TensorProto::FLOAT) return {};
  if (tensor->float_data_size() > 0)
    return {tensor->float_data().begin(), tensor->float_data().end()};
  std::vector<float> values(tensor->raw_data().size() / sizeof(float));
  std::memcpy(values.data(), tensor->raw_data().data(), values.size() * sizeof(float));
  return values;
}

absl::Status restore_legacy_resizes(const std::unordered_map<std::string, LegacyResize>& legacy,
                                    onnx::ModelProto& converted) {
  onnx::GraphProto& graph = *converted.mutable_graph();
  for (onnx::NodeProto& node : *graph.mutable_node()) {
    if (node.op_type() != "Resize" || node.output_size() == 0) continue;
    const auto it = legacy.find(node.output(0));
    if (it == legacy.end()) continue;
    std::string nearest_mode;
    if (it->second.nearest) {
      std::vector<float> scales = it->second.scales;
      if (scales.empty() && node.input_size() > 2) scales = constant_floats(graph, node.input(2));
      const bool enlarges = !scales.empty() && std::all_of(scales.begin(), scales.end(),
                                                           [](float s) { return s >= 1; });
      const bool shrinks = !scales.empty() && std::all_of(scales.begin(), scales.end(),
                                                          [](float s) { return s <= 1; });
      if (!enlarges && !shrinks) {
        return absl::UnimplementedError(str_cat(
            "the nearest ", node.op_type(), " writing '", node.output(0),
            "' has scales that are not all >= 1 or all <= 1 (or not in the file): opset 13's "
            "Resize has no nearest mode for them"));
      }
      nearest_mode = enlarges ? "floor" : "ceil";
    }
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> kept;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.name() != "coordinate_transformation_mode" && attr.name() != "nearest_mode") {
        *kept.Add() = attr;
      }
    }
    node.mutable_attribute()->Swap(&kept);
    onnx::AttributeProto* coordinates = node.add_attribute();
    coordinates->set_name("coordinate_transformation_mode");
    coordinates->set_type(onnx::AttributeProto::STRING);
    coordinates->set_s("asymmetric");
    if (!nearest_mode.empty()) {
      onnx::AttributeProto* mode = node.add_attribute();
      mode->set_name("nearest_mode");
      mode->set_type(onnx::AttributeProto::STRING);
      mode->set_s(nearest_mode);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<onnx::ModelProto> converted_model(const onnx::ModelProto& model) {
  // The converter trusts its input (a node without outputs crashes it): only a model ONNX's
  // checker accepts is converted. Graph outputs without a type, which ampc infers and the
  // checker refuses, are left out of the check.
  onnx::ModelProto copy = model;
  {
    onnx::ModelProto checked = model;
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> typed;
    for (const onnx::ValueInfoProto& output : checked.graph().output()) {
      if (output.has_type()) *typed.Add() = output;
    }
    checked.mutable_graph()->mutable_output()->Swap(&typed);
    try {
      onnx::checker::check_model(checked);
    } catch (const std::exception& e) {
      return absl::UnimplementedError(str_cat("ONNX's checker rejects the model: ", e.what()));
    }
  }
  // The converter resolves node inputs among the graph's inputs only (IR 3's rule, where every
  // initializer is listed as an input too): list the others for it, and drop them after.
  std::unordered_set<std::string> listed;
  for (const onnx::ValueInfoProto& input : copy.graph().input()) listed.insert(input.name());
  std::unordered_set<std::string> added;
  for (const onnx::TensorProto& init : copy.graph().initializer()) {
    if (listed.contains(init.name()) || !added.insert(init.name()).second) continue;
    onnx::ValueInfoProto* input = copy.mutable_graph()->add_input();
    input->set_name(init.name());
    onnx::TypeProto::Tensor* type = input->mutable_type()->mutable_tensor_type();
    type->set_elem_type(init.data_type());
    onnx::TensorShapeProto* shape = type->mutable_shape();
    for (int64_t dim : init.dims()) shape->add_dim()->set_dim_value(dim);
  }
  // Pad before opset 11 in constant mode with its default value unwritten: the converter
  // requires it (and keeps it, wrongly, for the other modes).
  if (default_opset(copy) < 11) {
    for (onnx::NodeProto& node : *copy.mutable_graph()->mutable_node()) {
      if (node.op_type() != "Pad" || !(node.domain().empty() || node.domain() == "ai.onnx"))
        continue;
      const auto& attrs = node.attribute();
      const auto named = [&](std::string_view name) {
        return std::find_if(attrs.begin(), attrs.end(),
                            [&](const auto& a) { return a.name() == name; });
      };
      const bool constant_mode = named("mode") == attrs.end() || named("mode")->s() == "constant";
      if (constant_mode && named("value") == attrs.end()) {
        onnx::AttributeProto* value = node.add_attribute();
        value->set_name("value");
        value->set_type(onnx::AttributeProto::FLOAT);
        value->set_f(0.0f);
      }
    }
  }
  onnx::ModelProto converted;
  try {
    converted = onnx::version_conversion::ConvertVersion(copy, kConvertedOpset);
  } catch (const std::exception& e) {
    return absl::UnimplementedError(e.what());
  }
  // The converter writes Reshape's former `shape` attribute as a Constant without dims.
  for (onnx::NodeProto& node : *converted.mutable_graph()->mutable_node()) {
    if (node.op_type() != "Constant") continue;
    for (onnx::AttributeProto& attr : *node.mutable_attribute()) {
      onnx::TensorProto& t = *attr.mutable_t();
      if (attr.name() == "value" && t.dims_size() == 0 && t.int64_data_size() > 1) {
        t.add_dims(t.int64_data_size());
      }
    }
  }
  AMPC_RETURN_IF_ERROR(restore_legacy_resizes(legacy_resizes(model), converted));
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const onnx::ValueInfoProto& input : converted.graph().input()) {
    if (!added.contains(input.name())) *inputs.Add() = input;
  }
  converted.mutable_graph()->mutable_input()->Swap(&inputs);
  return converted;
}

}  // namespace ampc::onnx_io
