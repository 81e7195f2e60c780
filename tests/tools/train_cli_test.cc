// `ampc compile --optimizer` and `ampc train`, end to end: a compiled mlp trains (its loss falls
// and every step is logged), a resumed or interrupted run continues bit for bit, the schedules
// give the documented rates, the exported model runs without labels. Bad input:
// train_errors_cli_test.cc.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <regex>
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
