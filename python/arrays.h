// Arrays between Python and ampc's sessions.
//
// Arrays in (numpy arrays, or anything with __dlpack__ in host memory, such as a CPU torch
// tensor) must have the input's dtype and shape; they are lent to the session for the call
// (ampc::TensorView), which on the CPU reads them where they are: no copy, unless an array is not
// C-contiguous (numpy makes a contiguous copy; a strided DLPack tensor is gathered into one),
// and no copy before the dtype and shape are found right.
// Arrays out are numpy views of the tensors the session returned, which they keep alive (no
// copy). f16 is numpy's float16; bf16 is DLPack's bfloat16 in, or ml_dtypes.bfloat16 when that
// package is importable (else the raw bits as uint16); out, those arrays as ampc.BFloat16Array,
// whose __dlpack__ (bfloat16_dlpack) says bfloat16.
#ifndef AMPC_PYTHON_ARRAYS_H_
#define AMPC_PYTHON_ARRAYS_H_

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "ampc/ampc.h"

namespace ampc::python {

namespace py = pybind11;

// The numpy dtype of an ampc dtype: ml_dtypes.bfloat16 for bf16 when that package is
// importable, else the raw bits as uint16.
py::dtype numpy_dtype(DType dtype);

// A numpy array that views `tensor`'s bytes and keeps the tensor alive; bf16 comes as
// ampc.BFloat16Array (python/ampc/_bfloat16.py).
py::array to_numpy(Tensor tensor);

// A "dltensor" capsule of DLPack's bfloat16 over the memory of `array`.
py::capsule bfloat16_dlpack(const py::array& array);

// A DLPack tensor this module consumed: its producer's memory stays valid until it is deleted.
struct DlpackDeleter {
  void operator()(DLManagedTensor* tensor) const {
    if (tensor->deleter != nullptr) tensor->deleter(tensor);
  }
};
using DlpackTensor = std::unique_ptr<DLManagedTensor, DlpackDeleter>;

// Inputs lent to one call: views of the callers' memory, and what keeps that memory alive and
// unchanged until the call returns (the arrays, the DLPack tensors consumed, the copies of
// arrays whose layout cannot be read in place). Made and destroyed with the GIL held.
class LentInputs {
 public:
  // `what` the arrays are, for messages: "input", "weight", "state".
  explicit LentInputs(std::string what = "input") : what_(std::move(what)) {}

  // `value` (a numpy array, anything with __dlpack__, or anything numpy can make an array of) as
  // the input `name` of `type`: its dtype and shape must match.
  void lend(const std::string& name, const TensorType& type, const py::handle& value);
  // Every input lent so far, by name.
  const TensorViews& views() const { return views_; }

 private:
  void lend_array(const std::string& name, const TensorType& type, const py::handle& value);
  void lend_dlpack(const std::string& name, const TensorType& type, const py::handle& value);
  [[noreturn]] void bad(const std::string& name, const std::string& problem) const {
    throw py::value_error(what_ + " '" + name + "': " + problem);
  }
  void check_shape(const std::string& name, const TensorType& type, const Shape& shape) const {
    if (shape != type.shape) {
      bad(name,
          "expected shape " + shape_to_string(type.shape) + ", got " + shape_to_string(shape));
    }
  }

  std::string what_;
  TensorViews views_;
  std::vector<py::object> arrays_;
  std::vector<DlpackTensor> dlpack_;
  std::vector<std::unique_ptr<Tensor>> copies_;
};

// A dict of arrays lent as the inputs `inputs` name (`what` they are, for the message): a
// ValueError for a key that is not a str or names no input.
std::unique_ptr<LentInputs> lend_inputs(const py::dict& arrays,
                                        const std::vector<TensorInfo>& inputs,
                                        const std::string& what = "input");

// Each tensor as a numpy array, by name.
py::dict to_dict(TensorMap tensors);

// (name, dtype name, shape) of each tensor.
py::list describe(const std::vector<TensorInfo>& infos);

}  // namespace ampc::python

#endif  // AMPC_PYTHON_ARRAYS_H_
