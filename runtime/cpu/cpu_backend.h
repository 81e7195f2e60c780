// The CPU backend: arenas in aligned host memory, copies as memcpy, kernels that run on the
// calling thread (and parallel_for's threads) before they return.
#pragma once

#include <memory>

#include "runtime/backend.h"

namespace ampc::runtime::cpu {

std::shared_ptr<Backend> make_cpu_backend();

}  // namespace ampc::runtime::cpu
