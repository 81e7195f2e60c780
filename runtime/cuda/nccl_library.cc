#include "runtime/cuda/nccl_library.h"

#include <dlfcn.h>

#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/strings.h"
#include "runtime/cuda/nccl_communicator.h"

namespace ampc::runtime::cuda {
namespace {

absl::StatusOr<NcclLibrary> load() {
  // The soname first (a libnccl.so.2 the process has, or the dynamic linker's), then the library
  // the build found.
  std::vector<std::string> candidates = {"libnccl.so.2"};
#ifdef AMPC_NCCL_LIBRARY_PATH
  candidates.emplace_back(AMPC_NCCL_LIBRARY_PATH);
#endif
  void* handle = nullptr;
  std::vector<std::string> errors;
  for (const std::string& name : candidates) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* error = dlerror();
    errors.push_back(error != nullptr ? error : name);
  }
  if (handle == nullptr) {
    return absl::UnavailableError(
        str_cat("NCCL could not be loaded (", str_join(errors, "; "),
                "): install NCCL 2, or let the ranks communicate through gloo (--comm gloo)"));
  }
  NcclLibrary library;
  absl::Status missing = absl::OkStatus();
  const auto find = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr && missing.ok()) {
      missing =
          absl::UnavailableError(str_cat("the NCCL library ampc loaded has no function ", name,
                                         " (NCCL 2.19 or later has "
                                         "every one ampc calls)"));
    }
  };
  find(library.ncclGetVersion, "ncclGetVersion");
  find(library.ncclGetUniqueId, "ncclGetUniqueId");
  find(library.ncclCommInitRank, "ncclCommInitRank");
  find(library.ncclCommDestroy, "ncclCommDestroy");
  find(library.ncclCommAbort, "ncclCommAbort");
  find(library.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  find(library.ncclGetErrorString, "ncclGetErrorString");
  find(library.ncclGetLastError, "ncclGetLastError");
  find(library.ncclAllReduce, "ncclAllReduce");
  find(library.ncclBroadcast, "ncclBroadcast");
  find(library.ncclAllGather, "ncclAllGather");
  find(library.ncclReduceScatter, "ncclReduceScatter");
  if (!missing.ok()) return missing;
  return library;
}

}  // namespace

absl::StatusOr<const NcclLibrary*> nccl_library() {
  static const absl::StatusOr<NcclLibrary> loaded = load();
  if (!loaded.ok()) return loaded.status();
  return &*loaded;
}

absl::StatusOr<int> nccl_version() {
  AMPC_ASSIGN_OR_RETURN(const NcclLibrary* nccl, nccl_library());
  int version = 0;
  if (const ncclResult_t result = nccl->ncclGetVersion(&version); result != ncclSuccess) {
    return absl::UnavailableError(str_cat("ncclGetVersion: ", nccl->ncclGetErrorString(result)));
  }
  return version;
}

bool nccl_loaded_in_process() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libnccl") != std::string::npos) return true;
  }
  return false;
}

}  // namespace ampc::runtime::cuda
