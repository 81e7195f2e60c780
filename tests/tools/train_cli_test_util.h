// The `ampc train` tests' fixture and helpers: compiling the example models for training in a
// temporary folder, running `ampc train`, reading its --log, cutting the example data
// (train_cli_test.cc, train_reliability_test.cc).
#pragma once

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/npy.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace ampc::train_cli {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using testing::CliResult;
using testing::read_file;

// One line of the --log file.
struct LogLine {
  int64_t step = 0;
  double loss = NAN;
  double grad_norm = NAN;
  double lr = NAN;
};

// The lines of a --log file; fails the test on a line that is not a JSON object with the four
// numbers (a non-finite loss or norm is logged as null, which fails here too).
inline std::vector<LogLine> read_log(const std::string& path) {
  std::vector<LogLine> lines;
  std::istringstream in(read_file(path));
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_discarded() || !json.is_object()) {
      ADD_FAILURE() << path << ": not a JSON object: " << text;
      continue;
    }
    // With loss scaling three more: loss_scale, found_inf, skipped.
    const bool scaled = json.contains("loss_scale") && json["loss_scale"].is_number() &&
                        json.contains("found_inf") && json["found_inf"].is_boolean() &&
                        json.contains("skipped") && json["skipped"].is_number_integer();
    bool ok = json.size() == (scaled ? 7u : 4u) && json.contains("step") &&
              json["step"].is_number_integer();
    for (const char* key : {"loss", "grad_norm", "lr"}) {
      ok = ok && json.contains(key) && json[key].is_number();
    }
    if (!ok) {
      ADD_FAILURE() << path << ": expected step, loss, grad_norm and lr numbers: " << text;
      continue;
    }
    lines.push_back({json["step"].get<int64_t>(), json["loss"].get<double>(),
                     json["grad_norm"].get<double>(), json["lr"].get<double>()});
  }
  return lines;
}

// `n` batches of an [N, ...] array, from batch `first`.
inline Tensor first_batches(const Tensor& array, int64_t n, int64_t first = 0) {
  TensorType type = array.type();
  const int64_t batch_bytes = type.byte_size() / type.shape[0];
  type.shape[0] = n;
  const auto begin = array.bytes().begin() + first * batch_bytes;
  return Tensor(type, std::vector<uint8_t>(begin, begin + n * batch_bytes));
}

// Batch `index` of an [N, ...] array, without its batch axis.
inline Tensor batch_of(const Tensor& array, int64_t index) {
  const TensorType type{array.dtype(), Shape(array.shape().begin() + 1, array.shape().end())};
  const auto begin = array.bytes().begin() + index * type.byte_size();
  return Tensor(type, std::vector<uint8_t>(begin, begin + type.byte_size()));
}

class TrainCliTest : public testing::TempDirTest {
 protected:
  TrainCliTest() : TempDirTest("ampc_train_cli_") {}

  static std::string model(const std::string& name) {
    return testing::source_path("models/" + name + ".onnx");
  }
  static std::string data(const std::string& file) {
    return testing::source_path("models/" + file);
  }
  static std::string mlp_data() { return " --data " + data("mlp.train.npz"); }

  // Compiles models/NAME.onnx with `flags` into the test's folder; returns the training model.
  std::string compile(const std::string& name, const std::string& flags) const {
    const std::string out = path(name + ".train.onnx");
    CliResult r = testing::run_ampc("compile " + model(name) + " -o " + out + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: wrote " + out + " (eval graph "));
    return out;
  }
  static CliResult train(const std::string& model_path, const std::string& args) {
    return testing::run_ampc("train " + model_path + " --progress none " + args);
  }

  // Reads models/mlp.train.npz cut to 4 batches: x f32[4,8,64], label i64[4,8].
  static std::map<std::string, Tensor> small_mlp_data() {
    absl::StatusOr<std::map<std::string, Tensor>> arrays = runtime::read_npz(data("mlp.train.npz"));
    EXPECT_TRUE(arrays.ok()) << arrays.status();
    if (!arrays.ok()) return {};
    return {{"x", first_batches(arrays->at("x"), 4)},
            {"label", first_batches(arrays->at("label"), 4)}};
  }
  void save_npz(const std::string& name, const std::map<std::string, Tensor>& arrays) const {
    ASSERT_TRUE(runtime::write_npz(path(name), arrays).ok());
  }

  // Runs `ampc train` on `model_path` with `args` plus a log, an export and (with
  // `add_checkpoint`) a checkpoint folder; expects `exit_code`, and that none of them was
  // written. Returns stderr.
  std::string expect_train_error(const std::string& model_path, const std::string& args,
                                 int exit_code = 1, bool add_checkpoint = true) const {
    CliResult r = train(model_path, args + " --log " + path("log.jsonl") + " --export " +
                                        path("export.onnx") +
                                        (add_checkpoint ? " --checkpoint " + path("ckpt") : ""));
    EXPECT_EQ(r.exit_code, exit_code) << args << "\n" << r.err;
    if (exit_code == 1) {
      EXPECT_THAT(r.err, HasSubstr("ampc: error: ")) << args;
    }
    for (const char* name : {"log.jsonl", "export.onnx", "ckpt"}) {
      EXPECT_FALSE(fs::exists(path(name))) << name << " written by: " << args;
    }
    return r.err;
  }

  // Compiles `name` with `flags`, then checks that 12 steps in one run and 5 steps followed by
  // a resume up to 12 leave byte-identical checkpoints and logs.
  void expect_resume_is_bit_identical(const std::string& name, const std::string& flags) {
    const std::string trained = compile(name, flags);
    const std::string data_flag = " --data " + data(name + ".train.npz");
    CliResult r = train(
        trained, data_flag + " --steps 12 --checkpoint " + path("a") + " --log " + path("a.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = train(trained,
              data_flag + " --steps 5 --checkpoint " + path("b") + " --log " + path("b.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(read_log(path("b.jsonl")).size(), 5u);
    const std::string after_five = read_file(path("b/checkpoint.safetensors"));
    r = train(trained, data_flag + " --steps 12 --resume --checkpoint " + path("b") + " --log " +
                           path("b.jsonl"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err,
                HasSubstr("resumed from " + path("b/checkpoint.safetensors") + " after step 5"));

    const std::string a = read_file(path("a/checkpoint.safetensors"));
    const std::string b = read_file(path("b/checkpoint.safetensors"));
    ASSERT_FALSE(a.empty());
    EXPECT_NE(after_five, a);  // the comparison below is not between untouched states
    EXPECT_TRUE(a == b) << "checkpoints differ: " << a.size() << " vs " << b.size() << " bytes";
    // The resumed run appended steps 6..12 to the 5 lines already there.
    const std::vector<LogLine> log_b = read_log(path("b.jsonl"));
    ASSERT_EQ(log_b.size(), 12u);
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(log_b[i].step, i + 1);
    EXPECT_EQ(read_file(path("a.jsonl")), read_file(path("b.jsonl")));
  }
};

}  // namespace ampc::train_cli
