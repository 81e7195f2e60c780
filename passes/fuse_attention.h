// The attention fusion pass (passes/fuse_attention.cc), declared apart from passes/passes.h,
// which most of the tree includes.
#pragma once

#include <memory>

#include "compiler/pass.h"

namespace ampc {

// "fuse-attention": MatMul, scale, mask, Softmax, MatMul become one ampc.Attention node.
std::unique_ptr<Pass> make_fuse_attention_pass();

}  // namespace ampc
