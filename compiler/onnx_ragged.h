// Slices whose bounds are data, reduced along the sliced axis: the bags of nn.EmbeddingBag with
// `offsets`, and any loop that sums, averages or takes the largest of a run-time range of rows.
//
// ampc's values have static shapes, so such a slice is not a value of the graph. The importer
// keeps it as a *ragged slice* (the whole source, the axis, the run-time start and end), maps
// what reads it row by row onto the whole source (a Gather by its indices, Cast, Unsqueeze,
// element-wise arithmetic with another slice of the same bounds or with a value constant along
// the axis), and lowers a ReduceSum, ReduceMean, ReduceMax or ReduceMin over the axis to the
// same reduction of the whole source with the rows outside the bounds masked (the identity of
// the reduction, so an empty range gives ONNX's reduction of an empty set: 0, the lowest value,
// the highest; a mean divides by the length, 0/0 for an empty range).
//
// One bag's masked reduction reads the whole source, so a Loop of n bags would cost n times the
// source. Where the bags of consecutive iterations are stacked (a Loop's scan output, a
// ConcatFromSequence of what the iterations inserted), possibly through element-wise ops of the
// same form in each iteration (PyTorch's dynamo export selects zeros for an empty bag with an
// If on `start == end`), the stack becomes one segment reduction: each row goes to the bag
// whose range holds it (ScatterND or ScatterElements with the reduction), in one pass over the
// source.
// That needs the bags in order: each start at or after the previous bag's start, each end at or
// before the next bag's start, which nn.EmbeddingBag's offsets are (PyTorch requires them
// ascending). The scatters reduce by add from opset 16 (before, each bag keeps its masked
// reduction) and by max and min from 18; at 16 and 17 a max or min is a running extremum
// within the bags in log2(rows) rounds, read at each bag's last row.
#pragma once

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "compiler/onnx_lowering.h"

namespace ampc::onnx_io {

// `source` sliced along `axis` from `start` to `end` (one-element integer values known only at
// run time; Slice's rules: negative counts from the end, clamped to the axis). Or, with `mask`
// set (and no bounds), the rows of `source` along axis 0 where `mask` (bool, one element per
// row) is true: `x[mask]` (compiler/onnx_masked_rows.cc).
struct RaggedSlice {
  Value* source = nullptr;
  int64_t axis = 0;
  Value* start = nullptr;
  Value* end = nullptr;
  Value* mask = nullptr;
  // With `mask`: the selection as the model wrote it ("x[m]"), for messages.
  std::string selected{};
};

// The indices NonZero gives of a mask's true elements, before they select rows
// (compiler/onnx_masked_rows.cc), in each form the exporters pass them through.
struct MaskIndices {
  enum class Form {
    kNonZero,      // NonZero's output: [rank of the mask, count]
    kCoordinates,  // transposed: [count, rank of the mask]
    kVector,       // a mask of rank 1: [count]
    kShape,        // the shape of kVector: [1], holding the count
  };
  Value* mask = nullptr;  // the mask as NonZero read it
  Form form = Form::kNonZero;
};

// A reduction (ReduceSum, ReduceMean, ReduceMax, ReduceMin) of one ragged slice along its axis,
// with the axis kept.
struct BagReduction {
  std::string op;
  RaggedSlice bag;
};

// The importer's ragged slices by name, and the values that are one bag's reduction.
class RaggedValues {
 public:
  const RaggedSlice* slice(const std::string& name) const;
  const BagReduction* bag(const Value* value) const;
  void add_slice(const std::string& name, RaggedSlice slice) { slices_[name] = slice; }
  void add_bag(const Value* value, BagReduction bag) { bags_[value] = std::move(bag); }
  const MaskIndices* mask_indices(const std::string& name) const;
  void add_mask_indices(const std::string& name, MaskIndices indices) {
    mask_indices_[name] = indices;
  }
  // The whole-source value an earlier slice made by `op` (Gather, Cast, ...) of `operands`
  // with `detail` (its attributes), or null: each iteration of a Loop reads the same one.
  Value*& made(std::string_view op, const std::vector<Value*>& operands,
               const std::string& detail) {
    return made_[{std::string(op), operands, detail}];
  }

 private:
  std::map<std::string, RaggedSlice, std::less<>> slices_;
  std::map<const Value*, BagReduction> bags_;
  std::map<std::string, MaskIndices, std::less<>> mask_indices_;
  std::map<std::tuple<std::string, std::vector<Value*>, std::string>, Value*> made_;
};

// Whether the importer lowers `proto` here: a Slice along one axis whose start or end is
// computed at run time, or one of the ops above reading a ragged slice.
bool reads_or_makes_ragged(const onnx::NodeProto& proto, ImportSink& sink);
absl::Status lower_ragged(const onnx::NodeProto& proto, const std::string& label, ImportSink& sink);

// The same for the rows a boolean mask selects (`x[mask]`: NonZero, then GatherND or Gather),
// which ampc keeps as the whole source and the mask: the ops that treat rows independently
// (element-wise arithmetic, activations, MatMul on the rows, normalizations and reductions within
// a row, the cross-entropy losses) run on the whole source, and reductions across the rows are
// masked (compiler/onnx_masked_rows.cc).
bool reads_or_makes_masked_rows(const onnx::NodeProto& proto, ImportSink& sink);
absl::Status lower_masked_rows(const onnx::NodeProto& proto, const std::string& label,
                               ImportSink& sink);

// Defines `name` as the ragged slice `existing` when it is one (an If's output); false otherwise.
bool alias_ragged(const std::string& name, const std::string& existing, ImportSink& sink);

// `parts` (each of size 1 along `axis`) concatenated along `axis` into `output` as one segment
// reduction when they are the reductions of consecutive bags of one source (directly or through
// the same element-wise ops); false when they are not (or `axis` is out of range), and nothing
// is emitted.
absl::StatusOr<bool> concat_bags(const std::vector<Value*>& parts, int64_t axis,
                                 const std::string& output, const std::string& node_name,
                                 ImportSink& sink);

// ---- What onnx_ragged.cc and onnx_ragged_stack.cc share ----

namespace lowering {
class Emitter;
}  // namespace lowering

namespace ragged_internal {

template <typename Ops>
bool one_of(std::string_view op, const Ops& ops) {
  return std::find(std::begin(ops), std::end(ops), op) != std::end(ops);
}

// `bound` (one bound: reshaped to rank `rank`, one element on every axis; or a vector of them,
// rank 1) as i64 counted from the start of an axis of `n` and clamped to it, as Slice reads
// its starts and ends.
absl::StatusOr<Value*> clamped_bound(lowering::Emitter& e, Value* bound, int64_t n, size_t rank);
// The value a reduction starts from, which an empty range gives: 0, or the lowest (highest)
// value of the type for a max (min).
double reduction_identity(std::string_view op);
// A mean's divisor: the bags' lengths (max(end - start, 0)) in `dtype`.
absl::StatusOr<Value*> bag_lengths(lowering::Emitter& e, Value* start, Value* end, DType dtype);

}  // namespace ragged_internal
}  // namespace ampc::onnx_io
