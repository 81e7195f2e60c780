#include "ampc/tensor.h"

#include <cmath>
#include <utility>

#include "ampc/float16.h"
#include "compiler/float8.h"
#include "compiler/strings.h"
#include "runtime/cast_math.h"
#include "runtime/storage_type.h"

namespace ampc {

Tensor::Tensor(TensorType type) : type_(std::move(type)) {
  AMPC_CHECK(checked_byte_size(type_).ok());
  bytes_.resize(static_cast<size_t>(type_.byte_size()), 0);
}

Tensor::Tensor(TensorType type, std::vector<uint8_t> bytes)
    : type_(std::move(type)), bytes_(std::move(bytes)) {
  AMPC_CHECK(static_cast<int64_t>(bytes_.size()) == type_.byte_size());
}

absl::StatusOr<Tensor> Tensor::create(TensorType type) {
  absl::StatusOr<int64_t> bytes = checked_byte_size(type);
  if (!bytes.ok()) return bytes.status();
  return Tensor(std::move(type));
}

absl::StatusOr<Tensor> Tensor::create(TensorType type, std::vector<uint8_t> bytes) {
  absl::StatusOr<int64_t> size = checked_byte_size(type);
  if (!size.ok()) return size.status();
  if (static_cast<int64_t>(bytes.size()) != *size) {
    return absl::InvalidArgumentError(str_cat(type_to_string(type), " takes ", *size,
                                              " bytes, not the ", bytes.size(), " given"));
  }
  return Tensor(std::move(type), std::move(bytes));
}

Tensor Tensor::elided(TensorType type) {
  Tensor t;
  t.type_ = std::move(type);
  t.has_data_ = false;
  return t;
}

Tensor Tensor::from_i64(Shape shape, const std::vector<int64_t>& values) {
  Tensor t(TensorType{DType::kI64, std::move(shape)});
  AMPC_CHECK(static_cast<int64_t>(values.size()) == t.num_elements());
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), t.bytes_.size());
  return t;
}

Tensor Tensor::from_f32(Shape shape, const std::vector<float>& values) {
  Tensor t(TensorType{DType::kF32, std::move(shape)});
  AMPC_CHECK(static_cast<int64_t>(values.size()) == t.num_elements());
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), t.bytes_.size());
  return t;
}

Tensor Tensor::from_doubles(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t(TensorType{dtype, std::move(shape)});
  AMPC_CHECK(static_cast<int64_t>(values.size()) == t.num_elements());
  for (size_t i = 0; i < values.size(); ++i) t.set_element(static_cast<int64_t>(i), values[i]);
  return t;
}

namespace {

template <typename T>
T load(const std::vector<uint8_t>& bytes, int64_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void store(std::vector<uint8_t>& bytes, int64_t i, T v) {
  std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
}

}  // namespace

double Tensor::element_as_double(int64_t i) const {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  switch (type_.dtype) {
    case DType::kF32:
      return load<float>(bytes_, i);
    case DType::kF64:
      return load<double>(bytes_, i);
    case DType::kF16:
      return f16_bits_to_f32(load<uint16_t>(bytes_, i));
    case DType::kBF16:
      return bf16_bits_to_f32(load<uint16_t>(bytes_, i));
    case DType::kI64:
      return static_cast<double>(load<int64_t>(bytes_, i));
    case DType::kI32:
      return load<int32_t>(bytes_, i);
    case DType::kI8:
      return load<int8_t>(bytes_, i);
    case DType::kU8:
    case DType::kBool:
      return load<uint8_t>(bytes_, i);
    case DType::kF8E4M3FN:
      return f8e4m3fn_bits_to_f32(load<uint8_t>(bytes_, i));
    case DType::kF8E5M2:
      return f8e5m2_bits_to_f32(load<uint8_t>(bytes_, i));
  }
  AMPC_CHECK(false);
  return 0;
}

int64_t Tensor::element_as_i64(int64_t i) const {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  switch (type_.dtype) {
    case DType::kI64:
      return load<int64_t>(bytes_, i);
    case DType::kI32:
      return load<int32_t>(bytes_, i);
    case DType::kI8:
      return load<int8_t>(bytes_, i);
    case DType::kU8:
    case DType::kBool:
      return load<uint8_t>(bytes_, i);
    default:
      return static_cast<int64_t>(element_as_double(i));
  }
}

// Both round as Cast does, through its conversions (runtime/cast_math.h): once, to nearest even,
// from the exact value; to an integer type, a double truncates and saturates (NaN becomes 0), an
// int64 keeps its low bits.
void Tensor::set_element(int64_t i, double value) {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  visit_storage_type(type_.dtype, [&]<typename T>(std::type_identity<T>) {
    store<T>(bytes_, i, cast_math::cast<double, T>(value, /*saturate=*/true));
  });
}

void Tensor::set_element_i64(int64_t i, int64_t value) {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  visit_storage_type(type_.dtype, [&]<typename T>(std::type_identity<T>) {
    store<T>(bytes_, i, cast_math::cast<int64_t, T>(value, /*saturate=*/true));
  });
}

std::vector<int64_t> Tensor::to_i64_vector() const {
  std::vector<int64_t> out(static_cast<size_t>(num_elements()));
  for (int64_t i = 0; i < num_elements(); ++i) out[i] = element_as_i64(i);
  return out;
}

std::vector<double> Tensor::to_double_vector() const {
  std::vector<double> out(static_cast<size_t>(num_elements()));
  for (int64_t i = 0; i < num_elements(); ++i) out[i] = element_as_double(i);
  return out;
}

bool Tensor::operator==(const Tensor& other) const {
  return type_ == other.type_ && has_data_ == other.has_data_ && bytes_ == other.bytes_;
}

}  // namespace ampc
