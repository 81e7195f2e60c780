// visit_storage_type: calls a generic function with the C++ type that stores elements of a
// DType, for code that handles every element type through one template (Cast's kernel and its
// fold). Host only.
#pragma once

#include <type_traits>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "runtime/element_types.h"

namespace ampc {

// Calls fn(std::type_identity<T>{}) with the type T that stores elements of `dtype`.
template <typename Fn>
auto visit_storage_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(std::type_identity<float>{});
    case DType::kF16:
      return fn(std::type_identity<Float16>{});
    case DType::kBF16:
      return fn(std::type_identity<BFloat16>{});
    case DType::kF64:
      return fn(std::type_identity<double>{});
    case DType::kI64:
      return fn(std::type_identity<int64_t>{});
    case DType::kI32:
      return fn(std::type_identity<int32_t>{});
    case DType::kI8:
      return fn(std::type_identity<int8_t>{});
    case DType::kU8:
      return fn(std::type_identity<uint8_t>{});
    case DType::kBool:
      return fn(std::type_identity<bool>{});
    case DType::kF8E4M3FN:
      return fn(std::type_identity<F8E4M3FN>{});
    case DType::kF8E5M2:
      return fn(std::type_identity<F8E5M2>{});
  }
  AMPC_CHECK(false);
  return fn(std::type_identity<float>{});
}

}  // namespace ampc
