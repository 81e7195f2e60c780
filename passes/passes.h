// Factories for the passes in passes/, and the standard pipelines built from them.
//
// Each pass lives in its own file (passes/<name>.cc) as a small class deriving from Pass; only
// its factory is public, so a pipeline (or a test) names passes without seeing their classes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/pass.h"
#include "compiler/precision_policy.h"

namespace ampc {

// "fold-constants": nodes whose operands are all compile-time constants become initializers.
std::unique_ptr<Pass> make_fold_constants_pass();
// "canonicalize": Identity removal, AttrAsInput inputs moved into attributes, trailing omitted
// operands dropped.
std::unique_ptr<Pass> make_canonicalize_pass();
// "dce": nodes and initializers nothing reads.
std::unique_ptr<Pass> make_dce_pass();
// "infer-shapes": re-infers every node's output types.
std::unique_ptr<Pass> make_infer_shapes_pass();

// "autocast": a precision decision on every node (compute and accumulate dtype, and why) under
// `policy`; nothing else changes. See passes/autocast.cc and docs/precision-policy.md.
std::unique_ptr<Pass> make_autocast_pass(PrecisionPolicy policy);

// Gives every node that has float data but no decision the compute dtype of its first float
// output (of its first float operand where no output is float: IsNaN) and `reason` (the nodes
// the optimizer and loss-scale passes add), when the graph was compiled with mixed precision
// (some node has a decision); otherwise does nothing.
void describe_undecided_nodes(Graph& graph, std::string_view reason);
// The same for `nodes` alone.
void describe_nodes(Graph& graph, const std::vector<Node*>& nodes, std::string_view reason);
// Whether `node`'s kernels accumulate in fp32 when it computes in f16 or bf16 (sums, means,
// statistics, the backward's sums and adding scatters): what its precision decision records.
bool accumulates_in_fp32(const Node& node);

// "insert-casts": one Cast per (value, dtype) so every node reads its operands in the dtype
// autocast decided; graph outputs keep their dtypes. With `low_precision_weights` (inference
// compiles and O3: no fp32 master weights), initializers only low nodes read are stored low
// instead of cast. See passes/insert_casts.cc.
std::unique_ptr<Pass> make_insert_casts_pass(bool low_precision_weights = false);
// "eliminate-casts": no-op casts, duplicates and value-preserving chains removed, to a fixed
// point; value-changing round trips only with `allow_excess_precision`.
std::unique_ptr<Pass> make_eliminate_casts_pass(bool allow_excess_precision = false);

// legalize-opset: raises the graph's (and its training step's) opset to the lowest where every
// node's f16/bf16 operands are legal ONNX (bf16 Conv and pooling: 22), when ampc defines every
// op of the graph there (passes/legalize_opset.cc).
std::unique_ptr<Pass> make_legalize_opset_pass();

struct AutodiffOptions {
  // The graph output to differentiate: a float scalar.
  std::string loss = "loss";
  // Regexes over value names (std::regex ECMAScript, matched anywhere in the name): when
  // `trainable` is set only matching values are trainable; values matching `freeze` are not.
  std::string trainable;
  std::string freeze;
  // Also differentiate with respect to float graph inputs (the gradient checks use this).
  bool include_graph_inputs = false;
};
// "autodiff": appends the backward graph; every trainable value `p` gets a graph output
// `p.grad`. See passes/autodiff.cc.
std::unique_ptr<Pass> make_autodiff_pass(AutodiffOptions options = {});

// Loss scaling for fp16 training (PyTorch's GradScaler).
struct LossScaleOptions {
  enum class Mode { kDynamic, kStatic };
  Mode mode = Mode::kDynamic;
  float init = 65536.0f;  // the first scale (the only one, static)
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  // The backoff stops here, and an overflow at it stops ampc train: the smallest normal f32 by
  // default, so the scale never reaches 0 (PyTorch's has no bound; no realistic run gets near
  // this one).
  float min_scale = 0x1p-126f;
  // Overflows in a row before a backoff (1: every overflow, as PyTorch; > 1 as Megatron-LM).
  int64_t hysteresis = 1;
};
// Autodiff names the gradient of a trainable value `p` as the graph output `p` + kGradSuffix,
// which the accumulate and optimizer passes look for; the accumulate pass keeps its running sum
// in the state `p` + kGradSuffix + kSumSuffix.
inline constexpr std::string_view kGradSuffix = ".grad";
inline constexpr std::string_view kSumSuffix = "_sum";
// Autodiff seeds the backward with the constant initializer `loss` + kGradSeedSuffix (1), which
// the data-parallel rewrite scales by 1 / ranks.
inline constexpr std::string_view kGradSeedSuffix = ".grad_seed";
// The state the loss-scale pass adds and the optimizer pass updates.
inline constexpr std::string_view kLossScaleName = "loss_scale";
// Gradient accumulation: the constant K, the state counting the runs of the current window, and
// the bool output that is true on the window's last run.
inline constexpr std::string_view kAccumulationStepsName = "accumulate.steps";
inline constexpr std::string_view kMicroStepState = "accumulate.micro_step";
inline constexpr std::string_view kWindowEndName = "accumulate.window_end";
// The largest K: more micro-batches per step than any batch-size schedule needs.
inline constexpr int64_t kMaxAccumulationSteps = 65536;
// "accumulate": K > 1 turns each gradient output into its f32 running sum over K runs of the
// step, with a micro-step counter and the output `accumulate.window_end`, which the optimizer
// pass then uses (updates only at the window's end). See passes/accumulate.cc.
std::unique_ptr<Pass> make_accumulate_pass(int64_t steps);
// "accumulate-share": the output `<loss>` + kShareSuffix = loss / K, which loss scaling and
// autodiff then take as the loss, so the accumulated sums are the window's mean gradient.
inline constexpr std::string_view kShareSuffix = ".share";
std::unique_ptr<Pass> make_accumulate_share_pass(int64_t steps, std::string loss);
// "loss-scale": adds the scale (initializer `loss_scale`) and the output `<loss>.scaled` =
// ampc.ScaleLoss(loss, loss_scale), which autodiff then differentiates, so the backward pass is
// seeded with the scale. See passes/loss_scale.cc.
std::unique_ptr<Pass> make_loss_scale_pass(LossScaleOptions options, std::string loss);

struct OptimizerOptions {
  enum class Kind { kSgd, kAdam, kAdamW };
  Kind kind = Kind::kSgd;
  // SGD (PyTorch's torch.optim.SGD).
  float momentum = 0;
  float dampening = 0;
  bool nesterov = false;
  // Adam and AdamW (torch.optim.Adam / AdamW).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  // L2 penalty for SGD and Adam, decoupled decay for AdamW.
  float weight_decay = 0;
  // Clip gradients by their global norm when > 0.
  float clip_grad_norm = 0;
  // With loss scaling (the loss-scale pass ran): gradients are unscaled, a non-finite global
  // norm skips the whole update, and a dynamic scale is updated.
  std::optional<LossScaleOptions> loss_scale;
};
// "optimizer": the update of every parameter autodiff differentiated, with the optimizer state
// as initializers and Graph::state_updates saying what replaces what. See passes/optimizer.cc.
std::unique_ptr<Pass> make_optimizer_pass(OptimizerOptions options = {});

struct LossOptions {
  enum class Kind { kCrossEntropy, kMse };
  Kind kind = Kind::kCrossEntropy;
  // The graph output the loss reads; empty: the graph's only output.
  std::string prediction;
  // The labels' graph input (created when the graph has none of that name): class indices
  // [N, d...] for cross-entropy, the prediction's type for mse.
  std::string label_input;
  // The loss output's name.
  std::string loss_name = "loss";
};
// "append-loss": the loss node for a model that outputs a prediction. See passes/training_step.cc.
std::unique_ptr<Pass> make_append_loss_pass(LossOptions options);

// "safe-softmax" (on the training step, before autodiff): Where(IsNaN(p), 0, p) over p =
// Softmax(x), PyTorch's exported safe softmax, keeps rows of x that are all -inf out of the
// Softmax, so that their gradient is 0 rather than NaN; the forward is unchanged.
std::unique_ptr<Pass> make_safe_softmax_pass();

// "training-step": the graph's clone becomes its training step (Graph::training_step); the graph
// itself goes to eval mode (BatchNormalization on running statistics, Dropout removed).
std::unique_ptr<Pass> make_training_step_pass();

// "tie-folded-weights" (training compiles): an initializer that is exactly another's transpose,
// as an exporter's constant folding writes a tied or transposed weight, reads Transpose(that
// one), so the two train as one. See passes/tie_folded_weights.cc.
std::unique_ptr<Pass> make_tie_folded_weights_pass();

// How the running variance of a training-mode BatchNormalization moves: from the unbiased batch
// variance (PyTorch) or the biased one (the ONNX operator's definition).
enum class RunningVariance { kUnbiased, kBiased };
// "batchnorm-state": BatchNormalization running statistics become state of the training step.
std::unique_ptr<Pass> make_batchnorm_state_pass(RunningVariance variance);

// Runs `pass` on the graph's training step (which training-step made) instead of the graph.
std::unique_ptr<Pass> on_training_step(std::unique_ptr<Pass> pass);

// The `ampc compile` pipeline: the fixed-point group "canonicalize" of [fold-constants,
// canonicalize, dce], then infer-shapes.
void add_canonicalize_pipeline(PassPipeline& pipeline);

}  // namespace ampc
