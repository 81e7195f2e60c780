// CRC-32 (zlib's: the polynomial of zip, gzip and PNG) of byte ranges, for the .npz reader and
// checkpoint checksums.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace ampc::runtime {

// The CRC-32 of `data`, continuing from `crc` (0 to start).
uint32_t crc32_of(std::span<const uint8_t> data, uint32_t crc = 0);
// The same for the bytes of `text`.
uint32_t crc32_of(std::string_view text, uint32_t crc = 0);

}  // namespace ampc::runtime
