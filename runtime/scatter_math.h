// The scatter reductions, written once for the CPU and CUDA kernels (runtime/cpu/scatter_gather.cc,
// runtime/cuda/data_movement_kernels.cu) from runtime/numeric.h's operations. C++17, host and
// device; nothing from the IR.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/numeric.h"

namespace ampc::numeric {

// How ScatterElements and ScatterND combine an update with the element it lands on.
enum class ScatterReduction : uint8_t { kNone, kAdd, kMul, kMax, kMin };

// The element after one update, in the compute type X: each update is its own operation, so
// duplicates combine one by one in index order (the ONNX reference's loop). bool takes none only.
template <typename X>
AMPC_HD X scatter_combine(ScatterReduction reduction, X element, X update) {
  if constexpr (std::is_same_v<X, bool>) {
    return update;
  } else {
    switch (reduction) {
      case ScatterReduction::kAdd:
        return Add{}(element, update);
      case ScatterReduction::kMul:
        return Mul{}(element, update);
      case ScatterReduction::kMax:
        return Max{}(element, update);
      case ScatterReduction::kMin:
        return Min{}(element, update);
      default:
        return update;
    }
  }
}

}  // namespace ampc::numeric
