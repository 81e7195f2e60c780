// What the two halves of x[mask]'s import share (compiler/onnx_masked_rows.cc: the rows a mask
// selects and what reads them; compiler/onnx_mask_indices.cc: NonZero and the forms of its
// indices up to the GatherND that selects the rows).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/onnx_lowering_internal.h"
#include "compiler/onnx_ragged.h"

namespace ampc::onnx_io::masked_rows_internal {

using lowering::Emitter;
using lowering::tensor_input;
using Form = MaskIndices::Form;

// Why the rows (the indices) named `name` cannot be read as they are: the end of an error.
std::string selection_why(const std::string& name, const RaggedSlice& rows);
std::string indices_why(const std::string& name, const MaskIndices& indices);
// Whether masks `a` and `b` hold the same elements: the same value, equal known values, or the
// outputs of nodes of one op with the same attributes over such values (the dynamo exporter
// writes `y > 0` anew for each `x[y > 0]`).
bool same_mask(const Value* a, const Value* b, ImportSink& sink, int depth = 8);
// Records `name` as the rows (the indices), which import leaves without a value.
absl::Status define_rows(const std::string& name, const RaggedSlice& rows, ImportSink& sink);
absl::Status define_indices(const std::string& name, const MaskIndices& indices, ImportSink& sink);
// The rows (the indices) input `i` of `proto` is, or null.
const RaggedSlice* rows_of(const onnx::NodeProto& proto, int i, ImportSink& sink);
const MaskIndices* indices_of(const onnx::NodeProto& proto, int i, ImportSink& sink);
// "<label> reads <why>", unimplemented.
absl::Status unsupported(const std::string& label, const std::string& why);
// The known integers of input `i`, or nullopt.
std::optional<std::vector<int64_t>> known_ints(const onnx::NodeProto& proto, int i,
                                               ImportSink& sink);
// An int attribute of `proto`, or `fallback`.
int64_t int_attr(const onnx::NodeProto& proto, std::string_view name, int64_t fallback);
// An ints attribute of `proto`, or nullopt.
std::optional<std::vector<int64_t>> ints_attr(const onnx::NodeProto& proto, std::string_view name);
// `axes` counted from 0 in rank `rank`, sorted; nullopt when one is out of range.
std::optional<std::vector<int64_t>> normalized(std::vector<int64_t> axes, int64_t rank);
// The axes `proto` (Squeeze, Unsqueeze, a reduction) names: an attribute before `since`, an
// input after; nullopt when absent, an error when computed at run time.
absl::StatusOr<std::optional<std::vector<int64_t>>> axes_of(const onnx::NodeProto& proto,
                                                            int64_t since, const std::string& label,
                                                            ImportSink& sink);
// The mask as one bool per row: [rows], made once per mask.
absl::StatusOr<Value*> flat_mask(Emitter& e, Value* mask, ImportSink& sink);
// A flat mask ([rows]) shaped to broadcast along the rows of a value of rank `rank`:
// [rows, 1, ..., 1].
absl::StatusOr<Value*> row_mask(Emitter& e, Value* mask, size_t rank);

// compiler/onnx_mask_indices.cc.
absl::Status lower_nonzero(const onnx::NodeProto& proto, const std::string& label,
                           ImportSink& sink);
bool reads_indices(const onnx::NodeProto& proto, ImportSink& sink);
absl::Status lower_indices_op(const onnx::NodeProto& proto, const std::string& label,
                              ImportSink& sink);

}  // namespace ampc::onnx_io::masked_rows_internal
