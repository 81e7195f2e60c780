// The compile driver behind `ampc compile`: import -> canonicalize -> infer shapes -> export.
#pragma once

#include <memory>
#include <string>

#include "compiler/ir.h"
#include "compiler/onnx_io.h"
#include "compiler/pass.h"
#include "compiler/status.h"

namespace ampc {

struct CompileOptions {
  ImportOptions import;
  PipelineOptions pipeline;
};

// Imports `input_path` and runs the compile pipeline on it. Warnings go to `diagnostics`.
absl::StatusOr<std::unique_ptr<Graph>> compile_file(const std::string& input_path,
                                                    const CompileOptions& options,
                                                    Diagnostics& diagnostics);

// Runs the compile pipeline on an imported graph.
absl::Status compile_graph(Graph& graph, const PipelineOptions& pipeline_options,
                           Diagnostics& diagnostics);

// The passes compile_graph runs, in order (for --help and for checking pass names).
std::vector<std::string> compile_pass_names();

// Parses one `--shape NAME:8x3x32x32` value (a scalar is `NAME:`) into `shapes`.
absl::Status parse_shape_flag(const std::string& flag_value,
                              std::map<std::string, Shape, std::less<>>& shapes);

}  // namespace ampc
