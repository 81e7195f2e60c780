// Reading and writing whole files: reads of regular files only (a device such as /dev/zero would
// never end), writes that a reader never sees partial and that never replace a special file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "ampc/status.h"

namespace ampc {

// The contents of the regular file `path` (through symbolic links). A missing file is NotFound; a
// folder, device, pipe or socket, or a file too large for memory, is an error naming the path.
absl::StatusOr<std::string> read_regular_file(const std::string& path);

// Writes `bytes` to `path` through a temporary file in the same folder that is synced and then
// renamed into place (the file is 0644). `path` must be new or a regular file (a symbolic link to
// one is written through); a folder, device, pipe or socket is refused untouched. On failure
// nothing is left behind and the status names the path and the reason.
absl::Status write_file_atomically(const std::string& path, std::string_view bytes);

// The bytes of `text`, as a piece for the writer below.
inline std::span<const uint8_t> byte_span(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// The same for bytes given as pieces, written one after another (so large pieces are not copied
// into one buffer first).
absl::Status write_file_atomically(const std::string& path,
                                   std::span<const std::span<const uint8_t>> pieces);

// A new, empty directory `<temp>/<prefix>XXXXXX` (mkdtemp's, mode 0700) in the system's
// temporary directory; its path, or an error naming where it could not be made.
absl::StatusOr<std::string> make_temporary_directory(std::string_view prefix);

}  // namespace ampc
