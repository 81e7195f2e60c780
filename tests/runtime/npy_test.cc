// .npy reading and writing: files numpy wrote (tests/data/npy, made by make_fixtures.py) read to
// the values numpy was given; every dtype round-trips; malformed files give a Status naming the
// file, never a crash.
#include "runtime/npy.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "ampc/float_types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

Tensor read_fixture(const std::string& name, NpyReadOptions options = {}) {
  absl::StatusOr<Tensor> tensor = read_npy(testing::source_path("tests/data/npy/" + name), options);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return tensor.ok() ? *std::move(tensor) : Tensor();
}

template <typename T>
std::vector<T> values(const Tensor& tensor) {
  std::span<const T> data = tensor.data<T>();
  return {data.begin(), data.end()};
}

std::vector<uint16_t> bits16(const Tensor& tensor) { return values<uint16_t>(tensor); }

// An .npy file with header dict `dict` (padded as numpy pads it) followed by `data`.
std::string make_npy(std::string_view dict, std::string_view data, int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  std::string header(dict);
  header += std::string(63 - (prefix + header.size()) % 64, ' ') + "\n";
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(version);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data);
}

TEST(Npy, ReadsEveryDtypeNumpyWrites) {
  Tensor f4 = read_fixture("f4.npy");
  EXPECT_EQ(f4.type(), (TensorType{DType::kF32, {2, 3}}));
  EXPECT_THAT(values<float>(f4), ElementsAre(1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -INFINITY));
  Tensor f8 = read_fixture("f8.npy");
  EXPECT_EQ(f8.type(), (TensorType{DType::kF64, {3}}));
  EXPECT_THAT(values<double>(f8), ElementsAre(0.1, -1e300, 2.5));
  Tensor f2 = read_fixture("f2.npy");
  EXPECT_EQ(f2.type(), (TensorType{DType::kF16, {4}}));
  EXPECT_THAT(bits16(f2), ElementsAre(0x3c00, 0xb800, 0x7bff, 0x0001));  // 1, -0.5, 65504, 2^-24
  Tensor i8 = read_fixture("i8.npy");
  EXPECT_EQ(i8.type(), (TensorType{DType::kI64, {3}}));
  EXPECT_THAT(values<int64_t>(i8), ElementsAre(INT64_MIN, 0, INT64_MAX));
  Tensor i4 = read_fixture("i4.npy");
  EXPECT_EQ(i4.type(), (TensorType{DType::kI32, {2, 1}}));
  EXPECT_THAT(values<int32_t>(i4), ElementsAre(-7, 123456));
  EXPECT_THAT(values<int8_t>(read_fixture("i1.npy")), ElementsAre(-128, 127, 0));
  EXPECT_THAT(values<uint8_t>(read_fixture("u1.npy")), ElementsAre(0, 200, 255));
  Tensor b1 = read_fixture("b1.npy");
  EXPECT_EQ(b1.dtype(), DType::kBool);
  EXPECT_THAT(values<uint8_t>(b1), ElementsAre(1, 0, 1));
}

TEST(Npy, MlDtypesBfloat16IsReadOnlyWhereBf16IsExpected) {
  const std::string path = testing::source_path("tests/data/npy/bf16.npy");
  absl::StatusOr<Tensor> undeclared = read_npy(path);
  ASSERT_FALSE(undeclared.ok());
  EXPECT_THAT(undeclared.status().message(), HasSubstr("bf16.npy"));
  EXPECT_THAT(undeclared.status().message(), HasSubstr("'<V2'"));
  Tensor bf16 = read_fixture("bf16.npy", {.void2_as_bf16 = true});
  EXPECT_EQ(bf16.type(), (TensorType{DType::kBF16, {3}}));
  EXPECT_THAT(bits16(bf16), ElementsAre(0x3f80, 0xc049, 0x4380));  // 1, -3.140625, 256
}

TEST(Npy, BigEndianDataIsConverted) {
  EXPECT_THAT(values<float>(read_fixture("f4_big_endian.npy")), ElementsAre(1.5f, -2.0f));
  EXPECT_THAT(values<int64_t>(read_fixture("i8_big_endian.npy")), ElementsAre(1, -2, 258));
  EXPECT_THAT(bits16(read_fixture("f2_big_endian.npy")), ElementsAre(0x3c00, 0xb800));
}

TEST(Npy, FortranOrderIsConvertedToCOrder) {
  // np.asfortranarray(np.arange(n).reshape(shape)): in C order the values count up.
  Tensor f4 = read_fixture("f4_fortran.npy");
  EXPECT_EQ(f4.type(), (TensorType{DType::kF32, {2, 3}}));
  EXPECT_THAT(values<float>(f4), ElementsAre(0, 1, 2, 3, 4, 5));
  Tensor i4 = read_fixture("i4_fortran_3d.npy");
  EXPECT_EQ(i4.type(), (TensorType{DType::kI32, {2, 3, 4}}));
  std::vector<int32_t> ramp(24);
  for (int i = 0; i < 24; ++i) ramp[i] = i;
  EXPECT_THAT(values<int32_t>(i4), ElementsAreArray(ramp));
}

TEST(Npy, ReadsScalarsEmptyArraysAndLaterFormatVersions) {
  Tensor scalar = read_fixture("scalar.npy");
  EXPECT_EQ(scalar.type(), (TensorType{DType::kF64, {}}));
  EXPECT_THAT(values<double>(scalar), ElementsAre(2.5));
  EXPECT_EQ(read_fixture("empty.npy").type(), (TensorType{DType::kF32, {0, 3}}));
  EXPECT_THAT(values<int32_t>(read_fixture("version2.npy")), ElementsAre(7, 8));
  EXPECT_THAT(values<int32_t>(read_fixture("version3.npy")), ElementsAre(7, 8));
}

TEST(Npy, EveryDtypeRoundTrips) {
  const std::vector<double> samples = {1.5, -2.0, 0.0, 3.0, 100.0, -0.25};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI64, DType::kI32,
                      DType::kI8, DType::kU8, DType::kBool}) {
    for (const Shape& shape : {Shape{2, 3}, Shape{6}, Shape{1, 2, 1, 3}}) {
      SCOPED_TRACE(type_to_string({dtype, shape}));
      std::vector<double> given = samples;
      if (dtype == DType::kU8) given[1] = 2.0;
      if (dtype == DType::kBool) given = {1, 0, 0, 1, 1, 0};
      const Tensor tensor = Tensor::from_doubles(dtype, shape, given);
      absl::StatusOr<Tensor> back =
          parse_npy(serialize_npy(tensor), "memory", {.void2_as_bf16 = true});
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, tensor);
    }
  }
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{4, 0, 2}}) {
    const Tensor tensor(TensorType{DType::kF32, shape});
    absl::StatusOr<Tensor> back = parse_npy(serialize_npy(tensor), "memory");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, tensor);
  }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  const std::string bytes = serialize_npy(Tensor(TensorType{DType::kF32, {2, 3}}));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_size = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_size) % 64, 0u);  // the data starts 64-aligned
  EXPECT_EQ(bytes.size(), 10 + header_size + 24);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes[10 + header_size - 1], '\n');
  EXPECT_THAT(serialize_npy(Tensor(TensorType{DType::kI8, {5}})), HasSubstr("'|i1'"));
  EXPECT_THAT(serialize_npy(Tensor(TensorType{DType::kI8, {5}})), HasSubstr("(5,)"));
  EXPECT_THAT(serialize_npy(Tensor(TensorType{DType::kBool, {}})), HasSubstr("'shape': ()"));
  EXPECT_THAT(serialize_npy(Tensor(TensorType{DType::kBF16, {1}})), HasSubstr("'<V2'"));
}

TEST(Npy, HeaderOver64KiBUsesVersion2) {
  const Tensor tensor(TensorType{DType::kU8, Shape(30000, 1)});  // "1, " x 30000
  const std::string bytes = serialize_npy(tensor);
  EXPECT_EQ(bytes[6], 2);
  EXPECT_EQ(bytes.size() % 64, 1u);  // 64-aligned header, then one byte of data
  absl::StatusOr<Tensor> back = parse_npy(bytes, "memory");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, tensor);
}

class NpyFileTest : public testing::TempDirTest {
 protected:
  NpyFileTest() : TempDirTest("ampc_npy_") {}
};

TEST_F(NpyFileTest, WriteThenReadGivesTheSameTensorAndLeavesNoTemporaryFile) {
  const Tensor tensor = Tensor::from_doubles(DType::kF16, {2, 2}, {1, 65520, -0.5, 1e-8});
  ASSERT_TRUE(write_npy(path("a.npy"), tensor).ok());
  ASSERT_TRUE(write_npy(path("a.npy"), tensor).ok());  // replaces the file
  absl::StatusOr<Tensor> back = read_npy(path("a.npy"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, tensor);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(NpyFileTest, UnwritableOrMissingPathsNameThePath) {
  absl::Status status = write_npy(path("no/such/dir/a.npy"), Tensor(TensorType{DType::kF32, {1}}));
  EXPECT_THAT(status.message(), HasSubstr("a.npy"));
  EXPECT_TRUE(fs::is_empty(dir_));
  absl::StatusOr<Tensor> missing = read_npy(path("missing.npy"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("missing.npy"));
  absl::StatusOr<Tensor> folder = read_npy(dir_.string());
  ASSERT_FALSE(folder.ok());
  EXPECT_THAT(folder.status().message(), HasSubstr("is a directory"));
}

constexpr std::string_view kF4Dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";

TEST(Npy, MalformedFilesAreErrorsThatSayWhatIsWrong) {
  const std::string eight(8, '\0');
  const struct {
    std::string bytes;
    std::string expected;
  } cases[] = {
      {"PK\x03\x04 not npy", "not a .npy file"},
      {std::string("\x93NUMPY\x04\x00", 8) + eight, "version 4.0 is not supported"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 18), "header is truncated"},
      {make_npy("[1, 2]", eight), "header is not a dict"},
      {make_npy("{'descr': '<f4', 'shape': (2,)}", eight), "no 'fortran_order' key"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", eight),
       "unexpected header key 'x'"},
      {make_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", eight),
       "'descr' appears twice"},
      {make_npy("{'descr': '<i2', 'fortran_order': False, 'shape': (4,), }", eight),
       "dtype '<i2' is not supported"},
      {make_npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", eight),
       "dtype '|O' is not supported"},
      {make_npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", eight),
       "structured dtypes"},
      {make_npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", eight),
       "'fortran_order' is not True/False"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", eight),
       "non-negative ints"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': 2, }", eight),
       "'shape' is not a tuple"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
                eight),
       "too large"},
      {make_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (92233720368547758080,), }",
                eight),
       "integer too large"},
      {make_npy(
           "{'descr': '<f4', 'fortran_order': False, 'shape': ((((((((((2,),),),),),),),),),),}",
           eight),
       "nested too deeply"},
      {make_npy("{'descr': '<f4', 'fortran_order': Flase, 'shape': (2,), }", eight),
       "unknown name 'Flase'"},
      {make_npy("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", eight),
       "not a Python dict literal"},
      {make_npy(kF4Dict, eight.substr(0, 7)), "needs 8 bytes, the file has 7"},
      {make_npy(kF4Dict, eight + "x"), "1 bytes follow the array data"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expected);
    absl::StatusOr<Tensor> tensor = parse_npy(c.bytes, "bad.npy");
    ASSERT_FALSE(tensor.ok());
    EXPECT_THAT(tensor.status().message(), HasSubstr("bad.npy: "));
    EXPECT_THAT(tensor.status().message(), HasSubstr(c.expected));
  }
  // The same dict, well formed, reads (so the cases above fail for the stated reason).
  EXPECT_TRUE(parse_npy(make_npy(kF4Dict, eight), "good.npy").ok());
  EXPECT_TRUE(parse_npy(make_npy(kF4Dict, eight, 2), "good.npy").ok());
}

TEST(Npy, EveryTruncationAndRandomByteFlipsGiveAStatusNotACrash) {
  for (const char* name : {"f4.npy", "f4_fortran.npy", "scalar.npy"}) {
    std::ifstream in(testing::source_path(std::string("tests/data/npy/") + name), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(bytes.empty());
    for (size_t size = 0; size < bytes.size(); ++size) {
      EXPECT_FALSE(parse_npy(bytes.substr(0, size), "cut.npy").ok()) << size;
    }
    std::mt19937 random(1234);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string flipped = bytes;
      const int flips = 1 + trial % 3;
      for (int f = 0; f < flips; ++f) {
        flipped[random() % flipped.size()] ^= static_cast<char>(1 + random() % 255);
      }
      absl::StatusOr<Tensor> tensor = parse_npy(flipped, "flipped.npy");
      if (tensor.ok()) {
        EXPECT_EQ(static_cast<size_t>(tensor->type().byte_size()), tensor->bytes().size());
      }
    }
  }
}

}  // namespace
}  // namespace ampc::runtime
