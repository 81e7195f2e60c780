// The Gloo communicator (Debian's libgloo-dev, PyTorch's CPU backend): collectives between CPU
// processes over TCP, each rank's collectives run in order on a worker thread of its own.
//
// Ranks meet through a store every rank can reach: files in one directory (one machine, or a
// shared file system). The directory must be empty when the group forms: a store left by an
// earlier group would join ranks to it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "compiler/status.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime::comm {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The rendezvous directory.
  std::string store_directory;
  // The address or host name this rank's connections use: every rank must reach every other
  // one there. Empty: the loopback (every rank on this machine).
  std::string hostname;
  // How long forming the group and each collective may take before the rank gives up; a peer
  // that died is usually found sooner, when its connections close.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

// Forms the group: returns when every rank has joined, or fails naming this rank and what it
// waited for when `timeout` passed first.
absl::StatusOr<std::unique_ptr<Communicator>> connect_gloo(const GlooOptions& options);

}  // namespace ampc::runtime::comm
