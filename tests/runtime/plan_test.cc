// The planner: arenas, lifetimes, sharing and in-place reuse, on small graphs and on the models.
#include "runtime/plan.h"

#include <algorithm>
#include <random>

#include "compiler/compile.h"
#include "compiler/op_def.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace ampc::runtime {
namespace {

// No two activation buffers whose lifetimes overlap share a byte.
::testing::AssertionResult live_buffers_are_disjoint(const Plan& plan) {
  const std::vector<Buffer>& buffers = plan.buffers();
  for (size_t a = 0; a < buffers.size(); ++a) {
    for (size_t b = a + 1; b < buffers.size(); ++b) {
      const Buffer& x = buffers[a];
      const Buffer& y = buffers[b];
      if (x.arena != y.arena || x.bytes == 0 || y.bytes == 0) continue;
      const bool live_together = x.first_step <= y.last_step && y.first_step <= x.last_step;
      const bool share_bytes = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      if (live_together && share_bytes) {
        return ::testing::AssertionFailure()
               << x.values[0]->name() << " and " << y.values[0]->name() << " overlap";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

std::unique_ptr<Plan> plan_for(const Graph& graph, bool reuse = true) {
  absl::StatusOr<std::unique_ptr<Plan>> plan =
      Plan::build(graph, Device::kCpu, PlanOptions{.reuse_memory = reuse});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : nullptr;
}

constexpr std::string_view kChain = R"(
graph chain(%x: f32[256], %w: f32[256,256]) {
  %a = MatMul(%x, %w) : f32[256]
  %b = Relu(%a) : f32[256]
  %c = MatMul(%b, %w) : f32[256]
  %d = Tanh(%c) : f32[256]
  %e = MatMul(%d, %w) : f32[256]
  return %e
})";

TEST(Plan, ElementwiseNodeWritesOverTheOperandItLastReads) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kChain);
  std::unique_ptr<Plan> plan = plan_for(*graph);
  ASSERT_NE(plan, nullptr);
  auto value = [&](std::string_view name) -> const Value* {
    for (const auto& node : graph->nodes()) {
      if (node->output(0)->name() == name) return node->output(0);
    }
    return nullptr;
  };
  EXPECT_EQ(plan->buffer_of(value("a")), plan->buffer_of(value("b")));
  EXPECT_EQ(plan->buffer_of(value("c")), plan->buffer_of(value("d")));
  EXPECT_NE(plan->buffer_of(value("b")), plan->buffer_of(value("c")));
  EXPECT_TRUE(live_buffers_are_disjoint(*plan));
}

// Less(f32[3,1,5], f32[3,4,5]) writes bool[3,4,5]: 60 bytes, like its broadcast operand 0. Taking
// that operand's buffer would overwrite elements later output elements still read; the planner
// must not, and the planned run equals the unplanned one.
TEST(Plan, ABroadcastOperandOfTheOutputsByteSizeIsNotOverwritten) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
graph g(%x: f32[3,1,5], %y: f32[3,4,5]) {
  %r = Relu(%x) : f32[3,1,5]
  %c = Less(%r, %y) : bool[3,4,5]
  return %c
})");
  ASSERT_NE(graph, nullptr);
  std::unique_ptr<Plan> plan = plan_for(*graph);
  ASSERT_NE(plan, nullptr);
  const Node& relu = *graph->nodes().front();
  const Node& less = *graph->nodes().back();
  EXPECT_NE(plan->buffer_of(relu.output(0)), plan->buffer_of(less.output(0)));

  std::vector<float> x(15), y(60);
  for (int i = 0; i < 15; ++i) x[i] = static_cast<float>(i % 4) - 1.5f;
  for (int i = 0; i < 60; ++i) y[i] = static_cast<float>(i % 7) * 0.5f - 1.0f;
  const std::vector<Tensor> inputs = {Tensor::from_f32({3, 1, 5}, x),
                                      Tensor::from_f32({3, 4, 5}, y)};
  absl::StatusOr<std::vector<Tensor>> want = interpret_graph(*graph, inputs);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<std::unique_ptr<InferenceSession>> session =
      InferenceSession::create(graph->clone());
  ASSERT_TRUE(session.ok()) << session.status();
  absl::StatusOr<std::map<std::string, Tensor>> got =
      (*session)->run({{"x", inputs[0]}, {"y", inputs[1]}});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->at("c"), (*want)[0]);
}

TEST(Plan, BuffersWithDisjointLifetimesShareMemory) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(kChain);
  std::unique_ptr<Plan> shared = plan_for(*graph);
  std::unique_ptr<Plan> unshared = plan_for(*graph, /*reuse=*/false);
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(unshared, nullptr);
  // The inputs x and w (never shared), then a/b, c/d and e, of which at most two are live at
  // once: a/b and e take turns.
  const int64_t w_bytes = 256 * 256 * 4;
  EXPECT_EQ(shared->arena_bytes(ArenaKind::kActivations), w_bytes + 3 * 1024);
  EXPECT_EQ(unshared->arena_bytes(ArenaKind::kActivations), w_bytes + 6 * 1024);
  EXPECT_EQ(shared->unshared_activation_bytes(), w_bytes + 6 * 1024);
  EXPECT_EQ(shared->arena_bytes(ArenaKind::kParameters), 0);
}

int64_t aligned(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// The orders the planner places buffers in (runtime/plan.cc): by size, by lifetime x size, by
// the step that writes them; each largest first or earliest first, ties in graph order.
enum class Order { kSize, kArea, kFirstStep };

// Greedy placement in `order`, written as plainly as possible (every placed buffer checked for
// each new one): what the planner's lifetime index must reproduce offset for offset.
std::vector<int64_t> reference_offsets(const std::vector<Buffer>& buffers, Order by) {
  auto align = [](int64_t bytes) { return aligned(bytes); };
  std::vector<int> order;
  for (int b = 0; b < static_cast<int>(buffers.size()); ++b) {
    if (!buffers[b].shared && buffers[b].arena == ArenaKind::kActivations) order.push_back(b);
  }
  const auto area = [&](int b) {
    return buffers[b].bytes * (buffers[b].last_step - buffers[b].first_step + 1);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    switch (by) {
      case Order::kSize:
        return buffers[a].bytes > buffers[b].bytes;
      case Order::kArea:
        return area(a) > area(b);
      case Order::kFirstStep:
        return buffers[a].first_step < buffers[b].first_step;
    }
    return false;
  });
  std::vector<int64_t> offsets(buffers.size(), -1);
  std::vector<int> placed;
  for (int b : order) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (int o : placed) {
      const bool live_together = buffers[b].first_step <= buffers[o].last_step &&
                                 buffers[o].first_step <= buffers[b].last_step;
      if (buffers[o].bytes > 0 && live_together) {
        taken.emplace_back(offsets[o], offsets[o] + align(buffers[o].bytes));
      }
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + align(buffers[b].bytes) <= begin) break;
      offset = std::max(offset, end);
    }
    offsets[b] = offset;
    placed.push_back(b);
  }
  return offsets;
}

// A random graph of 400 nodes whose values have many sizes and lifetimes (each node reads one
// or two earlier values, some values are graph outputs).
std::unique_ptr<Graph> random_graph(uint32_t seed) {
  std::mt19937 random(seed);
  auto graph = std::make_unique<Graph>("random");
  std::vector<Value*> values = {graph->add_input("x", TensorType{DType::kF32, {16}})};
  auto pick = [&] {
    // Mostly recent values, sometimes an old one (a long lifetime).
    const int n = static_cast<int>(values.size());
    const int back = random() % 4 == 0 ? static_cast<int>(random() % n)
                                       : std::min(n - 1, static_cast<int>(random() % 8));
    return values[n - 1 - back];
  };
  for (int i = 0; i < 400; ++i) {
    Value* a = pick();
    Value* b = pick();
    const int64_t size = a->shape()[0] + b->shape()[0];
    Node* node = size <= 4096 && random() % 2 == 0
                     ? graph->create_node("", "Concat", {a, b}, {TensorType{DType::kF32, {size}}},
                                          {{"axis", int64_t{0}}})
                     : graph->create_node("", random() % 2 ? "Relu" : "Neg", {a}, {a->type()});
    node->output(0)->set_name(graph->unique_value_name("v"));
    values.push_back(node->output(0));
    if (random() % 40 == 0) graph->add_output(values.back());
  }
  graph->add_output(values.back());
  return graph;
}

// The arena a placement needs: the end of its highest buffer.
int64_t arena_of(const std::vector<Buffer>& buffers, const std::vector<int64_t>& offsets) {
  int64_t arena = 0;
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (offsets[b] >= 0 && buffers[b].bytes > 0) {
      arena = std::max(arena, offsets[b] + aligned(buffers[b].bytes));
    }
  }
  return arena;
}

// No placement can use less than the most bytes live at one step.
int64_t live_bytes_bound(const Plan& plan) {
  std::vector<int64_t> live(plan.steps().size() + 2, 0);
  for (const Buffer& buffer : plan.buffers()) {
    if (buffer.shared || buffer.arena != ArenaKind::kActivations) continue;
    for (int t = buffer.first_step + 1; t <= buffer.last_step + 1; ++t) {
      live[t] += aligned(buffer.bytes);
    }
  }
  return *std::max_element(live.begin(), live.end());
}

TEST(Plan, PlacementIsTheBestOfThreeGreedyOrdersOnRandomGraphs) {
  int other_than_size = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::unique_ptr<Graph> graph = random_graph(seed);
    ASSERT_TRUE(verify(*graph).ok()) << verify(*graph);
    std::unique_ptr<Plan> plan = plan_for(*graph);
    ASSERT_NE(plan, nullptr);
    // The plan is the first of the orders whose arena is smallest, offset for offset.
    std::vector<int64_t> expected;
    int64_t best = -1;
    for (Order order : {Order::kSize, Order::kArea, Order::kFirstStep}) {
      std::vector<int64_t> offsets = reference_offsets(plan->buffers(), order);
      const int64_t arena = arena_of(plan->buffers(), offsets);
      if (best < 0 || arena < best) {
        best = arena;
        expected = std::move(offsets);
        other_than_size += order != Order::kSize;
      }
    }
    for (size_t b = 0; b < expected.size(); ++b) {
      if (expected[b] < 0) continue;
      ASSERT_EQ(plan->buffers()[b].offset, expected[b]) << "seed " << seed << ", buffer " << b;
    }
    EXPECT_EQ(plan->arena_bytes(ArenaKind::kActivations), best);
    EXPECT_GE(best, live_bytes_bound(*plan));
    EXPECT_TRUE(live_buffers_are_disjoint(*plan));
    EXPECT_LT(plan->arena_bytes(ArenaKind::kActivations), plan->unshared_activation_bytes());
  }
  std::printf("%d of 12 random graphs placed better by an order other than size\n",
              other_than_size);
}

// A DenseNet block as a training step: layer i multiplies the concatenation of every earlier
// feature map by its weight. The backward splits each Concat's gradient into its parts and sums
// every feature's parts as the layers above produce them: about layers^2 / 2 small buffers,
// freed at scattered steps, live together in the holes the large ones leave.
std::unique_ptr<Graph> dense_block_step(int layers) {
  constexpr int kWidth = 4;
  std::string text = "graph dense(%x: f32[2," + std::to_string(kWidth) + "]) opset(17) {\n";
  std::vector<std::string> features = {"%x"};
  for (int i = 1; i <= layers; ++i) {
    const int in = kWidth * i;
    std::string weights;
    for (int e = 0; e < in * kWidth; ++e) weights += e == 0 ? "0.01" : ", 0.01";
    text += str_cat("  init %w", i, ": f32[", in, ",", kWidth, "] = [", weights, "]\n");
    text +=
        str_cat("  %c", i, " = Concat<axis=1>(", str_join(features, ", "), ") : f32[2,", in, "]\n");
    text += str_cat("  %m", i, " = MatMul(%c", i, ", %w", i, ") : f32[2,", kWidth, "]\n");
    text += str_cat("  %f", i, " = Relu(%m", i, ") : f32[2,", kWidth, "]\n");
    features.push_back(str_cat("%f", i));
  }
  text += str_cat("  %loss = ReduceSum<keepdims=0>(%f", layers, ") : f32[]\n  return %loss\n}\n");
  std::unique_ptr<Graph> graph = testing::parse_or_fail(text);
  if (graph == nullptr) return nullptr;
  CompileOptions options;
  options.training = TrainingOptions{};
  Diagnostics diagnostics;
  const absl::Status compiled = compile_graph(*graph, options, diagnostics);
  EXPECT_TRUE(compiled.ok()) << compiled;
  return compiled.ok() ? graph->take_training_step() : nullptr;
}

// Placing the largest buffers first leaves each of a dense block's many small gradient parts a
// search over every hole: at 150 layers those orders look at more ranges than their budget and
// are dropped (runtime/plan.cc, assign_offsets). First fit in time, a sweep over the steps, is
// then the plan, and it must be the plain greedy placement in order of first step, offset for
// offset, over 12k buffers in scattered holes. A 12-layer block keeps all three orders.
TEST(Plan, OrdersWhoseSearchesBlowUpAreDropped) {
  for (const int layers : {12, 150}) {
    SCOPED_TRACE(str_cat(layers, " layers"));
    std::unique_ptr<Graph> step = dense_block_step(layers);
    ASSERT_NE(step, nullptr);
    std::unique_ptr<Plan> plan = plan_for(*step);
    ASSERT_NE(plan, nullptr);
    std::printf("%d layers: %zu buffers, %d orders dropped\n", layers, plan->buffers().size(),
                plan->placement_orders_dropped());
    EXPECT_TRUE(live_buffers_are_disjoint(*plan));
    EXPECT_GE(plan->arena_bytes(ArenaKind::kActivations), live_bytes_bound(*plan));
    if (layers == 12) {
      EXPECT_EQ(plan->placement_orders_dropped(), 0);
      EXPECT_EQ(plan->summary().find("dropped"), std::string::npos) << plan->summary();
      continue;
    }
    EXPECT_EQ(plan->placement_orders_dropped(), 2);
    EXPECT_NE(plan->summary().find("greedy orders dropped over their search budget"),
              std::string::npos)
        << plan->summary();
    const std::vector<int64_t> expected = reference_offsets(plan->buffers(), Order::kFirstStep);
    for (size_t b = 0; b < expected.size(); ++b) {
      if (expected[b] < 0) continue;
      ASSERT_EQ(plan->buffers()[b].offset, expected[b]) << "buffer " << b;
    }
    EXPECT_EQ(plan->arena_bytes(ArenaKind::kActivations), arena_of(plan->buffers(), expected));
  }
}

TEST(Plan, GraphOutputsAndInputsAreNeverOverwritten) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
graph g(%x: f32[64]) {
  %a = Relu(%x) : f32[64]
  %b = Neg(%a) : f32[64]
  %c = Exp(%b) : f32[64]
  return %a, %c
})");
  std::unique_ptr<Plan> plan = plan_for(*graph);
  ASSERT_NE(plan, nullptr);
  const Node* relu = graph->node_list()[0];
  const Node* neg = graph->node_list()[1];
  const Node* exp = graph->node_list()[2];
  // %x is a graph input and %a a graph output: neither may be written in place.
  EXPECT_NE(plan->buffer_of(relu->operand(0)), plan->buffer_of(relu->output(0)));
  EXPECT_NE(plan->buffer_of(neg->operand(0)), plan->buffer_of(neg->output(0)));
  EXPECT_EQ(plan->buffer_of(exp->operand(0)), plan->buffer_of(exp->output(0)));
  EXPECT_TRUE(live_buffers_are_disjoint(*plan));
}

TEST(Plan, MissingKernelNamesNodeOpAndDtype) {
  // An op the registry knows (registered here, for this test) but no backend implements.
  testing::register_passthrough_op("PlanTestNoKernel");
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
graph g(%x: bf16[4]) {
  %y = ampc.PlanTestNoKernel(%x) : bf16[4]
  return %y
})");
  ASSERT_NE(graph, nullptr);
  graph->node_list()[0]->set_name("lonely");
  absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::build(*graph, Device::kCpu);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kUnimplemented);
  for (const char* part : {"lonely", "PlanTestNoKernel", "cpu"}) {
    EXPECT_NE(plan.status().message().find(part), std::string::npos) << plan.status();
  }
}

TEST(Plan, OpWithKernelsOnAnotherDeviceOnlyIsReportedForTheAskedDevice) {
  std::unique_ptr<Graph> graph = testing::parse_or_fail(R"(
graph g(%x: f64[4]) {
  %y = Softmax(%x) : f64[4]
  return %y
})");
  ASSERT_NE(graph, nullptr);
  ASSERT_TRUE(Plan::build(*graph, Device::kCpu).ok());
  // The CUDA backend has no f64 Softmax (and a build without CUDA has no CUDA backend).
  absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::build(*graph, Device::kCuda);
  ASSERT_FALSE(plan.ok());
#if defined(AMPC_HAVE_CUDA)
  const char* expected = "no cuda kernel for op Softmax";
#else
  const char* expected = "built without CUDA";
#endif
  EXPECT_NE(plan.status().message().find(expected), std::string::npos) << plan.status();
}

// The training step of models/<model>.onnx compiled with `kind` at `precision`, or null.
std::unique_ptr<Graph> training_step(const std::string& model, const std::string& precision,
                                     OptimizerOptions::Kind kind) {
  CompileOptions options;
  options.training = TrainingOptions{};
  options.training->optimizer.kind = kind;
  options.training->optimizer.clip_grad_norm = 1.0f;
  if (precision != "fp32") {
    options.mixed_precision = MixedPrecisionOptions{};
    options.mixed_precision->policy.low = precision == "fp16" ? DType::kF16 : DType::kBF16;
  }
  Diagnostics diagnostics;
  absl::StatusOr<std::unique_ptr<Graph>> graph =
      compile_file(testing::source_path("models/" + model + ".onnx"), options, diagnostics);
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? (*graph)->take_training_step() : nullptr;
}

// The example models' training steps: the activation arena against the most bytes live at one
// step, which no placement of the same schedule can go below. The greedy orders reach it on
// the MLP; tiny_gpt's steps stay within a hundredth of it (its fp16 step 64 bytes above, 806,080
// against 806,016), the small CNN's within a tenth.
TEST(Plan, TheExampleTrainingStepsArePlacedAtOrNearTheLiveBytesBound) {
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    for (const std::string precision : {"fp32", "fp16", "bf16"}) {
      std::unique_ptr<Graph> step = training_step(model, precision, OptimizerOptions::Kind::kAdamW);
      ASSERT_NE(step, nullptr);
      std::unique_ptr<Plan> plan = plan_for(*step);
      ASSERT_NE(plan, nullptr);
      const int64_t arena = plan->arena_bytes(ArenaKind::kActivations);
      const int64_t bound = live_bytes_bound(*plan);
      std::printf("%s %s: activation arena %lld, live-bytes bound %lld\n", model.c_str(),
                  precision.c_str(), static_cast<long long>(arena), static_cast<long long>(bound));
      EXPECT_GE(arena, bound);
      if (model == "cnn") {
        EXPECT_LE(arena * 10, bound * 11) << model << " " << precision;
      } else if (model == "tiny_gpt") {
        EXPECT_LE(arena * 100, bound * 101) << model << " " << precision;
      } else {
        EXPECT_EQ(arena, bound) << model << " " << precision;
      }
      EXPECT_TRUE(live_buffers_are_disjoint(*plan));
    }
  }
}

class ModelPlan : public ::testing::TestWithParam<std::string> {
 protected:
  std::map<std::string, Tensor> reference_inputs() {
    absl::StatusOr<std::map<std::string, Tensor>> arrays =
        read_npz(testing::source_path("models/" + GetParam() + ".ref.npz"));
    EXPECT_TRUE(arrays.ok()) << arrays.status();
    std::map<std::string, Tensor> inputs;
    if (!arrays.ok()) return inputs;
    for (auto& [name, tensor] : *arrays) {
      if (!name.starts_with("output.") && !name.starts_with("grad.")) inputs[name] = tensor;
    }
    return inputs;
  }

  std::unique_ptr<InferenceSession> load(SessionOptions options) {
    absl::StatusOr<std::unique_ptr<InferenceSession>> session = InferenceSession::load(
        testing::source_path("models/" + GetParam() + ".onnx"), std::move(options));
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *std::move(session) : nullptr;
  }
};

TEST_P(ModelPlan, ActivationArenaIsSmallerThanAllActivations) {
  std::unique_ptr<InferenceSession> session = load({});
  ASSERT_NE(session, nullptr);
  const Plan& plan = session->plan();
  EXPECT_LT(plan.arena_bytes(ArenaKind::kActivations), plan.unshared_activation_bytes());
  EXPECT_TRUE(live_buffers_are_disjoint(plan));
}

TEST_P(ModelPlan, PoisoningFreedBuffersChangesNoOutputAndRunsRepeat) {
  SessionOptions poisoned;
  poisoned.poison_freed_buffers = true;
  SessionOptions unshared;
  unshared.reuse_memory = false;
  std::unique_ptr<InferenceSession> planned = load(poisoned);
  std::unique_ptr<InferenceSession> unplanned = load(unshared);
  ASSERT_NE(planned, nullptr);
  ASSERT_NE(unplanned, nullptr);
  const std::map<std::string, Tensor> inputs = reference_inputs();
  ASSERT_FALSE(inputs.empty());
  absl::StatusOr<std::map<std::string, Tensor>> first = planned->run(inputs);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::map<std::string, Tensor>> second = planned->run(inputs);
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<std::map<std::string, Tensor>> baseline = unplanned->run(inputs);
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  for (const auto& [name, tensor] : *first) {
    EXPECT_TRUE(tensor == second->at(name)) << name << " differs between two runs";
    EXPECT_TRUE(tensor == baseline->at(name)) << name << " differs from the unshared plan";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelPlan, ::testing::Values("mlp", "cnn", "tiny_gpt"),
                         [](const auto& info) { return info.param; });

// Every node of the three example models' training steps (forward, backward, AdamW or SGD with
// clipping, loss scaling) has a CUDA kernel in each precision, so the whole step plans on CUDA
// (kernels resolve without a GPU).
#if defined(AMPC_HAVE_CUDA)
TEST(Plan, TheExampleModelsTrainingStepsHaveEveryKernelOnCuda) {
  for (const std::string model : {"mlp", "cnn", "tiny_gpt"}) {
    for (const std::string precision : {"fp32", "fp16", "bf16"}) {
      for (const auto kind : {OptimizerOptions::Kind::kAdamW, OptimizerOptions::Kind::kSgd}) {
        std::unique_ptr<Graph> step = training_step(model, precision, kind);
        ASSERT_NE(step, nullptr);
        absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::build(*step, Device::kCuda);
        EXPECT_TRUE(plan.ok()) << model << " " << precision << ": " << plan.status();
      }
    }
  }
}
#endif

}  // namespace
}  // namespace ampc::runtime
