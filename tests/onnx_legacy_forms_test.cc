// The forms ops had at old opsets, as the importer reads them (compiler/onnx_legacy_ops.cc):
// Softmax and LogSoftmax before opset 13 (the 2-D coercion at `axis`), BatchNormalization's
// training form at opsets 9-13 (outputs past Y) and Dropout's before 12 (the mask output). Results
// are checked against the definitions computed here in f64 (softmax within 1e-14,
// BatchNormalization's statistics within 1e-12 relative: sums of 20 terms and a square root, in
// another order), and the zoo's opset-12 exports against PyTorch's training runs
// (tests/runtime/zoo_test.cc).
#include <cmath>
#include <cstdint>
#include <optional>

#include "absl/strings/match.h"
#include "compiler/onnx_io.h"
#include "compiler/text_ir.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/interpreter.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/runtime/cpu/kernel_test_util.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::count_ops;
using testing::export_and_find;
using testing::Exported;
using testing::import_ok;
using testing::ModelBuilder;
using testing::random_values;
using testing::run_graph;

const Node* only_node(const Graph& graph, std::string_view op_type) {
  const Node* found = nullptr;
  for (const auto& node : graph.nodes()) {
    if (node->op_type() == op_type) {
      EXPECT_EQ(found, nullptr) << "two " << op_type << " nodes";
      found = node.get();
    }
  }
  EXPECT_NE(found, nullptr) << "no " << op_type << " node";
  return found;
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got.element_as_double(static_cast<int64_t>(i)), want[i],
                rel * std::max(1.0, std::abs(want[i])))
        << "element " << i;
  }
}

// ---- Softmax and LogSoftmax before opset 13 --------------------------------------------------

// The definition before opset 13: rows of `n` elements (the dims from the axis on), each
// normalized as one.
std::vector<double> coerced_softmax(const std::vector<double>& x, int64_t n, bool log) {
  std::vector<double> y(x.size());
  for (size_t first = 0; first < x.size(); first += n) {
    double max = -INFINITY, sum = 0;
    for (int64_t k = 0; k < n; ++k) max = std::max(max, x[first + k]);
    for (int64_t k = 0; k < n; ++k) sum += std::exp(x[first + k] - max);
    for (int64_t k = 0; k < n; ++k) {
      y[first + k] = log ? x[first + k] - max - std::log(sum) : std::exp(x[first + k] - max) / sum;
    }
  }
  return y;
}

TEST(LegacyForms, SoftmaxBeforeOpset13NormalizesTheTwoDCoercionAtItsAxis) {
  const std::vector<double> x = random_values(2 * 3 * 4, 7);
  struct Case {
    std::optional<int64_t> axis;  // nullopt: the default, 1
    int64_t row;                  // elements per row of the coercion
    bool flattens;                // an axis that is not the last is Flatten, op, Reshape
  };
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (const Case& c : {Case{std::nullopt, 12, true}, Case{0, 24, true}, Case{1, 12, true},
                          Case{2, 4, false}, Case{-1, 4, false}, Case{-2, 12, true}}) {
      SCOPED_TRACE(str_cat(op, " axis ", c.axis ? str_cat(*c.axis) : "default"));
      for (int64_t opset : {11, 12}) {
        ModelBuilder m(opset);
        m.input("x", onnx::TensorProto::DOUBLE, {"2", "3", "4"});
        onnx::NodeProto& node = m.node(op, {"x"}, {"y"}, "sm");
        if (c.axis) add_int_attr(node, "axis", *c.axis);
        m.output("y");
        std::unique_ptr<Graph> graph = import_ok(m.bytes());
        ASSERT_NE(graph, nullptr);
        EXPECT_EQ(count_ops(*graph, "Flatten"), c.flattens ? 1 : 0);
        EXPECT_EQ(only_node(*graph, op)->name(),
                  c.flattens ? "sm/" + std::string(op) + "_2" : "sm");
        const std::vector<Tensor> y =
            run_graph(*graph, {Tensor::from_doubles(DType::kF64, {2, 3, 4}, x)});
        ASSERT_EQ(y.size(), 1u);
        EXPECT_EQ(y[0].shape(), (Shape{2, 3, 4}));
        expect_near_all(y[0], coerced_softmax(x, c.row, std::string_view(op) == "LogSoftmax"),
                        1e-14);
      }
    }
  }
}

TEST(LegacyForms, SoftmaxBeforeOpset13OverTheLastAxisIsOneNodeAndOtherAxesAreNotRegistered) {
  // Hand-written IR at opset 12 with an axis that is not the last is refused with the reason.
  ModelBuilder m(12);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.node("Softmax", {"x"}, {"y"}, "sm");
  m.output("y");
  std::unique_ptr<Graph> graph = import_ok(m.bytes());
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(graph->num_nodes(), 1);
  EXPECT_EQ(only_node(*graph, "Softmax")->int_attr("axis"), 1);  // the last of rank 2
  const OpDef* def = OpRegistry::global().find("", "Softmax", 12);
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->until_opset, 12);
  absl::StatusOr<std::unique_ptr<Graph>> parsed = parse_graph(
      "graph g(%x: f32[2,3,4]) opset(12) {\n  %y = Softmax<axis=1>(%x) : f32[2,3,4]\n"
      "  return %y\n}\n");
  absl::Status status = parsed.ok() ? verify(**parsed) : parsed.status();
  EXPECT_TRUE(absl::StrContains(status.message(), "not the last of rank 3")) << status;
}

// ---- BatchNormalization at opsets 9-13 -------------------------------------------------------

struct BatchNormCase {
  std::vector<double> x, scale, bias, mean, var;
  static constexpr int64_t kN = 4, kC = 3, kSpatial = 5;
};

BatchNormCase batch_norm_case() {
  BatchNormCase c;
  c.x = random_values(c.kN * c.kC * c.kSpatial, 3);
  c.scale = random_values(c.kC, 4);
  c.bias = random_values(c.kC, 5);
  c.mean = random_values(c.kC, 6);
  c.var = {0.5, 1.25, 2.0};
  return c;
}

// A BatchNormalization model at `opset` reading X [4, 3, 5] and f64 parameters, with `outputs`
// (those named are graph outputs) and momentum 0.75.
ModelBuilder batch_norm_model(int64_t opset, const std::vector<std::string>& outputs) {
  ModelBuilder m(opset);
  m.input("x", onnx::TensorProto::DOUBLE, {"4", "3", "5"});
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    m.input(name, onnx::TensorProto::DOUBLE, {"3"});
  }
  onnx::NodeProto& node =
      m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, outputs, "bn");
  onnx::AttributeProto* momentum = node.add_attribute();
  momentum->set_name("momentum");
  momentum->set_type(onnx::AttributeProto::FLOAT);
  momentum->set_f(0.75f);
  for (const std::string& output : outputs) {
    if (!output.empty()) m.output(output);
  }
  return m;
}

std::vector<Tensor> batch_norm_inputs(const BatchNormCase& c) {
  return {Tensor::from_doubles(DType::kF64, {c.kN, c.kC, c.kSpatial}, c.x),
          Tensor::from_doubles(DType::kF64, {c.kC}, c.scale),
          Tensor::from_doubles(DType::kF64, {c.kC}, c.bias),
          Tensor::from_doubles(DType::kF64, {c.kC}, c.mean),
          Tensor::from_doubles(DType::kF64, {c.kC}, c.var)};
}

TEST(LegacyForms, BatchNormalizationWithMeanAndVarOutputsNormalizesWithTheBatchStatistics) {
  const BatchNormCase c = batch_norm_case();
  // The definition: per channel, the batch's mean and population variance normalize Y; the
  // outputs mean and var are the running statistics moved by momentum toward them.
  std::vector<double> y(c.x.size()), mean(c.kC), var(c.kC);
  for (int64_t ch = 0; ch < c.kC; ++ch) {
    double sum = 0, squares = 0;
    const int64_t count = c.kN * c.kSpatial;
    for (int64_t n = 0; n < c.kN; ++n) {
      for (int64_t s = 0; s < c.kSpatial; ++s) sum += c.x[(n * c.kC + ch) * c.kSpatial + s];
    }
    const double batch_mean = sum / static_cast<double>(count);
    for (int64_t n = 0; n < c.kN; ++n) {
      for (int64_t s = 0; s < c.kSpatial; ++s) {
        const double d = c.x[(n * c.kC + ch) * c.kSpatial + s] - batch_mean;
        squares += d * d;
      }
    }
    const double batch_var = squares / static_cast<double>(count);
    for (int64_t n = 0; n < c.kN; ++n) {
      for (int64_t s = 0; s < c.kSpatial; ++s) {
        const int64_t i = (n * c.kC + ch) * c.kSpatial + s;
        y[i] = (c.x[i] - batch_mean) / std::sqrt(batch_var + 1e-5) * c.scale[ch] + c.bias[ch];
      }
    }
    mean[ch] = c.mean[ch] * 0.75 + batch_mean * 0.25;
    var[ch] = c.var[ch] * 0.75 + batch_var * 0.25;
  }
  for (int64_t opset : {9, 12, 13}) {
    SCOPED_TRACE(str_cat("opset ", opset));
    // TorchScript's training-mode export names all five outputs and reads Y only.
    ModelBuilder m =
        batch_norm_model(opset, {"y", "mean_out", "var_out", "saved_mean", "saved_var"});
    m.graph().mutable_output()->RemoveLast();  // saved_var
    m.graph().mutable_output()->RemoveLast();  // saved_mean
    std::unique_ptr<Graph> graph = import_ok(m.bytes());
    ASSERT_NE(graph, nullptr);
    const Node* bn = only_node(*graph, "BatchNormalization");
    EXPECT_EQ(bn->int_attr("training_mode"), 1);
    EXPECT_EQ(bn->def()->until_opset, 13);
    const std::vector<Tensor> out = run_graph(*graph, batch_norm_inputs(c));
    ASSERT_EQ(out.size(), 3u);
    expect_near_all(out[0], y, 1e-12);
    expect_near_all(out[1], mean, 1e-12);
    expect_near_all(out[2], var, 1e-12);
  }
  // With Y alone it is inference: the given statistics normalize Y.
  std::unique_ptr<Graph> inference = import_ok(batch_norm_model(12, {"y"}).bytes());
  ASSERT_NE(inference, nullptr);
  EXPECT_EQ(only_node(*inference, "BatchNormalization")->int_attr("training_mode"), 0);
  const std::vector<Tensor> out = run_graph(*inference, batch_norm_inputs(c));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NEAR(out[0].element_as_double(0),
              (c.x[0] - c.mean[0]) / std::sqrt(c.var[0] + 1e-5) * c.scale[0] + c.bias[0], 1e-12);
}

TEST(LegacyForms, SavedMeanAndSavedVarAreNotComputedAndReadingOneSaysSo) {
  ModelBuilder read = batch_norm_model(12, {"y", "", "", "saved_mean"});
  read.graph().mutable_output()->Clear();
  read.node("Neg", {"saved_mean"}, {"z"}, "neg");
  read.output("z");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(read.bytes(), "legacy.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(),
                                "node 'neg' (Neg) reads 'saved_mean', the saved_mean output of "
                                "node 'bn' (BatchNormalization), which ampc does not compute"))
      << graph.status();
  ModelBuilder output = batch_norm_model(12, {"y", "", "", "", "saved_var"});
  graph = import_onnx_bytes(output.bytes(), "legacy.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(),
                                "graph output 'saved_var' is the saved_var output of node 'bn'"))
      << graph.status();
  // Attributes of other opsets are refused, not ignored.
  ModelBuilder spatial = batch_norm_model(12, {"y"});
  add_int_attr(*spatial.graph().mutable_node(0), "spatial", 1);
  graph = import_onnx_bytes(spatial.bytes(), "legacy.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "'spatial'")) << graph.status();
}

TEST(LegacyForms, ExportWritesTheTrainingFormBackAsTheMeanAndVarOutputs) {
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    // Y only, but in training mode: export must name mean and var for the file to say so.
    ModelBuilder m = batch_norm_model(
        12, training ? std::vector<std::string>{"y", "mean_out"} : std::vector<std::string>{"y"});
    std::unique_ptr<Graph> graph = import_ok(m.bytes());
    ASSERT_NE(graph, nullptr);
    const Exported exported = export_and_find(*graph, "BatchNormalization");
    const onnx::NodeProto* written = &exported.node;
    for (const onnx::AttributeProto& attr : written->attribute()) {
      EXPECT_NE(attr.name(), "training_mode");  // not an attribute before opset 14
    }
    if (training) {
      ASSERT_EQ(written->output_size(), 5);  // ONNX's checker allows 1 or 5
      EXPECT_EQ(written->output(1), "mean_out");
      for (int i = 2; i < 5; ++i) EXPECT_FALSE(written->output(i).empty()) << i;
    } else {
      EXPECT_EQ(written->output_size(), 1);
    }
    std::unique_ptr<Graph> again = import_ok(exported.bytes);
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(only_node(*again, "BatchNormalization")->int_attr("training_mode"), training);
  }
}

TEST(LegacyForms, AGraphRaisedToOpset14WritesTrainingModeAsTheAttribute) {
  // legalize-opset raises a graph with bf16 BatchNormalization to 14: the node then has the
  // attribute in the file, as opset 14 defines it.
  std::unique_ptr<Graph> graph = import_ok(batch_norm_model(12, {"y", "mean_out"}).bytes());
  ASSERT_NE(graph, nullptr);
  graph->set_opset("", 14);
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::unique_ptr<Graph> again = import_ok(*bytes);
  ASSERT_NE(again, nullptr);
  const Node* bn = only_node(*again, "BatchNormalization");
  EXPECT_EQ(bn->int_attr("training_mode"), 1);
  EXPECT_EQ(bn->def()->until_opset, kLatestOpset);
}

// ---- Slice before opset 10 -------------------------------------------------------------------

// An opset-9 file with a training Dropout (its mask output), which ONNX's converter would make an
// inference Dropout, is imported as it is (compiler/onnx_import.cc), and its Slices with them:
// each sliced axis becomes a Gather of the positions Slice's definition picks (negative starts
// and ends count from the axis's end, and both clamp to it). Data movement: exact.
TEST(LegacyForms, SliceWithItsAttributesBeforeOpset10PicksThePositionsItsDefinitionDoes) {
  // x[r][c] = 10 r + c, 3 x 5.
  std::vector<float> x;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) x.push_back(static_cast<float>(10 * r + c));
  }
  struct Case {
    std::vector<int64_t> starts, ends;
    std::optional<std::vector<int64_t>> axes;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      // Rows 1.. (PyTorch's x[1:] writes INT64_MAX), columns -3 .. -1: 2 and 3.
      {{1, -3}, {INT64_MAX, -1}, std::nullopt, {12, 13, 22, 23}},
      // Axis -1 from 3 to 100 (clamped to 5); axis 0 from -100 (clamped to 0) to 1.
      {{3, -100}, {100, 1}, std::vector<int64_t>{-1, 0}, {3, 4}},
      // An empty window: start past end.
      {{4}, {2}, std::vector<int64_t>{1}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.starts));
    ModelBuilder m(9);
    m.input("x", onnx::TensorProto::FLOAT, {"3", "5"});
    onnx::NodeProto& drop = m.node("Dropout", {"x"}, {"d", "mask"}, "drop");
    testing::add_float_attr(drop, "ratio", 0.0f);
    onnx::NodeProto& slice = m.node("Slice", {"d"}, {"y"}, "slice");
    testing::add_ints_attr(slice, "starts", c.starts);
    testing::add_ints_attr(slice, "ends", c.ends);
    if (c.axes) testing::add_ints_attr(slice, "axes", *c.axes);
    m.output("y");
    std::unique_ptr<Graph> graph = import_ok(m.bytes());
    ASSERT_NE(graph, nullptr);
    EXPECT_EQ(graph->metadata().count("ampc.converted_from_opset"), 0u);
    const std::vector<Tensor> y = run_graph(*graph, {Tensor::from_f32({3, 5}, x)});
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].to_double_vector(), c.want);
  }
}

// ---- Dropout before opset 12 ------------------------------------------------------------------

ModelBuilder dropout_model(int64_t opset, const std::vector<std::string>& outputs) {
  ModelBuilder m(opset);
  m.input("x", onnx::TensorProto::FLOAT, {"64", "32"});
  onnx::NodeProto& node = m.node("Dropout", {"x"}, outputs, "drop");
  onnx::AttributeProto* ratio = node.add_attribute();
  ratio->set_name("ratio");
  ratio->set_type(onnx::AttributeProto::FLOAT);
  ratio->set_f(0.25f);
  m.output(outputs[0]);
  return m;
}

TEST(LegacyForms, DropoutWithItsMaskOutputBeforeOpset12DropsAsInTraining) {
  std::vector<float> x(64 * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + static_cast<float>(i % 7);
  const Tensor input = Tensor::from_f32({64, 32}, x);
  for (int64_t opset : {7, 9, 10, 11}) {
    SCOPED_TRACE(str_cat("opset ", opset));
    // PyTorch's TorchScript exporter writes the mask output for a module in training.
    std::unique_ptr<Graph> graph = import_ok(dropout_model(opset, {"y", "mask"}).bytes());
    ASSERT_NE(graph, nullptr);
    const Node* dropout = only_node(*graph, "Dropout");
    EXPECT_TRUE(dropout->has_operand(2));            // training_mode, a constant true
    EXPECT_EQ(dropout->has_output(1), opset >= 10);  // before 10 the mask had the data's type
    const std::vector<Tensor> y = run_graph(*graph, {input});
    ASSERT_EQ(y.size(), 1u);
    // Each element is dropped (0) or kept and scaled by 1 / (1 - 0.25) in f32: one rounded
    // multiply by the scale rounded to f32 (runtime/cpu/shape.cc).
    int64_t dropped = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float got = y[0].data<float>()[i];
      if (got == 0) {
        ++dropped;
      } else {
        EXPECT_EQ(got, x[i] * static_cast<float>(1.0 / 0.75)) << i;
      }
    }
    // 2048 draws at p = 0.25: 512 expected, sd 19.6; six sd either side.
    EXPECT_GT(dropped, 394);
    EXPECT_LT(dropped, 630);
    // Without the mask output it is the identity.
    std::unique_ptr<Graph> eval = import_ok(dropout_model(opset, {"y"}).bytes());
    ASSERT_NE(eval, nullptr);
    const std::vector<Tensor> same = run_graph(*eval, {input});
    ASSERT_EQ(same.size(), 1u);
    EXPECT_EQ(same[0].to_double_vector(), input.to_double_vector());
  }
}

TEST(LegacyForms, DropoutKeepsTheSeedAmpcsExportWrites) {
  ModelBuilder m = dropout_model(11, {"y", "mask"});
  add_int_attr(*m.graph().mutable_node(0), "seed", 7);
  std::unique_ptr<Graph> graph = import_ok(m.bytes());
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(only_node(*graph, "Dropout")->int_attr("seed"), 7);
}

TEST(LegacyForms, DropoutsFloatMaskBeforeOpset10IsNotComputedAndReadingItSaysSo) {
  ModelBuilder m = dropout_model(9, {"y", "mask"});
  m.node("Mul", {"y", "mask"}, {"z"}, "mul");
  m.output("z");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "legacy.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(),
                                "node 'mul' (Mul) reads 'mask', the mask output of node 'drop' "
                                "(Dropout), which has the data's type before opset 10"))
      << graph.status();
}

// (An inference Dropout before opset 11 is converted to opset 13 at import with the rest of its
// model: tests/onnx_opset_conversion_test.cc.)
TEST(LegacyForms, ExportWritesDropoutsTrainingModeBackAsTheMaskOutput) {
  for (int64_t opset : {9, 11}) {
    for (const bool training : {true, false}) {
      if (opset < 11 && !training) continue;
      SCOPED_TRACE(str_cat("opset ", opset, training ? ", training" : ", inference"));
      std::unique_ptr<Graph> graph =
          import_ok(dropout_model(opset, training ? std::vector<std::string>{"y", "mask"}
                                                  : std::vector<std::string>{"y"})
                        .bytes());
      ASSERT_NE(graph, nullptr);
      const Exported exported = export_and_find(*graph, "Dropout");
      const onnx::NodeProto* written = &exported.node;
      EXPECT_EQ(written->input_size(), 1);  // ratio and training_mode are inputs from 12
      ASSERT_EQ(written->attribute_size(), 1);
      EXPECT_EQ(written->attribute(0).name(), "ratio");
      EXPECT_EQ(written->attribute(0).f(), 0.25f);
      EXPECT_EQ(written->output_size(), training ? 2 : 1);
      std::unique_ptr<Graph> again = import_ok(exported.bytes);
      ASSERT_NE(again, nullptr);
      EXPECT_EQ(only_node(*again, "Dropout")->has_operand(2), training);
    }
  }
}

// Clip at opset 11 (the first to read its bounds as inputs, as PyTorch's TorchScript exporter
// writes ReLU6, hardtanh and clamp there) differentiates with comparisons opset 11 has
// (GreaterOrEqual and LessOrEqual come at 12): against central differences in f64, for constant
// bounds and for bounds computed in the graph (whose gradients are taken too).
TEST(LegacyForms, ClipAtOpset11DifferentiatesWithTheComparisonsItsOpsetHas) {
  for (const bool computed : {false, true}) {
    ModelBuilder m(11);
    m.input("x", onnx::TensorProto::DOUBLE, {"3", "4"});
    if (computed) {
      m.input("lo_in", onnx::TensorProto::DOUBLE, {});
      m.input("hi_in", onnx::TensorProto::DOUBLE, {});
      m.node("Neg", {"lo_in"}, {"lo"}, "lower");
      m.node("Abs", {"hi_in"}, {"hi"}, "upper");
    } else {
      m.initializer("lo", onnx::TensorProto::DOUBLE, {}).add_double_data(-0.5);
      m.initializer("hi", onnx::TensorProto::DOUBLE, {}).add_double_data(0.6);
    }
    m.node("Clip", {"x", "lo", "hi"}, {"y"}, "clamp");
    testing::add_weighted_loss(m, "y", {"3", "4"});
    testing::expect_onnx_gradients_match(m, computed ? "^(x|lo_in|hi_in)$" : "^x$", 5);
  }
}

}  // namespace
}  // namespace ampc
