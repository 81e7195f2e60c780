// Old models through ONNX's version converter (compiler/onnx_opset_conversion.h).
#include "compiler/onnx_opset_conversion.h"

#include <algorithm>
#include <string>
#include <unordered_set>

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
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const onnx::ValueInfoProto& input : converted.graph().input()) {
    if (!added.contains(input.name())) *inputs.Add() = input;
  }
  converted.mutable_graph()->mutable_input()->Swap(&inputs);
  return converted;
}

}  // namespace ampc::onnx_io
