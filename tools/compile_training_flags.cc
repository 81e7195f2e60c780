// The training flags of `ampc compile` (tools/compile_training_flags.h).
#include "tools/compile_training_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>

#include "CLI/CLI.hpp"
#include "compiler/strings.h"

namespace ampc {
namespace {

// The training flags that do nothing with this optimizer and loss scaling.
absl::Status check_training_flags_have_effect(const CompileFlags& flags) {
  if (flags.optimizer == "sgd") {
    AMPC_RETURN_IF_ERROR(refuse_flags_without_effect(flags, {"--beta1", "--beta2", "--eps"},
                                                     "with --optimizer sgd (they are Adam's)"));
  } else {
    AMPC_RETURN_IF_ERROR(refuse_flags_without_effect(
        flags, {"--momentum", "--dampening", "--nesterov"},
        str_cat("with --optimizer ", flags.optimizer, " (they are SGD's)")));
  }
  if (flags.loss_scale == "none") {
    return refuse_flags_without_effect(flags, kScaleFlags, "with --loss-scale none");
  }
  if (flags.loss_scale.starts_with("static:")) {
    return refuse_flags_without_effect(flags, kScaleFlags,
                                       "with --loss-scale static:S (the scale stays S)");
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string_view> kScaleFlags = {"--scale-init",    "--scale-growth",
                                                   "--scale-backoff", "--scale-growth-interval",
                                                   "--scale-min",     "--scale-hysteresis"};

// Fails naming the given flags among `names` that `reason` makes do nothing.
absl::Status refuse_flags_without_effect(const CompileFlags& flags,
                                         const std::vector<std::string_view>& names,
                                         std::string_view reason) {
  std::vector<std::string_view> given;
  for (std::string_view name : names) {
    if (flags.training_flags_given.contains(std::string(name))) given.push_back(name);
  }
  if (given.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      str_cat(str_join(given, ", "), given.size() == 1 ? " does" : " do", " nothing ", reason));
}

absl::StatusOr<std::optional<TrainingOptions>> training_options(const CompileFlags& flags) {
  if (flags.optimizer.empty()) {
    if (!flags.training_flags_given.empty()) {
      return absl::InvalidArgumentError(
          str_cat(str_join(flags.training_flags_given, ", "),
                  flags.training_flags_given.size() == 1 ? " belongs" : " belong",
                  " to a training compile; add --optimizer sgd|adam|adamw"));
    }
    return std::nullopt;
  }
  AMPC_RETURN_IF_ERROR(check_training_flags_have_effect(flags));
  TrainingOptions options;
  options.lr = flags.lr;
  OptimizerOptions& o = options.optimizer;
  o.kind = flags.optimizer == "sgd"    ? OptimizerOptions::Kind::kSgd
           : flags.optimizer == "adam" ? OptimizerOptions::Kind::kAdam
                                       : OptimizerOptions::Kind::kAdamW;
  o.momentum = flags.momentum;
  o.dampening = flags.dampening;
  o.nesterov = flags.nesterov;
  o.beta1 = flags.beta1;
  o.beta2 = flags.beta2;
  o.epsilon = flags.eps;
  o.weight_decay = flags.weight_decay;
  o.clip_grad_norm = flags.clip_grad_norm;
  options.accumulate = flags.accumulate;
  options.autodiff.trainable = flags.trainable;
  options.autodiff.freeze = flags.freeze;
  options.running_variance =
      flags.running_var == "biased" ? RunningVariance::kBiased : RunningVariance::kUnbiased;
  options.recompute_cheap = flags.recompute == "cheap";
  if (options.recompute_cheap && std::find(flags.disabled.begin(), flags.disabled.end(),
                                           "fuse-elementwise") != flags.disabled.end()) {
    return absl::InvalidArgumentError(
        "--recompute cheap does nothing with --disable-pass fuse-elementwise (the fused kernels "
        "are what recompute)");
  }
  if (flags.loss == "cross-entropy" || flags.loss == "mse") {
    if (flags.label_input.empty()) {
      return absl::InvalidArgumentError(
          str_cat("--loss ", flags.loss, " appends a loss and needs --label-input NAME"));
    }
    LossOptions loss;
    loss.kind = flags.loss == "mse" ? LossOptions::Kind::kMse : LossOptions::Kind::kCrossEntropy;
    loss.prediction = flags.logits;
    loss.label_input = flags.label_input;
    options.append_loss = loss;
  } else if (!flags.label_input.empty() || !flags.logits.empty()) {
    return absl::InvalidArgumentError(
        "--label-input and --logits go with --loss cross-entropy or --loss mse");
  } else if (!flags.loss.empty()) {
    options.autodiff.loss = flags.loss;
  } else {
    options.loss_named = false;
  }
  // --scale-* flags without --loss-scale shape the dynamic scaling fp16 gets by default
  // (run_compile refuses them where the compile has none).
  const bool scale_flags_given =
      std::any_of(kScaleFlags.begin(), kScaleFlags.end(), [&](std::string_view name) {
        return flags.training_flags_given.contains(std::string(name));
      });
  if (flags.loss_scale == "none") {
    options.loss_scale_off = true;
  } else if (!flags.loss_scale.empty() || scale_flags_given) {
    LossScaleOptions scaling;
    scaling.init = flags.scale_init;
    if (flags.loss_scale.starts_with("static:")) {
      scaling.mode = LossScaleOptions::Mode::kStatic;
      const std::string value = flags.loss_scale.substr(7);
      char* end = nullptr;
      scaling.init = std::strtof(value.c_str(), &end);
      if (value.empty() || *end != '\0') {
        return absl::InvalidArgumentError(
            str_cat("--loss-scale '", flags.loss_scale, "': expected static:S with a number S"));
      }
      // Checked here, so that the error names the flag given (the scale is --scale-init's).
      if (!(scaling.init > 0) || !std::isfinite(scaling.init)) {
        return absl::InvalidArgumentError(str_cat("--loss-scale '", flags.loss_scale,
                                                  "': the scale S must be a finite number > 0"));
      }
    } else if (!flags.loss_scale.empty() && flags.loss_scale != "dynamic") {
      return absl::InvalidArgumentError(
          str_cat("unknown --loss-scale '", flags.loss_scale, "' (dynamic, static:S or none)"));
    }
    scaling.growth_factor = flags.scale_growth;
    scaling.backoff_factor = flags.scale_backoff;
    scaling.growth_interval = flags.scale_growth_interval;
    scaling.min_scale = flags.scale_min;
    scaling.hysteresis = flags.scale_hysteresis;
    options.loss_scale = scaling;
  }
  AMPC_RETURN_IF_ERROR(validate_training_options(options));
  return options;
}

// The flags of a compile that succeeded which did nothing to the model: --bn-running-var without
// a BatchNorm that trains, --freeze matching no initializer. (A regex is checked by the compile.)
absl::Status check_model_flags_had_effect(const CompileFlags& flags, const Graph& graph) {
  const Graph* step = graph.training_step();
  if (step == nullptr) return absl::OkStatus();
  if (flags.training_flags_given.contains("--bn-running-var") &&
      !updates_running_statistics(*step)) {
    return absl::InvalidArgumentError(
        str_cat("--bn-running-var does nothing: ", flags.input,
                " has no BatchNormalization that trains (updates running statistics)"));
  }
  if (!flags.freeze.empty()) {
    const std::regex freeze(flags.freeze);
    const auto matches = [&](const Graph& g) {
      return std::any_of(g.initializers().begin(), g.initializers().end(),
                         [&](const Value* v) { return std::regex_search(v->name(), freeze); });
    };
    if (!matches(graph) && !matches(*step)) {
      return absl::InvalidArgumentError(str_cat("--freeze '", flags.freeze,
                                                "' matches no initializer of ", flags.input,
                                                ", so it freezes nothing"));
    }
  }
  return absl::OkStatus();
}

void add_training_flags(CLI::App& compile, CompileFlags& flags) {
  const std::string group(kTrainingGroup);
  compile.add_option("--optimizer", flags.optimizer, "Build a training step with this optimizer")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->group(group);
  compile
      .add_option("--loss", flags.loss,
                  "The loss: a scalar graph output's name (default: the output named loss, else "
                  "the model's only float scalar output), or cross-entropy / mse to append one "
                  "(with --label-input)")
      ->group(group);
  compile
      .add_option("--label-input", flags.label_input,
                  "The labels' graph input for an appended loss (created when the model has "
                  "none): class indices for cross-entropy, targets for mse")
      ->group(group);
  compile
      .add_option("--logits", flags.logits,
                  "The output an appended loss reads (default: the model's only output); "
                  "cross-entropy takes classes on axis 1")
      ->group(group);
  compile.add_option("--lr", flags.lr, "Default learning rate (ampc train --lr overrides)")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--momentum", flags.momentum, "SGD momentum")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--dampening", flags.dampening, "SGD dampening")
      ->capture_default_str()
      ->group(group);
  compile.add_flag("--nesterov", flags.nesterov, "SGD with Nesterov momentum")->group(group);
  compile.add_option("--beta1", flags.beta1, "Adam/AdamW beta1")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--beta2", flags.beta2, "Adam/AdamW beta2")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--eps", flags.eps, "Adam/AdamW epsilon")->capture_default_str()->group(group);
  compile
      .add_option("--weight-decay", flags.weight_decay,
                  "L2 penalty (SGD, Adam) or decoupled weight decay (AdamW)")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--clip-grad-norm", flags.clip_grad_norm,
                  "Clip gradients to this global norm (0: off)")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--accumulate", flags.accumulate,
                  "Accumulate gradients over K micro-batches (K calls of the step; ampc train "
                  "reads K batches per step) and update once with their mean")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--trainable", flags.trainable,
                  "Train only initializers whose name matches this regex (default: every float "
                  "initializer the loss depends on but what the file declares a buffer or a "
                  "frozen parameter and the constants an exporter lifted; docs/cli.md)")
      ->group(group);
  compile.add_option("--freeze", flags.freeze, "Do not train initializers matching this regex")
      ->group(group);
  compile
      .add_option("--loss-scale", flags.loss_scale,
                  "Loss scaling: dynamic (PyTorch's GradScaler), static:S, or none (default: "
                  "dynamic for --precision fp16, none otherwise)")
      ->group(group);
  compile.add_option("--scale-init", flags.scale_init, "The first dynamic loss scale")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--scale-growth", flags.scale_growth, "Growth factor of the dynamic scale")
      ->capture_default_str()
      ->group(group);
  compile.add_option("--scale-backoff", flags.scale_backoff, "Backoff factor on an overflow")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--scale-growth-interval", flags.scale_growth_interval,
                  "Clean steps before the scale grows")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--scale-min", flags.scale_min,
                  "The scale never backs off below this, and an overflow at it stops ampc train "
                  "(default: the smallest normal f32)")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--scale-hysteresis", flags.scale_hysteresis,
                  "Overflows in a row before the scale backs off (1: every one, as PyTorch)")
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--bn-running-var", flags.running_var,
                  "BatchNorm running variance from the unbiased batch variance (PyTorch) or the "
                  "biased one (ONNX)")
      ->check(CLI::IsMember({"unbiased", "biased"}))
      ->capture_default_str()
      ->group(group);
  compile
      .add_option("--recompute", flags.recompute,
                  "cheap: fused backward kernels recompute element-wise activations from values "
                  "they read anyway instead of keeping them (less memory, the same bits)")
      ->check(CLI::IsMember({"none", "cheap"}))
      ->capture_default_str()
      ->group(group);
}
}  // namespace ampc
