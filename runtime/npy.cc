// .npy reading and writing (the format numpy documents in numpy/lib/format.py). Files are written
// through compiler/file_util.h's atomic writer.
#include "runtime/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "compiler/file_util.h"
#include "compiler/strings.h"

namespace ampc::runtime {

static_assert(std::endian::native == std::endian::little,
              "npy.cc copies tensor bytes as little-endian data");

namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);

// A Python literal as numpy writes one in a header: a dict with str keys whose values are strs,
// bools, ints and tuples of ints (lists and None parse too, to give precise errors).
struct PyValue {
  enum class Kind { kString, kInt, kBool, kNone, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string text;               // kString
  int64_t integer = 0;            // kInt
  bool boolean = false;           // kBool
  std::vector<PyValue> items;     // kTuple and kList elements; kDict values
  std::vector<std::string> keys;  // kDict keys, parallel to `items`
};

// Parses the subset of Python literal syntax numpy's headers use. Recursion is bounded, so a
// header of nested brackets is an error, not a stack overflow.
class LiteralParser {
 public:
  explicit LiteralParser(std::string_view text) : text_(text) {}

  absl::StatusOr<PyValue> parse() {
    AMPC_ASSIGN_OR_RETURN(PyValue value, parse_value(0));
    skip_space();
    if (pos_ != text_.size()) return error("unexpected text after the dict");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 8;

  absl::Status error(std::string_view what) const {
    return absl::InvalidArgumentError(str_cat(what, " at header offset ", pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::StatusOr<PyValue> parse_value(int depth) {
    if (depth > kMaxDepth) return error("brackets nested too deeply");
    skip_space();
    if (pos_ == text_.size()) return error("the header ends inside a value");
    const char c = text_[pos_];
    if (c == '\'' || c == '"') return parse_string(c);
    if (c == '(') return parse_sequence(')', PyValue::Kind::kTuple, depth);
    if (c == '[') return parse_sequence(']', PyValue::Kind::kList, depth);
    if (c == '{') return parse_dict(depth);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_int();
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    const std::string_view word = text_.substr(start, pos_ - start);
    PyValue value;
    if (word == "True" || word == "False") {
      value.kind = PyValue::Kind::kBool;
      value.boolean = word == "True";
    } else if (word != "None") {
      pos_ = start;
      return error(word.empty() ? str_cat("unexpected character '", std::string(1, c), "'")
                                : str_cat("unknown name '", word, "'"));
    }
    return value;
  }

  absl::StatusOr<PyValue> parse_string(char quote) {
    PyValue value;
    value.kind = PyValue::Kind::kString;
    ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      value.text += text_[pos_++];
    }
    if (pos_ == text_.size()) return error("unterminated string");
    ++pos_;
    return value;
  }

  absl::StatusOr<PyValue> parse_int() {
    PyValue value;
    value.kind = PyValue::Kind::kInt;
    const bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    const size_t digits_start = pos_;
    uint64_t magnitude = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (magnitude > (uint64_t{INT64_MAX} - digit) / 10) return error("integer too large");
      magnitude = magnitude * 10 + digit;
    }
    if (pos_ == digits_start) return error("'-' without digits");
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;  // Python 2
    value.integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    return value;
  }

  absl::StatusOr<PyValue> parse_sequence(char close, PyValue::Kind kind, int depth) {
    PyValue value;
    value.kind = kind;
    ++pos_;
    bool trailing_comma = false;
    while (!consume(close)) {
      AMPC_ASSIGN_OR_RETURN(PyValue item, parse_value(depth + 1));
      value.items.push_back(std::move(item));
      trailing_comma = consume(',');
      if (!trailing_comma && !consume(close)) {
        return error(str_cat("expected ',' or '", std::string(1, close), "'"));
      }
      if (!trailing_comma) break;
    }
    // `(3)` is the int 3 in Python, not a tuple.
    if (kind == PyValue::Kind::kTuple && value.items.size() == 1 && !trailing_comma) {
      return std::move(value.items[0]);
    }
    return value;
  }

  absl::StatusOr<PyValue> parse_dict(int depth) {
    PyValue value;
    value.kind = PyValue::Kind::kDict;
    ++pos_;
    while (!consume('}')) {
      AMPC_ASSIGN_OR_RETURN(PyValue key, parse_value(depth + 1));
      if (key.kind != PyValue::Kind::kString) return error("a dict key is not a string");
      if (!consume(':')) return error("expected ':' after a dict key");
      AMPC_ASSIGN_OR_RETURN(PyValue item, parse_value(depth + 1));
      value.keys.push_back(std::move(key.text));
      value.items.push_back(std::move(item));
      if (consume(',')) continue;
      if (!consume('}')) return error("expected ',' or '}'");
      break;
    }
    return value;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

struct ElementType {
  DType dtype;
  bool big_endian;
};

constexpr std::string_view kSupportedDescrs =
    "<f4 <f8 <f2 <i8 <i4 |i1 |u1 |b1, and <V2 read as bf16 where bf16 is expected";

absl::StatusOr<ElementType> parse_descr(std::string_view descr, const NpyReadOptions& options) {
  std::string_view code = descr;
  char order = '=';
  if (!code.empty() && std::string_view("<>|=").find(code[0]) != std::string_view::npos) {
    order = code[0];
    code.remove_prefix(1);
  }
  static constexpr std::pair<std::string_view, DType> kCodes[] = {
      {"f2", DType::kF16}, {"f4", DType::kF32},  {"f8", DType::kF64},
      {"i1", DType::kI8},  {"i4", DType::kI32},  {"i8", DType::kI64},
      {"u1", DType::kU8},  {"b1", DType::kBool}, {"?", DType::kBool}};
  for (const auto& [name, dtype] : kCodes) {
    if (code == name) return ElementType{dtype, order == '>'};
  }
  if (code == "V2") {
    if (options.void2_as_bf16) return ElementType{DType::kBF16, order == '>'};
    return absl::InvalidArgumentError(
        str_cat("dtype '", descr,
                "' is raw 2-byte data (how np.save writes ml_dtypes.bfloat16); it is read as bf16 "
                "only where a bf16 array is expected"));
  }
  return absl::InvalidArgumentError(
      str_cat("dtype '", descr, "' is not supported (supported: ", kSupportedDescrs, ")"));
}

// The `shape` tuple, checked: non-negative dims whose element count and byte size fit in int64.
absl::StatusOr<Shape> parse_shape(const PyValue& value, int element_size) {
  if (value.kind != PyValue::Kind::kTuple) {
    return absl::InvalidArgumentError("'shape' is not a tuple");
  }
  Shape shape;
  int64_t bytes = element_size;
  for (const PyValue& dim : value.items) {
    if (dim.kind != PyValue::Kind::kInt || dim.integer < 0) {
      return absl::InvalidArgumentError("'shape' holds something other than non-negative ints");
    }
    shape.push_back(dim.integer);
    if (__builtin_mul_overflow(bytes, dim.integer, &bytes)) {
      return absl::InvalidArgumentError(
          str_cat("'shape' ", shape_to_string(shape), "... is too large"));
    }
  }
  return shape;
}

// Copies Fortran-ordered (first index fastest) `source` into C order.
std::vector<uint8_t> fortran_to_c_order(const uint8_t* source, const Shape& shape,
                                        int element_size) {
  const int rank = static_cast<int>(shape.size());
  const int64_t count = num_elements(shape);
  std::vector<uint8_t> out(static_cast<size_t>(count * element_size));
  std::vector<int64_t> fortran_stride(rank);
  int64_t stride = 1;
  for (int k = 0; k < rank; ++k) {
    fortran_stride[k] = stride;
    stride *= shape[k];
  }
  std::vector<int64_t> index(rank, 0);
  int64_t fortran_offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(out.data() + i * element_size, source + fortran_offset * element_size,
                element_size);
    for (int k = rank - 1; k >= 0; --k) {  // next C-order index: the last dim moves fastest
      if (++index[k] < shape[k]) {
        fortran_offset += fortran_stride[k];
        break;
      }
      fortran_offset -= (shape[k] - 1) * fortran_stride[k];
      index[k] = 0;
    }
  }
  return out;
}

uint32_t read_le(std::string_view bytes, size_t offset, int size) {
  uint32_t value = 0;
  for (int i = size - 1; i >= 0; --i)
    value = (value << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return value;
}

std::string_view descr_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kF64:
      return "<f8";
    case DType::kF16:
      return "<f2";
    case DType::kI64:
      return "<i8";
    case DType::kI32:
      return "<i4";
    case DType::kI8:
      return "|i1";
    case DType::kU8:
      return "|u1";
    case DType::kBool:
      return "|b1";
    case DType::kBF16:
      return "<V2";
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
      return "<V1";
  }
  AMPC_CHECK(false);
  return "";
}

}  // namespace

absl::StatusOr<Tensor> parse_npy(std::string_view bytes, std::string_view source,
                                 const NpyReadOptions& options) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(str_cat(source, ": ", parts...));
  };
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic) {
    return error("not a .npy file (it does not start with \\x93NUMPY)");
  }
  if (bytes.size() < 8) return error("the .npy header is truncated");
  const int major = static_cast<uint8_t>(bytes[6]);
  const int minor = static_cast<uint8_t>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return error(".npy format version ", major, ".", minor,
                 " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const size_t prefix = major == 1 ? 10 : 12;
  if (bytes.size() < prefix) return error("the .npy header is truncated");
  const size_t header_size = read_le(bytes, 8, major == 1 ? 2 : 4);
  if (header_size > bytes.size() - prefix) {
    return error("the .npy header is truncated (it says ", header_size, " bytes, ",
                 bytes.size() - prefix, " follow)");
  }
  absl::StatusOr<PyValue> header = LiteralParser(bytes.substr(prefix, header_size)).parse();
  if (!header.ok()) {
    return error("the header is not a Python dict literal: ", header.status().message());
  }
  if (header->kind != PyValue::Kind::kDict) return error("the header is not a dict");
  const PyValue* fields[3] = {nullptr, nullptr, nullptr};
  constexpr std::string_view kKeys[3] = {"descr", "fortran_order", "shape"};
  for (size_t i = 0; i < header->keys.size(); ++i) {
    const auto key = std::find(std::begin(kKeys), std::end(kKeys), header->keys[i]);
    if (key == std::end(kKeys)) return error("unexpected header key '", header->keys[i], "'");
    const PyValue*& field = fields[key - std::begin(kKeys)];
    if (field != nullptr) return error("header key '", *key, "' appears twice");
    field = &header->items[i];
  }
  for (int i = 0; i < 3; ++i) {
    if (fields[i] == nullptr) return error("the header has no '", kKeys[i], "' key");
  }
  if (fields[0]->kind == PyValue::Kind::kList) {
    return error("structured dtypes (a list 'descr') are not supported");
  }
  if (fields[0]->kind != PyValue::Kind::kString) return error("'descr' is not a string");
  if (fields[1]->kind != PyValue::Kind::kBool) return error("'fortran_order' is not True/False");
  absl::StatusOr<ElementType> element = parse_descr(fields[0]->text, options);
  if (!element.ok()) return error(element.status().message());
  const int element_size = dtype_size(element->dtype);
  absl::StatusOr<Shape> shape = parse_shape(*fields[2], element_size);
  if (!shape.ok()) return error(shape.status().message());

  const TensorType type{element->dtype, *std::move(shape)};
  const std::string_view data = bytes.substr(prefix + header_size);
  const auto needed = static_cast<uint64_t>(type.byte_size());
  if (data.size() < needed) {
    return error("the array data is truncated: ", fields[0]->text, " ", shape_to_string(type.shape),
                 " needs ", needed, " bytes, the file has ", data.size());
  }
  if (data.size() > needed) {
    return error(data.size() - needed, " bytes follow the array data (", fields[0]->text, " ",
                 shape_to_string(type.shape), " is ", needed, " bytes)");
  }
  const auto* raw = reinterpret_cast<const uint8_t*>(data.data());
  std::vector<uint8_t> values = fields[1]->boolean && type.shape.size() > 1
                                    ? fortran_to_c_order(raw, type.shape, element_size)
                                    : std::vector<uint8_t>(raw, raw + needed);
  if (element->big_endian) {
    for (size_t i = 0; i < values.size(); i += element_size) {
      std::reverse(values.begin() + i, values.begin() + i + element_size);
    }
  }
  if (type.dtype == DType::kBool) {
    for (uint8_t& b : values) b = b != 0;
  }
  return Tensor(type, std::move(values));
}

std::string npy_header(const Tensor& tensor) {
  const Shape& shape = tensor.shape();
  std::string shape_text = "(";
  for (size_t i = 0; i < shape.size(); ++i) shape_text += str_cat(i ? ", " : "", shape[i]);
  shape_text += shape.size() == 1 ? ",)" : ")";
  const std::string dict = str_cat("{'descr': '", descr_of(tensor.dtype()),
                                   "', 'fortran_order': False, 'shape': ", shape_text, ", }");
  // Version 1.0 stores the header length in 2 bytes; 2.0 in 4. The data starts 64-aligned.
  const bool version2 = dict.size() + 1 + 64 > 0xffff;
  const size_t prefix = version2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  const size_t header_size = total - prefix;
  std::string out(kMagic);
  out += static_cast<char>(version2 ? 2 : 1);
  out += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header_size >> (8 * i)) & 0xff);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

std::string serialize_npy(const Tensor& tensor) {
  std::string out = npy_header(tensor);
  const std::span<const uint8_t> data = tensor.bytes();
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

absl::StatusOr<Tensor> read_npy(const std::string& path, const NpyReadOptions& options) {
  AMPC_ASSIGN_OR_RETURN(const std::string bytes, read_regular_file(path));
  return parse_npy(bytes, path, options);
}

absl::Status write_npy(const std::string& path, const Tensor& tensor) {
  const std::string header = npy_header(tensor);
  const std::span<const uint8_t> pieces[] = {byte_span(header), tensor.bytes()};
  return write_file_atomically(path, pieces);
}

}  // namespace ampc::runtime
