// NumPy's .npy and .npz files: reading them into Tensors and writing Tensors as files numpy loads.
//
// .npy: format versions 1.0, 2.0 and 3.0 (the Python-dict header with 'descr', 'fortran_order'
// and 'shape'). Element types and their descr:
//
//   f32 '<f4'  f64 '<f8'  f16 '<f2'  i64 '<i8'  i32 '<i4'  i8 '|i1'  u8 '|u1'  bool '|b1'
//   bf16 '<V2'
//
// numpy has no bfloat16; ml_dtypes' bfloat16 is saved by np.save as raw 2-byte void, '<V2'. So
// bf16 tensors are written as '<V2' (np.load gives a V2 array; `.view(ml_dtypes.bfloat16)`
// recovers the values), and '<V2' / '|V2' arrays are read as bf16 only when the caller says bf16
// is expected (NpyReadOptions::void2_as_bf16), since the bytes alone do not say what they are.
// fp8 tensors are written as raw '<V1' bytes (as ml_dtypes does) but not read back: two fp8
// kinds share that descr.
//
// Reading converts big-endian data ('>f4') to little-endian and Fortran-ordered arrays to C order,
// reads scalars (shape ()) and zero-size arrays, and normalizes bool bytes to 0/1. Anything else
// (object, structured, complex, i16, u32, ... arrays; a malformed header; data shorter or longer
// than the shape needs) is an error naming the file. Bytes after the array data are rejected:
// np.save never writes them, and a header whose shape was damaged would otherwise read as valid.
//
// .npz: a zip archive of .npy files, `NAME.npy` per array (np.savez, np.savez_compressed).
// Entries may be stored or deflated, with or without ZIP64 fields and data descriptors; every
// entry's CRC-32 is checked. Written archives are stored (uncompressed), like np.savez, with a
// fixed timestamp (1980-01-01) so equal tensors give equal files, and ZIP64 fields where an entry
// or the archive passes 4 GiB.
//
// Files are written through a temporary file in the same folder that is renamed into place, so a
// failed write never leaves a partial file. The host is assumed little-endian (checked at compile
// time).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "ampc/tensor.h"

namespace ampc::runtime {

struct NpyReadOptions {
  // Read raw 2-byte void arrays ('<V2', '|V2': ml_dtypes.bfloat16 saved by np.save) as bf16.
  bool void2_as_bf16 = false;
};

// Reads one .npy file.
absl::StatusOr<Tensor> read_npy(const std::string& path, const NpyReadOptions& options = {});
// Parses .npy bytes; `source` names them in error messages (a path, "a.npz (array 'x')").
absl::StatusOr<Tensor> parse_npy(std::string_view bytes, std::string_view source,
                                 const NpyReadOptions& options = {});

// Writes `tensor` as a .npy file (version 1.0, or 2.0 when the header needs it).
absl::Status write_npy(const std::string& path, const Tensor& tensor);
// The bytes write_npy writes: npy_header(tensor) followed by the tensor's bytes.
std::string serialize_npy(const Tensor& tensor);
// The magic, version, header length and padded header dict that precede the data.
std::string npy_header(const Tensor& tensor);

// Reads every array of an .npz file, keyed by entry name without its `.npy` suffix.
absl::StatusOr<std::map<std::string, Tensor>> read_npz(const std::string& path,
                                                       const NpyReadOptions& options = {});
// Parses .npz bytes; `source` names them in error messages.
absl::StatusOr<std::map<std::string, Tensor>> parse_npz(std::string_view bytes,
                                                        std::string_view source,
                                                        const NpyReadOptions& options = {});

struct NpzWriteOptions {
  // Give every entry ZIP64 fields and end the archive with ZIP64 records even when nothing
  // needs them (numpy's np.savez writes ZIP64 local headers the same way). For tests.
  bool force_zip64 = false;
};

// Writes `arrays` as an uncompressed .npz archive, one `NAME.npy` entry per array.
absl::Status write_npz(const std::string& path, const std::map<std::string, Tensor>& arrays,
                       const NpzWriteOptions& options = {});
// The bytes write_npz writes.
std::string serialize_npz(const std::map<std::string, Tensor>& arrays,
                          const NpzWriteOptions& options = {});

}  // namespace ampc::runtime
