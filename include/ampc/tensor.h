// A dense host tensor: the data of initializers, constant attributes and folded values.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"

namespace ampc {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor of `type`.
  explicit Tensor(TensorType type);
  // Takes `bytes` as the little-endian element data; its size must match `type`.
  Tensor(TensorType type, std::vector<uint8_t> bytes);

  // A tensor whose element data is absent (the text IR elides large constants). It has a type
  // but no bytes; reading it is an internal error.
  static Tensor elided(TensorType type);

  static Tensor from_i64(Shape shape, const std::vector<int64_t>& values);
  static Tensor from_f32(Shape shape, const std::vector<float>& values);
  // Rounds each value to `dtype` (round to nearest even for float types, truncation for ints).
  static Tensor from_doubles(DType dtype, Shape shape, const std::vector<double>& values);

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t num_elements() const { return type_.num_elements(); }
  bool has_data() const { return has_data_; }

  std::span<const uint8_t> bytes() const {
    AMPC_CHECK(has_data_);
    return bytes_;
  }
  std::span<uint8_t> mutable_bytes() {
    AMPC_CHECK(has_data_);
    return bytes_;
  }

  // Typed view; T must have the element size of the dtype.
  template <typename T>
  std::span<const T> data() const {
    AMPC_CHECK(has_data_ && sizeof(T) == static_cast<size_t>(dtype_size(type_.dtype)));
    return {reinterpret_cast<const T*>(bytes_.data()), static_cast<size_t>(num_elements())};
  }
  template <typename T>
  std::span<T> mutable_data() {
    AMPC_CHECK(has_data_ && sizeof(T) == static_cast<size_t>(dtype_size(type_.dtype)));
    return {reinterpret_cast<T*>(bytes_.data()), static_cast<size_t>(num_elements())};
  }

  // Element i converted to double (exact for every supported type but i64 beyond 2^53).
  double element_as_double(int64_t i) const;
  // Element i of an integer or bool tensor as int64; float elements are truncated.
  int64_t element_as_i64(int64_t i) const;
  // Stores `value` into element i, rounding to the element type.
  void set_element(int64_t i, double value);
  void set_element_i64(int64_t i, int64_t value);

  std::vector<int64_t> to_i64_vector() const;
  std::vector<double> to_double_vector() const;

  // Same dtype, shape and bytes (bitwise, so NaNs with equal payloads compare equal).
  bool operator==(const Tensor& other) const;

 private:
  TensorType type_;
  std::vector<uint8_t> bytes_;
  bool has_data_ = true;
};

}  // namespace ampc
