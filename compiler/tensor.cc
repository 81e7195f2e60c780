#include "ampc/tensor.h"

#include <bit>
#include <cmath>
#include <utility>

#include "ampc/float16.h"
#include "compiler/float8.h"

namespace ampc {

Tensor::Tensor(TensorType type)
    : type_(std::move(type)), bytes_(static_cast<size_t>(type_.byte_size()), 0) {}

Tensor::Tensor(TensorType type, std::vector<uint8_t> bytes)
    : type_(std::move(type)), bytes_(std::move(bytes)) {
  AMPC_CHECK(static_cast<int64_t>(bytes_.size()) == type_.byte_size());
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

// `value` rounded to f32 with round-to-odd: an inexact result keeps an odd last bit, so rounding
// it once more to a format with at least two fewer bits (fp8) gives the same bits as rounding
// `value` directly; plain round-to-nearest twice could land on the wrong side of a tie.
float to_f32_round_to_odd(double value) {
  float rounded = static_cast<float>(value);
  if (static_cast<double>(rounded) != value && !std::isnan(value) &&
      (std::bit_cast<uint32_t>(rounded) & 1u) == 0) {
    const float toward = static_cast<double>(rounded) > value ? -INFINITY : INFINITY;
    rounded = std::nextafter(rounded, toward);  // the other neighbour of `value`, whose bit is odd
  }
  return rounded;
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

void Tensor::set_element(int64_t i, double value) {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  switch (type_.dtype) {
    case DType::kF32:
      return store<float>(bytes_, i, static_cast<float>(value));
    case DType::kF64:
      return store<double>(bytes_, i, value);
    case DType::kF16:
      return store<uint16_t>(bytes_, i, f32_to_f16_bits(static_cast<float>(value)));
    case DType::kBF16:
      return store<uint16_t>(bytes_, i, f32_to_bf16_bits(static_cast<float>(value)));
    case DType::kBool:
      return store<uint8_t>(bytes_, i, value != 0 ? 1 : 0);
    case DType::kI64:
    case DType::kI32:
    case DType::kI8:
    case DType::kU8:
      return set_element_i64(i, static_cast<int64_t>(value));
    case DType::kF8E4M3FN:  // saturating, as ONNX Cast's default
      return store<uint8_t>(bytes_, i, f32_to_f8e4m3fn_bits(to_f32_round_to_odd(value)));
    case DType::kF8E5M2:
      return store<uint8_t>(bytes_, i, f32_to_f8e5m2_bits(to_f32_round_to_odd(value)));
  }
  AMPC_CHECK(false);
}

void Tensor::set_element_i64(int64_t i, int64_t value) {
  AMPC_CHECK(has_data_ && i >= 0 && i < num_elements());
  switch (type_.dtype) {
    case DType::kI64:
      return store<int64_t>(bytes_, i, value);
    case DType::kI32:
      return store<int32_t>(bytes_, i, static_cast<int32_t>(value));
    case DType::kI8:
      return store<int8_t>(bytes_, i, static_cast<int8_t>(value));
    case DType::kU8:
      return store<uint8_t>(bytes_, i, static_cast<uint8_t>(value));
    case DType::kBool:
      return store<uint8_t>(bytes_, i, value != 0 ? 1 : 0);
    default:
      return set_element(i, static_cast<double>(value));
  }
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
