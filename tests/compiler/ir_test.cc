// The IR's own behaviour: use lists, replace_all_uses_with, node order, clone.
#include "compiler/ir.h"

#include "compiler/op_def.h"
#include "compiler/verifier.h"
#include "gtest/gtest.h"

namespace ampc {
namespace {

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }

// x -> Relu -> Tanh, returning the graph and its two nodes.
struct Chain {
  Graph graph{"chain"};
  Value* x = nullptr;
  Node* relu = nullptr;
  Node* tanh = nullptr;
  Chain() {
    x = graph.add_input("x", f32({4}));
    relu = graph.create_node("", "Relu", {x}, {f32({4})});
    relu->output(0)->set_name("r");
    tanh = graph.create_node("", "Tanh", {relu->output(0)}, {f32({4})});
    tanh->output(0)->set_name("t");
    graph.add_output(tanh->output(0));
  }
};

TEST(Ir, CreateNodeRecordsUsesAndProducer) {
  Chain c;
  ASSERT_EQ(c.x->uses().size(), 1u);
  EXPECT_EQ(c.x->uses()[0], (Use{c.relu, 0}));
  EXPECT_EQ(c.relu->output(0)->producer(), c.relu);
  EXPECT_EQ(c.relu->output(0)->producer_output(), 0);
  EXPECT_NE(c.relu->def(), nullptr);
  EXPECT_TRUE(c.tanh->output(0)->is_graph_output());
  EXPECT_TRUE(verify(c.graph).ok()) << verify(c.graph);
}

TEST(Ir, SetOperandMovesTheUse) {
  Chain c;
  c.tanh->set_operand(0, c.x);
  EXPECT_TRUE(c.relu->output(0)->uses().empty());
  ASSERT_EQ(c.x->uses().size(), 2u);
  EXPECT_EQ(c.x->uses()[1], (Use{c.tanh, 0}));
  c.tanh->set_operand(0, nullptr);
  EXPECT_EQ(c.x->uses().size(), 1u);
}

TEST(Ir, SameValueTwiceGivesTwoUses) {
  Graph g;
  Value* x = g.add_input("x", f32({3}));
  Node* add = g.create_node("", "Relu", {x}, {f32({3})});
  add->append_operand(x);
  ASSERT_EQ(x->uses().size(), 2u);
  add->truncate_operands(1);
  EXPECT_EQ(x->uses().size(), 1u);
  EXPECT_EQ(add->num_operands(), 1);
}

TEST(Ir, ReplaceAllUsesWithRewiresOperandsAndGraphOutputs) {
  Chain c;
  Node* sigmoid = c.graph.create_node("", "Sigmoid", {c.x}, {f32({4})});
  c.graph.move_node(sigmoid, c.relu);
  c.tanh->output(0)->replace_all_uses_with(sigmoid->output(0));
  EXPECT_EQ(c.graph.outputs()[0], sigmoid->output(0));
  // The graph's interface keeps its output name.
  EXPECT_EQ(sigmoid->output(0)->name(), "t");
  c.relu->output(0)->replace_all_uses_with(c.x);
  EXPECT_EQ(c.tanh->operand(0), c.x);
  c.graph.erase_node(c.tanh);
  c.graph.erase_node(c.relu);
  EXPECT_EQ(c.graph.num_nodes(), 1);
  EXPECT_TRUE(verify(c.graph).ok()) << verify(c.graph);
}

TEST(Ir, UnknownOpHasNoDef) {
  Graph g;
  Value* x = g.add_input("x", f32({1}));
  Node* n = g.create_node("", "NoSuchOp", {x}, {f32({1})});
  EXPECT_EQ(n->def(), nullptr);
}

TEST(Ir, AttributeDefaultsComeFromTheOpDef) {
  Graph g;
  Value* x = g.add_input("x", f32({2}));
  Node* leaky = g.create_node("", "LeakyRelu", {x}, {f32({2})});
  EXPECT_FLOAT_EQ(leaky->float_attr("alpha"), 0.01f);
  leaky->mutable_attrs()["alpha"] = 0.5f;
  EXPECT_FLOAT_EQ(leaky->float_attr("alpha"), 0.5f);
}

TEST(Ir, CloneIsDeepAndEqual) {
  Chain c;
  c.graph.add_initializer("w", Tensor::from_f32({2}, {1.5f, -2.0f}));
  c.relu->set_name("relu0");
  c.relu->mutable_precision() = {DType::kF16, DType::kF32, "follows %x"};
  std::unique_ptr<Graph> copy = c.graph.clone();
  ASSERT_EQ(copy->num_nodes(), 2);
  Node* relu = copy->node_list()[0];
  EXPECT_EQ(relu->name(), "relu0");
  EXPECT_EQ(relu->precision(), c.relu->precision());
  EXPECT_NE(relu, c.relu);
  EXPECT_EQ(relu->operand(0), copy->inputs()[0]);
  EXPECT_EQ(copy->outputs()[0]->name(), "t");
  EXPECT_EQ(*copy->initializers()[0]->initializer(), *c.graph.initializers()[0]->initializer());
  EXPECT_TRUE(verify(*copy).ok()) << verify(*copy);
}

TEST(Ir, UniqueValueNameAvoidsTakenNames) {
  Chain c;
  EXPECT_EQ(c.graph.unique_value_name("y"), "y");
  EXPECT_EQ(c.graph.unique_value_name("r"), "r.1");
}

// The graph keeps its names as values take, change and drop them (no scan of the graph per
// call); the answer is always the smallest free suffix.
TEST(Ir, UniqueValueNameFollowsRenamesErasuresAndFreedSuffixes) {
  Chain c;  // x, r, t
  Node* a = c.graph.create_node("", "Relu", {c.x}, {f32({4})});
  a->output(0)->set_name(c.graph.unique_value_name("r"));
  Node* b = c.graph.create_node("", "Relu", {c.x}, {f32({4})});
  b->output(0)->set_name(c.graph.unique_value_name("r"));
  EXPECT_EQ(a->output(0)->name(), "r.1");
  EXPECT_EQ(b->output(0)->name(), "r.2");
  EXPECT_EQ(c.graph.unique_value_name("r"), "r.3");
  EXPECT_EQ(c.graph.unique_value_name("r"), "r.3");  // asking does not take the name

  b->output(0)->set_name("q");  // r.2 is free again, and q taken
  EXPECT_EQ(c.graph.unique_value_name("r"), "r.2");
  EXPECT_EQ(c.graph.unique_value_name("q"), "q.1");
  c.graph.erase_node(a);  // frees r.1
  EXPECT_EQ(c.graph.unique_value_name("r"), "r.1");
  EXPECT_EQ(c.graph.unique_value_name("r.1"), "r.1");

  // Names are labels: two values may share one, and it is free only when both drop it.
  Value* w = c.graph.add_initializer("q", Tensor::from_f32({1}, {0.5f}));
  b->output(0)->set_name("s");
  EXPECT_EQ(c.graph.unique_value_name("q"), "q.1");
  c.graph.erase_graph_value(w);
  EXPECT_EQ(c.graph.unique_value_name("q"), "q");

  // An empty hint is "t", which the chain's output holds.
  EXPECT_EQ(c.graph.unique_value_name(""), "t.1");
  // A graph output replaced by an unnamed node output hands it its name.
  Node* tanh2 = c.graph.create_node("", "Tanh", {c.relu->output(0)}, {f32({4})});
  c.tanh->output(0)->replace_all_uses_with(tanh2->output(0));
  c.graph.erase_node(c.tanh);
  EXPECT_EQ(tanh2->output(0)->name(), "t");
  EXPECT_EQ(c.graph.unique_value_name("t"), "t.1");
  EXPECT_TRUE(verify(c.graph).ok()) << verify(c.graph);
}

TEST(Ir, AValueStaysAGraphOutputWhileAnyOutputEntryIsIt) {
  Chain c;
  Value* r = c.relu->output(0);
  EXPECT_FALSE(r->is_graph_output());
  c.graph.add_output(r);
  c.graph.add_output(r);
  EXPECT_TRUE(r->is_graph_output());
  c.graph.erase_output(1);
  EXPECT_TRUE(r->is_graph_output());
  c.graph.set_output(1, c.x);
  EXPECT_FALSE(r->is_graph_output());
  EXPECT_TRUE(c.x->is_graph_output());
  EXPECT_TRUE(c.tanh->output(0)->is_graph_output());
}

}  // namespace
}  // namespace ampc
