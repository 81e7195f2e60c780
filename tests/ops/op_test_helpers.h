// Helpers for the op family tests in tests/ops/: short op cases, folded values, error
// messages, and the check that an op's samples infer the types written in them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/op_def.h"
#include "compiler/shape_inference.h"
#include "compiler/strings.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc::op_testing {

using ::ampc::testing::infer_op;
using ::ampc::testing::OpCase;

inline TensorType f32(Shape shape) { return {DType::kF32, std::move(shape)}; }
inline TensorType i64(Shape shape) { return {DType::kI64, std::move(shape)}; }
inline Tensor ints(std::vector<int64_t> values) {
  return Tensor::from_i64({static_cast<int64_t>(values.size())}, values);
}
inline Tensor scalar(int64_t value) { return Tensor::from_i64({}, {value}); }

using Inputs = std::vector<std::optional<TensorType>>;
using Constants = std::vector<std::pair<int, Tensor>>;

inline OpCase make_case(std::string op, Inputs inputs, Constants constants = {},
                        Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset,
                        int num_outputs = -1) {
  return OpCase{std::move(op), std::move(inputs), std::move(constants), std::move(attrs),
                opset,         num_outputs};
}

// The single output type of `op_case`, failing the test on an inference error.
inline TensorType infer_one(const OpCase& op_case) {
  absl::StatusOr<std::vector<TensorType>> types = infer_op(op_case);
  EXPECT_TRUE(types.ok()) << types.status();
  return types.ok() && !types->empty() ? types->front() : TensorType{};
}

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

inline absl::Status infer_error(std::string op, Inputs inputs, Constants constants = {},
                                Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset) {
  return infer_error(
      make_case(std::move(op), std::move(inputs), std::move(constants), std::move(attrs), opset));
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

// Builds `op_case` as infer_op does and returns the values its outputs fold to (empty when the
// node did not fold).
inline std::vector<Tensor> fold_op(const OpCase& op_case) {
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
  absl::StatusOr<std::vector<std::optional<TensorType>>> types = propagator.visit(*node);
  EXPECT_TRUE(types.ok()) << types.status();
  std::vector<Tensor> values;
  for (int i = 0; i < node->num_outputs(); ++i) {
    if (const Tensor* value = propagator.known_value(node->output(i))) values.push_back(*value);
  }
  return values;
}

inline std::vector<Tensor> fold_op(std::string op, Inputs inputs, Constants constants = {},
                                   Attributes attrs = {}, int64_t opset = kDefaultOnnxOpset,
                                   int num_outputs = -1) {
  return fold_op(make_case(std::move(op), std::move(inputs), std::move(constants), std::move(attrs),
                           opset, num_outputs));
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
