// `ampc inspect --precision`: each node's precision and why, and what it costs (casts, memory).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ampc/status.h"
#include "compiler/ir.h"
#include "runtime/plan.h"

namespace ampc {

std::string precision_report(const Graph& graph);

// The same as JSON (schema "ampc.precision/1", docs/inspect-json.md).
std::string precision_report_json(const Graph& graph);
// The same as a Graphviz digraph: nodes coloured by compute dtype, casts as diamonds, edges
// labelled with the dtype that flows; the reason is each node's tooltip.
std::string precision_report_dot(const Graph& graph);

// The compiled model as its file holds it: `compiled` exported and imported again, as `ampc
// compile` writes it and `ampc inspect`, `ampc train` and `ampc run` read it. Export adds what
// the graph's opset takes as inputs (a ReduceSum's axes, a Split's sizes) as initializers, which
// the runtime plans; so every memory figure the report compares (the O0 baseline, `ampc
// compare`'s column) is measured on this form, never on the graph before export.
absl::StatusOr<std::unique_ptr<Graph>> as_written(const Graph& compiled);

// The one definition of a graph's planned memory: the bytes the runtime's planner gives each
// arena (initializers, activations, workspace) on `device`.
absl::StatusOr<std::array<int64_t, runtime::kNumArenas>> planned_arenas(const Graph& graph,
                                                                        runtime::Device device);

// The model's memory at O0, for the report's comparison: `ampc compile --precision` compiles the
// model a second time with every node f32 and stores precision_baseline() of that graph under
// the metadata key kMetadataPrecisionBaseline (compiler/compile.h) as
// {"eval": {"state_bytes", "planned_bytes"}, "training_step": {...}}, measured on as_written(o0)
// exactly as the report measures the file it reads; nullopt when that form cannot be made.
std::optional<std::string> precision_baseline(const Graph& o0);
}  // namespace ampc
