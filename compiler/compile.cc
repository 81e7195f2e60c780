#include "compiler/compile.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>

#include "compiler/onnx_buffer_updates.h"
#include "compiler/stopwatch.h"
#include "compiler/strings.h"
#include "compiler/verifier.h"
#include "passes/fuse_attention.h"
#include "passes/fuse_elementwise.h"
#include "passes/passes.h"

namespace ampc {

namespace {

std::string_view optimizer_name(OptimizerOptions::Kind kind) {
  switch (kind) {
    case OptimizerOptions::Kind::kSgd:
      return "sgd";
    case OptimizerOptions::Kind::kAdam:
      return "adam";
    case OptimizerOptions::Kind::kAdamW:
      return "adamw";
  }
  return "?";
}

// The loss scaling a compile uses: the user's, else dynamic for fp16 mixed precision.
std::optional<LossScaleOptions> effective_loss_scale(const CompileOptions& options) {
  if (!options.training || options.training->loss_scale_off) return std::nullopt;
  if (options.training->loss_scale) return options.training->loss_scale;
  const std::optional<MixedPrecisionOptions>& mixed = options.mixed_precision;
  if (mixed && mixed->policy.low == DType::kF16 && mixed->policy.level != OptLevel::kO0) {
    return LossScaleOptions{};
  }
  return std::nullopt;
}

PassPipeline make_pipeline(const CompileOptions& options) {
  PassPipeline pipeline(options.pipeline);
  add_canonicalize_pipeline(pipeline);
  const std::optional<TrainingOptions>& training = options.training;
  if (training) pipeline.add(make_tie_folded_weights_pass());
  if (training && training->append_loss) {
    pipeline.add(make_append_loss_pass(*training->append_loss));
  }
  if (const std::optional<MixedPrecisionOptions>& mixed = options.mixed_precision) {
    pipeline.add(make_autocast_pass(mixed->policy));
    // Weights that only low nodes read are stored low where nothing needs fp32 master weights:
    // an inference compile, and O3 (whose parameters themselves are low precision).
    pipeline.add(make_insert_casts_pass(!training || mixed->policy.level == OptLevel::kO3));
    pipeline.add(make_eliminate_casts_pass(mixed->allow_excess_precision));
  }
  if (training) {
    pipeline.add(make_training_step_pass());
    // Before autodiff, so that the backward is the fused gradient; after autocast, so that the
    // fused node reads the MatMuls' operands in their precision.
    pipeline.add(on_training_step(make_fuse_attention_pass()));
    pipeline.add(on_training_step(make_safe_softmax_pass()));
    AutodiffOptions autodiff = training->autodiff;
    OptimizerOptions optimizer = training->optimizer;
    if (training->accumulate > 1) {
      pipeline.add(
          on_training_step(make_accumulate_share_pass(training->accumulate, autodiff.loss)));
      autodiff.loss += kShareSuffix;
    }
    if (std::optional<LossScaleOptions> scaling = effective_loss_scale(options)) {
      pipeline.add(on_training_step(make_loss_scale_pass(*scaling, autodiff.loss)));
      autodiff.loss += ".scaled";
      optimizer.loss_scale = scaling;
    }
    pipeline.add(on_training_step(make_autodiff_pass(autodiff)));
    pipeline.add(on_training_step(make_batchnorm_state_pass(training->running_variance)));
    if (training->accumulate > 1) {
      pipeline.add(on_training_step(make_accumulate_pass(training->accumulate)));
    }
    pipeline.add(on_training_step(make_optimizer_pass(optimizer)));
    pipeline.add(on_training_step(make_dce_pass()));
    // Last: it fuses what every pass before it wrote (casts, backward, update arithmetic). The
    // eval graph stays plain ONNX, which is what `ampc train --export` writes.
    pipeline.add(on_training_step(make_fuse_elementwise_pass(
        FuseElementwiseOptions{.recompute = training->recompute_cheap})));
  }
  if (options.mixed_precision) pipeline.add(make_legalize_opset_pass());
  return pipeline;
}

// A disabled pass that what the compile asks for is made of: the model would be written without
// it (no update, no loss scaling, casts decided but not inserted), so it is an error naming the
// flag that needs the pass.
absl::Status check_needed_passes(const CompileOptions& options) {
  std::vector<std::pair<std::string_view, std::string_view>> needed;  // pass, what needs it
  if (options.mixed_precision) {
    needed.insert(needed.end(), {{"autocast", "--precision"}, {"insert-casts", "--precision"}});
  }
  if (options.training) {
    for (std::string_view pass : {"training-step", "autodiff", "batchnorm-state", "optimizer"}) {
      needed.emplace_back(pass, "--optimizer");
    }
    if (options.training->accumulate > 1) {
      needed.insert(needed.end(),
                    {{"accumulate-share", "--accumulate"}, {"accumulate", "--accumulate"}});
    }
    if (effective_loss_scale(options)) {
      needed.emplace_back("loss-scale", options.training->loss_scale
                                            ? "--loss-scale"
                                            : "fp16's dynamic loss scaling");
    }
  }
  for (const auto& [pass, flag] : needed) {
    if (options.pipeline.disabled.contains(pass)) {
      return absl::InvalidArgumentError(str_cat(
          "--disable-pass ", pass, ": ", flag, " needs this pass",
          pass == "loss-scale" ? " (--loss-scale none compiles without loss scaling)" : ""));
    }
  }
  return absl::OkStatus();
}

// The name of `graph`'s only float scalar output when no output is named `loss`, else nullopt.
std::optional<std::string> only_scalar_output(const Graph& graph, const std::string& loss) {
  std::optional<std::string> only;
  for (const Value* output : graph.outputs()) {
    if (output->name() == loss) return std::nullopt;
    if (!is_arithmetic_float(output->dtype()) || output->type().num_elements() != 1 ||
        onnx_io::is_buffer_update_output(graph, output)) {
      continue;
    }
    if (only) return std::nullopt;  // two: which one is the loss is the user's to say
    only = output->name();
  }
  return only;
}

absl::Status check_range(bool ok, std::string_view flag, float value, std::string_view range) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(str_cat(flag, " ", value, " is out of range: ", range));
}

// The names the training step gives what it adds (its inputs and state, runtime/ and the
// checkpoints find them by these names), and `<p>.grad`, autodiff's name for the gradient of
// each initializer `p`. A value of the model's own under one of them would be taken for the
// step's (a parameter left out of training, an `lr` input the runs cannot feed): an
// intermediate value is renamed, a name the model shows (an input, an initializer, an output) is
// an error naming it.
absl::Status reserve_training_names(Graph& graph) {
  static const std::set<std::string, std::less<>> kReserved = {"lr",
                                                               "optimizer.step",
                                                               std::string(kLossScaleName),
                                                               "loss_scale.skipped_steps",
                                                               "loss_scale.growth_tracker",
                                                               "loss_scale.hysteresis_left",
                                                               std::string(kMicroStepState)};
  std::unordered_set<std::string> gradients;
  for (const Value* init : graph.initializers()) gradients.insert(init->name() + ".grad");
  auto reserved = [&](const std::string& name) {
    return kReserved.contains(name) || gradients.contains(name);
  };
  auto refuse = [&](std::string_view what, const std::string& name) {
    const std::string meaning =
        gradients.contains(name)
            ? str_cat("the gradient of initializer '", name.substr(0, name.size() - 5), "'")
            : std::string("its own state or inputs");
    return absl::InvalidArgumentError(
        str_cat(what, " '", name, "' has a name the training step gives ", meaning,
                "; rename it in the model (reserved: ", str_join(kReserved, ", "),
                ", and <initializer>.grad)"));
  };
  for (const Value* input : graph.inputs()) {
    if (reserved(input->name())) return refuse("graph input", input->name());
  }
  for (const Value* init : graph.initializers()) {
    if (reserved(init->name())) return refuse("initializer", init->name());
  }
  for (const Value* output : graph.outputs()) {
    if (reserved(output->name())) return refuse("graph output", output->name());
  }
  for (Node* node : graph.node_list()) {
    for (int i = 0; i < node->num_outputs(); ++i) {
      Value* value = node->has_output(i) ? node->output(i) : nullptr;
      if (value != nullptr && reserved(value->name())) {
        value->set_name(graph.unique_value_name(value->name()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_training_options(const TrainingOptions& options) {
  const OptimizerOptions& o = options.optimizer;
  AMPC_RETURN_IF_ERROR(check_range(options.lr > 0 && std::isfinite(options.lr), "--lr", options.lr,
                                   "it must be a finite number > 0"));
  AMPC_RETURN_IF_ERROR(check_range(o.momentum >= 0 && o.momentum < 1, "--momentum", o.momentum,
                                   "it must be in [0, 1)"));
  AMPC_RETURN_IF_ERROR(check_range(o.dampening >= 0 && o.dampening <= 1, "--dampening", o.dampening,
                                   "it must be in [0, 1]"));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return absl::InvalidArgumentError("--nesterov needs --momentum > 0 and --dampening 0");
  }
  AMPC_RETURN_IF_ERROR(
      check_range(o.beta1 >= 0 && o.beta1 < 1, "--beta1", o.beta1, "it must be in [0, 1)"));
  AMPC_RETURN_IF_ERROR(
      check_range(o.beta2 >= 0 && o.beta2 < 1, "--beta2", o.beta2, "it must be in [0, 1)"));
  AMPC_RETURN_IF_ERROR(check_range(o.epsilon > 0 && std::isfinite(o.epsilon), "--eps", o.epsilon,
                                   "it must be a finite number > 0"));
  AMPC_RETURN_IF_ERROR(check_range(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
                                   "--weight-decay", o.weight_decay, "it must be >= 0"));
  AMPC_RETURN_IF_ERROR(check_range(o.clip_grad_norm >= 0 && std::isfinite(o.clip_grad_norm),
                                   "--clip-grad-norm", o.clip_grad_norm,
                                   "it must be >= 0 (0: no clipping)"));
  AMPC_RETURN_IF_ERROR(
      check_range(options.accumulate >= 1 && options.accumulate <= kMaxAccumulationSteps,
                  "--accumulate", static_cast<float>(options.accumulate),
                  str_cat("it must be in [1, ", kMaxAccumulationSteps, "]")));
  if (const std::optional<LossScaleOptions>& s = options.loss_scale) {
    AMPC_RETURN_IF_ERROR(check_range(s->init > 0 && std::isfinite(s->init), "--scale-init", s->init,
                                     "it must be a finite number > 0"));
    AMPC_RETURN_IF_ERROR(check_range(s->growth_factor > 1 && std::isfinite(s->growth_factor),
                                     "--scale-growth", s->growth_factor, "it must be > 1"));
    AMPC_RETURN_IF_ERROR(check_range(s->backoff_factor > 0 && s->backoff_factor < 1,
                                     "--scale-backoff", s->backoff_factor, "it must be in (0, 1)"));
    AMPC_RETURN_IF_ERROR(check_range(s->growth_interval >= 1, "--scale-growth-interval",
                                     static_cast<float>(s->growth_interval), "it must be >= 1"));
    AMPC_RETURN_IF_ERROR(check_range(s->min_scale > 0 && s->min_scale <= s->init, "--scale-min",
                                     s->min_scale, "it must be in (0, --scale-init]"));
    AMPC_RETURN_IF_ERROR(check_range(s->hysteresis >= 1, "--scale-hysteresis",
                                     static_cast<float>(s->hysteresis), "it must be >= 1"));
  }
  return absl::OkStatus();
}

absl::Status compile_graph(Graph& graph, const CompileOptions& given, Diagnostics& diagnostics) {
  if (given.training) AMPC_RETURN_IF_ERROR(validate_training_options(*given.training));
  AMPC_RETURN_IF_ERROR(check_needed_passes(given));
  CompileOptions options = given;
  if (options.training && !options.training->append_loss && !options.training->loss_named) {
    std::string& loss = options.training->autodiff.loss;
    if (std::optional<std::string> only = only_scalar_output(graph, loss)) {
      diagnostics.warn(str_cat("no graph output is named '", loss, "'; the loss is '", *only,
                               "', the model's only float scalar output (--loss NAME names it)"));
      loss = *only;
    }
  }
  if (options.training) AMPC_RETURN_IF_ERROR(reserve_training_names(graph));
  PassPipeline pipeline = make_pipeline(options);
  PassContext context{&diagnostics};
  AMPC_RETURN_IF_ERROR(pipeline.run(graph, context).status());
  if (options.training) {
    graph.set_metadata(std::string(kMetadataLoss), options.training->autodiff.loss);
    graph.set_metadata(std::string(kMetadataLr), fmt::format("{}", options.training->lr));
    graph.set_metadata(std::string(kMetadataOptimizer),
                       std::string(optimizer_name(options.training->optimizer.kind)));
  }
  return verify(graph);
}

absl::StatusOr<std::unique_ptr<Graph>> compile_file(const std::string& input_path,
                                                    const CompileOptions& options,
                                                    Diagnostics& diagnostics) {
  // Check flags and pass names before the (possibly slow) import, so a typo fails at once.
  if (options.training) AMPC_RETURN_IF_ERROR(validate_training_options(*options.training));
  AMPC_RETURN_IF_ERROR(make_pipeline(options).validate_options());
  AMPC_RETURN_IF_ERROR(check_needed_passes(options));
  const Stopwatch import_time;
  ImportOptions import = options.import;
  import.buffer_updates = options.training.has_value();
  AMPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, import_onnx_file(input_path, import));
  if (options.pipeline.timings) {
    options.pipeline.timings->push_back({"import", import_time.seconds(), 0, graph->num_nodes()});
  }
  if (graph->training_step() != nullptr) {
    return absl::InvalidArgumentError(
        str_cat(input_path, " is already a compiled training model; compile the original model"));
  }
  AMPC_RETURN_IF_ERROR(compile_graph(*graph, options, diagnostics));
  return graph;
}

std::vector<std::string> compile_pass_names(bool training) {
  CompileOptions options;
  if (training) {
    options.training = TrainingOptions{};
    options.training->append_loss = LossOptions{};
    options.training->accumulate = 2;
  }
  options.mixed_precision = MixedPrecisionOptions{};
  return make_pipeline(options).pass_names();
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

absl::Status parse_dim_flag(const std::string& flag_value,
                            std::map<std::string, int64_t, std::less<>>& dims) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        str_cat("--dim '", flag_value, "': ", why, " (expected NAME=SIZE, e.g. batch=32)"));
  };
  const size_t eq = flag_value.rfind('=');
  if (eq == std::string::npos || eq == 0) return bad("missing dim name");
  const std::string name = flag_value.substr(0, eq);
  const std::string_view text = std::string_view(flag_value).substr(eq + 1);
  int64_t size = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || size < 0) {
    return bad(str_cat("'", text, "' is not a size"));
  }
  if (!dims.emplace(name, size).second) return bad(str_cat("dim '", name, "' given twice"));
  return absl::OkStatus();
}

}  // namespace ampc
