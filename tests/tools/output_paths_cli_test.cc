// Where `ampc train` and `ampc compile` write is checked before any work: two outputs that are
// one file are refused before either exists, every file training writes (the export's external
// data too) is checked before the first step, and a compile whose output cannot be written runs
// no pass and writes no dump.
#include <filesystem>
#include <string>

#include "tests/tools/train_cli_test_util.h"

namespace ampc::train_cli {
namespace {

using ::testing::Not;

class OutputPathsCliTest : public TrainCliTest {};

// `./out.onnx` and `out.onnx` are one file before it exists too, and so are `--checkpoint .`'s
// file and `checkpoint.safetensors`: each pair is refused, and nothing is written.
TEST_F(OutputPathsCliTest, TwoOutputsThatAreOneFileAreRefusedBeforeEitherExists) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  fs::create_directories(path("work"));
  const struct {
    std::string flags;
    std::string message;
    std::string written;
  } cases[] = {
      {"--export ./out.onnx --log out.onnx",
       "--log 'out.onnx' and --export './out.onnx' are one file", "out.onnx"},
      {"--checkpoint . --log checkpoint.safetensors",
       "--log 'checkpoint.safetensors' and --checkpoint's file './checkpoint.safetensors' are one "
       "file",
       "checkpoint.safetensors"},
      {"--export sub/../m.onnx --log m.onnx",
       "--log 'm.onnx' and --export 'sub/../m.onnx' are one file", "m.onnx"},
  };
  for (const auto& c : cases) {
    CliResult r = testing::run_ampc(
        "train " + trained + " --progress none" + mlp_data() + " --steps 2 " + c.flags,
        path("work"));
    EXPECT_EQ(r.exit_code, 1) << c.flags << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("ampc: error: " + c.message)) << c.flags;
    EXPECT_FALSE(fs::exists(path("work/" + c.written))) << c.flags;
  }
}

// --export F --external-data writes F.data: a folder there fails before the first step, with no
// checkpoint, log or export written.
TEST_F(OutputPathsCliTest, TheExportsExternalDataIsCheckedBeforeTheFirstStep) {
  const std::string trained = compile("mlp", "--optimizer sgd");
  fs::create_directories(path("export.onnx.data"));
  const std::string err = expect_train_error(trained, mlp_data() + " --steps 3 --external-data");
  EXPECT_THAT(err, HasSubstr("--export's external data '" + path("export.onnx.data") +
                             "' exists and is not a regular file: it is a directory"));
  EXPECT_THAT(err, Not(HasSubstr("saved")));
}

// -o clashing with --dump-dir, or -o a folder: refused before any pass runs, so no dump is left.
TEST_F(OutputPathsCliTest, ACompileWhoseOutputCannotBeWrittenWritesNoDump) {
  CliResult r = testing::run_ampc("compile " + model("mlp") + " -o " + path("x.onnx") +
                                  " --dump-after all --dump-dir " + path("x.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-o '" + path("x.onnx") + "' and --dump-dir '" + path("x.onnx") +
                               "' are one file"));
  EXPECT_FALSE(fs::exists(path("x.onnx")));

  fs::create_directories(path("folder.onnx"));
  r = testing::run_ampc("compile " + model("mlp") + " -o " + path("folder.onnx") +
                        " --dump-after all --dump-dir " + path("dumps"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-o '" + path("folder.onnx") +
                               "' exists and is not a regular file: it is a directory"));
  EXPECT_FALSE(fs::exists(path("dumps")));
  EXPECT_TRUE(fs::is_empty(path("folder.onnx")));

  fs::create_directories(path("split.onnx.data"));
  r = testing::run_ampc("compile " + model("mlp") + " --external-data -o " + path("split.onnx"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-o's external data '" + path("split.onnx.data") + "'"));
  EXPECT_FALSE(fs::exists(path("split.onnx")));
}

}  // namespace
}  // namespace ampc::train_cli
