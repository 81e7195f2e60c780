// Fuzz-style robustness test of the ONNX importer: truncated and bit-flipped versions of every
// model in models/ and models/zoo/ (as PyTorch's exporters write them) must come back as a Status
// (ok or an error with a message), never a crash or a memory error (this test also runs under
// AddressSanitizer and UndefinedBehaviorSanitizer). A mutant that imports must also export and
// import again, since later stages trust what import accepted. Models with external data are
// imported from a folder holding their data file, which is cut short too. The sanitized build
// (AMPC_FUZZ_STRIDE=3) imports every third truncation and mutant of each model, the thirds
// rotating from one model to the next, so that it stays within CI's time.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/temp_dir.h"

namespace ampc {
namespace {

namespace fs = std::filesystem;

#ifndef AMPC_FUZZ_STRIDE
#define AMPC_FUZZ_STRIDE 1
#endif
constexpr int kStride = AMPC_FUZZ_STRIDE;

std::string read_model(const std::string& name) {
  std::ifstream in(std::string(AMPC_SOURCE_DIR) + "/models/" + name, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

// Every .onnx file of models/ and models/zoo/, relative to models/.
std::vector<std::string> model_files() {
  std::vector<std::string> files;
  for (const char* dir : {"", "zoo/"}) {
    for (const auto& entry :
         fs::directory_iterator(std::string(AMPC_SOURCE_DIR) + "/models/" + dir)) {
      if (entry.path().extension() == ".onnx") {
        files.push_back(dir + entry.path().filename().string());
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The external data file a model names (its first initializer's location), or "".
std::string external_data_location(const std::string& bytes) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return "";
  for (const onnx::TensorProto& init : model.graph().initializer()) {
    for (const auto& entry : init.external_data()) {
      if (entry.key() == "location") return entry.value();
    }
  }
  return "";
}

struct Tally {
  int imported = 0;
  int rejected = 0;
};

// Imports one mutant (from `folder`, where its external data lies, when not empty) and checks
// the outcome keeps the contract.
void import_mutant(const std::string& bytes, const std::string& label, Tally& tally,
                   const fs::path& folder = {}) {
  absl::StatusOr<std::unique_ptr<Graph>> graph;
  if (folder.empty()) {
    graph = import_onnx_bytes(bytes, label);
  } else {
    std::ofstream(folder / "model.onnx", std::ios::binary) << bytes;
    graph = import_onnx_file((folder / "model.onnx").string());
  }
  if (!graph.ok()) {
    ++tally.rejected;
    EXPECT_FALSE(graph.status().message().empty()) << label << ": error without a message";
    return;
  }
  ++tally.imported;
  absl::StatusOr<std::string> exported = export_onnx_bytes(**graph);
  ASSERT_TRUE(exported.ok()) << label << ": imports but does not export: " << exported.status();
  absl::StatusOr<std::unique_ptr<Graph>> again = import_onnx_bytes(*exported, label);
  EXPECT_TRUE(again.ok()) << label << ": export does not import again: " << again.status();
}

class ImportFuzz : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = read_model(GetParam());
    ASSERT_GT(model_.size(), 1000u) << "cannot read models/" << GetParam();
    const std::string data = external_data_location(model_);
    if (!data.empty()) {
      // The model and a copy of its data file in a folder of the test's own.
      folder_ = testing::test_temp_path("ampc_import_fuzz_");
      fs::create_directories(folder_);
      data_file_ = folder_ / data;
      fs::copy_file(
          fs::path(AMPC_SOURCE_DIR) / "models" / fs::path(GetParam()).parent_path() / data,
          data_file_, fs::copy_options::overwrite_existing);
    }
    Tally tally;
    import_mutant(model_, "unmutated", tally, folder_);
    ASSERT_EQ(tally.imported, 1) << "the unmutated model must import";
    const std::vector<std::string> files = model_files();
    offset_ = static_cast<int>(std::find(files.begin(), files.end(), GetParam()) - files.begin());
  }
  // Whether case `i` of this model is imported (all of them, but in a sanitized build).
  bool taken(int i) const { return (i + offset_) % kStride == 0; }
  void TearDown() override {
    if (!folder_.empty()) fs::remove_all(folder_);
  }
  std::string model_;
  fs::path folder_;     // where a model with external data is imported from; empty otherwise
  fs::path data_file_;  // its data file there
  int offset_ = 0;      // the model's place among model_files(): which cases taken() takes
};

TEST_P(ImportFuzz, TruncatedModelsGiveAStatus) {
  Tally tally;
  // Every cut in the first bytes (the header fields), then cuts spread over the whole file.
  const size_t size = model_.size();
  for (size_t cut = 0; cut < 64; ++cut) {
    if (taken(static_cast<int>(cut))) import_mutant(model_.substr(0, cut), "cut", tally, folder_);
  }
  constexpr int kSpreadCuts = 150;
  for (int i = 1; i < kSpreadCuts; ++i) {
    if (taken(i)) import_mutant(model_.substr(0, size * i / kSpreadCuts), "cut", tally, folder_);
  }
  EXPECT_GT(tally.rejected, 0);
  std::printf("%s: %d truncations rejected, %d imported\n", GetParam().c_str(), tally.rejected,
              tally.imported);
}

// A byte to flip. Uniform positions mostly hit initializer data, so flips favour the structure:
// a ModelProto serializes its header and the graph's nodes first, initializers next, and the
// inputs, outputs and value_info last.
size_t pick_byte(std::mt19937& rng, size_t size) {
  const size_t head = std::min<size_t>(size, 4096);
  const size_t tail = std::min<size_t>(size, 1024);
  switch (rng() % 5) {
    case 0:
    case 1:
      return rng() % head;
    case 2:
      return size - 1 - rng() % tail;
    default:
      return rng() % size;
  }
}

TEST_P(ImportFuzz, BitFlippedModelsGiveAStatus) {
  Tally tally;
  std::mt19937 rng(20240607);
  constexpr int kMutants = 200;  // ~4 s for the three models under AddressSanitizer
  int mutants = 0;
  for (int i = 0; i < kMutants; ++i) {
    std::string mutant = model_;
    // Mostly one flip, sometimes a burst of up to 8.
    const int flips = i % 4 == 0 ? 1 + static_cast<int>(rng() % 8) : 1;
    for (int f = 0; f < flips; ++f) {
      const size_t byte = pick_byte(rng, mutant.size());
      mutant[byte] = static_cast<char>(mutant[byte] ^ (1u << (rng() % 8)));
    }
    if (!taken(i)) continue;
    import_mutant(mutant, "flip", tally, folder_);
    ++mutants;
  }
  EXPECT_EQ(tally.imported + tally.rejected, mutants);
  std::printf("%s: %d bit-flipped mutants rejected, %d imported\n", GetParam().c_str(),
              tally.rejected, tally.imported);
}

// A model's external data file cut short (at every length in its first bytes, then spread out):
// each import is an error naming the file, never a read past its end.
TEST_P(ImportFuzz, ExternalDataCutShortIsAnError) {
  if (data_file_.empty()) GTEST_SKIP() << GetParam() << " has no external data";
  std::ifstream in(data_file_, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (int i = 0; i < 40; ++i) {
    const size_t cut = i < 20 ? static_cast<size_t>(i) : data.size() * (i - 19) / 21;
    std::ofstream(data_file_, std::ios::binary | std::ios::trunc) << data.substr(0, cut);
    absl::StatusOr<std::unique_ptr<Graph>> graph =
        import_onnx_file((folder_ / "model.onnx").string());
    ASSERT_FALSE(graph.ok()) << "data cut to " << cut << " bytes imports";
    EXPECT_NE(graph.status().message().find(data_file_.filename().string()), std::string::npos)
        << graph.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ImportFuzz, ::testing::ValuesIn(model_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ampc
