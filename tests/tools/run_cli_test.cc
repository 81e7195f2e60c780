// `ampc run`, end to end: models/mlp.onnx runs on inputs from .npy and .npz files and writes
// each output as an .npy file; bad inputs give exit 1 and a message naming the input or file,
// bad flags exit 2, and a failed run writes no output.
#include <cmath>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/npy.h"
#include "tests/onnx_model_builder.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using testing::CliResult;

class RunCliTest : public testing::TempDirTest {
 protected:
  RunCliTest() : TempDirTest("ampc_run_cli_") {}

  void SetUp() override {
    // mlp.onnx: inputs x f32[8,64], label i64[8]; outputs loss f32[], logits f32[8,10].
    std::vector<double> x(8 * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1 * static_cast<double>(i));
    save("x.npy", Tensor::from_doubles(DType::kF32, {8, 64}, x));
    save("label.npy", Tensor::from_i64({8}, {0, 1, 2, 3, 4, 5, 6, 9}));
  }

  void save(const std::string& name, const Tensor& tensor) const {
    ASSERT_TRUE(runtime::write_npy(path(name), tensor).ok());
  }
  CliResult ampc(const std::string& args, const std::string& cwd = "") const {
    return testing::run_ampc("run " + args, cwd);
  }
  std::string mlp() const { return testing::source_path("models/mlp.onnx"); }
  std::string mlp_inputs() const {
    return " --input x=" + path("x.npy") + " --input label=" + path("label.npy");
  }
  // Runs `args`, expects exit 1 with `ampc: error:`, and that no output was written.
  std::string expect_error(const std::string& args) const {
    CliResult r = ampc(args + " --output-dir " + path("out"));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: "));
    EXPECT_FALSE(fs::exists(path("out"))) << args;
    return r.err;
  }
};

// Mean cross-entropy of `logits` [n, classes] against `labels`, in f64.
double cross_entropy(const Tensor& logits, const std::vector<int64_t>& labels) {
  const int64_t classes = logits.shape()[1];
  double total = 0;
  for (size_t row = 0; row < labels.size(); ++row) {
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(logits.element_as_double(row * classes + c));
    total += std::log(sum) - logits.element_as_double(row * classes + labels[row]);
  }
  return total / static_cast<double>(labels.size());
}

TEST_F(RunCliTest, RunsTheMlpAndWritesEachOutputAsNpy) {
  CliResult r = ampc(mlp() + mlp_inputs() + " --output-dir " + path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "loss f32[] " + path("out/loss.npy") + "\nlogits f32[8,10] " +
                       path("out/logits.npy") + "\n");
  absl::StatusOr<Tensor> loss = runtime::read_npy(path("out/loss.npy"));
  absl::StatusOr<Tensor> logits = runtime::read_npy(path("out/logits.npy"));
  ASSERT_TRUE(loss.ok() && logits.ok()) << loss.status() << logits.status();
  EXPECT_EQ(loss->type(), (TensorType{DType::kF32, {}}));
  EXPECT_EQ(logits->type(), (TensorType{DType::kF32, {8, 10}}));
  // The loss output is the cross-entropy of the logits output.
  EXPECT_NEAR(loss->element_as_double(0), cross_entropy(*logits, {0, 1, 2, 3, 4, 5, 6, 9}), 1e-5);
}

TEST_F(RunCliTest, WritesIntoTheCurrentDirectoryByDefault) {
  CliResult r = ampc(mlp() + mlp_inputs(), dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("loss f32[] loss.npy\n"));
  EXPECT_TRUE(fs::exists(path("loss.npy")));
  EXPECT_TRUE(fs::exists(path("logits.npy")));
}

TEST_F(RunCliTest, BindsInputsFromAnNpzAndInputFlagsOverrideIt) {
  std::map<std::string, Tensor> arrays = {
      {"x", Tensor(TensorType{DType::kF32, {8, 64}})},
      {"label", Tensor::from_i64({8}, {0, 1, 2, 3, 4, 5, 6, 9})},
      {"expected_loss", Tensor::from_f32({}, {0})}};
  ASSERT_TRUE(runtime::write_npz(path("in.npz"), arrays).ok());
  CliResult r = ampc(mlp() + " --inputs " + path("in.npz") + " --output-dir " + path("a"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("array 'expected_loss' is not an input of the model; ignored"));
  r = ampc(mlp() + " --inputs " + path("in.npz") + " --input x=" + path("x.npy") +
           " --output-dir " + path("b"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // x of zeros gives logits equal across rows (the last layer's bias); x.npy does not.
  absl::StatusOr<Tensor> zeros = runtime::read_npy(path("a/logits.npy"));
  absl::StatusOr<Tensor> given = runtime::read_npy(path("b/logits.npy"));
  ASSERT_TRUE(zeros.ok() && given.ok());
  EXPECT_EQ(zeros->element_as_double(0), zeros->element_as_double(10));
  EXPECT_NE(given->element_as_double(0), given->element_as_double(10));
}

// An export with a dynamic batch runs on the batch its inputs have, as the static file does (bit
// for bit: the same shapes, the same kernels); one name is one size, so a label of another batch
// than x's is refused, naming it.
TEST_F(RunCliTest, ADynamicBatchTakesTheInputsSize) {
  const std::string dynamic = testing::source_path("tests/data/dynamic/mlp_batch.onnx");
  CliResult r = ampc(mlp() + mlp_inputs() + " --output-dir " + path("static"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = ampc(dynamic + mlp_inputs() + " --output-dir " + path("dynamic"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* output : {"loss.npy", "logits.npy"}) {
    EXPECT_EQ(testing::read_file(path(std::string("dynamic/") + output)),
              testing::read_file(path(std::string("static/") + output)))
        << output;
  }
  save("label4.npy", Tensor::from_i64({4}, {0, 1, 2, 3}));
  EXPECT_THAT(
      expect_error(dynamic + " --input x=" + path("x.npy") +
                   " --input label=" + path("label4.npy")),
      HasSubstr("input 'label' from " + path("label4.npy") + ": expected i64[8], given i64[4]"));
  // --dim wins over the data, whose shape then does not fit.
  EXPECT_THAT(expect_error(dynamic + mlp_inputs() + " --dim batch=2"),
              HasSubstr("expected i64[2], given i64[8]"));
}

TEST_F(RunCliTest, MissingInputIsNamedWithTheExpectedInputs) {
  const std::string err = expect_error(mlp() + " --input x=" + path("x.npy"));
  EXPECT_THAT(err, HasSubstr("missing input 'label' (i64[8])"));
  EXPECT_THAT(err, HasSubstr("x: f32[8,64], label: i64[8]"));
}

TEST_F(RunCliTest, UnknownInputNameIsAnError) {
  const std::string err = expect_error(mlp() + mlp_inputs() + " --input images=" + path("x.npy"));
  EXPECT_THAT(err, HasSubstr("--input names 'images', which is not an input"));
  EXPECT_THAT(err, HasSubstr("x: f32[8,64], label: i64[8]"));
  EXPECT_THAT(expect_error(mlp() + mlp_inputs() + " --input x=" + path("x.npy")),
              HasSubstr("--input 'x' is given twice"));
}

TEST_F(RunCliTest, DtypeOrShapeMismatchNamesInputFileAndBothTypes) {
  save("x64.npy", Tensor(TensorType{DType::kF64, {8, 64}}));
  save("x_short.npy", Tensor(TensorType{DType::kF32, {8, 63}}));
  std::string err =
      expect_error(mlp() + " --input label=" + path("label.npy") + " --input x=" + path("x64.npy"));
  EXPECT_THAT(err, HasSubstr("input 'x' from " + path("x64.npy") +
                             ": expected f32[8,64], given f64[8,64]"));
  err = expect_error(mlp() + " --input label=" + path("label.npy") +
                     " --input x=" + path("x_short.npy"));
  EXPECT_THAT(err, HasSubstr("input 'x' from " + path("x_short.npy") +
                             ": expected f32[8,64], given f32[8,63]"));
}

TEST_F(RunCliTest, MalformedOrMissingNpyNamesTheFile) {
  write("junk.npy", "definitely not numpy");
  std::string err = expect_error(mlp() + " --input label=" + path("label.npy") +
                                 " --input x=" + path("junk.npy"));
  EXPECT_THAT(err, HasSubstr(path("junk.npy") + ": not a .npy file"));
  const std::string bytes = testing::read_file(path("x.npy"));
  write("cut.npy", bytes.substr(0, bytes.size() - 5));
  err =
      expect_error(mlp() + " --input label=" + path("label.npy") + " --input x=" + path("cut.npy"));
  EXPECT_THAT(err, HasSubstr(path("cut.npy") + ": the array data is truncated"));
  err = expect_error(mlp() + " --input label=" + path("label.npy") +
                     " --input x=" + path("nope.npy"));
  EXPECT_THAT(err, HasSubstr("nope.npy"));
  write("junk.npz", "not a zip");
  EXPECT_THAT(expect_error(mlp() + " --inputs " + path("junk.npz")), HasSubstr("junk.npz"));
  // A device never ends: refused before any read (it once ran out of memory).
  EXPECT_THAT(expect_error(mlp() + " --inputs /dev/zero"),
              HasSubstr("cannot read '/dev/zero': it is a device"));
  EXPECT_THAT(expect_error(mlp() + " --input label=" + path("label.npy") + " --input x=/dev/zero"),
              HasSubstr("cannot read '/dev/zero': it is a device"));
}

// A plan whose memory cannot be had (an Expand to 2^40 f32, 4 TiB) is an error at load that
// names the arena and the bytes, not an abort.
TEST_F(RunCliTest, AnArenaThatCannotBeAllocatedIsNamedWithItsBytes) {
  testing::ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT, {"1"});
  m.initializer("shape", onnx::TensorProto::INT64, {2}).add_int64_data(int64_t{1} << 20);
  m.graph().mutable_initializer(0)->add_int64_data(int64_t{1} << 20);
  m.node("Expand", {"x", "shape"}, {"y"}, "expand");
  m.node("ReduceMax", {"y"}, {"z"}, "max");
  m.output("z");
  write("huge.onnx", m.bytes());
  save("one.npy", Tensor::from_f32({1}, {1.0f}));
  const std::string err = expect_error(path("huge.onnx") + " --input x=" + path("one.npy"));
  // 2^42 bytes and what little the plan adds for x and z.
  EXPECT_THAT(err, HasSubstr("cannot allocate 43980465"));
  EXPECT_THAT(err, HasSubstr("bytes for the activations arena"));
}

TEST_F(RunCliTest, BadFlagsAreUsageErrors) {
  EXPECT_EQ(ampc(mlp() + " --input x").exit_code, 2);
  EXPECT_EQ(ampc(mlp() + " --input =" + path("x.npy")).exit_code, 2);
  EXPECT_EQ(ampc("--input x=" + path("x.npy")).exit_code, 2);  // no model
  EXPECT_EQ(ampc(mlp() + " --frobnicate").exit_code, 2);
  EXPECT_THAT(expect_error(mlp() + mlp_inputs() + " --shape x:8xfoo"), HasSubstr("x:8xfoo"));
}

// Without a usable GPU (this machine, CI), --device cuda names the CUDA reason, exits 1 and writes
// nothing; with one it runs the mlp like the CPU (tests/gpu check the numbers).
TEST_F(RunCliTest, DeviceCudaWithoutAGpuIsAClearError) {
  if (testing::cuda_device_present()) GTEST_SKIP() << "a GPU is present";
  const std::string err = expect_error(mlp() + mlp_inputs() + " --device cuda");
  EXPECT_THAT(
      err, ::testing::AnyOf(HasSubstr("no usable CUDA device"), HasSubstr("built without CUDA")));
}

TEST_F(RunCliTest, DeviceFlagsAreChecked) {
  EXPECT_EQ(ampc(mlp() + mlp_inputs() + " --device tpu").exit_code, 2);
  // TF32 only exists on the GPU: on the CPU the flag would do nothing.
  EXPECT_THAT(expect_error(mlp() + mlp_inputs() + " --allow-tf32"), HasSubstr("--allow-tf32"));
  CliResult cpu = ampc(mlp() + mlp_inputs() + " --device cpu --output-dir " + path("out"));
  EXPECT_EQ(cpu.exit_code, 0) << cpu.err;
}

// A model whose outputs are Relu(in) under each of `output_names`.
std::string relu_model(const std::vector<std::string>& output_names) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("g");
  onnx::ValueInfoProto* input = graph->add_input();
  input->set_name("in");
  auto* tensor = input->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  tensor->mutable_shape()->add_dim()->set_dim_value(3);
  for (const std::string& name : output_names) {
    onnx::NodeProto* node = graph->add_node();
    node->set_op_type("Relu");
    node->add_input("in");
    node->add_output(name);
    graph->add_output()->set_name(name);
  }
  return model.SerializeAsString();
}

TEST_F(RunCliTest, OutputNamesBecomeSafeDistinctFileNames) {
  write("relu.onnx", relu_model({"a/b:0", "a_b_0", ".."}));
  save("in.npy", Tensor::from_f32({3}, {-1, 0, 2}));
  CliResult r =
      ampc(path("relu.onnx") + " --input in=" + path("in.npy") + " --output-dir " + path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "a/b:0 f32[3] " + path("out/a_b_0.npy") + "\na_b_0 f32[3] " +
                       path("out/a_b_0_2.npy") + "\n.. f32[3] " + path("out/_...npy") + "\n");
  absl::StatusOr<Tensor> relu = runtime::read_npy(path("out/a_b_0_2.npy"));
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_EQ(*relu, Tensor::from_f32({3}, {0, 0, 2}));
}

// A run that fails while writing its outputs (a file name the file system refuses as too long)
// leaves nothing behind: not the outputs written before it, nor the --output-dir folders it made.
TEST_F(RunCliTest, AFailedWriteRemovesTheOutputFolderItMade) {
  write("relu.onnx", relu_model({"first", std::string(300, 'n')}));
  save("in.npy", Tensor::from_f32({3}, {-1, 0, 2}));
  fs::create_directories(path("kept"));
  for (const std::string dir : {"out", "kept/new/deeper", "kept"}) {
    CliResult r =
        ampc(path("relu.onnx") + " --input in=" + path("in.npy") + " --output-dir " + path(dir));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: "));
    EXPECT_THAT(r.err, HasSubstr("File name too long"));
    EXPECT_FALSE(fs::exists(path(dir + "/first.npy"))) << dir;
  }
  EXPECT_FALSE(fs::exists(path("out")));
  EXPECT_FALSE(fs::exists(path("kept/new")));
  EXPECT_TRUE(fs::is_directory(path("kept")));  // it was there before
}

}  // namespace
}  // namespace ampc
