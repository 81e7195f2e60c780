// The generic op suite, driven by the registry: every op's samples infer the output types the
// sample states (computed by hand from the ONNX spec when the sample was written), and the
// registry holds the whole initial op set with consistent schemas.
#include <map>
#include <set>

#include "compiler/op_def.h"
#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

// The op set the foundation issue asks for.
const char* const kInitialOps[] = {"MatMul",
                                   "Gemm",
                                   "Add",
                                   "Sub",
                                   "Mul",
                                   "Div",
                                   "Pow",
                                   "Sqrt",
                                   "Exp",
                                   "Log",
                                   "Neg",
                                   "Abs",
                                   "Reciprocal",
                                   "Relu",
                                   "LeakyRelu",
                                   "Sigmoid",
                                   "Tanh",
                                   "Erf",
                                   "Gelu",
                                   "Softmax",
                                   "LogSoftmax",
                                   "LayerNormalization",
                                   "BatchNormalization",
                                   "Conv",
                                   "MaxPool",
                                   "AveragePool",
                                   "GlobalAveragePool",
                                   "Flatten",
                                   "Reshape",
                                   "Transpose",
                                   "Squeeze",
                                   "Unsqueeze",
                                   "Concat",
                                   "Split",
                                   "Slice",
                                   "Gather",
                                   "Expand",
                                   "Where",
                                   "Equal",
                                   "Less",
                                   "Greater",
                                   "Not",
                                   "Cast",
                                   "Identity",
                                   "Constant",
                                   "ConstantOfShape",
                                   "Shape",
                                   "Range",
                                   "Trilu",
                                   "Clip",
                                   "Min",
                                   "Max",
                                   "ReduceMean",
                                   "ReduceSum",
                                   "ReduceMax",
                                   "Dropout",
                                   "SoftmaxCrossEntropyLoss",
                                   "NegativeLogLikelihoodLoss"};

TEST(OpRegistry, HoldsTheInitialOpSetAtEveryOpsetFrom13To21) {
  for (const char* op : kInitialOps) {
    // ONNX itself introduced these later than opset 13.
    const std::map<std::string, int> kIntroduced = {
        {"Gelu", 20}, {"LayerNormalization", 17}, {"Trilu", 14}};
    const auto it = kIntroduced.find(op);
    const int first = it == kIntroduced.end() ? 13 : it->second;
    for (int opset = first; opset <= 21; ++opset) {
      EXPECT_NE(OpRegistry::global().find("", op, opset), nullptr) << op << " at opset " << opset;
    }
  }
}

TEST(OpRegistry, SchemasAreConsistent) {
  for (const OpDef* def : OpRegistry::global().all()) {
    SCOPED_TRACE(def->qualified_name());
    EXPECT_TRUE(def->infer) << "no inference";
    EXPECT_LE(def->since_opset, def->until_opset);
    EXPECT_FALSE(def->outputs.empty());
    std::set<std::string> names;
    for (const AttrSpec& spec : def->attrs) {
      EXPECT_TRUE(names.insert(spec.name).second) << "attribute " << spec.name << " twice";
      if (spec.default_value) {
        EXPECT_EQ(attr_kind(*spec.default_value), spec.kind) << "default of " << spec.name;
      }
      EXPECT_FALSE(spec.required && spec.default_value) << spec.name << " required with default";
    }
    for (const AttrAsInput& moved : def->attrs_as_inputs) {
      EXPECT_NE(def->find_attr(moved.attr), nullptr) << moved.attr;
      EXPECT_LT(moved.input, static_cast<int>(def->inputs.size())) << moved.attr;
    }
    EXPECT_GE(def->samples.size(), 2u) << "fewer than two samples";
  }
}

// The policy tables cover the ONNX ops; internal ops (gradients, optimizer updates) take their
// precision from the forward node they serve, not from a category.
TEST(OpRegistry, EveryOnnxOpHasAnAutocastCategory) {
  for (const OpDef* def : OpRegistry::global().all()) {
    if (def->domain != kOnnxDomain) continue;
    EXPECT_NE(def->autocast.category, AutocastCategory::kNone) << def->qualified_name();
  }
}

TEST(OpSamples, InferTheStatedOutputTypes) {
  int checked = 0;
  for (const OpDef* def : OpRegistry::global().all()) {
    for (const OpSample& sample : def->samples) {
      SCOPED_TRACE(str_cat(def->qualified_name(), " sample '", sample.name, "'"));
      testing::OpCase op_case;
      op_case.op_type = def->name;
      op_case.domain = def->domain;
      op_case.opset = def->domain.empty() ? std::max(def->since_opset, 13) : def->since_opset;
      if (def->until_opset < op_case.opset) op_case.opset = def->until_opset;
      for (const TensorType& type : sample.inputs) op_case.input_types.push_back(type);
      op_case.constant_inputs = sample.constant_inputs;
      op_case.attrs = sample.attrs;
      op_case.num_outputs = static_cast<int>(sample.outputs.size());
      absl::StatusOr<std::vector<TensorType>> types = testing::infer_op(op_case);
      ASSERT_TRUE(types.ok()) << types.status();
      ASSERT_EQ(types->size(), sample.outputs.size());
      for (size_t i = 0; i < sample.outputs.size(); ++i) {
        EXPECT_EQ(type_to_string((*types)[i]), type_to_string(sample.outputs[i])) << "output " << i;
      }
      ++checked;
    }
  }
  std::printf("checked %d op samples\n", checked);
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace ampc
