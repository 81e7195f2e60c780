// The element-wise fusion pass (passes/fuse_elementwise.cc), declared apart from passes/passes.h,
// which most of the tree includes.
#pragma once

#include <memory>

#include "compiler/pass.h"

namespace ampc {

// "fuse-elementwise": chains and trees of element-wise nodes become ampc.FusedElementwise nodes.
std::unique_ptr<Pass> make_fuse_elementwise_pass();

}  // namespace ampc
