// .npz reading and writing: archives numpy wrote (np.savez, np.savez_compressed, and np.savez to a
// stream, which uses data descriptors) read to the values numpy was given; written archives read
// back, with and without ZIP64 fields; corrupt archives give a Status naming the file and entry.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/npy.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string fixture_bytes(const std::string& name) {
  std::ifstream in(testing::source_path("tests/data/npy/" + name), std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

template <typename T>
std::vector<T> values(const Tensor& tensor) {
  std::span<const T> data = tensor.data<T>();
  return {data.begin(), data.end()};
}

std::vector<std::string> keys(const std::map<std::string, Tensor>& arrays) {
  std::vector<std::string> out;
  for (const auto& [key, tensor] : arrays) out.push_back(key);
  return out;
}

TEST(Npz, ReadsWhatNumpySavezWrites) {
  // Stored, deflated, and stored with data descriptors; all with numpy's ZIP64 local headers.
  for (const char* name : {"savez.npz", "savez_compressed.npz", "savez_streamed.npz"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<std::map<std::string, Tensor>> arrays =
        read_npz(testing::source_path(std::string("tests/data/npy/") + name));
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    EXPECT_THAT(keys(*arrays), ElementsAre("label", "ramp", "x"));
    const Tensor& x = arrays->at("x");
    EXPECT_EQ(x.type(), (TensorType{DType::kF32, {2, 3}}));
    EXPECT_THAT(values<float>(x), ElementsAre(1, 2, 3, 4, 5, 6));
    EXPECT_THAT(values<int64_t>(arrays->at("label")), ElementsAre(1, 2, 3));
    const std::vector<double> ramp = values<double>(arrays->at("ramp"));
    ASSERT_EQ(ramp.size(), 100u);
    for (int i = 0; i < 100; ++i) EXPECT_EQ(ramp[i], i);
  }
}

TEST(Npz, InflatesEntriesThatCompressALot) {
  absl::StatusOr<std::map<std::string, Tensor>> arrays =
      read_npz(testing::source_path("tests/data/npy/zeros_compressed.npz"));
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  const Tensor& zeros = arrays->at("zeros");
  EXPECT_EQ(zeros.type(), (TensorType{DType::kF64, {100000}}));
  EXPECT_EQ(zeros, Tensor(TensorType{DType::kF64, {100000}}));
}

std::map<std::string, Tensor> sample_arrays() {
  return {{"x", Tensor::from_doubles(DType::kF32, {2, 2}, {1, -2, 3.5, 0})},
          {"label", Tensor::from_i64({3}, {7, 8, 9})},
          {"half", Tensor::from_doubles(DType::kBF16, {2}, {1.5, -256})},
          {"scalar", Tensor::from_doubles(DType::kF64, {}, {0.125})},
          {"empty", Tensor(TensorType{DType::kI32, {0, 4}})}};
}

TEST(Npz, WrittenArchivesReadBackWithAndWithoutZip64) {
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "plain");
    const std::string bytes = serialize_npz(sample_arrays(), {.force_zip64 = zip64});
    absl::StatusOr<std::map<std::string, Tensor>> back =
        parse_npz(bytes, "memory.npz", {.void2_as_bf16 = true});
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, sample_arrays());
  }
  absl::StatusOr<std::map<std::string, Tensor>> empty = parse_npz(serialize_npz({}), "empty.npz");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(Npz, WritesStoredEntriesNamedAfterTheArrays) {
  const std::string bytes = serialize_npz({{"x", Tensor(TensorType{DType::kF32, {3}})}});
  EXPECT_EQ(bytes.substr(0, 4), "PK\x03\x04");
  EXPECT_EQ(bytes[8], 0);  // method: stored
  EXPECT_THAT(bytes, HasSubstr("x.npy\x93NUMPY"));
  EXPECT_EQ(bytes.substr(bytes.size() - 22, 4), "PK\x05\x06");
}

TEST(Npz, WriteNpzThenReadNpz) {
  const fs::path dir = fs::temp_directory_path() / ("ampc_npz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "a.npz").string();
  ASSERT_TRUE(write_npz(path, sample_arrays()).ok());
  absl::StatusOr<std::map<std::string, Tensor>> back = read_npz(path, {.void2_as_bf16 = true});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, sample_arrays());
  absl::StatusOr<std::map<std::string, Tensor>> missing = read_npz((dir / "b.npz").string());
  EXPECT_THAT(missing.status().message(), HasSubstr("b.npz"));
  fs::remove_all(dir);
}

absl::Status parse_error(const std::string& bytes) {
  absl::StatusOr<std::map<std::string, Tensor>> arrays = parse_npz(bytes, "in.npz");
  return arrays.ok() ? absl::OkStatus() : arrays.status();
}

TEST(Npz, CorruptArchivesAreErrorsNamingFileAndEntry) {
  const std::string good = serialize_npz({{"a", Tensor::from_f32({4}, {1, 2, 3, 4})}});
  ASSERT_TRUE(parse_error(good).ok());

  std::string bad_crc = good;
  bad_crc[good.find("\x93NUMPY") + 64 + 2] ^= 1;  // a byte of the data, after the 64-byte header
  EXPECT_THAT(parse_error(bad_crc).message(), HasSubstr("in.npz: "));
  EXPECT_THAT(parse_error(bad_crc).message(), HasSubstr("entry 'a.npy' fails its CRC-32 check"));

  std::string bzip2 = good;
  bzip2[8] = 12;                             // local header method
  bzip2[good.find("PK\x01\x02") + 10] = 12;  // central directory method
  EXPECT_THAT(parse_error(bzip2).message(), HasSubstr("compression method 12"));

  EXPECT_THAT(parse_error("this is not a zip archive at all").message(),
              HasSubstr("in.npz: not a valid .npz (zip) archive"));

  std::string twice =
      serialize_npz({{"a", Tensor::from_f32({1}, {1})}, {"b", Tensor::from_f32({1}, {1})}});
  for (size_t pos = twice.find("b.npy"); pos != std::string::npos; pos = twice.find("b.npy")) {
    twice[pos] = 'a';
  }
  EXPECT_THAT(parse_error(twice).message(), HasSubstr("array 'a' appears twice"));

  // An entry that is not a readable .npy: the message names the array.
  const std::string bf16 = serialize_npz({{"w", Tensor(TensorType{DType::kBF16, {2}})}});
  EXPECT_THAT(parse_error(bf16).message(), HasSubstr("in.npz (array 'w'): dtype '<V2'"));
}

TEST(Npz, EveryTruncationAndRandomByteFlipsGiveAStatusNotACrash) {
  for (const char* name : {"savez.npz", "savez_compressed.npz", "savez_streamed.npz"}) {
    SCOPED_TRACE(name);
    const std::string bytes = fixture_bytes(name);
    ASSERT_FALSE(bytes.empty());
    for (size_t size = 0; size < bytes.size(); ++size) {
      EXPECT_FALSE(parse_npz(bytes.substr(0, size), "cut.npz").ok()) << size;
    }
    std::mt19937 random(99);
    for (int trial = 0; trial < 2000; ++trial) {
      std::string flipped = bytes;
      for (int f = 0; f <= trial % 3; ++f) {
        flipped[random() % flipped.size()] ^= static_cast<char>(1 + random() % 255);
      }
      absl::StatusOr<std::map<std::string, Tensor>> arrays = parse_npz(flipped, "flipped.npz");
      if (arrays.ok()) {
        for (const auto& [key, tensor] : *arrays) {
          EXPECT_EQ(static_cast<size_t>(tensor.type().byte_size()), tensor.bytes().size());
        }
      }
    }
  }
}

}  // namespace
}  // namespace ampc::runtime
