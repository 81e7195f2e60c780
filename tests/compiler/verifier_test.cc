// Each invariant the verifier guards, broken once on purpose, gives a precise Status.
#include "compiler/verifier.h"

#include "compiler/ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ampc {

// Reaches into the IR to corrupt it the ways the public API never does.
struct IrTestAccess {
  static std::vector<Use>& uses(Value* v) { return v->uses_; }
  static void set_producer(Value* v, Node* n) { v->producer_ = n; }
  static std::vector<Value*>& operands(Node* n) { return n->operands_; }
};

namespace {

using ::testing::HasSubstr;

TensorType f32(Shape shape) { return TensorType{DType::kF32, std::move(shape)}; }

struct Chain {
  Graph graph{"chain"};
  Value* x = nullptr;
  Node* relu = nullptr;
  Node* tanh = nullptr;
  Chain() {
    x = graph.add_input("x", f32({4}));
    relu = graph.create_node("", "Relu", {x}, {f32({4})});
    relu->set_name("relu");
    relu->output(0)->set_name("r");
    tanh = graph.create_node("", "Tanh", {relu->output(0)}, {f32({4})});
    tanh->set_name("tanh");
    tanh->output(0)->set_name("t");
    graph.add_output(tanh->output(0));
  }
};

std::string message(const absl::Status& status) { return std::string(status.message()); }

TEST(Verifier, AcceptsAWellFormedGraph) {
  Chain c;
  EXPECT_TRUE(verify(c.graph).ok());
}

TEST(Verifier, RejectsUseBeforeDefinition) {
  Chain c;
  c.graph.move_node(c.tanh, c.relu);
  const absl::Status status = verify(c.graph);
  EXPECT_THAT(message(status), HasSubstr("node 'tanh' (Tanh) operand 0 reads value 'r' before "
                                         "it is defined"));
}

TEST(Verifier, RejectsAUseListMissingAnEdge) {
  Chain c;
  IrTestAccess::uses(c.x).clear();
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("node 'relu' (Relu) operand 0 reads value 'x', whose use list does not "
                        "record that read"));
  IrTestAccess::uses(c.x).push_back(Use{c.relu, 0});  // restore before destruction
}

TEST(Verifier, RejectsAUseWithoutAnEdge) {
  Chain c;
  IrTestAccess::uses(c.x).push_back(Use{c.tanh, 0});
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("value 'x' lists a use by operand 0 of node 'tanh' (Tanh) that does not "
                        "read it"));
}

TEST(Verifier, RejectsAUseListedTwice) {
  Chain c;
  IrTestAccess::uses(c.x).push_back(Use{c.relu, 0});
  EXPECT_THAT(message(verify(c.graph)), HasSubstr("value 'x' lists operand 0 of node 'relu' "
                                                  "(Relu) twice"));
}

TEST(Verifier, RejectsAWrongProducer) {
  Chain c;
  IrTestAccess::set_producer(c.tanh->output(0), c.relu);
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("node 'tanh' (Tanh) output 0 value 't' does not name this node as its "
                        "producer"));
}

TEST(Verifier, RejectsAnOutputTypeThatDisagreesWithInference) {
  Chain c;
  c.relu->output(0)->set_type(f32({5}));
  const std::string text = message(verify(c.graph));
  EXPECT_THAT(text, HasSubstr("node 'relu' (Relu) output 0 value 'r' has type f32[5] but its "
                              "op infers f32[4]"));
}

TEST(Verifier, RejectsAnOperandOfTheWrongDtype) {
  Graph g;
  Value* x = g.add_input("x", TensorType{DType::kI64, {4}});
  Node* relu = g.create_node("", "Sigmoid", {x}, {TensorType{DType::kI64, {4}}});
  relu->set_name("s");
  EXPECT_THAT(message(verify(g)), HasSubstr("node 's' (Sigmoid): input 0 ('X') has element type "
                                            "i64, which Sigmoid does not accept"));
}

TEST(Verifier, RejectsAnUnknownOp) {
  Graph g;
  Value* x = g.add_input("x", f32({1}));
  Node* n = g.create_node("", "NoSuchOp", {x}, {f32({1})});
  n->set_name("mystery");
  EXPECT_THAT(message(verify(g)), HasSubstr("node 'mystery' (NoSuchOp): op is not supported"));
}

TEST(Verifier, RejectsAWrongNumberOfOperands) {
  Chain c;
  c.relu->append_operand(c.x);
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("node 'relu' (Relu): has 2 inputs; Relu takes 1"));
}

TEST(Verifier, RejectsAGraphOutputFromAnotherGraph) {
  Chain c;
  Graph other;
  Value* foreign = other.add_input("foreign", f32({1}));
  c.graph.add_output(foreign);
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("graph output value 'foreign' is not defined in the graph"));
}

TEST(Verifier, RejectsAnOperandFromAnotherGraph) {
  Chain c;
  Graph other;
  Value* foreign = other.add_input("foreign", f32({4}));
  // Rewire the edge by hand, keeping both use lists consistent with it.
  IrTestAccess::operands(c.tanh)[0] = foreign;
  IrTestAccess::uses(c.relu->output(0)).clear();
  IrTestAccess::uses(foreign).push_back(Use{c.tanh, 0});
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("node 'tanh' (Tanh) operand 0 reads value 'foreign' of another graph"));
  // Restore before destruction.
  IrTestAccess::operands(c.tanh)[0] = c.relu->output(0);
  IrTestAccess::uses(foreign).clear();
  IrTestAccess::uses(c.relu->output(0)).push_back(Use{c.tanh, 0});
}

TEST(Verifier, RejectsInitializerDataOfAnotherType) {
  Chain c;
  Value* w = c.graph.add_initializer("w", Tensor::from_f32({2}, {1.0f, 2.0f}));
  w->set_type(f32({3}));
  EXPECT_THAT(message(verify(c.graph)),
              HasSubstr("initializer value 'w' is declared f32[3] but holds data of type f32[2]"));
}

}  // namespace
}  // namespace ampc
