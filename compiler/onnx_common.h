// Pieces shared by ONNX import and export (internal to compiler/onnx_*.cc): tensor and type
// conversion between ONNX protobufs and the IR, and the doc_string form of a node's precision
// decision (so that a compiled file read back keeps its decisions).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ampc/dtype.h"
#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "onnx/onnx_pb.h"

namespace ampc::onnx_io {

// An InvalidArgument error: what a malformed file gets.
inline absl::Status invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// The element count of `shape`, or nullopt when a dim is negative or the count (in bytes of the
// widest element) would overflow: bad files must not make us allocate or overflow.
std::optional<int64_t> checked_num_elements(const Shape& shape);

// Converts an ONNX tensor (raw_data or the typed fields, little endian, or external data read
// relative to `base_dir`; empty `base_dir`: external data is an error). Errors name `what`.
absl::StatusOr<Tensor> tensor_from_proto(const onnx::TensorProto& proto, std::string_view what,
                                         const std::string& base_dir);

// The dense tensor an ONNX sparse tensor stands for (a Constant's sparse_value, a sparse
// initializer): `values` [NNZ] at `indices` ([NNZ] linear positions or [NNZ, rank] coordinates,
// int64) in a tensor of `dims`, zeros elsewhere. Errors name `what` and the index at fault.
absl::StatusOr<Tensor> tensor_from_sparse_proto(const onnx::SparseTensorProto& proto,
                                                std::string_view what, const std::string& base_dir);

// Writes `tensor` as raw_data. The tensor must hold data.
void tensor_to_proto(const Tensor& tensor, onnx::TensorProto* proto);

// A static tensor type as an ONNX TypeProto.
void type_to_proto(const TensorType& type, onnx::TypeProto* proto);

// The doc_string of an initializer that is a program constant (Value::is_constant), or that its
// exporter declared a parameter, a buffer or a frozen parameter (Value::declared): "ampc: " and
// Value::declared_name ("ampc: frozen parameter"), so that a model read back trains what it
// trained. ampc.torch.export_training writes the declared ones too.
inline constexpr std::string_view kConstantDoc = "ampc: constant";
// "" for Declared::kUnknown.
std::string declared_doc(Value::Declared declared);
// What `doc` declares, or kUnknown where it declares nothing.
Value::Declared declared_from_doc(std::string_view doc);

// The doc_string line that records a node's precision decision on export, and its parser.
// "ampc precision: compute=f16 accumulate=f32 reason=allow-list MatMul".
inline constexpr std::string_view kPrecisionPrefix = "ampc precision:";
std::string precision_to_line(const PrecisionDecision& decision);
// Splits the precision line off `doc` when present (and well formed); returns the decision.
std::optional<PrecisionDecision> take_precision_line(std::string& doc);

}  // namespace ampc::onnx_io
