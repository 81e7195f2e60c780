// Element types of the IR and their static shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ampc {

// The element types a Value may hold. fp8 kinds are storage types only.
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI8,
  kU8,
  kBool,
  kF8E4M3FN,
  kF8E5M2,
};

inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,      DType::kBF16,  DType::kF64,
                                       DType::kI64,  DType::kI32,      DType::kI8,    DType::kU8,
                                       DType::kBool, DType::kF8E4M3FN, DType::kF8E5M2};

// Short text name used by the text IR: f32, f16, bf16, f64, i64, i32, i8, u8, bool, f8e4m3fn,
// f8e5m2.
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

// Bytes per element.
int dtype_size(DType t);
bool is_float(DType t);  // f32, f16, bf16, f64 and the fp8 kinds
// f32, f16, bf16, f64: the float types kernels compute with (fp8 is storage only, cast
// explicitly), and so the ones autodiff, autocast and the cast passes reason about.
bool is_arithmetic_float(DType t);
bool is_integer(DType t);  // i64, i32, i8, u8

// ONNX TensorProto::DataType codes.
int to_onnx_dtype(DType t);
// Fails for element types ampc does not support, naming the ONNX type.
absl::StatusOr<DType> from_onnx_dtype(int onnx_code);
// The ONNX name of a TensorProto::DataType code ("FLOAT", "UINT16", ...), for messages.
std::string onnx_dtype_name(int onnx_code);

// A static shape. Every dimension is known; rank 0 is a scalar.
using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[8,16]"

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;

  int64_t num_elements() const { return ampc::num_elements(shape); }
  int64_t byte_size() const { return num_elements() * dtype_size(dtype); }
  bool operator==(const TensorType&) const = default;
};

std::string type_to_string(const TensorType& type);  // "f32[8,16]"

// The bytes a tensor of `type` occupies, or an error naming the type when a dimension is
// negative or the byte size does not fit in int64 (no tensor can exist then; byte_size() would
// overflow).
absl::StatusOr<int64_t> checked_byte_size(const TensorType& type);

}  // namespace ampc
