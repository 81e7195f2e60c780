// Fuzz-style robustness test of the ONNX importer: truncated and bit-flipped versions of the
// example models must come back as a Status (ok or an error with a message), never a crash or a
// memory error (this test also runs under AddressSanitizer). A mutant that imports must also
// export and import again, since later stages trust what import accepted.
#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "compiler/onnx_io.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

std::string read_model(const std::string& name) {
  std::ifstream in(std::string(AMPC_SOURCE_DIR) + "/models/" + name, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return std::move(contents).str();
}

struct Tally {
  int imported = 0;
  int rejected = 0;
};

// Imports one mutant and checks the outcome keeps the contract.
void import_mutant(const std::string& bytes, const std::string& label, Tally& tally) {
  absl::StatusOr<std::unique_ptr<Graph>> graph = import_onnx_bytes(bytes, label);
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

class ImportFuzz : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = read_model(GetParam());
    ASSERT_GT(model_.size(), 1000u) << "cannot read models/" << GetParam();
    ASSERT_TRUE(import_onnx_bytes(model_, GetParam()).ok()) << "the unmutated model must import";
  }
  std::string model_;
};

TEST_P(ImportFuzz, TruncatedModelsGiveAStatus) {
  Tally tally;
  // Every cut in the first bytes (the header fields), then cuts spread over the whole file.
  const size_t size = model_.size();
  for (size_t cut = 0; cut < 64; ++cut) import_mutant(model_.substr(0, cut), "cut", tally);
  constexpr int kSpreadCuts = 150;
  for (int i = 1; i < kSpreadCuts; ++i) {
    import_mutant(model_.substr(0, size * i / kSpreadCuts), "cut", tally);
  }
  EXPECT_GT(tally.rejected, 0);
  std::printf("%s: %d truncations rejected, %d imported\n", GetParam(), tally.rejected,
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
  for (int i = 0; i < kMutants; ++i) {
    std::string mutant = model_;
    // Mostly one flip, sometimes a burst of up to 8.
    const int flips = i % 4 == 0 ? 1 + static_cast<int>(rng() % 8) : 1;
    for (int f = 0; f < flips; ++f) {
      const size_t byte = pick_byte(rng, mutant.size());
      mutant[byte] = static_cast<char>(mutant[byte] ^ (1u << (rng() % 8)));
    }
    import_mutant(mutant, "flip", tally);
  }
  EXPECT_EQ(tally.imported + tally.rejected, kMutants);
  std::printf("%s: %d bit-flipped mutants rejected, %d imported\n", GetParam(), tally.rejected,
              tally.imported);
}

INSTANTIATE_TEST_SUITE_P(Models, ImportFuzz,
                         ::testing::Values("mlp.onnx", "cnn.onnx", "tiny_gpt.onnx"));

}  // namespace
}  // namespace ampc
