// Where `ampc train` writes: checks before the first step, the log on resume, checkpoints;
// tools/train_outputs.h.
#include "tools/train_outputs.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/file_util.h"
#include "compiler/strings.h"
#include "tools/command_util.h"

namespace ampc {
namespace {

// The bytes of `graph`'s initializers: about what an export of the eval graph writes.
int64_t initializer_bytes(const Graph& graph) {
  int64_t bytes = 0;
  for (const Value* value : graph.initializers()) bytes += value->type().byte_size();
  return bytes;
}

// Refuses a folder with less than `bytes` free for `what`.
absl::Status check_free_space(const std::filesystem::path& dir, int64_t bytes,
                              std::string_view what) {
  std::error_code error;
  const std::filesystem::space_info space = std::filesystem::space(dir, error);
  if (!error && space.available < static_cast<uintmax_t>(bytes)) {
    return absl::ResourceExhaustedError(str_cat(what, " '", dir.string(), "' has ", space.available,
                                                " bytes free; it needs about ", bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status check_outputs(const runtime::TrainingSession& session,
                           const std::string& checkpoint_dir, const std::string& export_path,
                           bool external_data, bool writer) {
  std::error_code error;
  auto refuse_special = [&](const std::string& flag, const std::filesystem::path& path) {
    const std::filesystem::file_status status = std::filesystem::status(path, error);
    if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
      return absl::InvalidArgumentError(
          str_cat(flag, " '", path.string(), "' exists and is not a regular file"));
    }
    return absl::OkStatus();
  };
  if (!export_path.empty()) {
    AMPC_RETURN_IF_ERROR(check_output_file("--export", export_path));
    if (external_data) {
      AMPC_RETURN_IF_ERROR(check_output_file("--export's external data", export_path + ".data"));
    }
    if (const Graph* eval = session.eval_graph(); eval != nullptr) {
      // A parameter read through a low-precision copy is exported as its f32 master weights.
      int64_t bytes = initializer_bytes(*eval);
      for (const LowPrecisionCopy& copy : session.low_precision_copies()) {
        const TensorType whole{DType::kF32, session.sharded_state().at(copy.parameter)};
        bytes += whole.byte_size() - TensorType{copy.dtype, whole.shape}.byte_size();
      }
      const std::filesystem::path path(export_path);
      AMPC_RETURN_IF_ERROR(check_free_space(path.has_parent_path() ? path.parent_path() : ".",
                                            bytes, "the --export folder"));
    }
  }
  if (!checkpoint_dir.empty()) {
    const std::filesystem::path dir(checkpoint_dir);
    std::filesystem::create_directories(dir, error);
    if (error || !std::filesystem::is_directory(dir)) {
      return absl::InvalidArgumentError(str_cat("cannot use --checkpoint folder '", checkpoint_dir,
                                                "': ", error ? error.message() : "not a folder"));
    }
    AMPC_RETURN_IF_ERROR(refuse_special("--checkpoint", dir / kCheckpointFile));
    const std::string stale_prefix = str_cat(".", kCheckpointFile, ".");
    for (const auto& entry : writer ? std::filesystem::directory_iterator(dir, error)
                                    : std::filesystem::directory_iterator()) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(stale_prefix) && entry.is_regular_file()) {
        std::filesystem::remove(entry.path(), error);
        std::cerr << "ampc: removed " << entry.path().string()
                  << ", left by a checkpoint save that was interrupted\n";
      }
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      return absl::InvalidArgumentError(str_cat("cannot write into --checkpoint folder '",
                                                checkpoint_dir, "': ", std::strerror(errno)));
    }
    int64_t bytes = 0;  // the whole state, sharded state included
    for (const Value* value : session.graph().initializers()) {
      if (!session.has_state(value->name())) continue;
      const auto sharded = session.sharded_state().find(value->name());
      bytes += sharded == session.sharded_state().end()
                   ? value->type().byte_size()
                   : TensorType{value->dtype(), sharded->second}.byte_size();
    }
    AMPC_RETURN_IF_ERROR(check_free_space(dir, bytes, "the --checkpoint folder"));
  }
  return absl::OkStatus();
}

absl::Status cut_log_to_step(const std::string& log, int64_t steps_done) {
  if (!std::filesystem::exists(log)) return absl::OkStatus();
  AMPC_ASSIGN_OR_RETURN(const std::string text, read_regular_file(log));
  constexpr std::string_view kPrefix = R"({"step": )";
  size_t keep = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a record cut short by the kill
    int64_t step = 0;
    const std::string_view line(text.data() + start, end - start);
    if (!line.starts_with(kPrefix) ||
        std::from_chars(line.data() + kPrefix.size(), line.data() + line.size(), step).ec !=
            std::errc()) {
      return absl::InvalidArgumentError(str_cat("--log '", log,
                                                "' holds a line that is not a step "
                                                "record: ",
                                                line.substr(0, 80)));
    }
    if (step > steps_done) break;
    keep = end + 1;
    start = end + 1;
  }
  if (keep == text.size()) return absl::OkStatus();
  std::cerr << "ampc: cut --log " << log << " back to step " << steps_done
            << ", where the checkpoint was saved\n";
  return write_file_atomically(log, std::string_view(text).substr(0, keep));
}

absl::Status save_checkpoint(const runtime::TrainingSession& session, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec && session.writes_checkpoints()) {
    return absl::InvalidArgumentError(
        str_cat("cannot create --checkpoint folder '", dir, "': ", ec.message()));
  }
  return session.save_checkpoint((std::filesystem::path(dir) / kCheckpointFile).string());
}

}  // namespace ampc
