// `ampc train --eval-data`: the trained model's mean loss and accuracy on held-out batches.
#pragma once

#include <string>

#include "ampc/status.h"
#include "runtime/batch_data.h"
#include "runtime/training_session.h"

namespace ampc {

// Prints (on stderr) the mean of each scalar output of the eval graph (the loss) over every
// batch of `data` (--eval-data, read from `path` before the first step), and the accuracy of each
// classifier output (float scores [N, C, d...]) against the integer input shaped [N, d...] (its
// labels). In a data-parallel group (`group` of more than one rank), rank r evaluates batches r, r
// + N, ..., the sums are taken over the ranks and rank 0 prints them; every rank must call it.
absl::Status report_evaluation(runtime::TrainingSession& session, const runtime::BatchData& data,
                               const std::string& path, runtime::comm::Communicator* group);

}  // namespace ampc
