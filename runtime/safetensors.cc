// safetensors reading and writing (the format and what is checked: runtime/safetensors.h). The
// header is read with nlohmann's SAX interface one top-level entry at a time (HeaderReader) and
// each entry is checked as it completes; the byte ranges are then checked against each other and
// the data section as a whole (check_layout). Files are written through compiler/file_util.h's
// atomic writer.
#include "runtime/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/file_util.h"
#include "compiler/strings.h"

namespace ampc::runtime {

static_assert(std::endian::native == std::endian::little,
              "safetensors.cc copies tensor bytes as little-endian data");

namespace {

using nlohmann::json;

constexpr uint64_t kLengthSize = 8;
// The reference implementation refuses larger headers; real ones are at most a few MB. A bound
// also keeps a corrupt length from allocating a buffer the file cannot fill.
constexpr uint64_t kMaxHeaderSize = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  std::string_view name;
  DType dtype;
};
// The format's names for the element types ampc has. (Its I16, U16, U32, U64, F8_E8M0, ... have no
// ampc DType, so they are read as unknown names.)
constexpr DTypeName kDTypeNames[] = {
    {"F64", DType::kF64},        {"F32", DType::kF32},
    {"F16", DType::kF16},        {"BF16", DType::kBF16},
    {"I64", DType::kI64},        {"I32", DType::kI32},
    {"I8", DType::kI8},          {"U8", DType::kU8},
    {"BOOL", DType::kBool},      {"F8_E4M3", DType::kF8E4M3FN},
    {"F8_E5M2", DType::kF8E5M2},
};

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  AMPC_CHECK(false && "every DType has a safetensors name");
  return {};
}

absl::Status invalid(const std::string& what) { return absl::InvalidArgumentError(what); }

// One tensor as the header describes it.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) within the data section
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorInfo> tensors;  // in data order once check_layout has run
  std::map<std::string, std::string> metadata;
};

// A JSON value for a message, shortened so that a message stays short whatever the file holds.
std::string describe(const json& value) {
  std::string text = value.dump();
  constexpr size_t kMaxLength = 40;
  if (text.size() > kMaxLength) text = str_cat(text.substr(0, kMaxLength), "...");
  return text;
}

absl::StatusOr<Shape> read_shape(const json& shape) {
  if (!shape.is_array()) return invalid(str_cat("shape must be an array, got ", describe(shape)));
  Shape dims;
  for (const json& dim : shape) {
    if (dim.is_number_unsigned() && dim.get<uint64_t>() <= uint64_t{INT64_MAX}) {
      dims.push_back(dim.get<int64_t>());
    } else if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return invalid(str_cat("shape has the negative dimension ", describe(dim)));
    } else {
      return invalid(str_cat("shape must hold non-negative integers, got ", describe(dim)));
    }
  }
  return dims;
}

absl::StatusOr<TensorInfo> read_tensor_info(const std::string& name, const json& entry) {
  const std::string tensor = str_cat("tensor '", name, "'");
  if (!entry.is_object()) {
    return invalid(str_cat(tensor, ": expected an object of dtype, shape and data_offsets, got ",
                           describe(entry)));
  }
  // Unknown fields are rejected rather than skipped: a writer that added one (a byte order, a
  // stride) would mean something this reader does not do.
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return invalid(str_cat(tensor, ": unknown field '", key, "'"));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) return invalid(str_cat(tensor, ": missing field '", field, "'"));
  }
  TensorInfo info;
  info.name = name;

  const json& dtype = entry.at("dtype");
  if (!dtype.is_string()) {
    return invalid(str_cat(tensor, ": dtype must be a string, got ", describe(dtype)));
  }
  const std::string& dtype_name = dtype.get_ref<const std::string&>();
  const auto known = std::find_if(std::begin(kDTypeNames), std::end(kDTypeNames),
                                  [&](const DTypeName& d) { return d.name == dtype_name; });
  if (known == std::end(kDTypeNames)) {
    std::vector<std::string_view> names;
    for (const DTypeName& supported : kDTypeNames) names.push_back(supported.name);
    return invalid(str_cat(tensor, ": dtype ", describe(dtype), " is not supported (ampc reads ",
                           str_join(names, ", "), ")"));
  }
  info.dtype = known->dtype;

  absl::StatusOr<Shape> shape = read_shape(entry.at("shape"));
  if (!shape.ok()) return invalid(str_cat(tensor, ": ", shape.status().message()));
  info.shape = *std::move(shape);

  const json& offsets = entry.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return invalid(str_cat(tensor, ": data_offsets must be [begin, end], two non-negative ",
                           "integers, got ", describe(offsets)));
  }
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  const std::string range = str_cat("data_offsets [", info.begin, ", ", info.end, "]");
  if (info.end < info.begin) return invalid(str_cat(tensor, ": ", range, " end before they begin"));

  // Element count and byte size, overflow-checked: a corrupt shape must not wrap around to a size
  // that happens to match.
  int64_t bytes = dtype_size(info.dtype);
  for (int64_t dim : info.shape) {
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return invalid(str_cat(tensor, ": shape ", shape_to_string(info.shape),
                             " holds more bytes than fit in 64 bits"));
    }
  }
  if (info.end - info.begin != static_cast<uint64_t>(bytes)) {
    return invalid(str_cat(tensor, ": ", range, " hold ", info.end - info.begin, " bytes, but ",
                           known->name, " ", shape_to_string(info.shape), " needs ", bytes));
  }
  return info;
}

absl::Status read_metadata(const json& entry, std::map<std::string, std::string>& metadata) {
  if (!entry.is_object()) {
    return invalid(str_cat("__metadata__ must be an object of strings, got ", describe(entry)));
  }
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return invalid(str_cat("__metadata__ '", key,
                             "' must be a string (the format allows only strings), got ",
                             describe(value)));
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return absl::OkStatus();
}

// Reads the header through nlohmann's SAX interface rather than its DOM parser, for two reasons.
// The DOM parser keeps the last of duplicate keys without a word; the spec forbids duplicates,
// and readers that silently chose different ones would disagree about what a file holds. And one
// DOM of the whole header would let a 100 MB header of empty objects take gigabytes before
// anything was checked. So each top-level entry is built alone, with bounded nesting, checked as
// soon as it is complete, and dropped.
class HeaderReader : public nlohmann::json_sax<json> {
 public:
  bool null() override { return add(nullptr); }
  bool boolean(bool value) override { return add(value); }
  bool number_integer(number_integer_t value) override { return add(value); }
  bool number_unsigned(number_unsigned_t value) override { return add(value); }
  bool number_float(number_float_t value, const string_t& /*text*/) override { return add(value); }
  bool string(string_t& value) override { return add(std::move(value)); }
  bool binary(binary_t& /*value*/) override { return fail("binary values are not JSON"); }
  bool start_object(std::size_t /*size*/) override { return open(json::object()); }
  bool start_array(std::size_t /*size*/) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& key) override {
    if (depth_ == 1) {  // a tensor name, or __metadata__
      if (!names_.insert(key).second) {
        return fail(str_cat("key '", key, "' appears twice in the header"));
      }
      name_ = key;
    } else {
      if (stack_.back()->contains(key)) {
        return fail(str_cat("entry '", name_, "': field '", key, "' appears twice"));
      }
      key_ = key;
    }
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::json::exception& error) override {
    // nlohmann's message starts with its own error id, "[json.exception.parse_error.101] ".
    std::string_view message = error.what();
    if (const size_t id_end = message.find("] "); id_end != std::string_view::npos) {
      message.remove_prefix(id_end + 2);
    }
    return fail(str_cat("the header is not valid JSON: ", message));
  }

  // The header once sax_parse has returned `parsed`.
  absl::StatusOr<Header> finish(bool parsed) && {
    if (!status_.ok()) return status_;
    if (!parsed || depth_ != 0) return invalid("the header is not a complete JSON object");
    return std::move(header_);
  }

 private:
  // Every valid header nests three deep: the header, a tensor, its shape. One more level lets a
  // misshapen shape get its own message; anything deeper is rejected before it is built.
  static constexpr int kMaxDepth = 4;

  bool fail(const std::string& what) {
    if (status_.ok()) status_ = invalid(what);
    return false;
  }

  // A scalar: a whole entry (at depth 1) or part of one.
  bool add(json value) {
    if (depth_ == 0) return fail("the header is not a JSON object");
    if (depth_ == 1) {
      entry_ = std::move(value);
      return finish_entry();
    }
    place(std::move(value));
    return true;
  }

  bool open(json container) {
    if (depth_ == 0) {
      if (!container.is_object()) return fail("the header is not a JSON object");
      depth_ = 1;  // the header object itself is never built
      return true;
    }
    if (depth_ == kMaxDepth) {
      return fail(str_cat("entry '", name_, "' nests deeper than a safetensors header does"));
    }
    stack_.push_back(depth_ == 1 ? &(entry_ = std::move(container)) : place(std::move(container)));
    ++depth_;
    return true;
  }

  bool close() {
    --depth_;
    if (depth_ == 0) return true;  // the end of the header
    stack_.pop_back();
    return depth_ > 1 || finish_entry();
  }

  // Puts `value` into the innermost open container of the entry. Containers only receive values
  // while every container inside them is closed, so pointers on the stack stay valid.
  json* place(json value) {
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    return &(parent[key_] = std::move(value));
  }

  bool finish_entry() {
    absl::Status status;
    if (name_ == kMetadataKey) {
      status = read_metadata(entry_, header_.metadata);
    } else {
      absl::StatusOr<TensorInfo> info = read_tensor_info(name_, entry_);
      if (info.ok()) header_.tensors.push_back(*std::move(info));
      status = info.status();
    }
    entry_ = json();
    return status.ok() || fail(std::string(status.message()));
  }

  int depth_ = 0;                // containers open, the header object included
  std::vector<json*> stack_;     // the open containers of the current entry
  std::set<std::string> names_;  // top-level keys seen
  std::string name_;             // the current top-level key
  std::string key_;              // the current key inside the entry
  json entry_;                   // the current entry's value
  Header header_;
  absl::Status status_;
};

// The ranges must tile the data section: in offset order each begins where the last one ended
// (zero-size tensors included), and the last ends at the end of the file. The reference
// implementation checks the same; it also means no byte is read as two tensors.
absl::Status check_layout(std::vector<TensorInfo>& tensors, uint64_t data_size) {
  for (const TensorInfo& info : tensors) {
    if (info.end > data_size) {
      return invalid(str_cat("tensor '", info.name, "': data_offsets [", info.begin, ", ", info.end,
                             "] run past the end of the data section (", data_size, " bytes)"));
    }
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& info : tensors) {
    if (info.begin < covered) {
      return invalid(str_cat("tensor '", info.name, "' (bytes ", info.begin, " to ", info.end,
                             ") overlaps tensor '", previous->name, "' (bytes ", previous->begin,
                             " to ", previous->end, ")"));
    }
    if (info.begin > covered) {
      return invalid(str_cat("bytes ", covered, " to ", info.begin, " of the data section, before ",
                             "tensor '", info.name, "', belong to no tensor (the format allows ",
                             "no holes)"));
    }
    covered = info.end;
    previous = &info;
  }
  if (covered != data_size) {
    return invalid(str_cat("the data section has ", data_size - covered, " bytes after ",
                           previous ? str_cat("the last tensor, '", previous->name, "'")
                                    : std::string("the header, which lists no tensor"),
                           " (the format allows no trailing bytes)"));
  }
  return absl::OkStatus();
}

// The header length the first 8 bytes of a file of `file_size` bytes give, checked against it.
absl::StatusOr<uint64_t> header_length(std::string_view first_bytes, uint64_t file_size) {
  if (file_size < kLengthSize) {
    return invalid(str_cat("the file has ", file_size, " bytes, too few for the 8-byte length"));
  }
  uint64_t length = 0;
  for (int i = static_cast<int>(kLengthSize) - 1; i >= 0; --i) {
    length = (length << 8) | static_cast<uint8_t>(first_bytes[i]);
  }
  if (length > file_size - kLengthSize) {
    return invalid(str_cat("header length ", length, " runs past the end of the file (", file_size,
                           " bytes)"));
  }
  if (length > kMaxHeaderSize) {
    return invalid(str_cat("header length ", length, " is over the format's limit of ",
                           kMaxHeaderSize, " bytes"));
  }
  return length;
}

// The header's tensors, checked against a data section of `data_size` bytes, in data order.
absl::StatusOr<Header> parse_header(std::string_view text, uint64_t data_size) {
  if (text.empty() || text.front() != '{') return invalid("the header does not start with '{'");
  HeaderReader reader;
  const bool parsed = json::sax_parse(text.begin(), text.end(), &reader);
  AMPC_ASSIGN_OR_RETURN(Header header, std::move(reader).finish(parsed));
  AMPC_RETURN_IF_ERROR(check_layout(header.tensors, data_size));
  return header;
}

Tensor make_tensor(const TensorInfo& info, std::vector<uint8_t> bytes) {
  if (info.dtype == DType::kBool) {
    for (uint8_t& byte : bytes) byte = byte != 0;
  }
  return Tensor(TensorType{info.dtype, info.shape}, std::move(bytes));
}

absl::Status not_safetensors(const absl::Status& status, std::string_view source) {
  return absl::Status(status.code(),
                      str_cat(source, ": not a valid safetensors file: ", status.message()));
}

bool is_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<uint8_t>(text[i]);
    size_t length = 1;
    uint32_t code = lead, smallest = 0;
    if (lead >= 0xf0 && lead < 0xf8) {
      length = 4, code = lead & 0x07, smallest = 0x10000;
    } else if (lead >= 0xe0 && lead < 0xf0) {
      length = 3, code = lead & 0x0f, smallest = 0x800;
    } else if (lead >= 0xc0 && lead < 0xe0) {
      length = 2, code = lead & 0x1f, smallest = 0x80;
    } else if (lead >= 0x80) {
      return false;  // a continuation byte, or no UTF-8 lead byte at all
    }
    if (text.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8.
    if (code < smallest || code > 0x10ffff || (code >= 0xd800 && code < 0xe000)) return false;
    i += length;
  }
  return true;
}

// What the header can hold: JSON strings (so UTF-8), no tensor under the metadata key, and data
// behind every tensor.
absl::Status check_writable(const std::map<std::string, Tensor>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) {
      return invalid("no tensor may be named '__metadata__': the format reserves that key");
    }
    if (!is_utf8(name)) return invalid(str_cat("tensor name '", name, "' is not valid UTF-8"));
    if (!tensor.has_data()) return invalid(str_cat("tensor '", name, "' has no data (elided)"));
  }
  for (const auto& [key, value] : metadata) {
    if (!is_utf8(key) || !is_utf8(value)) {
      return invalid(str_cat("metadata '", key, "' is not valid UTF-8"));
    }
  }
  return absl::OkStatus();
}

// The length, the header and its padding: everything before the tensors' bytes, which follow in
// name order. The header is assembled by hand so that its key order is the one the reference
// writer uses (metadata first; dtype, shape, data_offsets), with nlohmann escaping the strings.
std::string safetensors_prefix(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  // serialize_safetensors's documented precondition; write_safetensors reports it as a Status.
  AMPC_CHECK(check_writable(tensors, metadata).ok());
  std::string header = "{";
  if (!metadata.empty()) {
    header += str_cat(json(std::string(kMetadataKey)).dump(), ":", json(metadata).dump());
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const uint64_t size = tensor.bytes().size();
    header += str_cat(header.size() > 1 ? "," : "", json(name).dump(), ":{\"dtype\":\"",
                      safetensors_dtype_name(tensor.dtype()), "\",\"shape\":[",
                      str_join(tensor.shape(), ","), "],\"data_offsets\":[", offset, ",",
                      offset + size, "]}");
    offset += size;
  }
  header += "}";
  // Padding to a multiple of 8 starts the data section 8-byte aligned, so a reader that maps the
  // file can use a tensor in place wherever its offset suits its element size.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string prefix;
  for (size_t i = 0; i < kLengthSize; ++i) prefix += static_cast<char>(header.size() >> (8 * i));
  return prefix + header;
}

bool read_exactly(std::ifstream& in, void* out, uint64_t size) {
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(size));
  return in && static_cast<uint64_t>(in.gcount()) == size;
}

}  // namespace

std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = safetensors_prefix(tensors, metadata);
  for (const auto& [name, tensor] : tensors) {
    out.append(reinterpret_cast<const char*>(tensor.bytes().data()), tensor.bytes().size());
  }
  return out;
}

absl::StatusOr<SafetensorsFile> parse_safetensors(std::string_view bytes, std::string_view source) {
  absl::StatusOr<uint64_t> length = header_length(bytes, bytes.size());
  if (!length.ok()) return not_safetensors(length.status(), source);
  const std::string_view data = bytes.substr(kLengthSize + *length);
  absl::StatusOr<Header> header = parse_header(bytes.substr(kLengthSize, *length), data.size());
  if (!header.ok()) return not_safetensors(header.status(), source);
  SafetensorsFile file;
  file.metadata = std::move(header->metadata);
  for (const TensorInfo& info : header->tensors) {
    const std::string_view slice = data.substr(info.begin, info.end - info.begin);
    file.tensors.emplace(info.name,
                         make_tensor(info, std::vector<uint8_t>(slice.begin(), slice.end())));
  }
  return file;
}

absl::Status write_safetensors(const std::string& path,
                               const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  if (absl::Status status = check_writable(tensors, metadata); !status.ok()) {
    return absl::InvalidArgumentError(str_cat("cannot write '", path, "': ", status.message()));
  }
  const std::string prefix = safetensors_prefix(tensors, metadata);
  if (prefix.size() - kLengthSize > kMaxHeaderSize) {
    return absl::InvalidArgumentError(str_cat("cannot write '", path, "': its header would be ",
                                              prefix.size() - kLengthSize, " bytes, more than the ",
                                              kMaxHeaderSize, " readers accept"));
  }
  std::vector<std::span<const uint8_t>> pieces = {byte_span(prefix)};
  for (const auto& [name, tensor] : tensors) pieces.push_back(tensor.bytes());
  return ampc::write_file_atomically(path, pieces);
}

absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(str_cat("cannot read '", path, "': it is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(str_cat("cannot read '", path, "': ", std::strerror(errno)));
  }
  const absl::Status read_failed =
      absl::InvalidArgumentError(str_cat("cannot read '", path, "': a read failed or came short"));
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0);
  if (!in || end < 0) return read_failed;
  const auto file_size = static_cast<uint64_t>(end);

  char first_bytes[kLengthSize] = {};
  if (file_size >= kLengthSize && !read_exactly(in, first_bytes, kLengthSize)) {
    return read_failed;
  }
  absl::StatusOr<uint64_t> length =
      header_length(std::string_view(first_bytes, kLengthSize), file_size);
  if (!length.ok()) return not_safetensors(length.status(), path);
  std::string text(*length, '\0');
  if (!read_exactly(in, text.data(), text.size())) return read_failed;
  absl::StatusOr<Header> header = parse_header(text, file_size - kLengthSize - *length);
  if (!header.ok()) return not_safetensors(header.status(), path);

  // The tensors are in data order and tile the data section, so the reads are sequential.
  SafetensorsFile file;
  file.metadata = std::move(header->metadata);
  for (const TensorInfo& info : header->tensors) {
    std::vector<uint8_t> bytes(info.end - info.begin);
    if (!read_exactly(in, bytes.data(), bytes.size())) return read_failed;
    file.tensors.emplace(info.name, make_tensor(info, std::move(bytes)));
  }
  return file;
}

}  // namespace ampc::runtime
