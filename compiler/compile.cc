#include "compiler/compile.h"

#include <charconv>

#include "compiler/strings.h"
#include "compiler/verifier.h"
#include "passes/passes.h"

namespace ampc {

absl::Status compile_graph(Graph& graph, const PipelineOptions& pipeline_options,
                           Diagnostics& diagnostics) {
  PassPipeline pipeline(pipeline_options);
  add_canonicalize_pipeline(pipeline);
  PassContext context{&diagnostics};
  AMPC_RETURN_IF_ERROR(pipeline.run(graph, context).status());
  return verify(graph);
}

absl::StatusOr<std::unique_ptr<Graph>> compile_file(const std::string& input_path,
                                                    const CompileOptions& options,
                                                    Diagnostics& diagnostics) {
  // Check pass names before the (possibly slow) import, so a typo fails at once.
  PassPipeline pipeline(options.pipeline);
  add_canonicalize_pipeline(pipeline);
  AMPC_RETURN_IF_ERROR(pipeline.validate_options());
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_file(input_path, options.import));
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, options.pipeline, diagnostics));
  return graph;
}

std::vector<std::string> compile_pass_names() {
  PassPipeline pipeline;
  add_canonicalize_pipeline(pipeline);
  return pipeline.pass_names();
}

absl::Status parse_shape_flag(const std::string& flag_value,
                              std::map<std::string, Shape, std::less<>>& shapes) {
  const size_t colon = flag_value.rfind(':');
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(str_cat("--shape '", flag_value, "': ", why,
                                              " (expected NAME:DIMxDIMx..., e.g. x:8x3x32x32)"));
  };
  if (colon == std::string::npos || colon == 0) return bad("missing input name");
  const std::string name = flag_value.substr(0, colon);
  const std::string_view dims_text = std::string_view(flag_value).substr(colon + 1);
  Shape shape;
  size_t start = 0;
  while (start < dims_text.size()) {
    size_t end = dims_text.find('x', start);
    if (end == std::string_view::npos) end = dims_text.size();
    const std::string_view token = dims_text.substr(start, end - start);
    int64_t dim = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), dim);
    if (token.empty() || ec != std::errc() || ptr != token.data() + token.size() || dim < 0) {
      return bad(str_cat("'", token, "' is not a dimension"));
    }
    shape.push_back(dim);
    start = end + 1;
    if (end + 1 == dims_text.size()) return bad("trailing 'x'");
  }
  if (!shapes.emplace(name, shape).second) return bad(str_cat("input '", name, "' given twice"));
  return absl::OkStatus();
}

}  // namespace ampc
