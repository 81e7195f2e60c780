// `ampc train` when things go wrong: a non-finite loss, a loss scale that cannot go lower, an
// output path that cannot be used, a full disk, a run killed between checkpoints or in a save;
// and the loss-scaling flags and --check-numerics under loss scaling. Each case asserts the exit
// code, that the message names the cause, and what was (not) written (docs/reliability.md).
#include <sys/mount.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/tools/train_cli_test_util.h"

namespace ampc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using testing::CliResult;
using testing::read_file;
using train_cli::TrainCliTest;

// small_mlp_data()'s arrays with a NaN in every batch of x [4, 8, 64]: every step overflows.
std::map<std::string, Tensor> with_nan_in_every_batch(std::map<std::string, Tensor> arrays) {
  for (int64_t b = 0; b < 4; ++b) arrays.at("x").set_element(b * 8 * 64, std::nan(""));
  return arrays;
}

// --scale-* flags shape fp16's default dynamic scaling without --loss-scale dynamic: the first
// logged step uses --scale-init.
TEST_F(TrainCliTest, ScaleFlagsApplyToFp16sDefaultLossScaling) {
  const std::string trained =
      compile("mlp", "--optimizer sgd --lr 0.01 --precision fp16 --scale-init 1024");
  CliResult r = train(trained, mlp_data() + " --steps 1 --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(read_file(path("log.jsonl")), HasSubstr("\"loss_scale\": 1024"));
}

// With loss scaling, --check-numerics lets the scaler skip what it handles: a NaN batch is a
// skipped step, logged as such, and training goes on.
TEST_F(TrainCliTest, CheckNumericsLetsTheLossScalerSkipWhatItHandles) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.01 --precision fp16");
  std::map<std::string, Tensor> arrays = small_mlp_data();
  arrays.at("x").set_element(1 * 8 * 64 + 3, std::nan(""));  // batch 1: step 2
  save_npz("nan.npz", arrays);
  CliResult r = train(trained, " --data " + path("nan.npz") + " --steps 4 --check-numerics --log " +
                                   path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: 1 steps skipped on overflow"));
  std::istringstream log(read_file(path("log.jsonl")));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(log, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0]["found_inf"], false);
  EXPECT_EQ(records[1]["found_inf"], true);
  EXPECT_EQ(records[1]["skipped"], 1);
  EXPECT_EQ(records[3]["found_inf"], false);
}

// NaN in f32 training data: the first step that reads it stops training (exit 1, the step and
// batch named), and the checkpoint of the step before is kept, byte for byte.
TEST_F(TrainCliTest, NonFiniteLossStopsTrainingAndKeepsTheLastGoodCheckpoint) {
  const std::string trained = compile("mlp", "--optimizer adamw --lr 0.003");
  std::map<std::string, Tensor> arrays = small_mlp_data();
  Tensor& x = arrays.at("x");  // [4, 8, 64]: poison batch 2
  x.set_element(2 * 8 * 64 + 5, std::nan(""));
  save_npz("nan.npz", arrays);
  CliResult r =
      train(trained, " --data " + path("nan.npz") + " --steps 4 --checkpoint-every 1" +
                         " --checkpoint " + path("ckpt") + " --export " + path("export.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: error: step 3 (batch 2): the loss is NaN"));
  EXPECT_THAT(r.err, HasSubstr(path("ckpt/checkpoint.safetensors") + " is kept as it was"));
  EXPECT_FALSE(fs::exists(path("export.onnx")));
  // The same two steps without the poisoned batch end at the same checkpoint.
  r = train(trained, " --data " + path("nan.npz") + " --steps 2 --checkpoint " + path("two"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(read_file(path("ckpt/checkpoint.safetensors")) ==
              read_file(path("two/checkpoint.safetensors")));
}

// With fp16 loss scaling a non-finite step is skipped; 50 in a row stop training.
TEST_F(TrainCliTest, FiftySkippedStepsInARowStopFp16Training) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.01 --precision fp16");
  save_npz("nan.npz", with_nan_in_every_batch(small_mlp_data()));
  CliResult r =
      train(trained, " --data " + path("nan.npz") + " --steps 200 --log " + path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: error: step 50 (batch 1): steps 1 to 50 all overflowed and "
                               "were skipped: the loss or its gradients are not finite"));
  const std::string log = read_file(path("log.jsonl"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 50);  // one record per step run
}

// An overflow with the scale already at --scale-min stops training: 4 -> 2 -> 1, then step 3
// overflows at 1.
TEST_F(TrainCliTest, AnOverflowAtTheSmallestLossScaleStopsTraining) {
  const std::string trained =
      compile("mlp", "--optimizer sgd --lr 0.01 --precision fp16 --scale-init 4 --scale-min 1");
  save_npz("nan.npz", with_nan_in_every_batch(small_mlp_data()));
  CliResult r =
      train(trained, " --data " + path("nan.npz") + " --steps 20 --log " + path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ampc: error: step 3 (batch 2): it overflowed with the loss scale "
                               "already at its minimum (--scale-min 1)"));
  EXPECT_THAT(read_file(path("log.jsonl")), HasSubstr("\"loss_scale\": 1, \"found_inf\": true"));
}

// Where training will write is checked before the first step: a checkpoint folder that cannot
// be made, an export into a missing folder, a log that is a device; nothing is written.
TEST_F(TrainCliTest, OutputPathsAreCheckedBeforeTheFirstStep) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  std::ofstream(path("a_file")) << "x";
  CliResult r = train(trained, mlp_data() + " --steps 3 --checkpoint " + path("a_file/ckpt") +
                                   " --log " + path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot use --checkpoint folder '" + path("a_file/ckpt") + "'"));
  r = train(trained, mlp_data() + " --steps 3 --export " + path("missing/out.onnx") + " --log " +
                         path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("cannot write --export '" + path("missing/out.onnx") + "': its folder"));
  r = train(trained, mlp_data() + " --steps 3 --log /dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--log '/dev/full' exists and is not a regular file"));
  EXPECT_FALSE(fs::exists(path("log.jsonl")));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("step 1")));
}

// A run killed between checkpoints has logged steps past its checkpoint; the resume cuts the log
// back to the checkpoint's step, so the log ends as a run never killed: one record per step.
TEST_F(TrainCliTest, ResumeCutsTheLogBackToTheCheckpointsStep) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.05");
  CliResult r = train(trained, mlp_data() + " --steps 6 --log " + path("straight.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = train(trained,
            mlp_data() + " --steps 4 --checkpoint " + path("ckpt") + " --log " + path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // What a kill -9 after step 5 and in the middle of step 6's record leaves.
  const std::string straight = read_file(path("straight.jsonl"));
  std::vector<std::string> records;
  std::istringstream lines(straight);
  for (std::string line; std::getline(lines, line);) records.push_back(line);
  ASSERT_EQ(records.size(), 6u);
  std::ofstream(path("log.jsonl"), std::ios::app) << records[4] << "\n" << records[5].substr(0, 12);
  r = train(trained, mlp_data() + " --steps 6 --resume --checkpoint " + path("ckpt") + " --log " +
                         path("log.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cut --log " + path("log.jsonl") + " back to step 4"));
  EXPECT_EQ(read_file(path("log.jsonl")), straight);
}

// A save killed mid-write leaves .checkpoint.safetensors.XXXXXX; the next start removes it.
TEST_F(TrainCliTest, StaleCheckpointTemporariesAreRemovedAtStart) {
  const std::string trained = compile("mlp", "--optimizer adamw");
  fs::create_directories(path("ckpt"));
  std::ofstream(path("ckpt/.checkpoint.safetensors.Ab12Cd")) << "half a checkpoint";
  std::ofstream(path("ckpt/notes.txt")) << "the user's";
  CliResult r = train(trained, mlp_data() + " --steps 2 --checkpoint " + path("ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("removed " + path("ckpt/.checkpoint.safetensors.Ab12Cd")));
  EXPECT_FALSE(fs::exists(path("ckpt/.checkpoint.safetensors.Ab12Cd")));
  EXPECT_TRUE(fs::exists(path("ckpt/notes.txt")));
  EXPECT_TRUE(fs::exists(path("ckpt/checkpoint.safetensors")));
}

// A small tmpfs (a full disk on demand) mounted for one test, or none where mounting is not
// permitted (not root, or a container without the capability).
class SmallDisk {
 public:
  SmallDisk(const fs::path& dir, int kib) : dir_(dir) {
    fs::create_directories(dir);
    const std::string size = "size=" + std::to_string(kib) + "k";
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, size.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount(dir_.c_str());
  }
  bool mounted() const { return mounted_; }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

// A log on a disk that fills up stops training at the step whose record could not be written,
// keeping the last checkpoint and writing no export; a checkpoint or export folder without room
// for what will be written there is refused before the first step.
TEST_F(TrainCliTest, AFullDiskStopsTrainingAtTheStepOrBeforeTheFirst) {
  SmallDisk disk(path("disk"), 32);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string trained = compile("mlp", "--optimizer adamw");
  const std::string log = path("disk/log.jsonl");
  CliResult r =
      train(trained, mlp_data() + " --steps 5000 --log " + log + " --checkpoint " + path("ckpt") +
                         " --checkpoint-every 10 --export " + path("export.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("writing --log '" + log + "' failed at step "));
  EXPECT_THAT(r.err, HasSubstr("No space left on device (the last checkpoint is kept)"));
  // The records before the failing one are whole (at least 300 of about 80 bytes in 32 KiB).
  const std::string text = read_file(log);
  const size_t last_newline = text.rfind('\n');
  ASSERT_NE(last_newline, std::string::npos);
  std::ofstream(path("whole.jsonl")) << text.substr(0, last_newline + 1);
  EXPECT_GE(train_cli::read_log(path("whole.jsonl")).size(), 300u);
  EXPECT_TRUE(fs::exists(path("ckpt/checkpoint.safetensors")));
  EXPECT_FALSE(fs::exists(path("export.onnx")));
  fs::remove(log);

  // An AdamW checkpoint of the MLP (weights and two moments) needs more than 32 KiB.
  r = train(trained, mlp_data() + " --steps 3 --checkpoint " + path("disk/ckpt") + " --log " +
                         path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the --checkpoint folder '" + path("disk/ckpt") + "' has "));
  EXPECT_THAT(r.err, HasSubstr("bytes free; it needs about "));
  r = train(trained, mlp_data() + " --steps 3 --export " + path("disk/export.onnx") + " --log " +
                         path("log.jsonl"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("the --export folder '" + path("disk") + "' has "));
  EXPECT_FALSE(fs::exists(path("log.jsonl")));
  EXPECT_FALSE(fs::exists(path("disk/export.onnx")));
  EXPECT_FALSE(fs::exists(path("disk/ckpt/checkpoint.safetensors")));
}

// The same write failure where no disk can be mounted: a file-size limit (ulimit -f) makes the
// log's writes fail past 16 KiB (EFBIG), and training stops at that step.
TEST_F(TrainCliTest, ALogWriteThatFailsStopsTrainingAtThatStep) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  const std::string log = path("log.jsonl");
  std::string out, err;
  const int exit_code = testing::run_command(
      "bash -c \"trap '' XFSZ; ulimit -f 16; exec " + std::string(AMPC_BINARY) + " train " +
          trained + " --progress none" + mlp_data() + " --steps 5000 --log " + log + " --export " +
          path("export.onnx") + "\"",
      &out, &err);
  EXPECT_EQ(exit_code, 1) << err;
  EXPECT_THAT(err, HasSubstr("writing --log '" + log + "' failed at step "));
  EXPECT_THAT(err, HasSubstr("File too large"));
  EXPECT_LE(fs::file_size(log), 16u * 1024);
  EXPECT_FALSE(fs::exists(path("export.onnx")));
}

// Data larger than the memory ampc may use is an error naming the file and its bytes, before
// anything is written. The limit is a 4 GB address space (ulimit -v) and the file a 16 GiB
// sparse one; OpenBLAS runs on the calling thread, since its worker threads retry failed
// allocations forever.
TEST_F(TrainCliTest, DataTooLargeForMemoryIsAnErrorNamingItsBytes) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  { std::ofstream big(path("big.npz")); }
  fs::resize_file(path("big.npz"), int64_t{16} << 30);
  std::string out, err;
  const int exit_code = testing::run_command(
      "bash -c \"ulimit -v 4000000; OPENBLAS_NUM_THREADS=1 exec " + std::string(AMPC_BINARY) +
          " train " + trained + " --progress none --data " + path("big.npz") + " --steps 1 --log " +
          path("log.jsonl") + "\"",
      &out, &err);
  EXPECT_EQ(exit_code, 1) << err;
  EXPECT_THAT(err, HasSubstr("cannot read '" + path("big.npz") +
                             "': its 17179869184 bytes do not fit in memory"));
  EXPECT_FALSE(fs::exists(path("log.jsonl")));
}

}  // namespace
}  // namespace ampc
