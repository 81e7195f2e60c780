// Helpers for the op family tests in tests/ops/: type shorthands, short op cases, inferred types,
// folded values, error messages, ONNX node test models, and the check that an op's samples infer
// the types written in them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ampc/status.h"
#include "compiler/onnx_io.h"
#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc::op_testing {

using ::ampc::testing::infer_op;
using ::ampc::testing::OpCase;

// Tensor types of `shape` with the element type the name says.
inline TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
inline TensorType f16(Shape shape) { return {DType::kF16, std::move(shape)}; }
inline TensorType bf16(Shape shape) { return {DType::kBF16, std::move(shape)}; }
inline TensorType i64(Shape shape) { return {DType::kI64, std::move(shape)}; }
inline TensorType u8(Shape shape) { return {DType::kU8, std::move(shape)}; }
inline TensorType boolean(Shape shape) { return {DType::kBool, std::move(shape)}; }

// A 1-D i64 tensor of `values`.
inline Tensor ints(std::vector<int64_t> values) {
  return Tensor::from_i64({static_cast<int64_t>(values.size())}, values);
}
// A scalar i64 tensor.
inline Tensor scalar(int64_t value) { return Tensor::from_i64({}, {value}); }

// Input types (nullopt: an omitted optional input) and constant inputs (index, value) of a case.
using Inputs = std::vector<std::optional<TensorType>>;
using Constants = std::vector<std::pair<int, Tensor>>;

// An OpCase from its fields, in OpCase's order.
inline OpCase make_case(std::string op, Inputs inputs, Constants constants = {},
                        Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset,
                        int num_outputs = -1) {
  return OpCase{std::move(op), std::move(inputs), std::move(constants), std::move(attrs),
                opset,         num_outputs};
}

// Output types of a one-node graph of `op` over graph inputs of `inputs` (nullopt: omitted).
inline absl::StatusOr<std::vector<TensorType>> infer(std::string op, Inputs inputs,
                                                     Attributes attrs = {},
                                                     int64_t opset = kDefaultOnnxOpset,
                                                     int num_outputs = -1) {
  return infer_op(
      make_case(std::move(op), std::move(inputs), {}, std::move(attrs), opset, num_outputs));
}

// The output types of `op_case`, or no types (and a test failure) when inference fails.
inline std::vector<TensorType> infer_ok(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> out = infer_op(op_case);
  EXPECT_TRUE(out.ok()) << op_case.op_type << ": " << out.status();
  return out.ok() ? *out : std::vector<TensorType>{};
}

// The single output type of `op_case`, failing the test on an inference error.
inline TensorType infer_one(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> types = infer_op(op_case);
  EXPECT_TRUE(types.ok()) << types.status();
  return types.ok() && !types->empty() ? types->front() : TensorType{};
}

// infer_one of the case made from these fields.
inline TensorType infer_one(std::string op, Inputs inputs, Constants constants = {},
                            Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset) {
  return infer_one(
      make_case(std::move(op), std::move(inputs), std::move(constants), std::move(attrs), opset));
}

// The inference error of `op_case` (OK when it unexpectedly succeeds).
inline absl::Status infer_error(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> types = infer_op(op_case);
  return types.status();
}

// infer_error of the case made from these fields.
inline absl::Status infer_error(std::string op, Inputs inputs, Constants constants = {},
                                Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset) {
  return infer_error(
      make_case(std::move(op), std::move(inputs), std::move(constants), std::move(attrs), opset));
}

// The inference error message of `op_case` (empty, and a test failure, when it succeeds).
inline std::string error_of(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> out = infer_op(op_case);
  EXPECT_FALSE(out.ok()) << op_case.op_type << " unexpectedly succeeded";
  return out.ok() ? std::string() : std::string(out.status().message());
}

// The error message of an inference result (empty when it succeeded).
inline std::string message(const absl::StatusOr<std::vector<TensorType>>& result) {
  return std::string(result.status().message());
}

// Whether `status` is an error whose message contains `text`.
inline ::testing::AssertionResult fails_with(const absl::Status& status, std::string_view text) {
  if (status.ok()) return ::testing::AssertionFailure() << "succeeded; expected '" << text << "'";
  const std::string message(status.message().data(), status.message().size());
  if (message.find(text) == std::string::npos) {
    return ::testing::AssertionFailure() << "'" << message << "' does not mention '" << text << "'";
  }
  return ::testing::AssertionSuccess();
}

// Builds `op_case` as infer_op does and runs inference on it: the value each output folds to
// (nullopt where it did not fold), or the inference error.
inline absl::StatusOr<std::vector<std::optional<Tensor>>> fold_outputs(const OpCase& op_case) {
  Graph graph("fold");
  graph.set_opset("", op_case.opset);
  std::vector<Value*> operands;
  for (int i = 0; i < static_cast<int>(op_case.input_types.size()); ++i) {
    Value* value = nullptr;
    for (const auto& [index, tensor] : op_case.constant_inputs) {
      if (index == i) value = graph.add_initializer(str_cat("c", i), tensor);
    }
    if (value == nullptr && op_case.input_types[i]) {
      value = graph.add_input(str_cat("x", i), *op_case.input_types[i]);
    }
    operands.push_back(value);
  }
  const int num_outputs = op_case.num_outputs >= 0 ? op_case.num_outputs : 1;
  std::vector<std::optional<TensorType>> outputs(num_outputs, TensorType{});
  Node* node = graph.create_node("", op_case.op_type, operands, outputs, op_case.attrs);
  TypePropagator propagator;
  AMPC_RETURN_IF_ERROR(propagator.visit(*node).status());
  std::vector<std::optional<Tensor>> values;
  for (int i = 0; i < node->num_outputs(); ++i) {
    const Tensor* value = propagator.known_value(node->output(i));
    values.push_back(value != nullptr ? std::optional<Tensor>(*value) : std::nullopt);
  }
  return values;
}

// The values the outputs of `op_case` fold to (empty when the node did not fold), failing the
// test on an inference error.
inline std::vector<Tensor> fold_op(const OpCase& op_case) {
  absl::StatusOr<std::vector<std::optional<Tensor>>> types = fold_outputs(op_case);
  EXPECT_TRUE(types.ok()) << types.status();
  std::vector<Tensor> values;
  if (!types.ok()) return values;
  for (const std::optional<Tensor>& value : *types) {
    if (value) values.push_back(*value);
  }
  return values;
}

// fold_op of the case made from these fields.
inline std::vector<Tensor> fold_op(std::string op, Inputs inputs, Constants constants = {},
                                   Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset,
                                   int num_outputs = -1) {
  return fold_op(make_case(std::move(op), std::move(inputs), std::move(constants), std::move(attrs),
                           opset, num_outputs));
}

// The output types of the ONNX node test model `name` (node/<name>/model.onnx) as imported, or
// the import error.
inline absl::StatusOr<std::vector<TensorType>> onnx_node_test_outputs(std::string_view name) {
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_file(::ampc::testing::onnx_test_data_path(str_cat("node/", name, "/model.onnx")));
  if (!graph.ok()) return graph.status();
  std::vector<TensorType> outputs;
  for (const Value* value : (*graph)->outputs()) outputs.push_back(value->type());
  return outputs;
}

// An ONNX node test model's name and the output types its import must give.
struct OnnxNodeCase {
  const char* name;
  std::vector<TensorType> outputs;
};

// Every model in `cases` imports with the output types listed for it.
inline void expect_onnx_node_outputs(const std::vector<OnnxNodeCase>& cases) {
  for (const OnnxNodeCase& c : cases) {
    absl::StatusOr<std::vector<TensorType>> outputs = onnx_node_test_outputs(c.name);
    ASSERT_TRUE(outputs.ok()) << c.name << ": " << outputs.status();
    EXPECT_EQ(*outputs, c.outputs) << c.name;
  }
}

// Every sample of `op`'s definitions infers the output types written in it.
inline void expect_samples_hold(std::string_view op) {
  const std::vector<const OpDef*> defs = OpRegistry::global().find_all("", op);
  ASSERT_FALSE(defs.empty()) << op << " is not registered";
  for (const OpDef* def : defs) {
    EXPECT_GE(def->samples.size(), 2u) << op;
    EXPECT_EQ(def->autocast.category, AutocastCategory::kClear) << op;
    for (const OpSample& sample : def->samples) {
      const Inputs inputs(sample.inputs.begin(), sample.inputs.end());
      const OpCase op_case =
          make_case(std::string(op), inputs, sample.constant_inputs, sample.attrs,
                    std::clamp<int64_t>(kDefaultOnnxOpset, def->since_opset, def->until_opset),
                    static_cast<int>(sample.outputs.size()));
      absl::StatusOr<std::vector<TensorType>> types = infer_op(op_case);
      ASSERT_TRUE(types.ok()) << op << " sample '" << sample.name << "': " << types.status();
      EXPECT_EQ(*types, sample.outputs) << op << " sample '" << sample.name << "'";
    }
  }
}

}  // namespace ampc::op_testing
