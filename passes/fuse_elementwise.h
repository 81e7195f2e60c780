// The element-wise fusion pass (passes/fuse_elementwise.cc), declared apart from passes/passes.h,
// which most of the tree includes.
#pragma once

#include <memory>

#include "compiler/pass.h"

namespace ampc {

struct FuseElementwiseOptions {
  // `--recompute cheap`: a fused group recomputes an element-wise producer that is also read
  // before the group (in the training step: a forward activation read by the backward) instead
  // of reading its saved result, when the producer's operands are ones the group reads anyway,
  // so that no value lives longer than before and the saved result may go.
  bool recompute = false;
};

// "fuse-elementwise": chains and trees of element-wise nodes become ampc.FusedElementwise nodes.
std::unique_ptr<Pass> make_fuse_elementwise_pass(FuseElementwiseOptions options = {});

}  // namespace ampc
