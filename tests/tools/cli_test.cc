// The `ampc` command line, end to end: the example models compile and inspect; bad input and bad
// flags give a clear message and a non-zero exit, and write nothing.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

using testing::CliResult;
using testing::read_file;

CliResult ampc(const std::string& args) { return testing::run_ampc(args); }

class CliTest : public testing::TempDirTest {
 protected:
  CliTest() : TempDirTest("ampc_cli_") {}

  std::string model(const std::string& name) const {
    return testing::source_path("models/" + name + ".onnx");
  }
};

// A one-node model: `op` (with its inputs all graph inputs of `input_shape` float) at `opset`.
std::string one_node_model(const std::string& op, int opset, int num_inputs,
                           const std::vector<std::string>& dims) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("g");
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(op);
  node->set_name("the_node");
  for (int i = 0; i < num_inputs; ++i) {
    onnx::ValueInfoProto* input = graph->add_input();
    input->set_name("in" + std::to_string(i));
    auto* tensor = input->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    for (const std::string& d : dims) {
      auto* dim = tensor->mutable_shape()->add_dim();
      if (std::isdigit(static_cast<unsigned char>(d[0]))) {
        dim->set_dim_value(std::stoll(d));
      } else {
        dim->set_dim_param(d);
      }
    }
    node->add_input(input->name());
  }
  node->add_output("out");
  graph->add_output()->set_name("out");
  return model.SerializeAsString();
}

TEST_F(CliTest, HelpListsCommandsAndFlags) {
  CliResult r = ampc("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("compile"));
  EXPECT_THAT(r.out, HasSubstr("inspect"));
  r = ampc("compile --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--output", "--shape", "--dump-after", "--disable-pass"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  EXPECT_THAT(r.out, HasSubstr("fold-constants"));  // --dump-after lists the passes
}

TEST_F(CliTest, CompilesEachExampleModelIntoACheckedOnnxFile) {
  for (const std::string name : {"mlp", "cnn", "tiny_gpt"}) {
    SCOPED_TRACE(name);
    const std::string out = path(name + ".ampc.onnx");
    CliResult r = ampc("compile " + model(name) + " -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(read_file(out)));
    EXPECT_NO_THROW(onnx::checker::check_model(proto));
    for (const onnx::NodeProto& node : proto.graph().node()) {
      EXPECT_NE(node.op_type(), "Shape");
      EXPECT_NE(node.op_type(), "Constant");
      EXPECT_NE(node.op_type(), "Identity");
    }
    // The compiled file inspects, and its interface kept its names.
    r = ampc("inspect " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("return %loss"));
    EXPECT_THAT(r.out, HasSubstr("summary of graph"));
  }
}

TEST_F(CliTest, InspectJsonFollowsTheDocumentedSchema) {
  CliResult r = ampc("inspect --format json " + model("mlp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["schema"], "ampc.inspect/1");
  EXPECT_EQ(json["graph"]["opsets"]["ai.onnx"], 17);
  EXPECT_EQ(json["inputs"][0]["name"], "x");
  EXPECT_EQ(json["inputs"][0]["shape"], nlohmann::json::array({8, 64}));
  EXPECT_EQ(json["outputs"][0]["name"], "loss");
  EXPECT_EQ(json["outputs"][0]["shape"], nlohmann::json::array());
  // Linear(64,64), Linear(64,64), Linear(64,10): 2*(64*64+64) + 64*10+10 parameters.
  EXPECT_EQ(json["summary"]["parameter_elements"], 2 * (64 * 64 + 64) + 64 * 10 + 10);
  EXPECT_EQ(json["summary"]["parameter_bytes"], 4 * (2 * (64 * 64 + 64) + 64 * 10 + 10));
  EXPECT_EQ(json["summary"]["nodes_per_op"]["Gemm"], 3);
  EXPECT_EQ(json["summary"]["node_count"], json["nodes"].size());
  const nlohmann::json& gemm = json["nodes"][0];
  EXPECT_EQ(gemm["op"], "Gemm");
  EXPECT_EQ(gemm["attributes"]["transB"], 1);
  EXPECT_TRUE(gemm["precision"]["compute"].is_null());
}

TEST_F(CliTest, DumpAfterWritesTextIrPerPass) {
  const std::string dumps = path("dumps");
  CliResult r = ampc("compile " + model("tiny_gpt") + " -o " + path("out.onnx") +
                     " --dump-after all --dump-dir " + dumps);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int files = 0;
  bool saw_fold = false;
  for (const auto& entry : fs::directory_iterator(dumps)) {
    ++files;
    saw_fold =
        saw_fold || entry.path().filename().string().find("fold-constants") != std::string::npos;
    EXPECT_THAT(read_file(entry.path().string()), HasSubstr("graph "));
  }
  EXPECT_GE(files, 4);
  EXPECT_TRUE(saw_fold);
  r = ampc("compile " + model("mlp") + " -o " + path("out2.onnx") + " --dump-after dce");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("// ----- IR after dce -----"));
}

// A --dump-dir that cannot be a folder, or one that would receive nothing, is an error before
// the compile starts: exit 1, the flag named, no output written.
TEST_F(CliTest, DumpDirThatCannotBeUsedIsAnErrorBeforeCompiling) {
  std::ofstream(path("a_file")) << "not a folder";
  for (const std::string& dir : {path("a_file"), path("a_file/below")}) {
    CliResult r = ampc("compile " + model("mlp") + " -o " + path("out.onnx") +
                       " --dump-after all --dump-dir " + dir);
    EXPECT_EQ(r.exit_code, 1) << dir << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: --dump-dir '" + dir + "' cannot be used: "));
    EXPECT_FALSE(fs::exists(path("out.onnx")));
  }
  CliResult r =
      ampc("compile " + model("mlp") + " -o " + path("out.onnx") + " --dump-dir " + path("dumps"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--dump-dir does nothing without --dump-after"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
  EXPECT_FALSE(fs::exists(path("dumps")));
}

TEST_F(CliTest, DisablePassKeepsWhatItWouldHaveRemoved) {
  const std::string out = path("out.onnx");
  CliResult r = ampc("compile " + model("tiny_gpt") + " -o " + out +
                     " --disable-pass fold-constants --disable-pass canonicalize");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(out)));
  int constants = 0;
  for (const onnx::NodeProto& node : proto.graph().node())
    constants += node.op_type() == "Constant";
  EXPECT_GT(constants, 0);
}

// --time-passes: a row per step of the compile, in order, with the graph's size after it (the
// import's row counts the input file's nodes; the last rows the written graphs' nodes).
TEST_F(CliTest, TimePassesPrintsEveryStepWithTheGraphSizeAfterIt) {
  const std::string input = model("tiny_gpt");
  CliResult r = ampc("compile " + input + " -o " + path("out.onnx") +
                     " --precision fp16 --optimizer adamw --loss loss --time-passes"
                     " --disable-pass eliminate-casts");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::vector<std::string>> rows;
  std::vector<std::string> order;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> row{std::istream_iterator<std::string>(fields), {}};
    if (row.size() == 5 || (row.size() == 2 && row[0] == "total")) {
      order.push_back(row[0]);
      rows[row[0]] = row;
    }
  }
  const std::vector<std::string> expected_order = {
      "import",    "fold-constants", "canonicalize",  "dce",        "infer-shapes",
      "autocast",  "insert-casts",   "training-step", "loss-scale", "autodiff",
      "optimizer", "legalize-opset", "o0-baseline",   "export",     "total"};
  auto position = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  for (size_t i = 0; i + 1 < expected_order.size(); ++i) {
    EXPECT_LT(position(expected_order[i]), position(expected_order[i + 1]))
        << expected_order[i] << " before " << expected_order[i + 1] << " in\n"
        << r.err;
  }
  EXPECT_EQ(std::count(order.begin(), order.end(), "eliminate-casts"), 0);  // disabled

  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(input)));
  ASSERT_TRUE(rows.contains("import") && rows.contains("export") && rows.contains("autocast"));
  EXPECT_EQ(rows["import"][3], std::to_string(proto.graph().node_size()));
  EXPECT_EQ(rows["autocast"][4], "-");  // no training step yet
  ASSERT_TRUE(proto.ParseFromString(read_file(path("out.onnx"))));
  ASSERT_EQ(proto.training_info_size(), 1);
  EXPECT_EQ(rows["export"][3], std::to_string(proto.graph().node_size()));
  EXPECT_EQ(rows["export"][4], std::to_string(proto.training_info(0).algorithm().node_size()));
  for (const std::string& name : order) {
    EXPECT_GE(std::stod(rows[name][1]), 0.0) << name;
  }

  r = ampc("compile " + input + " -o " + path("out2.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("seconds")));
}

TEST_F(CliTest, MissingFileIsAClearError) {
  CliResult r = ampc("compile " + path("nope.onnx") + " -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("ampc: error:"));
  EXPECT_THAT(r.err, HasSubstr("nope.onnx"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
}

TEST_F(CliTest, RandomBytesAreNotAModel) {
  write("junk.onnx", std::string("\x13\x37 this is not a protobuf \xff\xfe", 30));
  CliResult r = ampc("inspect " + path("junk.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("is not an ONNX model"));
}

TEST_F(CliTest, TruncatedModelIsAClearError) {
  const std::string bytes = read_file(model("cnn"));
  write("cut.onnx", bytes.substr(0, bytes.size() / 2));
  CliResult r = ampc("compile " + path("cut.onnx") + " -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cut.onnx"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
}

TEST_F(CliTest, UnsupportedOpNamesNodeOpDomainOpsetAndNearestSupportedOps) {
  write("foo.onnx", one_node_model("Foo", 17, 1, {"2"}));
  CliResult r = ampc("compile " + path("foo.onnx") + " -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("the_node"));
  EXPECT_THAT(r.err, HasSubstr("Foo"));
  EXPECT_THAT(r.err, HasSubstr("ai.onnx"));
  EXPECT_THAT(r.err, HasSubstr("17"));
  EXPECT_THAT(r.err, HasSubstr("the nearest ops ampc supports: "));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
}

TEST_F(CliTest, DynamicDimNeedsShapeFlag) {
  write("dyn.onnx", one_node_model("Relu", 17, 1, {"batch", "4"}));
  CliResult r = ampc("compile " + path("dyn.onnx") + " -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("in0"));
  EXPECT_THAT(r.err, HasSubstr("batch"));
  EXPECT_THAT(r.err, HasSubstr("--shape"));
  EXPECT_THAT(r.err, HasSubstr("fix it with --dim batch=N"));
  r = ampc("compile " + path("dyn.onnx") + " -o " + path("out.onnx") + " --shape in0:8x4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = ampc("inspect " + path("out.onnx"));
  EXPECT_THAT(r.out, HasSubstr("%in0: f32[8,4]"));
  r = ampc("compile " + path("dyn.onnx") + " -o " + path("out2.onnx") + " --dim batch=6");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = ampc("inspect " + path("dyn.onnx") + " --dim batch=5");
  EXPECT_THAT(r.out, HasSubstr("%in0: f32[5,4]"));
  r = ampc("compile " + path("dyn.onnx") + " -o " + path("out3.onnx") + " --dim bach=6");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--dim names 'bach', which no graph input's dim is named "
                               "(named dims: batch)"));
  r = ampc("compile " + path("dyn.onnx") + " -o " + path("out3.onnx") + " --dim batch=six");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--dim 'batch=six': 'six' is not a size"));
  EXPECT_FALSE(fs::exists(path("out3.onnx")));
}

TEST_F(CliTest, ShapeMismatchNamesNodeAndBothShapes) {
  write("add.onnx", one_node_model("Add", 17, 2, {""}));
  // Fix the unnamed dynamic dim of the two inputs to sizes that do not broadcast.
  CliResult r = ampc("compile " + path("add.onnx") + " -o " + path("out.onnx") +
                     " --shape in0:3 --shape in1:4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("node 'the_node' (Add): shapes [3] and [4] do not broadcast"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
  // Dims of one name are one size: the same --shapes are refused before any node.
  write("add_n.onnx", one_node_model("Add", 17, 2, {"n"}));
  r = ampc("compile " + path("add_n.onnx") + " -o " + path("out.onnx") +
           " --shape in0:3 --shape in1:4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("dim 'n' is 3 by --shape in0 but 4 by --shape in1"));
}

// A training model's JSON holds its training step under "training_step" (the eval graph's
// fields but "schema", and the state updates), as the text shows both graphs; the eval graph's
// fields are as they were.
TEST_F(CliTest, InspectJsonHoldsATrainingModelsStep) {
  CliResult r = ampc("compile " + model("mlp") + " -o " + path("t.onnx") + " --optimizer sgd");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = ampc("inspect --format json " + path("t.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["schema"], "ampc.inspect/1");
  EXPECT_EQ(json["summary"]["node_count"], 6);
  ASSERT_TRUE(json.contains("training_step")) << r.out.substr(0, 200);
  const nlohmann::json& step = json["training_step"];
  EXPECT_FALSE(step.contains("schema"));
  EXPECT_EQ(step["summary"]["node_count"], step["nodes"].size());
  EXPECT_GT(step["summary"]["node_count"], json["summary"]["node_count"]);
  // The parameters are state the step updates.
  ASSERT_TRUE(step["state_updates"].is_array());
  std::vector<std::string> states;
  for (const nlohmann::json& update : step["state_updates"]) {
    states.push_back(update["state"].get<std::string>());
    EXPECT_TRUE(update["update"].is_string());
  }
  for (const std::string name : {"fc1.weight", "fc1.bias", "fc3.weight"}) {
    EXPECT_NE(std::find(states.begin(), states.end(), name), states.end()) << name;
  }
  // What the text says of the step, the JSON says too.
  r = ampc("inspect " + path("t.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("summary of training step"));
  // A model without a step has no such key.
  r = ampc("inspect --format json " + model("mlp"));
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("training_step"));
}

// A compile of a model with no outputs computes nothing: refused as `ampc run` refuses it.
TEST_F(CliTest, AModelWithNoOutputsIsRefused) {
  std::string bytes = one_node_model("Relu", 17, 1, {"4"});
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  proto.mutable_graph()->clear_output();
  write("noout.onnx", proto.SerializeAsString());
  CliResult r = ampc("compile " + path("noout.onnx") + " -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("ampc: error: " + path("noout.onnx") + ": graph 'g' has no outputs"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
  r = ampc("run " + path("noout.onnx") + " --output-dir " + path("out"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("graph 'g' has no outputs"));
}

// Flags that would do nothing to this model are errors naming them, and nothing is written:
// --bn-running-var without a BatchNorm that trains, --freeze matching no initializer.
TEST_F(CliTest, TrainingFlagsThatDoNothingToTheModelAreErrors) {
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {"--bn-running-var biased",
       "--bn-running-var does nothing: " + model("mlp") + " has no BatchNormalization that trains"},
      {"--freeze '^no_such_weight$'",
       "--freeze '^no_such_weight$' matches no initializer of " + model("mlp")},
  };
  for (const auto& c : cases) {
    CliResult r =
        ampc("compile " + model("mlp") + " -o " + path("o.onnx") + " --optimizer sgd " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: " + c.message)) << c.flags;
    EXPECT_FALSE(fs::exists(path("o.onnx"))) << c.flags;
  }
  // Where they act, they are accepted.
  CliResult r = ampc("compile " + model("cnn") + " -o " + path("o.onnx") +
                     " --optimizer sgd --bn-running-var biased");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") + " --optimizer sgd --freeze fc1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Errors name what the user typed: the flag --loss-scale (not --scale-init, which it sets), and
// an unknown command (with the commands there are).
TEST_F(CliTest, ErrorsNameWhatWasTyped) {
  for (const std::string scale : {"static:0", "static:-1", "static:inf"}) {
    CliResult r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") +
                       " --optimizer sgd --loss-scale " + scale);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: --loss-scale '" + scale +
                                 "': the scale S must be a finite number > 0"));
    EXPECT_THAT(r.err, Not(HasSubstr("--scale-init")));
  }
  CliResult r = ampc("bogus");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("ampc: error: unknown command 'bogus'; the commands are compile, "
                               "inspect, run, train, compare, bench, ops"));
  r = ampc("bogus --help");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'bogus'"));
  EXPECT_FALSE(fs::exists(path("o.onnx")));
  // The parser's own usage errors read as every other error does, then point to the help.
  for (const std::string args : {"compile", "train x.onnx --steps abc"}) {
    r = ampc(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.err.rfind("ampc: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("Run with --help for more information.")) << args;
  }
}

TEST_F(CliTest, BadFlagsAreUsageErrors) {
  CliResult r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") + " --shape x:8xfoo");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--shape 'x:8xfoo'"));
  r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") + " --shape nosuch:8x64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("nosuch"));
  r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") + " --disable-pass nope");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--disable-pass: unknown pass 'nope'"));
  // A pass the compile's flags are made of: without it the model would lack what they ask for.
  for (const auto& [pass, flag] : std::vector<std::pair<std::string, std::string>>{
           {"optimizer", "--optimizer"},
           {"insert-casts", "--precision"},
           {"loss-scale", "fp16's dynamic loss scaling"},
           {"accumulate", "--accumulate"}}) {
    r = ampc("compile " + model("mlp") + " -o " + path("o.onnx") +
             " --optimizer sgd --precision fp16 --accumulate 2 --disable-pass " + pass);
    EXPECT_EQ(r.exit_code, 1) << pass;
    EXPECT_THAT(r.err, HasSubstr("--disable-pass " + pass + ": " + flag + " needs this pass"));
  }
  r = ampc("compile " + model("mlp"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--output"));
  r = ampc("inspect " + model("mlp") + " --format yaml");
  EXPECT_EQ(r.exit_code, 2);
  r = ampc("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(fs::exists(path("o.onnx")));
}

// An output path that exists as something other than a regular file (here a pipe; as root it
// once was /dev/full) is refused and left as it was; a symbolic link is written through.
TEST_F(CliTest, OutputsThatAreNotRegularFilesAreRefusedAndLinksWrittenThrough) {
  ASSERT_EQ(mkfifo(path("pipe").c_str(), 0644), 0);
  CliResult r = ampc("compile " + model("mlp") + " -o " + path("pipe"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(
      r.err, HasSubstr("-o '" + path("pipe") + "' exists and is not a regular file: it is a pipe"));
  EXPECT_TRUE(fs::is_fifo(path("pipe")));
  r = ampc("compile " + model("mlp") + " -o " + dir_.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("it is a directory"));

  std::ofstream(path("target.onnx")) << "old";
  fs::create_symlink(path("target.onnx"), path("link.onnx"));
  r = ampc("compile " + model("mlp") + " -o " + path("link.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(path("link.onnx")));
  EXPECT_GT(fs::file_size(path("target.onnx")), 1000u);
}

// Inputs that never end (/dev/zero) or are not files are refused, naming the path.
TEST_F(CliTest, ModelsThatAreNotRegularFilesAreRefused) {
  CliResult r = ampc("compile /dev/zero -o " + path("out.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot read '/dev/zero': it is a device"));
  EXPECT_FALSE(fs::exists(path("out.onnx")));
}

TEST_F(CliTest, UnwritableOutputIsAnErrorAndLeavesNothing) {
  CliResult r = ampc("compile " + model("mlp") + " -o " + path("no/such/dir/out.onnx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("out.onnx"));
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace ampc

namespace ampc {
namespace {

// A model exported by PyTorch with external data compiles to a model with external data when
// asked, and both run alike; --external-data without a file to apply it to is an error.
TEST_F(CliTest, ExternalDataInAndOut) {
  const std::string zoo = testing::source_path("models/zoo/mlp_wide.dynamo.onnx");
  CliResult r = ampc("compile " + zoo + " -o " + path("one.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(path("one.onnx.data")));
  r = ampc("compile " + zoo + " --external-data -o " + path("split.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(path("split.onnx.data")));
  EXPECT_LT(fs::file_size(path("split.onnx")), 16u * 1024);
  EXPECT_GT(fs::file_size(path("split.onnx.data")), 400u * 1024);
  r = ampc("inspect " + path("split.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CliResult one = ampc("inspect " + path("one.onnx"));
  EXPECT_EQ(r.out, one.out);

  r = ampc("train " + path("split.onnx") + " --data x.npz --steps 1 --external-data");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--external-data requires --export"));
}

}  // namespace
}  // namespace ampc
