#include "compiler/pass.h"

#include "compiler/stopwatch.h"
#include "compiler/strings.h"
#include "compiler/verifier.h"

namespace ampc {

void PassPipeline::add(std::unique_ptr<Pass> pass) {
  Entry entry;
  entry.passes.push_back(std::move(pass));
  entries_.push_back(std::move(entry));
}

void PassPipeline::add_fixed_point(std::string group_name,
                                   std::vector<std::unique_ptr<Pass>> passes, int max_iterations) {
  AMPC_CHECK(max_iterations >= 1 && !passes.empty());
  entries_.push_back(Entry{std::move(group_name), std::move(passes), max_iterations});
}

std::vector<std::string> PassPipeline::pass_names() const {
  std::vector<std::string> names;
  for (const Entry& entry : entries_) {
    for (const auto& pass : entry.passes) names.emplace_back(pass->name());
  }
  return names;
}

absl::Status PassPipeline::validate_options() const {
  const std::vector<std::string> names = pass_names();
  auto known = [&](std::string_view name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (const std::string& name : options_.disabled) {
    if (!known(name)) {
      return absl::InvalidArgumentError(str_cat("--disable-pass: unknown pass '", name,
                                                "' (passes: ", str_join(names, ", "), ")"));
    }
  }
  for (const std::string& name : options_.dump_after) {
    if (name != "all" && !known(name)) {
      return absl::InvalidArgumentError(str_cat("--dump-after: unknown pass '", name,
                                                "' (passes: ", str_join(names, ", "), ", or all)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> PassPipeline::run_pass(Pass& pass, Graph& graph,
                                            const PassContext& context) const {
  const Stopwatch pass_time;
  absl::StatusOr<bool> changed = pass.run(graph, context);
  if (!changed.ok()) {
    return absl::Status(changed.status().code(),
                        str_cat("pass ", pass.name(), ": ", changed.status().message()));
  }
  PassTiming timing{std::string(pass.name()), pass_time.seconds()};
  if (options_.verify_each) {
    const Stopwatch verify_time;
    if (absl::Status status = verify(graph); !status.ok()) {
      // The dump is for debugging this failure; the failure is what gets reported.
      if (options_.dump) (void)options_.dump(pass.name(), graph);
      return absl::InternalError(
          str_cat("the IR is invalid after pass ", pass.name(), ": ", status.message()));
    }
    timing.verify_seconds = verify_time.seconds();
  }
  if (options_.timings) {
    timing.nodes = graph.num_nodes();
    if (const Graph* step = graph.training_step()) timing.step_nodes = step->num_nodes();
    options_.timings->push_back(std::move(timing));
  }
  const bool dump =
      options_.dump_after.contains("all") || options_.dump_after.contains(pass.name());
  if (dump && options_.dump) AMPC_RETURN_IF_ERROR(options_.dump(pass.name(), graph));
  return *changed;
}

absl::StatusOr<bool> PassPipeline::run(Graph& graph, const PassContext& context) const {
  AMPC_RETURN_IF_ERROR(validate_options());
  bool any_change = false;
  for (const Entry& entry : entries_) {
    bool converged = false;
    for (int iteration = 0; iteration < entry.max_iterations && !converged; ++iteration) {
      bool changed = false;
      for (const auto& pass : entry.passes) {
        if (options_.disabled.contains(pass->name())) continue;
        AMPC_ASSIGN_OR_RETURN(bool pass_changed, run_pass(*pass, graph, context));
        changed = changed || pass_changed;
      }
      any_change = any_change || changed;
      converged = !changed;
    }
    if (!converged && entry.max_iterations > 1) {
      return absl::InternalError(str_cat("pass group ", entry.group_name,
                                         " did not reach a fixed point after ",
                                         entry.max_iterations, " rounds"));
    }
  }
  return any_change;
}

}  // namespace ampc
