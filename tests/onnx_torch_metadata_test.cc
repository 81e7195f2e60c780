// What ampc reads from the metadata_props of graphs and nodes (compiler/onnx_metadata.h), which
// ONNX 1.16 added (GraphProto field 16, NodeProto field 9) and PyTorch's dynamo exporter fills:
// the exported program's graph signature (which initializers are parameters and which are
// buffers, which PyTorch does not train) and an embedding's padding_idx (the row PyTorch never
// moves) from its FX node, the aten call it came from; the other FX-node readings are in
// tests/onnx_torch_fx_nodes_test.cc. The models here are built by hand with those fields written
// as ONNX defines them. References: training results worked out by hand (SGD with lr 1 on a sum
// of gathered rows moves each row by the number of times it was picked). The zoo's
// padded_tagger and res_cnn.dynamo_raw (tests/runtime/zoo_test.cc) check all of it against
// PyTorch's training.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/compile.h"
#include "compiler/onnx_io.h"
#include "compiler/report.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"
#include "passes/master_weights.h"
#include "runtime/training_session.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/test_util.h"
#include "tests/training_file.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::add_metadata;
using testing::first_node;
using testing::fx_node;
using testing::import_ok;
using testing::kGraphMetadataField;
using testing::kNodeMetadataField;
using testing::ModelBuilder;

std::vector<std::pair<std::string, std::string>> node_metadata(const onnx::NodeProto& node) {
  std::vector<std::pair<std::string, std::string>> props;
  const google::protobuf::UnknownFieldSet& unknown = node.GetReflection()->GetUnknownFields(node);
  for (int i = 0; i < unknown.field_count(); ++i) {
    if (unknown.field(i).number() != kNodeMetadataField) continue;
    onnx::StringStringEntryProto entry;
    EXPECT_TRUE(entry.ParseFromString(unknown.field(i).length_delimited()));
    props.emplace_back(entry.key(), entry.value());
  }
  return props;
}

// As torch.onnx's dynamo exporter writes it.
std::string fx_embedding(const std::string& args, const std::string& kwargs = "") {
  return "%embedding : [num_users=1] = call_function[target=torch.ops.aten.embedding.default](" +
         ("args = (" + args + "), kwargs = {" + kwargs + "})");
}

constexpr char kSignature[] =
    "\n# inputs\np_w: PARAMETER target='w'\np_temp: PARAMETER target='temp'\n"
    "b_table: BUFFER target='table' persistent=False\nc_scale: CONSTANT_TENSOR target='scale'\n"
    "ids: USER_INPUT\n\n# outputs\nsum: USER_OUTPUT\n";

// loss = sum((w[ids] + table) * scale) * temp: w [4, 3] and temp (a scalar, as CLIP's logit
// scale) parameters, table [2, 3] a buffer, scale [3] a constant tensor; ids [2] picks rows of w.
struct Model {
  ModelBuilder builder;
  onnx::NodeProto* gather = nullptr;
};

Model embedding_model(bool signature = true) {
  Model m;
  ModelBuilder& b = m.builder;
  b.input("ids", onnx::TensorProto::INT64, {"2"});
  b.initializer_f32("w", {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  b.initializer_f32("table", {2, 3}, {0.5, 0.5, 0.5, 0.25, 0.25, 0.25});
  b.initializer_f32("scale", {3}, {1, 1, 1});
  b.initializer_f32("temp", {}, {1});
  m.gather = &b.node("Gather", {"w", "ids"}, {"rows"}, "embed");
  b.node("Add", {"rows", "table"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "scale"}, {"scaled"}, "mul");
  add_int_attr(b.node("ReduceSum", {"scaled"}, {"sum"}, "sum"), "keepdims", 0);
  b.node("Mul", {"sum", "temp"}, {"loss"}, "temperature");
  b.output("loss");
  if (signature) {
    add_metadata(b.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
                 kSignature);
  }
  return m;
}

CompileOptions sgd(float lr, std::string trainable = "") {
  CompileOptions options = testing::sgd_options(lr);
  options.training->autodiff.trainable = std::move(trainable);
  return options;
}

// Whether a warning of `diagnostics` holds `text`.
bool has_warning(const Diagnostics& diagnostics, std::string_view text) {
  return std::any_of(
      diagnostics.warnings().begin(), diagnostics.warnings().end(),
      [&](const std::string& warning) { return warning.find(text) != std::string::npos; });
}

// The initializers the compiled step updates with an optimizer node, by name.
std::vector<std::string> trained(const Graph& graph) {
  std::vector<std::string> names;
  for (const auto& node : graph.training_step()->nodes()) {
    if (node->op_type() == "SGD") names.push_back(node->operand(0)->name());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(TorchGraphSignature, ParametersTrainAndBuffersAndConstantTensorsDoNot) {
  std::unique_ptr<Graph> graph = import_ok(embedding_model().builder.bytes());
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(testing::find_initializer(*graph, "w")->declared(), Value::Declared::kParameter);
  EXPECT_EQ(testing::find_initializer(*graph, "temp")->declared(), Value::Declared::kParameter);
  EXPECT_TRUE(testing::find_initializer(*graph, "table")->is_buffer());
  EXPECT_TRUE(testing::find_initializer(*graph, "scale")->is_buffer());
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  // temp is a scalar, which ampc takes for a lifted constant where the file does not say.
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"temp", "w"}));
  EXPECT_TRUE(has_warning(diagnostics, "buffers table, scale are not trained"))
      << str_join(diagnostics.warnings(), "\n");
}

TEST(TorchGraphSignature, TrainableNamesABufferToTrainIt) {
  std::unique_ptr<Graph> graph = import_ok(embedding_model().builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, "^(w|table)$"), diagnostics).ok());
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"table", "w"}));
}

TEST(TorchGraphSignature, WithoutOneEveryFloatInitializerButLiftedConstantsTrains) {
  // TorchScript exports have no signature: ONNX does not tell buffers from weights, and a scalar
  // is far more often an exporter's constant than a parameter.
  std::unique_ptr<Graph> graph = import_ok(embedding_model(false).builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"scale", "table", "w"}));
}

TEST(TorchGraphSignature, WhatTheSignatureSaidSurvivesExportAndImport) {
  std::unique_ptr<Graph> graph = import_ok(embedding_model().builder.bytes());
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  for (const onnx::TensorProto& init : model.graph().initializer()) {
    const bool parameter = init.name() == "w" || init.name() == "temp";
    EXPECT_EQ(init.doc_string(), parameter ? "ampc: parameter" : "ampc: buffer") << init.name();
  }
  std::unique_ptr<Graph> again = import_ok(*bytes);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(testing::find_initializer(*again, "table")->is_buffer());
  EXPECT_TRUE(testing::find_initializer(*again, "scale")->is_buffer());
  EXPECT_EQ(testing::find_initializer(*again, "temp")->declared(), Value::Declared::kParameter);
  EXPECT_EQ(testing::find_initializer(*again, "w")->declared(), Value::Declared::kParameter);
}

// ampc.torch.export_training declares what each initializer is in its doc_string, with either
// exporter: a TorchScript file has no signature, and neither exporter records requires_grad. Here
// w and temp are parameters, table a buffer and scale a frozen parameter (requires_grad=False).
Model declared_by_doc_strings(bool signature = false) {
  Model m = embedding_model(signature);
  for (onnx::TensorProto& init : *m.builder.graph().mutable_initializer()) {
    if (init.name() == "w" || init.name() == "temp") init.set_doc_string("ampc: parameter");
    if (init.name() == "table") init.set_doc_string("ampc: buffer");
    if (init.name() == "scale") init.set_doc_string("ampc: frozen parameter");
  }
  return m;
}

TEST(DeclaredByDocString, FrozenParametersAndBuffersDoNotTrainAndAScalarParameterDoes) {
  std::unique_ptr<Graph> graph = import_ok(declared_by_doc_strings().builder.bytes());
  ASSERT_NE(graph, nullptr);
  EXPECT_TRUE(testing::find_initializer(*graph, "scale")->is_frozen_parameter());
  EXPECT_TRUE(testing::find_initializer(*graph, "table")->is_buffer());
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  // Without the declarations the file trains scale, table and w, and not the scalar temp
  // (WithoutOneEveryFloatInitializerButLiftedConstantsTrains).
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"temp", "w"}));
  EXPECT_TRUE(has_warning(diagnostics,
                          "parameters scale are not trained, as in PyTorch (the file "
                          "declares them frozen: requires_grad=False"))
      << str_join(diagnostics.warnings(), "\n");
  EXPECT_TRUE(has_warning(diagnostics, "buffers table are not trained"))
      << str_join(diagnostics.warnings(), "\n");
}

TEST(DeclaredByDocString, TheDocStringOverridesTheSignature) {
  // The signature calls w a PARAMETER: a dynamo export does not record requires_grad either.
  Model m = declared_by_doc_strings(/*signature=*/true);
  for (onnx::TensorProto& init : *m.builder.graph().mutable_initializer()) {
    if (init.name() == "w") init.set_doc_string("ampc: frozen parameter");
  }
  std::unique_ptr<Graph> graph = import_ok(m.builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"temp"}));
}

TEST(DeclaredByDocString, TrainableNamesAFrozenParameterToTrainIt) {
  std::unique_ptr<Graph> graph = import_ok(declared_by_doc_strings().builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, "^(w|scale)$"), diagnostics).ok());
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"scale", "w"}));
  EXPECT_FALSE(has_warning(diagnostics, "declares them frozen"));
}

TEST(DeclaredByDocString, AFrozenParameterStaysFrozenThroughCompileExportAndImport) {
  std::unique_ptr<Graph> graph = import_ok(declared_by_doc_strings().builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  bool written = false;
  for (const onnx::TensorProto& init : model.graph().initializer()) {
    if (init.name() == "scale") written = init.doc_string() == "ampc: frozen parameter";
  }
  EXPECT_TRUE(written);
  std::unique_ptr<Graph> again = import_ok(*bytes);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(testing::find_initializer(*again, "scale")->is_frozen_parameter());
}

TEST(DeclaredByDocString, InspectSaysWhatTheFileDeclares) {
  std::unique_ptr<Graph> graph = import_ok(declared_by_doc_strings().builder.bytes());
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f), diagnostics).ok());
  const std::string text = inspect_text(*graph);
  EXPECT_NE(text.find("declared, not trained by default: buffers table; frozen parameters scale\n"),
            std::string::npos)
      << text;
  // The eval graph, then the training step (which `ampc inspect --format json` nests under
  // "training_step"): the step also holds the optimizer's own state, declared nothing.
  const Graph* step = graph->training_step();
  for (const Graph* of : {static_cast<const Graph*>(graph.get()), step}) {
    ASSERT_NE(of, nullptr);
    const nlohmann::json json = nlohmann::json::parse(inspect_json(*of));
    std::map<std::string, nlohmann::json> declared;
    for (const nlohmann::json& init : json["initializers"]) {
      declared[init["name"].get<std::string>()] = init["declared"];
      EXPECT_FALSE(init["constant"].get<bool>() && !init["declared"].is_null()) << init;
    }
    EXPECT_EQ(declared["w"], "parameter");
    EXPECT_EQ(declared["temp"], "parameter");
    EXPECT_EQ(declared["table"], "buffer");
    EXPECT_EQ(declared["scale"], "frozen parameter");
    if (of == step) {
      EXPECT_TRUE(declared["optimizer.step"].is_null());
    }
  }
}

// The sharded optimizer has the eval graph read a parameter through a persistent bf16 copy
// (passes/master_weights.h), and restores the parameter for an export: both keep what the
// exporter declared it.
TEST(TorchGraphSignature, WhatWasDeclaredSurvivesALowPrecisionCopy) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(
      "graph g(%x: bf16[2, 3]) opset(17) {\n"
      "  init %w: f32[3, 4] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]\n"
      "  %low = Cast<to=bf16>(%w) : bf16[3, 4]\n"
      "  %y = MatMul(%x, %low) : bf16[2, 4]\n"
      "  return %y\n}");
  ASSERT_NE(graph, nullptr);
  Value* w = graph->initializers().front();
  w->set_declared(Value::Declared::kParameter);
  const Tensor whole = *w->initializer();
  const LowPrecisionCopy copy{"w", "w.bf16", DType::kBF16};
  EXPECT_EQ(read_through_copy(*graph, *w, copy, whole)->declared(), Value::Declared::kParameter);
  graph->erase_graph_value(w);
  ASSERT_TRUE(restore_master_weights(*graph, copy, whole).ok());
  EXPECT_EQ(testing::find_initializer(*graph, "w")->declared(), Value::Declared::kParameter);
}

// A file whose signature declares w only, and initializers the exporter's optimizer made from
// parameters: val_4, read by a Mul (an expression of a parameter, such as 1 - p), trains with a
// warning naming it, unless --trainable says what trains; val_9, a weight a MatMul reads (a
// Linear's weight folded into its transpose, which trains as the parameter would), trains and
// is not named; val_1 and val_3, a ReLU6's bounds, are numbers. The same under --precision bf16,
// where autocast has the MatMul read val_9 and the Clip its bounds through Casts.
TEST(TorchGraphSignature, AnUndeclaredInitializerThatTrainsIsNamedInAWarning) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"3"});
  b.initializer_f32("w", {3}, {1, 2, 3});
  b.initializer_f32("val_4", {3}, {4, 5, 6});
  b.initializer_f32("val_9", {3, 3}, {1, 0, 0, 0, 2, 0, 0, 0, 3});
  b.initializer_f32("val_1", {}, {0});
  b.initializer_f32("val_3", {}, {6});
  b.node("Add", {"x", "w"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "val_4"}, {"scaled"}, "mul");
  b.node("MatMul", {"scaled", "val_9"}, {"projected"}, "linear");
  b.node("Clip", {"projected", "val_1", "val_3"}, {"relu6"}, "relu6");
  add_int_attr(b.node("ReduceSum", {"relu6"}, {"loss"}, "sum"), "keepdims", 0);
  b.output("loss");
  add_metadata(b.graph(), kGraphMetadataField, "pkg.torch.export.ExportedProgram.graph_signature",
               "\n# inputs\np_w: PARAMETER target='w'\nx: USER_INPUT\n");
  for (const DType low : {DType::kF32, DType::kBF16}) {
    for (const std::string trainable : {"", "^w$"}) {
      SCOPED_TRACE(str_cat(dtype_name(low), trainable.empty() ? "" : ", --trainable " + trainable));
      std::unique_ptr<Graph> graph = import_ok(b.bytes());
      ASSERT_NE(graph, nullptr);
      CompileOptions options = sgd(1.0f, trainable);
      if (low != DType::kF32) {
        options.mixed_precision = MixedPrecisionOptions{};
        options.mixed_precision->policy.low = low;
        options.mixed_precision->policy.low_source = "test";
      }
      Diagnostics diagnostics;
      ASSERT_TRUE(compile_graph(*graph, options, diagnostics).ok());
      const std::string warnings = str_join(diagnostics.warnings(), "\n");
      EXPECT_EQ(absl::StrContains(warnings,
                                  "initializers val_4 train as parameters, but the "
                                  "exported program does not declare them"),
                trainable.empty())
          << warnings;
      for (const char* unnamed : {"val_9", "val_1", "val_3"}) {
        EXPECT_FALSE(absl::StrContains(warnings, unnamed)) << warnings;
      }
      const std::vector<std::string> want = trainable.empty()
                                                ? std::vector<std::string>{"val_4", "val_9", "w"}
                                                : std::vector<std::string>{"w"};
      EXPECT_EQ(trained(*graph), want);
    }
  }
}

// A TorchScript file (no signature) where the exporter's constant folding computed onnx::Mul_5
// = 1 - p and the transposed weight onnx::MatMul_6: the first is named in a warning (it trains
// apart from p, which PyTorch trains through both), the transposed weight is not (the file holds
// no other copy of it); --trainable silences it.
TEST(TorchScriptFolds, AFoldedInitializerThatTrainsIsNamedInAWarning) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"1", "3"});
  b.initializer_f32("p", {3}, {0.25f, 0.5f, 0.75f});
  b.initializer_f32("onnx::Mul_5", {3}, {0.75f, 0.5f, 0.25f});
  b.initializer_f32("onnx::MatMul_6", {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  b.node("MatMul", {"x", "onnx::MatMul_6"}, {"h"}, "linear");
  b.node("Mul", {"h", "p"}, {"kept"}, "keep");
  b.node("Mul", {"h", "onnx::Mul_5"}, {"rest"}, "rest");
  b.node("Add", {"kept", "rest"}, {"mixed"}, "mix");
  add_int_attr(b.node("ReduceSum", {"mixed"}, {"loss"}, "sum"), "keepdims", 0);
  b.output("loss");
  for (const std::string trainable : {"", "^p$"}) {
    SCOPED_TRACE(trainable.empty() ? "default" : "--trainable " + trainable);
    std::unique_ptr<Graph> graph = import_ok(b.bytes());
    ASSERT_NE(graph, nullptr);
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, trainable), diagnostics).ok());
    const std::string warnings = str_join(diagnostics.warnings(), "\n");
    EXPECT_EQ(absl::StrContains(warnings,
                                "initializers onnx::Mul_5 train as parameters, but the "
                                "TorchScript exporter computed them"),
              trainable.empty())
        << warnings;
    EXPECT_FALSE(absl::StrContains(warnings, "onnx::MatMul_6")) << warnings;
  }
}

// ---- a buffer named like an op's result ------------------------------------------------------

// PyTorch's dynamo exporter (optimize=False) names an initializer after its buffer and a node's
// output after its FX node, so a buffer `index` and an aten.index call both write `index`, which
// ONNX forbids. Read in node order (as ONNX's reference evaluator reads it, which gives PyTorch's
// loss), the nodes before the output read the buffer and those after it the output. Here
// y = (x + c) * (x + c) with c the buffer, then z = y + y reads the output:
// z = 2 (x + c)^2, worked out by hand; reading the buffer there would give 2 c.
TEST(TorchNames, ABufferNamedLikeALaterNodesOutputIsReadInNodeOrder) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"3"});
  b.initializer_f32("index", {3}, {1.0f, -2.0f, 0.5f});
  b.node("Add", {"x", "index"}, {"shifted"}, "add");
  b.node("Mul", {"shifted", "shifted"}, {"index"}, "node_index");
  b.node("Add", {"index", "index"}, {"z"}, "double");
  add_int_attr(b.node("ReduceSum", {"z"}, {"loss"}, "sum"), "keepdims", 0);
  b.output("loss");
  std::unique_ptr<Graph> graph = import_ok(b.bytes());
  ASSERT_NE(graph, nullptr);
  ASSERT_NE(testing::find_initializer(*graph, "index"), nullptr);
  EXPECT_NE(first_node(*graph, "Mul")->output(0)->name(), "index");
  const std::vector<float> x = {0.5f, 1.0f, -1.5f}, c = {1.0f, -2.0f, 0.5f};
  const std::vector<Tensor> out = testing::run_graph(*graph, {Tensor::from_f32({3}, x)});
  ASSERT_EQ(out.size(), 1u);
  double want = 0;
  for (int i = 0; i < 3; ++i) want += 2.0 * (x[i] + c[i]) * (x[i] + c[i]);
  EXPECT_EQ(out[0].element_as_double(0), want);  // small integers and halves: exact

  // The buffer keeps its name for training (what --trainable names), and the step warns.
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, "^index$"), diagnostics).ok());
  EXPECT_EQ(trained(*graph), (std::vector<std::string>{"index"}));
  EXPECT_TRUE(has_warning(diagnostics, "gives the names index both to an initializer"))
      << str_join(diagnostics.warnings(), "\n");

  // A node redefining a graph input or another node's output is still an error.
  ModelBuilder twice;
  twice.input("x", onnx::TensorProto::FLOAT, {"3"});
  twice.node("Relu", {"x"}, {"h"}, "first");
  twice.node("Relu", {"h"}, {"h"}, "again");
  twice.output("h");
  absl::StatusOr<std::unique_ptr<Graph>> refused = import_onnx_bytes(twice.bytes(), "twice.onnx");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "node 'again' (Relu) defines value 'h', which is already defined"))
      << refused.status();
}

// ---- padding_idx ---------------------------------------------------------------------------

// The embedding model with the Gather's FX node calling aten.embedding with `args`, imported.
std::unique_ptr<Graph> import_embedding(const std::string& args) {
  Model m = embedding_model();
  add_metadata(*m.gather, kNodeMetadataField, "pkg.torch.onnx.fx_node", fx_embedding(args));
  return import_ok(m.builder.bytes());
}

std::optional<int64_t> padding_of(const std::string& bytes) {
  std::unique_ptr<Graph> graph = import_ok(bytes);
  if (graph == nullptr) return std::nullopt;
  const Node* gather = first_node(*graph, "Gather");
  const AttrValue* padding = gather ? gather->find_attr("padding_idx") : nullptr;
  if (padding == nullptr) return std::nullopt;
  return std::get<int64_t>(*padding);
}

TEST(TorchEmbedding, PaddingIdxIsReadFromTheFxNode) {
  struct Case {
    std::string args, kwargs;
    std::optional<int64_t> padding;
  };
  for (const Case& c :
       {Case{"%p_w, %ids, 2", "", 2}, Case{"%p_w, %ids", "", std::nullopt},
        Case{"%p_w, %ids, -1", "", std::nullopt}, Case{"%p_w, %ids", "padding_idx: 1", 1},
        Case{"%p_w, %ids, 3, False, False", "", 3}}) {
    SCOPED_TRACE(c.args + " {" + c.kwargs + "}");
    Model m = embedding_model();
    add_metadata(*m.gather, kNodeMetadataField, "pkg.torch.onnx.fx_node",
                 fx_embedding(c.args, c.kwargs));
    EXPECT_EQ(padding_of(m.builder.bytes()), c.padding);
  }
  // Another aten op's node is not an embedding.
  Model m = embedding_model();
  add_metadata(*m.gather, kNodeMetadataField, "pkg.torch.onnx.fx_node",
               "%index_select : [num_users=1] = call_function[target=torch.ops.aten.index_select."
               "default](args = (%p_w, 0, %ids), kwargs = {})");
  EXPECT_EQ(padding_of(m.builder.bytes()), std::nullopt);
}

// Trains the compiled embedding `graph` (w [4, 3], ids [2]) with SGD at lr 1 on each batch of
// ids, and expects each row of w to move by minus `moved(ids, row)` in every column.
void expect_rows_move(std::unique_ptr<Graph> graph,
                      const std::function<int(const std::vector<int64_t>&, int64_t)>& moved) {
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::create(std::move(graph));
  ASSERT_TRUE(session.ok()) << session.status();
  for (const std::vector<int64_t>& ids : {std::vector<int64_t>{2, 0}, {2, 2}, {1, 1}}) {
    SCOPED_TRACE(str_cat("ids ", ids[0], ", ", ids[1]));
    absl::StatusOr<Tensor> before = (*session)->state("w");
    ASSERT_TRUE(before.ok()) << before.status();
    absl::StatusOr<runtime::StepStats> stats =
        (*session)->step({{"ids", Tensor::from_i64({2}, ids)}}, 1.0f);
    ASSERT_TRUE(stats.ok()) << stats.status();
    absl::StatusOr<Tensor> after = (*session)->state("w");
    ASSERT_TRUE(after.ok()) << after.status();
    for (int64_t row = 0; row < 4; ++row) {
      for (int64_t col = 0; col < 3; ++col) {
        EXPECT_EQ(after->element_as_double(row * 3 + col),
                  before->element_as_double(row * 3 + col) - moved(ids, row))
            << "w[" << row << ", " << col << "]";
      }
    }
  }
}

int picks(const std::vector<int64_t>& ids, int64_t row) {
  return static_cast<int>(std::count(ids.begin(), ids.end(), row));
}

// Training w alone, with row 2 the padding: d loss / d w[r] is, in each column, the number of
// times ids picks r (scale and temp are 1), so SGD with lr 1 moves each row by minus that count,
// except the padding row, which stays as it was, as PyTorch's embedding backward leaves it.
TEST(TorchEmbedding, ThePaddingRowIsNotTrained) {
  std::unique_ptr<Graph> graph = import_embedding("%p_w, %ids, 2");
  ASSERT_NE(graph, nullptr);
  Diagnostics diagnostics;
  ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, "^w$"), diagnostics).ok());
  const Node* gather_grad = first_node(*graph->training_step(), "GatherGrad");
  ASSERT_NE(gather_grad, nullptr);
  EXPECT_EQ(gather_grad->int_attr("padding_idx"), 2);
  expect_rows_move(std::move(graph), [](const std::vector<int64_t>& ids, int64_t row) {
    return row == 2 ? 0 : picks(ids, row);
  });
}

// A TorchScript file (no signature, no padding_idx) whose trained table has an all-zero row, as
// nn.Embedding(padding_idx=1) starts it: a warning names the table and the row, and says the row
// trains here; without the zero row, or with --trainable, nothing is said.
TEST(TorchEmbedding, AZeroRowOfATorchScriptTableIsNamedInAWarning) {
  for (const bool zero_row : {true, false}) {
    for (const std::string trainable : {"", "^w$"}) {
      SCOPED_TRACE(
          str_cat(zero_row ? "zero row" : "no zero row", " --trainable '", trainable, "'"));
      Model m = embedding_model(/*signature=*/false);
      if (zero_row) {  // w's row 1, 4 5 6, becomes 0 0 0
        std::string& raw = *m.builder.graph().mutable_initializer(0)->mutable_raw_data();
        std::fill(raw.begin() + 3 * sizeof(float), raw.begin() + 6 * sizeof(float), '\0');
      }
      std::unique_ptr<Graph> graph = import_ok(m.builder.bytes());
      ASSERT_NE(graph, nullptr);
      Diagnostics diagnostics;
      ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, trainable), diagnostics).ok());
      const std::string warnings = str_join(diagnostics.warnings(), "\n");
      EXPECT_EQ(absl::StrContains(warnings, "embedding tables w (row 1) hold all-zero rows"),
                zero_row && trainable.empty())
          << warnings;
    }
  }
}

TEST(TorchEmbedding, PaddingIdxTravelsInTheNodesMetadataNotItsAttributes) {
  std::unique_ptr<Graph> graph = import_embedding("%p_w, %ids, 1");
  ASSERT_NE(graph, nullptr);
  absl::StatusOr<std::string> bytes = export_onnx_bytes(*graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*bytes));
  const onnx::NodeProto* gather = nullptr;
  for (const onnx::NodeProto& node : model.graph().node()) {
    if (node.op_type() == "Gather") gather = &node;
  }
  ASSERT_NE(gather, nullptr);
  for (const onnx::AttributeProto& attr : gather->attribute())
    EXPECT_NE(attr.name(), "padding_idx");
  EXPECT_EQ(node_metadata(*gather),
            (std::vector<std::pair<std::string, std::string>>{{"ampc.padding_idx", "1"}}));
  EXPECT_EQ(padding_of(*bytes), 1);
}

TEST(TorchEmbedding, BadPaddingIsAnErrorNamingTheNode) {
  {
    // ONNX's Gather has no such attribute.
    Model m = embedding_model();
    add_int_attr(*m.gather, "padding_idx", 1);
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_bytes(m.builder.bytes(), "torch.onnx");
    ASSERT_FALSE(graph.ok());
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "'padding_idx' is not an attribute"))
        << graph.status();
  }
  {
    Model m = embedding_model();
    add_metadata(*m.gather, kNodeMetadataField, "ampc.padding_idx", "one");
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_bytes(m.builder.bytes(), "torch.onnx");
    ASSERT_FALSE(graph.ok());
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "embed")) << graph.status();
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "'one', not an integer"))
        << graph.status();
  }
  {
    Model m = embedding_model();
    add_metadata(*m.gather, kNodeMetadataField, "pkg.torch.onnx.fx_node",
                 fx_embedding("%p_w, %ids, 4"));
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_bytes(m.builder.bytes(), "torch.onnx");
    ASSERT_FALSE(graph.ok());
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "embed")) << graph.status();
    EXPECT_TRUE(absl::StrContains(graph.status().message(), "padding_idx 4 is not a row"))
        << graph.status();
  }
}

// With scale_grad_by_freq, PyTorch divides each pick's gradient by the number of times the
// batch picks its row: d loss / d w[r] is 1 in each column for every row picked at all (and 0
// for the padding row), so SGD with lr 1 moves each picked row by exactly 1, once or twice.
TEST(TorchEmbedding, ScaleGradByFreqDividesEachRowByItsPicks) {
  for (const bool padding : {false, true}) {
    SCOPED_TRACE(padding ? "padding_idx 2" : "no padding_idx");
    std::unique_ptr<Graph> graph =
        import_embedding(padding ? "%p_w, %ids, 2, True" : "%p_w, %ids, -1, True");
    ASSERT_NE(graph, nullptr);
    Diagnostics diagnostics;
    ASSERT_TRUE(compile_graph(*graph, sgd(1.0f, "^w$"), diagnostics).ok());
    expect_rows_move(std::move(graph), [&](const std::vector<int64_t>& ids, int64_t row) {
      return picks(ids, row) > 0 && !(padding && row == 2) ? 1 : 0;
    });
  }
}

}  // namespace
}  // namespace ampc
