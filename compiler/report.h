// What `ampc inspect` shows of a graph: a summary of its ops, parameters and dtypes, as text or
// as JSON in the documented schema (docs/inspect-json.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "compiler/ir.h"

namespace ampc {

inline constexpr std::string_view kInspectSchema = "ampc.inspect/1";

struct GraphSummary {
  int64_t node_count = 0;
  std::map<std::string, int64_t> nodes_per_op;  // "MatMul", "ampc.ReluGrad"
  int64_t initializer_count = 0;
  int64_t parameter_elements = 0;  // elements of all initializers
  int64_t parameter_bytes = 0;
  struct DTypeCount {
    int64_t values = 0;  // graph inputs, initializers and node outputs of this dtype
    int64_t initializer_elements = 0;
    int64_t initializer_bytes = 0;
  };
  std::map<std::string, DTypeCount> per_dtype;  // keyed by dtype name
};

GraphSummary summarize_graph(const Graph& graph);

// The text IR (constants over 16 elements elided) followed by the summary.
std::string inspect_text(const Graph& graph);
// One JSON document, schema kInspectSchema, pretty-printed with a trailing newline.
std::string inspect_json(const Graph& graph);

}  // namespace ampc
