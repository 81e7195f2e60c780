// What the data-parallel tests share: a TCP port for a test's server, and a fresh rendezvous
// directory.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ampc::testing {

// A port nothing listens on now (the kernel's choice for a socket bound to port 0 on the
// loopback).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A fresh, empty directory for a group to meet in, removed with it.
class StoreDirectory {
 public:
  StoreDirectory() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ampc_store_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~StoreDirectory() { std::filesystem::remove_all(path_); }
  StoreDirectory(const StoreDirectory&) = delete;
  StoreDirectory& operator=(const StoreDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ampc::testing
