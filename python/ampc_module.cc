// The Python module's compiled part, `ampc._ampc`: the public sessions (ampc/session.h) over
// numpy arrays. The pure-Python package (python/ampc/) re-exports it with the CLI's compile and
// inspect; docs/python-api.md describes both.
//
// Arrays in (numpy arrays, or anything with __dlpack__ in host memory, such as a CPU torch
// tensor) must have the input's dtype and shape; they are lent to the session for the call
// (ampc::TensorView), which on the CPU reads them where they are: no copy, unless an array is not
// C-contiguous (numpy makes a contiguous copy; a strided DLPack tensor is gathered into one).
// Arrays out are numpy views of the tensors the session returned, which they keep alive (no
// copy). f16 is numpy's float16; bf16 is DLPack's bfloat16 in, or ml_dtypes.bfloat16 when that
// package is importable (else the raw bits as uint16); out, those arrays as ampc.BFloat16Array,
// whose __dlpack__ (bfloat16_dlpack below) says bfloat16.
// The GIL is released while a session loads, steps, evaluates or runs, so Python threads that
// drive different sessions run at once; each session has a lock, so two threads that share one
// take turns. A failed Status becomes ValueError (bad input: an
// invalid argument, a missing name, a value out of range) or RuntimeError, with its message.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ampc/ampc.h"

namespace py = pybind11;

namespace ampc::python {
namespace {

[[noreturn]] void raise(const absl::Status& status) {
  const std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(message);
    default:
      throw std::runtime_error(message);
  }
}

void check(const absl::Status& status) {
  if (!status.ok()) raise(status);
}

template <typename T>
T take(absl::StatusOr<T> value) {
  if (!value.ok()) raise(value.status());
  return *std::move(value);
}

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

// numpy's name of `dtype` ("float32"), with its byte order when that is not the machine's
// ("float32 (big-endian, '>f4')"), which ampc does not read.
std::string dtype_text(const py::dtype& dtype) {
  std::string text = py::cast<std::string>(dtype.attr("name"));
  if (py::cast<std::string>(dtype.attr("byteorder")) == ">") {
    text += " (big-endian, '" + py::cast<std::string>(dtype.attr("str")) + "')";
  }
  return text;
}

// A DLPack tensor this module consumed: its producer's memory stays valid until it is deleted.
struct DlpackDeleter {
  void operator()(DLManagedTensor* tensor) const {
    if (tensor->deleter != nullptr) tensor->deleter(tensor);
  }
};
using DlpackTensor = std::unique_ptr<DLManagedTensor, DlpackDeleter>;

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
  // The array itself when it is C-contiguous already; else a C-contiguous copy.
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) bad(name, "expected an array");
  if (!array.dtype().is(want) && !array.dtype().equal(want)) {
    bad(name, "expected dtype " + dtype_text(want) + " (" + std::string(dtype_name(type.dtype)) +
                  "), got " + dtype_text(array.dtype()));
  }
  check_shape(name, type, Shape(array.shape(), array.shape() + array.ndim()));
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

// The learning rate as the f32 the step takes; a ValueError for one f32 cannot hold (1e300 would
// become inf), which the step's own check would then name as inf.
std::optional<float> f32_lr(std::optional<double> lr) {
  if (lr && std::isfinite(*lr) && std::abs(*lr) > std::numeric_limits<float>::max()) {
    throw py::value_error("lr " + py::cast<std::string>(py::repr(py::float_(*lr))) +
                          " is beyond float32's range");
  }
  return lr ? std::optional<float>(static_cast<float>(*lr)) : std::nullopt;
}

// A dict of arrays lent as the inputs `inputs` name (`what` they are, for the message).
std::unique_ptr<LentInputs> lend_inputs(const py::dict& arrays,
                                        const std::vector<TensorInfo>& inputs,
                                        const std::string& what = "input") {
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

SessionOptions options_for(const std::string& device, int device_index, bool allow_tf32) {
  SessionOptions options;
  options.device = take(parse_device(device));
  options.device_index = device_index;
  options.allow_tf32 = allow_tf32;
  return options;
}

py::dict transfers_dict(const TransferCounts& t) {
  py::dict out;
  out["copies_to_device"] = t.copies_to_device;
  out["bytes_to_device"] = t.bytes_to_device;
  out["copies_to_host"] = t.copies_to_host;
  out["bytes_to_host"] = t.bytes_to_host;
  out["synchronizations"] = t.synchronizations;
  return out;
}

py::dict result_dict(const StepResult& r) {
  py::dict out;
  out["step"] = r.step;
  out["loss"] = r.loss;
  out["grad_norm"] = r.grad_norm;
  out["lr"] = r.lr;
  out["loss_scale"] = r.loss_scale;
  out["skipped"] = r.skipped;
  out["skipped_steps"] = r.skipped_steps;
  return out;
}

// A session and its lock. with() runs `fn` on the session with the GIL released and the lock
// held (taken without the GIL, so a thread waiting for it never blocks the interpreter).
template <typename Session>
struct Guarded {
  explicit Guarded(std::unique_ptr<Session> s) : session(std::move(s)) {}

  template <typename Fn>
  auto with(Fn fn) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex);
    return fn(*session);
  }

  std::unique_ptr<Session> session;
  std::mutex mutex;
};
using PyInference = Guarded<InferenceSession>;
using PyTraining = Guarded<TrainingSession>;

template <typename Session>
std::unique_ptr<Guarded<Session>> load(const std::string& path, SessionOptions options) {
  absl::StatusOr<std::unique_ptr<Session>> session;
  {
    py::gil_scoped_release release;
    session = Session::load(path, std::move(options));
  }
  return std::make_unique<Guarded<Session>>(take(std::move(session)));
}

}  // namespace
}  // namespace ampc::python

PYBIND11_MODULE(_ampc, m) {
  using namespace ampc;          // NOLINT(google-build-using-namespace): the module's body
  using namespace ampc::python;  // NOLINT(google-build-using-namespace)
  m.doc() = "ampc's runtime: run and train compiled ONNX models (docs/python-api.md)";
  m.attr("__version__") = AMPC_VERSION_STRING;
  m.def("_bfloat16_dlpack", &bfloat16_dlpack, py::arg("array"),
        "A DLPack capsule of bfloat16 over a bf16 array's memory (BFloat16Array.__dlpack__).");

  py::class_<PyInference>(m, "InferenceSession",
                          "Runs an ONNX model ampc supports on the CPU or a GPU.")
      .def(py::init([](const std::string& path, const std::string& device, int device_index,
                       bool allow_tf32, const std::map<std::string, std::vector<int64_t>>& shapes,
                       const std::map<std::string, int64_t>& dims) {
             SessionOptions options = options_for(device, device_index, allow_tf32);
             options.shapes.insert(shapes.begin(), shapes.end());
             options.dims.insert(dims.begin(), dims.end());
             return load<InferenceSession>(path, std::move(options));
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("device_index") = 0,
           py::arg("allow_tf32") = false,
           py::arg("shapes") = std::map<std::string, std::vector<int64_t>>{},
           py::arg("dims") = std::map<std::string, int64_t>{},
           "Loads and compiles the model at `path` for `device` ('cpu' or 'cuda'). A model with "
           "dynamic input dims needs them fixed: `shapes` ({input: [dims]}, as --shape) or "
           "`dims` ({dim name: size}, as --dim).")
      .def_property_readonly(
          "inputs",
          [](PyInference& s) { return describe(s.with([](auto& x) { return x.inputs(); })); },
          "[(name, dtype, shape)] of the graph inputs")
      .def_property_readonly(
          "outputs",
          [](PyInference& s) { return describe(s.with([](auto& x) { return x.outputs(); })); },
          "[(name, dtype, shape)] of the graph outputs")
      .def(
          "run",
          [](PyInference& s, const py::dict& inputs) {
            const std::vector<TensorInfo> infos = s.with([](auto& x) { return x.inputs(); });
            for (const TensorInfo& info : infos) {
              if (!inputs.contains(info.name)) {
                std::string names;
                for (const TensorInfo& input : infos) {
                  names += (names.empty() ? "" : ", ") + input.name;
                }
                throw py::value_error("input '" + info.name + "' is missing (the inputs: " + names +
                                      ")");
              }
            }
            const std::unique_ptr<LentInputs> lent = lend_inputs(inputs, infos);
            return to_dict(take(s.with([&](auto& x) { return x.run(lent->views()); })));
          },
          py::arg("inputs"), "Runs on {name: array} and returns {name: array} of every output.")
      .def(
          "transfers",
          [](PyInference& s) {
            return transfers_dict(s.with([](auto& x) { return x.transfers(); }));
          },
          "What crossed between host and device since load: {'copies_to_device', "
          "'bytes_to_device', 'copies_to_host', 'bytes_to_host', 'synchronizations'}. On the CPU, "
          "inputs read in place are not copies.");

  py::class_<PyTraining>(m, "TrainingSession",
                         "Trains a model compiled with `ampc compile --optimizer`.")
      .def(py::init([](const std::string& path, const std::string& device, int device_index,
                       bool allow_tf32) {
             return load<TrainingSession>(path, options_for(device, device_index, allow_tf32));
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("device_index") = 0,
           py::arg("allow_tf32") = false,
           "Loads the training model at `path` for `device` ('cpu' or 'cuda').")
      .def_property_readonly(
          "batch_inputs",
          [](PyTraining& s) { return describe(s.with([](auto& x) { return x.batch_inputs(); })); },
          "[(name, dtype, shape)]: what a batch for step() holds")
      .def_property_readonly(
          "eval_inputs",
          [](PyTraining& s) { return describe(s.with([](auto& x) { return x.eval_inputs(); })); },
          "[(name, dtype, shape)]: what a batch for evaluate() holds")
      .def_property_readonly(
          "steps_done",
          [](PyTraining& s) { return s.with([](auto& x) { return x.steps_done(); }); },
          "the steps taken (restored by load_checkpoint)")
      .def_property_readonly(
          "default_lr",
          [](PyTraining& s) { return s.with([](auto& x) { return x.default_lr(); }); },
          "the learning rate compiled into the model, or None")
      .def_property_readonly(
          "state_names",
          [](PyTraining& s) { return s.with([](auto& x) { return x.state_names(); }); },
          "the names of the parameters, moments, counters and statistics the model keeps")
      .def(
          "step",
          [](PyTraining& s, const py::dict& batch, std::optional<double> lr) {
            if (const int64_t k = s.with([](auto& x) { return x.accumulation_steps(); }); k > 1) {
              throw py::value_error(
                  "this model accumulates gradients over " + std::to_string(k) +
                  " micro-batches (compiled with accumulate=" + std::to_string(k) +
                  "): give step() a list of " + std::to_string(k) + " dicts");
            }
            const std::optional<float> rate = f32_lr(lr);  // with the GIL, which with() releases
            const std::unique_ptr<LentInputs> lent =
                lend_inputs(batch, s.with([](auto& x) { return x.batch_inputs(); }));
            return result_dict(take(s.with([&](auto& x) { return x.step(lent->views(), rate); })));
          },
          py::arg("batch"), py::arg("lr") = py::none(),
          "One training step on {name: array}, at `lr` or the compiled learning rate. Returns "
          "{'step', 'loss', 'grad_norm', 'lr', 'loss_scale', 'skipped', 'skipped_steps'}.")
      .def(
          "step",
          [](PyTraining& s, const py::list& micro_batches, std::optional<double> lr) {
            const std::optional<float> rate = f32_lr(lr);  // with the GIL, which with() releases
            const std::vector<TensorInfo> inputs = s.with([](auto& x) { return x.batch_inputs(); });
            // Copied (the step takes them whole), each checked as a batch is.
            std::vector<TensorMap> copies;
            for (const py::handle& item : micro_batches) {
              if (!py::isinstance<py::dict>(item)) {
                throw py::type_error("step: micro-batch " + std::to_string(copies.size()) +
                                     " is not a dict of arrays");
              }
              const std::unique_ptr<LentInputs> lent =
                  lend_inputs(py::reinterpret_borrow<py::dict>(item), inputs);
              TensorMap& copy = copies.emplace_back();
              for (const auto& [name, view] : lent->views()) {
                const std::span<const uint8_t> bytes = view.bytes();
                copy.emplace(name,
                             Tensor(view.type, std::vector<uint8_t>(bytes.begin(), bytes.end())));
              }
            }
            return result_dict(take(s.with([&](auto& x) { return x.step(copies, rate); })));
          },
          py::arg("micro_batches"), py::arg("lr") = py::none(),
          "One step of a model compiled with accumulate=K on a list of exactly K micro-batches "
          "({name: array} each): K runs of the step, one update; the loss is their mean.")
      .def(
          "evaluate",
          [](PyTraining& s, const py::dict& batch) {
            const std::unique_ptr<LentInputs> lent =
                lend_inputs(batch, s.with([](auto& x) { return x.eval_inputs(); }));
            return to_dict(take(s.with([&](auto& x) { return x.evaluate(lent->views()); })));
          },
          py::arg("batch"), "The eval graph on {name: array} with the current weights.")
      .def(
          "state",
          [](PyTraining& s, const std::string& name) {
            return to_numpy(take(s.with([&](auto& x) { return x.state(name); })));
          },
          py::arg("name"), "A copy of the state `name` (a weight, a moment, a counter).")
      .def(
          "set_state",
          [](PyTraining& s, const std::string& name, const py::handle& value) {
            const Tensor current = take(s.with([&](auto& x) { return x.state(name); }));
            LentInputs lent("state");
            lent.lend(name, current.type(), value);
            const TensorView replacement = lent.views().find(name)->second;
            check(s.with([&](auto& x) { return x.set_state(name, replacement); }));
          },
          py::arg("name"), py::arg("value"), "Replaces the state `name` (same dtype and shape).")
      .def(
          "weights",
          [](PyTraining& s) {
            const std::vector<TensorInfo> weights =
                s.with([](auto& x) { return x.weight_infos(); });
            py::dict out;
            for (const TensorInfo& weight : weights) {
              out[py::str(weight.name)] =
                  to_numpy(take(s.with([&](auto& x) { return x.state(weight.name); })));
            }
            return out;
          },
          "{name: array} of the weights an exported model holds: the parameters and running "
          "statistics (copies; no optimizer moment, counter or loss scale).")
      .def(
          "set_weights",
          [](PyTraining& s, const py::dict& weights) {
            // Every array is checked before the first is written: a bad one changes nothing.
            const std::unique_ptr<LentInputs> lent =
                lend_inputs(weights, s.with([](auto& x) { return x.weight_infos(); }), "weight");
            check(s.with([&](auto& x) -> absl::Status {
              for (const auto& [name, view] : lent->views()) {
                AMPC_RETURN_IF_ERROR(x.set_state(name, view));
              }
              return absl::OkStatus();
            }));
          },
          py::arg("weights"),
          "Replaces the weights {name: array} names (a subset of weights(), each of its dtype "
          "and shape).")
      .def(
          "save_checkpoint",
          [](PyTraining& s, const std::string& path) {
            check(s.with([&](auto& x) { return x.save_checkpoint(path); }));
          },
          py::arg("path"), "Writes every piece of state and the step count (safetensors).")
      .def(
          "load_checkpoint",
          [](PyTraining& s, const std::string& path) {
            check(s.with([&](auto& x) { return x.load_checkpoint(path); }));
          },
          py::arg("path"), "Restores what save_checkpoint wrote; on error nothing changes.")
      .def(
          "export",
          [](PyTraining& s, const std::string& path, bool keep_loss) {
            check(s.with([&](auto& x) { return x.export_inference_model(path, keep_loss); }));
          },
          py::arg("path"), py::kw_only(), py::arg("keep_loss") = false,
          "Writes the eval graph with the current weights as an inference model.")
      .def(
          "transfers",
          [](PyTraining& s) {
            return transfers_dict(s.with([](auto& x) { return x.transfers(); }));
          },
          "What crossed between host and device since load (the step and eval graph together): "
          "{'copies_to_device', 'bytes_to_device', 'copies_to_host', 'bytes_to_host', "
          "'synchronizations'}. On the CPU, a batch read in place is not copied.");
}
