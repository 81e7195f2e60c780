// data-parallel: makes a training step average its gradients over the ranks of a data-parallel
// group, so that N ranks, each given its shard of a batch, take the step one rank takes on the
// whole batch (for a loss that is a mean over the batch, as DistributedDataParallel assumes).
//
// Rewrites: the backward's seed (autodiff's `<loss>.grad_seed`, 1) becomes 1 / ranks, so each
//   rank's backward computes the gradient of its shard's share of the whole batch's mean loss:
//   for a power-of-two number of ranks every backward value is then exactly the one the whole
//   batch gives for the same rows (a scaling by 2^-k), so low-precision overflows happen where
//   they would on one rank (but for each rank's share of an f16 gradient, rounded before the
//   sum: a share can overflow where the whole batch's sum does not; docs/distributed.md).
//   The gradients the step's optimizer reads (the operands of
//   ampc.UnscaleGradients with loss scaling, else those of ampc.GlobalNorm, which the optimizer
//   pass always adds), taken in the order the backward produces them, are cut into buckets of
//   about `bucket_bytes` (as f32); each bucket becomes one ampc.AllReduce node (the sum over the
//   ranks), placed right after the node that produces its last gradient, and every other reader
//   of a gradient reads its sum instead; the nodes between a sum and the optimizer (the cast
//   back to an f16 or bf16 gradient's dtype, the lossless copies moved after the sum) go right
//   before the optimizer's first reader, so nothing in the backward waits for a sum (on a GPU it
//   overlaps the rest of the backward). Everything after the sums (the unscale and overflow
//   check, the norm and clipping, the update) then sees the same values on every rank, so every
//   rank skips, clips and updates alike. The loss output becomes its mean over the ranks (what
//   the log shows).
//   Training-mode BatchNormalization becomes ampc.SyncBatchNormalization and its gradient
//   (ampc.BatchNormalizationGrad) gets all_ranks=1: the batch statistics, and the sums in the
//   input's gradient, are over every rank's shard together (PyTorch's SyncBatchNorm), so the
//   shards normalize as the whole batch would (and the running variance's Bessel correction
//   counts every rank's elements). With sync_batch_norm false each rank keeps its
//   shard's statistics (DDP without SyncBatchNorm).
//   With shard_optimizer (ZeRO stage 1; `ampc train --shard-optimizer`), the moments of every
//   parameter's update (ampc.SGD, ampc.Adam) are cut into `ranks` blocks of its flattened
//   elements (ceil(n / ranks) each, zero-padded; ops/collective.cc), and each rank keeps and
//   updates its block: instead of the sums above, the gradients are reduce-scattered
//   (ampc.ReduceScatter per bucket, f16 and bf16 blocks cast back to their dtype), the unscale,
//   overflow check, norm and clipping run on the blocks, whether any block overflowed and the
//   squared norms are summed over the ranks (two one-element AllReduces), each update reads its
//   parameter's block (ampc.Shard) and its moments' blocks, and one ampc.AllGather after the last
//   update gives every rank the whole updated parameters. The parameters need to be f32 master
//   weights. Those the forward reads in f32 stay whole on every rank; those it reads only
//   through Casts to f16 or bf16 (in the step and in `eval`; passes/master_weights.h) are read
//   through a persistent whole copy in that dtype instead, and each rank keeps only its block of
//   their f32 master weights: the update reads and writes the block, and the AllGather gathers
//   the updated blocks cast to the copy's dtype into the copy (half the bytes of f32). The
//   moments and those master weights are the returned sharded state; the copies are returned
//   for the session to read the eval graph through them too.
//   A step that accumulates gradients (`ampc compile --accumulate`): the gradients the optimizer
//   reads are the window's running sums, and those are what is summed over the ranks; the running
//   sums the step carries to its next run stay each rank's own. The optimizer uses the sums only
//   on the window's last run, so their collectives (and, sharded, the overflow flag's and the
//   norm's) get `window` = 1: on the window's other runs they communicate nothing and give each
//   rank's own values (ops/collective.cc; a TrainingSession tells the runs apart).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "passes/master_weights.h"

namespace ampc {

// A piece of optimizer state the sharded optimizer keeps one block of on each rank: its name, its
// whole shape (what a checkpoint holds) and, for master weights, their whole value when the
// rewrite began (the step's initializer is left zero: rank r's block is for the session to cut,
// from rank 0's values). Moments start at zero.
struct ShardedState {
  std::string name;
  Shape shape;
  std::optional<Tensor> initial = std::nullopt;
};

struct DataParallelOptions {
  int ranks = 2;
  int64_t bucket_bytes = int64_t{25} << 20;
  // Batch statistics over every rank's shard (SyncBatchNorm), or each rank's own.
  bool sync_batch_norm = true;
  // ZeRO stage 1: each rank keeps and updates one block of the optimizer's moments.
  bool shard_optimizer = false;
  // The loss output's name (TrainingSession's).
  std::string_view loss = "loss";
  // The eval graph beside the step, whose readers of a parameter must also be Casts for its
  // master weights to be sharded (null: none).
  const Graph* eval = nullptr;
};

struct DataParallelRewrite {
  int collectives = 0;                      // collective nodes added
  std::vector<ShardedState> sharded_state;  // with shard_optimizer
  // With shard_optimizer: the parameters whose master weights are sharded, read through their
  // low-precision copies (new state of the step, updated by the AllGather).
  std::vector<LowPrecisionCopy> copies;
};

// Rewrites `step` (a training step: a graph with state updates) in place.
absl::StatusOr<DataParallelRewrite> insert_gradient_all_reduce(Graph& step,
                                                               const DataParallelOptions& options);

}  // namespace ampc
