// .npz archives: zip files of .npy entries (PKWARE APPNOTE 6.3). Reading follows the central
// directory (it has the sizes even where a local header defers them to a data descriptor);
// writing produces stored entries like np.savez.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "runtime/checksum.h"
#include "runtime/npy.h"

namespace ampc::runtime {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kMax16 = 0xffff;
constexpr uint64_t kMax32 = 0xffffffff;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
// zlib counts in 32-bit units; larger buffers go through in pieces.
constexpr size_t kZlibChunk = size_t{1} << 30;
// Deflate cannot expand data by more than about 1032:1, so a larger claimed size is corrupt (and
// must not be allocated).
constexpr uint64_t kMaxDeflateRatio = 1032;

// Bounds-checked little-endian field reads.
struct Bytes {
  std::string_view data;

  bool has(uint64_t offset, uint64_t size) const {
    return offset <= data.size() && size <= data.size() - offset;
  }
  uint64_t le(uint64_t offset, int size) const {  // callers check has() first
    uint64_t value = 0;
    for (int i = size - 1; i >= 0; --i)
      value = (value << 8) | static_cast<uint8_t>(data[offset + i]);
    return value;
  }
};

struct Entry {
  std::string name;
  uint64_t flags = 0;
  uint64_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_offset = 0;
};

absl::Status corrupt(std::string_view what) {
  return absl::InvalidArgumentError(str_cat("not a valid .npz (zip) archive: ", what));
}

// Replaces the 0xffffffff fields of `entry` by the 8-byte values of its ZIP64 extra field, which
// holds exactly the fields that overflowed, in this order.
absl::Status apply_zip64_extra(std::string_view extra, Entry& entry) {
  const Bytes bytes{extra};
  for (uint64_t pos = 0; bytes.has(pos, 4);) {
    const uint64_t id = bytes.le(pos, 2);
    const uint64_t size = bytes.le(pos + 2, 2);
    pos += 4;
    if (!bytes.has(pos, size)) return corrupt(str_cat("entry '", entry.name, "': bad extra field"));
    if (id == kZip64ExtraId) {
      uint64_t field = pos;
      for (uint64_t* value :
           {&entry.uncompressed_size, &entry.compressed_size, &entry.local_offset}) {
        if (*value != kMax32) continue;
        if (field + 8 > pos + size) {
          return corrupt(str_cat("entry '", entry.name, "': ZIP64 extra field is too short"));
        }
        *value = bytes.le(field, 8);
        field += 8;
      }
    }
    pos += size;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Entry>> read_central_directory(std::string_view data) {
  const Bytes zip{data};
  if (data.size() < kEndSize) return corrupt("too short");
  // The end record is last, unless a comment of up to 64 KiB follows it.
  uint64_t end = 0;
  bool found = false;
  for (uint64_t pos = data.size() - kEndSize; !found; --pos) {
    found = zip.le(pos, 4) == kEndSignature && pos + kEndSize + zip.le(pos + 20, 2) <= data.size();
    if (found) end = pos;
    if (pos == 0 || data.size() - pos >= kEndSize + kMax16) break;
  }
  if (!found) return corrupt("no end of central directory record");
  uint64_t disk = zip.le(end + 4, 2), directory_disk = zip.le(end + 6, 2);
  uint64_t count = zip.le(end + 10, 2);
  uint64_t directory_size = zip.le(end + 12, 4), directory_offset = zip.le(end + 16, 4);
  if (end >= kZip64LocatorSize && zip.le(end - kZip64LocatorSize, 4) == kZip64LocatorSignature) {
    const uint64_t record = zip.le(end - kZip64LocatorSize + 8, 8);
    if (!zip.has(record, kZip64EndSize) || zip.le(record, 4) != kZip64EndSignature) {
      return corrupt("the ZIP64 end of central directory record is missing");
    }
    disk = zip.le(record + 16, 4);
    directory_disk = zip.le(record + 20, 4);
    count = zip.le(record + 32, 8);
    directory_size = zip.le(record + 40, 8);
    directory_offset = zip.le(record + 48, 8);
  }
  if (disk != 0 || directory_disk != 0) return corrupt("multi-part archives are not supported");
  if (!zip.has(directory_offset, directory_size)) {
    return corrupt("the central directory lies outside the file");
  }
  const Bytes directory{data.substr(directory_offset, directory_size)};
  std::vector<Entry> entries;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (!directory.has(pos, kCentralHeaderSize) ||
        directory.le(pos, 4) != kCentralHeaderSignature) {
      return corrupt(str_cat("central directory entry ", i, " of ", count, " is missing"));
    }
    const uint64_t name_size = directory.le(pos + 28, 2);
    const uint64_t extra_size = directory.le(pos + 30, 2);
    const uint64_t comment_size = directory.le(pos + 32, 2);
    if (!directory.has(pos + kCentralHeaderSize, name_size + extra_size + comment_size)) {
      return corrupt(str_cat("central directory entry ", i, " is truncated"));
    }
    Entry entry{.name = std::string(directory.data.substr(pos + kCentralHeaderSize, name_size)),
                .flags = directory.le(pos + 8, 2),
                .method = directory.le(pos + 10, 2),
                .crc = static_cast<uint32_t>(directory.le(pos + 16, 4)),
                .compressed_size = directory.le(pos + 20, 4),
                .uncompressed_size = directory.le(pos + 24, 4),
                .local_offset = directory.le(pos + 42, 4)};
    AMPC_RETURN_IF_ERROR(apply_zip64_extra(
        directory.data.substr(pos + kCentralHeaderSize + name_size, extra_size), entry));
    entries.push_back(std::move(entry));
    pos += kCentralHeaderSize + name_size + extra_size + comment_size;
  }
  return entries;
}

// Raw deflate (no zlib header) of exactly `size` bytes.
absl::StatusOr<std::string> inflate_entry(std::string_view in, uint64_t size,
                                          std::string_view name) {
  if (size > in.size() * kMaxDeflateRatio + 1024) {
    return corrupt(
        str_cat("entry '", name, "' claims ", size, " bytes from ", in.size(), " compressed"));
  }
  z_stream stream{};
  if (inflateInit2(&stream, -15) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
  // Grown as it fills, so a size the data does not back is never allocated in full.
  std::string out(std::min<uint64_t>(size, in.size() * 4 + 4096), '\0');
  size_t in_pos = 0, out_pos = 0;
  int result = Z_OK;
  while (result == Z_OK) {
    if (out_pos == out.size() && out.size() < size) {
      out.resize(std::min<uint64_t>(size, out.size() * 2));
    }
    const size_t in_chunk = std::min(kZlibChunk, in.size() - in_pos);
    const size_t out_chunk = std::min(kZlibChunk, out.size() - out_pos);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_pos));
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + out_pos);
    stream.avail_out = static_cast<uInt>(out_chunk);
    result = inflate(&stream, Z_NO_FLUSH);
    in_pos += in_chunk - stream.avail_in;
    out_pos += out_chunk - stream.avail_out;
  }
  const std::string zlib_message = stream.msg != nullptr ? stream.msg : "";
  inflateEnd(&stream);
  if (result != Z_STREAM_END || out_pos != size) {  // too short, too long, or corrupt
    return corrupt(str_cat("entry '", name, "' does not inflate to the ", size,
                           " bytes the directory gives",
                           zlib_message.empty() ? "" : str_cat(" (", zlib_message, ")")));
  }
  return out;
}

// The uncompressed bytes of `entry`, CRC-checked.
absl::StatusOr<std::string> entry_bytes(std::string_view data, const Entry& entry) {
  const Bytes zip{data};
  const std::string_view name = entry.name;
  if (entry.flags & 1) return corrupt(str_cat("entry '", name, "' is encrypted"));
  if (!zip.has(entry.local_offset, kLocalHeaderSize) ||
      zip.le(entry.local_offset, 4) != kLocalHeaderSignature) {
    return corrupt(str_cat("entry '", name, "' has no local header"));
  }
  const uint64_t start = entry.local_offset + kLocalHeaderSize +
                         zip.le(entry.local_offset + 26, 2) + zip.le(entry.local_offset + 28, 2);
  if (!zip.has(start, entry.compressed_size)) {
    return corrupt(str_cat("entry '", name, "' runs past the end of the file"));
  }
  const std::string_view stored = data.substr(start, entry.compressed_size);
  std::string bytes;
  if (entry.method == 0) {
    if (entry.compressed_size != entry.uncompressed_size) {
      return corrupt(str_cat("stored entry '", name, "' has different sizes"));
    }
    bytes = std::string(stored);
  } else if (entry.method == 8) {
    AMPC_ASSIGN_OR_RETURN(bytes, inflate_entry(stored, entry.uncompressed_size, name));
  } else {
    return absl::UnimplementedError(str_cat("entry '", name, "' uses compression method ",
                                            entry.method, " (stored and deflate are supported)"));
  }
  if (crc32_of(bytes) != entry.crc) {
    return corrupt(str_cat("entry '", name, "' fails its CRC-32 check"));
  }
  return bytes;
}

void append_le(std::string& out, uint64_t value, int size) {
  for (int i = 0; i < size; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// The archive np.savez would write, as pieces that point into `arrays` (so a large tensor is not
// copied) and into `owned`.
std::vector<std::span<const uint8_t>> npz_pieces(const std::map<std::string, Tensor>& arrays,
                                                 const NpzWriteOptions& options,
                                                 std::deque<std::string>& owned) {
  constexpr uint64_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, time 00:00
  constexpr uint64_t kUtf8NameFlag = 1 << 11;
  constexpr uint64_t kZip64Version = 45, kPlainVersion = 20, kUnixHost = 3;
  const bool force = options.force_zip64;
  std::vector<std::span<const uint8_t>> pieces;
  std::string& directory = owned.emplace_back();
  uint64_t offset = 0;
  for (const auto& [key, tensor] : arrays) {
    const std::string name = key + ".npy";
    const std::string& header = owned.emplace_back(npy_header(tensor));
    const std::span<const uint8_t> data = tensor.bytes();
    const uint64_t size = header.size() + data.size();
    const uint32_t crc = crc32_of(data, crc32_of(header));
    const bool utf8 = std::any_of(name.begin(), name.end(), [](char c) { return c & 0x80; });
    const bool big_size = force || size >= kMax32;
    const bool big_offset = force || offset >= kMax32;
    const uint64_t version = big_size || big_offset ? kZip64Version : kPlainVersion;

    std::string& local = owned.emplace_back();
    append_le(local, kLocalHeaderSignature, 4);
    for (uint64_t field : {version, utf8 ? kUtf8NameFlag : 0, uint64_t{0}, uint64_t{0}, kDosDate}) {
      append_le(local, field, 2);
    }
    append_le(local, crc, 4);
    append_le(local, big_size ? kMax32 : size, 4);
    append_le(local, big_size ? kMax32 : size, 4);
    append_le(local, name.size(), 2);
    append_le(local, big_size ? 20 : 0, 2);
    local += name;
    if (big_size) {  // the local ZIP64 field always holds both sizes
      append_le(local, kZip64ExtraId, 2);
      append_le(local, 16, 2);
      append_le(local, size, 8);
      append_le(local, size, 8);
    }
    pieces.insert(pieces.end(), {byte_span(local), byte_span(header), data});

    std::string extra;
    if (big_size || big_offset) {
      append_le(extra, kZip64ExtraId, 2);
      append_le(extra, (big_size ? 16 : 0) + (big_offset ? 8 : 0), 2);
      if (big_size) {
        append_le(extra, size, 8);
        append_le(extra, size, 8);
      }
      if (big_offset) append_le(extra, offset, 8);
    }
    append_le(directory, kCentralHeaderSignature, 4);
    append_le(directory, (kUnixHost << 8) | version, 2);
    for (uint64_t field : {version, utf8 ? kUtf8NameFlag : 0, uint64_t{0}, uint64_t{0}, kDosDate}) {
      append_le(directory, field, 2);
    }
    append_le(directory, crc, 4);
    append_le(directory, big_size ? kMax32 : size, 4);
    append_le(directory, big_size ? kMax32 : size, 4);
    for (uint64_t field :
         {uint64_t{name.size()}, uint64_t{extra.size()}, uint64_t{0}, uint64_t{0}, uint64_t{0}}) {
      append_le(directory, field, 2);  // name, extra, comment sizes; disk; internal attributes
    }
    append_le(directory, uint64_t{0100644} << 16, 4);  // a regular file, rw-r--r--
    append_le(directory, big_offset ? kMax32 : offset, 4);
    directory += name;
    directory += extra;
    offset += local.size() + size;
  }
  const uint64_t count = arrays.size();
  const bool zip64_end = force || count >= kMax16 || offset >= kMax32 || directory.size() >= kMax32;
  std::string& end = owned.emplace_back();
  if (zip64_end) {
    append_le(end, kZip64EndSignature, 4);
    append_le(end, kZip64EndSize - 12, 8);  // the record's size after this field
    append_le(end, (kUnixHost << 8) | kZip64Version, 2);
    append_le(end, kZip64Version, 2);
    append_le(end, 0, 4);  // this disk
    append_le(end, 0, 4);  // the directory's disk
    for (uint64_t field : {count, count, uint64_t{directory.size()}, offset}) {
      append_le(end, field, 8);
    }
    append_le(end, kZip64LocatorSignature, 4);
    append_le(end, 0, 4);
    append_le(end, offset + directory.size(), 8);
    append_le(end, 1, 4);  // disks in all
  }
  append_le(end, kEndSignature, 4);
  append_le(end, 0, 4);  // this disk, the directory's disk
  append_le(end, zip64_end ? kMax16 : count, 2);
  append_le(end, zip64_end ? kMax16 : count, 2);
  append_le(end, zip64_end ? kMax32 : directory.size(), 4);
  append_le(end, zip64_end ? kMax32 : offset, 4);
  append_le(end, 0, 2);  // comment size
  pieces.push_back(byte_span(directory));
  pieces.push_back(byte_span(end));
  return pieces;
}

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> parse_npz(std::string_view bytes,
                                                        std::string_view source,
                                                        const NpyReadOptions& options) {
  absl::StatusOr<std::vector<Entry>> entries = read_central_directory(bytes);
  if (!entries.ok()) {
    return absl::Status(entries.status().code(), str_cat(source, ": ", entries.status().message()));
  }
  std::map<std::string, Tensor> arrays;
  for (const Entry& entry : *entries) {
    if (!entry.name.empty() && entry.name.back() == '/') continue;  // a folder
    std::string key = entry.name;
    if (key.ends_with(".npy")) key.resize(key.size() - 4);
    if (arrays.contains(key)) {
      return absl::InvalidArgumentError(str_cat(source, ": array '", key, "' appears twice"));
    }
    absl::StatusOr<std::string> data = entry_bytes(bytes, entry);
    if (!data.ok()) {
      return absl::Status(data.status().code(), str_cat(source, ": ", data.status().message()));
    }
    AMPC_ASSIGN_OR_RETURN(Tensor tensor,
                          parse_npy(*data, str_cat(source, " (array '", key, "')"), options));
    arrays.emplace(std::move(key), std::move(tensor));
  }
  return arrays;
}

absl::StatusOr<std::map<std::string, Tensor>> read_npz(const std::string& path,
                                                       const NpyReadOptions& options) {
  AMPC_ASSIGN_OR_RETURN(const std::string bytes, read_regular_file(path));
  return parse_npz(bytes, path, options);
}

std::string serialize_npz(const std::map<std::string, Tensor>& arrays,
                          const NpzWriteOptions& options) {
  std::deque<std::string> owned;
  std::string out;
  for (std::span<const uint8_t> piece : npz_pieces(arrays, options, owned)) {
    out.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  return out;
}

absl::Status write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays,
                       const NpzWriteOptions& options) {
  std::deque<std::string> owned;
  const std::vector<std::span<const uint8_t>> pieces = npz_pieces(arrays, options, owned);
  return write_file_atomically(path, pieces);
}

}  // namespace ampc::runtime
