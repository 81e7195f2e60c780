#include "compiler/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "compiler/strings.h"

namespace ampc {
namespace {

std::string errno_text() { return std::strerror(errno); }

// What `status` is, for messages about a file that is not a regular one.
std::string_view file_kind(const std::filesystem::file_status& status) {
  switch (status.type()) {
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::character:
    case std::filesystem::file_type::block:
      return "a device";
    case std::filesystem::file_type::fifo:
      return "a pipe";
    case std::filesystem::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

}  // namespace

absl::StatusOr<std::string> read_regular_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::not_found) {
    return absl::NotFoundError(str_cat("cannot read '", path, "': ", std::strerror(ENOENT)));
  }
  if (error)
    return absl::InvalidArgumentError(str_cat("cannot read '", path, "': ", error.message()));
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        str_cat("cannot read '", path, "': it is ", file_kind(status)));
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(str_cat("cannot read '", path, "': ", errno_text()));
  }
  const uintmax_t size = std::filesystem::file_size(path, error);
  std::string bytes;
  if (!error) {
    try {
      bytes.resize(size);
    } catch (const std::bad_alloc&) {
      std::fclose(file);
      return absl::ResourceExhaustedError(
          str_cat("cannot read '", path, "': its ", size, " bytes do not fit in memory"));
    }
  }
  const bool read = !error && std::fread(bytes.data(), 1, size, file) == size;
  const std::string read_error = error ? error.message() : errno_text();
  std::fclose(file);
  if (!read)
    return absl::InvalidArgumentError(str_cat("reading '", path, "' failed: ", read_error));
  return bytes;
}

absl::Status write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::span<const uint8_t> pieces[] = {byte_span(bytes)};
  return write_file_atomically(path, pieces);
}

absl::Status write_file_atomically(const std::string& path,
                                   std::span<const std::span<const uint8_t>> pieces) {
  std::filesystem::path target(path);
  std::error_code error;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(target, error))) {
    target = std::filesystem::weakly_canonical(target, error);  // write through the link
  }
  const std::filesystem::file_status status = std::filesystem::status(target, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        str_cat("cannot write '", path, "': it is ", file_kind(status), ", not a regular file"));
  }
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
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    const std::string rename_error = errno_text();
    std::remove(temp.c_str());
    return absl::InvalidArgumentError(str_cat("cannot write '", path, "': ", rename_error));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> make_temporary_directory(std::string_view prefix) {
  const std::filesystem::path temp = std::filesystem::temp_directory_path();
  std::string pattern = (temp / str_cat(prefix, "XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        str_cat("cannot make a directory under ", temp.string(), ": ", std::strerror(errno)));
  }
  return pattern;
}

}  // namespace ampc
