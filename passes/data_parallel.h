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
//   Training-mode BatchNormalization becomes ampc.SyncBatchNormalization and its gradient
//   (ampc.BatchNormalizationGrad) gets all_ranks=1: the batch statistics, and the sums in the
//   input's gradient, are over every rank's shard together (PyTorch's SyncBatchNorm), so the
//   shards normalize as the whole batch would (and the running variance's Bessel correction
//   counts every rank's elements). With sync_batch_norm false each rank keeps its
//   shard's statistics (DDP without SyncBatchNorm).
//   A step that accumulates gradients (`ampc compile --accumulate`): the gradients the optimizer
//   reads are the window's running sums, and those are what is summed over the ranks, at every
//   run of the window (the optimizer uses them only at the window's end); the running sums the
//   step carries to its next run stay each rank's own.
#pragma once

#include <cstdint>
#include <string_view>

#include "compiler/ir.h"
#include "compiler/status.h"

namespace ampc {

struct DataParallelOptions {
  int ranks = 2;
  int64_t bucket_bytes = int64_t{25} << 20;
  // Batch statistics over every rank's shard (SyncBatchNorm), or each rank's own.
  bool sync_batch_norm = true;
  // The loss output's name (TrainingSession's).
  std::string_view loss = "loss";
};

// Rewrites `step` (a training step: a graph with state updates) in place. Returns how many
// AllReduce nodes it added.
absl::StatusOr<int> insert_gradient_all_reduce(Graph& step, const DataParallelOptions& options);

}  // namespace ampc
