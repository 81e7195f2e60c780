// `ampc compile --optimizer` and `ampc train`, end to end: a compiled mlp trains (its loss falls
// and every step is logged), a resumed or interrupted run continues bit for bit, the schedules
// give the documented rates, the exported model runs without labels; bad data, flags and models
// give exit 1 (2 for usage errors) with a message naming the problem, and write nothing.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/npy.h"
#include "runtime/training_session.h"
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
using train_cli::LogLine;
using train_cli::read_log;
using train_cli::TrainCliTest;

// The step's `lr` input is f32 and the log records the rate the step used, so a logged rate is
// the schedule's rate rounded to f32 (printed as the shortest text that reads back as that f32).
constexpr double kF32RelativeTolerance = 1e-7;

TEST_F(TrainCliTest, TrainingLowersTheLossAndLogsEveryStep) {
  // Compiled at another rate: --lr of `ampc train` wins.
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.5");
  CliResult r = train(trained, mlp_data() + " --steps 30 --lr 0.01 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("log.jsonl"));
  ASSERT_EQ(log.size(), 30u);
  for (int64_t i = 0; i < 30; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(log[i].step, i + 1);
    EXPECT_TRUE(std::isfinite(log[i].loss));
    EXPECT_GT(log[i].grad_norm, 0);
    EXPECT_NEAR(log[i].lr, 0.01, 0.01 * kF32RelativeTolerance);
  }
  // Ten classes: the untrained loss is near ln 10 = 2.30; after 30 AdamW steps the last ten
  // average about 1.64 (0.3 is half the observed drop).
  EXPECT_NEAR(log[0].loss, std::log(10.0), 0.2);
  double last_ten = 0;
  for (int64_t i = 20; i < 30; ++i) last_ten += log[i].loss / 10;
  EXPECT_LT(last_ten, log[0].loss - 0.3);
}

TEST_F(TrainCliTest, WithoutLrTrainsAtTheCompiledRate) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.0625 --momentum 0.9");
  CliResult r = train(trained, mlp_data() + " --steps 2 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("log.jsonl"));
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].lr, 0.0625);  // a power of two: exact in f32
  EXPECT_EQ(log[1].lr, 0.0625);
}

TEST_F(TrainCliTest, ResumeIsBitIdenticalForTheMlpWithSgdMomentum) {
  expect_resume_is_bit_identical("mlp", "--optimizer sgd --lr 0.05 --momentum 0.9");
}

// The cnn's state includes BatchNorm running statistics and the AdamW moments and step count.
TEST_F(TrainCliTest, ResumeIsBitIdenticalForTheCnnWithAdamW) {
  expect_resume_is_bit_identical("cnn", "--optimizer adamw --lr 0.003 --weight-decay 0.01");
}

TEST_F(TrainCliTest, WarmupRisesLinearlyThenHolds) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  CliResult r = train(trained, mlp_data() + " --steps 6 --lr 0.01 --schedule warmup " +
                                   "--warmup-steps 4 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("log.jsonl"));
  ASSERT_EQ(log.size(), 6u);
  const std::vector<double> expected = {0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(log[i].lr, expected[i], expected[i] * kF32RelativeTolerance) << "step " << i + 1;
  }
}

TEST_F(TrainCliTest, CosineWarmsUpThenDecaysToMinLr) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  CliResult r = train(trained, mlp_data() + " --steps 10 --lr 0.01 --schedule cosine " +
                                   "--warmup-steps 2 --min-lr 0.001 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("log.jsonl"));
  ASSERT_EQ(log.size(), 10u);
  const double lr = 0.01, min_lr = 0.001;
  const int64_t warmup = 2, total = 10;
  for (int64_t s = 0; s < total; ++s) {
    const double expected =
        s < warmup ? lr * static_cast<double>(s + 1) / warmup
                   : min_lr + (lr - min_lr) / 2 *
                                  (1 + std::cos(std::numbers::pi * static_cast<double>(s - warmup) /
                                                static_cast<double>(total - warmup)));
    EXPECT_NEAR(log[s].lr, expected, expected * kF32RelativeTolerance) << "step " << s + 1;
  }
  // The decay is strict: the last step's rate is well below the peak and above the floor.
  EXPECT_LT(log[9].lr, 0.0015);
  EXPECT_GT(log[9].lr, min_lr);
}

TEST_F(TrainCliTest, ExportedModelRunsWithoutLabelsAndGivesTheOutputsOfEvaluate) {
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.01");
  const std::string exported = path("mlp.trained.onnx");
  CliResult r = train(
      trained, mlp_data() + " --steps 5 --export " + exported + " --checkpoint " + path("ck"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("wrote the trained inference model " + exported));

  absl::StatusOr<std::map<std::string, Tensor>> eval = runtime::read_npz(data("mlp.eval.npz"));
  ASSERT_TRUE(eval.ok()) << eval.status();
  save_npz("x.npz", {{"x", batch_of(eval->at("x"), 0)}});
  r = testing::run_ampc("run " + exported + " --inputs " + path("x.npz") + " --output-dir " +
                        path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "logits f32[8,10] " + path("out/logits.npy") + "\n");
  EXPECT_FALSE(fs::exists(path("out/loss.npy")));
  absl::StatusOr<Tensor> logits = runtime::read_npy(path("out/logits.npy"));
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->type(), (TensorType{DType::kF32, {8, 10}}));

  // `ampc run` on the export gives, bit for bit, what the TrainingSession's evaluate gives with
  // the trained state (from the run's checkpoint).
  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::load(trained);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->load_checkpoint(path("ck/checkpoint.safetensors")).ok());
  absl::StatusOr<std::map<std::string, Tensor>> evaluated = (*session)->evaluate(
      {{"x", batch_of(eval->at("x"), 0)}, {"label", batch_of(eval->at("label"), 0)}});
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(*logits, evaluated->at("logits"));

  // The export holds the trained parameters: the untrained model's logits differ.
  save_npz("xl.npz",
           {{"x", batch_of(eval->at("x"), 0)}, {"label", batch_of(eval->at("label"), 0)}});
  r = testing::run_ampc("run " + model("mlp") + " --inputs " + path("xl.npz") + " --output-dir " +
                        path("untrained"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Tensor> untrained = runtime::read_npy(path("untrained/logits.npy"));
  ASSERT_TRUE(untrained.ok()) << untrained.status();
  EXPECT_NE(*logits, *untrained);
}

// --export-loss keeps the loss and the labels, so `ampc run` evaluates the trained model's loss:
// the value TrainingSession::evaluate gives with the trained state, bit for bit (the zoo's tests
// compare it with PyTorch's trained models).
TEST_F(TrainCliTest, ExportLossKeepsTheLossForAmpcRun) {
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.01");
  const std::string exported = path("mlp.with_loss.onnx");
  CliResult r = train(trained, mlp_data() + " --steps 5 --export " + exported +
                                   " --export-loss --checkpoint " + path("ck"));
  ASSERT_EQ(r.exit_code, 0) << r.err;

  absl::StatusOr<std::map<std::string, Tensor>> eval = runtime::read_npz(data("mlp.eval.npz"));
  ASSERT_TRUE(eval.ok()) << eval.status();
  const std::map<std::string, Tensor> batch = {{"x", batch_of(eval->at("x"), 0)},
                                               {"label", batch_of(eval->at("label"), 0)}};
  save_npz("xl.npz", batch);
  r = testing::run_ampc("run " + exported + " --inputs " + path("xl.npz") + " --output-dir " +
                        path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<Tensor> loss = runtime::read_npy(path("out/loss.npy"));
  ASSERT_TRUE(loss.ok()) << loss.status();

  absl::StatusOr<std::unique_ptr<runtime::TrainingSession>> session =
      runtime::TrainingSession::load(trained);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE((*session)->load_checkpoint(path("ck/checkpoint.safetensors")).ok());
  absl::StatusOr<std::map<std::string, Tensor>> evaluated = (*session)->evaluate(batch);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(*loss, evaluated->at("loss"));

  r = train(trained, mlp_data() + " --steps 1 --export-loss");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--export-loss requires --export"));
}

// --eval-data reports the mean loss and, for an output of class scores [N, C] with an integer
// label input [N], the accuracy over every held-out sample.
TEST_F(TrainCliTest, EvalDataReportsLossAndAccuracy) {
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.003");
  CliResult r = train(trained, mlp_data() + " --steps 100 --eval-data " + data("mlp.eval.npz"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: eval loss "));
  std::smatch match;
  const std::regex accuracy(R"(eval accuracy of logits ([0-9.]+) \(([0-9]+) of 192\))");
  ASSERT_TRUE(std::regex_search(r.err, match, accuracy)) << r.err;
  // 24 batches of 8 held-out digits; after 100 steps far better than chance (0.1).
  EXPECT_GT(std::stod(match[1]), 0.5);
  EXPECT_NEAR(std::stod(match[1]), std::stod(match[2]) / 192.0, 1e-4);
}

// An eval batch that fails (a label out of range) or gives a NaN loss fails the command after
// training, naming --eval-data's file and the batch; the checkpoint and the exported model are
// written first, so the training is not lost.
TEST_F(TrainCliTest, AFailingEvalBatchIsNamedAfterTheTrainedModelIsWritten) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  std::map<std::string, Tensor> label_range = small_mlp_data();
  label_range.at("label").set_element(2 * 8 + 3, 10.0);  // batch 2: class 10 of 10
  save_npz("label_range.npz", label_range);
  std::map<std::string, Tensor> nan = small_mlp_data();
  nan.at("x").set_element(3 * 8 * 64 + 7, std::nan(""));  // batch 3
  save_npz("nan.npz", nan);
  const struct {
    std::string file;
    std::string message;
  } cases[] = {
      {"label_range.npz", "--eval-data '" + path("label_range.npz") + "' batch 2: "},
      {"nan.npz", "--eval-data '" + path("nan.npz") +
                      "': 1 of its 4 batches give a non-finite output (batch 3: loss is NaN)"},
  };
  for (const auto& c : cases) {
    std::filesystem::remove_all(path("ckpt"));
    std::filesystem::remove(path("export.onnx"));
    CliResult r =
        train(trained, mlp_data() + " --steps 2 --eval-data " + path(c.file) + " --checkpoint " +
                           path("ckpt") + " --export " + path("export.onnx"));
    EXPECT_EQ(r.exit_code, 1) << c.file;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << r.err;
    EXPECT_TRUE(std::filesystem::exists(path("ckpt/checkpoint.safetensors"))) << c.file;
    EXPECT_TRUE(std::filesystem::exists(path("export.onnx"))) << c.file;
  }
}

// A rate of 1e6 blows the mlp up within a few steps: unchecked, training goes on with
// non-finite losses (logged as null); --check-numerics stops at the first node that writes an
// inf or NaN and names it, with its inputs' ranges.
TEST_F(TrainCliTest, CheckNumericsStopsAtTheFirstNonFiniteValue) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 1e6");
  // Without it, the first non-finite loss stops training too, naming the step and batch.
  CliResult r = train(trained, mlp_data() + " --steps 20 --log " + path("plain.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex("ampc: error: step [0-9]+ \\(batch [0-9]+\\): the "
                                              "loss is (NaN|inf|-inf) \\(NaN or inf in the data"));
  r = train(trained, mlp_data() + " --steps 20 --check-numerics");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, ::testing::ContainsRegex("ampc: error: step [0-9]+ \\(batch [0-9]+\\): "
                                              "--check-numerics: node '[^']+' \\([A-Za-z]+\\) "
                                              "wrote (inf|NaN) to output [0-9]+ %"));
  EXPECT_THAT(r.err, HasSubstr("its float inputs: %"));
}

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
      {"no_batch_axis", {{"x", batch_of(x, 0)}, {"label", label}}, {"array 'x' is f32[8,64]"}},
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
  EXPECT_THAT(expect_train_error(trained, steps + " --allow-tf32"), HasSubstr("--allow-tf32"));
  // Without a usable GPU (this machine, CI), --device cuda names the CUDA reason before any step.
  if (!testing::cuda_device_present()) {
    EXPECT_THAT(
        expect_train_error(trained, steps + " --device cuda"),
        ::testing::AnyOf(HasSubstr("no usable CUDA device"), HasSubstr("built without CUDA")));
  }
}

// --log-every N reads the step figures from the device every N steps: the log is the one reading
// after every step writes, record for record, whatever N and wherever the reads fall (a
// checkpoint and the last step read too). A diverged step still ends the run at that step.
TEST_F(TrainCliTest, LogEveryReadsLessOftenAndLogsTheSameRecords) {
  const std::string trained = compile("mlp", "--optimizer sgd --precision fp16 --lr 0.01");
  CliResult r = train(trained, mlp_data() + " --steps 11 --log-every 1 --log " + path("one.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string every : {"4", "20"}) {
    r = train(trained, mlp_data() + " --steps 11 --checkpoint-every 3 --checkpoint " +
                           path("ckpt" + every) + " --log-every " + every + " --log " +
                           path(every + ".jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(read_file(path(every + ".jsonl")), read_file(path("one.jsonl"))) << every;
  }
  EXPECT_EQ(read_log(path("one.jsonl")).size(), 11u);

  std::map<std::string, Tensor> arrays = small_mlp_data();
  arrays.at("x").set_element(1 * 8 * 64 + 5, std::nan(""));  // batch 1: step 2
  save_npz("nan.npz", arrays);
  const std::string f32 = compile("mlp", "--optimizer adamw");
  r = train(f32,
            " --data " + path("nan.npz") + " --steps 9 --log-every 5 --log " + path("nan.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: error: step 2 (batch 1): the loss is NaN"));
  // Steps 1 and 2 are logged (2 with a null loss); 3 to 5 ran before it was read, unlogged.
  const std::string log = read_file(path("nan.jsonl"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2) << log;
  EXPECT_THAT(log, HasSubstr(R"({"step": 2, "loss": null)"));
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

// SIGINT stops training after the current step, saves a checkpoint and exits 130; resuming from
// it ends where an uninterrupted run of as many steps ends, byte for byte. SIGHUP (a closed
// terminal) and SIGTERM do the same, exiting 128 + the signal's number.
TEST_F(TrainCliTest, InterruptSavesACheckpointToResumeFrom) {
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.003");
  // Starts training in the background (bounded by `timeout`), sends `signal` once its first step
  // is logged (bounded too: 20 s) and returns its exit status; stderr goes to train.err.
  auto interrupt_training = [&](const std::string& args, const std::string& log,
                                const std::string& signal) {
    const std::string script = "timeout -s KILL 60 " + std::string(AMPC_BINARY) + " train " +
                               trained + args + " --steps 1000000 --progress none --log " + log +
                               " 2>" + path("train.err") + " & pid=$!; i=0; while [ ! -s " + log +
                               " ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; kill -" +
                               signal + " $pid; wait $pid; echo $?";
    std::string out, err;
    EXPECT_EQ(testing::run_command("sh -c '" + script + "'", &out, &err), 0) << err;
    return out;
  };
  for (const auto& [signal, status] :
       {std::pair<std::string, std::string>{"HUP", "129\n"}, {"TERM", "143\n"}}) {
    const std::string dir = path("ckpt_" + signal);
    const std::string out =
        interrupt_training(mlp_data() + " --checkpoint " + dir, path(signal + ".jsonl"), signal);
    EXPECT_EQ(out, status) << read_file(path("train.err"));
    EXPECT_THAT(read_file(path("train.err")), HasSubstr("interrupted by SIG" + signal));
    EXPECT_TRUE(fs::exists(dir + "/checkpoint.safetensors")) << signal;
  }

  const std::string log = path("log.jsonl");
  const std::string out =
      interrupt_training(mlp_data() + " --checkpoint " + path("ckpt"), log, "INT");
  const std::string train_err = read_file(path("train.err"));
  ASSERT_EQ(out, "130\n") << train_err;
  const std::vector<LogLine> lines = read_log(log);
  ASSERT_GE(lines.size(), 1u);
  const int64_t done = static_cast<int64_t>(lines.size());
  EXPECT_THAT(train_err, HasSubstr("interrupted by SIGINT after step " + std::to_string(done) +
                                   "; saved " + path("ckpt/checkpoint.safetensors")));
  ASSERT_TRUE(fs::exists(path("ckpt/checkpoint.safetensors")));

  const std::string total = std::to_string(done + 2);
  CliResult r = train(trained, mlp_data() + " --steps " + total + " --resume --checkpoint " +
                                   path("ckpt") + " --log " + log);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("after step " + std::to_string(done)));
  const std::vector<LogLine> resumed = read_log(log);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(done + 2));
  for (int64_t i = 0; i < done + 2; ++i) EXPECT_EQ(resumed[i].step, i + 1);

  r = train(trained, mlp_data() + " --steps " + total + " --checkpoint " + path("straight") +
                         " --log " + path("straight.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(read_file(path("ckpt/checkpoint.safetensors")) ==
              read_file(path("straight/checkpoint.safetensors")));
  EXPECT_EQ(read_file(log), read_file(path("straight.jsonl")));
}

// tiny_gpt has ops whose attributes its opset takes as inputs (Split's split), in both the eval
// graph and the training step; the training model must load back.
// With --accumulate K, step i reads batches iK .. iK+K-1 and logs their mean loss: at a rate
// too small to move the weights (1e-30), step i's loss is the mean of the losses a model without
// accumulation reports for each of those batches alone.
TEST_F(TrainCliTest, AccumulatingStepsReadKBatchesAndLogTheirMeanLoss) {
  const std::string accumulating = compile("mlp", "--optimizer sgd --accumulate 2");
  const std::map<std::string, Tensor> arrays = small_mlp_data();
  save_npz("four.npz", arrays);
  CliResult r = train(accumulating, " --data " + path("four.npz") + " --steps 2 --lr 1e-30 --log " +
                                        path("acc.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("acc.jsonl"));
  ASSERT_EQ(log.size(), 2u);
  const std::string plain = compile("mlp", "--optimizer sgd");  // over the accumulating model
  std::vector<double> alone;
  for (int64_t b = 0; b < 4; ++b) {
    const std::string one = path("one" + std::to_string(b) + ".npz");
    ASSERT_TRUE(runtime::write_npz(one, {{"x", first_batches(arrays.at("x"), 1, b)},
                                         {"label", first_batches(arrays.at("label"), 1, b)}})
                    .ok());
    r = train(plain, " --data " + one + " --steps 1 --lr 1e-30 --log " + path("one.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<LogLine> one_log = read_log(path("one.jsonl"));
    ASSERT_EQ(one_log.size(), 1u);
    alone.push_back(one_log[0].loss);
  }
  EXPECT_NEAR(log[0].loss, (alone[0] + alone[1]) / 2, 1e-6);
  EXPECT_NEAR(log[1].loss, (alone[2] + alone[3]) / 2, 1e-6);
  EXPECT_NE(alone[0], alone[2]);  // the batches differ, so the check above can fail
}

TEST_F(TrainCliTest, ResumeIsBitIdenticalWithAccumulation) {
  expect_resume_is_bit_identical("mlp", "--optimizer adamw --accumulate 3 --precision fp16");
}

TEST_F(TrainCliTest, CompiledTinyGptLoadsAndTrains) {
  const std::string trained = compile("tiny_gpt", "--optimizer adamw --lr 0.003");
  CliResult r = train(
      trained, " --data " + data("tiny_gpt.train.npz") + " --steps 2 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<LogLine> log = read_log(path("log.jsonl"));
  ASSERT_EQ(log.size(), 2u);
  // 64 characters: the untrained loss is near ln 64 = 4.16.
  EXPECT_NEAR(log[0].loss, std::log(64.0), 1.0);
}

}  // namespace
}  // namespace ampc
