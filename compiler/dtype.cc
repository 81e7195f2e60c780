#include "ampc/dtype.h"

#include "ampc/status.h"
#include "compiler/strings.h"

namespace ampc {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int size;
  int onnx_code;
};

// ONNX TensorProto::DataType codes: FLOAT=1, UINT8=2, INT8=3, INT32=6, INT64=7, BOOL=9,
// FLOAT16=10, DOUBLE=11, BFLOAT16=16, FLOAT8E4M3FN=17, FLOAT8E5M2=19.
constexpr DTypeInfo kInfo[] = {
    {DType::kF32, "f32", 4, 1},        {DType::kF16, "f16", 2, 10},
    {DType::kBF16, "bf16", 2, 16},     {DType::kF64, "f64", 8, 11},
    {DType::kI64, "i64", 8, 7},        {DType::kI32, "i32", 4, 6},
    {DType::kI8, "i8", 1, 3},          {DType::kU8, "u8", 1, 2},
    {DType::kBool, "bool", 1, 9},      {DType::kF8E4M3FN, "f8e4m3fn", 1, 17},
    {DType::kF8E5M2, "f8e5m2", 1, 19},
};

const DTypeInfo& info(DType t) {
  for (const DTypeInfo& i : kInfo) {
    if (i.dtype == t) return i;
  }
  AMPC_CHECK(false);
  return kInfo[0];
}

}  // namespace

std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& i : kInfo) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

int dtype_size(DType t) { return info(t).size; }

bool is_arithmetic_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}

bool is_float(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

bool is_integer(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kI8 || t == DType::kU8;
}

int to_onnx_dtype(DType t) { return info(t).onnx_code; }

std::string onnx_dtype_name(int onnx_code) {
  static constexpr std::string_view kNames[] = {
      "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
      "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
      "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4",     "FLOAT4E2M1"};
  if (onnx_code >= 0 && onnx_code < static_cast<int>(std::size(kNames))) {
    return std::string(kNames[onnx_code]);
  }
  return str_cat("type code ", onnx_code);
}

absl::StatusOr<DType> from_onnx_dtype(int onnx_code) {
  for (const DTypeInfo& i : kInfo) {
    if (i.onnx_code == onnx_code) return i.dtype;
  }
  return absl::UnimplementedError(
      str_cat("element type ", onnx_dtype_name(onnx_code),
              " is not supported (supported: f32, f16, bf16, f64, i64, i32, i8, u8, bool, "
              "f8e4m3fn, f8e5m2)"));
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<int64_t> checked_byte_size(const TensorType& type) {
  bool empty = false;
  for (int64_t dim : type.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(str_cat(type_to_string(type), " has a negative dimension"));
    }
    empty = empty || dim == 0;
  }
  if (empty) return 0;
  int64_t bytes = dtype_size(type.dtype);
  for (int64_t dim : type.shape) {
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return absl::InvalidArgumentError(
          str_cat(type_to_string(type), " would take more than 2^63 bytes"));
    }
  }
  return bytes;
}

std::string shape_to_string(const Shape& shape) { return str_cat("[", str_join(shape, ","), "]"); }

std::string type_to_string(const TensorType& type) {
  return str_cat(dtype_name(type.dtype), shape_to_string(type.shape));
}

}  // namespace ampc
