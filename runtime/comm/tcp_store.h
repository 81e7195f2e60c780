// A key-value store over TCP, for the ranks of a group to meet without a shared file system:
// rank 0 serves it at MASTER_ADDR:MASTER_PORT (torchrun's variables), and every rank, rank 0
// included, reads and writes it as a client. Gloo's rendezvous runs on it (GlooOptions).
//
// A get waits until some rank has set the key. Every wait ends at the store's timeout with an
// error naming the key and the address, so a rank that never comes makes the others fail.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ampc/status.h"

namespace ampc::runtime::comm {

// The server: answers clients on a thread of its own until it is destroyed.
class TcpStoreServer {
 public:
  // Listens on every address at `port` (0: a free port, see port()).
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> start(int port);
  ~TcpStoreServer();
  int port() const { return port_; }

 private:
  TcpStoreServer(int listener, int port);
  void serve();

  int listener_;
  int port_;
  int wake_[2] = {-1, -1};  // a pipe that tells the thread to stop
  struct State;
  std::unique_ptr<State> state_;
};

// A client. Its calls throw std::runtime_error on failure (Gloo's Store interface).
class TcpStore final : public gloo::rendezvous::Store {
 public:
  // Connects to host:port, retrying until `timeout` while the server is not up yet.
  static absl::StatusOr<std::unique_ptr<TcpStore>> connect(const std::string& host, int port,
                                                           std::chrono::milliseconds timeout);
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  TcpStore(int socket, std::string address, std::chrono::milliseconds timeout)
      : socket_(socket), address_(std::move(address)), timeout_(timeout) {}
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);

  int socket_;
  std::string address_;  // host:port, for messages
  std::chrono::milliseconds timeout_;
};

}  // namespace ampc::runtime::comm
