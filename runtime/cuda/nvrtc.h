// Run-time compilation of generated kernels (the fused element-wise bodies): NVRTC to a cubin,
// and a cache of cubins on disk so that a model compiles each body once per machine.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ampc/status.h"

namespace ampc::runtime::cuda {

// Compiles `source` (runtime/fused_codegen.h's, with its headers and options) for sm_<arch>
// (90 for Hopper) into a cubin. Needs no GPU. The error carries NVRTC's log.
absl::StatusOr<std::string> nvrtc_compile(std::string_view source, std::string_view program_name,
                                          int arch);

// Where compiled kernels are kept: $AMPC_KERNEL_CACHE when set ("off": nowhere), else
// $XDG_CACHE_HOME/ampc/kernels, else ~/.cache/ampc/kernels; nullopt when caching is off or no
// home is known.
std::optional<std::string> kernel_cache_dir();

// The cubin for `source` under `name` (which names the source's hash and architecture): read from
// the cache when there, else compiled and written to it (through a temporary file and a rename,
// so that concurrent processes never read a partial file). A cache directory the user named
// that cannot be created or written is an error; the default one is only skipped.
absl::StatusOr<std::string> cached_cubin(std::string_view source, const std::string& name,
                                         int arch);

}  // namespace ampc::runtime::cuda
