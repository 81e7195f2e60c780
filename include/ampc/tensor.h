// Tensor: a dense host tensor (the data of initializers, constant attributes, folded values and
// session outputs). TensorView and TensorViews: tensors the caller owns, lent to a session.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

  // The checked forms of the two constructors, for types and bytes that come from outside the
  // program (a file, a user, another library): an InvalidArgument naming the type when a
  // dimension is negative, the size overflows, or `bytes` is not the type's size, where the
  // constructors stop the program.
  static absl::StatusOr<Tensor> create(TensorType type);
  static absl::StatusOr<Tensor> create(TensorType type, std::vector<uint8_t> bytes);

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

// A tensor the caller owns, lent for one call: its type and where its elements are (little-endian,
// dense, row-major: `type.byte_size()` bytes from `data`). The sessions read it during the call
// and keep no pointer to it after; on the CPU they read it in place (no copy) when `data` is
// aligned to the element size, else they copy it once (docs/runtime-api.md).
struct TensorView {
  TensorType type;
  const void* data = nullptr;

  TensorView() = default;
  TensorView(TensorType type, const void* data) : type(std::move(type)), data(data) {}
  // A view of `tensor`'s bytes (which must be present), valid while the tensor lives unchanged.
  TensorView(const Tensor& tensor)  // NOLINT(google-explicit-constructor): a Tensor lends itself
      : type(tensor.type()), data(tensor.bytes().data()) {}

  DType dtype() const { return type.dtype; }
  const Shape& shape() const { return type.shape; }
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(data), static_cast<size_t>(type.byte_size())};
  }
};

// Tensors lent to a session by name, for one call: made from a map of tensors (which then lend
// their bytes), a map of views, or a braced list `{{"x", x}, {"y", y}}` of either.
class TensorViews {
 public:
  using Map = std::map<std::string, TensorView, std::less<>>;

  TensorViews() = default;
  TensorViews(const std::map<std::string, Tensor>& tensors)  // NOLINT(google-explicit-constructor)
      : views_(tensors.begin(), tensors.end()) {}
  TensorViews(Map views) : views_(std::move(views)) {}  // NOLINT(google-explicit-constructor)
  TensorViews(std::initializer_list<std::pair<const std::string, TensorView>> views)
      : views_(views) {}

  Map::const_iterator begin() const { return views_.begin(); }
  Map::const_iterator end() const { return views_.end(); }
  Map::const_iterator find(std::string_view name) const { return views_.find(name); }
  bool contains(std::string_view name) const { return views_.contains(name); }
  size_t size() const { return views_.size(); }
  bool empty() const { return views_.empty(); }
  void set(std::string name, TensorView view) { views_[std::move(name)] = std::move(view); }

 private:
  Map views_;
};

}  // namespace ampc
