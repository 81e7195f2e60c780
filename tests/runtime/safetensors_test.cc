// safetensors reading and writing, against files built here byte by byte from the format's
// description (the header text written out, floats as their little-endian bytes), not against
// this writer: parse gives exactly the values such a file holds, serialize gives exactly such
// bytes, every dtype round-trips, malformed files are errors naming the file and the tensor, and
// no truncation or corruption crashes the parser.
#include "runtime/safetensors.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/temp_dir.h"

namespace ampc::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::string_literals;
namespace fs = std::filesystem;

template <typename T>
std::vector<T> values(const Tensor& tensor) {
  std::span<const T> data = tensor.data<T>();
  return {data.begin(), data.end()};
}

// The 8-byte little-endian header length, the header, the data.
std::string file_of(std::string_view header, std::string_view data = "") {
  std::string out;
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>(length >> (8 * i));
  return out + std::string(header) + std::string(data);
}

// The header length of a file's bytes.
uint64_t header_length_of(std::string_view bytes) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(bytes[i]);
  return length;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A folder of the test's own, removed at the end of the test.
struct TempDir : testing::ScopedTempDir {
  TempDir() : ScopedTempDir("ampc_safetensors_") {}
};

TEST(Safetensors, ParsesAHandWrittenFile) {
  // Tensors listed out of name order and stored out of name order, metadata last, no padding:
  // all allowed by the format.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"I32","shape":[],"data_offsets":[8,12]},)"
                             R"("__metadata__":{"format":"pt"}})";
  ASSERT_EQ(header.size(), 138u);
  const std::string data =
      "\x00\x00\x80\x3f"    // w[0] = 1.0f
      "\x00\x00\x20\xc0"    // w[1] = -2.5f
      "\x07\x00\x00\x00"s;  // b = 7
  const std::string bytes = "\x8a\0\0\0\0\0\0\0"s + header + data;
  absl::StatusOr<SafetensorsFile> file = parse_safetensors(bytes, "hand.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 2u);
  const Tensor& w = file->tensors.at("w");
  EXPECT_EQ(w.type(), (TensorType{DType::kF32, {2}}));
  EXPECT_THAT(values<float>(w), ElementsAre(1.0f, -2.5f));
  const Tensor& b = file->tensors.at("b");
  EXPECT_EQ(b.type(), (TensorType{DType::kI32, {}}));
  EXPECT_THAT(values<int32_t>(b), ElementsAre(7));
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(Safetensors, SerializesToExactlyTheFormatsBytes) {
  // One tensor whose header is a multiple of 8 long already: no padding.
  const std::string attn = "\x40\0\0\0\0\0\0\0"s +
                           R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
                           "\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"s +  // 0, 1, 2
                           "\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40"s;   // 3, 4, 5
  EXPECT_EQ(serialize_safetensors({{"attn.0", Tensor::from_f32({1, 2, 3}, {0, 1, 2, 3, 4, 5})}}),
            attn);

  // Metadata first, tensors and their data in name order, the header padded with spaces to 144.
  const std::string two = "\x90\0\0\0\0\0\0\0"s + R"({"__metadata__":{"format":"pt"},)" +
                          R"("b":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)" +
                          R"("w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})" + "      " +
                          "\x07\x00\x00\x00"s + "\x00\x00\x80\x3f\x00\x00\x20\xc0"s;
  EXPECT_EQ(serialize_safetensors({{"w", Tensor::from_f32({2}, {1, -2.5f})},
                                   {"b", Tensor::from_doubles(DType::kI32, {}, {7})}},
                                  {{"format", "pt"}}),
            two);

  EXPECT_EQ(serialize_safetensors({}), "\x08\0\0\0\0\0\0\0{}      "s);
  EXPECT_EQ(serialize_safetensors({}, {{"framework", "pt"}}),
            "\x28\0\0\0\0\0\0\0"s + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, EveryDTypeRoundTripsUnderItsFormatName) {
  // Written out here rather than taken from the implementation; every ampc DType must be listed.
  const std::map<DType, std::string> names = {
      {DType::kF64, "F64"},       {DType::kF32, "F32"},
      {DType::kF16, "F16"},       {DType::kBF16, "BF16"},
      {DType::kI64, "I64"},       {DType::kI32, "I32"},
      {DType::kI8, "I8"},         {DType::kU8, "U8"},
      {DType::kBool, "BOOL"},     {DType::kF8E4M3FN, "F8_E4M3"},
      {DType::kF8E5M2, "F8_E5M2"}};
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    ASSERT_TRUE(names.contains(dtype)) << "a new DType needs its safetensors name here";
    std::map<std::string, Tensor> tensors;
    for (const Shape& shape : std::vector<Shape>{{}, {0}, {3, 0}, {2, 3}}) {
      std::vector<double> elements;
      for (int64_t i = 0; i < num_elements(shape); ++i) {
        elements.push_back(dtype == DType::kBool ? i % 2 : i);
      }
      tensors.emplace(shape_to_string(shape), Tensor::from_doubles(dtype, shape, elements));
    }
    const std::string bytes = serialize_safetensors(tensors);
    EXPECT_THAT(bytes, HasSubstr(R"("dtype":")" + names.at(dtype) + R"(")"));
    absl::StatusOr<SafetensorsFile> back = parse_safetensors(bytes, "dtypes.safetensors");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->tensors, tensors);
    EXPECT_TRUE(back->metadata.empty());
  }
}

TEST(Safetensors, NamesAndMetadataWithAnyUnicodeRoundTrip) {
  const std::map<std::string, Tensor> tensors = {
      {"层.0.weight", Tensor::from_f32({1}, {1})},
      {"quote \" backslash \\ newline \n", Tensor::from_f32({1}, {2})},
      {"", Tensor::from_f32({1}, {3})}};
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"note", "tab\t, control \x01, euro €, emoji 😀"}, {"", "empty key"}};
  absl::StatusOr<SafetensorsFile> back =
      parse_safetensors(serialize_safetensors(tensors, metadata), "unicode.safetensors");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensors, tensors);
  EXPECT_EQ(back->metadata, metadata);
}

TEST(Safetensors, EqualTensorsGiveEqualBytesLaidOutInNameOrder) {
  const auto make_tensors = [] {
    std::map<std::string, Tensor> tensors;
    const std::vector<std::string> names = {"z", "b.weight", "b.bias", "a", "B"};
    for (size_t i = 0; i < names.size(); ++i) {
      const auto size = static_cast<int64_t>(i) + 1;
      tensors.emplace(
          names[i], Tensor::from_doubles(DType::kF16, {size}, std::vector<double>(size, 0.5 * i)));
    }
    return tensors;
  };
  const std::map<std::string, std::string> metadata = {{"k", "v"}, {"a", "b"}};
  const std::string bytes = serialize_safetensors(make_tensors(), metadata);
  EXPECT_EQ(bytes, serialize_safetensors(make_tensors(), metadata));

  // Read the header with a JSON library that keeps key order.
  const uint64_t length = header_length_of(bytes);
  EXPECT_EQ(length % 8, 0u);
  const auto header = nlohmann::ordered_json::parse(bytes.substr(8, length));
  std::vector<std::string> keys;
  uint64_t next_offset = 0;
  for (const auto& [key, entry] : header.items()) {
    keys.push_back(key);
    if (key == "__metadata__") continue;
    EXPECT_EQ(entry["data_offsets"][0].get<uint64_t>(), next_offset) << key;
    next_offset = entry["data_offsets"][1].get<uint64_t>();
  }
  EXPECT_THAT(keys, ElementsAre("__metadata__", "B", "a", "b.bias", "b.weight", "z"));
  EXPECT_EQ(8 + length + next_offset, bytes.size());
}

TEST(Safetensors, AcceptsWhatTheFormatAllows) {
  // Zero-size tensors at the start, between and after others, sharing offsets; trailing
  // whitespace of any kind; bool bytes other than 0/1, which read as true.
  const std::string header = R"({"e0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                             R"("flags":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]},)"
                             R"("e1":{"dtype":"I64","shape":[2,0],"data_offsets":[3,3]},)"
                             R"("e2":{"dtype":"U8","shape":[0],"data_offsets":[3,3]},)"
                             R"("x":{"dtype":"U8","shape":[1],"data_offsets":[3,4]},)"
                             R"("e3":{"dtype":"BF16","shape":[0,5],"data_offsets":[4,4]}})"
                             " \n\t\r ";
  absl::StatusOr<SafetensorsFile> file =
      parse_safetensors(file_of(header, "\x00\x01\x07\xff"s), "edge.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.size(), 6u);
  EXPECT_THAT(values<uint8_t>(file->tensors.at("flags")), ElementsAre(0, 1, 1));
  EXPECT_THAT(values<uint8_t>(file->tensors.at("x")), ElementsAre(0xff));
  EXPECT_EQ(file->tensors.at("e1").type(), (TensorType{DType::kI64, {2, 0}}));

  absl::StatusOr<SafetensorsFile> empty = parse_safetensors(file_of("{}"), "empty.safetensors");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->tensors.empty());
}

absl::Status parse_error(const std::string& bytes) {
  absl::StatusOr<SafetensorsFile> file = parse_safetensors(bytes, "in.safetensors");
  return file.ok() ? absl::OkStatus() : file.status();
}

// A header of one entry named 'a' whose data section is `data`.
std::string one_tensor(std::string_view entry, std::string_view data = "") {
  return file_of(str_cat(R"({"a":)", entry, "}"), data);
}

TEST(Safetensors, MalformedFilesAreErrorsNamingFileAndTensor) {
  std::string too_large(8 + 100'000'001, ' ');
  too_large.replace(0, 8, "\x01\xe1\xf5\x05\0\0\0\0"s);  // 100,000,001
  const std::string u8_4 = R"("dtype":"U8","shape":[4])";
  const std::string u8_2 = R"("dtype":"U8","shape":[2])";
  const struct {
    std::string bytes;
    std::vector<std::string> expected;
  } cases[] = {
      {"", {"0 bytes, too few for the 8-byte length"}},
      {"\x02\0\0\0\0\0"s, {"6 bytes, too few"}},
      {"\xe8\x03\0\0\0\0\0\0{}"s, {"header length 1000 runs past the end of the file (10 bytes)"}},
      {"\xff\xff\xff\xff\xff\xff\xff\xff{}"s, {"header length 18446744073709551615 runs past"}},
      {too_large, {"header length 100000001 is over the format's limit of 100000000 bytes"}},
      {file_of(""), {"the header does not start with '{'"}},
      {file_of(" {}"), {"the header does not start with '{'"}},
      {file_of("[]"), {"the header does not start with '{'"}},
      {file_of(R"({"a":)"), {"the header is not valid JSON"}},
      {file_of("{} x"), {"the header is not valid JSON"}},
      {file_of("{/* c */}"), {"the header is not valid JSON"}},
      {file_of("{\"\xff\":1}"), {"the header is not valid JSON"}},
      {file_of("{\"\xc0\xaf\":1}"), {"the header is not valid JSON"}},      // overlong '/'
      {file_of("{\"\xed\xa0\x80\":1}"), {"the header is not valid JSON"}},  // a surrogate
      {file_of(R"({"a":1e999})"), {"the header is not valid JSON"}},
      {one_tensor("1"), {"tensor 'a': expected an object of dtype, shape and data_offsets, got 1"}},
      {one_tensor("[]"), {"tensor 'a': expected an object", "got []"}},
      {one_tensor(R"({"shape":[],"data_offsets":[0,0]})"), {"tensor 'a': missing field 'dtype'"}},
      {one_tensor(R"({"dtype":"U8","data_offsets":[0,0]})"), {"tensor 'a': missing field 'shape'"}},
      {one_tensor(R"({"dtype":"U8","shape":[]})"), {"tensor 'a': missing field 'data_offsets'"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":[0,1],"strides":[]})", "x"),
       {"tensor 'a': unknown field 'strides'"}},
      {one_tensor(R"({"dtype":8,"shape":[],"data_offsets":[0,1]})", "x"),
       {"tensor 'a': dtype must be a string, got 8"}},
      {one_tensor(R"({"dtype":"I16","shape":[],"data_offsets":[0,2]})", "xx"),
       {"tensor 'a': dtype \"I16\" is not supported", "F8_E4M3"}},
      {one_tensor(R"({"dtype":"U64","shape":[],"data_offsets":[0,8]})", "xxxxxxxx"),
       {"tensor 'a': dtype \"U64\" is not supported"}},
      {one_tensor(R"({"dtype":"f32","shape":[],"data_offsets":[0,4]})", "xxxx"),
       {"tensor 'a': dtype \"f32\" is not supported"}},
      {one_tensor(R"({"dtype":"U8","shape":"4","data_offsets":[0,4]})", "xxxx"),
       {"tensor 'a': shape must be an array, got \"4\""}},
      {one_tensor(R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,1]})", "x"),
       {"tensor 'a': shape must hold non-negative integers, got 1.5"}},
      {one_tensor(R"({"dtype":"U8","shape":[[1]],"data_offsets":[0,1]})", "x"),
       {"tensor 'a': shape must hold non-negative integers, got [1]"}},
      {one_tensor(R"({"dtype":"U8","shape":[-1],"data_offsets":[0,0]})"),
       {"tensor 'a': shape has the negative dimension -1"}},
      {one_tensor(R"({"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]})"),
       {"tensor 'a': shape must hold non-negative integers"}},
      {one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})"),
       {"tensor 'a': shape [4294967296,4294967296] holds more bytes than fit in 64 bits"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":[0]})", "x"),
       {"tensor 'a': data_offsets must be [begin, end]", "got [0]"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":[0,1,2]})", "x"),
       {"tensor 'a': data_offsets must be [begin, end]"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":["0","1"]})", "x"),
       {"tensor 'a': data_offsets must be [begin, end]"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":[-1,0]})", "x"),
       {"tensor 'a': data_offsets must be [begin, end]"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":{"0":1}})", "x"),
       {"tensor 'a': data_offsets must be [begin, end]"}},
      {one_tensor(R"({"dtype":"U8","shape":[],"data_offsets":[1,0]})", "x"),
       {"tensor 'a': data_offsets [1, 0] end before they begin"}},
      {one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", "xxxx"),
       {"tensor 'a': data_offsets [0, 4] hold 4 bytes, but F32 [2] needs 8"}},
      {one_tensor("{" + u8_4 + R"(,"data_offsets":[0,4]})", "xx"),
       {"tensor 'a': data_offsets [0, 4] run past the end of the data section (2 bytes)"}},
      {file_of(R"({"a":{)" + u8_4 + R"(,"data_offsets":[0,4]},"b":{)" + u8_4 +
                   R"(,"data_offsets":[2,6]}})",
               "xxxxxx"),
       {"tensor 'b' (bytes 2 to 6) overlaps tensor 'a' (bytes 0 to 4)"}},
      {file_of(R"({"a":{)" + u8_2 + R"(,"data_offsets":[0,2]},"b":{)" + u8_2 +
                   R"(,"data_offsets":[4,6]}})",
               "xxxxxx"),
       {"bytes 2 to 4 of the data section, before tensor 'b', belong to no tensor"}},
      {one_tensor("{" + u8_2 + R"(,"data_offsets":[2,4]})", "xxxx"),
       {"bytes 0 to 2 of the data section, before tensor 'a', belong to no tensor"}},
      {one_tensor("{" + u8_2 + R"(,"data_offsets":[0,2]})", "xxx"),
       {"the data section has 1 bytes after the last tensor, 'a'"}},
      {file_of("{}", "x"),
       {"the data section has 1 bytes after the header, which lists no tensor"}},
      {file_of(R"({"a":{)" + u8_2 + R"(,"data_offsets":[0,2]},"a":{)" + u8_2 +
                   R"(,"data_offsets":[0,2]}})",
               "xx"),
       {"key 'a' appears twice in the header"}},
      {one_tensor(R"({"dtype":"U8","dtype":"U8","shape":[],"data_offsets":[0,1]})", "x"),
       {"entry 'a': field 'dtype' appears twice"}},
      {one_tensor(R"({"dtype":"U8","shape":[[[[1]]]],"data_offsets":[0,1]})", "x"),
       {"entry 'a' nests deeper than a safetensors header does"}},
      {file_of(R"({"__metadata__":{"format":"pt","epoch":3}})"),
       {"__metadata__ 'epoch' must be a string", "got 3"}},
      {file_of(R"({"__metadata__":{"k":null}})"), {"__metadata__ 'k' must be a string"}},
      {file_of(R"({"__metadata__":["pt"]})"), {"__metadata__ must be an object of strings"}},
      {file_of(R"({"__metadata__":{},"__metadata__":{}})"),
       {"key '__metadata__' appears twice in the header"}},
      {file_of(R"({"__metadata__":{"k":"v","k":"w"}})"),
       {"entry '__metadata__': field 'k' appears twice"}},
  };
  for (const auto& [bytes, expected] : cases) {
    SCOPED_TRACE(bytes.size() < 300 ? bytes : bytes.substr(0, 16));
    const absl::Status status = parse_error(bytes);
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("in.safetensors: not a valid safetensors file: "));
    for (const std::string& part : expected) EXPECT_THAT(status.message(), HasSubstr(part));
  }
}

std::map<std::string, Tensor> sample_tensors() {
  return {{"w", Tensor::from_doubles(DType::kF32, {2, 2}, {1, -2, 3.5, 0})},
          {"label", Tensor::from_i64({3}, {7, 8, 9})},
          {"half", Tensor::from_doubles(DType::kBF16, {2}, {1.5, -256})},
          {"scalar", Tensor::from_doubles(DType::kF64, {}, {0.125})},
          {"mask", Tensor::from_doubles(DType::kBool, {3}, {1, 0, 1})},
          {"empty", Tensor(TensorType{DType::kI32, {0, 4}})}};
}

TEST(Safetensors, EveryTruncationAndRandomCorruptionGivesAStatusNotACrash) {
  const std::string bytes = serialize_safetensors(sample_tensors(), {{"format", "pt"}});
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_FALSE(parse_safetensors(bytes.substr(0, size), "cut.safetensors").ok()) << size;
  }
  // Flips anywhere, and flips confined to the length and header, where the parser does its work.
  const uint64_t header_end = 8 + header_length_of(bytes);
  std::mt19937 random(7);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string flipped = bytes;
    const size_t span = trial % 2 ? flipped.size() : header_end;
    for (int f = 0; f <= trial % 4; ++f) {
      flipped[random() % span] ^= static_cast<char>(1 + random() % 255);
    }
    absl::StatusOr<SafetensorsFile> file = parse_safetensors(flipped, "flipped.safetensors");
    if (file.ok()) {
      for (const auto& [name, tensor] : file->tensors) {
        EXPECT_EQ(static_cast<size_t>(tensor.type().byte_size()), tensor.bytes().size());
      }
    }
  }
  // Headers of random printable JSON-ish characters.
  const std::string alphabet = R"({}[]":,0123456789-.eE truenlfas\u__metadata__dtypeshapeF32)";
  for (int trial = 0; trial < 20000; ++trial) {
    std::string header = "{";
    const size_t length = random() % 64;
    for (size_t i = 0; i < length; ++i) header += alphabet[random() % alphabet.size()];
    (void)parse_safetensors(file_of(header, "xxxx"), "random.safetensors");
  }
}

TEST(Safetensors, WriteThenReadGivesTheSerializedBytesAndTheTensors) {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  ASSERT_TRUE(write_safetensors(path.string(), sample_tensors(), metadata).ok());
  EXPECT_EQ(file_bytes(path), serialize_safetensors(sample_tensors(), metadata));
  absl::StatusOr<SafetensorsFile> back = read_safetensors(path.string());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensors, sample_tensors());
  EXPECT_EQ(back->metadata, metadata);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
}

TEST(Safetensors, ReadErrorsNameThePath) {
  TempDir dir;
  const std::string missing = (dir.path / "missing.safetensors").string();
  absl::StatusOr<SafetensorsFile> file = read_safetensors(missing);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr(missing));

  EXPECT_THAT(read_safetensors(dir.path.string()).status().message(), HasSubstr("directory"));

  // Cut at every length, on disk: the reader reads in pieces, so each piece can come short.
  const std::string bytes = serialize_safetensors(sample_tensors());
  const fs::path cut = dir.path / "cut.safetensors";
  for (size_t size = 0; size < bytes.size(); ++size) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << bytes.substr(0, size);
    file = read_safetensors(cut.string());
    ASSERT_FALSE(file.ok()) << size;
    EXPECT_THAT(file.status().message(),
                HasSubstr(cut.string() + ": not a valid safetensors file: "));
  }
}

TEST(Safetensors, WritingIntoAMissingFolderFailsAndLeavesNothing) {
  TempDir dir;
  const fs::path path = dir.path / "no_such_folder" / "model.safetensors";
  const absl::Status status = write_safetensors(path.string(), sample_tensors());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path.string()));
  EXPECT_FALSE(fs::exists(path.parent_path()));
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(Safetensors, AnExistingFileIsReplacedWholeByRename) {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  const fs::path old_link = dir.path / "old.safetensors";
  const std::map<std::string, Tensor> before = {{"x", Tensor::from_f32({3}, {1, 2, 3})}};
  ASSERT_TRUE(write_safetensors(path.string(), before).ok());
  // A hard link keeps the old file's inode: a writer that truncated and rewrote in place would
  // change what it reads; one that renames a new file into place leaves it alone.
  fs::create_hard_link(path, old_link);
  ASSERT_TRUE(write_safetensors(path.string(), sample_tensors()).ok());
  EXPECT_EQ(file_bytes(old_link), serialize_safetensors(before));
  EXPECT_EQ(file_bytes(path), serialize_safetensors(sample_tensors()));
  // No temporary file is left beside them.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);
}

TEST(Safetensors, UnwritableTensorsAreErrorsThatLeaveTheOldFile) {
  TempDir dir;
  const fs::path path = dir.path / "model.safetensors";
  ASSERT_TRUE(write_safetensors(path.string(), sample_tensors()).ok());
  const std::string old_bytes = file_bytes(path);
  const Tensor x = Tensor::from_f32({1}, {1});
  const struct {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::string> metadata;
    std::string expected;
  } cases[] = {
      {{{"__metadata__", x}}, {}, "no tensor may be named '__metadata__'"},
      {{{"bad\xff", x}}, {}, "tensor name 'bad\xff' is not valid UTF-8"},
      {{{"over\xc0\xaf", x}}, {}, "tensor name 'over\xc0\xaf' is not valid UTF-8"},
      {{{"w", Tensor::elided(TensorType{DType::kF32, {4}})}}, {}, "tensor 'w' has no data"},
      {{{"w", x}}, {{"note", "\xe2\x82"}}, "metadata 'note' is not valid UTF-8"},
  };
  for (const auto& [tensors, metadata, expected] : cases) {
    SCOPED_TRACE(expected);
    const absl::Status status = write_safetensors(path.string(), tensors, metadata);
    EXPECT_THAT(status.message(), HasSubstr("cannot write '" + path.string() + "': " + expected));
    EXPECT_EQ(file_bytes(path), old_bytes);
  }
}

}  // namespace
}  // namespace ampc::runtime
