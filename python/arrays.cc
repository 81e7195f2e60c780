#include "arrays.h"

#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>

namespace ampc::python {

// The numpy dtype of an ampc dtype.
py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return py::dtype::of<float>();
    case DType::kF64:
      return py::dtype::of<double>();
    case DType::kF16:
      return py::dtype("float16");
    case DType::kBF16: {
      // Looked up once: without ml_dtypes every lookup would raise and catch an ImportError.
      // Never freed, so nothing touches Python objects after the interpreter has finalized.
      static const py::dtype* const bf16 = [] {
        try {
          return new py::dtype(
              py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16")));
        } catch (const py::error_already_set&) {
          return new py::dtype(py::dtype::of<uint16_t>());  // the raw bits
        }
      }();
      return *bf16;
    }
    case DType::kI64:
      return py::dtype::of<int64_t>();
    case DType::kI32:
      return py::dtype::of<int32_t>();
    case DType::kI8:
      return py::dtype::of<int8_t>();
    case DType::kU8:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
      return py::dtype::of<uint8_t>();
    case DType::kBool:
      return py::dtype::of<bool>();
  }
  throw std::runtime_error("unknown dtype");
}

// A numpy array that views `tensor`'s bytes and keeps the tensor alive. The strides are computed
// here from ampc's element size: pybind11 2.10 reads the item size from numpy's dtype struct,
// whose layout numpy 2 changed. bf16 comes as ampc.BFloat16Array (python/ampc/_bfloat16.py),
// whose __dlpack__ says bfloat16.
py::array to_numpy(Tensor tensor) {
  auto* owned = new Tensor(std::move(tensor));
  py::capsule keeper(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  const Shape& dims = owned->shape();
  std::vector<py::ssize_t> shape(dims.begin(), dims.end());
  std::vector<py::ssize_t> strides(dims.size());
  py::ssize_t stride = dtype_size(owned->dtype());
  for (size_t d = dims.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= static_cast<py::ssize_t>(dims[d]);
  }
  py::array array(numpy_dtype(owned->dtype()), shape, strides, owned->mutable_bytes().data(),
                  keeper);
  if (owned->dtype() != DType::kBF16) return array;
  static const py::handle subclass =
      py::object(py::module_::import("ampc._bfloat16").attr("BFloat16Array")).release();
  return array.attr("view")(subclass);
}

// A bf16 array exported through DLPack: the capsule's tensor and what it points into.
struct ExportedArray {
  DLManagedTensor managed{};
  std::vector<int64_t> shape, strides;
  PyObject* array = nullptr;  // a reference the consumer's call of the deleter releases
};

// A "dltensor" capsule of DLPack's bfloat16 over the memory of `array` (bf16 as numpy holds it:
// ml_dtypes.bfloat16 or the uint16 bits, any strides); numpy exports neither as bfloat16. The
// capsule keeps the array alive until the consumer (torch.from_dlpack) deletes the tensor, which
// may happen on a thread without the GIL.
py::capsule bfloat16_dlpack(const py::array& array) {
  // The item size from Python: pybind11 2.10's itemsize() reads numpy 1's dtype struct.
  const auto itemsize = py::cast<py::ssize_t>(array.attr("itemsize"));
  if (itemsize != 2) {
    throw py::type_error("a bf16 array has 2-byte elements, got " + std::to_string(itemsize));
  }
  auto exported = std::make_unique<ExportedArray>();
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    exported->shape.push_back(array.shape(d));
    exported->strides.push_back(array.strides(d) / 2);  // DLPack counts elements, not bytes
  }
  DLTensor& t = exported->managed.dl_tensor;
  t.data = const_cast<void*>(array.data());
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(array.ndim());
  t.dtype = DLDataType{kDLBfloat, 16, 1};
  t.shape = exported->shape.data();
  t.strides = exported->strides.data();
  t.byte_offset = 0;
  exported->array = array.inc_ref().ptr();
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<ExportedArray*>(self->manager_ctx);
    if (Py_IsInitialized() != 0) {
      const PyGILState_STATE gil = PyGILState_Ensure();
      Py_DECREF(owner->array);
      PyGILState_Release(gil);
    }
    delete owner;
  };
  // A capsule nobody consumed still owns its tensor (the protocol's rule: a consumer renames it).
  PyObject* capsule = PyCapsule_New(&exported->managed, "dltensor", [](PyObject* self) {
    if (PyCapsule_IsValid(self, "dltensor") != 0) {
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, "dltensor"));
      managed->deleter(managed);
    }
  });
  if (capsule == nullptr) throw py::error_already_set();
  exported.release();
  return py::reinterpret_steal<py::capsule>(capsule);
}

namespace {

// numpy's name of `dtype` ("float32"), with its byte order when that is not the machine's
// ("float32 (big-endian, '>f4')"), which ampc does not read.
std::string dtype_text(const py::dtype& dtype) {
  std::string text = py::cast<std::string>(dtype.attr("name"));
  if (py::cast<std::string>(dtype.attr("byteorder")) == ">") {
    text += " (big-endian, '" + py::cast<std::string>(dtype.attr("str")) + "')";
  }
  return text;
}

// The ampc dtype of a DLPack dtype, if ampc has one.
std::optional<DType> from_dlpack_dtype(DLDataType dtype) {
  constexpr uint8_t kDLBoolCode = 6;  // DLPack 0.8's kDLBool (Debian's header is 0.6)
  if (dtype.lanes != 1) return std::nullopt;
  switch (dtype.code) {
    case kDLFloat:
      if (dtype.bits == 16) return DType::kF16;
      if (dtype.bits == 32) return DType::kF32;
      if (dtype.bits == 64) return DType::kF64;
      break;
    case kDLBfloat:
      if (dtype.bits == 16) return DType::kBF16;
      break;
    case kDLInt:
      if (dtype.bits == 8) return DType::kI8;
      if (dtype.bits == 32) return DType::kI32;
      if (dtype.bits == 64) return DType::kI64;
      break;
    case kDLUInt:
      if (dtype.bits == 8) return DType::kU8;
      break;
    case kDLBoolCode:
      if (dtype.bits == 8) return DType::kBool;
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::string dlpack_dtype_text(DLDataType dtype) {
  return "DLPack type code " + std::to_string(dtype.code) + " with " + std::to_string(dtype.bits) +
         " bits x " + std::to_string(dtype.lanes) + " lanes";
}

}  // namespace

void LentInputs::lend(const std::string& name, const TensorType& type, const py::handle& value) {
  if (!py::isinstance<py::array>(value) && py::hasattr(value, "__dlpack__")) {
    lend_dlpack(name, type, value);
  } else {
    lend_array(name, type, value);
  }
}

void LentInputs::lend_array(const std::string& name, const TensorType& type,
                            const py::handle& value) {
  const py::dtype want = numpy_dtype(type.dtype);
  // An array is checked as it lies, before any copy: a wrong broadcast view may be larger than
  // memory once copied, and must get the shape error, not a MemoryError. Anything else (a list)
  // becomes the array numpy makes of it.
  py::array array;
  if (py::isinstance<py::array>(value)) {
    array = py::reinterpret_borrow<py::array>(value);
  } else {
    array = py::array::ensure(value);
    if (!array) bad(name, "expected an array, got " + std::string(Py_TYPE(value.ptr())->tp_name));
  }
  if (!array.dtype().is(want) && !array.dtype().equal(want)) {
    bad(name, "expected dtype " + dtype_text(want) + " (" + std::string(dtype_name(type.dtype)) +
                  "), got " + dtype_text(array.dtype()));
  }
  check_shape(name, type, Shape(array.shape(), array.shape() + array.ndim()));
  if ((array.flags() & py::array::c_style) == 0) {
    // numpy's C-contiguous copy, through Python so that a MemoryError stays one.
    array = py::module_::import("numpy").attr("ascontiguousarray")(array);
  }
  views_.set(name, TensorView(type, array.data()));
  arrays_.push_back(std::move(array));
}

// Consumes the producer's DLPack capsule (renamed "used_dltensor", as the protocol asks) and
// views its memory where it is dense and row-major; a strided tensor is gathered into a copy.
void LentInputs::lend_dlpack(const std::string& name, const TensorType& type,
                             const py::handle& value) {
  py::object capsule = value.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    bad(name, "__dlpack__() did not return a DLPack tensor capsule");
  }
  DlpackTensor managed(
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor")));
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    bad(name, "a tensor in device memory (DLPack device type " +
                  std::to_string(t.device.device_type) +
                  "); ampc reads inputs from host memory: pass tensor.cpu()");
  }
  const std::optional<DType> dtype = from_dlpack_dtype(t.dtype);
  if (!dtype.has_value() || *dtype != type.dtype) {
    bad(name,
        "expected dtype " + std::string(dtype_name(type.dtype)) + ", got " +
            (dtype.has_value() ? std::string(dtype_name(*dtype)) : dlpack_dtype_text(t.dtype)));
  }
  check_shape(name, type, Shape(t.shape, t.shape + t.ndim));
  const auto* base = static_cast<const std::byte*>(t.data) + t.byte_offset;
  // Dense row-major unless a dimension of more than one element has another stride.
  bool dense = true;
  int64_t expected = 1;
  for (int d = t.ndim; d-- > 0;) {
    if (t.strides != nullptr && t.shape[d] > 1 && t.strides[d] != expected) dense = false;
    expected *= t.shape[d];
  }
  if (dense) {
    views_.set(name, TensorView(type, base));
  } else {
    auto copy = std::make_unique<Tensor>(type);
    const int64_t size = dtype_size(type.dtype);
    std::byte* out = reinterpret_cast<std::byte*>(copy->mutable_bytes().data());
    std::vector<int64_t> index(static_cast<size_t>(t.ndim), 0);
    for (int64_t i = 0; i < copy->num_elements(); ++i) {
      int64_t offset = 0;
      for (int d = 0; d < t.ndim; ++d) offset += index[static_cast<size_t>(d)] * t.strides[d];
      std::memcpy(out + i * size, base + offset * size, static_cast<size_t>(size));
      for (int d = t.ndim; d-- > 0;) {  // the next index in row-major order
        if (++index[static_cast<size_t>(d)] < t.shape[d]) break;
        index[static_cast<size_t>(d)] = 0;
      }
    }
    views_.set(name, TensorView(*copy));
    copies_.push_back(std::move(copy));
  }
  dlpack_.push_back(std::move(managed));
}

// A dict of arrays lent as the inputs `inputs` name (`what` they are, for the message).
std::unique_ptr<LentInputs> lend_inputs(const py::dict& arrays,
                                        const std::vector<TensorInfo>& inputs,
                                        const std::string& what) {
  auto lent = std::make_unique<LentInputs>(what);
  for (const auto& [key, value] : arrays) {
    if (!py::isinstance<py::str>(key)) {
      throw py::value_error("the keys are " + what + " names (str), not " +
                            py::cast<std::string>(py::repr(key)));
    }
    const std::string name = py::cast<std::string>(key);
    const TensorInfo* info = nullptr;
    for (const TensorInfo& input : inputs) {
      if (input.name == name) info = &input;
    }
    if (info == nullptr) {
      std::string names;
      for (const TensorInfo& input : inputs) names += (names.empty() ? "" : ", ") + input.name;
      throw py::value_error("'" + name + "' is not " + (what == "input" ? "an " : "a ") + what +
                            " (the " + what + "s: " + names + ")");
    }
    lent->lend(name, info->type, value);
  }
  return lent;
}

py::dict to_dict(TensorMap tensors) {
  py::dict out;
  for (auto& [name, tensor] : tensors) out[py::str(name)] = to_numpy(std::move(tensor));
  return out;
}

py::list describe(const std::vector<TensorInfo>& infos) {
  py::list out;
  for (const TensorInfo& info : infos) {
    out.append(py::make_tuple(info.name, std::string(dtype_name(info.type.dtype)),
                              py::tuple(py::cast(info.type.shape))));
  }
  return out;
}

}  // namespace ampc::python
