// master-weights: the persistent low-precision weight copies that let the sharded optimizer
// (ZeRO stage 1, passes/data_parallel.h) keep one block of each f32 master weight per rank.
//
// Mixed precision (O1/O2) keeps every parameter in f32 and casts it to f16 or bf16 where the
// forward reads it. A parameter every reader of which (but its update) is such a Cast to one
// dtype, directly or through data movement (Transpose, Reshape, Squeeze, Unsqueeze, Flatten,
// Identity, Gather, Slice: a Linear's weight exported as Transpose then MatMul), in the training
// step and in the eval graph alike, can instead be read through a copy kept in that dtype: an
// initializer named `<parameter>.<dtype>` (`fc1.weight.f16`). The Casts go, and the data
// movement runs on the copy; every value read downstream is the one the Casts gave, bit for bit
// (a cast rounds each element once, and moving elements commutes with it). The f32 master
// weights are then read by the update alone, so a rank needs only its block of them. A
// parameter read in f32 (a LayerNorm's weight, a bias added in f32) keeps whole master weights.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc {

// A parameter read through a persistent low-precision copy: `copy` (whole, in `dtype`) in place
// of every Cast of `parameter`, in the step and in the eval graph.
struct LowPrecisionCopy {
  std::string parameter;
  std::string copy;
  DType dtype = DType::kF16;
};

// The copy `parameter` (an f32 initializer of the step) can be read through: when every reader
// of it but `update` reads it only through Casts to one of f16 or bf16 (see above), and so does
// every reader of `in_eval` (the initializer of that name in the eval graph `eval`, or null when
// it has none). The copy's name must be free in both graphs (but for a Cast's output it
// replaces). Nullopt otherwise.
std::optional<LowPrecisionCopy> low_precision_copy(const Value& parameter, const Node& update,
                                                   const Graph* eval, const Value* in_eval);

// In `graph` (the step or the eval graph), makes every Cast of `parameter` (through data
// movement, which then moves the copy) read an initializer `copy.copy` holding `whole` (the
// parameter's value) cast to `copy.dtype`, and returns it. The parameter's initializer stays
// (the step's update reads it; in the eval graph the caller removes it).
Value* read_through_copy(Graph& graph, Value& parameter, const LowPrecisionCopy& copy,
                         const Tensor& whole);

// The inverse on an eval graph, for the exported model: the copy's readers read a Cast of the
// parameter again, whose initializer holds `whole` (its f32 master weights, whole).
absl::Status restore_master_weights(Graph& eval, const LowPrecisionCopy& copy, Tensor whole);

// `value` (f32) rounded to `dtype` element by element, as the Cast does.
Tensor narrowed(const Tensor& value, DType dtype);

}  // namespace ampc
