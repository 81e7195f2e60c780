// The start-up check of a data-parallel group: every rank must train the same step. Ranks that
// loaded another model, precision, optimizer or batch size would otherwise queue different
// collectives and hang, or average unrelated gradients.
#pragma once

#include "ampc/status.h"
#include "compiler/ir.h"
#include "runtime/comm/communicator.h"

namespace ampc::runtime::comm {

// Compares a CRC-32 of `step`'s text IR (its nodes, types and attributes, and every constant
// of up to 16 elements; the weights are rank 0's anyway) across the group. Every rank gets the
// same answer: OK, or FailedPrecondition naming the ranks whose step differs from rank 0's.
absl::Status check_same_step(const Graph& step, Communicator& group);

}  // namespace ampc::runtime::comm
