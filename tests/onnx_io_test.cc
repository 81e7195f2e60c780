// ONNX import and export: round trips of the example models, what export writes (checker-valid
// models, unique names, attributes as inputs, precision decisions, atomic files), how initializer
// data fields and external data are read, and every bad-input case with its message.
#include "compiler/onnx_io.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "compiler/strings.h"
#include "compiler/text_ir.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "tests/onnx_model_builder.h"
#include "tests/onnx_op_checks.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::ModelBuilder;
using testing::source_path;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

onnx::ModelProto parse_model(const std::string& bytes) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(bytes));
  return model;
}

void expect_checker_accepts(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "ONNX checker: " << e.what();
  }
}

// ---- round trips --------------------------------------------------------------------------------

class ExampleModel : public ::testing::TestWithParam<const char*> {};

TEST_P(ExampleModel, RoundTripsThroughExportToTheSameTextIrAndPassesTheChecker) {
  const std::string path = source_path(str_cat("models/", GetParam()));
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(path);
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<std::string> bytes = export_onnx_bytes(**graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto exported = parse_model(*bytes);
  expect_checker_accepts(exported);
  absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*bytes, "exported");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(print_graph(**again), print_graph(**graph));

  // Against the source file itself: the same nodes, inputs, initializers and outputs by name.
  const onnx::ModelProto source = parse_model(read_bytes(path));
  ASSERT_EQ(exported.graph().node_size(), source.graph().node_size());
  for (int i = 0; i < source.graph().node_size(); ++i) {
    EXPECT_EQ(exported.graph().node(i).op_type(), source.graph().node(i).op_type());
    EXPECT_EQ(exported.graph().node(i).name(), source.graph().node(i).name());
  }
  ASSERT_EQ(exported.graph().output_size(), source.graph().output_size());
  for (int i = 0; i < source.graph().output_size(); ++i) {
    EXPECT_EQ(exported.graph().output(i).name(), source.graph().output(i).name());
  }
  EXPECT_EQ(exported.graph().initializer_size(), source.graph().initializer_size());
  EXPECT_EQ(exported.graph().input_size(), source.graph().input_size());
}

INSTANTIATE_TEST_SUITE_P(Models, ExampleModel,
                         ::testing::Values("mlp.onnx", "cnn.onnx", "tiny_gpt.onnx"));

TEST(OnnxImport, KeepsNamesDocStringsAndInfersTypes) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.initializer_f32("w", {3, 4}, std::vector<float>(12, 0.5f));
  onnx::NodeProto& node = m.node("MatMul", {"x", "w"}, {"my y"}, "fc");
  node.set_doc_string("the projection");
  m.node("Relu", {"my y"}, {"z"});
  m.output("z");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "test.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<Node*> nodes = (*graph)->node_list();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]->name(), "fc");
  EXPECT_EQ(nodes[0]->doc_string(), "the projection");
  EXPECT_EQ(nodes[0]->output(0)->name(), "my y");
  EXPECT_EQ(nodes[0]->output(0)->type(), (TensorType{DType::kF32, {2, 4}}));
  EXPECT_EQ((*graph)->outputs().at(0)->type(), (TensorType{DType::kF32, {2, 4}}));
  EXPECT_EQ((*graph)->opset(""), 17);
}

TEST(OnnxImport, ReadsEveryTensorDataField) {
  ModelBuilder m;
  onnx::TensorProto& f32 = m.initializer("f32", onnx::TensorProto::FLOAT, {2});
  f32.add_float_data(1.5f);
  f32.add_float_data(-2.0f);
  onnx::TensorProto& f16 = m.initializer("f16", onnx::TensorProto::FLOAT16, {2});
  f16.add_int32_data(0x3c00);  // 1.0
  f16.add_int32_data(0xc000);  // -2.0
  onnx::TensorProto& i8 = m.initializer("i8", onnx::TensorProto::INT8, {2});
  i8.add_int32_data(-3);
  i8.add_int32_data(127);
  onnx::TensorProto& b = m.initializer("b", onnx::TensorProto::BOOL, {2});
  b.add_int32_data(1);
  b.add_int32_data(0);
  onnx::TensorProto& i64 = m.initializer("i64", onnx::TensorProto::INT64, {1});
  i64.add_int64_data(int64_t{1} << 40);
  onnx::TensorProto& f64 = m.initializer("f64", onnx::TensorProto::DOUBLE, {1});
  f64.add_double_data(0.1);
  onnx::TensorProto& raw = m.initializer("raw", onnx::TensorProto::INT32, {2});
  raw.set_raw_data(std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8));
  for (const char* name : {"f32", "f16", "i8", "b", "i64", "f64", "raw"}) m.output(name);
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "test.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto values = [&](int i) { return (*graph)->outputs().at(i)->initializer()->to_double_vector(); };
  EXPECT_EQ(values(0), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(values(1), (std::vector<double>{1.0, -2.0}));
  EXPECT_EQ(values(2), (std::vector<double>{-3, 127}));
  EXPECT_EQ(values(3), (std::vector<double>{1, 0}));
  EXPECT_EQ((*graph)->outputs().at(4)->initializer()->to_i64_vector(),
            (std::vector<int64_t>{int64_t{1} << 40}));
  EXPECT_EQ(values(5), (std::vector<double>{0.1}));
  EXPECT_EQ(values(6), (std::vector<double>{1, -1}));
  EXPECT_EQ((*graph)->outputs().at(1)->dtype(), DType::kF16);
}

// A sparse tensor: `values` at `indices` in a tensor of `dims`, zeros elsewhere.
void fill_sparse(onnx::SparseTensorProto& sparse, const std::string& name,
                 const std::vector<int64_t>& dims, const std::vector<float>& values,
                 const std::vector<int64_t>& index_dims, const std::vector<int64_t>& indices) {
  for (int64_t d : dims) sparse.add_dims(d);
  onnx::TensorProto* v = sparse.mutable_values();
  v->set_name(name);
  v->set_data_type(onnx::TensorProto::FLOAT);
  v->add_dims(static_cast<int64_t>(values.size()));
  for (float x : values) v->add_float_data(x);
  onnx::TensorProto* at = sparse.mutable_indices();
  at->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : index_dims) at->add_dims(d);
  for (int64_t i : indices) at->add_int64_data(i);
}

// ONNX's sparse tensors (a Constant's sparse_value, opset 11; a graph's sparse_initializer) are
// the dense tensors they stand for. Indices as linear positions and as coordinates; out of the
// dims, an error that names the tensor and the index.
TEST(OnnxImport, SparseConstantsAndInitializersAreDense) {
  ModelBuilder m(17);
  onnx::NodeProto& constant = m.node("Constant", {}, {"c"}, "sparse_constant");
  onnx::AttributeProto* attr = constant.add_attribute();
  attr->set_name("sparse_value");
  attr->set_type(onnx::AttributeProto::SPARSE_TENSOR);
  fill_sparse(*attr->mutable_sparse_tensor(), "c_values", {2, 3}, {1.5f, -2}, {2}, {1, 5});
  fill_sparse(*m.graph().add_sparse_initializer(), "s", {2, 3}, {4, 8}, {2, 2}, {0, 0, 1, 2});
  m.node("Add", {"c", "s"}, {"sum"}, "add");
  m.output("sum");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "sparse.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<Tensor> sum = testing::run_graph(**graph, {});
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_EQ(sum[0].type(), (TensorType{DType::kF32, {2, 3}}));
  EXPECT_EQ(sum[0].to_double_vector(), (std::vector<double>{4, 1.5, 0, 0, 0, 8 - 2}));

  ModelBuilder outside(17);
  fill_sparse(*outside.graph().add_sparse_initializer(), "s", {2, 3}, {4, 8}, {2, 2}, {0, 0, 2, 1});
  outside.node("Identity", {"s"}, {"y"}, "copy");
  outside.output("y");
  absl::StatusOr<std::unique_ptr<Graph>> refused =
      import_onnx_bytes(outside.bytes(), "outside.onnx");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "sparse initializer 's': index 1 of its indices is outside dims "
                                "[2,3]"))
      << refused.status();
}

TEST(OnnxImport, ShapeOptionFixesDynamicDims) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", "", "4"});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  ImportOptions options;
  options.input_shapes["x"] = {8, 3, 4};
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "t.onnx", options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->outputs().at(0)->type(), (TensorType{DType::kF32, {8, 3, 4}}));
}

// A dynamic dim takes --shape's size for its input, else --dim's for its name, else the size a
// --shape gives another input's dim of that name, else the data's; the data never changes a
// static dim.
TEST(OnnxImport, NamedDimsAndTheDataFixDynamicDimsInOrder) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", "seq", "4"});
  m.input("y", onnx::TensorProto::INT64, {"batch", "seq"});
  m.input("z", onnx::TensorProto::FLOAT, {"", "2"});
  for (const char* name : {"x", "y", "z"}) {
    m.node("Identity", {name}, {std::string(name) + "_out"});
    m.output(std::string(name) + "_out");
  }
  auto input_shapes = [&](const ImportOptions& options) {
    absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "t.onnx", options);
    EXPECT_TRUE(graph.ok()) << graph.status();
    std::vector<Shape> shapes;
    if (graph.ok()) {
      for (const Value* input : (*graph)->inputs()) shapes.push_back(input->shape());
    }
    return shapes;
  };
  ImportOptions by_name;  // --dim for both names, the data for z's unnamed dim
  by_name.dims = {{"batch", 3}, {"seq", 5}};
  by_name.data_shapes["x"] = {9, 9, 4};  // --dim wins
  by_name.data_shapes["z"] = {7, 9};     // only dim 0 is dynamic
  EXPECT_EQ(input_shapes(by_name), (std::vector<Shape>{{3, 5, 4}, {3, 5}, {7, 2}}));
  ImportOptions by_shape;  // --shape x names batch and seq for y
  by_shape.input_shapes["x"] = {2, 6, 4};
  by_shape.input_shapes["z"] = {1, 2};
  by_shape.data_shapes["y"] = {8, 8};
  EXPECT_EQ(input_shapes(by_shape), (std::vector<Shape>{{2, 6, 4}, {2, 6}, {1, 2}}));
  ImportOptions by_data;  // x's data names batch and seq, which y then takes
  by_data.data_shapes["x"] = {4, 3, 4};
  by_data.data_shapes["y"] = {4, 1};  // the check of the data says this does not fit
  by_data.data_shapes["z"] = {6, 2};
  EXPECT_EQ(input_shapes(by_data), (std::vector<Shape>{{4, 3, 4}, {4, 3}, {6, 2}}));
  ImportOptions one_batch;  // --data arrays that are one batch each, shaped like the inputs
  for (const auto& [name, shape] : by_data.data_shapes) {
    one_batch.data_shapes[name] = Shape(shape.begin() + 1, shape.end());
    one_batch.data_array_shapes[name] = shape;
  }
  EXPECT_EQ(input_shapes(one_batch), (std::vector<Shape>{{4, 3, 4}, {4, 3}, {6, 2}}));
  ImportOptions batches;  // --data arrays of batches: their slices, not their whole shapes
  for (const auto& [name, shape] : by_data.data_shapes) {
    batches.data_shapes[name] = shape;
    batches.data_array_shapes[name] = Shape(shape.size() + 1, 2);
  }
  EXPECT_EQ(input_shapes(batches), (std::vector<Shape>{{4, 3, 4}, {4, 3}, {6, 2}}));
  ImportOptions wrong_rank;  // data of another rank fixes nothing, and the error says so
  wrong_rank.data_shapes["z"] = {6};
  wrong_rank.dims = {{"batch", 3}, {"seq", 5}};
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "t.onnx", wrong_rank);
  ASSERT_FALSE(graph.ok());
  EXPECT_NE(graph.status().message().find("input 'z' has a dynamic dim 0 in [?,2] (the array "
                                          "given for it, [6], has rank 1); fix it with --shape "
                                          "z:Nx2"),
            std::string::npos)
      << graph.status().message();
}

TEST(OnnxImport, TrailingOmittedOptionalInputsAndOutputsAreDropped) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"4"});
  m.node("Dropout", {"x", "", ""}, {"y", ""});
  m.output("y");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(m.bytes(), "t.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* dropout = (*graph)->node_list().at(0);
  EXPECT_EQ(dropout->num_operands(), 1);
  EXPECT_EQ(dropout->num_outputs(), 1);
}

TEST(OnnxImport, ReadsExternalDataRelativeToTheModel) {
  // The model's folder, in a folder of the test's own that also holds a file outside the model's.
  const testing::ScopedTempDir root("ampc_ext_");
  const std::filesystem::path dir = root.path / "model";
  std::filesystem::create_directories(dir / "data");
  const std::vector<float> weights = {1, 2, 3, 4, 5, 6};
  {
    std::ofstream bin(dir / "data" / "w.bin", std::ios::binary);
    bin << "HEAD";  // the tensor starts at offset 4
    bin.write(reinterpret_cast<const char*>(weights.data()), 24);
  }
  auto model_with = [&](const std::string& location, const std::string& offset) {
    ModelBuilder m;
    onnx::TensorProto& w = m.initializer("w", onnx::TensorProto::FLOAT, {2, 3});
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&w](const std::string& key, const std::string& value) {
      onnx::StringStringEntryProto* entry = w.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    };
    add("location", location);
    add("offset", offset);
    add("length", "24");
    m.output("w");
    std::ofstream(dir / "model.onnx", std::ios::binary) << m.bytes();
    return m.bytes();
  };
  model_with("data/w.bin", "4");
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file((dir / "model.onnx").string());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->outputs().at(0)->initializer()->to_double_vector(),
            (std::vector<double>{1, 2, 3, 4, 5, 6}));

  model_with("data/w.bin", "8");  // 4 bytes short
  graph = import_onnx_file((dir / "model.onnx").string());
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "initializer 'w'")) << graph.status();
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "from offset 8")) << graph.status();

  model_with("data/missing.bin", "0");
  graph = import_onnx_file((dir / "model.onnx").string());
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "missing.bin")) << graph.status();

  model_with("../w.bin", "0");
  graph = import_onnx_file((dir / "model.onnx").string());
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "leaves the model's folder"));

  graph = import_onnx_bytes(model_with("data/w.bin", "4"), "bytes");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "external file 'data/w.bin'"));

  // A link inside the folder to a file outside it is refused (it once copied /etc/passwd into a
  // compiled model's data); a link that stays inside is followed.
  std::ofstream(dir.parent_path() / "ampc_ext_secret.bin", std::ios::binary)
      << std::string(28, 'S');
  std::filesystem::create_symlink(dir.parent_path() / "ampc_ext_secret.bin",
                                  dir / "data" / "escape.bin");
  model_with("data/escape.bin", "4");
  graph = import_onnx_file((dir / "model.onnx").string());
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(),
                                "external data location 'data/escape.bin' resolves to"))
      << graph.status();
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "outside the model's folder"));
  std::filesystem::create_symlink(dir / "data" / "w.bin", dir / "data" / "inside.bin");
  model_with("data/inside.bin", "4");
  graph = import_onnx_file((dir / "model.onnx").string());
  EXPECT_TRUE(graph.ok()) << graph.status();
}

// ---- export -------------------------------------------------------------------------------------

TEST(OnnxExport, MakesRepeatedAndEmptyNamesUnique) {
  Graph graph("g");
  graph.set_opset("", 17);
  Value* x = graph.add_input("v", {DType::kF32, {4}});
  Node* a = graph.create_node("", "Relu", {x}, {TensorType{DType::kF32, {4}}});
  a->output(0)->set_name("v");  // repeats the input's name
  Node* b = graph.create_node("", "Relu", {a->output(0)}, {TensorType{DType::kF32, {4}}});
  Node* c = graph.create_node("", "Relu", {b->output(0)}, {TensorType{DType::kF32, {4}}});
  c->output(0)->set_name("v.1");  // the name the first fresh one would take
  graph.add_output(c->output(0));
  absl::StatusOr<std::string> bytes = export_onnx_bytes(graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto model = parse_model(*bytes);
  expect_checker_accepts(model);
  const onnx::GraphProto& g = model.graph();
  EXPECT_EQ(g.input(0).name(), "v");
  EXPECT_EQ(g.node(0).output(0), "v.2");
  EXPECT_EQ(g.node(1).input(0), "v.2");
  EXPECT_EQ(g.node(1).output(0), "t.1");
  EXPECT_EQ(g.node(2).output(0), "v.1");
  EXPECT_EQ(g.output(0).name(), "v.1");
  ASSERT_EQ(g.value_info_size(), 2);  // every intermediate value, with its type
  EXPECT_EQ(g.value_info(0).type().tensor_type().shape().dim(0).dim_value(), 4);
}

TEST(OnnxExport, WritesAttributesAsInputsWhereTheOpsetWantsThem) {
  Graph graph("g");
  graph.set_opset("", 13);  // ReduceSum takes axes as an input from opset 13
  Value* x = graph.add_input("x", {DType::kF32, {2, 3}});
  Node* sum = graph.create_node("", "ReduceSum", {x}, {TensorType{DType::kF32, {2, 1}}},
                                {{"axes", std::vector<int64_t>{1}}});
  sum->output(0)->set_name("s");
  graph.add_output(sum->output(0));
  absl::StatusOr<std::string> bytes = export_onnx_bytes(graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto model = parse_model(*bytes);
  expect_checker_accepts(model);
  const onnx::NodeProto& node = model.graph().node(0);
  EXPECT_EQ(node.attribute_size(), 0);
  ASSERT_EQ(node.input_size(), 2);
  ASSERT_EQ(model.graph().initializer_size(), 1);
  const onnx::TensorProto& axes = model.graph().initializer(0);
  EXPECT_EQ(axes.name(), node.input(1));
  EXPECT_EQ(axes.data_type(), onnx::TensorProto::INT64);
  EXPECT_EQ(axes.raw_data(), std::string("\x01\0\0\0\0\0\0\0", 8));

  // A float attribute becomes an f32 scalar (Dropout's ratio is an input from opset 12).
  Value* x2 = graph.add_input("x2", {DType::kF32, {4}});
  Node* dropout =
      graph.create_node("", "Dropout", {x2}, {TensorType{DType::kF32, {4}}}, {{"ratio", 0.25f}});
  dropout->output(0)->set_name("d");
  graph.add_output(dropout->output(0));
  bytes = export_onnx_bytes(graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto with_dropout = parse_model(*bytes);
  expect_checker_accepts(with_dropout);
  const onnx::NodeProto& dropout_proto = with_dropout.graph().node(1);
  EXPECT_EQ(dropout_proto.attribute_size(), 0);
  ASSERT_EQ(dropout_proto.input_size(), 2);
  const onnx::TensorProto& ratio = with_dropout.graph().initializer(1);
  EXPECT_EQ(ratio.name(), dropout_proto.input(1));
  EXPECT_EQ(ratio.data_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(ratio.dims_size(), 0);
  const float quarter = 0.25f;
  EXPECT_EQ(ratio.raw_data(), std::string(reinterpret_cast<const char*>(&quarter), 4));

  graph.set_opset("", 11);  // attributes before 12 and 13
  bytes = export_onnx_bytes(graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto old_model = parse_model(*bytes);
  const onnx::NodeProto& old = old_model.graph().node(0);
  EXPECT_EQ(old.input_size(), 1);
  ASSERT_EQ(old.attribute_size(), 1);
  EXPECT_EQ(old.attribute(0).type(), onnx::AttributeProto::INTS);
}

// A Split into equal parts names no sizes; from opset 18 ONNX wants num_outputs then (its
// Split-18 schema: "Either input 'split' or the attribute 'num_outputs' should be specified"),
// as a graph raised from 17 to 22 for a bf16 Conv needs. The file reads back to the same cut.
TEST(OnnxExport, AnEqualSplitSaysHowManyPartsFromOpset18) {
  for (const int64_t opset : {17, 18, 22}) {
    SCOPED_TRACE(opset);
    Graph graph("g");
    graph.set_opset("", opset);
    Value* x = graph.add_input("x", {DType::kF32, {2, 6}});
    Node* split = graph.create_node(
        "", "Split", {x}, {TensorType{DType::kF32, {2, 3}}, TensorType{DType::kF32, {2, 3}}},
        {{"axis", int64_t{1}}});
    graph.add_output(split->output(0));
    graph.add_output(split->output(1));
    absl::StatusOr<std::string> bytes = export_onnx_bytes(graph);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const onnx::ModelProto model = parse_model(*bytes);
    if (opset <= 17) expect_checker_accepts(model);  // the linked checker knows up to 17
    const onnx::NodeProto& node = model.graph().node(0);
    int64_t num_outputs = 0;
    for (const onnx::AttributeProto& attr : node.attribute()) {
      if (attr.name() == "num_outputs") num_outputs = attr.i();
    }
    EXPECT_EQ(num_outputs, opset >= 18 ? 2 : 0);
    absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*bytes, "split.onnx");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)->outputs()[1]->shape(), (Shape{2, 3}));
  }
}

TEST(OnnxExport, WritesDTypeAttributesAsOnnxCodesAndPrecisionInDocString) {
  Graph graph("g");
  Value* x = graph.add_input("x", {DType::kF32, {2}});
  Node* cast =
      graph.create_node("", "Cast", {x}, {TensorType{DType::kF16, {2}}}, {{"to", DType::kF16}});
  cast->output(0)->set_name("y");
  cast->set_doc_string("cast for MatMul");
  cast->mutable_precision() = {DType::kF16, DType::kF32, "allow-list MatMul"};
  graph.add_output(cast->output(0));
  absl::StatusOr<std::string> bytes = export_onnx_bytes(graph);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const onnx::ModelProto model = parse_model(*bytes);
  expect_checker_accepts(model);
  const onnx::NodeProto& node = model.graph().node(0);
  ASSERT_EQ(node.attribute_size(), 1);
  EXPECT_EQ(node.attribute(0).type(), onnx::AttributeProto::INT);
  EXPECT_EQ(node.attribute(0).i(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(node.doc_string(),
            "cast for MatMul\nampc precision: compute=f16 accumulate=f32 reason=allow-list MatMul");
  EXPECT_EQ(model.ir_version(), 8);
  EXPECT_EQ(model.producer_name(), "ampc");

  absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*bytes, "exported");
  ASSERT_TRUE(again.ok()) << again.status();
  const Node* imported = (*again)->node_list().at(0);
  EXPECT_EQ(imported->doc_string(), "cast for MatMul");
  EXPECT_EQ(imported->precision(), cast->precision());
  EXPECT_EQ(imported->dtype_attr("to"), DType::kF16);
}

TEST(OnnxExport, FileIsReplacedWholeAndFailuresLeaveNothing) {
  const testing::ScopedTempDir folder("ampc_export_");
  const std::filesystem::path& dir = folder.path;
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(source_path("models/mlp.onnx"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::string target = (dir / "out.onnx").string();
  std::ofstream(target) << "old contents";
  ASSERT_TRUE(export_onnx_file(**graph, target).ok());
  absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_file(target);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(print_graph(**again), print_graph(**graph));

  const absl::Status missing_dir = export_onnx_file(**graph, (dir / "no/such/out.onnx").string());
  EXPECT_FALSE(missing_dir.ok());
  EXPECT_TRUE(absl::StrContains(missing_dir.message(), "no/such/out.onnx")) << missing_dir;
  int files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);  // out.onnx only: no temporary file left behind
}

}  // namespace
}  // namespace ampc

namespace ampc {
namespace {

// A graph with one large initializer (4 KiB) and one small (8 bytes).
std::unique_ptr<Graph> weights_graph() {
  std::string text = "graph g(%x: f32[1024]) {\n  init %big: f32[1024] = [";
  for (int i = 0; i < 1024; ++i) text += str_cat(i == 0 ? "" : ", ", 0.25 * i - 7);
  text += "]\n  init %small: f32[2] = [1.5, -2.0]\n";
  text += "  %y = Mul(%x, %big) : f32[1024]\n  %z = Add(%y, %y) : f32[1024]\n";
  text += "  %s = ReduceSum<keepdims=0>(%small) : f32[]\n  return %z, %s\n}";
  return testing::parse_or_fail(text);
}

onnx::ModelProto read_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromIstream(&in)) << path;
  return model;
}

TEST(OnnxExport, ExternalDataPutsLargeInitializersInADataFileBesideTheModel) {
  std::unique_ptr<Graph> graph = weights_graph();
  ASSERT_NE(graph, nullptr);
  const testing::ScopedTempDir folder("ampc_external_data_");
  const std::string dir = folder.path.string();
  const std::string path = dir + "/model.onnx";
  ExportOptions options;
  options.external_data = ExportOptions::ExternalData::kAlways;
  ASSERT_TRUE(export_onnx_file(*graph, path, options).ok());
  ASSERT_TRUE(std::filesystem::exists(path + ".data"));
  EXPECT_GE(std::filesystem::file_size(path + ".data"), 4096u);

  const onnx::ModelProto model = read_model(path);
  for (const onnx::TensorProto& init : model.graph().initializer()) {
    const bool external = init.data_location() == onnx::TensorProto::EXTERNAL;
    EXPECT_EQ(external, init.name() == "big") << init.name();
    if (external) {
      std::map<std::string, std::string> entries;
      for (const auto& e : init.external_data()) entries[e.key()] = e.value();
      EXPECT_EQ(entries["location"], "model.onnx.data");
      EXPECT_EQ(entries["length"], "4096");
      EXPECT_FALSE(init.has_raw_data());
    }
  }
  EXPECT_NO_THROW(onnx::checker::check_model(path));

  // The same model, read back from the two files, has the same weights.
  absl::StatusOr<std::unique_ptr<Graph>> back = import_onnx_file(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(print_graph(**back), print_graph(*graph));
}

TEST(OnnxExport, ExternalDataIsAutomaticOverTheThresholdAndNeverWhenRefused) {
  std::unique_ptr<Graph> graph = weights_graph();
  ASSERT_NE(graph, nullptr);
  const testing::ScopedTempDir folder("ampc_external_data_auto_");
  const std::string dir = folder.path.string();
  ExportOptions options;  // kAuto
  options.auto_threshold_bytes = 4000;
  ASSERT_TRUE(export_onnx_file(*graph, dir + "/over.onnx", options).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/over.onnx.data"));
  options.auto_threshold_bytes = 5000;
  ASSERT_TRUE(export_onnx_file(*graph, dir + "/under.onnx", options).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/under.onnx.data"));
  options.external_data = ExportOptions::ExternalData::kNever;
  options.auto_threshold_bytes = 0;
  ASSERT_TRUE(export_onnx_file(*graph, dir + "/never.onnx", options).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/never.onnx.data"));
}

TEST(OnnxExport, AFailedExternalDataWriteLeavesNoFiles) {
  std::unique_ptr<Graph> graph = weights_graph();
  ASSERT_NE(graph, nullptr);
  ExportOptions options;
  options.external_data = ExportOptions::ExternalData::kAlways;
  const std::string path = ::testing::TempDir() + "/no/such/dir/model.onnx";
  absl::Status status = export_onnx_file(*graph, path, options);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "model.onnx.data")) << status;
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace ampc
