// The Gloo communicator (Debian's libgloo-dev, PyTorch's CPU backend): collectives between CPU
// processes over TCP, each rank's collectives run in order on a worker thread of its own.
//
// Ranks meet through a store every rank can reach: files in one directory (one machine, or a
// shared file system), which must be empty when the group forms (a store left by an earlier
// group would join ranks to it), or the TCP store (tcp_store.h) rank 0 serves at
// master_addr:master_port.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ampc/status.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime::comm {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The rendezvous directory; when empty, the TCP store at master_addr:master_port, which rank
  // 0 serves for as long as its communicator lives.
  std::string store_directory;
  std::string master_addr;
  int master_port = 0;
  // The address or host name this rank's connections use: every rank must reach every other
  // one there. Empty: the loopback when the store is a directory or at a loopback address
  // (every rank on this machine), else this machine's host name.
  std::string hostname;
  // Or the network interface whose address they use ("eth0"); wins over hostname.
  std::string interface;
  // How long forming the group and each collective may take before the rank gives up; a peer
  // that died is usually found sooner, when its connections close.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// Forms the group: returns when every rank has joined, or fails naming this rank and what it
// waited for when `timeout` passed first.
absl::StatusOr<std::unique_ptr<Communicator>> connect_gloo(const GlooOptions& options);

}  // namespace ampc::runtime::comm
