#include "compiler/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "compiler/strings.h"

namespace ampc {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

absl::Status write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::span<const uint8_t> pieces[] = {
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}};
  return write_file_atomically(path, pieces);
}

absl::Status write_file_atomically(const std::string& path,
                                   std::span<const std::span<const uint8_t>> pieces) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string temp = (dir / str_cat(".", target.filename().string(), ".XXXXXX")).string();
  const int fd = mkstemp(temp.data());
  if (fd < 0) {
    return absl::InvalidArgumentError(str_cat("cannot write '", path,
                                              "': creating a temporary file in '", dir.string(),
                                              "' failed: ", errno_text()));
  }
  bool ok = true;
  for (const std::span<const uint8_t> piece : pieces) {
    size_t written = 0;
    while (ok && written < piece.size()) {
      const ssize_t n = ::write(fd, piece.data() + written, piece.size() - written);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) written += static_cast<size_t>(n);
    }
  }
  // mkstemp makes the file private (0600); what we write (models, arrays) is an ordinary file.
  ok = ok && ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  const std::string write_error = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) {
    std::remove(temp.c_str());
    return absl::InvalidArgumentError(str_cat("cannot write '", path, "': ", write_error));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string rename_error = errno_text();
    std::remove(temp.c_str());
    return absl::InvalidArgumentError(str_cat("cannot write '", path, "': ", rename_error));
  }
  return absl::OkStatus();
}

}  // namespace ampc
