// The device error word: how a kernel reports a data-dependent failure (an index out of range)
// without the host waiting after every kernel. The first failure of a run is kept; the executor
// reads the word once after the run and turns it into a Status naming the node.
//
// Host and device code both include this header (C++17, no IR types).
#pragma once

#include <cstdint>

#include "ampc/host_device.h"

namespace ampc::runtime {

enum DeviceErrorCode : int32_t {
  kNoDeviceError = 0,
  // `value` at `element` of an index operand is outside [-bound, bound).
  kIndexOutOfRange = 1,
  // A class label `value` at `element` is outside [0, bound) and is not the ignore_index.
  kLabelOutOfRange = 2,
  // An integer division by zero, writing output element `element`.
  kDivisionByZero = 3,
  // Dropout in training with a ratio outside [0, 1).
  kInvalidDropoutRatio = 4,
  // An integer Pow of 0 to a negative power, writing output element `element`.
  kZeroToNegativePower = 5,
  // A Bernoulli probability at `element` of the input outside [0, 1] (or NaN).
  kInvalidProbability = 6,
};

struct DeviceError {
  int32_t code = kNoDeviceError;
  int32_t step = -1;    // the plan step whose kernel recorded it
  int64_t element = 0;  // flat index of the offending element in its operand
  int64_t value = 0;    // the offending value
  int64_t bound = 0;    // the limit it broke
};

// Records a failure unless one is already recorded (the first one wins).
AMPC_HD void record_device_error(DeviceError* error, int32_t code, int32_t step, int64_t element,
                                 int64_t value, int64_t bound) {
#if defined(__CUDA_ARCH__)
  if (atomicCAS(reinterpret_cast<int*>(&error->code), 0, code) != 0) return;
#else
  if (error->code != kNoDeviceError) return;
  error->code = code;
#endif
  error->step = step;
  error->element = element;
  error->value = value;
  error->bound = bound;
}

}  // namespace ampc::runtime
