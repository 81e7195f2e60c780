// A small builder of ONNX ModelProtos for tests that need hand-made (often broken) models.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"
#include "onnx/onnx_pb.h"

namespace ampc::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 17, std::string domain = "") {
    model_.set_ir_version(8);
    model_.mutable_graph()->set_name("test");
    onnx::OperatorSetIdProto* id = model_.add_opset_import();
    id->set_domain(std::move(domain));
    id->set_version(opset);
  }

  onnx::ModelProto& model() { return model_; }
  onnx::GraphProto& graph() { return *model_.mutable_graph(); }

  // A graph input; each dim is a number, a symbolic name, or "" for an unknown dim.
  onnx::ValueInfoProto& input(const std::string& name, int elem_type,
                              const std::vector<std::string>& dims) {
    onnx::ValueInfoProto* info = graph().add_input();
    info->set_name(name);
    onnx::TypeProto::Tensor* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(elem_type);
    onnx::TensorShapeProto* shape = tensor->mutable_shape();
    for (const std::string& dim : dims) {
      onnx::TensorShapeProto::Dimension* d = shape->add_dim();
      if (dim.empty()) continue;
      if (dim[0] >= '0' && dim[0] <= '9') {
        d->set_dim_value(std::stoll(dim));
      } else {
        d->set_dim_param(dim);
      }
    }
    return *info;
  }

  // An initializer with no data yet: fill one of its data fields.
  onnx::TensorProto& initializer(const std::string& name, int data_type,
                                 const std::vector<int64_t>& dims) {
    onnx::TensorProto* tensor = graph().add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(data_type);
    for (int64_t d : dims) tensor->add_dims(d);
    return *tensor;
  }

  onnx::TensorProto& initializer_f32(const std::string& name, const std::vector<int64_t>& dims,
                                     const std::vector<float>& values) {
    onnx::TensorProto& tensor = initializer(name, onnx::TensorProto::FLOAT, dims);
    std::string raw(values.size() * sizeof(float), '\0');
    if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
    tensor.set_raw_data(raw);
    return tensor;
  }

  onnx::TensorProto& initializer_i64(const std::string& name, const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& values) {
    onnx::TensorProto& tensor = initializer(name, onnx::TensorProto::INT64, dims);
    for (int64_t v : values) tensor.add_int64_data(v);
    return tensor;
  }

  onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* node = graph().add_node();
    node->set_op_type(op_type);
    node->set_name(name);
    for (const std::string& input : inputs) node->add_input(input);
    for (const std::string& output : outputs) node->add_output(output);
    return *node;
  }

  void output(const std::string& name) { graph().add_output()->set_name(name); }

  std::string bytes() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
};

// The graph attribute `name` of `node` (an If's branch, a Loop's body), empty.
inline onnx::GraphProto& graph_attr(onnx::NodeProto& node, const std::string& name) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::GRAPH);
  attr->mutable_g()->set_name(name);
  return *attr->mutable_g();
}

// A subgraph input `name` of element type `elem_type`, no shape.
inline void add_input(onnx::GraphProto& graph, const std::string& name, int elem_type) {
  onnx::ValueInfoProto* info = graph.add_input();
  info->set_name(name);
  info->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
}

inline void add_outputs(onnx::GraphProto& graph, const std::vector<std::string>& names) {
  for (const std::string& name : names) graph.add_output()->set_name(name);
}

inline onnx::AttributeProto& add_int_attr(onnx::NodeProto& node, const std::string& name,
                                          int64_t value) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INT);
  attr->set_i(value);
  return *attr;
}

inline onnx::AttributeProto& add_float_attr(onnx::NodeProto& node, const std::string& name,
                                            float value) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::FLOAT);
  attr->set_f(value);
  return *attr;
}

inline onnx::AttributeProto& add_floats_attr(onnx::NodeProto& node, const std::string& name,
                                             const std::vector<float>& values) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::FLOATS);
  for (float v : values) attr->add_floats(v);
  return *attr;
}

inline onnx::AttributeProto& add_ints_attr(onnx::NodeProto& node, const std::string& name,
                                           const std::vector<int64_t>& values) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) attr->add_ints(v);
  return *attr;
}

inline onnx::AttributeProto& add_string_attr(onnx::NodeProto& node, const std::string& name,
                                             const std::string& value) {
  onnx::AttributeProto* attr = node.add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::STRING);
  attr->set_s(value);
  return *attr;
}

// The fields ONNX 1.16 added for metadata_props (NodeProto 9, GraphProto 16), which the
// generated classes of older ONNX versions keep as unknown fields.
constexpr int kNodeMetadataField = 9;
constexpr int kGraphMetadataField = 16;

// Adds the metadata entry key = value to `message` (a NodeProto or GraphProto) in `field`.
inline void add_metadata(google::protobuf::Message& message, int field, const std::string& key,
                         const std::string& value) {
  onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(
      field, entry.SerializeAsString());
}

// An FX node as torch.onnx's dynamo exporter records it: `name` = aten.`target`(args).
inline std::string fx_node(const std::string& name, const std::string& target,
                           const std::string& args) {
  return "%" + name + " : [num_users=1] = call_function[target=torch.ops.aten." + target +
         "](args = (" + args + "), kwargs = {})";
}

// Records on `node` that PyTorch's dynamo exporter made it from aten.`target`(args).
inline onnx::NodeProto& from_aten(onnx::NodeProto& node, const std::string& name,
                                  const std::string& target, const std::string& args) {
  add_metadata(node, kNodeMetadataField, "pkg.torch.onnx.fx_node", fx_node(name, target, args));
  return node;
}

}  // namespace ampc::testing
