// PassPipeline: fixed points, disabled passes, dumps, the verifier after every pass.
#include "compiler/pass.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }

// A graph x -> Relu -> Relu -> ... (`depth` nodes), the last one the output.
std::unique_ptr<Graph> relu_chain(int depth) {
  auto graph = std::make_unique<Graph>("chain");
  Value* v = graph->add_input("x", f32({4}));
  for (int i = 0; i < depth; ++i) {
    v = graph->create_node("", "Relu", {v}, {f32({4})})->output(0);
  }
  graph->add_output(v);
  return graph;
}

// Removes one Relu whose input is another Relu's output (relu(relu(x)) = relu(x)) per run.
class FoldOneDoubleRelu : public Pass {
 public:
  std::string_view name() const override { return "fold-double-relu"; }
  absl::StatusOr<bool> run(Graph& graph, const PassContext&) override {
    ++runs;
    for (Node* node : graph.node_list()) {
      Node* producer = node->operand(0)->producer();
      if (producer == nullptr || producer->op_type() != "Relu") continue;
      node->output(0)->replace_all_uses_with(producer->output(0));
      graph.erase_node(node);
      return true;
    }
    return false;
  }
  int runs = 0;
};

// Counts its runs and never changes anything.
class Observer : public Pass {
 public:
  explicit Observer(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<bool> run(Graph&, const PassContext&) override { return false; }

 private:
  std::string name_;
};

// Always claims a change: a group holding it never converges.
class AlwaysChanges : public Pass {
 public:
  std::string_view name() const override { return "always-changes"; }
  absl::StatusOr<bool> run(Graph&, const PassContext&) override { return true; }
};

// Breaks the IR: gives the first node's output a wrong type.
class BreaksTypes : public Pass {
 public:
  std::string_view name() const override { return "breaks-types"; }
  absl::StatusOr<bool> run(Graph& graph, const PassContext&) override {
    graph.node_list()[0]->output(0)->set_type(f32({7}));
    return true;
  }
};

class Fails : public Pass {
 public:
  std::string_view name() const override { return "fails"; }
  absl::StatusOr<bool> run(Graph&, const PassContext&) override {
    return absl::InvalidArgumentError("node 'n' is bad");
  }
};

TEST(PassPipeline, FixedPointGroupRepeatsUntilNothingChanges) {
  auto graph = relu_chain(5);
  auto fold = std::make_unique<FoldOneDoubleRelu>();
  FoldOneDoubleRelu* fold_ptr = fold.get();
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::move(fold));
  PassPipeline pipeline;
  pipeline.add_fixed_point("simplify", std::move(group));
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(graph->num_nodes(), 1);
  EXPECT_EQ(fold_ptr->runs, 5);  // four folds, then one round that changes nothing
}

TEST(PassPipeline, SinglePassRunsOnce) {
  auto graph = relu_chain(5);
  PassPipeline pipeline;
  pipeline.add(std::make_unique<FoldOneDoubleRelu>());
  ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  EXPECT_EQ(graph->num_nodes(), 4);
}

TEST(PassPipeline, NonConvergingGroupIsAnError) {
  auto graph = relu_chain(1);
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<AlwaysChanges>());
  PassPipeline pipeline;
  pipeline.add_fixed_point("loop", std::move(group), 3);
  EXPECT_THAT(std::string(pipeline.run(*graph, PassContext{}).status().message()),
              HasSubstr("pass group loop did not reach a fixed point after 3 rounds"));
}

TEST(PassPipeline, DisabledPassDoesNotRun) {
  auto graph = relu_chain(3);
  PipelineOptions options;
  options.disabled.insert("fold-double-relu");
  PassPipeline pipeline(options);
  pipeline.add(std::make_unique<FoldOneDoubleRelu>());
  absl::StatusOr<bool> changed = pipeline.run(*graph, PassContext{});
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(graph->num_nodes(), 3);
}

TEST(PassPipeline, DumpsAfterNamedPassesOrAll) {
  std::vector<std::string> dumped;
  PipelineOptions options;
  options.dump_after.insert("second");
  options.dump = [&](std::string_view pass, const Graph&) {
    dumped.emplace_back(pass);
    return absl::OkStatus();
  };
  {
    PassPipeline pipeline(options);
    pipeline.add(std::make_unique<Observer>("first"));
    pipeline.add(std::make_unique<Observer>("second"));
    auto graph = relu_chain(1);
    ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  }
  EXPECT_THAT(dumped, ElementsAre("second"));
  dumped.clear();
  options.dump_after = {"all"};
  PassPipeline pipeline(options);
  pipeline.add(std::make_unique<Observer>("first"));
  pipeline.add(std::make_unique<Observer>("second"));
  auto graph = relu_chain(1);
  ASSERT_TRUE(pipeline.run(*graph, PassContext{}).ok());
  EXPECT_THAT(dumped, ElementsAre("first", "second"));
}

TEST(PassPipeline, UnknownPassNamesAreRejected) {
  PipelineOptions options;
  options.disabled.insert("no-such-pass");
  PassPipeline pipeline(options);
  pipeline.add(std::make_unique<Observer>("first"));
  EXPECT_THAT(std::string(pipeline.validate_options().message()),
              HasSubstr("--disable-pass: unknown pass 'no-such-pass' (passes: first)"));
  PipelineOptions dump_options;
  dump_options.dump_after.insert("nope");
  PassPipeline dump_pipeline(dump_options);
  dump_pipeline.add(std::make_unique<Observer>("first"));
  auto graph = relu_chain(1);
  EXPECT_THAT(std::string(dump_pipeline.run(*graph, PassContext{}).status().message()),
              HasSubstr("--dump-after: unknown pass 'nope'"));
}

TEST(PassPipeline, VerifierRunsAfterEveryPass) {
  auto graph = relu_chain(2);
  std::vector<std::string> dumped;
  PipelineOptions options;
  options.dump = [&](std::string_view pass, const Graph&) {
    dumped.emplace_back(pass);
    return absl::OkStatus();
  };
  PassPipeline pipeline(options);
  pipeline.add(std::make_unique<BreaksTypes>());
  pipeline.add(std::make_unique<Observer>("never-reached"));
  const absl::Status status = pipeline.run(*graph, PassContext{}).status();
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("the IR is invalid after pass breaks-types: node Relu"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("has type f32[7] but its op infers f32[4]"));
  EXPECT_THAT(dumped, ElementsAre("breaks-types"));  // the broken IR is shown
}

TEST(PassPipeline, PassErrorsNameThePass) {
  auto graph = relu_chain(1);
  PassPipeline pipeline;
  pipeline.add(std::make_unique<Fails>());
  const absl::Status status = pipeline.run(*graph, PassContext{}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "pass fails: node 'n' is bad");
}

TEST(PassPipeline, ListsPassNamesInOrder) {
  PassPipeline pipeline;
  pipeline.add(std::make_unique<Observer>("a"));
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<Observer>("b"));
  group.push_back(std::make_unique<Observer>("c"));
  pipeline.add_fixed_point("g", std::move(group));
  EXPECT_THAT(pipeline.pass_names(), ElementsAre("a", "b", "c"));
}

}  // namespace
}  // namespace ampc
