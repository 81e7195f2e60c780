// `ampc inspect --precision`: each node's precision and why, and what it costs (casts, memory).
#pragma once

#include <string>

#include "compiler/ir.h"

namespace ampc {

std::string precision_report(const Graph& graph);

// The model's memory at O0, for the report's comparison: `ampc compile --precision` compiles the
// model a second time with every node f32 and stores precision_baseline() of that graph under
// the metadata key kMetadataPrecisionBaseline (compiler/compile.h) as
// {"eval": {"state_bytes", "planned_bytes"}, "training_step": {...}}.
std::string precision_baseline(const Graph& o0);
// The same as JSON (schema "ampc.precision/1", docs/inspect-json.md).
std::string precision_report_json(const Graph& graph);
// The same as a Graphviz digraph: nodes coloured by compute dtype, casts as diamonds, edges
// labelled with the dtype that flows; the reason is each node's tooltip.
std::string precision_report_dot(const Graph& graph);

}  // namespace ampc
