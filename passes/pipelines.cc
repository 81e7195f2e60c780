// The standard pipelines built from the passes in passes/ (see passes/passes.h).
#include <utility>
#include <vector>

#include "passes/passes.h"

namespace ampc {

void add_canonicalize_pipeline(PassPipeline& pipeline) {
  // Each pass exposes work for the others (folding feeds attribute moves, Identity removal feeds
  // folding, both leave dead values), so the group runs until none of them changes the graph.
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(make_fold_constants_pass());
  group.push_back(make_canonicalize_pass());
  group.push_back(make_dce_pass());
  pipeline.add_fixed_point("canonicalize", std::move(group));
  pipeline.add(make_infer_shapes_pass());
}

}  // namespace ampc
