// Passes and the pipeline that runs them.
//
// A pass is a small class whose run() rewrites the graph through the IR's mutators and returns
// whether it changed anything. The pipeline runs the verifier after every pass, can repeat a
// group of passes to a fixed point, skips disabled passes and dumps text IR after chosen ones.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "compiler/ir.h"

namespace ampc {

// Warnings collected while compiling, shown to the user at the end.
class Diagnostics {
 public:
  void warn(std::string message) { warnings_.push_back(std::move(message)); }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::vector<std::string> warnings_;
};

struct PassContext {
  Diagnostics* diagnostics = nullptr;  // may be null: warnings are then dropped

  void warn(std::string message) const {
    if (diagnostics) diagnostics->warn(std::move(message));
  }
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Returns whether the graph changed.
  virtual absl::StatusOr<bool> run(Graph& graph, const PassContext& context) = 0;
};

// The time one step of a compile took and the graph's size after it (`ampc compile
// --time-passes`). A pass's entry covers its run; the verifier after it is timed apart.
struct PassTiming {
  std::string name;
  double seconds = 0;
  double verify_seconds = 0;
  int nodes = 0;        // the graph's nodes after it
  int step_nodes = -1;  // the training step's nodes after it; -1 while there is none
};

struct PipelineOptions {
  std::set<std::string, std::less<>> disabled;    // pass names
  std::set<std::string, std::less<>> dump_after;  // pass names, or "all"
  // Receives the graph after each pass named in dump_after (and whenever the verifier fails); a
  // failure to write it stops the pipeline.
  std::function<absl::Status(std::string_view pass_name, const Graph& graph)> dump;
  bool verify_each = true;
  // When set, receives one entry per pass run (a pass of a fixed-point group once per round).
  std::vector<PassTiming>* timings = nullptr;
};

class PassPipeline {
 public:
  explicit PassPipeline(PipelineOptions options = {}) : options_(std::move(options)) {}

  void add(std::unique_ptr<Pass> pass);
  // Runs `passes` in turn, again and again, until none of them changes the graph; more than
  // `max_iterations` rounds is an error.
  void add_fixed_point(std::string group_name, std::vector<std::unique_ptr<Pass>> passes,
                       int max_iterations = 16);

  // Every pass name the pipeline holds, in order (for checking --disable-pass and --dump-after).
  std::vector<std::string> pass_names() const;
  // Fails naming the unknown pass when `disabled` or `dump_after` name a pass this pipeline
  // does not hold.
  absl::Status validate_options() const;

  absl::StatusOr<bool> run(Graph& graph, const PassContext& context) const;

 private:
  struct Entry {
    std::string group_name;  // empty for a single pass
    std::vector<std::unique_ptr<Pass>> passes;
    int max_iterations = 1;
  };
  absl::StatusOr<bool> run_pass(Pass& pass, Graph& graph, const PassContext& context) const;

  PipelineOptions options_;
  std::vector<Entry> entries_;
};

}  // namespace ampc
