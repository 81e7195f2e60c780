// Reading the node test cases of ONNX's test data (libonnx-testdata): the case lists, which
// cases ampc supports, their input files, and importing a case the way ampc compiles it. Shared
// by the conformance tests.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/onnx_io.h"
#include "compiler/onnx_lowering.h"
#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/test_util.h"

namespace ampc::testing {

namespace fs = std::filesystem;

inline std::optional<std::string> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

// Case names, one a line; text after the name (a reason) and '#' comment lines are ignored.
inline std::set<std::string> read_case_list(const std::string& relative) {
  std::set<std::string> names;
  std::ifstream in(source_path(relative));
  EXPECT_TRUE(in) << "cannot read " << relative;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of(" \t:")));
  }
  return names;
}

inline int64_t model_opset(const onnx::ModelProto& model, std::string_view domain) {
  for (const onnx::OperatorSetIdProto& opset : model.opset_import()) {
    const std::string d = opset.domain() == "ai.onnx" ? "" : opset.domain();
    if (d == domain) return opset.version();
  }
  return -1;
}

// True when every node's op is registered at the model's opset of its domain, or lowered at
// import.
inline bool all_ops_registered(const onnx::ModelProto& model) {
  for (const onnx::NodeProto& node : model.graph().node()) {
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    if (!OpRegistry::global().find(domain, node.op_type(), model_opset(model, domain)) &&
        !onnx_io::lowered_at_import(domain, node.op_type())) {
      return false;
    }
  }
  return true;
}

// The graph inputs that are not initializers, in order (the input_N.pb files follow it).
inline std::vector<const onnx::ValueInfoProto*> data_inputs(const onnx::GraphProto& graph) {
  std::set<std::string> initializers;
  for (const onnx::TensorProto& init : graph.initializer()) initializers.insert(init.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const onnx::ValueInfoProto& input : graph.input()) {
    if (!initializers.contains(input.name())) inputs.push_back(&input);
  }
  return inputs;
}

// --shape options from the test's input tensors, for inputs whose declared shape is not static.
inline absl::StatusOr<ImportOptions> options_from_inputs(const onnx::ModelProto& model,
                                                         const fs::path& data_set) {
  ImportOptions options;
  const std::vector<const onnx::ValueInfoProto*> inputs = data_inputs(model.graph());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const onnx::TypeProto& type = inputs[i]->type();
    bool is_static = type.tensor_type().has_shape();
    for (const auto& dim : type.tensor_type().shape().dim()) is_static &= dim.has_dim_value();
    if (is_static) continue;
    std::optional<std::string> bytes = read_bytes(data_set / str_cat("input_", i, ".pb"));
    onnx::TensorProto tensor;
    if (!bytes || !tensor.ParseFromString(*bytes)) {
      return absl::NotFoundError(str_cat("input ", i, " is dynamic and has no input_", i, ".pb"));
    }
    options.input_shapes[inputs[i]->name()] = Shape(tensor.dims().begin(), tensor.dims().end());
  }
  return options;
}

// ampc fixes every shape at compile time. Where a case feeds a shape-determining input
// (Reshape's shape, Slice's starts, Range's bounds, axes inputs) at run time, it is compiled for
// the test's own input values: the data inputs become initializers holding input_N.pb.
inline absl::StatusOr<std::string> bind_inputs_as_constants(onnx::ModelProto model,
                                                            const fs::path& data_set) {
  const std::vector<const onnx::ValueInfoProto*> inputs = data_inputs(model.graph());
  std::vector<onnx::TensorProto> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::optional<std::string> bytes = read_bytes(data_set / str_cat("input_", i, ".pb"));
    onnx::TensorProto& tensor = values.emplace_back();
    if (!bytes || !tensor.ParseFromString(*bytes)) {
      return absl::NotFoundError(str_cat("cannot read input_", i, ".pb"));
    }
    tensor.set_name(inputs[i]->name());
  }
  for (onnx::TensorProto& tensor : values) *model.mutable_graph()->add_initializer() = tensor;
  return model.SerializeAsString();
}

// Imports the case, binding its inputs to the test's values when an op needs them constant.
inline absl::StatusOr<std::unique_ptr<Graph>> import_case(const fs::path& dir,
                                                          const onnx::ModelProto& model,
                                                          const ImportOptions& options,
                                                          bool* bound) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_file((dir / "model.onnx").string(), options);
  if (graph.ok() || !absl::StrContains(graph.status().message(), "known at compile time")) {
    return graph;
  }
  AMPC_ASSIGN_OR_RETURN(std::string bound_model,
                        bind_inputs_as_constants(model, dir / "test_data_set_0"));
  *bound = true;
  // Every data input is now an initializer, so no --shape applies.
  return import_onnx_bytes(bound_model, (dir / "model.onnx (inputs bound)").string(),
                           ImportOptions{});
}

// The case folders (those holding a model.onnx) of the node tests and of the small model tests
// in simple/ (sequences, Expand chains), sorted.
inline std::vector<fs::path> node_case_dirs() {
  std::vector<fs::path> dirs;
  for (const char* suite : {"node", "simple"}) {
    for (const auto& entry : fs::directory_iterator(onnx_test_data_path(suite))) {
      if (fs::exists(entry.path() / "model.onnx")) dirs.push_back(entry.path());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// A case's name in the case lists: the folder's name, prefixed with "simple/" for those tests.
inline std::string case_name(const fs::path& dir) {
  const std::string name = dir.filename().string();
  return dir.parent_path().filename() == "simple" ? "simple/" + name : name;
}

}  // namespace ampc::testing
