// Factories for the passes in passes/, and the standard pipelines built from them.
//
// Each pass lives in its own file (passes/<name>.cc) as a small class deriving from Pass; only
// its factory is public, so a pipeline (or a test) names passes without seeing their classes.
#pragma once

#include <memory>

#include "compiler/pass.h"

namespace ampc {

// "fold-constants": nodes whose operands are all compile-time constants become initializers.
std::unique_ptr<Pass> make_fold_constants_pass();
// "canonicalize": Identity removal, AttrAsInput inputs moved into attributes, trailing omitted
// operands dropped.
std::unique_ptr<Pass> make_canonicalize_pass();
// "dce": nodes and initializers nothing reads.
std::unique_ptr<Pass> make_dce_pass();
// "infer-shapes": re-infers every node's output types.
std::unique_ptr<Pass> make_infer_shapes_pass();

// The `ampc compile` pipeline: the fixed-point group "canonicalize" of [fold-constants,
// canonicalize, dce], then infer-shapes.
void add_canonicalize_pipeline(PassPipeline& pipeline);

}  // namespace ampc
