#include "compiler/onnx_common.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "compiler/strings.h"

namespace ampc::onnx_io {
namespace {

// Element bytes are copied as they are: ONNX stores data little endian, and so do we.
static_assert(std::endian::native == std::endian::little, "ampc assumes a little-endian host");

absl::Status tensor_error(std::string_view what, std::string_view message) {
  return absl::InvalidArgumentError(str_cat(what, ": ", message));
}

absl::StatusOr<int64_t> parse_external_int(std::string_view what, const std::string& key,
                                           const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return tensor_error(
        what, str_cat("external data ", key, " '", text, "' is not a non-negative integer"));
  }
  return value;
}

// Reads `byte_size` bytes of external data: the file named by `location` (relative to the
// model's folder), from `offset`; `length`, when given, must equal the expected size.
absl::StatusOr<std::vector<uint8_t>> read_external_data(const onnx::TensorProto& proto,
                                                        std::string_view what, int64_t byte_size,
                                                        const std::string& base_dir) {
  std::string location;
  int64_t offset = 0;
  std::optional<int64_t> length;
  for (const onnx::StringStringEntryProto& entry : proto.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset") {
      AMPC_ASSIGN_OR_RETURN(offset, parse_external_int(what, "offset", entry.value()));
    } else if (entry.key() == "length") {
      AMPC_ASSIGN_OR_RETURN(length, parse_external_int(what, "length", entry.value()));
    }
  }
  if (location.empty()) return tensor_error(what, "external data has no 'location'");
  if (base_dir.empty()) {
    return tensor_error(what, str_cat("data is in external file '", location,
                                      "', which needs the model's folder (import the model "
                                      "from its file, not from bytes)"));
  }
  const std::filesystem::path relative(location);
  for (const auto& part : relative) {
    if (part == "..") {
      return tensor_error(
          what, str_cat("external data location '", location, "' leaves the model's folder"));
    }
  }
  if (relative.is_absolute()) {
    return tensor_error(what, str_cat("external data location '", location,
                                      "' must be relative to the model's folder"));
  }
  if (length && *length != byte_size) {
    return tensor_error(what, str_cat("external data length ", *length, " does not match the ",
                                      byte_size, " bytes of its type"));
  }
  const std::filesystem::path file = std::filesystem::path(base_dir) / relative;
  std::error_code ec;
  // Symbolic links are followed, and must end inside the model's folder too (a link to
  // /etc/passwd would otherwise be read and copied into a compiled model's data).
  const std::filesystem::path resolved = std::filesystem::canonical(file, ec);
  const std::filesystem::path folder =
      ec ? std::filesystem::path() : std::filesystem::canonical(base_dir, ec);
  if (ec) {
    return tensor_error(
        what, str_cat("cannot read external data file '", file.string(), "': ", ec.message()));
  }
  if (std::mismatch(folder.begin(), folder.end(), resolved.begin(), resolved.end()).first !=
      folder.end()) {
    return tensor_error(what, str_cat("external data location '", location, "' resolves to '",
                                      resolved.string(), "', outside the model's folder"));
  }
  if (!std::filesystem::is_regular_file(resolved, ec)) {
    return tensor_error(what,
                        str_cat("external data file '", file.string(), "' is not a regular file"));
  }
  const uintmax_t file_size = std::filesystem::file_size(resolved, ec);
  if (ec) {
    return tensor_error(
        what, str_cat("cannot read external data file '", file.string(), "': ", ec.message()));
  }
  if (static_cast<uintmax_t>(offset) > file_size ||
      static_cast<uintmax_t>(byte_size) > file_size - static_cast<uintmax_t>(offset)) {
    return tensor_error(what,
                        str_cat("external data file '", file.string(), "' has ", file_size,
                                " bytes; the tensor needs ", byte_size, " from offset ", offset));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(byte_size));
  std::ifstream in(resolved, std::ios::binary);
  in.seekg(offset);
  in.read(reinterpret_cast<char*>(bytes.data()), byte_size);
  if (!in) {
    return tensor_error(what, str_cat("reading external data file '", file.string(), "' failed"));
  }
  return bytes;
}

// Copies a typed repeated field whose elements are stored in the tensor's own width.
template <typename Field>
std::vector<uint8_t> copy_same_width(const Field& field, int64_t byte_size) {
  std::vector<uint8_t> bytes(static_cast<size_t>(byte_size));
  if (byte_size > 0) std::memcpy(bytes.data(), field.data(), bytes.size());
  return bytes;
}

// int32_data holds 8- and 16-bit elements (and bools, and fp16/bf16/fp8 bit patterns) one per
// int32; keep the low bytes.
std::vector<uint8_t> narrow_int32_data(const google::protobuf::RepeatedField<int32_t>& field,
                                       int element_size) {
  std::vector<uint8_t> bytes(field.size() * static_cast<size_t>(element_size));
  for (int i = 0; i < field.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(field.Get(i));
    std::memcpy(bytes.data() + static_cast<size_t>(i) * element_size, &bits, element_size);
  }
  return bytes;
}

// The typed field a tensor of `dtype` keeps its data in when it has no raw_data.
struct TypedField {
  std::string_view name;
  int size;
};
TypedField typed_field(const onnx::TensorProto& proto, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {"float_data", proto.float_data_size()};
    case DType::kF64:
      return {"double_data", proto.double_data_size()};
    case DType::kI64:
      return {"int64_data", proto.int64_data_size()};
    default:
      return {"int32_data", proto.int32_data_size()};
  }
}

std::vector<uint8_t> typed_field_bytes(const onnx::TensorProto& proto, DType dtype,
                                       int64_t byte_size) {
  switch (dtype) {
    case DType::kF32:
      return copy_same_width(proto.float_data(), byte_size);
    case DType::kF64:
      return copy_same_width(proto.double_data(), byte_size);
    case DType::kI64:
      return copy_same_width(proto.int64_data(), byte_size);
    case DType::kI32:
      return copy_same_width(proto.int32_data(), byte_size);
    default:
      return narrow_int32_data(proto.int32_data(), dtype_size(dtype));
  }
}

// A bool is stored as one byte, 0 or 1; files may hold any nonzero byte for true.
Tensor normalized(Tensor tensor) {
  if (tensor.dtype() == DType::kBool) {
    for (uint8_t& byte : tensor.mutable_bytes()) byte = byte != 0 ? 1 : 0;
  }
  return tensor;
}

}  // namespace

std::optional<int64_t> checked_num_elements(const Shape& shape) {
  // Bounded so that the byte size of any element type stays far from overflow.
  constexpr int64_t kMaxElements = int64_t{1} << 56;
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) {
      count = 0;
      continue;
    }
    if (count > kMaxElements / dim) return std::nullopt;
    count *= dim;
  }
  return count;
}

absl::StatusOr<Tensor> tensor_from_proto(const onnx::TensorProto& proto, std::string_view what,
                                         const std::string& base_dir) {
  absl::StatusOr<DType> dtype = from_onnx_dtype(proto.data_type());
  if (!dtype.ok()) return tensor_error(what, str_cat(dtype.status().message()));
  if (proto.has_segment()) return tensor_error(what, "segmented tensors are not supported");
  Shape shape(proto.dims().begin(), proto.dims().end());
  std::optional<int64_t> count = checked_num_elements(shape);
  if (!count) {
    return tensor_error(what, str_cat("dims ", shape_to_string(shape), " are not a valid shape"));
  }
  const TensorType type{*dtype, shape};
  const int64_t byte_size = *count * dtype_size(*dtype);
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    AMPC_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes,
                          read_external_data(proto, what, byte_size, base_dir));
    return normalized(Tensor(type, std::move(bytes)));
  }
  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != byte_size) {
      return tensor_error(what, str_cat("raw_data has ", proto.raw_data().size(), " bytes; ",
                                        type_to_string(type), " needs ", byte_size));
    }
    const auto* begin = reinterpret_cast<const uint8_t*>(proto.raw_data().data());
    return normalized(Tensor(type, std::vector<uint8_t>(begin, begin + byte_size)));
  }
  const TypedField field = typed_field(proto, *dtype);
  if (field.size != *count) {
    return tensor_error(what, str_cat(field.name, " has ", field.size, " elements; ",
                                      type_to_string(type), " needs ", *count));
  }
  return normalized(Tensor(type, typed_field_bytes(proto, *dtype, byte_size)));
}

void tensor_to_proto(const Tensor& tensor, onnx::TensorProto* proto) {
  for (int64_t dim : tensor.shape()) proto->add_dims(dim);
  proto->set_data_type(to_onnx_dtype(tensor.dtype()));
  const std::span<const uint8_t> bytes = tensor.bytes();
  proto->set_raw_data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

absl::StatusOr<Tensor> tensor_from_sparse_proto(const onnx::SparseTensorProto& proto,
                                                std::string_view what,
                                                const std::string& base_dir) {
  const Shape shape(proto.dims().begin(), proto.dims().end());
  if (!checked_num_elements(shape)) {
    return tensor_error(what, str_cat("dims ", shape_to_string(shape), " are not a tensor's"));
  }
  AMPC_ASSIGN_OR_RETURN(const Tensor values,
                        tensor_from_proto(proto.values(), str_cat(what, " values"), base_dir));
  AMPC_ASSIGN_OR_RETURN(const Tensor indices,
                        tensor_from_proto(proto.indices(), str_cat(what, " indices"), base_dir));
  const int64_t count = values.num_elements();
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (values.shape().size() != 1) {
    return tensor_error(what, str_cat("its values are ", type_to_string(values.type()),
                                      "; a sparse tensor's are one dimension"));
  }
  const bool linear = indices.shape() == Shape{count};
  if (indices.dtype() != DType::kI64 || (!linear && indices.shape() != Shape{count, rank})) {
    return tensor_error(what, str_cat("its indices are ", type_to_string(indices.type()), "; for ",
                                      count, " values in ", rank, " dimensions they are i64[",
                                      count, "] or i64[", count, ",", rank, "]"));
  }
  AMPC_ASSIGN_OR_RETURN(Tensor dense, Tensor::create(TensorType{values.dtype(), shape}));
  const std::span<const int64_t> at = indices.data<int64_t>();
  const size_t size = static_cast<size_t>(dtype_size(values.dtype()));
  for (int64_t k = 0; k < count; ++k) {
    int64_t position = 0;
    bool inside = true;
    if (linear) {
      position = at[k];
      inside = position >= 0 && position < dense.num_elements();
    } else {
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t coordinate = at[k * rank + d];
        inside = inside && coordinate >= 0 && coordinate < shape[d];
        position = position * shape[d] + coordinate;
      }
    }
    if (!inside) {
      return tensor_error(
          what, str_cat("index ", k, " of its indices is outside dims ", shape_to_string(shape)));
    }
    std::memcpy(dense.mutable_bytes().data() + position * size, values.bytes().data() + k * size,
                size);
  }
  return dense;
}

void type_to_proto(const TensorType& type, onnx::TypeProto* proto) {
  onnx::TypeProto::Tensor* tensor = proto->mutable_tensor_type();
  tensor->set_elem_type(to_onnx_dtype(type.dtype));
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  for (int64_t dim : type.shape) shape->add_dim()->set_dim_value(dim);
}

std::string declared_doc(Value::Declared declared) {
  const std::string_view name = Value::declared_name(declared);
  return name.empty() ? std::string() : str_cat("ampc: ", name);
}

Value::Declared declared_from_doc(std::string_view doc) {
  for (Value::Declared declared :
       {Value::Declared::kParameter, Value::Declared::kBuffer, Value::Declared::kFrozenParameter}) {
    if (doc == declared_doc(declared)) return declared;
  }
  return Value::Declared::kUnknown;
}

std::string precision_to_line(const PrecisionDecision& decision) {
  std::string line(kPrecisionPrefix);
  if (decision.compute) line += str_cat(" compute=", dtype_name(*decision.compute));
  if (decision.accumulate) line += str_cat(" accumulate=", dtype_name(*decision.accumulate));
  if (!decision.reason.empty()) {
    std::string reason = decision.reason;
    for (char& c : reason) {
      if (c == '\n' || c == '\r') c = ' ';  // the decision is one line
    }
    line += str_cat(" reason=", reason);
  }
  return line;
}

std::optional<PrecisionDecision> take_precision_line(std::string& doc) {
  const size_t newline = doc.rfind('\n');
  const size_t start = newline == std::string::npos ? 0 : newline + 1;
  std::string_view rest = std::string_view(doc).substr(start);
  if (!rest.starts_with(kPrecisionPrefix)) return std::nullopt;
  rest.remove_prefix(kPrecisionPrefix.size());
  PrecisionDecision decision;
  auto take_dtype = [&rest](std::string_view key, std::optional<DType>& out) {
    if (!rest.starts_with(key)) return true;
    rest.remove_prefix(key.size());
    const std::string_view name = rest.substr(0, rest.find(' '));
    out = parse_dtype(name);
    rest.remove_prefix(name.size());
    return out.has_value();
  };
  if (!take_dtype(" compute=", decision.compute)) return std::nullopt;
  if (!take_dtype(" accumulate=", decision.accumulate)) return std::nullopt;
  if (rest.starts_with(" reason=")) {
    decision.reason = std::string(rest.substr(std::string_view(" reason=").size()));
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  doc.resize(newline == std::string::npos ? 0 : newline);
  return decision;
}

}  // namespace ampc::onnx_io
