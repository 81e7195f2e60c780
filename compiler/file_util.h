// Writing files so that a reader never sees a partial one.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "compiler/status.h"

namespace ampc {

// Writes `bytes` to `path` through a temporary file in the same folder that is synced and then
// renamed into place (the file is 0644). On failure nothing is left behind and the status names
// the path and the reason.
absl::Status write_file_atomically(const std::string& path, std::string_view bytes);

// The same for bytes given as pieces, written one after another (so large pieces are not copied
// into one buffer first).
absl::Status write_file_atomically(const std::string& path,
                                   std::span<const std::span<const uint8_t>> pieces);

}  // namespace ampc
