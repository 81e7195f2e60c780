// GradBuilder: what a gradient rule sees of its forward node, and how it adds backward nodes.
//
// A rule (OpDef::gradient) returns one value per forward input: the gradient of the loss with
// respect to that input, or null where the input gets none (indices, shapes, masks). It may
// return a gradient shaped like the forward *output* for an input that was broadcast into it:
// the autodiff walker reduces it back to the input's shape, once, for every op. The walker also
// sums the gradients of a value read by several nodes. Rules are written in a small vocabulary:
//
//   // d/dx relu(x) = dy where y > 0. Reads the forward output, so x need not be kept alive.
//   absl::StatusOr<Grads> relu_grad(GradBuilder& b) {
//     return Grads{b.ampc_op("ReluGrad", {b.grad_of_output(0), b.output(0)})};
//   }
//
// Nodes a rule adds get their output types from their OpDef's inference. A rule that builds an
// ill-typed node is a bug in the rule; the builder records the first such error (and hands back
// a placeholder value so the rule can finish), and the walker reports it naming the forward node.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ampc/status.h"
#include "ampc/tensor.h"
#include "compiler/ir.h"
#include "compiler/shape_inference.h"

namespace ampc {

using Grads = std::vector<Value*>;

class GradBuilder {
 public:
  // `output_grads[i]` is the gradient flowing into forward output i (null: none flows).
  // `needs_grad[i]` says whether the walker wants input i's gradient.
  GradBuilder(Graph& graph, const Node& forward, std::vector<Value*> output_grads,
              std::vector<bool> needs_grad);

  const Node& node() const { return forward_; }
  Value* input(int i) const { return forward_.operand(i); }
  bool has_input(int i) const { return forward_.has_operand(i); }
  Value* output(int i) const { return forward_.output(i); }
  // The gradient of the loss with respect to forward output i, or null when none flows into it.
  Value* grad_of_output(int i) const;
  // The same, but zeros shaped like the output when none flows into it (multi-output ops).
  Value* grad_of_output_or_zeros(int i);
  // Whether the walker wants the gradient of forward input i (a rule may skip the others).
  bool needs_grad(int i) const;

  // Adds a node of the standard domain (op) or of the ampc domain (ampc_op) after everything
  // built so far, and returns its output 0 (op_n: its first `num_outputs` outputs).
  Value* op(std::string_view op_type, const std::vector<Value*>& operands, Attributes attrs = {});
  Value* ampc_op(std::string_view op_type, const std::vector<Value*>& operands,
                 Attributes attrs = {});
  std::vector<Value*> op_n(std::string_view domain, std::string_view op_type,
                           const std::vector<Value*>& operands, int num_outputs,
                           Attributes attrs = {});

  // New initializers: a tensor, a scalar of `dtype`, a 1-D int64 list (axes, shapes).
  Value* constant(Tensor value);
  Value* scalar(double value, DType dtype);
  Value* int64s(const std::vector<int64_t>& values);

  // Sums `grad` (shaped like a broadcast of `shape`) back to `shape`: ReduceSum over the axes
  // broadcasting added or stretched, then Reshape. Returns `grad` when the shapes already agree.
  Value* reduce_to_shape(Value* grad, const Shape& shape);

  // The first error a node built by the rule met, or OK.
  const absl::Status& status() const { return status_; }

 private:
  std::string value_name(std::string_view op_type) const;

  Graph& graph_;
  const Node& forward_;
  std::vector<Value*> output_grads_;
  std::vector<bool> needs_grad_;
  TypePropagator types_;
  absl::Status status_;
};

}  // namespace ampc
