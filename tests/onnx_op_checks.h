// Checks the tests of ops lowered at import share: importing and running a model, a loss that
// weighs an output by a graph input, gradients against central differences in f64, and import
// errors.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/onnx_model_builder.h"

namespace ampc::testing {

// The graph the model `bytes` imports to; a failure fails the test and gives null.
inline std::unique_ptr<Graph> import_ok(const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(bytes, "test.onnx");
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : nullptr;
}
inline std::unique_ptr<Graph> import_ok(const ModelBuilder& m) { return import_ok(m.bytes()); }

// `graph`'s initializer `name`; a failure fails the test and gives null.
inline const Value* find_initializer(const Graph& graph, std::string_view name) {
  for (const Value* init : graph.initializers()) {
    if (init->name() == name) return init;
  }
  ADD_FAILURE() << "no initializer " << name;
  return nullptr;
}

// `graph`'s first node of `op_type`; a failure fails the test and gives null.
inline const Node* first_node(const Graph& graph, std::string_view op_type) {
  for (const auto& node : graph.nodes()) {
    if (node->op_type() == op_type) return node.get();
  }
  ADD_FAILURE() << "no " << op_type << " node";
  return nullptr;
}

// `graph`'s outputs on `inputs`, from the interpreter; a failure fails the test and gives none.
inline std::vector<Tensor> run_graph(const Graph& graph, const std::vector<Tensor>& inputs) {
  absl::StatusOr<std::vector<Tensor>> outputs = runtime::interpret_graph(graph, inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? *std::move(outputs) : std::vector<Tensor>{};
}

// `graph` exported to ONNX: the file and its (last) node of `op_type`.
struct Exported {
  std::string bytes;
  onnx::NodeProto node;
};

inline Exported export_and_find(const Graph& graph, std::string_view op_type) {
  Exported out;
  absl::StatusOr<std::string> bytes = export_onnx_bytes(graph);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (!bytes.ok()) return out;
  out.bytes = *std::move(bytes);
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(out.bytes));
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() == op_type) out.node = node;
  }
  EXPECT_EQ(out.node.op_type(), op_type) << "no " << op_type << " node written";
  return out;
}

// Empty when the linked ONNX library's checker and its strict, type-checking shape inference
// accept the model `bytes`, else what they say (that library knows ai.onnx up to opset 17).
inline std::string onnx_checker_errors(const std::string& bytes) {
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes)) return "the written bytes do not parse";
  try {
    onnx::checker::check_model(proto);
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true,
                                                                   /*strict_mode=*/1));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline int count_ops(const Graph& graph, std::string_view op_type) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node->op_type() == op_type;
  return n;
}

// Appends loss = ReduceSum(`y` * W) with W [`shape`] an f64 graph input, and declares the output.
inline void add_weighted_loss(ModelBuilder& m, const std::string& y,
                              const std::vector<std::string>& shape) {
  m.input("W", onnx::TensorProto::DOUBLE, shape);
  m.node("Mul", {y, "W"}, {"weighted"}, "weigh");
  add_int_attr(m.node("ReduceSum", {"weighted"}, {"loss"}, "sum"), "keepdims", 0);
  m.output("loss");
}

// The gradients of `loss` with respect to the inputs matching `wrt` (a regex) within 1e-6 of
// central differences, at inputs drawn from `seed` (check_onnx_gradients).
inline void expect_onnx_gradients_match(const ModelBuilder& m, const std::string& wrt,
                                        uint32_t seed) {
  absl::StatusOr<GradientCheck> check = check_onnx_gradients(m.bytes(), wrt, seed);
  ASSERT_TRUE(check.ok()) << check.status().message();
  EXPECT_GE(check->inputs_checked, 1);
  EXPECT_LT(check->max_relative_error, 1e-6) << check->worst_input;
}

// Importing `m` fails with a message that holds `message`.
inline void expect_import_error(const ModelBuilder& m, const std::string& message) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "bad.onnx");
  ASSERT_FALSE(graph.ok()) << message;
  EXPECT_NE(graph.status().message().find(message), std::string::npos) << graph.status();
}

// Importing `m` fails with a message that holds every one of `fragments`.
inline void expect_import_errors(const ModelBuilder& m, const std::vector<std::string>& fragments) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "test.onnx");
  ASSERT_FALSE(graph.ok()) << "import succeeded";
  for (const std::string& fragment : fragments) {
    EXPECT_NE(graph.status().message().find(fragment), std::string::npos)
        << "message: " << graph.status().message() << "\nmissing: " << fragment;
  }
}

// The elements of an f32 tensor.
inline std::vector<float> floats(const Tensor& t) {
  std::span<const float> data = t.data<float>();
  return {data.begin(), data.end()};
}

}  // namespace ampc::testing
