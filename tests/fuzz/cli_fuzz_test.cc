// Fuzz test of the command line, run as a user would run `ampc`: random combinations of the
// flags of `compile`, `train` and `run` with random values (in range, at the edges, out of
// range, not numbers, paths that are folders, devices or missing), and random corruptions of a
// checkpoint that `ampc train --resume` is then given. Whatever the input, ampc must exit 0
// having done the work, 1 with `ampc: error: ...`, or 2 for a command line CLI11 cannot parse;
// never crash, hang, leave a temporary file behind, or change a file it failed to write.
//
// CTest runs it twice: against `ampc`, and against `ampc_asan`, the CLI built under
// AddressSanitizer and UndefinedBehaviorSanitizer (AMPC_FUZZ_BINARY names the binary).
// AMPC_FUZZ_CASES (default 120 per command) and AMPC_FUZZ_SEED replay or widen a run.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using ::testing::HasSubstr;
using testing::read_file;

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string binary() { return env_or("AMPC_FUZZ_BINARY", AMPC_BINARY); }
int cases() { return std::stoi(env_or("AMPC_FUZZ_CASES", "120")); }
uint32_t seed() { return static_cast<uint32_t>(std::stoul(env_or("AMPC_FUZZ_SEED", "20261126"))); }

// `text` as one single-quoted shell word.
std::string quote(const std::string& text) {
  return "'" + absl::StrReplaceAll(text, {{"'", "'\\''"}}) + "'";
}

// Runs the binary under test with `args` (already quoted) in the folder `cwd`, killed after five
// minutes so that a hang fails the test instead of stalling it.
CliResult run_ampc(const std::string& args, const fs::path& cwd) {
  CliResult r;
  r.exit_code = testing::run_command(
      "cd " + quote(cwd.string()) + " && timeout -s KILL 300 " + binary() + " " + args, &r.out,
      &r.err);
  return r;
}

// A flag and the values a case draws from: good ones (which may still clash with the other
// flags drawn) and bad ones. `{case}` stands for the case's own folder and `{fx}` for the
// fixtures; a flag without values is a switch. A flag that `needs` another brings it along.
struct Flag {
  std::string name;
  std::vector<std::string> good;
  std::vector<std::string> bad;
  std::string needs = "";
};

// Numbers at and past the edges, and things that are not numbers.
const std::vector<std::string> kHostileFloats = {
    "0", "-0", "-1", "nan", "-nan", "inf", "-inf", "1e309", "1e-45", "3.5e38", "abc", "", "1,5"};
const std::vector<std::string> kHostileInts = {
    "0",   "-1", "9223372036854775807", "-9223372036854775808", "99999999999999999999", "1.5",
    "abc", ""};
// Paths a user might get wrong: a folder, devices, a missing folder, an existing file.
const std::vector<std::string> kHostileOutputs = {
    "{case}/sub", "/dev/full", "/dev/null", "{case}/missing/deeper/out", "{case}/existing.txt", ""};
const std::vector<std::string> kHostileInputs = {"{fx}/garbage.bin", "{fx}/empty.bin", "{case}/sub",
                                                 "/dev/zero",        "{case}/absent",  ""};

const std::vector<Flag>& compile_flags() {
  static const std::vector<Flag> flags = {
      {"-o", {"{case}/out.onnx"}, kHostileOutputs},
      {"--external-data", {}, {}},
      {"--shape",
       {"x:8x64", "x:1x64", "label:8"},
       {"x:0x64", "x:-1x64", "x:4611686018427387904x64", "nope:1", "x:", "x:8x", "x", ":"}},
      {"--dim", {"batch=8"}, {"batch=-1", "=3", "batch=", "b=99999999999999999999", "x"}},
      {"--dump-after", {"all", "autocast", "optimizer"}, {"no-such-pass", ""}},
      {"--dump-dir", {"{case}/dumps"}, kHostileOutputs},
      {"--disable-pass", {"dce", "eliminate-casts"}, {"infer-shapes", "autodiff", "no-such"}},
      {"--optimizer", {"sgd", "adam", "adamw"}, {"rmsprop", ""}},
      {"--loss", {"loss"}, {"cross-entropy", "mse", "logits", "nope"}},
      {"--label-input", {"label"}, {"x", "nope"}},
      {"--logits", {"logits"}, {"loss", "nope"}},
      {"--lr", {"0.01", "0.1"}, kHostileFloats},
      {"--momentum", {"0.9"}, kHostileFloats},
      {"--dampening", {"0.1"}, kHostileFloats},
      {"--nesterov", {}, {}},
      {"--beta1", {"0.9", "0.5"}, kHostileFloats},
      {"--beta2", {"0.999"}, kHostileFloats},
      {"--eps", {"1e-8"}, kHostileFloats},
      {"--weight-decay", {"0.01"}, kHostileFloats},
      {"--clip-grad-norm", {"1"}, kHostileFloats},
      {"--accumulate", {"1", "2", "3"}, kHostileInts},
      {"--trainable", {".*", "fc1.*"}, {"nothing-matches", "([", ""}},
      {"--freeze", {"fc1.*"}, {".*", "(["}},
      {"--loss-scale",
       {"dynamic", "none", "static:128"},
       {"static:0", "static:nan", "static:", "static:-1", "dynamic:2", ""}},
      {"--scale-init", {"65536", "1"}, kHostileFloats},
      {"--scale-growth", {"2"}, kHostileFloats},
      {"--scale-backoff", {"0.5"}, kHostileFloats},
      {"--scale-growth-interval", {"2000", "1"}, kHostileInts},
      {"--scale-min", {"1e-4"}, kHostileFloats},
      {"--scale-hysteresis", {"1", "2"}, kHostileInts},
      {"--bn-running-var", {"unbiased", "biased"}, {"other"}},
      {"--precision", {"fp16", "bf16", "fp32"}, {"fp8", ""}},
      {"--opt-level", {"O0", "O1", "O2", "O3"}, {"O4", "o1"}},
      {"--allow", {"MatMul", "Softmax"}, {"NoSuchOp", ""}},
      {"--deny", {"MatMul", "Gemm"}, {"NoSuchOp"}},
      {"--fp32-nodes", {".*", "fc.*"}, {"(["}},
      {"--policy",
       {"{fx}/policy.json"},
       {"{fx}/bad_policy.json", "{fx}/garbage.bin", "/dev/zero", "{case}/sub", "{case}/absent"}},
      {"--allow-excess-precision", {}, {}},
  };
  return flags;
}

const std::vector<Flag>& train_flags() {
  static const std::vector<Flag> flags = {
      {"--data",
       {"{fx}/small.npz"},
       {"{fx}/other.npz", "{fx}/garbage.bin", "{fx}/empty.bin", "{case}/sub", "/dev/zero",
        "{case}/absent", ""}},
      {"--steps", {"1", "2", "3"}, {"0", "-1", "99999999999999999999", "abc", ""}},
      {"--lr", {"0.01", "0.5"}, kHostileFloats},
      {"--schedule", {"constant", "warmup", "cosine"}, {"linear"}},
      {"--warmup-steps", {"1", "2"}, kHostileInts},
      {"--min-lr", {"0.001"}, kHostileFloats},
      {"--log", {"{case}/log.jsonl"}, kHostileOutputs},
      {"--checkpoint", {"{case}/ckpt"}, kHostileOutputs},
      {"--checkpoint-every", {"1", "2"}, kHostileInts},
      {"--log-every", {"1", "3"}, kHostileInts},
      {"--resume", {}, {}, "--checkpoint"},
      {"--eval-data", {"{fx}/small.npz"}, {"{fx}/other.npz", "{fx}/garbage.bin", "/dev/zero"}},
      {"--export", {"{case}/export.onnx"}, kHostileOutputs},
      {"--external-data", {}, {}, "--export"},
      {"--export-loss", {}, {}, "--export"},
      {"--check-numerics", {}, {}},
      {"--progress", {"none", "lines"}, {"loud"}},
      {"--device", {"cpu"}, {"tpu", "cuda"}},
      {"--cuda-graph", {"off"}, {"on", "maybe"}},
  };
  return flags;
}

const std::vector<Flag>& run_flags() {
  static const std::vector<Flag> flags = {
      {"--input",
       {"x={fx}/x.npy", "label={fx}/label.npy"},
       {"x={fx}/label.npy", "x={fx}/garbage.bin", "x=", "=x", "x", "y={fx}/x.npy", "x=/dev/zero"}},
      {"--inputs",
       {"{fx}/batch.npz"},
       {"{fx}/small.npz", "{fx}/garbage.bin", "{fx}/empty.bin", "{case}/sub", "/dev/zero",
        "{case}/absent"}},
      {"--output-dir", {"{case}/outputs"}, kHostileOutputs},
      {"--shape", {"x:8x64", "label:8"}, {"x:0x64", "x:-1x64", "x:1x64", "nope:1", "x:"}},
      {"--dim", {"batch=8"}, {"batch=0", "batch=-1", "=3", "x"}},
      {"--device", {"cpu"}, {"cuda", "tpu"}},
      {"--allow-tf32", {}, {}},
  };
  return flags;
}

// The fixtures every case reads (and none may change): the example MLP, compiled for training
// with SGD and with fp16 + AdamW, its data cut to 4 batches, one batch as .npy and .npz files, a
// batch of the wrong shape, garbage, an empty file, and policy files good and bad.
class CliFuzzTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("ampc_cli_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "fx");
    const fs::path fx = root_ / "fx";
    const std::string mlp = testing::source_path("models/mlp.onnx");
    CliResult r = run_ampc("compile " + quote(mlp) +
                               " -o mlp.sgd.onnx --optimizer sgd "
                               "--momentum 0.9 --lr 0.05",
                           fx);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_ampc("compile " + quote(mlp) + " -o mlp.fp16.onnx --optimizer adamw --precision fp16",
                 fx);
    ASSERT_EQ(r.exit_code, 0) << r.err;

    absl::StatusOr<std::map<std::string, Tensor>> data =
        runtime::read_npz(testing::source_path("models/mlp.train.npz"));
    ASSERT_TRUE(data.ok()) << data.status();
    std::map<std::string, Tensor> small, batch;
    for (const auto& [name, array] : *data) {
      TensorType type = array.type();
      const int64_t batch_bytes = type.byte_size() / type.shape[0];
      type.shape[0] = 4;
      small[name] = Tensor(type, std::vector<uint8_t>(array.bytes().begin(),
                                                      array.bytes().begin() + 4 * batch_bytes));
      const TensorType one{array.dtype(), Shape(array.shape().begin() + 1, array.shape().end())};
      batch[name] = Tensor(
          one, std::vector<uint8_t>(array.bytes().begin(), array.bytes().begin() + batch_bytes));
    }
    ASSERT_TRUE(runtime::write_npz((fx / "small.npz").string(), small).ok());
    ASSERT_TRUE(runtime::write_npz((fx / "batch.npz").string(), batch).ok());
    ASSERT_TRUE(runtime::write_npy((fx / "x.npy").string(), batch.at("x")).ok());
    ASSERT_TRUE(runtime::write_npy((fx / "label.npy").string(), batch.at("label")).ok());
    // The right names with the wrong shapes.
    std::map<std::string, Tensor> other = small;
    other["x"] = Tensor::from_f32({4, 8, 32}, std::vector<float>(4 * 8 * 32, 0.5f));
    ASSERT_TRUE(runtime::write_npz((fx / "other.npz").string(), other).ok());

    std::mt19937 rng(seed());
    std::string garbage(4096, '\0');
    for (char& c : garbage) c = static_cast<char>(rng());
    std::ofstream(fx / "garbage.bin", std::ios::binary) << garbage;
    std::ofstream(fx / "empty.bin", std::ios::binary);
    std::ofstream(fx / "policy.json") << R"({"precision": "bf16", "deny": ["Softmax"]})";
    std::ofstream(fx / "bad_policy.json") << R"({"precision": 16, "deny": "Softmax")";

    for (const auto& entry : fs::directory_iterator(fx)) {
      fixtures_[entry.path().string()] = read_file(entry.path().string());
    }
  }

  static void TearDownTestSuite() {
    // No case may have changed a fixture.
    for (const auto& [file, bytes] : fixtures_) {
      EXPECT_TRUE(read_file(file) == bytes) << file << " was changed";
    }
    if (!::testing::Test::HasFailure()) fs::remove_all(root_);
  }

  // A fresh folder for case `index`: an existing file and an empty subfolder, for the outputs
  // that point at them.
  static fs::path case_dir(const std::string& command, int index) {
    const fs::path dir = root_ / (command + "_" + std::to_string(index));
    fs::remove_all(dir);
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "existing.txt") << "precious";
    return dir;
  }

  static std::string expand(const std::string& value, const fs::path& dir) {
    return absl::StrReplaceAll(value,
                               {{"{case}", dir.string()}, {"{fx}", (root_ / "fx").string()}});
  }

  // Draws command lines of `command`: a model from `models` (the first `good_models` of them
  // valid), the flags in `required` most of the time and a few others, with none, one or two of
  // the choices bad (most cases should get past the checks and do some work). Runs each in a
  // fresh folder and checks the contract.
  static void fuzz(const std::string& command, const std::vector<std::string>& models,
                   size_t good_models, const std::vector<Flag>& flags,
                   const std::set<std::string>& required) {
    std::mt19937 rng(seed() + static_cast<uint32_t>(command.size() * 7919 + command[0]));
    std::map<int, int> exits;
    for (int index = 0; index < cases(); ++index) {
      const fs::path dir = case_dir(command, index);
      // Which flags, and which of the choices (0: the model, 1...: the flags) are bad.
      std::vector<const Flag*> picked;
      const size_t extra = rng() % 5;
      for (const Flag& flag : flags) {
        const bool pick =
            required.count(flag.name) != 0 ? rng() % 20 != 0 : rng() % flags.size() < extra;
        if (pick) picked.push_back(&flag);
      }
      for (size_t i = 0; i < picked.size(); ++i) {
        for (const Flag& flag : flags) {
          if (flag.name == picked[i]->needs &&
              std::find(picked.begin(), picked.end(), &flag) == picked.end()) {
            picked.push_back(&flag);
          }
        }
      }
      std::set<size_t> bad;
      for (uint32_t n = rng() % 10 < 5 ? 0 : rng() % 10 < 8 ? 1 : 2; n > 0; --n) {
        bad.insert(rng() % (picked.size() + 1));
      }
      const std::string& model = bad.count(0) != 0
                                     ? models[good_models + rng() % (models.size() - good_models)]
                                     : models[rng() % good_models];
      std::string args = command + " " + quote(expand(model, dir));
      for (size_t i = 0; i < picked.size(); ++i) {
        const Flag& flag = *picked[i];
        args += " " + flag.name;
        const bool use_bad = bad.count(i + 1) != 0 && !flag.bad.empty();
        const std::vector<std::string>& values = use_bad ? flag.bad : flag.good;
        if (!values.empty()) args += " " + quote(expand(values[rng() % values.size()], dir));
      }
      if (command == "train" && args.find("--progress") == std::string::npos) {
        args += " --progress none";
      }
      const CliResult r = run_ampc(args, dir);
      ++exits[r.exit_code];
      if (std::getenv("AMPC_FUZZ_VERBOSE") != nullptr) {
        std::printf("exit %d: %s\n  %s\n", r.exit_code, args.c_str(),
                    r.err.substr(0, r.err.find('\n')).c_str());
      }
      check(args, r, dir);
      if (!::testing::Test::HasFailure()) fs::remove_all(dir);
    }
    std::string tally;
    for (const auto& [code, count] : exits) absl::StrAppend(&tally, " exit ", code, ": ", count);
    std::printf("%s: %d cases;%s\n", command.c_str(), cases(), tally.c_str());
    // The draws reach both sides of the contract.
    EXPECT_GT(exits[0], cases() / 10) << command << ": too few cases succeeded";
    EXPECT_GT(exits[1], cases() / 10) << command << ": too few cases failed";
  }

  // The contract for one run of `args` in `dir`.
  static void check(const std::string& args, const CliResult& r, const fs::path& dir) {
    const std::string shown = binary() + " " + args + "\nstderr:\n" + r.err.substr(0, 4000);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
        << "exit " << r.exit_code << ": " << shown;
    for (const char* crash : {"AddressSanitizer", "runtime error:", "LeakSanitizer",
                              "terminate called", "Check failed", "check failed", "Aborted"}) {
      EXPECT_THAT(r.err, ::testing::Not(HasSubstr(crash))) << shown;
    }
    if (r.exit_code == 1) {
      EXPECT_THAT(r.err, HasSubstr("ampc: error: ")) << shown;
    } else if (r.exit_code == 2) {
      EXPECT_FALSE(r.err.empty()) << shown;
    }

    // No temporary file is left behind, whatever happened; a failed run changed nothing there
    // was, and wrote no file but the records of steps it ran and their last checkpoint.
    EXPECT_TRUE(r.exit_code == 0 || read_file((dir / "existing.txt").string()) == "precious")
        << "existing.txt changed by a failed run: " << shown;
    const bool ran_steps = fs::exists(dir / "log.jsonl") && fs::file_size(dir / "log.jsonl") > 0;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      EXPECT_FALSE(name.rfind('.', 0) == 0) << "temporary " << entry.path() << " left: " << shown;
      if (r.exit_code == 0 || !entry.is_regular_file() || name == "existing.txt") continue;
      const std::string relative = fs::relative(entry.path(), dir).string();
      const bool allowed =
          (ran_steps && (relative == "log.jsonl" || relative == "ckpt/checkpoint.safetensors")) ||
          relative.rfind("dumps/", 0) == 0 || relative.rfind("sub/", 0) == 0;
      EXPECT_TRUE(allowed) << relative << " written by a failed run: " << shown;
    }
  }

  static fs::path root_;
  static std::map<std::string, std::string> fixtures_;
};

fs::path CliFuzzTest::root_;
std::map<std::string, std::string> CliFuzzTest::fixtures_;

TEST_F(CliFuzzTest, Compile) {
  const std::string mlp = testing::source_path("models/mlp.onnx");
  fuzz("compile",
       {mlp, mlp, testing::source_path("models/cnn.onnx"),
        // bad
        "{fx}/garbage.bin", "{fx}/empty.bin", "{case}/sub", "/dev/zero", "{case}/absent.onnx"},
       3, compile_flags(), {"-o", "--optimizer"});
}

TEST_F(CliFuzzTest, Train) {
  fuzz("train",
       {"{fx}/mlp.sgd.onnx", "{fx}/mlp.fp16.onnx",
        // bad
        testing::source_path("models/mlp.onnx"), "{fx}/garbage.bin", "{case}/sub", "/dev/zero"},
       2, train_flags(), {"--data", "--steps"});
}

TEST_F(CliFuzzTest, Run) {
  fuzz("run",
       {testing::source_path("models/mlp.onnx"), "{fx}/mlp.sgd.onnx", "{fx}/mlp.fp16.onnx",
        // bad
        "{fx}/garbage.bin", "{case}/sub", "/dev/null"},
       3, run_flags(), {"--inputs"});
}

// Random corruptions of a checkpoint (bit flips, cut short, a run of bytes overwritten), each
// resumed from: every one is refused with an error naming the checkpoint, which is left as it
// was, or (when it hit bytes that carry nothing) trains on to the very checkpoint an intact one
// gives.
TEST_F(CliFuzzTest, CorruptCheckpoints) {
  const fs::path base = root_ / "checkpoints";
  fs::create_directories(base);
  const std::string model = quote((root_ / "fx/mlp.fp16.onnx").string());
  const std::string data = " --data " + quote((root_ / "fx/small.npz").string());
  auto train = [&](const fs::path& dir, int steps, bool resume) {
    return run_ampc("train " + model + data + " --progress none --steps " + std::to_string(steps) +
                        " --checkpoint " + quote(dir.string()) + (resume ? " --resume" : ""),
                    base);
  };
  CliResult r = train(base / "start", 3, false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string start = read_file((base / "start/checkpoint.safetensors").string());
  fs::copy(base / "start", base / "reference");
  r = train(base / "reference", 5, true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string reference = read_file((base / "reference/checkpoint.safetensors").string());
  ASSERT_NE(reference, start);

  std::mt19937 rng(seed() + 1);
  int refused = 0;
  int resumed = 0;
  for (int trial = 0; trial < cases(); ++trial) {
    std::string corrupt = start;
    std::string what;
    switch (trial % 4) {
      case 0:
      case 1: {
        const size_t at = rng() % corrupt.size();
        corrupt[at] = static_cast<char>(corrupt[at] ^ (1 << (rng() % 8)));
        what = absl::StrCat("bit flip at byte ", at);
        break;
      }
      case 2: {
        const size_t length = rng() % corrupt.size();
        corrupt.resize(length);
        what = absl::StrCat("cut to ", length, " bytes");
        break;
      }
      default: {
        const size_t at = rng() % corrupt.size();
        const size_t length = std::min<size_t>(1 + rng() % 16, corrupt.size() - at);
        for (size_t i = at; i < at + length; ++i) corrupt[i] = static_cast<char>(rng());
        what = absl::StrCat(length, " random bytes at ", at);
        break;
      }
    }
    const fs::path dir = base / ("trial_" + std::to_string(trial));
    fs::create_directories(dir);
    const std::string file = (dir / "checkpoint.safetensors").string();
    std::ofstream(file, std::ios::binary) << corrupt;
    r = train(dir, 5, true);
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << what << ": exit " << r.exit_code << "\n"
                                                      << r.err;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("Sanitizer"))) << what;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("runtime error:"))) << what;
    if (r.exit_code == 0) {
      ++resumed;
      EXPECT_TRUE(read_file(file) == reference) << what << ": resumed to another state";
    } else {
      ++refused;
      EXPECT_THAT(r.err, HasSubstr("ampc: error: ")) << what;
      EXPECT_THAT(r.err, HasSubstr("checkpoint.safetensors")) << what << ": " << r.err;
      EXPECT_TRUE(read_file(file) == corrupt) << what << ": the refused checkpoint was changed";
    }
    if (!::testing::Test::HasFailure()) fs::remove_all(dir);
  }
  std::printf("checkpoints: %d corruptions; %d refused, %d resumed to the intact result\n", cases(),
              refused, resumed);
  EXPECT_GT(refused, cases() / 2);
}

}  // namespace
}  // namespace ampc
