// `ampc train --progress lines`: what the lines say. The figures of the steps between two reads
// of the device come together (--log-every), so the lines of one read share one rate, counted
// over every step run by then, and an ETA from there; no figure depends on how fast the machine
// is.
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/tools/train_cli_test_util.h"

namespace ampc {
namespace {

using testing::CliResult;
using train_cli::TrainCliTest;

// TrainCliTest::train with its --progress left to `args`.
CliResult train_showing(const std::string& model_path, const std::string& args) {
  return testing::run_ampc("train " + model_path + " " + args);
}

struct ProgressLine {
  int64_t step = 0;
  std::string rate;  // as printed
  std::string eta;
};

std::vector<ProgressLine> progress_lines(const std::string& err) {
  static const std::regex line(R"(^step ([0-9]+)/[0-9]+  loss .*  ([0-9.]+) steps/s  ETA (\S+)$)");
  std::vector<ProgressLine> lines;
  std::istringstream in(err);
  for (std::string text; std::getline(in, text);) {
    std::smatch m;
    if (std::regex_match(text, m, line)) lines.push_back({std::stoll(m[1]), m[2], m[3]});
  }
  return lines;
}

// 10 steps read once, at the end: ten lines, each with the rate of the whole run and nothing
// left to run. (Each line's own step over the time of the read gave ten rates, and ETAs of
// steps already run.)
TEST_F(TrainCliTest, TheLinesOfOneReadShareTheirRateAndEta) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.01");
  CliResult r = train_showing(
      trained, TrainCliTest::mlp_data() + " --steps 10 --log-every 10 --progress lines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<ProgressLine> lines = progress_lines(r.err);
  ASSERT_EQ(lines.size(), 10u) << r.err;
  std::set<std::string> rates;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(lines[i].eta, "0s") << r.err;
    rates.insert(lines[i].rate);
  }
  EXPECT_EQ(rates.size(), 1u) << r.err;
}

// --progress none prints no line; lines on 40 steps print every 2nd (a twentieth of the run).
TEST_F(TrainCliTest, ProgressLinesComeEveryTwentiethOfTheRun) {
  const std::string trained = compile("mlp", "--optimizer sgd --lr 0.01");
  CliResult r = train_showing(trained, TrainCliTest::mlp_data() + " --steps 40 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(progress_lines(r.err).empty()) << r.err;
  r = train_showing(trained, TrainCliTest::mlp_data() + " --steps 40 --progress lines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<ProgressLine> lines = progress_lines(r.err);
  ASSERT_EQ(lines.size(), 20u) << r.err;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].step, 2 * static_cast<int64_t>(i) + 2);
  }
  EXPECT_EQ(lines.back().eta, "0s");
}

// A step skipped on overflow has no gradient norm (the log's null): its line says so, where it
// printed "-nan".
TEST_F(TrainCliTest, ASkippedStepsLineSaysItOverflowed) {
  const std::string trained = compile("mlp", "--optimizer sgd --precision fp16 --scale-init 1e30");
  CliResult r = train_showing(trained, TrainCliTest::mlp_data() + " --steps 2 --progress lines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("step 1/2  loss "));
  EXPECT_THAT(r.err, ::testing::HasSubstr("  grad_norm overflow  lr 0.01  scale 1e+30  skipped 1"));
  EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("nan")));
}

// fp16 on a batch with a NaN pixel: the step is skipped and its line says "loss nan" (the CNN's
// NaN loss has its sign bit set, which printed "-nan", a negative loss to the eye).
TEST_F(TrainCliTest, ANanLossPrintsAsNan) {
  const std::string trained = compile("cnn", "--optimizer sgd --lr 0.01 --precision fp16");
  absl::StatusOr<std::map<std::string, Tensor>> arrays = runtime::read_npz(data("cnn.train.npz"));
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  Tensor x = train_cli::first_batches(arrays->at("x"), 2);
  x.set_element(x.num_elements() - 1, std::nan(""));  // in the second batch
  save_npz("nan.npz", {{"x", x}, {"label", train_cli::first_batches(arrays->at("label"), 2)}});
  CliResult r = train_showing(trained, "--data " + path("nan.npz") + " --steps 2 --progress lines");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr("step 2/2  loss nan  grad_norm overflow")) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(::testing::HasSubstr("-nan"))) << r.err;
}

}  // namespace
}  // namespace ampc
