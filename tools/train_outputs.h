// Where `ampc train` writes (--checkpoint, --export, --log): the checks made before the first
// step, the log cut back on --resume, and checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ampc/status.h"
#include "runtime/training_session.h"

namespace ampc {

// The file a checkpoint folder holds.
inline constexpr std::string_view kCheckpointFile = "checkpoint.safetensors";

// Where --checkpoint, --export and --log write, checked before the first step so that a typo
// costs no training: the checkpoint folder exists or is made, takes a file, has room for the
// checkpoint, and holds no stale temporaries of an interrupted save (removed by the `writer`,
// the rank that saves: another rank would remove the temporary of a save in progress); the
// export's folder has room for the trained model; outputs that exist are regular files, the
// export's external data (`external_data`: EXPORT.data) among them.
absl::Status check_outputs(const runtime::TrainingSession& session,
                           const std::string& checkpoint_dir, const std::string& export_path,
                           bool external_data, bool writer);

// On --resume, the log keeps one record per step: records past the checkpoint's step (logged
// before the run that wrote them was killed, and to be run again) are cut off.
absl::Status cut_log_to_step(const std::string& log, int64_t steps_done);

// Writes the session's checkpoint into `dir` (made if missing).
absl::Status save_checkpoint(const runtime::TrainingSession& session, const std::string& dir);

}  // namespace ampc
