// loss-scale: the first half of loss scaling (the optimizer pass does the second).
//
// Rewrites: adds the initializer `loss_scale` (f32 scalar, the initial scale) and the graph
//   output `<loss>.scaled` = ampc.ScaleLoss(loss, loss_scale). Autodiff differentiates that
//   output, so every gradient is `scale` times the true one (the seed is the scale): gradients
//   below fp16's smallest subnormal (6e-8) survive. The loss output itself is unchanged.
// Assumes: the loss is a float scalar output; runs before autodiff, on the training step.
#include "compiler/strings.h"
#include "passes/passes.h"

namespace ampc {
namespace {

class LossScalePass final : public Pass {
 public:
  LossScalePass(LossScaleOptions options, std::string loss)
      : options_(options), loss_(std::move(loss)) {}
  std::string_view name() const override { return "loss-scale"; }

  absl::StatusOr<bool> run(Graph& graph, const PassContext& /*context*/) override {
    Value* loss = nullptr;
    for (Value* output : graph.outputs()) {
      if (output->name() == loss_) loss = output;
    }
    if (loss == nullptr || loss->type().num_elements() != 1 ||
        (loss->dtype() != DType::kF32 && loss->dtype() != DType::kF64)) {
      return absl::InvalidArgumentError(
          str_cat("loss scaling needs an f32 scalar loss output '", loss_, "'"));
    }
    for (const Value* init : graph.initializers()) {
      if (init->name() == kLossScaleName) {
        return absl::FailedPreconditionError("the graph has a loss scale already");
      }
    }
    Value* scale = graph.add_initializer(std::string(kLossScaleName),
                                         Tensor::from_doubles(loss->dtype(), {}, {options_.init}));
    // A static scale never changes: a constant of the program.
    scale->set_constant(options_.mode == LossScaleOptions::Mode::kStatic);
    if (!graph.opset_imports().contains(kAmpcDomain)) graph.set_opset(std::string(kAmpcDomain), 1);
    Node* node = graph.create_node(kAmpcDomain, "ScaleLoss", {loss, scale}, {loss->type()});
    node->set_name("loss_scale/ScaleLoss");
    node->output(0)->set_name(graph.unique_value_name(str_cat(loss_, ".scaled")));
    graph.add_output(node->output(0));
    describe_undecided_nodes(graph, "loss scaling (fp32)");
    return true;
  }

 private:
  LossScaleOptions options_;
  std::string loss_;
};

}  // namespace

std::unique_ptr<Pass> make_loss_scale_pass(LossScaleOptions options, std::string loss) {
  return std::make_unique<LossScalePass>(options, std::move(loss));
}

}  // namespace ampc
