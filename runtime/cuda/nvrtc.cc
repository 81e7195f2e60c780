#include "runtime/cuda/nvrtc.h"

#include <nvrtc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "compiler/strings.h"
#include "runtime/fused_codegen.h"

namespace ampc::runtime::cuda {
namespace {

namespace fs = std::filesystem;

absl::Status nvrtc_status(nvrtcResult code, std::string_view call) {
  if (code == NVRTC_SUCCESS) return absl::OkStatus();
  return absl::InternalError(str_cat(call, " failed: ", nvrtcGetErrorString(code)));
}

#define AMPC_NVRTC_RETURN_IF_ERROR(call) AMPC_RETURN_IF_ERROR(nvrtc_status((call), #call))

class Program {
 public:
  ~Program() {
    if (program_ != nullptr) nvrtcDestroyProgram(&program_);
  }
  nvrtcProgram* get() { return &program_; }
  nvrtcProgram operator*() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string program_log(nvrtcProgram program) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);
  return log;
}

std::optional<std::string> read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return std::nullopt;
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> nvrtc_compile(std::string_view source, std::string_view program_name,
                                          int arch) {
  const std::vector<SourceHeader>& headers = fused_cuda_headers();
  std::vector<std::string> header_names;
  std::vector<std::string> header_texts;
  for (const SourceHeader& header : headers) {
    header_names.emplace_back(header.name);
    header_texts.emplace_back(header.text);
  }
  std::vector<const char*> names;
  std::vector<const char*> texts;
  for (size_t i = 0; i < headers.size(); ++i) {
    names.push_back(header_names[i].c_str());
    texts.push_back(header_texts[i].c_str());
  }
  const std::string source_text(source);
  const std::string name(program_name);
  Program program;
  AMPC_NVRTC_RETURN_IF_ERROR(nvrtcCreateProgram(program.get(), source_text.c_str(), name.c_str(),
                                                static_cast<int>(names.size()), texts.data(),
                                                names.data()));
  std::vector<std::string> options = fused_nvrtc_options();
  options.push_back(str_cat("--gpu-architecture=sm_", arch));
  std::vector<const char*> option_ptrs;
  for (const std::string& option : options) option_ptrs.push_back(option.c_str());
  const nvrtcResult compiled =
      nvrtcCompileProgram(*program, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  if (compiled != NVRTC_SUCCESS) {
    return absl::InternalError(str_cat("NVRTC could not compile the generated kernel ", name, ": ",
                                       nvrtcGetErrorString(compiled), "\n", program_log(*program),
                                       "\nsource:\n", source));
  }
  size_t size = 0;
  AMPC_NVRTC_RETURN_IF_ERROR(nvrtcGetCUBINSize(*program, &size));
  std::string cubin(size, '\0');
  AMPC_NVRTC_RETURN_IF_ERROR(nvrtcGetCUBIN(*program, cubin.data()));
  return cubin;
}

namespace {
// The cubin from the disk cache, else compiled (and written to the cache).
absl::StatusOr<std::string> cubin_from_disk_or_nvrtc(std::string_view source,
                                                     const std::string& name, int arch);
}  // namespace

std::optional<std::string> kernel_cache_dir() {
  if (const char* dir = std::getenv("AMPC_KERNEL_CACHE"); dir != nullptr && *dir != '\0') {
    if (std::string_view(dir) == "off") return std::nullopt;
    return std::string(dir);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return (fs::path(xdg) / "ampc" / "kernels").string();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "ampc" / "kernels").string();
  }
  return std::nullopt;
}

absl::StatusOr<std::string> cached_cubin(std::string_view source, const std::string& name,
                                         int arch) {
  // Identical bodies (a model's repeated blocks) compile once per process, cache or not.
  static std::mutex mutex;
  static std::map<std::string, std::string, std::less<>> compiled;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = compiled.find(name); it != compiled.end()) return it->second;
  }
  AMPC_ASSIGN_OR_RETURN(std::string cubin, cubin_from_disk_or_nvrtc(source, name, arch));
  const std::lock_guard<std::mutex> lock(mutex);
  compiled.emplace(name, cubin);
  return cubin;
}

namespace {

absl::StatusOr<std::string> cubin_from_disk_or_nvrtc(std::string_view source,
                                                     const std::string& name, int arch) {
  const std::optional<std::string> dir = kernel_cache_dir();
  const bool named_by_user = std::getenv("AMPC_KERNEL_CACHE") != nullptr && dir.has_value();
  const fs::path file = dir ? fs::path(*dir) / (name + ".cubin") : fs::path();
  if (dir) {
    if (std::optional<std::string> cubin = read_whole(file)) return *cubin;
  }
  AMPC_ASSIGN_OR_RETURN(std::string cubin, nvrtc_compile(source, name + ".cu", arch));
  if (!dir) return cubin;
  std::error_code error;
  fs::create_directories(*dir, error);
  const fs::path temporary = file.string() + str_cat(".tmp", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    out.close();
    if (!error && out.good()) fs::rename(temporary, file, error);
    if (error || !out.good()) {
      fs::remove(temporary, error);
      if (named_by_user) {
        return absl::InvalidArgumentError(
            str_cat("AMPC_KERNEL_CACHE: cannot write the compiled kernel to ", file.string(),
                    " (set AMPC_KERNEL_CACHE=off to compile without a cache)"));
      }
    }
  }
  return cubin;
}

}  // namespace
}  // namespace ampc::runtime::cuda
