// The Python module's compiled part, `ampc._ampc`: the public sessions (ampc/session.h) over
// numpy arrays. The pure-Python package (python/ampc/) re-exports it with the CLI's compile and
// inspect; docs/python-api.md describes both. Arrays cross as python/arrays.h says.
//
// The GIL is released while a session loads, steps, evaluates or runs, so Python threads that
// drive different sessions run at once; each session has a lock, so two threads that share one
// take turns. A failed Status becomes ValueError (bad input: an
// invalid argument, a missing name, a value out of range) or RuntimeError, with its message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
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
#include "arrays.h"

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

// The learning rate as the f32 the step takes; a ValueError for one f32 cannot hold: 1e300 would
// become inf, which the step's own check would then name as inf, and 1e-50 would become 0, a
// step that silently changes nothing.
std::optional<float> f32_lr(std::optional<double> lr) {
  if (lr && std::isfinite(*lr) && std::abs(*lr) > std::numeric_limits<float>::max()) {
    throw py::value_error("lr " + py::cast<std::string>(py::repr(py::float_(*lr))) +
                          " is beyond float32's range");
  }
  if (lr && *lr != 0 && static_cast<float>(*lr) == 0) {
    throw py::value_error("lr " + py::cast<std::string>(py::repr(py::float_(*lr))) +
                          " rounds to 0 in float32 (the step would change nothing)");
  }
  return lr ? std::optional<float>(static_cast<float>(*lr)) : std::nullopt;
}

// A path argument as the file system's bytes: a str, bytes or os.PathLike, as os.fsencode takes
// them. A NUL would end the path early in every C call that takes it (a load of "a.ckpt\0b"
// would read a.ckpt), so it is refused as Python's own open() refuses it.
std::string path_arg(const py::handle& value, const std::string& call, const char* argument) {
  py::object encoded;
  try {
    encoded = py::module_::import("os").attr("fsencode")(value);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    throw py::type_error(call + ": " + argument + " is a path (str or os.PathLike), not " +
                         Py_TYPE(value.ptr())->tp_name);
  }
  std::string path = py::cast<std::string>(encoded);
  if (path.find('\0') != std::string::npos) {
    throw py::value_error(call + ": " + argument + " " + py::cast<std::string>(py::repr(value)) +
                          " holds a NUL character (embedded null byte), which no file name can");
  }
  return path;
}

// The options the Python sessions take. Those that would do nothing on the device are refused,
// as the CLI refuses --allow-tf32 on the cpu.
SessionOptions options_for(const std::string& device, int device_index, bool allow_tf32,
                           bool check_numerics) {
  SessionOptions options;
  options.device = take(parse_device(device));
  if (device_index < 0) {
    throw py::value_error("device_index=" + std::to_string(device_index) +
                          " is not a GPU index (0 is the first GPU)");
  }
  if (options.device == Device::kCpu && allow_tf32) {
    throw py::value_error(
        "allow_tf32=True has no effect on the cpu device (use it with device='cuda')");
  }
  if (options.device == Device::kCpu && device_index != 0) {
    throw py::value_error("device_index=" + std::to_string(device_index) +
                          " has no effect on the cpu device (use it with device='cuda')");
  }
  options.device_index = device_index;
  options.allow_tf32 = allow_tf32;
  options.check_numerics = check_numerics;
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
      .def(py::init([](const py::object& path, const std::string& device, int device_index,
                       bool allow_tf32, const std::map<std::string, std::vector<int64_t>>& shapes,
                       const std::map<std::string, int64_t>& dims, bool check_numerics) {
             const std::string file = path_arg(path, "InferenceSession", "path");
             SessionOptions options = options_for(device, device_index, allow_tf32, check_numerics);
             options.shapes.insert(shapes.begin(), shapes.end());
             options.dims.insert(dims.begin(), dims.end());
             return load<InferenceSession>(file, std::move(options));
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("device_index") = 0,
           py::arg("allow_tf32") = false,
           py::arg("shapes") = std::map<std::string, std::vector<int64_t>>{},
           py::arg("dims") = std::map<std::string, int64_t>{}, py::arg("check_numerics") = false,
           "Loads and compiles the model at `path` (str or os.PathLike) for `device` ('cpu' or "
           "'cuda'). A model with dynamic input dims needs them fixed: `shapes` ({input: [dims]}, "
           "as --shape) or `dims` ({dim name: size}, as --dim). check_numerics: a node that writes "
           "an inf or a NaN its inputs did not hold fails the run (ValueError naming it).")
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
      .def(py::init([](const py::object& path, const std::string& device, int device_index,
                       bool allow_tf32, bool check_numerics) {
             const std::string file = path_arg(path, "TrainingSession", "path");
             return load<TrainingSession>(
                 file, options_for(device, device_index, allow_tf32, check_numerics));
           }),
           py::arg("path"), py::kw_only(), py::arg("device") = "cpu", py::arg("device_index") = 0,
           py::arg("allow_tf32") = false, py::arg("check_numerics") = false,
           "Loads the training model at `path` (str or os.PathLike) for `device` ('cpu' or "
           "'cuda'). check_numerics: a step in which a node writes an inf or a NaN its inputs did "
           "not hold raises ValueError naming it and changes no state.")
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
          [](PyTraining& s, const py::object& path) {
            const std::string file = path_arg(path, "save_checkpoint", "path");
            check(s.with([&](auto& x) { return x.save_checkpoint(file); }));
          },
          py::arg("path"), "Writes every piece of state and the step count (safetensors).")
      .def(
          "load_checkpoint",
          [](PyTraining& s, const py::object& path) {
            const std::string file = path_arg(path, "load_checkpoint", "path");
            check(s.with([&](auto& x) { return x.load_checkpoint(file); }));
          },
          py::arg("path"), "Restores what save_checkpoint wrote; on error nothing changes.")
      .def(
          "export",
          [](PyTraining& s, const py::object& path, bool keep_loss) {
            const std::string file = path_arg(path, "export", "path");
            check(s.with([&](auto& x) { return x.export_inference_model(file, keep_loss); }));
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
