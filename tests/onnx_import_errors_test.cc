// Bad input to the ONNX importer: each case gets a Status whose message names what is wrong
// (the file, the node, the value, the attribute, the flag) and what was expected.
#include <climits>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/onnx_model_builder.h"
#include "tests/test_util.h"

namespace ampc {
namespace {

using testing::add_int_attr;
using testing::ModelBuilder;

// Imports `bytes` (named "bad.onnx") and checks the error message contains every fragment
// (and has `code`, when given).
void expect_import_error(const std::string& bytes, const std::vector<std::string>& fragments,
                         const ImportOptions& options = {},
                         std::optional<absl::StatusCode> code = std::nullopt) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(bytes, "bad.onnx", options);
  ASSERT_FALSE(graph.ok()) << "import succeeded";
  for (const std::string& fragment : fragments) {
    EXPECT_TRUE(absl::StrContains(graph.status().message(), fragment))
        << "message: " << graph.status().message() << "\nmissing: " << fragment;
  }
  if (code) {
    EXPECT_EQ(graph.status().code(), *code) << graph.status();
  }
}

// x: f32[2,3] -> Relu -> y, for cases that break one thing of an otherwise good model.
ModelBuilder relu_model() {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.node("Relu", {"x"}, {"y"}, "relu");
  m.output("y");
  return m;
}

TEST(OnnxImportErrors, MissingFileNamesThePath) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file("/no/such/dir/model.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(graph.status().message(),
            "cannot read '/no/such/dir/model.onnx': No such file or directory");
}

TEST(OnnxImportErrors, DirectoryIsNotAModelFile) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_file(::testing::TempDir());
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(absl::StrContains(graph.status().message(), "is a directory")) << graph.status();
}

TEST(OnnxImportErrors, RandomBytesAreNotAModel) {
  std::mt19937 rng(1);
  std::string bytes(4096, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  expect_import_error(bytes, {"bad.onnx is not an ONNX model ("});
}

TEST(OnnxImportErrors, TruncatedModelIsNotAModel) {
  std::ifstream in(testing::source_path("models/mlp.onnx"), std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  const std::string model = contents.str();
  ASSERT_GT(model.size(), 1000u);
  expect_import_error(model.substr(0, model.size() / 2),
                      {"bad.onnx is not an ONNX model (protobuf parse failed)"});
}

TEST(OnnxImportErrors, ParsedMessagesWithoutModelPartsAreNotModels) {
  ModelBuilder no_graph = relu_model();
  no_graph.model().clear_graph();
  expect_import_error(no_graph.bytes(), {"bad.onnx is not an ONNX model (no graph)"});
  ModelBuilder no_opset = relu_model();
  no_opset.model().clear_opset_import();
  expect_import_error(no_opset.bytes(), {"bad.onnx is not an ONNX model (no opset_import)"});
  ModelBuilder no_ir = relu_model();
  no_ir.model().set_ir_version(0);
  expect_import_error(no_ir.bytes(), {"bad.onnx is not an ONNX model (ir_version 0)"});
  expect_import_error("", {"bad.onnx is not an ONNX model (ir_version 0)"});
}

TEST(OnnxImportErrors, UnsupportedOpNamesNodeOpDomainOpsetAndTheNearestSupportedOps) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.node("Foo", {"x"}, {"y"}, "foo1");
  m.output("y");
  expect_import_error(m.bytes(),
                      {"bad.onnx: node 'foo1' (Foo): op 'Foo' (domain 'ai.onnx', opset 17) is not "
                       "supported by ampc; the nearest ops ampc supports: ",
                       "(`ampc ops` lists all)"},
                      {}, absl::StatusCode::kUnimplemented);
  // Nearest by name: one letter away, or of the same family.
  ModelBuilder typo;
  typo.input("x", onnx::TensorProto::FLOAT, {"2"});
  typo.node("Rellu", {"x"}, {"y"}, "r");
  typo.output("y");
  expect_import_error(typo.bytes(), {"the nearest ops ampc supports: Relu, "});
  ModelBuilder family;
  family.input("x", onnx::TensorProto::FLOAT, {"2"});
  family.node("ReduceMedian", {"x"}, {"y"}, "r");
  family.output("y");
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      import_onnx_bytes(family.bytes(), "bad.onnx", ImportOptions{});
  ASSERT_FALSE(graph.ok());
  const std::string message(graph.status().message());
  const std::string nearest = message.substr(message.find("supports: "));
  EXPECT_TRUE(absl::StrContains(nearest, "ReduceMax") && absl::StrContains(nearest, "ReduceMean"))
      << message;
}

TEST(OnnxImportErrors, OpAtAnUnsupportedOpsetSaysWhichOpsetsAreSupported) {
  ModelBuilder m(8);
  m.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
  m.node("BatchNormalization", {"x", "x", "x", "x", "x"}, {"y"}, "bn");
  m.output("y");
  // Before opset 9 BatchNormalization had `spatial` and is_test.
  expect_import_error(m.bytes(), {"node 'bn' (BatchNormalization): op 'BatchNormalization' (domain "
                                  "'ai.onnx', opset 8) is not supported by ampc; ampc implements "
                                  "BatchNormalization for opsets 9 to 13, 14 and later"});
}

TEST(OnnxImportErrors, OpOfAnUnknownDomainSaysSo) {
  ModelBuilder m;
  onnx::OperatorSetIdProto* ms = m.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.node("FusedGemm", {"x"}, {"y"}).set_domain("com.microsoft");
  m.output("y");
  expect_import_error(m.bytes(), {"op 'FusedGemm' (domain 'com.microsoft', opset 1)",
                                  "ampc has no ops in domain 'com.microsoft'"});
  m.model().mutable_opset_import()->RemoveLast();
  expect_import_error(m.bytes(), {"uses domain 'com.microsoft', which the model's opset_import "
                                  "does not list"});
}

TEST(OnnxImportErrors, UnsupportedElementTypeNamesTheInputAndType) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::UINT16, {"2"});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  expect_import_error(m.bytes(), {"graph input 'x': element type UINT16 is not supported"});

  ModelBuilder s = relu_model();
  s.initializer("names", onnx::TensorProto::STRING, {1}).add_string_data("a");
  expect_import_error(s.bytes(), {"initializer 'names': element type STRING is not supported"});
}

TEST(OnnxImportErrors, DynamicDimWithoutShapeOptionTellsHowToFixIt) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  expect_import_error(m.bytes(), {"input 'x' has a dynamic dim 0 ('batch') in [batch,3]; fix it "
                                  "with --dim batch=N (every input dim named 'batch') or "
                                  "--shape x:Nx3"});
  ModelBuilder unnamed;
  unnamed.input("x", onnx::TensorProto::FLOAT, {"3", ""});
  unnamed.output("x");
  expect_import_error(unnamed.bytes(), {"input 'x' has a dynamic dim 1 in [3,?]; fix it with "
                                        "--shape x:3xN"});

  ModelBuilder no_shape;
  no_shape.input("x", onnx::TensorProto::FLOAT, {})
      .mutable_type()
      ->mutable_tensor_type()
      ->clear_shape();
  no_shape.output("x");
  expect_import_error(no_shape.bytes(), {"graph input 'x' has no shape", "--shape x:"});
}

TEST(OnnxImportErrors, ShapeOptionMustNameAnInputOfTheRightRankAndDims) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  m.node("Relu", {"x"}, {"y"});
  m.output("y");
  ImportOptions unknown;
  unknown.input_shapes["y"] = {2, 3};
  unknown.input_shapes["x"] = {2, 3};
  expect_import_error(m.bytes(), {"--shape names 'y', which is not a graph input (inputs: x)"},
                      unknown);
  ImportOptions rank;
  rank.input_shapes["x"] = {2, 3, 4};
  expect_import_error(m.bytes(), {"--shape x gives [2,3,4] (rank 3), but input 'x' has rank 2"},
                      rank);
  ImportOptions contradiction;
  contradiction.input_shapes["x"] = {2, 4};
  expect_import_error(m.bytes(), {"--shape x gives [2,4], but input 'x' has dim 1 = 3"},
                      contradiction);
}

// One dim name is one size in a graph: --dim and the --shape of another input that share a name
// must agree, and --dim must name a dim.
TEST(OnnxImportErrors, NamedDimsMustBeOneSizeAndExist) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  m.input("y", onnx::TensorProto::FLOAT, {"batch", "seq"});
  m.node("Relu", {"x"}, {"x2"});
  m.node("Relu", {"y"}, {"y2"});
  m.output("x2");
  m.output("y2");
  ImportOptions conflict;
  conflict.dims["batch"] = 4;
  conflict.input_shapes["x"] = {2, 3};
  expect_import_error(m.bytes(),
                      {"dim 'batch' is 4 by --dim batch=4 but 2 by --shape x; inputs whose dims "
                       "share a name share the size"},
                      conflict);
  ImportOptions two_shapes;
  two_shapes.input_shapes["x"] = {2, 3};
  two_shapes.input_shapes["y"] = {5, 7};
  expect_import_error(m.bytes(), {"dim 'batch' is 2 by --shape x but 5 by --shape y"}, two_shapes);
  ImportOptions unknown;
  unknown.dims["time"] = 4;
  expect_import_error(m.bytes(),
                      {"--dim names 'time', which no graph input's dim is named (named dims: "
                       "batch, seq)"},
                      unknown);
}

TEST(OnnxImportErrors, ShapeMismatchNamesTheNodeAndBothShapes) {
  ModelBuilder m;
  m.input("a", onnx::TensorProto::FLOAT, {"2", "3"});
  m.input("b", onnx::TensorProto::FLOAT, {"4", "5"});
  m.node("MatMul", {"a", "b"}, {"c"}, "mm");
  m.output("c");
  expect_import_error(m.bytes(), {"bad.onnx: node 'mm' (MatMul)", "[2,3]", "[4,5]"});
}

TEST(OnnxImportErrors, ValuesMustBeDefinedBeforeUseAndOnce) {
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"2"});
  m.node("Relu", {"h"}, {"y"}, "second");  // reads the next node's output
  m.node("Relu", {"x"}, {"h"}, "first");
  m.output("y");
  expect_import_error(m.bytes(), {"node 'second' (Relu) reads value 'h', which is not defined "
                                  "before it"});

  ModelBuilder twice;
  twice.input("x", onnx::TensorProto::FLOAT, {"2"});
  twice.node("Relu", {"x"}, {"x"}, "again");
  twice.output("x");
  expect_import_error(twice.bytes(),
                      {"node 'again' (Relu) defines value 'x', which is already defined"});

  ModelBuilder no_output = relu_model();
  no_output.output("z");
  expect_import_error(no_output.bytes(),
                      {"graph output 'z' is not produced by any node, input or initializer"});
}

TEST(OnnxImportErrors, AttributesAreCheckedAgainstTheOpDef) {
  ModelBuilder unknown = relu_model();
  add_int_attr(*unknown.graph().mutable_node(0), "alpha", 1);
  expect_import_error(unknown.bytes(), {"node 'relu' (Relu): attribute 'alpha' is not an "
                                        "attribute of Relu at opset 17 (it has none)"});

  ModelBuilder kind;
  kind.input("x", onnx::TensorProto::FLOAT, {"2"});
  add_int_attr(kind.node("LeakyRelu", {"x"}, {"y"}, "lr"), "alpha", 1);
  kind.output("y");
  expect_import_error(kind.bytes(),
                      {"node 'lr' (LeakyRelu): attribute 'alpha' is INT; the op takes FLOAT"});

  ModelBuilder required;
  required.input("x", onnx::TensorProto::FLOAT, {"2"});
  required.node("Cast", {"x"}, {"y"}, "cast");
  required.output("y");
  expect_import_error(required.bytes(), {"node 'cast' (Cast): required attribute 'to' is missing"});

  add_int_attr(*required.graph().mutable_node(0), "to", onnx::TensorProto::STRING);
  expect_import_error(required.bytes(), {"node 'cast' (Cast): attribute 'to': element type "
                                         "STRING is not supported"});
}

TEST(OnnxImportErrors, InitializerDataOfTheWrongSizeNamesTheTensor) {
  ModelBuilder raw = relu_model();
  raw.initializer("w", onnx::TensorProto::FLOAT, {2}).set_raw_data(std::string(4, '\0'));
  expect_import_error(raw.bytes(),
                      {"bad.onnx: initializer 'w': raw_data has 4 bytes; f32[2] needs 8"});

  ModelBuilder typed = relu_model();
  typed.initializer("w", onnx::TensorProto::INT64, {3}).add_int64_data(1);
  expect_import_error(typed.bytes(),
                      {"initializer 'w': int64_data has 1 elements; i64[3] needs 3"});

  ModelBuilder huge = relu_model();
  huge.initializer("w", onnx::TensorProto::FLOAT, {int64_t{1} << 40, int64_t{1} << 40});
  expect_import_error(huge.bytes(), {"initializer 'w': dims", "are not a valid shape"});
}

TEST(OnnxImportErrors, FlagAttributesOutsideZeroAndOneNameTheNodeAndAttribute) {
  ModelBuilder m;
  m.input("a", onnx::TensorProto::FLOAT, {"2", "3"});
  m.input("b", onnx::TensorProto::FLOAT, {"4", "3"});
  add_int_attr(m.node("Gemm", {"a", "b"}, {"y"}, "gemm"), "transB", INT64_MIN);
  m.output("y");
  expect_import_error(m.bytes(),
                      {"node 'gemm' (Gemm): attribute transB = -9223372036854775808 "
                       "is not one of the values Gemm defines (0 or 1)"},
                      {}, absl::StatusCode::kInvalidArgument);
  // Read as truthy, 2 would have transposed B: it is refused too.
  m.graph().mutable_node(0)->mutable_attribute(0)->set_i(2);
  expect_import_error(m.bytes(), {"attribute transB = 2"});
  m.graph().mutable_node(0)->mutable_attribute(0)->set_i(1);
  EXPECT_TRUE(import_onnx_bytes(m.bytes(), "good.onnx").ok());
}

// Range(0, 2^62, 1) has 2^62 i64 elements, 2^65 bytes: folding it once overflowed a buffer.
TEST(OnnxImportErrors, ShapesPastTwoToTheSixtyThreeBytesAreErrorsNotOverflows) {
  ModelBuilder m;
  for (auto [name, value] :
       {std::pair<const char*, int64_t>{"start", 0}, {"limit", int64_t{1} << 62}, {"delta", 1}}) {
    m.initializer(name, onnx::TensorProto::INT64, {}).add_int64_data(value);
  }
  m.node("Range", {"start", "limit", "delta"}, {"y"}, "range");
  m.output("y");
  expect_import_error(m.bytes(), {"node 'range' (Range): output 0 i64[4611686018427387904] would "
                                  "take more than 2^63 bytes"});
}

TEST(OnnxImportErrors, OpsetsNewerThanAmpcImplementsAreRefused) {
  ModelBuilder m = relu_model();
  m.model().mutable_opset_import(0)->set_version(99);
  expect_import_error(m.bytes(), {"opset_import gives ai.onnx version 99; ampc implements ai.onnx "
                                  "up to opset 28"});
}

TEST(OnnxImportErrors, OpsetVersionsMustBePositiveAndUnique) {
  ModelBuilder m = relu_model();
  m.model().mutable_opset_import(0)->set_version(0);
  expect_import_error(m.bytes(), {"opset_import gives domain 'ai.onnx' version 0"});
  ModelBuilder twice = relu_model();
  *twice.model().add_opset_import() = twice.model().opset_import(0);
  expect_import_error(twice.bytes(), {"opset_import lists domain 'ai.onnx' twice"});
}

}  // namespace
}  // namespace ampc
