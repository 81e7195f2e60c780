#include "runtime/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <cstddef>

namespace ampc::runtime {

uint32_t crc32_of(std::span<const uint8_t> data, uint32_t crc) {
  // zlib counts in 32-bit units; larger buffers go through in pieces.
  constexpr size_t kChunk = size_t{1} << 30;
  uLong value = crc;
  for (size_t pos = 0; pos < data.size(); pos += kChunk) {
    const size_t size = std::min(kChunk, data.size() - pos);
    value = crc32(value, data.data() + pos, static_cast<uInt>(size));
  }
  return static_cast<uint32_t>(value);
}

uint32_t crc32_of(std::string_view text, uint32_t crc) {
  return crc32_of(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), crc);
}

}  // namespace ampc::runtime
