#include "runtime/cuda_library.h"

#include <dlfcn.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "compiler/strings.h"

namespace ampc::runtime {
namespace {

std::atomic<const CudaLibrary*> provided{nullptr};

#if defined(AMPC_CUDA_LIBRARY)
// `file` in the folder of the shared library this function is in (libampc_runtime's, wherever it
// was installed or copied); the bare name, for the loader's own search, when it is not there.
std::string beside_this_library(const std::string& file) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&cuda_library), &info) != 0 &&
      info.dli_fname != nullptr) {
    const std::filesystem::path beside = std::filesystem::path(info.dli_fname).parent_path() / file;
    std::error_code error;
    if (std::filesystem::exists(beside, error)) return beside.string();
  }
  return file;
}

absl::StatusOr<const CudaLibrary*> load() {
  if (const CudaLibrary* linked = provided.load(std::memory_order_acquire)) return linked;
  const std::string path = beside_this_library(AMPC_CUDA_LIBRARY);
  // Never closed: its kernels stay in the registry for the life of the process.
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* reason = dlerror();
    return absl::UnavailableError(str_cat(
        "cannot load ampc's CUDA backend, ", path, " (",
        path == AMPC_CUDA_LIBRARY ? "not beside libampc_runtime, nor on the loader's path: " : "",
        reason != nullptr ? reason : "unknown reason", ")"));
  }
  if (const CudaLibrary* loaded = provided.load(std::memory_order_acquire)) return loaded;
  return absl::InternalError(str_cat(path, " was loaded but did not provide the CUDA backend"));
}
#endif

}  // namespace

void provide_cuda_library(const CudaLibrary& library) {
  provided.store(&library, std::memory_order_release);
}

absl::StatusOr<const CudaLibrary*> cuda_library() {
#if defined(AMPC_CUDA_LIBRARY)
  static const absl::StatusOr<const CudaLibrary*> library = load();
  return library;
#else
  return absl::UnavailableError(
      "this ampc was built without CUDA (no nvcc was found, or AMPC_CUDA=OFF)");
#endif
}

}  // namespace ampc::runtime
