// Kernels and their registry.
//
// A kernel is a plain function over the typed memory of one node's operands and outputs, on one
// device: the CPU kernels compute before they return, the CUDA kernels launch on the backend's
// stream. Kernels are registered per (domain, op, device, dtype) by runtime/<device>/<family>.cc
// at static initialization, and the planner resolves each node's kernel once, at load.
//
// A kernel that needs per-node state (library descriptors, a chosen algorithm, launch shapes)
// makes it once at load with KernelDef::init; the executor keeps it and hands it to every call. The
// dtype of the key is the element type of one tensor the kernel names (`KernelDef::keyed_on`):
// operand 0 for most ops, the data operand for Where, output 0 for ConstantOfShape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "compiler/ir.h"
#include "runtime/backend.h"
#include "runtime/numeric.h"
#include "runtime/optimizer_math.h"

namespace ampc::runtime {

// One operand or output of a kernel call: its type and where its elements live. An omitted
// optional operand or output has no type and no data.
struct TensorArg {
  const TensorType* type = nullptr;
  void* data = nullptr;

  bool present() const { return type != nullptr; }
  DType dtype() const { return type->dtype; }
  const Shape& shape() const { return type->shape; }
  int64_t num_elements() const { return type->num_elements(); }
  int64_t byte_size() const { return type->byte_size(); }

  // Typed views; T must have the size of the element type.
  template <typename T>
  std::span<const T> in() const {
    AMPC_CHECK(present() && sizeof(T) == static_cast<size_t>(dtype_size(dtype())));
    return {static_cast<const T*>(data), static_cast<size_t>(num_elements())};
  }
  template <typename T>
  std::span<T> out() const {
    AMPC_CHECK(present() && sizeof(T) == static_cast<size_t>(dtype_size(dtype())));
    return {static_cast<T*>(data), static_cast<size_t>(num_elements())};
  }
};

// What a kernel's init made for its node; the executor owns it for the life of the plan.
struct KernelState {
  virtual ~KernelState() = default;
  // Device scratch every call needs (a chosen convolution algorithm's), on top of what the
  // KernelDef's workspace function asks for; the executor provides the larger of the two.
  int64_t workspace_bytes = 0;

  // An asynchronous kernel finishes its outputs off the execution context's stream (a
  // collective on a communication stream, overlapping the kernels queued after it). Its outputs
  // are complete for the stream only once join() made the stream wait for them: the executor
  // calls join() before each step that reads them and at the end of every run. Such a kernel
  // reads its operands on the stream (they may be reused as soon as it returns), and the
  // executor also joins it at the next step when one of its outputs has no reader.
  virtual bool asynchronous() const { return false; }
  virtual absl::Status join(const ExecutionContext& /*exec*/) { return absl::OkStatus(); }
};

// What a kernel sees: the node (for attributes), its operands and outputs in the device's
// memory, scratch memory of the size its KernelDef (or its state) asked for, and where it runs.
struct KernelContext {
  const Node& node;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
  std::span<std::byte> workspace;
  // Which draw of the random ops (Dropout) this run makes: masks are a function of (seed,
  // random_stream, element index). A TrainingSession sets it to the step index, so every step
  // draws new masks and a resumed run draws the same ones; an InferenceSession keeps 0 unless told.
  // (CUDA kernels read the same number from ExecutionContext::random_stream in device memory.)
  uint64_t random_stream = 0;
  // Whether this run is one of an accumulation window's first K - 1 runs (`ampc compile
  // --accumulate K`; a TrainingSession sets it): the collectives marked `window` then leave each
  // rank's values its own, as in a group of one, and communicate nothing (ops/collective.cc).
  bool inside_window = false;
  // The backend's execution context; null only for CPU kernels called directly by a test.
  ExecutionContext* exec = nullptr;
  // What KernelDef::init made for this node, or null.
  KernelState* state = nullptr;
  // The node's position in the plan, for the device error word.
  int step = -1;

  const TensorArg& input(int i) const { return inputs.at(i); }
  const TensorArg& output(int i) const { return outputs.at(i); }
  bool has_input(int i) const { return i < static_cast<int>(inputs.size()) && inputs[i].present(); }
  bool has_output(int i) const {
    return i < static_cast<int>(outputs.size()) && outputs[i].present();
  }
};

// Returns a Status only for data-dependent failures (an index out of range); shapes and types
// were checked when the graph was loaded.
using KernelFn = absl::Status (*)(const KernelContext& ctx);
// Scratch bytes a node needs while its kernel runs.
using WorkspaceFn = int64_t (*)(const Node& node);
// Makes a node's state once, at load: `ctx` is the context later calls get, without workspace.
// A Status names what the device or library refused (no algorithm for this convolution).
using KernelInitFn = absl::StatusOr<std::unique_ptr<KernelState>> (*)(const KernelContext& ctx);

// Which tensor's element type selects the kernel.
struct KeyedOn {
  bool output = false;
  int index = 0;
};

struct KernelDef {
  std::string domain;  // "" for the standard ONNX domain
  std::string op;
  Device device = Device::kCpu;
  std::vector<DType> dtypes;
  KeyedOn keyed_on;
  KernelFn fn = nullptr;
  WorkspaceFn workspace_bytes = nullptr;
  // An operand whose buffer output 0 may take over when the node is that operand's last reader
  // and both have the same element count and byte size (element-wise ops, reshapes). -1: never.
  // The kernel must then be correct when the two pointers are equal.
  int in_place_operand = -1;
  // For nodes with several outputs that update state (an optimizer's parameter and moments):
  // entry i is the operand output i may overwrite, -1 none; the kernel must read each element
  // of every operand before it writes that element of any output. When empty, output 0 follows
  // in_place_operand and the other outputs overwrite nothing.
  std::vector<int> in_place_operands;
  // For variadic nodes (AllGather over its kept values): the operand output `output` of `node`
  // may overwrite, -1 none, under the same rule. When set, in_place_operands is not read.
  int (*in_place_operand_of)(const Node& node, int output) = nullptr;
  int in_place_operand_for(const Node& node, int output) const {
    if (in_place_operand_of != nullptr) return in_place_operand_of(node, output);
    if (in_place_operands.empty()) return output == 0 ? in_place_operand : -1;
    return output < static_cast<int>(in_place_operands.size()) ? in_place_operands[output] : -1;
  }
  // Optional: per-node state made once at load (see KernelInitFn).
  KernelInitFn init = nullptr;
};

// Kernels are added at static initialization of the library that holds them: ampc_runtime's
// (the CPU's) before main, libampc_cuda's when it is loaded (runtime/cuda_library.h), which may
// be while other threads resolve kernels. So the registry is locked, and a KernelDef never moves
// once added: the pointers that plans hold stay valid.
class KernelRegistry {
 public:
  // The process-wide registry that runtime/*/<family>.cc fill at static initialization.
  static KernelRegistry& global();

  void add(KernelDef def);
  // The kernel for `domain`.`op` on `device` whose key tensor has element type `dtype`, or null.
  const KernelDef* find(std::string_view domain, std::string_view op, Device device,
                        DType dtype) const;
  // The kernel for `node`; a Status naming the node, the op and the dtype when there is none.
  absl::StatusOr<const KernelDef*> resolve(const Node& node, Device device) const;
  // Element types with a kernel for `domain`.`op` on `device` (for messages and autocast).
  std::vector<DType> dtypes(std::string_view domain, std::string_view op, Device device) const;

 private:
  const KernelDef* find_locked(std::string_view domain, std::string_view op, Device device,
                               DType dtype) const;
  std::vector<DType> dtypes_locked(std::string_view domain, std::string_view op,
                                   Device device) const;

  mutable std::shared_mutex mutex_;
  std::deque<KernelDef> defs_;  // in registration order
};

// Registers a family of kernels at static initialization:
// `static KernelRegistration kActivationKernels(&register_activation_kernels);` (the object named
// after the function, so that sources compiled together in a unity build do not clash).
struct KernelRegistration {
  explicit KernelRegistration(void (*register_kernels)(KernelRegistry&)) {
    register_kernels(KernelRegistry::global());
  }
};

// Attribute readers every backend's kernels use.
// The integer attribute `name` of `node`, or `fallback` when the node does not have it.
int64_t int_attr_or(const Node& node, std::string_view name, int64_t fallback);
// A float attribute as the double its shortest decimal spelling names: 0.9f as Python's 0.9.
// (That decimal rounds back to the float, so rounding the result to float gives the attribute.)
double decimal_attr(const Node& node, std::string_view name);
// The hyperparameters of ampc.SGD, ampc.Adam and ampc.LossScaleUpdate nodes, read so.
numeric::SgdHyper sgd_hyper(const Node& node);
numeric::AdamHyper adam_hyper(const Node& node);
numeric::LossScaleRule loss_scale_rule(const Node& node);

// The tensor whose element type keys `node`'s kernel under `keyed_on`, or null when absent.
const TensorType* key_type(const Node& node, KeyedOn keyed_on);

}  // namespace ampc::runtime
