// data-parallel: makes a training step average its gradients over the ranks of a data-parallel
// group, so that N ranks, each given its shard of a batch, take the step one rank takes on the
// whole batch (for a loss that is a mean over the batch, as DistributedDataParallel assumes).
//
// Rewrites: the backward's seed (autodiff's `<loss>.grad_seed`, 1) becomes 1 / ranks, so each
//   rank's backward computes the gradient of its shard's share of the whole batch's mean loss:
//   for a power-of-two number of ranks every backward value is then exactly the one the whole
//   batch gives for the same rows (a scaling by 2^-k), so low-precision overflows happen where
//   they would on one rank. The gradients the step's optimizer reads (the operands of
//   ampc.UnscaleGradients with loss scaling, else those of ampc.GlobalNorm, which the optimizer
//   pass always adds), taken in the order the backward produces them, are cut into buckets of
//   about `bucket_bytes` (as f32); each bucket becomes one ampc.AllReduce node (the sum over the
//   ranks), placed right after the node that produces its last gradient, and every other reader
//   of a gradient reads its sum instead. Everything after the sums (the unscale and overflow
//   check, the norm and clipping, the update) then sees the same values on every rank, so every
//   rank skips, clips and updates alike. The loss output becomes its mean over the ranks (what
//   the log shows).
// Not rewritten: BatchNorm's batch statistics stay each rank's own (as in DDP without
//   SyncBatchNorm). A step that accumulates gradients (`ampc compile --accumulate`) is refused.
#pragma once

#include <cstdint>
#include <string_view>

#include "compiler/ir.h"
#include "compiler/status.h"

namespace ampc {

struct DataParallelOptions {
  int ranks = 2;
  int64_t bucket_bytes = int64_t{25} << 20;
  // The loss output's name (TrainingSession's).
  std::string_view loss = "loss";
};

// Rewrites `step` (a training step: a graph with state updates) in place. Returns how many
// AllReduce nodes it added.
absl::StatusOr<int> insert_gradient_all_reduce(Graph& step, const DataParallelOptions& options);

}  // namespace ampc
