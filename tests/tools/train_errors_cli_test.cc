// `ampc compile --optimizer` and `ampc train` on bad input: bad data arrays, flags, models and
// checkpoints, and outputs that would destroy an input or each other, give exit 1 (2 for usage
// errors) with a message naming the problem, and write nothing.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"
#include "tests/tools/train_cli_test_util.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using testing::CliResult;
using testing::read_file;
using train_cli::batch_of;
using train_cli::first_batches;
using train_cli::TrainCliTest;

TEST_F(TrainCliTest, BadDataArraysAreNamedAndNothingIsWritten) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  const std::map<std::string, Tensor> good = small_mlp_data();
  ASSERT_EQ(good.size(), 2u);
  const Tensor& x = good.at("x");
  const Tensor& label = good.at("label");
  struct Case {
    std::string what;
    std::map<std::string, Tensor> arrays;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"renamed",
       {{"images", x}, {"label", label}},
       {"array 'images' is not an input", "x: f32[8,64]"}},
      {"f64",
       {{"x", Tensor(TensorType{DType::kF64, {4, 8, 64}})}, {"label", label}},
       {"array 'x' is f64[4,8,64]", "f32[N,8,64]"}},
      {"short",
       {{"x", Tensor(TensorType{DType::kF32, {4, 8, 63}})}, {"label", label}},
       {"array 'x' is f32[4,8,63]", "f32[N,8,64]"}},
      {"no_batch_axis",
       {{"x", batch_of(x, 0)}, {"label", label}},
       {"'label' holds 4 batches but 'x' holds 1 batch",
        "an array shaped like its input is one batch: 'x' (f32[8,64])"}},
      {"batch_counts",
       {{"x", x}, {"label", first_batches(label, 3)}},
       {"holds 3 batches", "holds 4"}},
      {"missing", {{"x", x}}, {"has no array 'label'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string file = path(c.what + ".npz");
    ASSERT_TRUE(runtime::write_npz(file, c.arrays).ok());
    const std::string err = expect_train_error(trained, " --data " + file + " --steps 3");
    EXPECT_THAT(err, HasSubstr(file));
    for (const std::string& part : c.message) EXPECT_THAT(err, HasSubstr(part));
  }
  // The same checks guard --eval-data, before any step runs.
  const std::string err =
      expect_train_error(trained, mlp_data() + " --steps 3 --eval-data " + data("cnn.eval.npz"));
  EXPECT_THAT(err, HasSubstr("cnn.eval.npz"));
  EXPECT_THAT(expect_train_error(trained, " --data " + path("nope.npz") + " --steps 3"),
              HasSubstr("nope.npz"));
}

TEST_F(TrainCliTest, BadFlagsAndModelsFailBeforeWritingAnything) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  const std::string steps = mlp_data() + " --steps 5";
  EXPECT_THAT(expect_train_error(trained, steps + " --resume"),
              HasSubstr("there is no checkpoint " + path("ckpt/checkpoint.safetensors")));
  EXPECT_THAT(expect_train_error(trained, steps + " --resume", 1, /*add_checkpoint=*/false),
              HasSubstr("--resume needs --checkpoint DIR"));
  std::string err = expect_train_error(model("mlp"), steps);
  EXPECT_THAT(err, HasSubstr("is not a training model"));
  EXPECT_THAT(err, HasSubstr("--optimizer"));
  EXPECT_THAT(expect_train_error(trained, steps + " --lr -1"), HasSubstr("--lr -1"));
  EXPECT_THAT(expect_train_error(trained, steps + " --lr 1e-50"),
              HasSubstr("--lr 1e-50 rounds to 0 in f32"));
  err = expect_train_error(trained, steps + " --schedule cosine --warmup-steps 5");
  EXPECT_THAT(err, HasSubstr("--schedule cosine"));
  EXPECT_THAT(err, HasSubstr("only 5 steps"));
  EXPECT_THAT(expect_train_error(trained, steps + " --schedule cosine --warmup-steps 9"),
              HasSubstr("--schedule cosine"));
  EXPECT_THAT(expect_train_error(trained, steps + " --schedule warmup"),
              HasSubstr("--warmup-steps"));
  EXPECT_THAT(expect_train_error(trained, steps + " --schedule cosine --lr 0.01 --min-lr 0.02"),
              HasSubstr("--min-lr 0.02 must be in [0, --lr]"));
  // Flags that would do nothing.
  EXPECT_THAT(expect_train_error(trained, steps + " --warmup-steps 2"),
              HasSubstr("--warmup-steps does nothing with --schedule constant"));
  EXPECT_THAT(expect_train_error(trained, steps + " --min-lr 0.001"),
              HasSubstr("--min-lr does nothing with --schedule constant"));
  EXPECT_THAT(expect_train_error(trained, steps + " --schedule warmup --warmup-steps 2 --min-lr 0"),
              HasSubstr("--min-lr does nothing with --schedule warmup"));
  EXPECT_THAT(expect_train_error(trained, steps + " --checkpoint-every 2", 1,
                                 /*add_checkpoint=*/false),
              HasSubstr("--checkpoint-every needs --checkpoint DIR"));
  EXPECT_THAT(expect_train_error(trained, steps + " --comm-timeout 30"),
              HasSubstr("--comm-timeout applies to data-parallel training only"));
  // Usage errors (CLI11): exit 2.
  expect_train_error(trained, mlp_data() + " --steps 0", 2);
  expect_train_error(trained, mlp_data() + " --steps -3", 2);
  expect_train_error(trained, steps + " --schedule linear", 2);
  EXPECT_THAT(expect_train_error(trained, steps + " --checkpoint-every 0", 2),
              HasSubstr("--checkpoint-every: must be an integer >= 1, not '0'"));
  expect_train_error(trained, mlp_data(), 2);  // no --steps
  expect_train_error(trained, steps + " --log-every 0", 2);
  expect_train_error(trained, steps + " --device tpu", 2);
  expect_train_error(trained, steps + " --cuda-graph maybe", 2);
  EXPECT_THAT(expect_train_error(trained, steps + " --cuda-graph on"), HasSubstr("--cuda-graph"));
  // auto, the default, and off run on the cpu (no graph there).
  for (const char* graph : {" --cuda-graph auto", " --cuda-graph off"}) {
    const CliResult r = train(trained, steps + graph);
    EXPECT_EQ(r.exit_code, 0) << graph << ": " << r.err;
  }
  EXPECT_THAT(expect_train_error(trained, steps + " --allow-tf32"), HasSubstr("--allow-tf32"));
  // Without a usable GPU (this machine, CI), --device cuda names the CUDA reason before any step.
  if (!testing::cuda_device_present()) {
    EXPECT_THAT(
        expect_train_error(trained, steps + " --device cuda"),
        ::testing::AnyOf(HasSubstr("no usable CUDA device"), HasSubstr("built without CUDA")));
  }
}

TEST_F(TrainCliTest, ResumeRejectsAnotherModelsCheckpoint) {
  const std::string mlp = compile("mlp", "--optimizer adamw");
  CliResult r = testing::run_ampc("compile " + model("cnn") + " -o " + path("cnn.train.onnx") +
                                  " --optimizer adamw");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(path("cnn.train.onnx"), " --data " + data("cnn.train.npz") + " --steps 1 " +
                                        "--checkpoint " + path("cnn_ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string before = read_file(path("cnn_ckpt/checkpoint.safetensors"));
  const std::string err =
      expect_train_error(mlp, mlp_data() + " --steps 3 --resume --checkpoint " + path("cnn_ckpt"),
                         1, /*add_checkpoint=*/false);
  EXPECT_THAT(err, HasSubstr(path("cnn_ckpt/checkpoint.safetensors")));
  EXPECT_EQ(read_file(path("cnn_ckpt/checkpoint.safetensors")), before);
}

// --steps counts from the first step: a checkpoint already past it would train nothing.
TEST_F(TrainCliTest, ResumeRefusesACheckpointPastSteps) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  CliResult r = train(trained, mlp_data() + " --steps 4 --checkpoint " + path("ckpt4"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string before = read_file(path("ckpt4/checkpoint.safetensors"));
  const std::string err =
      expect_train_error(trained, mlp_data() + " --steps 3 --resume --checkpoint " + path("ckpt4"),
                         1, /*add_checkpoint=*/false);
  EXPECT_THAT(err, HasSubstr("is at step 4, past --steps 3"));
  EXPECT_EQ(read_file(path("ckpt4/checkpoint.safetensors")), before);
}

// An output that is an input, or another output, would destroy it: an error naming both flags,
// before anything is written.
TEST_F(TrainCliTest, AnOutputThatIsAnInputOrAnotherOutputIsAnError) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  const std::string model_bytes = read_file(trained);
  std::filesystem::copy_file(data("mlp.train.npz"), path("d.npz"));
  const std::string data_bytes = read_file(path("d.npz"));
  const std::string run = " --data " + path("d.npz") + " --steps 2";
  const struct {
    std::string flags;
    std::string message;
  } cases[] = {
      {" --log " + path("d.npz"), "--log '" + path("d.npz") + "' is --data '" + path("d.npz")},
      {" --export " + trained, "--export '" + trained + "' is the model '" + trained},
      {" --checkpoint " + path("ck") + " --log " + path("ck/checkpoint.safetensors"),
       "and --checkpoint's file '" + path("ck/checkpoint.safetensors") + "' are one file"},
      {" --log " + path("sub/../out") + " --export " + path("out"), "are one file"},
  };
  for (const auto& c : cases) {
    CliResult r = train(trained, run + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.flags;
    EXPECT_FALSE(std::filesystem::exists(path("out"))) << c.flags;
    EXPECT_FALSE(std::filesystem::exists(path("ck"))) << c.flags;
  }
  EXPECT_EQ(read_file(trained), model_bytes);
  EXPECT_EQ(read_file(path("d.npz")), data_bytes);
}

TEST_F(TrainCliTest, BadTrainingCompileFlagsAreNamedAndWriteNothing) {
  struct Case {
    std::string flags;
    int exit_code;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"--optimizer adamw --lr -0.1", 1, {"--lr -0.1", "out of range"}},
      {"--optimizer adamw --lr 0", 1, {"--lr 0 ", "> 0"}},
      {"--optimizer adam --beta1 1", 1, {"--beta1 1 ", "[0, 1)"}},
      {"--optimizer adamw --beta2 1.5", 1, {"--beta2 1.5", "[0, 1)"}},
      {"--optimizer sgd --momentum 1", 1, {"--momentum 1 ", "[0, 1)"}},
      {"--optimizer adamw --weight-decay -1", 1, {"--weight-decay -1", ">= 0"}},
      {"--optimizer adam --eps 0", 1, {"--eps 0"}},
      {"--optimizer sgd --clip-grad-norm -1", 1, {"--clip-grad-norm -1"}},
      {"--optimizer sgd --nesterov", 1, {"--nesterov", "--momentum"}},
      {"--optimizer adamw --loss logits", 1, {"'logits'", "scalar", "f32[8,10]"}},
      {"--optimizer adamw --loss nosuchoutput", 1, {"'nosuchoutput'", "loss, logits"}},
      {"--optimizer sgd --loss cross-entropy", 1, {"--label-input"}},
      {"--loss logits", 1, {"--optimizer"}},  // training flags without a training compile
      {"--optimizer sgd --accumulate 0", 1, {"--accumulate 0", "[1, 65536]"}},
      {"--optimizer sgd --accumulate 65537", 1, {"--accumulate 65537", "[1, 65536]"}},
      {"--accumulate 2", 1, {"--accumulate", "--optimizer"}},
      {"--optimizer rmsprop", 2, {"rmsprop"}},
      // Flags that would do nothing are errors.
      {"--lr 0.1 --momentum 0.9", 1, {"--lr, --momentum belong to a training compile"}},
      {"--optimizer sgd --beta1 0.8", 1, {"--beta1 does nothing with --optimizer sgd"}},
      {"--optimizer adamw --momentum 0.9 --nesterov",
       1,
       {"--momentum, --nesterov do nothing with --optimizer adamw"}},
      {"--optimizer sgd --scale-init 1024",
       1,
       {"--scale-init does nothing here: this compile has no loss scaling"}},
      {"--optimizer sgd --precision bf16 --scale-growth 4", 1, {"--scale-growth does nothing"}},
      {"--optimizer sgd --precision fp16 --loss-scale none --scale-min 1",
       1,
       {"--scale-min does nothing with --loss-scale none"}},
      {"--optimizer sgd --precision fp16 --loss-scale static:128 --scale-backoff 0.25",
       1,
       {"--scale-backoff does nothing with --loss-scale static:S"}},
      // ... and bad values of those that would act, fp16's default scaling included.
      {"--optimizer sgd --precision fp16 --scale-init nan", 1, {"--scale-init nan"}},
      {"--optimizer sgd --precision fp16 --scale-growth 1", 1, {"--scale-growth 1", "> 1"}},
      {"--optimizer sgd --precision fp16 --scale-backoff 1", 1, {"--scale-backoff 1"}},
      {"--optimizer sgd --precision fp16 --scale-init -4", 1, {"--scale-init -4"}},
  };
  const std::string out = path("out.onnx");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    CliResult r = testing::run_ampc("compile " + model("mlp") + " -o " + out + " " + c.flags);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
    if (c.exit_code == 1) {
      EXPECT_THAT(r.err, HasSubstr("ampc: error: "));
    }
    for (const std::string& part : c.message) EXPECT_THAT(r.err, HasSubstr(part));
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
}  // namespace ampc
