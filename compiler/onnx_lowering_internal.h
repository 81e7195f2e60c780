// What the import-time lowerings (compiler/onnx_lowering*.cc) share.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/onnx_lowering.h"

namespace ampc::onnx_io::lowering {

// Input `i` of `proto` as a tensor; an error naming the node when missing or not a tensor.
absl::StatusOr<Value*> tensor_input(const onnx::NodeProto& proto, int i, const std::string& label,
                                    ImportSink& sink);
bool has_input(const onnx::NodeProto& proto, int i);

// A node's int and float attributes, each checked against the op's (`known`: name -> type).
struct NodeAttributes {
  std::map<std::string, int64_t, std::less<>> ints;
  std::map<std::string, float, std::less<>> floats;
  std::map<std::string, std::vector<int64_t>, std::less<>> int_lists;
  int64_t i(std::string_view name, int64_t fallback) const;
  float f(std::string_view name, float fallback) const;
  bool has(std::string_view name) const {
    return ints.contains(name) || floats.contains(name) || int_lists.contains(name);
  }
};
absl::StatusOr<NodeAttributes> read_attributes(
    const onnx::NodeProto& proto, const std::string& label,
    const std::map<std::string, onnx::AttributeProto::AttributeType, std::less<>>& known);

// Ops expanded into the ops they are defined by (compiler/onnx_function_ops.cc).
absl::Status lower_rms_normalization(const onnx::NodeProto& proto, const std::string& label,
                                     ImportSink& sink);
absl::Status lower_attention(const onnx::NodeProto& proto, const std::string& label,
                             ImportSink& sink);
absl::Status lower_instance_normalization(const onnx::NodeProto& proto, const std::string& label,
                                          ImportSink& sink);
absl::Status lower_group_normalization(const onnx::NodeProto& proto, const std::string& label,
                                       ImportSink& sink);
absl::Status lower_reduce_log_sum_exp(const onnx::NodeProto& proto, const std::string& label,
                                      ImportSink& sink);

}  // namespace ampc::onnx_io::lowering
