// Hugging Face's safetensors checkpoints: reading them into Tensors and writing Tensors as files
// the `safetensors` library loads.
//
// A file is an 8-byte little-endian u64 header length N, N bytes of UTF-8 JSON, then the data
// section. The JSON object maps each tensor name to {"dtype", "shape", "data_offsets": [begin,
// end]} (offsets relative to the start of the data section), plus an optional "__metadata__"
// object of string values. Data are little-endian, C order. Element types:
//
//   F64 F32 F16 BF16 I64 I32 I8 U8 BOOL F8_E4M3 (ampc's f8e4m3fn) F8_E5M2
//
// The format's other types (I16, U16, U32, U64, F8_E8M0, ...) have no ampc DType and are errors.
//
// Reading is strict, because checkpoints arrive from anywhere: the header must start with '{'
// and be at most 100 MB (the reference implementation's limit), keys may not repeat, every field
// must be present and well typed, each tensor's byte range must match its dtype and shape, and
// the ranges must tile the data section exactly (no overlap, no hole, nothing after the last
// one). Any violation is an error naming the source and the tensor; no input crashes the parser.
// Bool bytes are normalized to 0/1, as ampc's kernels assume.
//
// Writing puts "__metadata__" (when not empty) first, then the tensors sorted by name, each as
// {"dtype","shape","data_offsets"} with their data laid out in the same order, and pads the
// header with spaces to a multiple of 8 bytes. So equal tensors give equal files; for tensors of
// one dtype it is also the layout the reference implementation writes (it orders by dtype, then
// name). The host is assumed little-endian (checked at compile time).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ampc/status.h"
#include "ampc/tensor.h"

namespace ampc::runtime {

// The contents of a safetensors file.
struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" object; empty when absent
};

// The bytes write_safetensors writes. Names and metadata must be valid UTF-8, no tensor may be
// named "__metadata__", and every tensor must have data: a caller that cannot promise this uses
// write_safetensors, which reports it as a Status (here it is an internal error).
std::string serialize_safetensors(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Parses safetensors bytes; `source` names them in error messages.
absl::StatusOr<SafetensorsFile> parse_safetensors(std::string_view bytes, std::string_view source);

// Writes `tensors` and `metadata` to `path` through a temporary file that is renamed into place,
// so a failed write leaves no partial file and an existing file is replaced whole. The tensors'
// bytes are written from where they are, not gathered into one buffer.
absl::Status write_safetensors(const std::string& path,
                               const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file. The data section is read straight into the tensors, so a checkpoint
// needs its own size in memory, not twice that.
absl::StatusOr<SafetensorsFile> read_safetensors(const std::string& path);

}  // namespace ampc::runtime
