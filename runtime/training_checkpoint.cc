// TrainingSession's checkpoints: every piece of state, the step count and checksums in one
// safetensors file (runtime/training_session.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "compiler/strings.h"
#include "fmt/format.h"
#include "passes/passes.h"
#include "runtime/checksum.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/sharding.h"
#include "runtime/safetensors.h"
#include "runtime/training_session.h"

namespace ampc::runtime {
namespace {

// Checkpoint metadata keys.
constexpr std::string_view kCheckpointFormat = "ampc.checkpoint";
// 2: every tensor's CRC-32 in the metadata (ampc.crc32.<name>, 8 hex digits). 1 had none; such
// checkpoints still load, with only their values checked.
constexpr std::string_view kCheckpointFormatVersion = "2";
constexpr std::string_view kCheckpointFormatWithoutChecksums = "1";
constexpr std::string_view kCheckpointCrcPrefix = "ampc.crc32.";
// The CRC-32 of the counts in the metadata ("<steps_done>/<accumulate>").
constexpr std::string_view kCheckpointCountsCrc = "ampc.crc32";

std::string counts_checksum(int64_t steps_done, int64_t accumulate) {
  const std::string counts = str_cat(steps_done, "/", accumulate);
  return fmt::format("{:08x}", crc32_of(counts));
}
constexpr std::string_view kCheckpointSteps = "ampc.steps_done";
constexpr std::string_view kCheckpointAccumulate = "ampc.accumulate";

}  // namespace

absl::StatusOr<Tensor> TrainingSession::whole_state(const std::string& name) const {
  AMPC_ASSIGN_OR_RETURN(Tensor value, step_->initializer(name));
  const auto sharded = sharded_.find(name);
  if (sharded == sharded_.end()) return value;
  // Every rank's block in rank order; the whole tensor is their first elements.
  const int64_t block = static_cast<int64_t>(value.bytes().size());
  std::vector<uint8_t> gathered(static_cast<size_t>(block * ranks()));
  AMPC_RETURN_IF_ERROR(
      step_->backend()
          .context()
          .communicator->all_gather(value.bytes().data(), gathered.data(), block, DType::kU8)
          ->wait());
  const TensorType whole{value.dtype(), sharded->second};
  gathered.resize(static_cast<size_t>(whole.byte_size()));
  return Tensor(whole, std::move(gathered));
}

std::string TrainingSession::implausible_state(std::string_view name, const Tensor& value) {
  const bool non_negative = name == "optimizer.step" || name.ends_with(".exp_avg_sq") ||
                            name == "loss_scale.growth_tracker" ||
                            name == "loss_scale.skipped_steps" || name == kMicroStepState;
  for (int64_t i = 0; i < value.num_elements(); ++i) {
    const double x = is_float(value.dtype()) ? value.element_as_double(i)
                                             : static_cast<double>(value.element_as_i64(i));
    if (!std::isfinite(x)) return str_cat("element ", i, " is ", x);
    if (non_negative && x < 0) return str_cat("element ", i, " is ", x, ", below 0");
    if (name == "loss_scale" && !(x > 0)) return str_cat("it is ", x, "; a loss scale is > 0");
  }
  return "";
}

absl::Status TrainingSession::save_checkpoint(const std::string& path) const {
  AMPC_RETURN_IF_ERROR(settle());
  std::map<std::string, Tensor> tensors;
  for (const std::string& name : state_names()) {
    AMPC_ASSIGN_OR_RETURN(tensors[name], whole_state(name));
  }
  // What load_checkpoint would refuse is not written: a checkpoint always resumes.
  for (const auto& [name, tensor] : tensors) {
    if (const std::string why = implausible_state(name, tensor); !why.empty()) {
      return absl::FailedPreconditionError(
          str_cat("cannot save a checkpoint to ", path, ": the state '", name, "' is not one a ",
                  "training run can continue from (", why, "); nothing was written"));
    }
  }
  if (rank() != 0) return absl::OkStatus();  // rank 0 writes
  std::map<std::string, std::string> metadata = {
      {std::string(kCheckpointFormat), std::string(kCheckpointFormatVersion)},
      {std::string(kCheckpointSteps), str_cat(steps_done_)},
      {std::string(kCheckpointAccumulate), str_cat(accumulation_steps_)},
  };
  metadata[std::string(kCheckpointCountsCrc)] = counts_checksum(steps_done_, accumulation_steps_);
  for (const auto& [name, tensor] : tensors) {
    metadata[str_cat(kCheckpointCrcPrefix, name)] = fmt::format("{:08x}", crc32_of(tensor.bytes()));
  }
  return write_safetensors(path, tensors, metadata);
}

absl::Status TrainingSession::load_checkpoint(const std::string& path) {
  AMPC_ASSIGN_OR_RETURN(SafetensorsFile file, read_safetensors(path));
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(str_cat(path, ": ", why));
  };
  const auto format = file.metadata.find(std::string(kCheckpointFormat));
  if (format == file.metadata.end() || (format->second != kCheckpointFormatVersion &&
                                        format->second != kCheckpointFormatWithoutChecksums)) {
    return bad(str_cat("not an ampc checkpoint (no ampc.checkpoint = ", kCheckpointFormatVersion,
                       " or ", kCheckpointFormatWithoutChecksums, " in its metadata)"));
  }
  const bool checksums = format->second == kCheckpointFormatVersion;
  const auto steps = file.metadata.find(std::string(kCheckpointSteps));
  int64_t steps_done = -1;
  if (steps != file.metadata.end()) {
    const std::string& text = steps->second;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), steps_done);
    if (ec != std::errc() || ptr != text.data() + text.size()) steps_done = -1;
  }
  if (steps_done < 0) return bad("its ampc.steps_done is missing or not a count");
  if (checksums) {
    const auto crc = file.metadata.find(std::string(kCheckpointCountsCrc));
    const auto k = file.metadata.find(std::string(kCheckpointAccumulate));
    const int64_t accumulate = k == file.metadata.end() ? -1 : std::atoll(k->second.c_str());
    if (crc == file.metadata.end() || crc->second != counts_checksum(steps_done, accumulate)) {
      return bad(
          "its ampc.steps_done and ampc.accumulate do not match their checksum: the file is "
          "corrupt");
    }
  }
  // Step i reads batches iK .. iK + K - 1: resuming with another K would read other batches.
  if (const auto k = file.metadata.find(std::string(kCheckpointAccumulate));
      k != file.metadata.end() && k->second != str_cat(accumulation_steps_)) {
    return bad(str_cat("it was saved by a model that accumulates over ", k->second,
                       " micro-batches per step; this one takes ", accumulation_steps_));
  }
  // Check everything before changing anything.
  const std::vector<std::string> names = state_names();
  for (const std::string& name : names) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) return bad(str_cat("it has no tensor '", name, "'"));
    AMPC_ASSIGN_OR_RETURN(Tensor current, step_->initializer(name));
    TensorType expected = current.type();
    if (const auto sharded = sharded_.find(name); sharded != sharded_.end()) {
      expected.shape = sharded->second;
    }
    if (it->second.type() != expected) {
      return bad(str_cat("'", name, "' is ", type_to_string(it->second.type()),
                         "; this model's is ", type_to_string(expected)));
    }
  }
  if (file.tensors.size() != names.size()) {
    const std::set<std::string> known(names.begin(), names.end());
    for (const auto& [name, tensor] : file.tensors) {
      if (known.contains(name)) continue;
      // Earlier builds kept a buffer for SGD without momentum, all zeros: the state this model
      // does without, so nothing is lost.
      constexpr std::string_view kBuffer = ".momentum_buffer";
      if (name.ends_with(kBuffer) && known.contains(name.substr(0, name.size() - kBuffer.size())) &&
          std::ranges::all_of(tensor.bytes(), [](uint8_t byte) { return byte == 0; })) {
        continue;
      }
      return bad(str_cat("it holds '", name, "', which is not state of this model"));
    }
  }
  // The file has the model's state; now its bytes and values.
  for (const std::string& name : names) {
    const Tensor& value = file.tensors.at(name);
    if (checksums) {
      const auto crc = file.metadata.find(str_cat(kCheckpointCrcPrefix, name));
      const std::string actual = fmt::format("{:08x}", crc32_of(value.bytes()));
      if (crc == file.metadata.end()) return bad(str_cat("it has no checksum for '", name, "'"));
      if (crc->second != actual) {
        return bad(str_cat("'", name, "' does not match its checksum (CRC-32 ", actual,
                           ", recorded ", crc->second, "): the file is corrupt"));
      }
    }
    if (const std::string why = implausible_state(name, value); !why.empty()) {
      return bad(str_cat("'", name, "' cannot be resumed from: ", why));
    }
  }
  if (const auto counter = file.tensors.find(std::string(kMicroStepState));
      counter != file.tensors.end() && counter->second.element_as_i64(0) != 0) {
    return bad(str_cat("it was saved in the middle of an accumulation window (", kMicroStepState,
                       " = ", counter->second.element_as_i64(0),
                       "); a checkpoint falls between steps"));
  }
  // Queued steps finish first (their data errors are what this load clears); their stats go.
  (void)settle();
  for (const std::string& name : names) {
    const Tensor& value = file.tensors.at(name);
    if (!sharded_.contains(name)) {
      AMPC_RETURN_IF_ERROR(step_->set_initializer(name, value));
      continue;
    }
    // This rank's block of the whole tensor.
    AMPC_ASSIGN_OR_RETURN(Tensor block, step_->initializer(name));
    const TensorType flat{value.dtype(), {value.num_elements()}};
    const TensorType block_type = block.type();
    comm::shard_on_host(TensorArg{&flat, const_cast<uint8_t*>(value.bytes().data())},
                        TensorArg{&block_type, block.mutable_bytes().data()}, rank());
    AMPC_RETURN_IF_ERROR(step_->set_initializer(name, block));
  }
  for (const LowPrecisionCopy& copy : copies_) {
    AMPC_RETURN_IF_ERROR(
        step_->set_initializer(copy.copy, narrowed(file.tensors.at(copy.parameter), copy.dtype)));
  }
  steps_done_ = steps_done;
  eval_stale_ = true;
  counter_unchecked_ = true;
  taken_.clear();
  failed_ = absl::OkStatus();
  return absl::OkStatus();
}

}  // namespace ampc::runtime
