// The text form of the IR: a deterministic printer and a parser that round-trip
// (print -> parse -> print gives the same text). Pass tests and `ampc inspect` use it.
// docs/text-ir.md specifies the grammar.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc {

struct PrintOptions {
  // Print constants with more elements than this as `elided` (type only). Negative: never elide.
  // Elided text parses back into a tensor without data, which prints the same.
  int64_t max_constant_elements = -1;
};

std::string print_graph(const Graph& graph, const PrintOptions& options = {});

// Parses the text form. Errors give line and column and say what was expected. The parsed graph
// is not verified; callers run verify() (the pass-test helpers do).
absl::StatusOr<std::unique_ptr<Graph>> parse_graph(std::string_view text);

}  // namespace ampc
