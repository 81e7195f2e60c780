// The TCP key-value store; runtime/comm/tcp_store.h.
//
// Protocol: a request is one byte ('S' set, 'G' get), the key's length (u32, little-endian) and
// the key, and for a set the value's length (u32) and the value. A set is answered with one byte
// once stored; a get with the value's length and the value, once some client has set the key
// (the server holds the request until then).
#include "runtime/comm/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <utility>

#include "compiler/strings.h"

namespace ampc::runtime::comm {
namespace {

using Clock = std::chrono::steady_clock;

void append_u32(std::vector<char>& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint32_t read_u32(const char* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return value;
}

// Writes all of `bytes`; false when the peer is gone.
bool write_all(int fd, const char* bytes, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes before `deadline`; throws naming `what` otherwise.
void read_all(int fd, char* bytes, size_t size, Clock::time_point deadline,
              const std::string& what) {
  while (size > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) throw std::runtime_error(str_cat("timed out waiting for ", what));
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;
    const ssize_t n = ::recv(fd, bytes, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(str_cat("the store closed the connection while ", what));
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

// ---- Server -----------------------------------------------------------------------------------

struct TcpStoreServer::State {
  struct Client {
    int fd;
    std::vector<char> input;  // bytes received, not yet a whole request
  };
  std::map<std::string, std::vector<char>> values;
  std::vector<Client> clients;
  std::multimap<std::string, int> waiting;  // key -> fds of gets not yet answered
  std::thread thread;
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(int port) {
  const int listener = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return absl::InternalError(str_cat("socket: ", std::strerror(errno)));
  const int on = 1, off = 0;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  ::setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));  // IPv4 too
  sockaddr_in6 address{};
  address.sin6_family = AF_INET6;
  address.sin6_addr = in6addr_any;
  address.sin6_port = htons(static_cast<uint16_t>(port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listener);
    return absl::UnavailableError(str_cat("cannot serve the store on port ", port, ": ", why));
  }
  socklen_t length = sizeof(address);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(listener, ntohs(address.sin6_port)));
  if (::pipe2(server->wake_, O_CLOEXEC) != 0) {
    return absl::InternalError(str_cat("pipe: ", std::strerror(errno)));
  }
  server->state_->thread = std::thread([s = server.get()] { s->serve(); });
  return server;
}

TcpStoreServer::TcpStoreServer(int listener, int port)
    : listener_(listener), port_(port), state_(std::make_unique<State>()) {}

TcpStoreServer::~TcpStoreServer() {
  if (state_->thread.joinable()) {
    const char stop = 0;
    (void)!::write(wake_[1], &stop, 1);
    state_->thread.join();
  }
  for (const State::Client& client : state_->clients) ::close(client.fd);
  for (int fd : wake_) {
    if (fd >= 0) ::close(fd);
  }
  ::close(listener_);
}

void TcpStoreServer::serve() {
  State& s = *state_;
  auto answer_get = [&](int fd, const std::vector<char>& value) {
    std::vector<char> reply;
    append_u32(reply, static_cast<uint32_t>(value.size()));
    reply.insert(reply.end(), value.begin(), value.end());
    write_all(fd, reply.data(), reply.size());
  };
  // Handles the whole requests at the front of `client.input`; false when it is malformed.
  auto handle = [&](State::Client& client) {
    std::vector<char>& in = client.input;
    for (;;) {
      if (in.size() < 5) return true;
      const char op = in[0];
      const uint32_t key_size = read_u32(&in[1]);
      size_t used = 5 + key_size;
      if (in.size() < used) return true;
      std::string key(in.begin() + 5, in.begin() + static_cast<std::ptrdiff_t>(used));
      if (op == 'S') {
        if (in.size() < used + 4) return true;
        const uint32_t value_size = read_u32(&in[used]);
        if (in.size() < used + 4 + value_size) return true;
        std::vector<char> value(in.begin() + static_cast<std::ptrdiff_t>(used + 4),
                                in.begin() + static_cast<std::ptrdiff_t>(used + 4 + value_size));
        used += 4 + value_size;
        const char ack = 'K';
        write_all(client.fd, &ack, 1);
        auto [first, last] = s.waiting.equal_range(key);
        for (auto it = first; it != last; ++it) answer_get(it->second, value);
        s.waiting.erase(first, last);
        s.values[key] = std::move(value);
      } else if (op == 'G') {
        if (auto it = s.values.find(key); it != s.values.end()) {
          answer_get(client.fd, it->second);
        } else {
          s.waiting.emplace(key, client.fd);
        }
      } else {
        return false;
      }
      in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
    }
  };
  for (;;) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const State::Client& client : s.clients) fds.push_back({client.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) s.clients.push_back({fd, {}});
    }
    std::vector<int> closed;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      State::Client& client = s.clients[i - 2];
      char buffer[4096];
      const ssize_t n = ::recv(client.fd, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed.push_back(client.fd);
        continue;
      }
      client.input.insert(client.input.end(), buffer, buffer + n);
      if (!handle(client)) closed.push_back(client.fd);
    }
    for (int fd : closed) {
      std::erase_if(s.clients, [fd](const State::Client& c) { return c.fd == fd; });
      std::erase_if(s.waiting, [fd](const auto& entry) { return entry.second == fd; });
      ::close(fd);
    }
  }
}

// ---- Client -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::connect(const std::string& host, int port,
                                                            std::chrono::milliseconds timeout) {
  const std::string address = str_cat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      error != 0) {
    return absl::InvalidArgumentError(
        str_cat("cannot resolve the store's address ", address, ": ", gai_strerror(error)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "no address";
  for (;;) {
    for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        return std::unique_ptr<TcpStore>(new TcpStore(fd, address, timeout));
      }
      last_error = std::strerror(errno);
      ::close(fd);
    }
    if (Clock::now() >= deadline) {
      return absl::UnavailableError(str_cat("no store answered at ", address, " within ",
                                            timeout.count(), " ms: ", last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not be up yet
  }
}

TcpStore::~TcpStore() { ::close(socket_); }

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  std::vector<char> request = {'S'};
  append_u32(request, static_cast<uint32_t>(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  append_u32(request, static_cast<uint32_t>(data.size()));
  request.insert(request.end(), data.begin(), data.end());
  const std::string what = str_cat("the store at ", address_, " to store '", key, "'");
  if (!write_all(socket_, request.data(), request.size())) {
    throw std::runtime_error(str_cat("lost the connection to ", what));
  }
  char ack = 0;
  read_all(socket_, &ack, 1, Clock::now() + timeout_, what);
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::vector<char> request = {'G'};
  append_u32(request, static_cast<uint32_t>(key.size()));
  request.insert(request.end(), key.begin(), key.end());
  const std::string what = str_cat("key '", key, "' from the store at ", address_);
  if (!write_all(socket_, request.data(), request.size())) {
    throw std::runtime_error(str_cat("lost the connection while asking for ", what));
  }
  const auto deadline = Clock::now() + timeout;
  char size[4];
  read_all(socket_, size, 4, deadline, what);
  std::vector<char> value(read_u32(size));
  read_all(socket_, value.data(), value.size(), deadline, what);
  return value;
}

std::vector<char> TcpStore::get(const std::string& key) { return get(key, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) get(key, timeout);
}

}  // namespace ampc::runtime::comm
