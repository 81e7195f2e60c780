// The Python module's compiled part, `ampc._ampc`: the public sessions (ampc/session.h) over
// numpy arrays. The pure-Python package (python/ampc/) re-exports it with the CLI's compile and
// inspect; docs/python-api.md describes both.
//
// Arrays in must have the input's dtype and shape; their bytes are copied once into the tensor
// the session binds. Arrays out are numpy views of the tensors the session returned, which they
// keep alive (no copy). f16 is numpy's float16; bf16 is
// ml_dtypes.bfloat16 when that package is importable, else the raw bits as uint16.
// The GIL is released while a session loads, steps, evaluates or runs, so Python threads that
// drive different sessions run at once; each session has a lock, so two threads that share one
// take turns. A failed Status becomes ValueError (bad input: an
// invalid argument, a missing name, a value out of range) or RuntimeError, with its message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
// whose layout numpy 2 changed.
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
  return py::array(numpy_dtype(owned->dtype()), shape, strides, owned->mutable_bytes().data(),
                   keeper);
}

std::string dtype_text(const py::dtype& dtype) { return py::cast<std::string>(dtype.attr("name")); }

// `array` as a tensor of `type` (the input `name`'s): its dtype and shape must match.
Tensor to_tensor(const std::string& name, const TensorType& type, const py::handle& value) {
  const py::dtype want = numpy_dtype(type.dtype);
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) throw py::value_error("input '" + name + "': expected an array");
  if (!array.dtype().is(want) && !array.dtype().equal(want)) {
    throw py::value_error("input '" + name + "': expected dtype " + dtype_text(want) + " (" +
                          std::string(dtype_name(type.dtype)) + "), got " +
                          dtype_text(array.dtype()));
  }
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (shape != type.shape) {
    throw py::value_error("input '" + name + "': expected shape " + shape_to_string(type.shape) +
                          ", got " + shape_to_string(shape));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(type.byte_size()));
  if (!bytes.empty()) std::memcpy(bytes.data(), array.data(), bytes.size());
  return Tensor(type, std::move(bytes));
}

// A dict of arrays as the tensors of `inputs`, by name.
TensorMap to_tensors(const py::dict& arrays, const std::vector<TensorInfo>& inputs) {
  TensorMap tensors;
  for (const auto& [key, value] : arrays) {
    const std::string name = py::cast<std::string>(key);
    const TensorInfo* info = nullptr;
    for (const TensorInfo& input : inputs) {
      if (input.name == name) info = &input;
    }
    if (info == nullptr) {
      std::string names;
      for (const TensorInfo& input : inputs) names += (names.empty() ? "" : ", ") + input.name;
      throw py::value_error("'" + name + "' is not an input (the inputs: " + names + ")");
    }
    tensors.emplace(name, to_tensor(name, info->type, value));
  }
  return tensors;
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

  py::class_<PyInference>(m, "InferenceSession",
                          "Runs an ONNX model ampc supports on the CPU or a GPU.")
      .def(py::init([](const std::string& path, const std::string& device, int device_index,
                       bool allow_tf32) {
             return load<InferenceSession>(path, options_for(device, device_index, allow_tf32));
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("device_index") = 0,
           py::arg("allow_tf32") = false,
           "Loads and compiles the model at `path` for `device` ('cpu' or 'cuda').")
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
            const TensorMap tensors =
                to_tensors(inputs, s.with([](auto& x) { return x.inputs(); }));
            return to_dict(take(s.with([&](auto& x) { return x.run(tensors); })));
          },
          py::arg("inputs"), "Runs on {name: array} and returns {name: array} of every output.");

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
          [](PyTraining& s, const py::dict& batch, std::optional<float> lr) {
            const TensorMap tensors =
                to_tensors(batch, s.with([](auto& x) { return x.batch_inputs(); }));
            return result_dict(take(s.with([&](auto& x) { return x.step(tensors, lr); })));
          },
          py::arg("batch"), py::arg("lr") = py::none(),
          "One training step on {name: array}, at `lr` or the compiled learning rate. Returns "
          "{'step', 'loss', 'grad_norm', 'lr', 'loss_scale', 'skipped', 'skipped_steps'}.")
      .def(
          "evaluate",
          [](PyTraining& s, const py::dict& batch) {
            const TensorMap tensors =
                to_tensors(batch, s.with([](auto& x) { return x.eval_inputs(); }));
            return to_dict(take(s.with([&](auto& x) { return x.evaluate(tensors); })));
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
            const Tensor replacement = to_tensor(name, current.type(), value);
            check(s.with([&](auto& x) { return x.set_state(name, replacement); }));
          },
          py::arg("name"), py::arg("value"), "Replaces the state `name` (same dtype and shape).")
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
          "Writes the eval graph with the current weights as an inference model.");
}
